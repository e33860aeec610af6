#include "core/pixel_budget.h"

#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>

#include "data/image_pipeline.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

TEST(PixelBudget, UpTo4096SquaredFreeThenOneBytePer128Pixels) {
  EXPECT_EQ(pixel_count_problem(1, 1, 1), "");
  EXPECT_EQ(pixel_count_problem(4096, 4096, 1), "");  // 16.8 million pixels from any file
  EXPECT_EQ(pixel_count_problem(16384, 1024, 1), "");
  const std::string over = pixel_count_problem(4097, 4096, 131079);  // 4097 * 4096 / 128 = 131104 bytes
  EXPECT_EQ(over,
            "declares 4097 x 4096 pixels in a file of 131079 bytes, expected at least 1 byte per 128 pixels "
            "above 16.8 million pixels (4096 x 4096)");
  EXPECT_EQ(pixel_count_problem(4097, 4096, 131104), "");
  EXPECT_EQ(pixel_count_problem(16384, 16384, 2097152), "");  // 2 MiB: 268 million pixels at 128:1
  EXPECT_NE(pixel_count_problem(16384, 16384, 2097151), "");
}

TEST(PixelBudget, SizesOutsideOneTo16384SquaredAreRefusedWhateverTheFile) {
  const std::string expected = ", expected 1 to 268 million (16384 x 16384)";
  EXPECT_EQ(pixel_count_problem(16385, 16384, uint64_t{1} << 40), "declares 16385 x 16384 pixels" + expected);
  EXPECT_EQ(pixel_count_problem(0, 10, 100), "declares 0 x 10 pixels" + expected);
  EXPECT_EQ(pixel_count_problem(10, -1, 100), "declares 10 x -1 pixels" + expected);
  // width * height would overflow int64
  EXPECT_EQ(pixel_count_problem(int64_t{1} << 40, int64_t{1} << 40, 100),
            "declares 1099511627776 x 1099511627776 pixels" + expected);
}

// A PNG whose IHDR claims 8192 x 8192 in under 100 bytes: one line, before OpenCV allocates the image.
TEST(PixelBudget, TheImageLoaderRefusesASmallPngDeclaringALargeImage) {
  test::TempDir dir;
  ASSERT_TRUE(cv::imwrite(dir / "a.png", cv::Mat(8, 8, CV_8U, cv::Scalar(7))));
  std::string bytes = test::read_file(dir / "a.png");
  ASSERT_EQ(bytes.substr(12, 4), "IHDR");
  const char big[] = {0, 0, 0x20, 0};  // 8192, big-endian
  bytes.replace(16, 4, big, 4);
  bytes.replace(20, 4, big, 4);
  test::write_file(dir / "big.png", bytes);
  try {
    decode_grayscale(dir / "big.png", 64);
    ADD_FAILURE() << "decoded";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "image " + (dir / "big.png") +
                                         " declares 8192 x 8192 pixels in a file of " +
                                         std::to_string(bytes.size()) +
                                         " bytes, expected at least 1 byte per 128 pixels above 16.8 million "
                                         "pixels (4096 x 4096)");
  }
}

}  // namespace
}  // namespace ranzcr
