#include "engine/serve/service.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/check.h"
#include "core/printable.h"
#include "data/dicom_sandbox.h"
#include "data/image_pipeline.h"
#include "engine/infer/grad_cam.h"
#include "engine/serve/inference_protocol.h"

namespace ranzcr {
namespace {

using json = nlohmann::ordered_json;  // keys in the order written: labels in the model's order

double seconds_since(ServeClock::time_point t) {
  return std::chrono::duration<double>(ServeClock::now() - t).count();
}

// A fault of the server, not of the request (a 500 whatever its type): kept apart from the readers' refusals,
// which are std::runtime_error too.
struct InternalFault : std::logic_error {
  using std::logic_error::logic_error;
};

// An answer other than 200 that we chose: its status, the one-line message and the metrics' error kind.
struct Refusal : std::runtime_error {
  Refusal(int status, std::string kind, const std::string& message)
      : std::runtime_error(message), status(status), kind(std::move(kind)) {}
  int status;
  std::string kind;
};

HttpResponse json_response(const json& body) {
  HttpResponse r;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return r;
}

HttpResponse png_response(const std::vector<unsigned char>& png) {
  HttpResponse r;
  r.content_type = "image/png";
  r.body.assign(png.begin(), png.end());
  return r;
}

HttpResponse text_response(int status, const std::string& text, const std::string& type = "text/plain") {
  HttpResponse r;
  r.status = status;
  r.content_type = type;
  r.body = text;
  return r;
}

// A few threads that run posted tasks in order (the uploads' decoding); stop() runs what is left first.
class TaskPool {
 public:
  explicit TaskPool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~TaskPool() { stop(); }
  void post(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push_back(std::move(task));
    wake_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      try {
        task();        // tasks answer their own failures (Service::guarded)
      } catch (...) {  // a failure while answering one (out of memory): the thread goes on
      }
      lock.lock();
    }
  }
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The path of an Open Inference Protocol model endpoint: /v2/models/{name}[/versions/{v}][/{action}].
struct ModelPath {
  std::string name, version, action;  // action: "", "ready" or "infer"
};

bool parse_model_path(const std::string& path, ModelPath& out) {
  const std::string prefix = "/v2/models/";
  if (path.compare(0, prefix.size(), prefix) != 0) return false;
  std::vector<std::string> parts;
  for (size_t at = prefix.size(); at <= path.size();) {
    size_t end = path.find('/', at);
    if (end == std::string::npos) end = path.size();
    parts.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  if (parts.empty() || parts[0].empty()) return false;
  out.name = parts[0];
  size_t next = 1;
  if (parts.size() >= 3 && parts[1] == "versions") {
    out.version = parts[2];
    next = 3;
  }
  if (parts.size() == next) return true;
  if (parts.size() == next + 1 && (parts[next] == "ready" || parts[next] == "infer")) {
    out.action = parts[next];
    return true;
  }
  return false;
}

}  // namespace

struct Service::Impl {
  Impl(const ServeOptions& options, ServeMetrics& metrics, RunLog& log)
      : options(options), metrics(metrics), log(log), decode(options.decode_threads) {}

  const ServeOptions& options;
  ServeMetrics& metrics;
  RunLog& log;
  TaskPool decode;
  std::unique_ptr<ServedModels> models;
  std::unique_ptr<Batcher> batcher;
  std::atomic<bool> ready{false};
  std::atomic<long long> request_ids{0};

  struct Times {
    ServeClock::time_point arrival, deadline;
  };

