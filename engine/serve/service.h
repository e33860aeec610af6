// serve's endpoints behind the HTTP server: the models (once loaded), the decode threads, the batcher and
// the metrics. The server (http_server.cpp) hands each request over whole and gets its answer through
// `Respond`, at once (probes, metadata, the page) or later from a decode or the batching thread (uploads).
//   /v1/predict, /v1/cam, /v1/input, /healthz, /readyz, /metrics, /      (http_server.h)
//   GET  /v2                                      server metadata (name, version, extensions)
//   GET  /v2/health/live, /v2/health/ready        liveness, readiness (200 / 503 while loading)
//   GET  /v2/models/{name}[/versions/1]           model metadata: the input, the outputs, the labels
//   GET  /v2/models/{name}[/versions/1]/ready     the model's readiness
//   POST /v2/models/{name}[/versions/1]/infer     images (BYTES) -> probabilities [N, labels] (+ decisions)
#pragma once

#include <memory>
#include <string>

#include "engine/report/run_log.h"
#include "engine/serve/http_message.h"
#include "engine/serve/http_server.h"
#include "engine/serve/serve_metrics.h"

namespace ranzcr {

class Service {
 public:
  Service(const ServeOptions& options, ServeMetrics& metrics, RunLog& log);
  ~Service();  // stop()
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  /// The models, warmed up on the batching thread (its CUDA handles; the batch sizes of
  /// ServedModels::warm_up: on CUDA every padded size up to the largest batch, on a CPU a batch of one and a
  /// full batch); then the readiness probes say ready.
  void set_models(std::unique_ptr<ServedModels> models);
  bool ready() const;

  /// A request's header has arrived: what the request holds while its body is read (an upload keeps an open
  /// batch waiting for it, Batcher::Incoming); nullptr for other requests.
  std::shared_ptr<void> on_header(const HttpRequest& request);

  /// Answers `request` through `respond`, once, now or later from another thread. Never throws: every
  /// failure is an error answer (a 500 is logged with its request id).
  void handle(HttpRequest request, const Respond& respond);

  /// The metrics' endpoint label of a path: the endpoint, or "other" (a client must not grow the series).
  static std::string endpoint_label(const std::string& path);

  /// Finishes what the decode and batching threads hold, then stops them.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ranzcr
