// The event-driven HTTP/1.1 server of `ranzcr serve` (Boost.Beast on Asio). Each connection is a Session on
// its own strand: it reads a request header under one deadline for the whole header, its body under a
// deadline that grows with the bytes received (a minimum rate), hands the request to the Service and writes
// the answer that comes back (posted from whichever thread produced it), then waits for the next request up
// to the idle timeout. Nothing here blocks a thread on a client.
#include "engine/serve/http_server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <opencv2/core/utility.hpp>

#include <algorithm>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include <strings.h>
#include <sys/resource.h>

#include "engine/serve/service.h"

namespace ranzcr {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

double seconds(std::chrono::milliseconds ms) {
  return static_cast<double>(ms.count()) / 1000.0;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::string s = std::to_string(seconds(ms));
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  return s + " s";
}

// An error of Beast's HTTP parser (the request is malformed), not of the socket (the peer went).
bool from_parser(const error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_version).category();
}

// The peer went (reset, EOF, a message cut off): nobody to answer.
bool peer_went(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || (ec && !from_parser(ec));
}

// Our words for a request the parser refused (never the library's text).
std::string malformed(const error_code& ec) {
  if (ec == http::error::bad_version) return "malformed request: not HTTP/1.0 or HTTP/1.1";
  if (ec == http::error::bad_content_length) return "malformed request: a bad Content-Length";
  if (ec == http::error::multiple_content_length) return "malformed request: more than one Content-Length";
  if (ec == http::error::bad_obs_fold) return "malformed request: a folded header line";
  if (ec == http::error::buffer_overflow || ec == http::error::bad_alloc)
    return "malformed request: too large to hold";
  if (ec == http::error::bad_transfer_encoding) return "malformed request: a bad Transfer-Encoding";
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension)
    return "malformed request: a bad chunk in the chunked body";
  if (ec == http::error::bad_line_ending) return "malformed request: lines must end with CRLF";
  if (ec == http::error::bad_method) return "malformed request: a bad method";
  if (ec == http::error::bad_target) return "malformed request: a bad request target";
  if (ec == http::error::bad_field || ec == http::error::bad_value)
    return "malformed request: a bad header name or value";
  return "malformed request";
}

class Server;
class Session;

// The open sessions, for SIGTERM. Shared with every session: a session's handler may still be queued when the
// server goes (an answer posted after the I/O threads returned), and is destroyed with the io_context.
struct SessionRegistry {
  std::mutex mutex;
  std::set<std::weak_ptr<Session>, std::owner_less<std::weak_ptr<Session>>> sessions;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server& server);
  ~Session();
  void start();
  void stop();  // SIGTERM: closed at once when idle, else after the answer in flight

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kWriting, kClosing };
  void wait_idle();
  void read_header();
  void on_header(error_code ec);
  bool take_header();
  void read_body();
  void on_body(error_code ec);
  void dispatch();
  void answer(uint64_t gen, HttpResponse res);
  void write(HttpResponse res, bool keep_alive);
  void fail(int status, const std::string& message);
  void fail_too_large();  // 413: the body is past the limit
  const LimitNames& names() const;
  void linger_close();
  void close();
  void arm(std::chrono::steady_clock::time_point at, const char* kind);
  void disarm();
  void on_deadline(const char* kind);

  tcp::socket socket_;
  Server& server_;  // not used by the destructor (see SessionRegistry)
  ServeMetrics& metrics_;
  std::shared_ptr<SessionRegistry> registry_;
  net::steady_timer timer_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;  // the request being read (its header taken, its body coming)
  std::string endpoint_ = "other";
  Phase phase_ = Phase::kIdle;
  bool keep_alive_ = false, head_ = false, stop_requested_ = false, answered_ = true;
  unsigned version_ = 11;
  uint64_t timer_gen_ = 0, request_gen_ = 0;
  const char* timed_out_ = nullptr;                 // the deadline that cancelled the socket's operation
  std::atomic<std::thread::id> handling_thread_{};  // the strand's thread while Service::handle runs
  std::chrono::steady_clock::time_point body_start_;
  std::weak_ptr<Session> self_;
};

class Server {
 public:
  Server(const ServeOptions& options, Service& service, ServeMetrics& metrics, RunLog& log)
      : options(options),
        service(service),
        metrics(metrics),
        log(log),
        acceptor_(net::make_strand(ioc_)),
        retry_(acceptor_.get_executor()) {}

