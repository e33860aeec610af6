// engine/serve/service.h: a request routed by the table of routes.h to its endpoint, under guarded(); what
// the endpoints share (service_state.h).
#include "engine/serve/service.h"

#include <torch/torch.h>

#include <future>

#include "core/check.h"
#include "core/printable.h"
#include "data/dicom_sandbox.h"
#include "data/image_pipeline.h"
#include "engine/serve/routes.h"

namespace ranzcr {

HttpResponse json_response(const ServeJson& body) {
  HttpResponse r;
  r.body = body.dump(-1, ' ', false, ServeJson::error_handler_t::replace) + "\n";
  return r;
}

HttpResponse png_response(const std::vector<unsigned char>& png) {
  HttpResponse r;
  r.content_type = "image/png";
  r.body.assign(png.begin(), png.end());
  return r;
}

HttpResponse text_response(int status, const std::string& text, const std::string& type) {
  HttpResponse r;
  r.status = status;
  r.content_type = type;
  r.body = text;
  return r;
}

double seconds_since(ServeClock::time_point t) {
  return std::chrono::duration<double>(ServeClock::now() - t).count();
}

// ---- ServiceState
// ------------------------------------------------------------------------------------------

void ServiceState::refused(const Refusal& e, const Respond& respond) {
  if (e.kind != "deadline") metrics.error(e.kind);  // deadlines: counted where the 504 is written
  HttpResponse r = error_response(e.status, e.what());
  if (e.status == 503) r.headers.emplace_back("Retry-After", "1");
  if (e.kind == "queue_full") metrics.limit("queue_full");
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  respond(std::move(r));
}

void ServiceState::internal_error(const std::string& endpoint, const std::string& cause,
                                  const Respond& respond) {
  const std::string id = std::to_string(++request_ids);
  metrics.error("internal");
  log.warn("serve: request " + id + " (" + endpoint + ") failed: " + printable(cause, 2000));
  respond(error_response(500, "internal error (request id " + id + " in the server's log)"));
}

bool ServiceState::token_ok(const HttpRequest& req) const {
  return options.token.empty() || constant_time_equal(req.header("Authorization"), "Bearer " + options.token);
}

void ServiceState::check_token(const HttpRequest& req) const {
  if (!token_ok(req))
    throw Refusal(401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer TOKEN)");
}

void ServiceState::check_ready() const {
  if (!ready) throw Refusal(503, "not_ready", "the models are still loading; retry shortly");
}

HttpResponse ServiceState::readiness() const {
  return ready ? text_response(200, "", "text/plain") : error_response(503, "the models are still loading");
}

void ServiceState::check_model(const Call& call) const {
  if (call.model != options.model_name)
    throw ProtocolError(
        404, "unknown model '" + call.model + "': this server serves '" + options.model_name + "'");
  if (!call.version.empty() && call.version != "1")
    throw ProtocolError(
        404, "model '" + call.model + "' has no version '" + call.version + "' (it has version 1)");
}

std::shared_ptr<const PreparedImage> ServiceState::prepare(const std::string& body,
                                                           ServeClock::time_point deadline,
                                                           const std::string& what) {
  if (body.empty()) throw Refusal(400, "empty_body", what + " has no body: POST one image file");
  if (ServeClock::now() >= deadline) throw Refusal(504, "deadline", "timed out waiting to decode");
  const std::vector<unsigned char> bytes(body.begin(), body.end());
  try {
    auto image = std::make_shared<PreparedImage>(models->prepare(bytes));
    metrics.decoded(image->format);
    return image;
  } catch (const DicomSandboxUnavailable& e) {
    throw InternalFault(std::string("the DICOM helper is unavailable: ") + e.what());
  } catch (const std::runtime_error& e) {  // the readers' one-line refusals (RANZCR_CHECK)
    const std::string format = image_format(bytes);
    throw Refusal(400, format.empty() ? "not_an_image" : "bad_" + format,
                  (what == "the request" ? "" : what + ": ") + e.what());
  }  // anything else (out of memory, LibTorch's or OpenCV's own errors) is an internal fault: a 500
}

void ServiceState::check_outcome(const BatchOutcome& o) const {
  if (o.status == BatchOutcome::Status::kExpired)
    throw Refusal(504, "deadline", "timed out in the queue (" + options.limit_names.timeout + ")");
  if (o.status == BatchOutcome::Status::kFailed) RANZCR_FAIL("the model failed: ", o.error);
}

void ServiceState::submit(std::shared_ptr<const PreparedImage> image, const Call& call, Batcher::Done done) {
  if (!batcher->submit(std::move(image), call.deadline, std::move(done)))
    throw Refusal(503, "queue_full",
                  "the queue is full (" + std::to_string(options.batcher.max_queue) +
                      " requests waiting); retry shortly");
}

// ---- Service
// -----------------------------------------------------------------------------------------------

namespace {

// The route's checks in order (its model, the method, the token, readiness), then its endpoint.
void dispatch(ServiceState& s, const Route* route, const Call& call) {
  const HttpRequest& req = *call.req;
  if (!route) throw Refusal(404, "not_found", "no such endpoint: " + req.method + " " + req.path);
  if (!call.model.empty()) s.check_model(call);
  if (!takes_method(*route, req.method))
    throw Refusal(
        405, "bad_method",
        req.path + " takes " + route->method + (*route->takes ? std::string(" (") + route->takes + ")" : ""));
  if (route->access != Access::kAnyone) s.check_token(req);
  if (route->access == Access::kTokenReady) s.check_ready();
  route->endpoint(s, call);
}

}  // namespace

Service::Service(const ServeOptions& options, ServeMetrics& metrics, RunLog& log)
    : state_(std::make_unique<ServiceState>(options, metrics, log)) {}

Service::~Service() {
  stop();
}

void Service::set_models(std::unique_ptr<ServedModels> models) {
  ServiceState& s = *state_;
  s.models = std::move(models);
  s.batcher = std::make_unique<Batcher>(
      s.options.batcher,
      [&s](const std::vector<const PreparedImage*>& images) { return s.models->predict(images); },
      [&s](int n) { s.metrics.batch(n); });
  std::promise<void> warmed;
  ServedModels* m = s.models.get();
  const int full = s.options.batcher.max_batch;
  s.batcher->run_exclusive([m, full, &warmed] {
    try {
      m->warm_up(full);  // on CUDA every batch size up to it runs a tuned plan (served_models.h)
      warmed.set_value();
    } catch (...) {
      warmed.set_exception(std::current_exception());
    }
  });
  warmed.get_future().get();
  s.ready = true;
}

bool Service::ready() const {
  return state_->ready;
}

std::shared_ptr<void> Service::on_header(const HttpRequest& request) {
  const Route* route = match_route(request.path);
  if (!state_->ready || !route || !route->holds_upload || request.method != route->method) return nullptr;
  if (!state_->token_ok(request)) return nullptr;  // will be refused: no batch waits for it
  return std::make_shared<Batcher::Incoming>(*state_->batcher);
}

void Service::handle(HttpRequest request, const Respond& respond) {
  Call call;
  call.req = std::make_shared<HttpRequest>(std::move(request));
  call.respond = respond;
  call.arrival = call.req->arrival;
  call.deadline = call.arrival + state_->options.timeout;
  const Route* route = match_route(call.req->path, &call);
  call.label = route ? route_label(*route) : "other";
  state_->guarded(call.label, respond, [&] { dispatch(*state_, route, call); });
}

std::string Service::endpoint_label(const std::string& path) {
  const Route* route = match_route(path);
  return route ? route_label(*route) : "other";
}

std::pair<std::string, std::string> Service::api_paths(const std::string& model) {
  return {route_path(predict_v1), route_path(model_metadata_v2, model)};
}

void Service::stop() {
  state_->decode.stop();
  if (state_->batcher) state_->batcher->stop();
}

}  // namespace ranzcr
