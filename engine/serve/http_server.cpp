#include "engine/serve/http_server.h"

#include <httplib.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <opencv2/core/utility.hpp>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <sys/socket.h>

#include "core/check.h"
#include "data/dicom_sandbox.h"
#include "engine/infer/grad_cam.h"
#include "engine/serve/serve_metrics.h"

namespace ranzcr {
namespace {

using json = nlohmann::ordered_json;  // keys in the order written: labels in the model's order

double seconds_since(ServeClock::time_point t) {
  return std::chrono::duration<double>(ServeClock::now() - t).count();
}

// At most `n` holders at once (uploads decoded in parallel on the decode threads).
class Slots {
 public:
  explicit Slots(int n) : free_(n) {}
  bool acquire_until(ServeClock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_until(lock, deadline, [&] { return free_ > 0; })) return false;
    --free_;
    return true;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++free_;
    cv_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int free_;
};

// An answer other than 200: its status, the one-line message and the metrics' error kind.
struct HttpError : std::runtime_error {
  HttpError(int status, std::string kind, const std::string& message)
      : std::runtime_error(message), status(status), kind(std::move(kind)) {}
  int status;
  std::string kind;
};

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump() + "\n", "application/json");
}

void reply_png(httplib::Response& res, const std::vector<unsigned char>& png) {
  res.status = 200;
  res.set_content(std::string(png.begin(), png.end()), "image/png");
}

// The body of an upload, read through httplib's content reader: whatever its Content-Type says (curl's
// --data-binary claims a form, which httplib's own reading caps at 8 KiB), up to --max-body-mb (httplib
// answers 413 from Content-Length before reading; chunked bodies stop at the limit).
std::string read_body(const httplib::ContentReader& reader, const httplib::Response& res, size_t max_bytes) {
  std::string body;
  bool too_large = false;
  const bool read = reader([&](const char* data, size_t size) {
    too_large = body.size() + size > max_bytes;
    if (!too_large) body.append(data, size);
    return !too_large;
  });
  if (too_large || res.status == 413)
    throw HttpError(413, "too_large",
                    "the body is larger than --max-body-mb (" + std::to_string(max_bytes >> 20) + " MiB)");
  if (!read)
    throw HttpError(400, "bad_body",
                    "the body could not be read: cut off, silent for --read-timeout-s, or malformed");
  return body;
}

// Reads a body to its end (at most `max_bytes`) without keeping it: before a refusal, so that the
// connection's next request is read from its start.
void skip_body(const httplib::ContentReader& reader, size_t max_bytes) {
  size_t seen = 0;
  reader([&](const char*, size_t size) { return (seen += size) <= max_bytes; });
}

// The service behind the endpoints: the models (once loaded), the batcher, the metrics.
class Service {
 public:
  Service(const ServeOptions& options, RunLog& log)
      : options_(options), log_(log), decode_(options.decode_threads) {}

  // The models, warmed up on the batching thread (its CUDA handles, a batch of one and a full batch) before
  // /readyz says ready.
  void set_models(std::unique_ptr<ServedModels> models) {
    models_ = std::move(models);
    batcher_ = std::make_unique<Batcher>(
        options_.batcher,
        [this](const std::vector<const PreparedImage*>& images) { return models_->predict(images); },
        [this](int n) { metrics_.batch(n); });
    ServedModels* m = models_.get();
    const int full = options_.batcher.max_batch;
    batcher_->run_exclusive([m, full] { m->warm_up({1, full}); }).get();
    ready_ = true;
  }
  bool ready() const { return ready_; }
  void stop_batcher() {
    if (batcher_) batcher_->stop();
  }
  std::string metrics_text() const { return metrics_.text(ready_ ? batcher_->queue_length() : 0); }
  ServeMetrics& metrics() { return metrics_; }

  using ReadBody = std::function<std::string()>;
  using Body = std::function<void(const ReadBody&, ServeClock::time_point, ServeClock::time_point)>;

