// Internal to engine/serve: what the endpoints share (the models, the decode threads, the batcher, the
// metrics, readiness), how a failure becomes an answer, and the endpoints themselves, one function each:
// routes.cpp lists them, endpoints_v1.cpp and endpoints_v2.cpp hold them, service.cpp calls them.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/report/run_log.h"
#include "engine/serve/batcher.h"
#include "engine/serve/http_message.h"
#include "engine/serve/http_server.h"
#include "engine/serve/inference_protocol.h"
#include "engine/serve/serve_metrics.h"
#include "engine/serve/served_models.h"
#include "engine/serve/task_pool.h"

namespace ranzcr {

using ServeJson = nlohmann::ordered_json;  // keys in the order written: labels in the model's order

/// An answer other than 200 that we chose: its status, the one-line message and the metrics' error kind.
struct Refusal : std::runtime_error {
  Refusal(int status, std::string kind, const std::string& message)
      : std::runtime_error(message), status(status), kind(std::move(kind)) {}
  int status;
  std::string kind;
};

/// A fault of the server, not of the request (a 500 whatever its type): kept apart from the readers'
/// refusals, which are std::runtime_error too.
struct InternalFault : std::logic_error {
  using std::logic_error::logic_error;
};

HttpResponse json_response(const ServeJson& body);
HttpResponse png_response(const std::vector<unsigned char>& png);
HttpResponse text_response(int status, const std::string& text, const std::string& type = "text/plain");

double seconds_since(ServeClock::time_point t);

/// One request being answered: the request, how to answer it, its times, and what its path named.
struct Call {
  std::shared_ptr<HttpRequest> req;
  Respond respond;
  ServeClock::time_point arrival, deadline;
  std::string label;           // the route's metrics label ("other": none)
  std::string model, version;  // the path's {model} and {version}, when its route has them
};

struct ServiceState {
  ServiceState(const ServeOptions& options, ServeMetrics& metrics, RunLog& log)
      : options(options), metrics(metrics), log(log), decode(options.decode_threads) {}

  const ServeOptions& options;
  ServeMetrics& metrics;
  RunLog& log;
  TaskPool decode;
  std::unique_ptr<ServedModels> models;
  std::unique_ptr<Batcher> batcher;
  std::atomic<bool> ready{false};
  std::atomic<long long> request_ids{0};

  /// Runs `f`; its failures become the error answer: ours (Refusal, ProtocolError) as they are, anything
  /// else a 500 whose cause goes to the log under a request id (the client sees the id, not the cause).
  template <typename F>
  void guarded(const std::string& endpoint, const Respond& respond, F&& f) {
    try {
      f();
    } catch (const Refusal& e) {
      refused(e, respond);
    } catch (const ProtocolError& e) {
      metrics.error(e.status == 404 ? "not_found" : "bad_request");
      respond(error_response(e.status, e.what()));
    } catch (const std::exception& e) {
      internal_error(endpoint, e.what(), respond);
    }
  }
  void refused(const Refusal& e, const Respond& respond);
  void internal_error(const std::string& endpoint, const std::string& cause, const Respond& respond);

  /// Whether `req` carries the bearer token (always, when none is set).
  bool token_ok(const HttpRequest& req) const;
  void check_token(const HttpRequest& req) const;  // 401 without it
  void check_ready() const;                        // 503 while the models load
  /// 200, or 503 while the models load: the Open Inference Protocol's readiness answers.
  HttpResponse readiness() const;
  /// The path's model and version are this server's (404 otherwise).
  void check_model(const Call& call) const;

  /// One upload decoded and prepared for every model (on a decode thread).
  std::shared_ptr<const PreparedImage> prepare(const std::string& body, ServeClock::time_point deadline,
                                               const std::string& what = "the request");
  /// The batch's outcome, or its refusal (504 past the deadline) or failure.
  void check_outcome(const BatchOutcome& o) const;
  /// Queues `image`; `done` gets the outcome on the batching thread. 503 when the queue is full.
  void submit(std::shared_ptr<const PreparedImage> image, const Call& call, Batcher::Done done);
};

/// An endpoint: answers `call` through call.respond, now or later. Throws what guarded() turns into answers.
using Endpoint = void (*)(ServiceState&, const Call&);

// The server's own endpoints and /v1 (endpoints_v1.cpp).
void predict_v1(ServiceState& s, const Call& call);
void cam_v1(ServiceState& s, const Call& call);
void input_v1(ServiceState& s, const Call& call);
void health(ServiceState& s, const Call& call);
void readiness_probe(ServiceState& s, const Call& call);
void metrics_text(ServiceState& s, const Call& call);
void page(ServiceState& s, const Call& call);
// The Open Inference Protocol's /v2 (endpoints_v2.cpp, beside its codec inference_protocol.cpp).
void server_metadata_v2(ServiceState& s, const Call& call);
void live_v2(ServiceState& s, const Call& call);
void ready_v2(ServiceState& s, const Call& call);
void model_metadata_v2(ServiceState& s, const Call& call);
void model_ready_v2(ServiceState& s, const Call& call);
void infer_v2(ServiceState& s, const Call& call);

}  // namespace ranzcr
