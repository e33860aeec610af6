// The fused AdamW and SGD against LibTorch's own per-parameter optimizers: K steps on the same gradients
// give the same weights within 1e-6, with weight decay, clipping, fp16-style loss scaling and a step
// skipped on the device for inf gradients; their checkpoints are LibTorch's. On CPU, and on CUDA too
// when there is a GPU.
#include "engine/train/fused_optimizer.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <functional>
#include <limits>
#include <sstream>

#include "engine/runtime/cuda_support.h"
#include "engine/train/loss_scaler.h"
#include "engine/train/train_step.h"

namespace ranzcr {
namespace {

constexpr double kTolerance = 1e-6;

// Parameters of several shapes, one of them an NHWC (channels_last) conv weight, as on a GPU run.
std::vector<torch::Tensor> make_params(const torch::Device& device) {
  torch::manual_seed(11);
  std::vector<torch::Tensor> out = {torch::randn({16, 3, 3, 3}), torch::randn({16}), torch::randn({11, 40}),
                                    torch::randn({7})};
  out[0] = out[0].contiguous(torch::MemoryFormat::ChannelsLast);
  for (auto& t : out) t = t.to(device).detach().requires_grad_(true);
  return out;
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts)
    out.push_back(torch::empty_like(t).copy_(t).detach().requires_grad_(true));  // keeps the layout
  return out;
}

// Gradients for step k (the same for both sides), times `scale`; `poison` puts an inf in the second.
std::vector<torch::Tensor> grads_for(int k, const std::vector<torch::Tensor>& params, double scale,
                                     bool poison) {
  torch::manual_seed(100 + k);
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back((torch::randn(p.sizes()) * scale).to(p.device()));
  if (poison) out[1][3] = std::numeric_limits<float>::infinity();
  return out;
}

void set_grads(std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads) {
  for (size_t i = 0; i < params.size(); ++i)
    params[i].mutable_grad() = torch::empty_like(params[i]).copy_(grads[i]);
}

double max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, (a[i].detach().cpu().to(torch::kDouble) - b[i].detach().cpu().to(torch::kDouble))
                        .abs()
                        .max()
                        .item<double>());
  return m;
}

struct Case {
  bool clip = false;      // clip_grad_norm to 1.0 before each step
  bool fp16 = false;      // gradients scaled by 1024 and unscaled by a LossScaler
  int skipped_step = -1;  // this step's gradients hold an inf (fp16: skipped)
  int steps = 6;
};

// Runs `steps` steps of `fused` and of `reference` on the same gradients; the reference steps only
// when the host sees no inf (what the step policy did before the fused optimizers).
void run_pair(const torch::Device& device, torch::optim::Optimizer& fused, std::vector<torch::Tensor>& fp,
              torch::optim::Optimizer& reference, std::vector<torch::Tensor>& rp, const Case& c) {
  LossScalerOptions so;
  so.init_scale = 1024;
  LossScaler fused_scaler(device, so), reference_scaler(device, so);
  auto* skippable = dynamic_cast<SkippableStep*>(&fused);
  ASSERT_NE(skippable, nullptr);
  for (int k = 0; k < c.steps; ++k) {
    const auto g = grads_for(k, fp, c.fp16 ? 1024.0 : 1.0, k == c.skipped_step);
    set_grads(fp, g);
    set_grads(rp, g);
    torch::Tensor found_inf;
    bool reference_skips = false;
    if (c.fp16) {
      fused_scaler.unscale(fp);
      reference_scaler.unscale(rp);
      found_inf = fused_scaler.found_inf_flag();
      reference_skips = reference_scaler.found_inf();
      EXPECT_EQ(reference_skips, k == c.skipped_step);
    }
    if (c.clip) {
      clip_grad_norm(fp, 1.0);
      clip_grad_norm(rp, 1.0);
    }
    skippable->step_unless(found_inf);
    EXPECT_TRUE(skippable->last_step_fused()) << "step " << k;
    if (!reference_skips) reference.step();
    fused.zero_grad();
    reference.zero_grad();
    EXPECT_LE(max_diff(fp, rp), kTolerance) << "after step " << k;
  }
}

