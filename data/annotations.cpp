#include "data/annotations.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <unordered_map>

#include "core/check.h"
#include "core/printable.h"
#include "data/csv.h"

namespace ranzcr {
namespace {

class PolylineParser {
 public:
  explicit PolylineParser(const std::string& text) : s_(text) {}
  Polyline parse() {
    Polyline points;
    expect('[');
    if (peek() == ']') fail("no points");
    for (;;) {
      expect('[');
      const double x = number();
      expect(',');
      const double y = number();
      expect(']');
      points.emplace_back(x, y);
      if (peek() == ',') {
        ++i_;
        continue;
      }
      expect(']');
      break;
    }
    if (peek() != '\0' || i_ < s_.size()) fail("trailing characters after the closing ']'");
    return points;
  }

 private:
  char peek() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    return i_ < s_.size() ? s_[i_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  double number() {
    peek();
    const char* begin = s_.c_str() + i_;
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(begin, &end);
    if (end == begin || errno != 0 || !std::isfinite(v)) fail("expected a finite number");
    if (std::abs(v) > 1e7) fail("coordinate out of range");
    i_ += static_cast<size_t>(end - begin);
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::invalid_argument("malformed polyline (" + what + " at character " + std::to_string(i_ + 1) +
                                "; expected [[x, y], ...])");
  }
  const std::string& s_;
  size_t i_ = 0;
};

int required_column(const CsvTable& table, const std::string& name, const std::string& path) {
  const int c = table.column(name);
  RANZCR_CHECK(c >= 0, path, ": no column '", printable(name), "' (expected ", printable(name),
               ",label,data)");
  return c;
}

}  // namespace

int64_t ImageAnnotations::annotated_images() const {
  int64_t n = 0;
  for (const auto& devices : by_row) n += devices.empty() ? 0 : 1;
  return n;
}

Polyline parse_polyline(const std::string& text) {
  return PolylineParser(text).parse();
}

ImageAnnotations load_annotations(const std::string& csv_path, const DatasetIndex& index,
                                  const std::string& id_column, bool skip_bad_rows) {
  const CsvTable table = read_csv(csv_path);
  const int id_col = required_column(table, id_column, csv_path);
  required_column(table, "label", csv_path);
  const int data_col = required_column(table, "data", csv_path);
  std::unordered_map<std::string, int64_t> row_of;
  for (size_t r = 0; r < index.size(); ++r) row_of.emplace(index.ids[r], static_cast<int64_t>(r));
  ImageAnnotations out;
  out.by_row.resize(index.size());
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    try {
      const auto it = row_of.find(row[id_col]);
      if (it == row_of.end())
        throw std::invalid_argument("unknown id '" + printable(row[id_col]) +
                                    "' (not in the training table)");
      out.by_row[it->second].push_back(parse_polyline(row[data_col]));
      ++out.rows;
    } catch (const std::invalid_argument& e) {
      if (!skip_bad_rows)
        RANZCR_FAIL(csv_path, ":", table.row_lines[r], ": ", e.what(),
                    " (set data.skip_bad_annotations=true to skip such rows)");
      ++out.skipped_rows;
    }
  }
  return out;
}

int mask_line_thickness(int size) {
  return std::max(1, static_cast<int>(std::lround(size / 64.0)));
}

cv::Mat rasterize_mask(const std::vector<Polyline>& devices, cv::Size original, int size) {
  cv::Mat mask = cv::Mat::zeros(size, size, CV_8UC1);
  constexpr int kShift = 4;  // sub-pixel bits of the drawn coordinates
  const double sx = static_cast<double>(size) / original.width,
               sy = static_cast<double>(size) / original.height;
  for (const Polyline& line : devices) {
    std::vector<cv::Point> points;
    for (const cv::Point2d& p : line)  // cv::resize's mapping of pixel centres
      points.emplace_back(static_cast<int>(std::lround(((p.x + 0.5) * sx - 0.5) * (1 << kShift))),
                          static_cast<int>(std::lround(((p.y + 0.5) * sy - 0.5) * (1 << kShift))));
    cv::polylines(mask, points, /*isClosed=*/false, cv::Scalar(255), mask_line_thickness(size), cv::LINE_8,
                  kShift);
  }
  return mask;
}

std::string annotations_csv_path(const DataConfig& data) {
  return (std::filesystem::path(data.root) / data.annotations_csv).string();
}

}  // namespace ranzcr