  // The upload endpoints' common frame: the bearer token and readiness (refused after reading the body
  // to its end, so that the connection's next request starts where it should), the timing, errors as
  // one-line JSON, the request metrics.
  void handle(const std::string& endpoint, const httplib::Request& req, httplib::Response& res,
              const httplib::ContentReader& reader, const Body& body) {
    const auto arrival = ServeClock::now();
    const ReadBody read = [&] { return read_body(reader, res, options_.max_body_bytes); };
    try {
      if (!options_.token.empty() &&
          !constant_time_equal(req.get_header_value("Authorization"), "Bearer " + options_.token)) {
        skip_body(reader, options_.max_body_bytes);
        throw HttpError(401, "unauthorized", "missing or wrong bearer token (Authorization: Bearer TOKEN)");
      }
      if (!ready_) {
        skip_body(reader, options_.max_body_bytes);
        throw HttpError(503, "not_ready", "the models are still loading; retry shortly");
      }
      body(read, arrival, arrival + options_.timeout);
    } catch (const HttpError& e) {
      metrics_.error(e.kind);
      if (e.status == 503) res.set_header("Retry-After", "1");
      if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
      if (e.status == 413 || e.kind == "bad_body")
        res.set_header("Connection", "close");  // the rest is unread
      reply_json(res, e.status, json{{"error", e.what()}});
    } catch (const std::exception& e) {
      metrics_.error("internal");
      log_.warn(endpoint + ": " + e.what());
      reply_json(res, 500, json{{"error", e.what()}});
    }
    metrics_.request(endpoint, res.status, seconds_since(arrival));
  }

  // The upload decoded and prepared for every model, on one of the decode slots.
  std::shared_ptr<const PreparedImage> prepare(const std::string& body, ServeClock::time_point deadline) {
    if (body.empty()) throw HttpError(400, "empty_body", "the request has no body: POST one image file");
    if (!decode_.acquire_until(deadline)) throw HttpError(504, "deadline", "timed out waiting to decode");
    struct Release {
      Slots& s;
      ~Release() { s.release(); }
    } release{decode_};
    if (ServeClock::now() >= deadline) throw HttpError(504, "deadline", "timed out waiting to decode");
    const std::vector<unsigned char> bytes(body.begin(), body.end());
    try {
      auto image = std::make_shared<PreparedImage>(models_->prepare(bytes));
      metrics_.decoded(image->format);
      return image;
    } catch (const DicomSandboxUnavailable& e) {
      throw HttpError(500, "dicom_sandbox", e.what());
    } catch (const std::exception& e) {
      const std::string format = image_format(bytes);
      throw HttpError(400, format.empty() ? "not_an_image" : "bad_" + format, e.what());
    }
  }

  // `read_body` reads the upload: an open batch waits for it from here (up to --max-wait-ms) until it is
  // submitted.
  json predict(const ReadBody& read_body, ServeClock::time_point arrival, ServeClock::time_point deadline) {
    std::future<BatchOutcome> done;
    std::shared_ptr<const PreparedImage> image;
    double decode_seconds = 0;
    {
      Batcher::Incoming incoming(*batcher_);
      image = prepare(read_body(), deadline);
      decode_seconds = seconds_since(arrival);
      done = batcher_->submit(image, deadline);
    }
    if (!done.valid())
      throw HttpError(503, "queue_full",
                      "the queue is full (" + std::to_string(options_.batcher.max_queue) +
                          " requests waiting); retry shortly");
    if (done.wait_until(deadline) != std::future_status::ready)
      throw HttpError(504, "deadline", "timed out: no answer within --timeout-ms");
    const BatchOutcome o = done.get();
    if (o.status == BatchOutcome::Status::kExpired)
      throw HttpError(504, "deadline", "timed out in the queue (--timeout-ms)");
    if (o.status == BatchOutcome::Status::kFailed) RANZCR_FAIL("the model failed: ", o.error);
    json out = answer(*image, o.probs);
    out["batch_size"] = o.batch_size;
    out["seconds"] = {{"decode", decode_seconds},
                      {"queue", o.queue_seconds},
                      {"model", o.model_seconds},
                      {"total", seconds_since(arrival)}};
    return out;
  }

  std::vector<unsigned char> cam(const std::string& body, const std::vector<std::string>& labels,
                                 ServeClock::time_point deadline) {
    try {
      cam_label_indices(CamOptions{"", labels}, models_->label_names());
    } catch (const std::exception& e) {
      throw HttpError(400, "bad_labels", e.what());  // an unknown label name
    }
    const std::shared_ptr<const PreparedImage> image = prepare(body, deadline);
    auto png = std::make_shared<std::vector<unsigned char>>();
    ServedModels* models = models_.get();
    std::future<void> done = batcher_->run_exclusive([models, image, labels, png, deadline] {
      if (ServeClock::now() < deadline) *png = models->cam_png(*image, labels);  // else its 504 is sent
    });
    if (!done.valid()) throw HttpError(503, "queue_full", "the queue is full; retry shortly");
    if (done.wait_until(deadline) != std::future_status::ready)
      throw HttpError(504, "deadline", "timed out: no answer within --timeout-ms");
    done.get();  // a failure of the model: 500
    return *png;
  }