  ~Server() {  // an early exit (an exception between run() and join()): stop the I/O threads first
    if (!threads_.empty() && threads_.front().joinable()) {
      ioc_.stop();
      join();
    }
  }
  // Binds and listens; the port (the one chosen when options.port is 0). Throws one line when it cannot.
  int bind();
  // Runs the I/O threads; they return once stop() closed the listener and every connection has ended.
  void run(int threads);
  void join();
  void stop();  // from any thread
  bool stopping() const { return stopping_; }

  const ServeOptions& options;
  Service& service;
  ServeMetrics& metrics;
  RunLog& log;
  int max_connections = 0;
  const std::shared_ptr<SessionRegistry> registry = std::make_shared<SessionRegistry>();

 private:
  void accept();
  void on_accept(error_code ec, tcp::socket socket);

  net::io_context ioc_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

// ---- Session ---------------------------------------------------------------------------------------------

Session::Session(tcp::socket socket, Server& server)
    : socket_(std::move(socket)),
      server_(server),
      metrics_(server.metrics),
      registry_(server.registry),
      timer_(socket_.get_executor()) {
  metrics_.connection_opened();
}

Session::~Session() {
  metrics_.connection_closed();
  std::lock_guard<std::mutex> lock(registry_->mutex);
  registry_->sessions.erase(self_);
}

void Session::start() {
  self_ = weak_from_this();
  {
    std::lock_guard<std::mutex> lock(registry_->mutex);
    registry_->sessions.insert(self_);
  }
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_header(); });
}

void Session::stop() {
  net::post(socket_.get_executor(), [self = shared_from_this()] {
    self->stop_requested_ = true;
    error_code ec;  // bytes of a request in the kernel, not read yet: it has begun, it is answered
    const bool nothing_read = self->phase_ == Phase::kHeader && self->buffer_.size() == 0 && self->parser_ &&
                              !self->parser_->got_some() && self->socket_.available(ec) == 0;
    if (self->phase_ == Phase::kIdle || nothing_read) self->close();
  });
}

void Session::arm(std::chrono::steady_clock::time_point at, const char* kind) {
  const uint64_t gen = ++timer_gen_;
  timed_out_ = nullptr;
  timer_.expires_at(at);
  timer_.async_wait([self = shared_from_this(), gen, kind](error_code ec) {
    if (!ec && gen == self->timer_gen_) self->on_deadline(kind);
  });
}

void Session::disarm() {
  ++timer_gen_;
  timer_.cancel();
}

void Session::on_deadline(const char* kind) {
  if (std::string(kind) == "answer") {
    answer(request_gen_, error_response(504, "timed out: no answer within " + names().timeout + " (" +
                                                 std::to_string(server_.options.timeout.count()) + " ms)"));
    return;
  }
  timed_out_ = kind;  // the pending read or write ends with operation_aborted and sees this
  error_code ec;
  socket_.cancel(ec);
}

// Between requests: the next one's first byte must come within the idle timeout.
void Session::wait_idle() {
  phase_ = Phase::kIdle;
  if (stop_requested_ || server_.stopping()) return close();
  if (buffer_.size() > 0) return read_header();  // pipelined: already here
  arm(std::chrono::steady_clock::now() + server_.options.idle_timeout, "idle_timeout");
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
    if (self->timed_out_) {
      self->server_.metrics.limit("idle_timeout");
      return self->close();
    }
    self->disarm();
    if (ec) return self->close();
    self->read_header();
  });
}

void Session::read_header() {
  phase_ = Phase::kHeader;
  head_ = false;  // an answer before this request's header is taken (408, 413, 431, 400) is a full one
  version_ = 11;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header_bytes));
  parser_->body_limit(server_.options.max_body_bytes);
  endpoint_ = "other";
  arm(std::chrono::steady_clock::now() + server_.options.header_timeout, "header_timeout");
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
}

