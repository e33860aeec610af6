#include "engine/report/draw.h"

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/check.h"
#include "core/durable_file.h"

namespace ranzcr::draw {

static_assert(kFont == cv::FONT_HERSHEY_SIMPLEX);

const std::vector<cv::Scalar>& palette() {
  static const std::vector<cv::Scalar> colors{
      {180, 119, 31},  {14, 127, 255},  {44, 160, 44},  {40, 39, 214},  {189, 103, 148}, {75, 86, 140},
      {194, 119, 227}, {127, 127, 127}, {34, 189, 188}, {207, 190, 23}, {128, 0, 0},     {0, 128, 128}};
  return colors;
}

void put_text(cv::Mat& img, const std::string& text, cv::Point org, double scale, const cv::Scalar& color) {
  cv::putText(img, text, org, kFont, scale, color, 1, cv::LINE_AA);
}

int text_width(const std::string& text, double scale) {
  int baseline = 0;
  return cv::getTextSize(text, kFont, scale, 1, &baseline).width;
}

void write_png(const std::string& path, const cv::Mat& img) {
  std::vector<uchar> bytes;
  RANZCR_CHECK(cv::imencode(".png", img, bytes), "cannot encode ", path, " as PNG");
  write_file_atomic(path, std::string(bytes.begin(), bytes.end()));
}

}  // namespace ranzcr::draw
