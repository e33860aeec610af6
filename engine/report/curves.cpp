#include "engine/report/curves.h"

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "core/check.h"
#include "engine/io/run_folder.h"
#include "engine/report/draw.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Plot area inside the image: margins for tick labels (left, bottom), the title (top), the legend (right).
constexpr int kLeft = 80, kTop = 50, kRight = 320, kBottom = 60;
using draw::kBackground;
using draw::kGrid;
using draw::kInk;
using draw::palette;
using draw::put_text;
using draw::text_width;
using draw::write_png;

struct Series {
  std::string name;
  std::vector<double> x, y;  // y NaN = no value (a gap in the line)
  cv::Scalar color;
};

struct Chart {
  std::string title, y_label;
  std::vector<Series> series;
  double y_max = INFINITY;  // the axis ends here at the most (AUC: 1)
};

/// The epochs of the metrics file, a column per value; labels in the order of the first record.
struct History {
  std::vector<double> epoch, train_loss, val_loss, auc_mean;
  std::vector<std::string> labels;
  std::map<std::string, std::vector<double>> auc;  // label -> value per epoch
};

double number_or_nan(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : kNaN;
}

History read_history(const std::string& path) {
  History h;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("epoch")) continue;
    h.epoch.push_back(number_or_nan(j, "epoch"));
    h.train_loss.push_back(number_or_nan(j, "train_loss"));
    h.val_loss.push_back(number_or_nan(j, "val_loss"));
    h.auc_mean.push_back(number_or_nan(j, "val_auc_mean"));
    const nlohmann::json per_label = j.value("val_auc", nlohmann::json::object());
    for (const auto& item : per_label.items())
      if (!h.auc.count(item.key())) {
        h.labels.push_back(item.key());
        h.auc[item.key()] = std::vector<double>(h.epoch.size() - 1, kNaN);
      }
    for (const auto& label : h.labels)
      h.auc[label].push_back(per_label.contains(label) ? number_or_nan(per_label, label.c_str()) : kNaN);
  }
  return h;
}

/// Axis range [lo, hi] widened to whole multiples of a 1-2-5 tick step (at least `min_step`).
struct Scale {
  double lo = 0, hi = 1, step = 0.2;
};

Scale nice_scale(double lo, double hi, double min_step) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi - lo < 1e-12) lo -= std::max(0.5 * min_step, 0.05 * std::abs(lo) + 1e-3), hi = 2 * hi - lo;
  const double raw = (hi - lo) / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag * (raw / mag <= 1 ? 1 : raw / mag <= 2 ? 2 : raw / mag <= 5 ? 5 : 10);
  step = std::max(step, min_step);
  return Scale{std::floor(lo / step) * step, std::ceil(hi / step) * step, step};
}

std::string tick_label(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::abs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

/// Maps data coordinates to pixels of the plot area.
struct Axes {
  Scale x, y;
  cv::Rect area;
  cv::Point at(double vx, double vy) const {
    const double fx = (vx - x.lo) / (x.hi - x.lo), fy = (vy - y.lo) / (y.hi - y.lo);
    return {area.x + static_cast<int>(std::lround(fx * area.width)),
            area.y + area.height - static_cast<int>(std::lround(fy * area.height))};
  }
};

Axes make_axes(const Chart& chart, const cv::Size& size) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const auto& s : chart.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
    }
  const double pad = std::isfinite(y0) ? 0.05 * (y1 - y0) : 0.0;
  Axes a;
  a.x = nice_scale(x0, x1, /*min_step=*/1.0);
  if (std::isfinite(x1)) a.x.hi = x1 + std::max(0.03 * (x1 - a.x.lo), 0.25);  // ends at the last epoch
  a.y = nice_scale(y0 - pad, std::min(y1 + pad, chart.y_max), /*min_step=*/0.0);
  if (std::isfinite(y1)) a.y.hi = std::min(a.y.hi, std::max(chart.y_max, y1));
  a.area = cv::Rect(kLeft, kTop, size.width - kLeft - kRight, size.height - kTop - kBottom);
  return a;
}