  std::vector<unsigned char> input(const std::string& body, ServeClock::time_point deadline) {
    return models_->input_png(*prepare(body, deadline));
  }

 private:
  // The JSON of one image's probabilities: per label, with the operating point's decisions when set.
  json answer(const PreparedImage& image, const torch::Tensor& probs) const {
    const std::vector<std::string>& names = models_->label_names();
    const double* p = probs.data_ptr<double>();
    json out = {{"labels", names}, {"probabilities", json::object()}};
    for (size_t k = 0; k < names.size(); ++k) out["probabilities"][names[k]] = p[k];
    if (!options_.thresholds.empty()) {
      out["operating_point"] = options_.operating_point;
      out["thresholds"] = out["decisions"] = json::object();
      for (size_t k = 0; k < names.size(); ++k) {
        const double t = options_.thresholds[k];
        out["thresholds"][names[k]] = std::isnan(t) ? json(nullptr) : json(t);
        out["decisions"][names[k]] = std::isnan(t) ? json(nullptr) : json(p[k] >= t ? 1 : 0);
      }
    }
    out["models"] = json::array();
    for (size_t m = 0; m < models_->infos().size(); ++m) {
      const TrainedModelInfo& info = models_->infos()[m];
      out["models"].push_back({{"path", models_->paths()[m]},
                               {"name", info.model.name},
                               {"epoch", info.epoch},
                               {"ema", info.ema}});
    }
    out["image"] = {{"format", image.format}, {"width", image.width}, {"height", image.height}};
    return out;
  }

  const ServeOptions& options_;
  RunLog& log_;
  Slots decode_;
  ServeMetrics metrics_;
  std::unique_ptr<ServedModels> models_;
  std::unique_ptr<Batcher> batcher_;
  std::atomic<bool> ready_{false};
};

// The label choice of /v1/cam: every `labels` parameter (top1 when none).
std::vector<std::string> cam_labels(const httplib::Request& req) {
  std::vector<std::string> out;
  for (size_t i = 0; i < req.get_param_value_count("labels"); ++i)
    out.push_back(req.get_param_value("labels", i));
  return out.empty() ? std::vector<std::string>{"top1"} : out;
}

void add_routes(httplib::Server& server, Service& service) {
  using Request = httplib::Request;
  using Response = httplib::Response;
  using Reader = httplib::ContentReader;
  server.Post("/v1/predict", [&](const Request& req, Response& res, const Reader& reader) {
    service.handle("/v1/predict", req, res, reader, [&](auto read, auto arrival, auto deadline) {
      reply_json(res, 200, service.predict(read, arrival, deadline));
    });
  });
  server.Post("/v1/cam", [&](const Request& req, Response& res, const Reader& reader) {
    service.handle("/v1/cam", req, res, reader, [&](auto read, auto, auto deadline) {
      reply_png(res, service.cam(read(), cam_labels(req), deadline));
    });
  });
  server.Post("/v1/input", [&](const Request& req, Response& res, const Reader& reader) {
    service.handle("/v1/input", req, res, reader,
                   [&](auto read, auto, auto deadline) { reply_png(res, service.input(read(), deadline)); });
  });
  server.Get("/healthz",
             [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  server.Get("/readyz", [&](const httplib::Request&, httplib::Response& res) {
    res.status = service.ready() ? 200 : 503;
    res.set_content(service.ready() ? "ready\n" : "loading\n", "text/plain");
  });
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(service.metrics_text(), "text/plain; version=0.0.4");
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(serve_page(), "text/html; charset=utf-8");
  });
}

// The endpoint label of a request's metrics: its path when it is an endpoint, else "other" (a client must not
// grow the number of series).
std::string known_endpoint(const std::string& path) {
  for (const char* e : {"/v1/predict", "/v1/cam", "/v1/input", "/metrics"})
    if (path == e) return path;
  return "other";
}

