// RunLogger: a run's calls queued as MLflow's (tracking/delivery.h sends them in order from its thread, with
// retries and the spool file), consecutive metrics, params and tags merged into log-batch requests.
#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tracking/mlflow/mlflow.h"
#include "tracking/mlflow/requests.h"

namespace ranzcr::tracking {

namespace {

using nlohmann::json;

// MLflow refuses a log-batch body over 1 MB (MAX_BATCH_LOG_REQUEST_SIZE): merged batches stay below this.
constexpr size_t kMaxBatchBytes = 800'000;

// A call of the logger as queued: metrics/params/tags (consumed from the front as batches are cut), a run
// status, or an upload.
struct Queued : QueuedCall {
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

// The request of the call(s) at the front of `queue`: an update, an upload, or one log-batch of the
// consecutive metrics, params and tags that fit.
json take_request(CallQueue& queue, const RunInfo& run) {
  Queued& front = static_cast<Queued&>(*queue.front());  // RunLogger queues Queued calls only
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
  while (!queue.empty()) {
    Queued& q = static_cast<Queued&>(*queue.front());
    if (q.kind != Queued::Kind::kBatch || !b.take(q)) break;
    queue.pop_front();
  }
  return detail::batch_request(run.run_id, detail::batch_body(run.run_id, b.metrics, b.params, b.tags));
}

}  // namespace

struct RunLogger::State {
  RunInfo run;
  Delivery delivery;

  State(MlflowClient client, RunInfo r, RunLoggerOptions options)
      : run(std::move(r)),
        delivery(
            std::make_unique<detail::MlflowCourier>(std::move(client)),
            [this](CallQueue& queue) { return take_request(queue, run); }, std::move(options)) {}
  void push(Queued q) { delivery.push(std::make_unique<Queued>(std::move(q))); }
};

RunLogger::RunLogger(MlflowClient client, RunInfo run, RunLoggerOptions options)
    : state_(std::make_unique<State>(std::move(client), std::move(run), std::move(options))) {}

RunLogger::~RunLogger() = default;  // the Delivery's close(10)

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
  state_->delivery.close(timeout_s);
}

int64_t RunLogger::spooled() const {
  return state_->delivery.spooled();
}

int64_t RunLogger::sent() const {
  return state_->delivery.sent();
}

double RunLogger::cpu_seconds() const {
  return state_->delivery.cpu_seconds();
}

}  // namespace ranzcr::tracking