void adamw_matches_libtorch(const torch::Device& device, const Case& c) {
  auto fp = make_params(device), rp = clones(fp);
  const auto options = torch::optim::AdamWOptions(3e-2).weight_decay(0.05);
  FusedAdamW fused(fp, options);
  torch::optim::AdamW reference(rp, options);
  run_pair(device, fused, fp, reference, rp, c);
  // The moments agree too, and have the parameters' layout.
  for (size_t i = 0; i < fp.size(); ++i) {
    const auto& fs =
        static_cast<torch::optim::AdamWParamState&>(*fused.state().at(fp[i].unsafeGetTensorImpl()));
    const auto& rs =
        static_cast<torch::optim::AdamWParamState&>(*reference.state().at(rp[i].unsafeGetTensorImpl()));
    EXPECT_LE(max_diff({fs.exp_avg(), fs.exp_avg_sq()}, {rs.exp_avg(), rs.exp_avg_sq()}), kTolerance);
    EXPECT_EQ(fs.exp_avg().strides(), fp[i].strides());
  }
}

void sgd_matches_libtorch(const torch::Device& device, const Case& c) {
  auto fp = make_params(device), rp = clones(fp);
  const auto options = torch::optim::SGDOptions(5e-2).momentum(0.9).nesterov(true).weight_decay(1e-3);
  FusedSgd fused(fp, options);
  torch::optim::SGD reference(rp, options);
  run_pair(device, fused, fp, reference, rp, c);
}

TEST(FusedAdamW, EqualsLibTorchsAdamW) {
  adamw_matches_libtorch(torch::kCPU, {});
}

TEST(FusedAdamW, EqualsLibTorchsAdamWWithClipping) {
  adamw_matches_libtorch(torch::kCPU, {/*clip=*/true});
}

TEST(FusedAdamW, EqualsLibTorchsAdamWWithLossScalingAndASkippedInfStep) {
  // The skipped step must leave weights, moments and the step count (bias correction) as they were.
  adamw_matches_libtorch(torch::kCPU, {/*clip=*/true, /*fp16=*/true, /*skipped_step=*/2});
}

TEST(FusedSgd, EqualsLibTorchsNesterovSgd) {
  sgd_matches_libtorch(torch::kCPU, {});
}

TEST(FusedSgd, EqualsLibTorchsNesterovSgdWithClippingLossScalingAndASkippedInfStep) {
  sgd_matches_libtorch(torch::kCPU, {/*clip=*/true, /*fp16=*/true, /*skipped_step=*/0});
  sgd_matches_libtorch(torch::kCPU, {/*clip=*/false, /*fp16=*/true, /*skipped_step=*/3});
}

// A checkpoint of the fused AdamW is LibTorch's: a plain AdamW loads it (with the step counts, the
// skipped step not counted) and continues exactly as the fused one does; and the other way round.
TEST(FusedAdamW, SavesAndLoadsLibTorchsStateWithTheStepCounts) {
  auto fp = make_params(torch::kCPU), rp = clones(fp);
  const auto options = torch::optim::AdamWOptions(3e-2).weight_decay(0.05);
  FusedAdamW fused(fp, options);
  torch::optim::AdamW reference(rp, options);
  run_pair(torch::kCPU, fused, fp, reference, rp, {false, true, 1, 4});
  std::stringstream bytes;
  torch::save(fused, bytes);
  auto rp2 = clones(fp);
  torch::optim::AdamW plain(rp2, options);
  torch::load(plain, bytes);
  for (const auto& p : rp2)
    EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*plain.state().at(p.unsafeGetTensorImpl())).step(),
              3);
  std::stringstream plain_bytes;
  torch::save(plain, plain_bytes);
  auto fp2 = clones(fp);
  FusedAdamW fused2(fp2, options);
  torch::load(fused2, plain_bytes);
  for (int k = 10; k < 13; ++k) {
    const auto g = grads_for(k, fp, 1.0, false);
    set_grads(rp2, g);
    set_grads(fp2, g);
    plain.step();
    fused2.step();
    EXPECT_TRUE(fused2.last_step_fused());
    EXPECT_LE(max_diff(fp2, rp2), kTolerance) << "step " << k;
  }
}

// After a resume, state saved from contiguous parameters meets channels_last ones: the fused step puts
// the moments in the parameters' layout (the kernel needs one layout) and still equals LibTorch's.
TEST(FusedAdamW, StateInAnotherLayoutIsMovedToTheParameters) {
  auto fp = make_params(torch::kCPU);
  torch::NoGradGuard no_grad;
  fp[0].set_data(fp[0].contiguous());  // contiguous while the state is made
  const auto options = torch::optim::AdamWOptions(1e-2);
  FusedAdamW fused(fp, options);
  set_grads(fp, grads_for(0, fp, 1.0, false));
  fused.step();
  fp[0].set_data(fp[0].contiguous(torch::MemoryFormat::ChannelsLast));  // what set_memory_format does
  auto rp = clones(fp);
  torch::optim::AdamW reference(rp, options);
  std::stringstream bytes;
  torch::save(fused, bytes);
  torch::load(reference, bytes);
  const auto g = grads_for(1, fp, 1.0, false);
  set_grads(fp, g);
  set_grads(rp, g);
  fused.step();
  reference.step();
  EXPECT_TRUE(fused.last_step_fused());
  const auto& s = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(fp[0].unsafeGetTensorImpl()));
  EXPECT_TRUE(s.exp_avg().is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(s.exp_avg().is_contiguous());
  EXPECT_LE(max_diff(fp, rp), kTolerance);
}