void draw_axes(cv::Mat& img, const Axes& a, const Chart& chart) {
  const cv::Rect& r = a.area;
  for (double v = a.y.lo; v <= a.y.hi + 1e-6 * a.y.step; v += a.y.step) {
    const int py = a.at(a.x.lo, v).y;
    cv::line(img, {r.x, py}, {r.x + r.width, py}, kGrid, 1);
    cv::line(img, {r.x - 5, py}, {r.x, py}, kInk, 1);
    const std::string label = tick_label(v, a.y.step);
    put_text(img, label, {r.x - 9 - text_width(label), py + 5});
  }
  for (double v = a.x.lo; v <= a.x.hi + 1e-6 * a.x.step; v += a.x.step) {
    const int px = a.at(v, a.y.lo).x;
    cv::line(img, {px, r.y + r.height}, {px, r.y + r.height + 5}, kInk, 1);
    const std::string label = tick_label(v, a.x.step);
    put_text(img, label, {px - text_width(label) / 2, r.y + r.height + 22});
  }
  cv::rectangle(img, r, kInk, 1);
  put_text(img, "epoch", {r.x + r.width / 2 - text_width("epoch") / 2, r.y + r.height + 48});
  put_text(img, chart.y_label, {10, r.y - 12});
  put_text(img, chart.title, {r.x + r.width / 2 - text_width(chart.title, 0.7) / 2, 30}, 0.7);
}

void draw_series(cv::Mat& img, const Axes& a, const Series& s) {
  for (size_t i = 0; i < s.x.size(); ++i) {
    if (!std::isfinite(s.y[i])) continue;
    const cv::Point p = a.at(s.x[i], s.y[i]);
    cv::circle(img, p, 3, s.color, cv::FILLED, cv::LINE_AA);
    if (i > 0 && std::isfinite(s.y[i - 1]))
      cv::line(img, a.at(s.x[i - 1], s.y[i - 1]), p, s.color, 2, cv::LINE_AA);
  }
}

void draw_legend(cv::Mat& img, const std::vector<Series>& series) {
  const int x = img.cols - kRight + 20, row = 22;
  int y = kTop + 10;
  for (const auto& s : series) {
    if (y + row > img.rows - 10) break;  // more labels than rows: the rest are left out
    cv::line(img, {x, y}, {x + 24, y}, s.color, 2, cv::LINE_AA);
    put_text(img, s.name, {x + 32, y + 5}, 0.45);
    y += row;
  }
}

cv::Mat render(const Chart& chart) {
  cv::Mat img(kCurvesHeight, kCurvesWidth, CV_8UC3, kBackground);
  const Axes axes = make_axes(chart, img.size());
  draw_axes(img, axes, chart);
  for (const auto& s : chart.series) draw_series(img, axes, s);
  draw_legend(img, chart.series);
  return img;
}

std::vector<Chart> charts(const History& h) {
  const auto& colors = palette();
  Chart loss{"Loss per epoch",
             "loss",
             {{"train", h.epoch, h.train_loss, colors[0]}, {"validation", h.epoch, h.val_loss, colors[1]}}};
  Chart auc{
      "Mean validation ROC AUC per epoch", "AUC", {{"validation mean", h.epoch, h.auc_mean, colors[2]}}, 1.0};
  Chart per_label{"Validation ROC AUC per label", "AUC", {}, 1.0};
  for (size_t k = 0; k < h.labels.size(); ++k)
    per_label.series.push_back({h.labels[k], h.epoch, h.auc.at(h.labels[k]), colors[k % colors.size()]});
  return {loss, auc, per_label};
}

class CurvesWriter : public MetricsWriter {
 public:
  explicit CurvesWriter(std::string run_dir) : run_dir_(std::move(run_dir)) {}
  void epoch(const EpochRecord&) override { write_curves(run_dir_); }

 private:
  std::string run_dir_;
};

}  // namespace

std::vector<std::string> write_curves(const std::string& run_dir) {
  const std::string metrics = run_folder::metrics_file(run_dir);
  RANZCR_CHECK(fs::is_regular_file(metrics), "no ", run_folder::kMetrics, " in ", run_dir,
               " (not a run folder, or no epoch has finished there yet)");
  const std::vector<Chart> all = charts(read_history(metrics));
  const std::vector<std::string> paths = run_folder::curves_files(run_dir);
  assert(paths.size() == all.size());
  for (size_t i = 0; i < all.size(); ++i) write_png(paths[i], render(all[i]));
  return paths;
}

std::unique_ptr<MetricsWriter> make_curves_writer(const std::string& run_dir) {
  return std::make_unique<CurvesWriter>(run_dir);
}

}  // namespace ranzcr
