#include "data/batch_loader.h"
#include "engine/runtime/device_batches.h"

#include <chrono>
#include <optional>
#include <thread>

#include "tests/test_util.h"

namespace ranzcr {
namespace {

class BatchLoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::make_dataset(*dir_ / "ds", 10, 64, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  DatasetIndex index() const {
    return load_index(*dir_ / "ds/train.csv", *dir_ / "ds/train", IndexOptions{});
  }
  static ImageTransform transform() {
    TransformOptions o;
    o.image_size = 32;
    return ImageTransform(o);
  }
  static test::TempDir* dir_;
};
test::TempDir* BatchLoaderTest::dir_ = nullptr;

TEST_F(BatchLoaderTest, YieldsBatchesInOrderWithLabels) {
  const DatasetIndex idx = index();
  const std::vector<int64_t> rows = {9, 3, 0, 1, 2, 8, 7, 6, 5, 4};
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 3;
  o.prefetch_batches = 1;
  BatchLoader loader(idx, rows, transform(), 0, o);
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<int64_t> got;
  std::vector<int64_t> sizes;
  while (auto b = loader.next()) {
    sizes.push_back(b->images.size(0));
    EXPECT_EQ(b->images.sizes(), (std::vector<int64_t>{b->images.size(0), 1, 32, 32}));
    EXPECT_GE(b->images.min().item<float>(), 0.0f);
    EXPECT_LE(b->images.max().item<float>(), 1.0f);
    for (int64_t i = 0; i < b->indices.size(0); ++i) {
      const int64_t row = b->indices[i].item<int64_t>();
      got.push_back(row);
      for (size_t k = 0; k < idx.num_labels(); ++k)
        EXPECT_EQ(b->labels[i][k].item<float>(), idx.labels[row * idx.num_labels() + k]);
    }
  }
  EXPECT_EQ(got, rows);
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
}

// The queue's statistics (bench's loader-bound figures): a consumer slower than the loader finds the prefetch
// window full at every later call and never waits long; the times add up to the wall time since the reset,
// and a reset starts them afresh.
TEST_F(BatchLoaderTest, QueueStatsSeeAFullWindowForASlowConsumer) {
  const DatasetIndex idx = index();
  std::vector<int64_t> rows;
  for (int i = 0; i < 5; ++i)
    for (int64_t r = 0; r < 10; ++r) rows.push_back(r);
  LoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 2;
  o.prefetch_batches = 3;
  BatchLoader loader(idx, rows, transform(), 0, o);
  loader.next();
  loader.reset_queue_stats();
  EXPECT_TRUE(loader.queue_stats().depth_at_next.empty());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // 2 images of 64 px take ~1 ms
    ASSERT_TRUE(loader.next());
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const LoaderQueueStats q = loader.queue_stats();
  EXPECT_EQ(q.depth_at_next, (std::vector<int>{3, 3, 3, 3}));
  EXPECT_NEAR(q.seconds, wall, 0.05);
  EXPECT_LT(q.wait_seconds, 0.05);
  EXPECT_LT(q.empty_seconds, 0.05);
  EXPECT_GT(q.depth_seconds / q.seconds, 2.0);
  EXPECT_LE(q.depth_seconds / q.seconds, 3.0 + 1e-9);
}

TEST_F(BatchLoaderTest, CorruptImageIsAnErrorOrSkipped) {
  DatasetIndex idx = index();
  test::write_file(*dir_ / "junk.jpg", "not a jpeg");
  idx.image_paths[2] = *dir_ / "junk.jpg";
  std::vector<int64_t> rows(10);
  std::iota(rows.begin(), rows.end(), 0);
  LoaderOptions o;
  o.batch_size = 4;
  {
    BatchLoader loader(idx, rows, transform(), 0, o);
    try {
      while (loader.next()) {
      }
      FAIL() << "expected an error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("junk.jpg"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("skip_bad_images"), std::string::npos) << e.what();
    }
  }
  o.skip_bad_images = true;
  BatchLoader loader(idx, rows, transform(), 0, o);
  int64_t skipped = 0, images = 0;
  while (auto b = loader.next()) skipped += b->skipped, images += b->images.size(0);
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ(images, 9);
}

// The 8-bit batches a GPU gets (images + per-image scale/offset, normalised on the device) hold the
// same images as the float batches a CPU gets, augmentation included.
TEST_F(BatchLoaderTest, Uint8BatchesNormaliseToTheFloatBatches) {
  const DatasetIndex idx = index();
  const std::vector<int64_t> rows = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  TransformOptions to;
  to.image_size = 32;
  to.train = true;  // random affine, flip, brightness and contrast
  to.seed = 5;
  LoaderOptions o;
  o.batch_size = 5;
  BatchLoader floats(idx, rows, ImageTransform(to), 3, o);
  o.uint8_images = true;
  BatchLoader bytes(idx, rows, ImageTransform(to), 3, o);
  for (int b = 0; b < 2; ++b) {
    const Batch f = *floats.next(), u = *bytes.next();
    ASSERT_EQ(u.images.scalar_type(), torch::kUInt8);
    ASSERT_EQ(u.pixel_scale.sizes(), (std::vector<int64_t>{5}));
    EXPECT_FALSE(torch::allclose(u.pixel_scale, torch::full({5}, 1.0f / 255.0f)));  // augmented contrast
    const torch::Tensor x = normalize_images(u.images, u.pixel_scale, u.pixel_offset);
    EXPECT_EQ(x.scalar_type(), torch::kFloat32);
    EXPECT_LE((x - f.images).abs().max().item<float>(), 1e-6f);
    EXPECT_TRUE(torch::equal(u.labels, f.labels));
    EXPECT_TRUE(torch::equal(u.indices, f.indices));
  }
}

TEST_F(BatchLoaderTest, ReusedImageMemoryHoldsEachBatchsOwnPixelsAndOutlivesTheLoader) {
  // Batches are written into blocks that dropped batches gave back: each image equals the transform applied
  // on its own (no pixels of an earlier batch show through, the last partial batch included), and a batch
  // kept after its loader is gone keeps its pixels.
  const DatasetIndex idx = index();
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < 41; ++i) rows.push_back((i * 7) % 10);  // 20 batches of 2, then 1
  TransformOptions to;
  to.image_size = 32;
  to.train = true;
  const ImageTransform transform(to);
  auto expected = [&](int64_t row) {
    const cv::Mat f = transform(prepare_image(idx.image_paths[row], to.prepare()), /*epoch=*/1, row);
    return torch::from_blob(const_cast<float*>(f.ptr<float>()), {32, 32}).clone();
  };
  LoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 2;
  o.prefetch_batches = 2;
  std::optional<Batch> kept;
  torch::Tensor kept_want;
  {
    BatchLoader loader(idx, rows, transform, 1, o);
    ASSERT_EQ(loader.num_batches(), 21);
    for (int b = 0; b < 21; ++b) {
      const Batch x = *loader.next();
      ASSERT_EQ(x.images.size(0), b < 20 ? 2 : 1);
      for (int64_t i = 0; i < x.images.size(0); ++i)
        EXPECT_TRUE(torch::equal(x.images[i][0], expected(x.indices[i].item<int64_t>())))
            << "batch " << b << " image " << i;
      if (b == 10) kept = x, kept_want = x.images.clone();
    }
    EXPECT_FALSE(loader.next());
  }
  EXPECT_TRUE(torch::equal(kept->images, kept_want));
  EXPECT_TRUE(torch::equal(kept->images[0][0], expected(kept->indices[0].item<int64_t>())));
}

}  // namespace
}  // namespace ranzcr
