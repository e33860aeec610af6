// serve's /metrics: counters and histograms in the Prometheus text exposition format (version 0.0.4).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ranzcr {

/// A Prometheus histogram: cumulative bucket counts, sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  /// NAME_bucket{LABELS,le=".."} ..., NAME_sum, NAME_count (LABELS: `a="b",...` or "").
  std::string text(const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<long long> counts_;  // per bucket, not cumulative (+Inf last)
  double sum_ = 0;
  long long count_ = 0;
};

class ServeMetrics {
 public:
  ServeMetrics();
  void request(const std::string& endpoint, int status, double seconds);
  void batch(int size);
  void decoded(const std::string& format);
  void error(const std::string& kind);
  /// The exposition text; `queue_length` is read by the caller at the time of the scrape.
  std::string text(int queue_length) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, long long> requests_;
  std::map<std::string, Histogram> latency_;  // per endpoint
  Histogram batch_size_;
  std::map<std::string, long long> decoded_, errors_;
};

}  // namespace ranzcr