  // Runs `f`; its failures become the error answer: ours (Refusal) as they are, anything else a 500 whose
  // cause goes to the log under a request id (the client sees the id, not the cause).
  template <typename F>
  void guarded(const std::string& endpoint, const Respond& respond, F&& f) {
    try {
      f();
    } catch (const Refusal& e) {
      if (e.kind != "deadline") metrics.error(e.kind);  // deadlines: counted where the 504 is written
      HttpResponse r = error_response(e.status, e.what());
      if (e.status == 503) r.headers.emplace_back("Retry-After", "1");
      if (e.kind == "queue_full") metrics.limit("queue_full");
      if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
      respond(std::move(r));
    } catch (const ProtocolError& e) {
      metrics.error(e.status == 404 ? "not_found" : "bad_request");
      respond(error_response(e.status, e.what()));
    } catch (const std::exception& e) {
      internal_error(endpoint, e.what(), respond);
    }
  }

  void internal_error(const std::string& endpoint, const std::string& cause, const Respond& respond) {
    const std::string id = std::to_string(++request_ids);
    metrics.error("internal");
    log.warn("serve: request " + id + " (" + endpoint + ") failed: " + printable(cause, 2000));
    respond(error_response(500, "internal error (request id " + id + " in the server's log)"));
  }

  void check_token(const HttpRequest& req) const {
    if (!options.token.empty() &&
        !constant_time_equal(req.header("Authorization"), "Bearer " + options.token))
      throw Refusal(401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer TOKEN)");
  }
  void check_ready() const {
    if (!ready) throw Refusal(503, "not_ready", "the models are still loading; retry shortly");
  }

