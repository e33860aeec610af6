// RunLogger: one worker thread sends a run's queued requests in order, consecutive metrics, params and tags
// merged into log-batch calls; a server that does not answer gets retries with backoff, then the spool file.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include <time.h>

#include <nlohmann/json.hpp>

#include "tracking/mlflow.h"
#include "tracking/requests.h"

namespace ranzcr::tracking {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// MLflow refuses a log-batch body over 1 MB (MAX_BATCH_LOG_REQUEST_SIZE): merged batches stay below this.
constexpr size_t kMaxBatchBytes = 800'000;

// A call of the logger as queued: metrics/params/tags (consumed from the front as batches are cut), a run
// status, or an upload.
struct Queued {
  enum class Kind { kBatch, kUpdate, kUpload } kind = Kind::kBatch;
  std::vector<Metric> metrics;
  std::vector<KeyValue> params, tags;
  size_t metrics_done = 0, params_done = 0, tags_done = 0;
  RunStatus status = RunStatus::kRunning;
  int64_t end_time_ms = 0;
  std::string local_path, artifact_path;
};

// One log-batch being filled within MLflow's limits.
struct BatchBuilder {
  std::vector<Metric> metrics;
  std::vector<KeyValue> params, tags;
  size_t bytes = 0;

  bool room() const {
    return metrics.size() + params.size() + tags.size() < kMaxEntitiesPerBatch && bytes < kMaxBatchBytes;
  }
  // Bytes of `s` in JSON: control characters as \u00XX, '"' and '\\' escaped.
  static size_t json_size(const std::string& s, size_t max = std::string::npos) {
    size_t n = 2;
    for (size_t i = 0; i < std::min(s.size(), max); ++i) {
      const auto c = static_cast<unsigned char>(s[i]);
      n += c < 0x20 ? 6 : (c == '"' || c == '\\') ? 2 : 1;
    }
    return n;
  }
  static size_t size_of(const KeyValue& kv, size_t max_value) {
    return json_size(kv.first) + json_size(kv.second, max_value) + 20;
  }
  // Takes what fits of `q`'s items (from where it stopped); true when `q` is used up.
  bool take(Queued& q) {
    for (; q.metrics_done < q.metrics.size() && metrics.size() < kMaxMetricsPerBatch && room();
         ++q.metrics_done) {
      bytes += json_size(q.metrics[q.metrics_done].key) + 80;
      metrics.push_back(q.metrics[q.metrics_done]);
    }
    for (; q.params_done < q.params.size() && params.size() < kMaxParamsPerBatch && room(); ++q.params_done) {
      const KeyValue& p = q.params[q.params_done];
      const auto same =
          std::find_if(params.begin(), params.end(), [&](const KeyValue& x) { return x.first == p.first; });
      if (same != params.end() && same->second != p.second) return false;  // the server decides, next batch
      if (same != params.end()) continue;
      bytes += size_of(p, kMaxParamValueLength);
      params.push_back(p);
    }
    for (; q.tags_done < q.tags.size() && room(); ++q.tags_done) {
      const KeyValue& t = q.tags[q.tags_done];
      const auto same =
          std::find_if(tags.begin(), tags.end(), [&](const KeyValue& x) { return x.first == t.first; });
      if (same != tags.end()) {
        same->second = t.second;  // the later value wins, as it would in two calls
      } else if (tags.size() < kMaxTagsPerBatch) {
        bytes += size_of(t, kMaxTagValueLength);
        tags.push_back(t);
      } else {
        break;
      }
    }
    return q.metrics_done == q.metrics.size() && q.params_done == q.params.size() &&
           q.tags_done == q.tags.size();
  }
};

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

}  // namespace

struct RunLogger::State {
  MlflowClient client;
  RunInfo run;
  RunLoggerOptions options;

  std::mutex mu;  // guards the fields up to `current`
  std::condition_variable cv;
  std::deque<Queued> queue;
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

  State(MlflowClient c, RunInfo r, RunLoggerOptions o)
      : client(std::move(c)), run(std::move(r)), options(std::move(o)) {}