// The bearer token on /metrics; JSON bodies for httplib's own errors (413 over --max-body-mb, 400
// malformed, 404).
void add_guards(httplib::Server& server, Service& service, const ServeOptions& options) {
  server.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    // The upload endpoints check the token themselves, after reading the body (Service::handle).
    if (options.token.empty() || req.path != "/metrics") return httplib::Server::HandlerResponse::Unhandled;
    if (constant_time_equal(req.get_header_value("Authorization"), "Bearer " + options.token))
      return httplib::Server::HandlerResponse::Unhandled;
    service.metrics().error("unauthorized");
    res.set_header("WWW-Authenticate", "Bearer");
    reply_json(res, 401, json{{"error", "missing or wrong bearer token (Authorization: Bearer TOKEN)"}});
    service.metrics().request("/metrics", 401, 0.0);
    return httplib::Server::HandlerResponse::Handled;
  });
  using WithResponse = httplib::Server::HandlerWithResponse;
  server.set_error_handler(WithResponse([&](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = "HTTP " + std::to_string(res.status);
    if (res.status == 413) {
      message =
          "the body is larger than --max-body-mb (" + std::to_string(options.max_body_bytes >> 20) + " MiB)";
      service.metrics().error("too_large");
      service.metrics().request(known_endpoint(req.path), 413, 0.0);
    } else if (res.status == 404) {
      message = "no such endpoint: " + req.method + " " + req.path;
    }
    reply_json(res, res.status, json{{"error", message}});
    return httplib::Server::HandlerResponse::Handled;
  }));
}

void configure(httplib::Server& server, const ServeOptions& options, std::atomic<int>& listen_fd) {
  const int threads = options.http_threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_payload_max_length(options.max_body_bytes);
  server.set_read_timeout(options.read_timeout_seconds, 0);
  server.set_write_timeout(options.read_timeout_seconds, 0);
  server.set_keep_alive_timeout(5);
  server.set_keep_alive_max_count(1000);
  server.set_tcp_nodelay(true);
  // SO_REUSEADDR (a restart binds while old connections linger) but not httplib's default SO_REUSEPORT, which
  // would let a second server share a port in use instead of failing.
  server.set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd = sock;
  });
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

int serve_http(const std::function<std::unique_ptr<ServedModels>()>& load, const ServeOptions& options,
               const std::atomic<int>& stop, RunLog& log) {
  // Uploads are decoded in parallel on decode_threads connection threads: OpenCV's own parallel loops inside
  // each would start more threads than there are cores, beside the model's (what made the latency spiky).
  cv::setNumThreads(0);
  httplib::Server server;
  Service service(options, log);
  std::atomic<int> listen_fd{-1};
  configure(server, options, listen_fd);
  add_guards(server, service, options);
  add_routes(server, service);
  int port = options.port;
  if (port == 0) {
    port = server.bind_to_any_port(options.host);
    if (port < 0) port = 0;
  } else if (!server.bind_to_port(options.host, port)) {
    port = 0;
  }
  RANZCR_CHECK(port > 0, "cannot listen on ", options.host, ":", options.port,
               " (port in use, or not an address of this host)");
  // httplib listens with a backlog of 5: 32 clients connecting at once overflow it (the kernel drops their
  // handshakes and they see resets). Listening again on the bound socket raises the backlog.
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  std::atomic<bool> listening_done{false}, done{false};
  std::thread listener([&] {
    server.listen_after_bind();
    listening_done = true;
  });
  // Stop on SIGTERM/SIGINT (also while the models load): no new connections, requests in flight finish.
  // httplib ignores stop() until its listener runs, so it is repeated until the listener has returned.
  std::thread watcher([&] {
    while (!done && !stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop) log.info("serve: signal " + std::to_string(stop.load()) + ": finishing the requests in flight");
    while (!listening_done) {
      server.stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const std::string url = "http://" + options.host + ":" + std::to_string(port);
  log.info("serve: listening on " + url + "; loading the models");
  try {
    service.set_models(load());
  } catch (...) {
    done = true;
    watcher.join();
    listener.join();
    throw;
  }
  log.info("serving on " + url + " (page at " + url + "/, API POST " + url + "/v1/predict)");
  listener.join();  // returns once stopped and every connection's request is answered
  done = true;
  watcher.join();
  service.stop_batcher();
  log.info("serve: stopped");
  return 0;
}

}  // namespace ranzcr