void Session::on_header(error_code ec) {
  const ServeOptions& o = server_.options;
  if (timed_out_) {
    if (buffer_.size() == 0 && !parser_->got_some()) {  // never sent a byte: just closed
      server_.metrics.limit("idle_timeout");
      return close();
    }
    server_.metrics.limit("header_timeout");
    return fail(408, "the request header did not arrive within " + names().header_timeout + " (" +
                         seconds_text(o.header_timeout) + ")");
  }
  disarm();
  if (peer_went(ec)) return close();
  if (ec == http::error::header_limit) {
    server_.metrics.limit("header_size");
    return fail(431, "the request header is larger than " + names().max_header + " (" +
                         std::to_string(o.max_header_bytes >> 10) + " KiB)");
  }
  if (ec == http::error::body_limit) return fail_too_large();
  if (ec) {
    server_.metrics.error("bad_request");
    return fail(400, malformed(ec));
  }
  if (!take_header()) return;
  const std::string expect = std::string(parser_->get()[http::field::expect]);
  if (version_ == 11 && strcasecmp(expect.c_str(), "100-continue") == 0 && !parser_->is_done()) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    arm(std::chrono::steady_clock::now() + o.body_timeout, "write_timeout");
    net::async_write(socket_, net::buffer(kContinue), [self = shared_from_this()](error_code ec, size_t) {
      if (self->timed_out_ || ec) return self->close();
      self->read_body();
    });
    return;
  }
  if (parser_->is_done()) return dispatch();
  read_body();
}

// The header as our request: its target decoded, its text checked (UTF-8, no NUL). False when refused.
bool Session::take_header() {
  const auto& msg = parser_->get();
  request_ = HttpRequest{};
  request_.arrival = std::chrono::steady_clock::now();
  request_.method = std::string(msg.method_string());
  version_ = msg.version();
  keep_alive_ = msg.keep_alive();
  head_ = msg.method() == http::verb::head;
  try {
    split_target(std::string(msg.target()), request_.path, request_.query);
  } catch (const std::invalid_argument& e) {
    server_.metrics.error("bad_request");
    fail(400, e.what());
    return false;
  }
  endpoint_ = Service::endpoint_label(request_.path);
  for (const auto& field : msg) {
    const std::string name(field.name_string()), value(field.value());
    if (!valid_utf8(name) || !valid_utf8(value) || value.find('\0') != std::string::npos) {
      server_.metrics.error("bad_request");
      fail(400, "a request header is not valid UTF-8 or holds a NUL byte");
      return false;
    }
    request_.headers.emplace_back(name, value);
  }
  request_.hold = server_.service.on_header(request_);
  body_start_ = std::chrono::steady_clock::now();
  return true;
}