  void warn(const std::string& line) const {
    if (options.warn) options.warn(line);
  }
  void push(Queued q);
  json take_request();                           // under mu, queue not empty
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

void RunLogger::State::push(Queued q) {
  std::lock_guard<std::mutex> lock(mu);
  if (closed) return;  // after close(): nothing more is sent
  queue.push_back(std::move(q));
  cv.notify_all();
}

json RunLogger::State::take_request() {
  Queued& front = queue.front();
  if (front.kind == Queued::Kind::kUpdate) {
    json r =
        detail::update_request(run.run_id, detail::update_body(run.run_id, front.status, front.end_time_ms));
    queue.pop_front();
    return r;
  }
  if (front.kind == Queued::Kind::kUpload) {
    const std::string name = std::filesystem::path(front.local_path).filename().string();
    std::string dir = front.artifact_path;
    while (!dir.empty() && dir.back() == '/') dir.pop_back();
    json r =
        detail::upload_request(run.artifact_uri, front.local_path, dir.empty() ? name : dir + "/" + name);
    queue.pop_front();
    return r;
  }
  BatchBuilder b;
  while (!queue.empty() && queue.front().kind == Queued::Kind::kBatch && b.take(queue.front()))
    queue.pop_front();
  return detail::batch_request(run.run_id, detail::batch_body(run.run_id, b.metrics, b.params, b.tags));
}

std::string RunLogger::State::write_spool(const json& request) {
  if (options.spool_path.empty())
    return "MLflow tracking server " + detail::shown_uri(client.server().uri) +
           ": no spool file, a request was dropped";
  try {
    detail::append_to_spool(options.spool_path, request);
    ++spooled;
    return "";
  } catch (const std::exception& e) {
    return std::string(e.what()) + " (a request was dropped)";
  }
}

void RunLogger::State::spool_current(const json& request) {
  std::string failed;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!current_taken) failed = write_spool(request);
  }
  if (!failed.empty()) warn(failed);
}

// Once spooling, when the probe time has come: the spooled requests go first, in order. kNone: there were
// none (the next request is the probe).
RunLogger::State::Probe RunLogger::State::probe() {
  try {
    const SpoolReplay r = replay_spool(client, options.spool_path, options.warn);
    if (r.left > 0 || abandon) return Probe::kNoAnswer;
    if (r.sent + r.refused == 0) return Probe::kNone;
  } catch (const std::exception& e) {
    warn(e.what());
  }
  return Probe::kAnswered;
}

void RunLogger::State::deliver(const json& request) {
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
      detail::send_request(client, request);
      ++sent;
      spooling = false;
      return;
    } catch (const MlflowError& e) {
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

void RunLogger::State::work() {
  detail::set_thread_cancel_flag(&abandon);
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [&] { return !queue.empty() || closed || abandon; });
    if (abandon || queue.empty()) break;
    current = take_request();
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

RunLogger::RunLogger(MlflowClient client, RunInfo run, RunLoggerOptions options)
    : state_(std::make_unique<State>(std::move(client), std::move(run), std::move(options))) {
  state_->worker = std::thread([s = state_.get()] { s->work(); });
}

RunLogger::~RunLogger() {
  close(10);
  if (state_->worker.joinable()) state_->worker.join();  // abandoned: its call is cancelled within ~1 s
}

const RunInfo& RunLogger::run() const {
  return state_->run;
}

void RunLogger::log_metrics(std::vector<Metric> metrics) {
  if (metrics.empty()) return;
  Queued q;
  q.metrics = std::move(metrics);
  state_->push(std::move(q));
}

void RunLogger::log_params(std::vector<KeyValue> params) {
  if (params.empty()) return;
  Queued q;
  q.params = std::move(params);
  state_->push(std::move(q));
}

void RunLogger::set_tags(std::vector<KeyValue> tags) {
  if (tags.empty()) return;
  Queued q;
  q.tags = std::move(tags);
  state_->push(std::move(q));
}

void RunLogger::log_artifact(const std::string& local_path, const std::string& artifact_dir) {
  Queued q;
  q.kind = Queued::Kind::kUpload;
  std::error_code ec;
  const auto absolute = std::filesystem::absolute(local_path, ec);
  q.local_path = ec ? local_path : absolute.lexically_normal().string();
  q.artifact_path = artifact_dir;
  state_->push(std::move(q));
}

void RunLogger::set_status(RunStatus status, int64_t end_time_ms) {
  Queued q;
  q.kind = Queued::Kind::kUpdate;
  q.status = status;
  q.end_time_ms = end_time_ms;
  state_->push(std::move(q));
}

void RunLogger::close(double timeout_s) {
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
    while (!s.queue.empty()) failed.push_back(s.write_spool(s.take_request()));
    message = "MLflow tracking server " + detail::shown_uri(s.client.server().uri) + ": not done after " +
              seconds(timeout_s) + " s; " + std::to_string(s.spooled - before) + " requests spooled to " +
              s.options.spool_path;
  }
  const bool done = s.worker_done || idle;
  lock.unlock();
  const auto first_failure = std::find_if(failed.begin(), failed.end(), [](auto& f) { return !f.empty(); });
  if (first_failure != failed.end()) s.warn(*first_failure);  // once: the same reason for each
  if (!message.empty()) s.warn(message);
  if (done && s.worker.joinable()) s.worker.join();
}

int64_t RunLogger::spooled() const {
  return state_->spooled;
}

int64_t RunLogger::sent() const {
  return state_->sent;
}

double RunLogger::cpu_seconds() const {
  return static_cast<double>(state_->cpu_ns) / 1e9;
}

}  // namespace ranzcr::tracking
