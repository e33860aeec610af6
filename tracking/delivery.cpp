// tracking/delivery.h: a tracker's requests sent by one thread, retried, spooled and replayed.
#include "tracking/delivery.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <time.h>

#include "core/check.h"
#include "core/durable_file.h"

namespace ranzcr::tracking {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

// This thread's CPU time so far.
int64_t thread_cpu_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The spool files of this process are appended and rewritten under this lock: a rewrite keeps lines that
// were appended while the requests before them were sent.
std::mutex& spool_mutex() {
  static std::mutex m;
  return m;
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RANZCR_CHECK(in, "cannot read the spool file ", path, ": ", std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct SpoolLine {
  json request;
  size_t end = 0;  // the byte after its newline in the file's text
};

// The requests of a spool file's text; a last line cut short (no newline: a crash mid-append) is dropped.
std::vector<SpoolLine> parse_spool(const Courier& courier, const std::string& path, const std::string& text,
                                   const std::function<void(const std::string&)>& warn) {
  std::vector<SpoolLine> lines;
  size_t line_no = 0;
  for (size_t b = 0; b < text.size();) {
    const size_t e = text.find('\n', b);
    const std::string line = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
    ++line_no;
    b = e == std::string::npos ? text.size() : e + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (e == std::string::npos && !courier.is_request(j)) {
      if (warn) warn(path + ": line " + std::to_string(line_no) + " was cut short (dropped)");
      break;
    }
    RANZCR_CHECK(courier.is_request(j), path, ": line ", line_no, " is not a spooled request for the ",
                 courier.server_name(), ": ", line.substr(0, 200));
    lines.push_back({std::move(j), b});
  }
  return lines;
}

// Removes the first `handled` bytes of the spool file, which were `text`'s first bytes (lines appended since
// are kept); the file goes when nothing is left. A file rewritten by someone else meanwhile is left alone.
void drop_handled(const std::string& path, const std::string& text, size_t handled) {
  std::lock_guard<std::mutex> lock(spool_mutex());
  const std::string now = std::filesystem::exists(path) ? read_whole(path) : "";
  if (now.compare(0, handled, text, 0, handled) != 0) return;
  if (now.size() <= handled)
    std::filesystem::remove(path);
  else
    write_file_atomic(path, now.substr(handled));
}

}  // namespace

struct Delivery::State {
  std::unique_ptr<Courier> courier;
  TakeRequest take;
  DeliveryOptions options;

  std::mutex mu;  // guards the fields up to `current`
  std::condition_variable cv;
  CallQueue queue;
  bool closed = false;         // close() was called: no more requests
  bool busy = false;           // the worker holds `current`
  bool current_taken = false;  // close() spooled `current`: the worker must not
  bool worker_done = false;
  json current;
  bool spooling = false;       // the worker's own: the server stopped answering, requests go to the spool
  Clock::time_point probe_at;  // ... until then
  std::atomic<bool> abandon{false};  // close() timed out: stop, cancel the call in flight
  std::atomic<int64_t> spooled{0};
  std::atomic<int64_t> sent{0};
  std::atomic<int64_t> cpu_ns{0};  // the worker's CPU time, updated after each request and at its end
  std::thread worker;

  State(std::unique_ptr<Courier> c, TakeRequest t, DeliveryOptions o)
      : courier(std::move(c)), take(std::move(t)), options(std::move(o)) {}

  void warn(const std::string& line) const {
    if (options.warn) options.warn(line);
  }
  std::string write_spool(const json& request);  // under mu; what went wrong, "" when spooled
  void spool_current(const json& request);
  enum class Probe { kAnswered, kNoAnswer, kNone };
  Probe probe();
  Clock::duration probe_interval() const {
    return std::chrono::milliseconds(static_cast<int64_t>(options.probe_seconds * 1000));
  }
  void deliver(const json& request);
  void work();
};

std::string Delivery::State::write_spool(const json& request) {
  if (options.spool_path.empty()) return courier->server_name() + ": no spool file, a request was dropped";
  try {
    append_to_spool(options.spool_path, request);
    ++spooled;
    return "";
  } catch (const std::exception& e) {
    return std::string(e.what()) + " (a request was dropped)";
  }
}

void Delivery::State::spool_current(const json& request) {
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!current_taken) failed = write_spool(request);
  }
  if (!failed.empty()) warn(failed);
}

// Once spooling, when the probe time has come: the spooled requests go first, in order. kNone: there were
// none (the next request is the probe).
Delivery::State::Probe Delivery::State::probe() {
  try {
    const SpoolReplay r = replay_spool(*courier, options.spool_path, options.warn);
    if (r.left > 0 || abandon) return Probe::kNoAnswer;
    if (r.sent + r.refused == 0) return Probe::kNone;
  } catch (const std::exception& e) {
    warn(e.what());
  }
  return Probe::kAnswered;
}