// The body under a deadline that grows with what has arrived: --body-timeout-s plus the bytes at the minimum
// rate. A trickle never extends it by more than its own size at that rate.
void Session::read_body() {
  phase_ = Phase::kBody;
  const ServeOptions& o = server_.options;
  const size_t got = parser_->get().body().size();
  const auto allowance = std::chrono::milliseconds(
      static_cast<int64_t>(1000.0 * static_cast<double>(got) / static_cast<double>(o.body_min_rate)));
  const auto body_deadline = body_start_ + o.body_timeout + allowance;
  const auto answer_deadline = request_.arrival + o.timeout;  // never past the request's own deadline
  if (answer_deadline < body_deadline)
    arm(answer_deadline, "request_timeout");
  else
    arm(body_deadline, "body_timeout");
  http::async_read_some(socket_, buffer_, *parser_,
                        [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
}

void Session::on_body(error_code ec) {
  const ServeOptions& o = server_.options;
  if (timed_out_ && std::string(timed_out_) == "request_timeout") {
    server_.metrics.error("deadline");
    return fail(504, "timed out: the body was still arriving " + names().timeout + " (" +
                         std::to_string(o.timeout.count()) + " ms) after the header");
  }
  if (timed_out_) {
    server_.metrics.limit("body_timeout");
    return fail(408, "the body did not arrive in time (" + names().body_timeout + " " +
                         seconds_text(o.body_timeout) + ", then at least " + names().body_min_rate + " " +
                         std::to_string(o.body_min_rate >> 10) + ")");
  }
  if (ec == http::error::body_limit) return fail_too_large();
  if (peer_went(ec)) return close();
  if (ec) {
    server_.metrics.error("bad_request");
    return fail(400, malformed(ec));
  }
  if (parser_->is_done()) return dispatch();
  read_body();
}

void Session::dispatch() {
  phase_ = Phase::kHandling;
  HttpRequest request = std::move(request_);
  request.body = std::move(parser_->get().body());
  parser_.reset();
  const uint64_t gen = ++request_gen_;
  answered_ = false;
  arm(request.arrival + server_.options.timeout, "answer");
  auto self = shared_from_this();
  // An answer given at once (probes, metadata, refusals) is written at once, on this strand: no deadline can
  // overtake it. One from another thread (decode, batching) is posted to the strand.
  const Respond respond = [self, gen](HttpResponse res) {
    if (std::this_thread::get_id() == self->handling_thread_.load()) return self->answer(gen, std::move(res));
    net::post(self->socket_.get_executor(),
              [self, gen, res = std::move(res)]() mutable { self->answer(gen, std::move(res)); });
  };
  handling_thread_ = std::this_thread::get_id();
  server_.service.handle(std::move(request), respond);
  handling_thread_ = std::thread::id();
}

void Session::answer(uint64_t gen, HttpResponse res) {
  if (gen != request_gen_ || answered_) return;  // late: its 504 went out
  answered_ = true;
  disarm();
  if (res.status == 504) server_.metrics.error("deadline");  // counted once, where it is written
  server_.metrics.request(
      endpoint_, res.status,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - body_start_).count());
  const bool keep = keep_alive_ && !res.close && !stop_requested_ && !server_.stopping();
  write(std::move(res), keep);
}

void Session::write(HttpResponse res, bool keep_alive) {
  phase_ = Phase::kWriting;
  auto msg = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(res.status),
                                                                 version_ == 10 ? 10 : 11);
  msg->set(http::field::server, "ranzcr");
  msg->set(http::field::content_type, res.content_type);
  for (const auto& [name, value] : res.headers) msg->set(name, value);
  msg->body() = std::move(res.body);
  msg->keep_alive(keep_alive);
  msg->prepare_payload();
  if (head_) msg->body().clear();  // HEAD: the header says the length, no body follows
  const ServeOptions& o = server_.options;
  const auto allowance = std::chrono::milliseconds(static_cast<int64_t>(
      1000.0 * static_cast<double>(msg->body().size()) / static_cast<double>(o.body_min_rate)));
  arm(std::chrono::steady_clock::now() + o.body_timeout + allowance, "write_timeout");
  http::async_write(socket_, *msg, [self = shared_from_this(), msg, keep_alive](error_code ec, size_t) {
    if (self->timed_out_) {
      self->server_.metrics.limit("write_timeout");
      return self->close();
    }
    self->disarm();
    if (ec) return self->close();
    if (!keep_alive) return self->linger_close();
    self->wait_idle();
  });
}

// The limits as answers name them (ServeOptions::limit_names).
const LimitNames& Session::names() const {
  return server_.options.limit_names;
}

void Session::fail_too_large() {
  server_.metrics.limit("body_size");
  server_.metrics.error("too_large");
  fail(413, "the body is larger than " + names().max_body + " (" +
                std::to_string(server_.options.max_body_bytes >> 20) + " MiB)");
}

// An answer that ends the connection (errors of the request's framing, 408, 413, 431): written, then closed.
void Session::fail(int status, const std::string& message) {
  request_ = HttpRequest{};  // lets go of its hold
  parser_.reset();
  server_.metrics.request(endpoint_, status, 0.0);
  HttpResponse res = error_response(status, message);
  if (status == 408 || status == 413 || status == 431 || status == 400) res.close = true;
  write(std::move(res), false);
}

// Half-closes, then reads and drops what the client still sends for a moment, so that the answer is not lost
// to a reset when unread bytes (a refused body) are still arriving.
void Session::linger_close() {
  phase_ = Phase::kClosing;
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return close();
  arm(std::chrono::steady_clock::now() + std::chrono::seconds(2), "linger");
  auto scratch = std::make_shared<std::array<char, 4096>>();
  struct Drain {
    std::shared_ptr<Session> self;
    std::shared_ptr<std::array<char, 4096>> scratch;
    void operator()(error_code ec, size_t) const {
      if (ec || self->timed_out_) return self->close();
      self->socket_.async_read_some(net::buffer(*scratch), *this);
    }
  };
  socket_.async_read_some(net::buffer(*scratch), Drain{shared_from_this(), scratch});
}

void Session::close() {
  phase_ = Phase::kClosing;
  request_ = HttpRequest{};
  disarm();
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
}

// ---- Server ----------------------------------------------------------------------------------------------

