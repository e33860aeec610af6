#include "engine/report/curves.h"

#include <gtest/gtest.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "tests/test_util.h"

namespace ranzcr {
namespace {

// Pixels that are not the white background.
int64_t drawn_pixels(const cv::Mat& img) {
  cv::Mat gray;
  cv::cvtColor(img, gray, cv::COLOR_BGR2GRAY);
  return cv::countNonZero(gray < 250);
}

// Pixels of a strongly coloured ink (the series lines; axes and text are grey).
int64_t coloured_pixels(const cv::Mat& img) {
  int64_t n = 0;
  for (int y = 0; y < img.rows; ++y)
    for (int x = 0; x < img.cols; ++x) {
      const auto p = img.at<cv::Vec3b>(y, x);
      n += std::max({p[0], p[1], p[2]}) - std::min({p[0], p[1], p[2]}) > 80;
    }
  return n;
}

void expect_curves(const std::vector<std::string>& paths) {
  ASSERT_EQ(paths.size(), 3u);
  for (const auto& path : paths) {
    const cv::Mat img = cv::imread(path, cv::IMREAD_COLOR);
    ASSERT_FALSE(img.empty()) << path;
    EXPECT_EQ(img.cols, kCurvesWidth) << path;
    EXPECT_EQ(img.rows, kCurvesHeight) << path;
    EXPECT_GT(drawn_pixels(img), 2000) << path;
    EXPECT_GT(coloured_pixels(img), 50) << path;  // the series and their legend
  }
}

TEST(CurvesTest, DrawsEveryCurveFromMetricsJsonl) {
  test::TempDir dir;
  test::write_file(
      dir / "metrics.jsonl",
      R"({"epoch":1,"train_loss":0.69,"val_loss":0.65,"val_auc_mean":0.6,"val_auc":{"a":0.55,"b":null,"c":0.7}})"
      "\n"
      R"({"epoch":2,"train_loss":0.5,"val_loss":0.52,"val_auc_mean":0.75,"val_auc":{"a":0.7,"b":0.8,"c":0.75}})"
      "\nnot json\n"
      R"({"epoch":3,"train_loss":0.4,"val_loss":0.45,"val_auc_mean":null,"val_auc":{"a":0.8,"b":0.85,"c":0.9}})"
      "\n");
  const auto paths = write_curves(dir.str());
  EXPECT_EQ(std::filesystem::path(paths[0]).filename(), "curves_loss.png");
  expect_curves(paths);
}

TEST(CurvesTest, OneEpochAndConstantValuesStillDraw) {
  test::TempDir dir;
  test::write_file(dir / "metrics.jsonl",
                   R"({"epoch":1,"train_loss":0.5,"val_loss":0.5,"val_auc_mean":1.0,"val_auc":{"a":1.0}})"
                   "\n");
  expect_curves(write_curves(dir.str()));
}

TEST(CurvesTest, NoMetricsIsAnError) {
  test::TempDir dir;
  EXPECT_THROW(write_curves(dir.str()), std::runtime_error);
  EXPECT_FALSE(std::filesystem::exists(dir / "curves_loss.png"));
}

}  // namespace
}  // namespace ranzcr
