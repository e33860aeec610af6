// serve's batch plan: on CUDA (cuDNN's benchmark mode tunes every new input shape on its first call) batches
// are padded to the sizes warmed up before /readyz, so no request meets an untuned shape. Shown on a CPU with
// the padding switched on: the network only ever sees warmed-up batch sizes, and each image's probabilities
// are those of an unpadded batch.
#include "engine/serve/served_models.h"

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "engine/io/checkpoint.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

// While alive, the batch sizes (dimension 0 of the input) of every convolution on this thread.
class ConvBatchSizes {
 public:
  ConvBatchSizes() {
    current_ = this;
    handle_ =
        at::addThreadLocalCallback(at::RecordFunctionCallback(&ConvBatchSizes::on_start).needsInputs(true));
  }
  ~ConvBatchSizes() {
    at::removeCallback(handle_);
    current_ = nullptr;
  }
  const std::set<int64_t>& seen() const { return seen_; }

 private:
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (current_ && std::string(fn.name()) == "aten::convolution" && !fn.inputs().empty() &&
        fn.inputs()[0].isTensor())
      current_->seen_.insert(fn.inputs()[0].toTensor().size(0));
    return nullptr;
  }
  static thread_local ConvBatchSizes* current_;
  at::CallbackHandle handle_ = 0;
  std::set<int64_t> seen_;
};
thread_local ConvBatchSizes* ConvBatchSizes::current_ = nullptr;

std::string tiny_checkpoint(const test::TempDir& dir) {
  Config config;
  config.model.name = "tiny_cnn";
  config.data.image_size = 32;
  ModelSpec spec;
  spec.num_classes = 3;
  torch::manual_seed(3);
  auto model = create_model("tiny_cnn", spec);
  CheckpointMeta meta;
  meta.config_yaml = config_to_yaml(config);
  meta.model_name = "tiny_cnn";
  meta.label_names = {"a", "b", "c"};
  const std::string path = dir / "tiny.pt";
  write_file_atomic(path, serialize_checkpoint(meta, *model, nullptr));
  return path;
}

TEST(ServedModels, BatchPlanPadsToPowersOfTwoAndTheLargestBatch) {
  EXPECT_EQ(batch_plan(1, true), std::vector<int>({1}));
  EXPECT_EQ(batch_plan(8, true), std::vector<int>({1, 2, 4, 8}));
  EXPECT_EQ(batch_plan(12, true), std::vector<int>({1, 2, 4, 8, 12}));
  EXPECT_EQ(batch_plan(12, false), std::vector<int>({1, 12}));
  EXPECT_EQ(padded_batch_size(3, {1, 2, 4, 8, 12}), 4);
  EXPECT_EQ(padded_batch_size(9, {1, 2, 4, 8, 12}), 12);
  EXPECT_EQ(padded_batch_size(13, {1, 2, 4, 8, 12}), 13);  // never fewer rows than images
  EXPECT_EQ(padded_batch_size(5, {}), 5);
}

TEST(ServedModels, PaddedBatchesRunOnlyWarmedSizesWithEachImagesOwnNumbers) {
  test::TempDir dir;
  const std::string path = tiny_checkpoint(dir);
  const MemberOptions options_for = [](const TrainedModelInfo&) {
    InferenceOptions o;
    o.image_size = 32;
    return o;
  };
  ServedModels plain({path}, options_for, torch::kCPU), padded({path}, options_for, torch::kCPU);
  plain.warm_up(8);  // a CPU: no padding by default
  EXPECT_TRUE(plain.padded_sizes().empty());
  padded.warm_up(8, /*pad=*/true);
  EXPECT_EQ(padded.padded_sizes(), std::vector<int>({1, 2, 4, 8}));

  torch::manual_seed(4);
  std::vector<PreparedImage> images(8);
  for (auto& image : images) image.inputs.push_back(torch::rand({1, 32, 32}));
  const auto first = [&](size_t n) {
    std::vector<const PreparedImage*> batch;
    for (size_t i = 0; i < n; ++i) batch.push_back(&images[i]);
    return batch;
  };
  std::vector<torch::Tensor> unpadded;
  {
    ConvBatchSizes sizes;  // the plain model: every size from 1 to 8 reaches the network
    for (size_t n = 1; n <= images.size(); ++n) unpadded.push_back(plain.predict(first(n)));
    EXPECT_EQ(sizes.seen(), std::set<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}));
  }
  ConvBatchSizes sizes;  // the padded one: only the warmed-up sizes
  for (size_t n = 1; n <= images.size(); ++n) {
    const torch::Tensor p = padded.predict(first(n));
    ASSERT_EQ(p.size(0), static_cast<int64_t>(n));
    EXPECT_TRUE(torch::allclose(p, unpadded[n - 1], 1e-5, 1e-6)) << n << " images";
  }
  EXPECT_EQ(sizes.seen(), std::set<int64_t>({1, 2, 4, 8}));
}

}  // namespace
}  // namespace ranzcr