// A 1x1 convolution's weight [O, I, 1, 1] is contiguous, strides (I, 1, 1, 1); cuDNN returns its gradient
// channels_last, strides (I, 1, I, I): the same layout, so the fused step uses it as it is (no copy per
// step) and still equals LibTorch's. A 3x3 weight's gradient in another layout is still moved.
TEST(FusedAdamW, AOneByOneGradientWithOtherStridesOnlyOnSizeOneDimensionsIsNotCopied) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> fp = {torch::randn({8, 4, 1, 1}).requires_grad_(true),
                                   torch::randn({8, 4, 3, 3}).requires_grad_(true)};
  auto rp = clones(fp);
  const auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.05);
  FusedAdamW fused(fp, options);
  torch::optim::AdamW reference(rp, options);
  const torch::Tensor g1 = torch::randn({8, 4, 1, 1}), g3 = torch::randn({8, 4, 3, 3});
  torch::Tensor cudnn_like = at::empty_strided({8, 4, 1, 1}, {4, 1, 4, 4});
  cudnn_like.copy_(g1);
  const torch::Tensor other = g3.contiguous(torch::MemoryFormat::ChannelsLast);
  ASSERT_FALSE(cudnn_like.strides().equals(fp[0].strides()));
  EXPECT_TRUE(same_layout(cudnn_like, fp[0]));
  EXPECT_FALSE(same_layout(other, fp[1]));
  fp[0].mutable_grad() = cudnn_like;
  fp[1].mutable_grad() = other;
  rp[0].mutable_grad() = g1.clone();
  rp[1].mutable_grad() = g3.clone();
  fused.step();
  reference.step();
  EXPECT_TRUE(fused.last_step_fused());
  EXPECT_EQ(fp[0].grad().data_ptr(), cudnn_like.data_ptr()) << "the 1x1 gradient was copied";
  EXPECT_NE(fp[1].grad().data_ptr(), other.data_ptr()) << "the 3x3 gradient in another layout was not moved";
  EXPECT_LE(max_diff(fp, rp), kTolerance);
}

TEST(FusedAdamW, FallsBackToLibTorchsStepWhereNoKernelApplies) {
  std::vector<torch::Tensor> mixed = {torch::randn({4}, torch::requires_grad()),
                                      torch::randn({4}, torch::dtype(torch::kFloat64).requires_grad(true))};
  FusedAdamW opt(mixed, torch::optim::AdamWOptions(1e-2));
  for (auto& p : mixed) p.mutable_grad() = torch::ones_like(p);
  const torch::Tensor before = mixed[0].detach().clone();
  opt.step();
  EXPECT_FALSE(opt.last_step_fused());  // two dtypes: LibTorch's loop
  EXPECT_FALSE(torch::equal(before, mixed[0]));
  // The per-parameter path still honours a skip flag (by reading it).
  const torch::Tensor after = mixed[0].detach().clone();
  opt.step_unless(torch::ones({1}));
  EXPECT_TRUE(torch::equal(after, mixed[0]));
}

// ---- CUDA (skipped without a GPU) --------------------------------------------------------------------

bool have_cuda() {
  return cuda::compiled_with_cuda() && torch::cuda::is_available();
}

TEST(FusedOptimizerCuda, AdamWAndSgdEqualLibTorchsOnTheGpu) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  adamw_matches_libtorch(gpu, {});
  adamw_matches_libtorch(gpu, {true, true, 2});
  sgd_matches_libtorch(gpu, {true, true, 0});
}

TEST(FusedOptimizerCuda, ASkippedFp16StepNeverReadsTheDevice) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  auto params = make_params(gpu);
  FusedAdamW opt(params, torch::optim::AdamWOptions(1e-2));
  LossScaler scaler(gpu);
  set_grads(params, grads_for(0, params, 1.0, true));
  const auto before = clones(params);
  {
    cuda::SyncDebugErrorGuard no_sync;
    scaler.unscale(params);
    opt.step_unless(scaler.found_inf_flag());
    scaler.update();
  }
  EXPECT_TRUE(opt.last_step_fused());
  EXPECT_EQ(max_diff(before, params), 0.0);
}

}  // namespace
}  // namespace ranzcr
