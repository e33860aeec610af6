// serve's endpoints behind the HTTP server: the models (once loaded), the decode threads, the batcher and
// the metrics. The server (http_server.cpp) hands each request over whole and gets its answer through
// `Respond`, at once (probes, metadata, the page) or later from a decode or the batching thread (uploads).
// The endpoints are one table (routes.cpp: method, path, metrics label, access, upload); their code is in
// endpoints_v1.cpp (the server's own and /v1) and endpoints_v2.cpp (the Open Inference Protocol's /v2).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "engine/report/run_log.h"
#include "engine/serve/http_message.h"
#include "engine/serve/http_server.h"
#include "engine/serve/serve_metrics.h"

namespace ranzcr {

struct ServiceState;  // service_state.h

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
  /// The paths of /v1's predict and of the model `model` under the Open Inference Protocol (the log line
  /// that says where the server listens).
  static std::pair<std::string, std::string> api_paths(const std::string& model);

  /// Finishes what the decode and batching threads hold, then stops them.
  void stop();

 private:
  std::unique_ptr<ServiceState> state_;
};

}  // namespace ranzcr
