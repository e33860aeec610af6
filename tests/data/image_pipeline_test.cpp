#include "data/image_pipeline.h"

#include <sys/stat.h>

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

// The file is read in one piece of its size: the pixels are those of cv::imread, and a name that is no
// regular file (a folder reports a size of 2^63 - 1 to a stream) or an empty file is one clear error.
TEST(ImagePipeline, FilesAreReadWholeAndFoldersOrEmptyFilesAreErrors) {
  test::TempDir dir;
  ASSERT_TRUE(cv::imwrite(dir / "a.png", gradient(123, 77)));
  const cv::Mat read = decode_grayscale(dir / "a.png", 64);
  const cv::Mat expected = cv::imread(dir / "a.png", cv::IMREAD_GRAYSCALE);
  ASSERT_EQ(read.size(), expected.size());
  EXPECT_EQ(cv::norm(read, expected, cv::NORM_INF), 0.0);
  test::write_file(dir / "empty.jpg", "");
  ASSERT_EQ(::mkdir((dir / "folder.jpg").c_str(), 0755), 0);
  for (const auto& [name, says] : {std::pair<std::string, std::string>{"empty.jpg", "empty image file"},
                                   {"folder.jpg", "cannot open image"}}) {
    try {
      decode_grayscale(dir / name, 32);
      ADD_FAILURE() << name << " decoded";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
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