  // One upload decoded and prepared for every model (on a decode thread).
  std::shared_ptr<const PreparedImage> prepare(const std::string& body, ServeClock::time_point deadline,
                                               const std::string& what = "the request") {
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

  static void check_outcome(const BatchOutcome& o) {
    if (o.status == BatchOutcome::Status::kExpired)
      throw Refusal(504, "deadline", "timed out in the queue (--timeout-ms)");
    if (o.status == BatchOutcome::Status::kFailed) RANZCR_FAIL("the model failed: ", o.error);
  }

  // Queues `image`; `done` gets the outcome on the batching thread. 503 when the queue is full.
  void submit(std::shared_ptr<const PreparedImage> image, const Times& t, Batcher::Done done) {
    if (!batcher->submit(std::move(image), t.deadline, std::move(done)))
      throw Refusal(503, "queue_full",
                    "the queue is full (" + std::to_string(options.batcher.max_queue) +
                        " requests waiting); retry shortly");
  }

  json answer_v1(const PreparedImage& image, const torch::Tensor& probs) const;
  void predict_v1(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t);
  void cam_v1(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t);
  void input_v1(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t);
  void route(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t);
  bool route_v2(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t);
  json model_metadata() const;
  std::vector<OutputTensor> output_tensors(const std::vector<torch::Tensor>& probs) const;
  void infer_v2(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t);
};

// ---- /v1 ------------------------------------------------------------------------------------------------

// The JSON of one image's probabilities: per label, with the operating point's decisions when set.
json Service::Impl::answer_v1(const PreparedImage& image, const torch::Tensor& probs) const {
  const std::vector<std::string>& names = models->label_names();
  const double* p = probs.data_ptr<double>();
  json out = {{"labels", names}, {"probabilities", json::object()}};
  for (size_t k = 0; k < names.size(); ++k) out["probabilities"][names[k]] = p[k];
  if (!options.thresholds.empty()) {
    out["operating_point"] = options.operating_point;
    out["thresholds"] = out["decisions"] = json::object();
    for (size_t k = 0; k < names.size(); ++k) {
      const double th = options.thresholds[k];
      out["thresholds"][names[k]] = std::isnan(th) ? json(nullptr) : json(th);
      out["decisions"][names[k]] = std::isnan(th) ? json(nullptr) : json(p[k] >= th ? 1 : 0);
    }
  }
  out["models"] = json::array();
  for (size_t m = 0; m < models->infos().size(); ++m) {
    const TrainedModelInfo& info = models->infos()[m];
    out["models"].push_back(
        {{"path", models->paths()[m]}, {"name", info.model.name}, {"epoch", info.epoch}, {"ema", info.ema}});
  }
  out["image"] = {{"format", image.format}, {"width", image.width}, {"height", image.height}};
  return out;
}

void Service::Impl::predict_v1(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t) {
  decode.post([this, req, respond, t] {
    guarded("/v1/predict", respond, [&] {
      std::shared_ptr<const PreparedImage> image = prepare(req->body, t.deadline);
      const double decode_seconds = seconds_since(t.arrival);
      submit(image, t, [this, image, respond, t, decode_seconds](BatchOutcome o) {
        guarded("/v1/predict", respond, [&] {
          check_outcome(o);
          json out = answer_v1(*image, o.probs);
          out["batch_size"] = o.batch_size;
          out["seconds"] = {{"decode", decode_seconds},
                            {"queue", o.queue_seconds},
                            {"model", o.model_seconds},
                            {"total", seconds_since(t.arrival)}};
          respond(json_response(out));
        });
      });
      req->hold.reset();  // submitted: an open batch need not wait for it any longer
    });
    req->hold.reset();
  });
}

void Service::Impl::cam_v1(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t) {
  std::vector<std::string> labels = req->params("labels");
  if (labels.empty()) labels = {"top1"};
  try {
    cam_label_indices(CamOptions{"", labels}, models->label_names());
  } catch (const std::exception& e) {
    throw Refusal(400, "bad_labels", e.what());  // an unknown label name
  }
  decode.post([this, req, respond, t, labels] {
    guarded("/v1/cam", respond, [&] {
      std::shared_ptr<const PreparedImage> image = prepare(req->body, t.deadline);
      ServedModels* m = models.get();
      const bool queued = batcher->run_exclusive([this, m, image, labels, respond, t] {
        if (ServeClock::now() >= t.deadline) return;  // its 504 has been sent
        guarded("/v1/cam", respond, [&] { respond(png_response(m->cam_png(*image, labels))); });
      });
      if (!queued) throw Refusal(503, "queue_full", "the queue is full; retry shortly");
    });
  });
}

void Service::Impl::input_v1(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t) {
  decode.post([this, req, respond, t] {
    guarded("/v1/input", respond,
            [&] { respond(png_response(models->input_png(*prepare(req->body, t.deadline)))); });
  });
}

// ---- /v2: the Open Inference Protocol --------------------------------------------------------------------

json Service::Impl::model_metadata() const {
  const int64_t labels = static_cast<int64_t>(models->label_names().size());
  json outputs = json::array({{{"name", "probabilities"}, {"datatype", "FP64"}, {"shape", {-1, labels}}}});
  if (!options.thresholds.empty())
    outputs.push_back({{"name", "decisions"}, {"datatype", "INT32"}, {"shape", {-1, labels}}});
  json members = json::array();
  for (size_t m = 0; m < models->infos().size(); ++m)
    members.push_back({{"name", models->infos()[m].model.name}, {"epoch", models->infos()[m].epoch}});
  return {{"name", options.model_name},
          {"versions", {"1"}},
          {"platform", "ranzcr_libtorch"},
          {"inputs", json::array({{{"name", "image"}, {"datatype", "BYTES"}, {"shape", {-1}}}})},
          {"outputs", outputs},
          {"labels", models->label_names()},
          {"operating_point", options.thresholds.empty() ? json(nullptr) : json(options.operating_point)},
          {"members", members}};
}

std::vector<OutputTensor> Service::Impl::output_tensors(const std::vector<torch::Tensor>& probs) const {
  const int64_t n = static_cast<int64_t>(probs.size()),
                c = static_cast<int64_t>(models->label_names().size());
  OutputTensor p{"probabilities", "FP64", n, c, {}, {}}, d{"decisions", "INT32", n, c, {}, {}};
  for (const torch::Tensor& row : probs) {
    const double* v = row.data_ptr<double>();
    for (int64_t k = 0; k < c; ++k) {
      p.fp64.push_back(v[k]);
      if (options.thresholds.empty()) continue;
      const double th = options.thresholds[static_cast<size_t>(k)];
      d.int32.push_back(std::isnan(th) ? -1 : (v[k] >= th ? 1 : 0));
    }
  }
  std::vector<OutputTensor> out{std::move(p)};
  if (!options.thresholds.empty()) out.push_back(std::move(d));
  return out;
}

// The images of one infer request, each decoded, then each queued; the answer goes once all are in (or at the
// first failure).
void Service::Impl::infer_v2(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t) {
  std::vector<std::string> outputs{"probabilities"};
  if (!options.thresholds.empty()) outputs.push_back("decisions");
  if (!req->header("Content-Encoding").empty() && req->header("Content-Encoding") != "identity")
    throw ProtocolError(415, "Content-Encoding " + req->header("Content-Encoding") +
                                 " is not supported: send the body as is");
  decode.post([this, req, outputs, respond, t] {  // parsed here, not on an I/O thread: a body may be 64 MiB
    guarded("/v2/infer", respond, [&] {
      auto request = std::make_shared<InferRequest>(
          parse_infer_request(req->body, req->header("Inference-Header-Content-Length"), outputs));
      std::string().swap(req->body);
      std::vector<std::shared_ptr<const PreparedImage>> images;
      for (size_t i = 0; i < request->images.size(); ++i)
        images.push_back(
            prepare(request->images[i], t.deadline, "input 'image' element " + std::to_string(i)));
      struct Join {
        std::mutex mutex;
        std::vector<torch::Tensor> probs;
        size_t left = 0;
        bool answered = false;
      };
      auto join = std::make_shared<Join>();
      join->probs.resize(images.size());
      join->left = images.size();
      for (size_t i = 0; i < images.size(); ++i) {
        auto done = [this, join, i, request, respond](BatchOutcome o) {
          std::lock_guard<std::mutex> lock(join->mutex);
          if (join->answered) return;
          guarded("/v2/infer", respond, [&] {
            if (o.status != BatchOutcome::Status::kDone) join->answered = true;
            check_outcome(o);
            join->probs[i] = o.probs;
            if (--join->left > 0) return;
            join->answered = true;
            const InferAnswer a =
                write_infer_answer(options.model_name, "1", *request, output_tensors(join->probs));
            HttpResponse r;
            r.body = a.body;
            if (a.header_length >= 0) {
              r.content_type = "application/octet-stream";
              r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(a.header_length));
            }
            respond(std::move(r));
          });
        };
        std::unique_lock<std::mutex> lock(join->mutex);
        if (join->answered) break;
        lock.unlock();
        try {
          submit(images[i], t, done);
        } catch (...) {
          lock.lock();
          if (join->answered) break;  // an earlier image failed and answered
          join->answered = true;
          throw;
        }
      }
    });
    req->hold.reset();
  });
}

bool Service::Impl::route_v2(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t) {
  const std::string& path = req->path;
  const bool get = req->method == "GET" || req->method == "HEAD";
  if (get && path == "/v2/health/live") return respond(text_response(200, "", "text/plain")), true;
  if (get && path == "/v2/health/ready")
    return respond(ready ? text_response(200, "", "text/plain")
                         : error_response(503, "the models are still loading")),
           true;
  if (get && path == "/v2") {
    json meta = {
        {"name", "ranzcr"}, {"version", options.server_version}, {"extensions", {"binary_tensor_data"}}};
    return respond(json_response(meta)), true;
  }
  ModelPath m;
  if (!parse_model_path(path, m)) return false;
  if (m.name != options.model_name)
    throw ProtocolError(404,
                        "unknown model '" + m.name + "': this server serves '" + options.model_name + "'");
  if (!m.version.empty() && m.version != "1")
    throw ProtocolError(404, "model '" + m.name + "' has no version '" + m.version + "' (it has version 1)");
  if (m.action == "infer") {
    if (req->method != "POST") throw Refusal(405, "bad_method", "infer takes POST");
    check_token(*req);
    check_ready();
    infer_v2(std::move(req), respond, t);
    return true;
  }
  if (!get) throw Refusal(405, "bad_method", path + " takes GET");
  if (m.action == "ready")
    return respond(ready ? text_response(200, "", "text/plain")
                         : error_response(503, "the models are still loading")),
           true;
  check_token(*req);
  check_ready();
  respond(json_response(model_metadata()));
  return true;
}

void Service::Impl::route(std::shared_ptr<HttpRequest> req, const Respond& respond, Times t) {
  const std::string& path = req->path;
  const bool get = req->method == "GET" || req->method == "HEAD";
  if (path == "/v1/predict" || path == "/v1/cam" || path == "/v1/input") {
    if (req->method != "POST") throw Refusal(405, "bad_method", path + " takes POST (one image file)");
    check_token(*req);
    check_ready();
    if (path == "/v1/predict") return predict_v1(std::move(req), respond, t);
    if (path == "/v1/cam") return cam_v1(std::move(req), respond, t);
    return input_v1(std::move(req), respond, t);
  }
  if (get && path == "/healthz") return respond(text_response(200, "ok\n"));
  if (get && path == "/readyz")
    return respond(text_response(ready ? 200 : 503, ready ? "ready\n" : "loading\n"));
  if (get && path == "/metrics") {
    check_token(*req);
    return respond(
        text_response(200, metrics.text(ready ? batcher->queue_length() : 0), "text/plain; version=0.0.4"));
  }
  if (get && path == "/") return respond(text_response(200, serve_page(), "text/html; charset=utf-8"));
  if (path.compare(0, 3, "/v2") == 0 && route_v2(req, respond, t)) return;
  throw Refusal(404, "not_found", "no such endpoint: " + req->method + " " + path);
}

// ---- Service ---------------------------------------------------------------------------------------------

Service::Service(const ServeOptions& options, ServeMetrics& metrics, RunLog& log)
    : impl_(std::make_unique<Impl>(options, metrics, log)) {}

Service::~Service() {
  stop();
}

void Service::set_models(std::unique_ptr<ServedModels> models) {
  Impl& s = *impl_;
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
  return impl_->ready;
}

std::shared_ptr<void> Service::on_header(const HttpRequest& request) {
  if (!impl_->ready || request.method != "POST") return nullptr;
  ModelPath m;
  if (request.path != "/v1/predict" && !(parse_model_path(request.path, m) && m.action == "infer"))
    return nullptr;
  const std::string& token = impl_->options.token;
  if (!token.empty() && !constant_time_equal(request.header("Authorization"), "Bearer " + token))
    return nullptr;  // will be refused: no batch waits for it
  return std::make_shared<Batcher::Incoming>(*impl_->batcher);
}

void Service::handle(HttpRequest request, const Respond& respond) {
  const Impl::Times t{request.arrival, request.arrival + impl_->options.timeout};
  auto req = std::make_shared<HttpRequest>(std::move(request));
  const std::string endpoint = endpoint_label(req->path);
  impl_->guarded(endpoint, respond, [&] { impl_->route(req, respond, t); });
}

std::string Service::endpoint_label(const std::string& path) {
  for (const char* e : {"/v1/predict", "/v1/cam", "/v1/input", "/metrics", "/healthz", "/readyz", "/"})
    if (path == e) return path;
  ModelPath m;
  if (parse_model_path(path, m)) return m.action == "infer" ? "/v2/infer" : "/v2/models";
  if (path == "/v2" || path == "/v2/health/live" || path == "/v2/health/ready") return path;
  return "other";
}

void Service::stop() {
  impl_->decode.stop();
  if (impl_->batcher) impl_->batcher->stop();
}

}  // namespace ranzcr