int Server::bind() {
  const std::string where = options.host + ":" + std::to_string(options.port);
  const std::string error = "cannot listen on " + where + " (port in use, or not an address of this host)";
  error_code ec;
  tcp::resolver resolver(ioc_);
  const auto found = resolver.resolve(options.host, std::to_string(options.port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  RANZCR_CHECK(!ec && !found.empty(), error);
  const tcp::endpoint endpoint = found.begin()->endpoint();
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);  // not SO_REUSEPORT
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  RANZCR_CHECK(!ec, error);
  return acceptor_.local_endpoint().port();
}

void Server::run(int threads) {
  accept();
  for (int i = 0; i < threads; ++i)
    threads_.emplace_back([this] {
      for (;;) {
        try {
          ioc_.run();
          return;
        } catch (
            const std::exception& e) {  // out of memory in a handler, ...: that connection, not the server
          log.warn(std::string("serve: an I/O handler failed: ") + e.what());
        }
      }
    });
}

void Server::join() {
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void Server::stop() {
  net::post(acceptor_.get_executor(), [this] {
    if (stopping_.exchange(true)) return;
    error_code ec;
    acceptor_.close(ec);
    retry_.cancel();
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lock(registry->mutex);
      for (const auto& w : registry->sessions)
        if (auto s = w.lock()) live.push_back(std::move(s));
    }
    for (const auto& s : live) s->stop();
  });
}

void Server::accept() {
  acceptor_.async_accept(net::make_strand(ioc_),
                         [this](error_code ec, tcp::socket socket) { on_accept(ec, std::move(socket)); });
}

void Server::on_accept(error_code ec, tcp::socket socket) {
  if (stopping_ || !acceptor_.is_open()) return;
  if (ec) {  // out of file descriptors (or a connection reset before it was accepted): try again shortly
    if (ec == net::error::no_descriptors) metrics.limit("file_descriptors");
    retry_.expires_after(std::chrono::milliseconds(50));
    retry_.async_wait([this](error_code e) {
      if (!e && !stopping_) accept();
    });
    return;
  }
  if (metrics.connections_open() >= max_connections) {
    metrics.limit("connections");
    socket.close(ec);
  } else {
    socket.set_option(tcp::no_delay(true), ec);
    std::make_shared<Session>(std::move(socket), *this)->start();
  }
  accept();
}

// The connection cap: --max-connections, within the file limit (raised to its hard limit) less a reserve for
// the models' files, the DICOM helper and the listener.
int connection_cap(const ServeOptions& options, RunLog& log) {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0) return options.max_connections;
  if (files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
    getrlimit(RLIMIT_NOFILE, &files);
  }
  const long long room = static_cast<long long>(files.rlim_cur) - 128;
  if (room >= options.max_connections) return options.max_connections;
  const int cap = static_cast<int>(std::max(16LL, room));
  log.warn("serve: the file limit (ulimit -n " + std::to_string(files.rlim_cur) + ") allows " +
           std::to_string(cap) + " connections, not " + options.limit_names.max_connections + " " +
           std::to_string(options.max_connections));
  return cap;
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
  // Uploads are decoded in parallel on the decode threads: OpenCV's own parallel loops inside each would
  // start more threads than there are cores, beside the model's (what made the latency spiky).
  cv::setNumThreads(0);
  ServeMetrics metrics;
  Service service(options, metrics, log);
  Server server(options, service, metrics, log);
  server.max_connections = connection_cap(options, log);
  const int port = server.bind();
  server.run(options.io_threads);
  // Stop on SIGTERM/SIGINT (also while the models load): no new connections, requests in flight finish.
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done && !stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (stop) log.info("serve: signal " + std::to_string(stop.load()) + ": finishing the requests in flight");
    server.stop();
  });
  const std::string url = "http://" + options.host + ":" + std::to_string(port);
  log.info("serve: listening on " + url + "; loading the models");
  try {
    service.set_models(load());
  } catch (...) {
    done = true;
    watcher.join();
    server.join();
    service.stop();
    throw;
  }
  const auto [predict, model] = Service::api_paths(options.model_name);
  log.info("serving on " + url + " (page at " + url + "/, API POST " + url + predict + ", Open Inference " +
           "Protocol at " + url + model + "; up to " + std::to_string(server.max_connections) +
           " connections)");
  server.join();  // returns once stopped and every connection has had its answer
  done = true;
  watcher.join();
  service.stop();
  log.info("serve: stopped");
  return 0;
}

}  // namespace ranzcr