void Delivery::State::deliver(const json& request) {
  bool single_try = false;  // a probe: one try, and no second warning
  if (spooling) {
    const Probe p = Clock::now() < probe_at ? Probe::kNoAnswer : probe();
    if (p == Probe::kNoAnswer) {
      if (Clock::now() >= probe_at) probe_at = Clock::now() + probe_interval();
      return spool_current(request);
    }
    single_try = p == Probe::kNone;
    if (!single_try) spooling = false;
  }
  const auto start = Clock::now();
  for (double delay = 0.25;; delay *= 2) {
    try {
      courier->send(request);
      ++sent;
      spooling = false;
      return;
    } catch (const DeliveryError& e) {
      if (!e.retriable()) return warn(std::string(e.what()) + " (request dropped)");
      if (abandon) return spool_current(request);
      if (single_try || seconds_since(start) + delay > options.retry_seconds) {
        if (!spooling)
          warn(std::string(e.what()) + "; requests go to " + options.spool_path + " until it answers again");
        spooling = true;
        probe_at = Clock::now() + probe_interval();
        return spool_current(request);
      }
    } catch (const std::exception& e) {
      return warn(std::string(e.what()) + " (request dropped)");
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::duration<double>(delay), [&] { return abandon.load(); });
  }
}

void Delivery::State::work() {
  courier->cancel_sends_when(&abandon);
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [&] { return !queue.empty() || closed || abandon; });
    if (abandon || queue.empty()) break;
    current = take(queue);
    busy = true;
    current_taken = false;
    const json request = current;
    lock.unlock();
    deliver(request);
    cpu_ns = thread_cpu_ns();
    lock.lock();
    busy = false;
    cv.notify_all();
  }
  cpu_ns = thread_cpu_ns();
  worker_done = true;
  cv.notify_all();
}

Delivery::Delivery(std::unique_ptr<Courier> courier, TakeRequest take, DeliveryOptions options)
    : state_(std::make_unique<State>(std::move(courier), std::move(take), std::move(options))) {
  state_->worker = std::thread([s = state_.get()] { s->work(); });
}

Delivery::~Delivery() {
  close(10);
  if (state_->worker.joinable()) state_->worker.join();  // abandoned: its call is cancelled within ~1 s
}

void Delivery::push(std::unique_ptr<QueuedCall> call) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.closed) return;  // after close(): nothing more is sent
  s.queue.push_back(std::move(call));
  s.cv.notify_all();
}

void Delivery::close(double timeout_s) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.closed) return;  // again (the destructor's): the worker ends by itself
  s.closed = true;
  s.cv.notify_all();
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, timeout_s) * 1000));
  std::string message;
  std::vector<std::string> failed;  // warnings, given once the lock is released
  const bool idle = s.cv.wait_until(lock, deadline, [&] { return s.queue.empty() && !s.busy; });
  if (!idle) {
    s.abandon = true;  // wakes a backoff sleep, cancels the call in flight
    s.cv.notify_all();
    const int64_t before = s.spooled;
    if (s.busy && !s.current_taken) {
      s.current_taken = true;
      failed.push_back(s.write_spool(s.current));
    }
    while (!s.queue.empty()) failed.push_back(s.write_spool(s.take(s.queue)));
    message = s.courier->server_name() + ": not done after " + seconds(timeout_s) + " s; " +
              std::to_string(s.spooled - before) + " requests spooled to " + s.options.spool_path;
  }
  const bool done = s.worker_done || idle;
  lock.unlock();
  const auto first_failure = std::find_if(failed.begin(), failed.end(), [](auto& f) { return !f.empty(); });
  if (first_failure != failed.end()) s.warn(*first_failure);  // once: the same reason for each
  if (!message.empty()) s.warn(message);
  if (done && s.worker.joinable()) s.worker.join();
}

int64_t Delivery::spooled() const {
  return state_->spooled;
}

int64_t Delivery::sent() const {
  return state_->sent;
}

double Delivery::cpu_seconds() const {
  return static_cast<double>(state_->cpu_ns) / 1e9;
}

SpoolReplay replay_spool(Courier& courier, const std::string& spool_path,
                         const std::function<void(const std::string&)>& warn) {
  SpoolReplay result;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(spool_mutex());
    if (!std::filesystem::exists(spool_path)) return result;
    text = read_whole(spool_path);
  }
  const std::vector<SpoolLine> lines = parse_spool(courier, spool_path, text, warn);
  size_t done = 0;
  for (; done < lines.size(); ++done) {
    try {
      courier.send(lines[done].request);
      ++result.sent;
    } catch (const DeliveryError& e) {
      if (e.retriable()) break;
      ++result.refused;
      if (warn) warn(std::string(e.what()) + " (spooled request dropped)");
    }
  }
  result.left = static_cast<int64_t>(lines.size() - done);
  // Every line handled: the whole text read (a cut-short last line included); else up to the first left.
  const size_t handled = done == lines.size() ? text.size() : (done == 0 ? 0 : lines[done - 1].end);
  if (handled > 0 || text.empty()) drop_handled(spool_path, text, handled);
  return result;
}

void append_to_spool(const std::string& path, const json& request) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::lock_guard<std::mutex> lock(spool_mutex());
  append_line(path, json_line(request));
}

std::string json_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ranzcr::tracking
