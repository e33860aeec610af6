// serve's /metrics: counters and histograms in the Prometheus text exposition format (version 0.0.4).
#pragma once

#include <atomic>
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
  /// A limit breached (header_timeout, body_timeout, idle_timeout, write_timeout, connections, header_size,
  /// body_size, queue_full, file_descriptors).
  void limit(const std::string& kind);
  /// A connection accepted (served) and one closed: the open gauge and the accepted counter.
  void connection_opened() { ++connections_open_, ++connections_total_; }
  void connection_closed() { --connections_open_; }
  int connections_open() const { return connections_open_; }
  /// The exposition text; `queue_length` is read by the caller at the time of the scrape.
  std::string text(int queue_length) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, long long> requests_;
  std::map<std::string, Histogram> latency_;  // per endpoint
  Histogram batch_size_;
  std::map<std::string, long long> decoded_, errors_, limits_;
  std::atomic<int> connections_open_{0};
  std::atomic<long long> connections_total_{0};
};

}  // namespace ranzcr
