#include "engine/serve/serve_metrics.h"

#include <cstdio>
#include <sstream>

namespace ranzcr {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string join_labels(const std::string& a, const std::string& b) {
  return a.empty() ? b : (b.empty() ? a : a + "," + b);
}

const std::vector<double> kLatencyBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,  0.5,    1,     2.5,  5,     10};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t b = 0;
  while (b < bounds_.size() && value > bounds_[b]) ++b;
  ++counts_[b];
  sum_ += value;
  ++count_;
}

std::string Histogram::text(const std::string& name, const std::string& labels) const {
  std::ostringstream out;
  long long cumulative = 0;
  for (size_t b = 0; b <= bounds_.size(); ++b) {
    cumulative += counts_[b];
    const std::string le = b < bounds_.size() ? number(bounds_[b]) : "+Inf";
    out << name << "_bucket{" << join_labels(labels, "le=\"" + le + "\"") << "} " << cumulative << "\n";
  }
  const std::string braces = labels.empty() ? "" : "{" + labels + "}";
  out << name << "_sum" << braces << " " << number(sum_) << "\n";
  out << name << "_count" << braces << " " << count_ << "\n";
  return out.str();
}

ServeMetrics::ServeMetrics() : batch_size_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void ServeMetrics::request(const std::string& endpoint, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{endpoint, status}];
  latency_.try_emplace(endpoint, kLatencyBounds).first->second.observe(seconds);
}

void ServeMetrics::batch(int size) {
  std::lock_guard<std::mutex> lock(mutex_);
  batch_size_.observe(size);
}

void ServeMetrics::decoded(const std::string& format) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++decoded_[format];
}

void ServeMetrics::error(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++errors_[kind];
}

void ServeMetrics::limit(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++limits_[kind];
}

std::string ServeMetrics::text(int queue_length) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream out;
  out << "# HELP ranzcr_serve_requests_total Requests answered, by endpoint and HTTP status.\n"
      << "# TYPE ranzcr_serve_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out << "ranzcr_serve_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} "
        << n << "\n";
  out << "# HELP ranzcr_serve_request_seconds Time from the request's arrival to its answer, by endpoint.\n"
      << "# TYPE ranzcr_serve_request_seconds histogram\n";
  for (const auto& [endpoint, h] : latency_)
    out << h.text("ranzcr_serve_request_seconds", "endpoint=\"" + endpoint + "\"");
  out << "# HELP ranzcr_serve_batch_size Images per model batch.\n"
      << "# TYPE ranzcr_serve_batch_size histogram\n"
      << batch_size_.text("ranzcr_serve_batch_size", "");
  out << "# HELP ranzcr_serve_queue_length Requests waiting for the models now.\n"
      << "# TYPE ranzcr_serve_queue_length gauge\n"
      << "ranzcr_serve_queue_length " << queue_length << "\n";
  out << "# HELP ranzcr_serve_images_decoded_total Uploaded images decoded, by format.\n"
      << "# TYPE ranzcr_serve_images_decoded_total counter\n";
  for (const auto& [format, n] : decoded_)
    out << "ranzcr_serve_images_decoded_total{format=\"" << format << "\"} " << n << "\n";
  out << "# HELP ranzcr_serve_errors_total Requests refused or failed, by kind.\n"
      << "# TYPE ranzcr_serve_errors_total counter\n";
  for (const auto& [kind, n] : errors_)
    out << "ranzcr_serve_errors_total{kind=\"" << kind << "\"} " << n << "\n";
  out << "# HELP ranzcr_serve_limits_total Limits breached (deadlines, sizes, connection cap, queue), by "
         "kind.\n"
      << "# TYPE ranzcr_serve_limits_total counter\n";
  for (const auto& [kind, n] : limits_)
    out << "ranzcr_serve_limits_total{kind=\"" << kind << "\"} " << n << "\n";
  out << "# HELP ranzcr_serve_connections_open Client connections open now.\n"
      << "# TYPE ranzcr_serve_connections_open gauge\n"
      << "ranzcr_serve_connections_open " << connections_open_.load() << "\n"
      << "# HELP ranzcr_serve_connections_total Client connections accepted (not those refused at the cap).\n"
      << "# TYPE ranzcr_serve_connections_total counter\n"
      << "ranzcr_serve_connections_total " << connections_total_.load() << "\n";
  return out.str();
}

}  // namespace ranzcr
