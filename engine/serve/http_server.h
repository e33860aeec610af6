// `ranzcr serve`: trained models behind HTTP, with serve's dynamic batcher. The server is event-driven
// (Boost.Beast on Asio): a connection costs a socket and a few KB, never a thread; a few I/O threads read and
// write, uploads are decoded on the decode threads, the models run on the batching thread, and answers are
// posted back to their connection. Every request header and body has a deadline, connections are capped.
// The endpoints (the server's own, /v1 and the Open Inference Protocol's /v2) are service.h's, listed in
// routes.cpp; docs/serving.md says what they promise, docs/security.md the limits.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/report/run_log.h"
#include "engine/serve/batcher.h"
#include "engine/serve/served_models.h"

namespace ranzcr {

/// How answers and log lines name the limits (apps: the flags that set them, e.g. "--max-body-mb").
struct LimitNames {
  std::string timeout = "the request timeout";
  std::string header_timeout = "the header timeout";
  std::string max_header = "the header size limit";
  std::string max_body = "the body size limit";
  std::string body_timeout = "the body timeout";
  std::string body_min_rate = "the minimum body rate";
  std::string max_connections = "the connection limit";
};

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (the log line names it)
  BatcherOptions batcher;
  std::chrono::milliseconds timeout{30000};    // per request, from its header to its answer (504 after)
  size_t max_body_bytes = size_t{64} << 20;    // larger bodies: 413 before they are stored
  size_t max_header_bytes = size_t{16} << 10;  // the request line and headers together (431 past it)
  std::chrono::milliseconds header_timeout{
      10000};  // the whole header, from the connection or its first byte (408)
  std::chrono::milliseconds body_timeout{10000};  // the body: this long plus its size at body_min_rate (408)
  size_t body_min_rate = size_t{64} << 10;        // bytes per second a body (and an answer) must keep up
  std::chrono::milliseconds idle_timeout{5000};   // a keep-alive connection with no new request is closed
  int max_connections = 10000;  // open at once (also bounded by the file limit); more are closed at once
  int io_threads = 1;  // threads reading and writing sockets (one serves thousands: the work is elsewhere)
  int decode_threads = 2;             // uploads decoded at once
  std::string model_name = "ranzcr";  // the Open Inference Protocol's model name (an ensemble is one model)
  std::string server_version;         // GET /v2 says it
  std::string token;                  // non-empty: the routes that need it (routes.cpp) take "Bearer TOKEN"
  std::string operating_point;        // with `thresholds`: its name (sens90, ...)
  std::vector<double> thresholds;     // per label (NaN: none); empty: probabilities only
  LimitNames limit_names;             // the limits as the messages name them
};

/// Loads the models (`load`, after the port is bound so /healthz answers meanwhile), warms them up, serves
/// until `stop` is non-zero (SIGTERM), then stops accepting, finishes the requests in flight and returns 0.
/// Throws std::runtime_error (one line) when the address cannot be bound or the models cannot be loaded.
int serve_http(const std::function<std::unique_ptr<ServedModels>()>& load, const ServeOptions& options,
               const std::atomic<int>& stop, RunLog& log);

/// The page GET / serves (engine/serve/page.html).
const std::string& serve_page();

/// `a` equals `b`, compared in time that depends on their lengths only (bearer tokens).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace ranzcr
