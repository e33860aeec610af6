#include "engine/report/threshold_report.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/check.h"
#include "data/csv.h"
#include "engine/report/draw.h"
#include "engine/report/metrics.h"

namespace ranzcr {
namespace {

// A panel: the plot square and the text above it.
constexpr int kPanelWidth = 330, kPanelHeight = 350, kPlotSide = 240, kPlotLeft = 60, kPlotTop = 70;
constexpr int kColumns = 4;

std::string fixed(double v, int decimals) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// A threshold that reads back as the same double ("inf" for +inf).
std::string exact(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Maps [0, 1] x [0, 1] to the plot square of the panel whose top-left corner is `origin`.
struct Square {
  cv::Point origin;
  cv::Point at(double x, double y) const {
    return {
        origin.x + kPlotLeft + static_cast<int>(std::lround(std::clamp(x, 0.0, 1.0) * kPlotSide)),
        origin.y + kPlotTop + kPlotSide - static_cast<int>(std::lround(std::clamp(y, 0.0, 1.0) * kPlotSide))};
  }
};

void dashed_line(cv::Mat& img, cv::Point a, cv::Point b, const cv::Scalar& color) {
  const double length = std::hypot(b.x - a.x, b.y - a.y);
  const int dashes = std::max(1, static_cast<int>(length / 8));
  for (int i = 0; i < dashes; i += 2) {
    const double t0 = static_cast<double>(i) / dashes, t1 = std::min(1.0, (i + 1.0) / dashes);
    cv::line(img, a + (b - a) * t0, a + (b - a) * t1, color, 1, cv::LINE_AA);
  }
}

// Grid, frame, ticks at 0, 0.5 and 1, axis names, the two title lines and the class counts (bottom right).
void draw_frame(cv::Mat& img, const Square& sq, const std::string& x_name, const std::string& y_name,
                const std::string& title, const std::string& subtitle, const std::string& counts) {
  for (int k = 0; k <= 5; ++k) {
    const double v = k / 5.0;
    cv::line(img, sq.at(v, 0), sq.at(v, 1), draw::kGrid, 1);
    cv::line(img, sq.at(0, v), sq.at(1, v), draw::kGrid, 1);
  }
  cv::rectangle(img, sq.at(0, 1), sq.at(1, 0), draw::kInk, 1);
  for (double v : {0.0, 0.5, 1.0}) {
    const std::string t = fixed(v, v == 0.5 ? 1 : 0);
    draw::put_text(img, t, sq.at(v, 0) + cv::Point(-draw::text_width(t, 0.4) / 2, 16), 0.4);
    draw::put_text(img, t, sq.at(0, v) + cv::Point(-8 - draw::text_width(t, 0.4), 4), 0.4);
  }
  draw::put_text(img, x_name, sq.at(0.5, 0) + cv::Point(-draw::text_width(x_name, 0.45) / 2, 34), 0.45);
  draw::put_text(img, y_name, sq.at(0, 1) + cv::Point(-kPlotLeft + 6, -8), 0.45);
  draw::put_text(img, counts, sq.at(1, 0) + cv::Point(-6 - draw::text_width(counts, 0.4), -8), 0.4);
  std::string shown = title;
  while (shown.size() > 4 && draw::text_width(shown, 0.55) > kPanelWidth - 20)
    shown = shown.substr(0, shown.size() - 4) + "..";
  draw::put_text(img, shown, sq.origin + cv::Point(10, 24), 0.55);
  draw::put_text(img, subtitle, sq.origin + cv::Point(10, 46), 0.45);
}

// The curve through (x, y); `steps`: as matplotlib's steps-post (PR curves, as scikit-learn draws them).
void draw_curve(cv::Mat& img, const Square& sq, const std::vector<double>& x, const std::vector<double>& y,
                const cv::Scalar& color, bool steps = false) {
  std::vector<cv::Point> points;
  for (size_t i = 0; i < x.size(); ++i) {
    points.push_back(sq.at(x[i], y[i]));
    if (steps && i + 1 < x.size()) points.push_back(sq.at(x[i + 1], y[i]));
  }
  cv::polylines(img, std::vector<std::vector<cv::Point>>{points}, false, color, 2, cv::LINE_AA);
}

void mark_point(cv::Mat& img, const Square& sq, double x, double y, double threshold) {
  const cv::Point p = sq.at(x, y);
  const cv::Scalar red(40, 39, 214);
  cv::circle(img, p, 5, red, cv::FILLED, cv::LINE_AA);
  const std::string t = "t=" + fixed(threshold, 3);
  const int dx = x > 0.6 ? -12 - draw::text_width(t, 0.42) : 10;
  draw::put_text(img, t, p + cv::Point(dx, y > 0.9 ? 18 : -8), 0.42, red);
}

// The panels of every label: `draw_panel(img, square, label index)` draws one.
template <class Draw>
cv::Mat panels(size_t count, Draw&& draw_panel) {
  const int columns = static_cast<int>(std::min<size_t>(kColumns, std::max<size_t>(count, 1)));
  const int rows = static_cast<int>((count + columns - 1) / columns);
  cv::Mat img(std::max(1, rows) * kPanelHeight, columns * kPanelWidth, CV_8UC3, draw::kBackground);
  for (size_t k = 0; k < count; ++k)
    draw_panel(
        img,
        Square{{static_cast<int>(k % columns) * kPanelWidth, static_cast<int>(k / columns) * kPanelHeight}},
        k);
  return img;
}

std::string counts(const LabelRocSummary& s) {
  return std::to_string(s.positives) + " pos / " + std::to_string(s.negatives) + " neg";
}

const OperatingPoint* youden(const LabelRocSummary& s) {
  return s.points.empty() ? nullptr : &s.points.front();
}

}  // namespace

std::vector<LabelRocSummary> summarize_roc(const std::vector<LabelScores>& labels, int bootstrap,
                                           uint64_t seed) {
  std::vector<LabelRocSummary> out;
  for (size_t k = 0; k < labels.size(); ++k) {
    const LabelScores& l = labels[k];
    LabelRocSummary s;
    s.name = l.name;
    s.positives = std::count_if(l.labels.begin(), l.labels.end(), [](float v) { return v > 0.5f; });
    s.negatives = static_cast<int64_t>(l.labels.size()) - s.positives;
    s.auc = roc_auc(l.scores, l.labels);
    if (s.auc) {
      s.average_precision = average_precision(l.scores, l.labels);
      s.auc_ci = bootstrap_auc_interval(l.scores, l.labels, bootstrap, seed + k);
      s.points = operating_points(l.scores, l.labels);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string operating_points_csv(const std::vector<LabelRocSummary>& summaries) {
  std::ostringstream csv;
  csv << "label,point,threshold,sensitivity,specificity,ppv,npv,auc,auc_ci_low,auc_ci_high,average_precision,"
         "positives,negatives\n";
  for (const auto& s : summaries)
    for (const auto& p : s.points)
      csv << csv_escape(s.name) << "," << p.name << "," << exact(p.threshold) << ","
          << fixed(p.sensitivity, 6) << "," << fixed(p.specificity, 6) << "," << fixed(p.ppv, 6) << ","
          << fixed(p.npv, 6) << "," << fixed(*s.auc, 6) << "," << (s.auc_ci ? fixed(s.auc_ci->low, 6) : "")
          << "," << (s.auc_ci ? fixed(s.auc_ci->high, 6) : "") << ","
          << fixed(s.average_precision.value_or(NAN), 6) << "," << s.positives << "," << s.negatives << "\n";
  return csv.str();
}

void write_roc_png(const std::string& path, const std::vector<LabelScores>& labels,
                   const std::vector<LabelRocSummary>& summaries) {
  const cv::Mat img = panels(labels.size(), [&](cv::Mat& im, const Square& sq, size_t k) {
    const LabelRocSummary& s = summaries[k];
    std::string sub = "undefined: one class only";
    if (s.auc)
      sub = "AUC " + fixed(*s.auc, 3) +
            (s.auc_ci ? " (95% CI " + fixed(s.auc_ci->low, 3) + "-" + fixed(s.auc_ci->high, 3) + ")" : "");
    draw_frame(im, sq, "1 - specificity", "sensitivity", s.name, sub, counts(s));
    if (!s.auc) return;
    dashed_line(im, sq.at(0, 0), sq.at(1, 1), cv::Scalar(150, 150, 150));
    const RocCurve roc = roc_curve(labels[k].scores, labels[k].labels, /*drop_intermediate=*/true);
    draw_curve(im, sq, roc.fpr, roc.tpr, draw::palette()[k % draw::palette().size()]);
    if (const OperatingPoint* p = youden(s))
      mark_point(im, sq, 1 - p->specificity, p->sensitivity, p->threshold);
  });
  draw::write_png(path, img);
}

void write_pr_png(const std::string& path, const std::vector<LabelScores>& labels,
                  const std::vector<LabelRocSummary>& summaries) {
  const cv::Mat img = panels(labels.size(), [&](cv::Mat& im, const Square& sq, size_t k) {
    const LabelRocSummary& s = summaries[k];
    const double prevalence =
        s.positives + s.negatives > 0
            ? static_cast<double>(s.positives) / static_cast<double>(s.positives + s.negatives)
            : 0.0;
    const std::string sub =
        s.average_precision ? "AP " + fixed(*s.average_precision, 3) + ", prevalence " + fixed(prevalence, 3)
                            : "undefined: one class only";
    draw_frame(im, sq, "recall (sensitivity)", "precision (PPV)", s.name, sub, counts(s));
    if (!s.average_precision) return;
    dashed_line(im, sq.at(0, prevalence), sq.at(1, prevalence), cv::Scalar(150, 150, 150));
    const PrCurve pr = precision_recall_curve(labels[k].scores, labels[k].labels);
    draw_curve(im, sq, pr.recall, pr.precision, draw::palette()[k % draw::palette().size()], /*steps=*/true);
    if (const OperatingPoint* p = youden(s); p && !std::isnan(p->ppv))
      mark_point(im, sq, p->sensitivity, p->ppv, p->threshold);
  });
  draw::write_png(path, img);
}

std::map<std::string, double> read_thresholds(const std::string& path, const std::string& point) {
  const CsvTable t = read_csv(path);
  const int label = t.column("label"), name = t.column("point"), threshold = t.column("threshold");
  RANZCR_CHECK(label >= 0 && name >= 0 && threshold >= 0, path,
               " is not an operating_points.csv (expected the columns label, point and "
               "threshold, as evaluate writes them)");
  std::map<std::string, double> out;
  std::vector<std::string> points;
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const auto& row = t.rows[r];
    if (std::find(points.begin(), points.end(), row[name]) == points.end()) points.push_back(row[name]);
    if (row[name] != point) continue;
    const std::string& v = row[threshold];
    char* end = nullptr;
    const double x = v == "inf" ? std::numeric_limits<double>::infinity() : std::strtod(v.c_str(), &end);
    if (v != "inf" && (v.empty() || *end != '\0' || !std::isfinite(x)))
      RANZCR_FAIL(path, ":", t.row_lines[r], ": threshold '", v, "' is not a number");
    out[row[label]] = x;
  }
  if (out.empty()) {
    std::string known;
    for (const auto& p : points) known += (known.empty() ? "" : ", ") + p;
    RANZCR_FAIL(path, " has no '", point, "' rows (it has: ", known.empty() ? "none" : known, ")");
  }
  return out;
}

}  // namespace ranzcr
