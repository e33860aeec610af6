#include "data/annotations.h"

#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "data/batch_loader.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using test::TempDir;
using test::write_file;

TEST(Annotations, ParsesPolylines) {
  const Polyline p = parse_polyline("[[1, 2], [3.5, -4e1],[ 5 ,6 ]]");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[1], cv::Point2d(3.5, -40.0));
  for (const char* bad :
       {"", "[]", "[[1, 2]", "[[1], [2, 3]]", "[[1, x]]", "[[1, 2]] 7", "[[nan, 1]]", "[[1e12, 1]]", "1, 2"})
    EXPECT_THROW(parse_polyline(bad), std::invalid_argument) << bad;
}

DatasetIndex two_images() {
  DatasetIndex index;
  index.ids = {"a", "b"};
  index.groups = {"", ""};
  index.image_paths = {"a.png", "b.png"};
  return index;
}

TEST(Annotations, BadRowsAreErrorsNamingTheLineOrSkipped) {
  TempDir dir;
  const std::string csv = dir / "ann.csv";
  write_file(csv,
             "StudyInstanceUID,label,data\n"
             "a,ETT - Normal,\"[[1, 2], [3, 4]]\"\n"
             "zz,ETT - Normal,\"[[1, 2]]\"\n"
             "b,NGT - Normal,\"[[1, 2], [3]]\"\n"
             "a,CVC - Normal,\"[[5, 6]]\"\n");
  try {
    load_annotations(csv, two_images(), "StudyInstanceUID", false);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(csv + ":3: unknown id 'zz'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("data.skip_bad_annotations"), std::string::npos) << e.what();
  }
  write_file(dir / "bad.csv", "StudyInstanceUID,label,data\nb,NGT - Normal,\"[[1, 2], [3]]\"\n");
  try {
    load_annotations(dir / "bad.csv", two_images(), "StudyInstanceUID", false);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "bad.csv" + ":2: malformed polyline"), std::string::npos)
        << e.what();
  }
  const ImageAnnotations a = load_annotations(csv, two_images(), "StudyInstanceUID", true);
  EXPECT_EQ(a.rows, 2);
  EXPECT_EQ(a.skipped_rows, 2);
  EXPECT_EQ(a.by_row[0].size(), 2u);
  EXPECT_TRUE(a.by_row[1].empty());
  EXPECT_EQ(a.annotated_images(), 1);
  write_file(dir / "nocol.csv", "StudyInstanceUID,label\na,x\n");
  EXPECT_THROW(load_annotations(dir / "nocol.csv", two_images(), "StudyInstanceUID", true),
               std::runtime_error);
}

TEST(Annotations, MaskMapsTheOriginalImagesCoordinates) {
  // A point at the centre of a 256-px image lands at the centre of a 64-px mask.
  const cv::Mat m = rasterize_mask({{{127.5, 20.0}, {127.5, 235.0}}}, cv::Size(256, 256), 64);
  EXPECT_EQ(mask_line_thickness(64), 1);
  EXPECT_EQ(m.at<uint8_t>(32, 31) + m.at<uint8_t>(32, 32), 255);
  EXPECT_EQ(cv::countNonZero(m.col(31)) + cv::countNonZero(m.col(32)), cv::countNonZero(m));
}

// The loader's masks go through exactly the image's geometric augmentation: the images here are the
// masks themselves (drawn by the same rasteriser at the network size, saved losslessly), so each
// transformed image thresholded at 128 must equal its transformed mask pixel for pixel.
TEST(Annotations, LoaderMasksFollowTheImagesFlipAndRotationExactly) {
  TempDir dir;
  constexpr int kSize = 64, kImages = 12;
  DatasetIndex index;
  auto annotations = std::make_shared<ImageAnnotations>();
  for (int i = 0; i < kImages; ++i) {
    const std::vector<Polyline> devices = {
        {{10.0 + i, 3.0}, {30.0, 25.0 + i}, {50.0 - i, 60.0}},
        {{5.0, 40.0 + i}, {58.0, 44.0 - 2 * i}},
    };
    index.ids.push_back("img" + std::to_string(i));
    index.groups.push_back("");
    index.image_paths.push_back(dir / index.ids.back() + ".png");
    ASSERT_TRUE(
        cv::imwrite(index.image_paths.back(), rasterize_mask(devices, cv::Size(kSize, kSize), kSize)));
    annotations->by_row.push_back(i == 3 ? std::vector<Polyline>{} : devices);  // one image without
  }
  TransformOptions t;
  t.image_size = kSize;
  t.train = true;
  t.augment.rotate_deg = 20.0;
  t.augment.shift = 0.1;
  t.augment.scale = 0.1;
  t.seed = 5;
  LoaderOptions lo;
  lo.batch_size = kImages;
  lo.num_workers = 2;
  lo.uint8_images = true;  // the 8-bit images after the geometric transform, before brightness/contrast
  lo.annotations = annotations;
  std::vector<int64_t> rows(kImages);
  for (int i = 0; i < kImages; ++i) rows[i] = i;
  BatchLoader loader(index, rows, ImageTransform(t), /*epoch=*/2, lo);
  const Batch b = *loader.next();
  ASSERT_EQ(b.masks.sizes(), torch::IntArrayRef({kImages, 1, kSize, kSize}));
  ASSERT_EQ(b.masks.scalar_type(), torch::kUInt8);
  int flipped = 0;
  for (int i = 0; i < kImages; ++i) {
    const torch::Tensor image_mask = (b.images[i] > 127).to(torch::kUInt8);
    if (i == 3) {
      EXPECT_EQ(b.has_annotation[i].item<float>(), 0.0f);
      EXPECT_EQ(b.masks[i].sum().item<int64_t>(), 0);
      continue;
    }
    EXPECT_EQ(b.has_annotation[i].item<float>(), 1.0f);
    EXPECT_GT(b.masks[i].sum().item<int64_t>(), 50) << i;
    EXPECT_TRUE(torch::equal(b.masks[i], image_mask)) << "image " << i;
    const Geometry g = ImageTransform(t).transform_u8(cv::Mat::zeros(kSize, kSize, CV_8UC1), 2, i).geometry;
    flipped += g.flip ? 1 : 0;
    EXPECT_NE(g.angle, 0.0);
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, kImages - 1);
}

TEST(Annotations, TransformMaskIsTheImagesGeometryThresholded) {
  cv::Mat picture = rasterize_mask({{{3.0, 7.0}, {40.0, 30.0}, {12.0, 60.0}}}, cv::Size(64, 64), 64);
  Geometry g;
  g.angle = 13.0, g.scale = 1.07, g.tx = 3.5, g.ty = -2.0, g.flip = true;
  cv::Mat expected;
  cv::threshold(apply_geometry(picture, g), expected, 127, 1, cv::THRESH_BINARY);
  const cv::Mat got = transform_mask(picture, g);
  EXPECT_EQ(cv::countNonZero(got != expected), 0);
  EXPECT_GT(cv::countNonZero(got), 50);
  // and the flip is a flip: without it the mask is the mirror image
  Geometry unflipped = g;
  unflipped.flip = false;
  cv::Mat mirrored;
  cv::flip(transform_mask(picture, unflipped), mirrored, 1);
  EXPECT_EQ(cv::countNonZero(got != mirrored), 0);
}

}  // namespace
}  // namespace ranzcr
