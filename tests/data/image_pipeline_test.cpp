#include "data/image_pipeline.h"

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "tests/test_util.h"

namespace ranzcr {
namespace {

cv::Mat gradient(int w, int h) {
  cv::Mat m(h, w, CV_8U);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) m.at<uchar>(y, x) = static_cast<uchar>((x + 2 * y) % 256);
  return m;
}

TEST(ImagePipeline, ReducedJpegDecodeWhenSourceIsAtLeastTwiceTheTarget) {
  test::TempDir dir;
  ASSERT_TRUE(cv::imwrite(dir / "a.jpg", gradient(400, 300)));
  EXPECT_EQ(decode_grayscale(dir / "a.jpg", 100).size(), cv::Size(200, 150));  // 1/2: 150 >= 100
  EXPECT_EQ(decode_grayscale(dir / "a.jpg", 70).size(), cv::Size(100, 75));    // 1/4
  EXPECT_EQ(decode_grayscale(dir / "a.jpg", 200).size(), cv::Size(400, 300));  // 300 < 2 * 200: full
  ASSERT_TRUE(cv::imwrite(dir / "a.png", gradient(400, 300)));
  const cv::Mat png = decode_grayscale(dir / "a.png", 100);
  EXPECT_EQ(png.size(), cv::Size(400, 300));
  EXPECT_EQ(png.type(), CV_8UC1);
}

TEST(ImagePipeline, CorruptTruncatedAndMissingFilesAreErrors) {
  test::TempDir dir;
  ASSERT_TRUE(cv::imwrite(dir / "a.jpg", gradient(64, 64)));
  const std::string bytes = test::read_file(dir / "a.jpg");
  test::write_file(dir / "trunc.jpg", bytes.substr(0, bytes.size() / 2));
  test::write_file(dir / "junk.jpg", "this is not an image at all");
  for (const char* name : {"trunc.jpg", "junk.jpg", "missing.jpg"}) {
    EXPECT_THROW(decode_grayscale(dir / name, 32), std::runtime_error) << name;
  }
  try {
    decode_grayscale(dir / "trunc.jpg", 32);
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
}

TEST(ImagePipeline, EvalTransformIsAPlainResizeToUnitRange) {
  const cv::Mat src = gradient(128, 128);
  TransformOptions o;
  o.image_size = 64;
  const cv::Mat out = ImageTransform(o)(src, 0, 0);
  ASSERT_EQ(out.type(), CV_32FC1);
  ASSERT_EQ(out.size(), cv::Size(64, 64));
  cv::Mat expected;
  cv::resize(src, expected, cv::Size(64, 64), 0, 0, cv::INTER_AREA);
  expected.convertTo(expected, CV_32F, 1.0 / 255.0);
  EXPECT_LT(cv::norm(out, expected, cv::NORM_INF), 1e-6);
}

TEST(ImagePipeline, TrainAugmentationIsDeterministicPerEpochAndIndex) {
  const cv::Mat src = gradient(96, 96);
  TransformOptions o;
  o.image_size = 48;
  o.train = true;
  o.seed = 11;
  const ImageTransform t(o);
  const cv::Mat a = t(src, 2, 5), b = t(src, 2, 5), c = t(src, 3, 5), d = t(src, 2, 6);
  EXPECT_EQ(cv::norm(a, b, cv::NORM_INF), 0.0);
  EXPECT_GT(cv::norm(a, c, cv::NORM_INF), 0.0);
  EXPECT_GT(cv::norm(a, d, cv::NORM_INF), 0.0);
  double lo, hi;
  cv::minMaxLoc(a, &lo, &hi);
  EXPECT_GE(lo, 0.0);
  EXPECT_LE(hi, 1.0);
  EXPECT_EQ(a.size(), cv::Size(48, 48));
}

}  // namespace
}  // namespace ranzcr
