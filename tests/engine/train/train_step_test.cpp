// The optimizer-step policy: sync-free clipping, fp16 loss scaling, autocast, channels_last, and (on
// CUDA) training steps that never wait for the device.
#include "engine/train/train_step.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cstdlib>
#include <limits>

#include "engine/runtime/cuda_support.h"
#include "engine/train/trainer.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

std::shared_ptr<Classifier> tiny_model(uint64_t seed) {
  torch::manual_seed(seed);
  return create_model("tiny_cnn", ModelSpec{});
}

struct FixedBatch {
  torch::Tensor x, y;
};

FixedBatch fixed_batch(const torch::Device& device) {
  torch::manual_seed(123);
  return {torch::rand({8, 1, 32, 32}).to(device),
          (torch::rand({8, 11}) > 0.7).to(torch::kFloat32).to(device)};
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i].cpu(), b[i].cpu())) return false;
  return true;
}

// Trains `model` for `steps` steps on one batch with `precision`; returns each step's loss.
std::vector<double> train_steps(Classifier& model, const torch::Device& device, Precision precision,
                                int steps, LossScalerOptions scaler = {}) {
  model.to(device);
  model.train();
  auto coll = make_local_collectives();
  torch::optim::AdamW opt(model.parameters(), torch::optim::AdamWOptions(3e-3));
  DistributedDataParallel ddp(model, *coll);
  StepOptions so;
  so.precision = precision;
  so.grad_clip = 5.0;
  so.loss_scaler = scaler;
  TrainStep step(model, opt, ddp, device, so);
  const FixedBatch b = fixed_batch(device);
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    losses.push_back(step.forward_backward(b.x, b.y, true).item<double>());
    step.optimizer_step(3e-3);
  }
  return losses;
}

TEST(ClipGradNorm, EqualsLibTorchBitForBitAndReturnsTheNormOnTheDevice) {
  torch::manual_seed(1);
  std::vector<torch::Tensor> a, b;
  for (int64_t n : {7, 30, 3}) {
    a.push_back(torch::zeros({n}, torch::requires_grad()));
    b.push_back(torch::zeros({n}, torch::requires_grad()));
    a.back().mutable_grad() = torch::randn({n}) * 10;
    b.back().mutable_grad() = a.back().grad().clone();
  }
  const double reference = torch::nn::utils::clip_grad_norm_(a, 1.0);
  const torch::Tensor norm = clip_grad_norm(b, 1.0);
  EXPECT_GT(reference, 1.0);  // clipping did something
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_DOUBLE_EQ(norm.item<double>(), reference);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].grad(), b[i].grad())) << i;
  // Below the limit the gradients are untouched.
  const auto before = b[0].grad().clone();
  clip_grad_norm(b, 1e9);
  EXPECT_TRUE(torch::equal(before, b[0].grad()));
}

TEST(LossScaler, UnscalesAndGrowsAfterCleanSteps) {
  LossScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 3;
  LossScaler scaler(torch::kCPU, o);
  torch::Tensor p = torch::zeros({4}, torch::requires_grad());
  scaler.scale((p * torch::tensor({1.f, 2.f, 3.f, 4.f})).sum()).backward();
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({1024.f, 2048.f, 3072.f, 4096.f})));
  scaler.unscale({p});
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({1.f, 2.f, 3.f, 4.f})));
  EXPECT_FALSE(scaler.found_inf());
  scaler.update();
  EXPECT_EQ(scaler.scale_value(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  for (int i = 0; i < 2; ++i) {
    scaler.unscale({p});
    scaler.update();
  }
  EXPECT_EQ(scaler.scale_value(), 2048.0);  // grown after 3 clean steps
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(LossScaler, InfOrNanGradientsAreFoundAndBackOff) {
  LossScalerOptions o;
  o.init_scale = 1024;
  LossScaler scaler(torch::kCPU, o);
  torch::Tensor p = torch::zeros({3}, torch::requires_grad());
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    p.mutable_grad() = torch::tensor({1.f, bad, 3.f});
    scaler.unscale({p});
    EXPECT_TRUE(scaler.found_inf());
    scaler.update();
  }
  EXPECT_EQ(scaler.scale_value(), 256.0);  // halved twice
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(Precision, ResolvesPerDevice) {
  EXPECT_EQ(resolve_precision(parse_setting<PrecisionSetting>("p", "auto"), torch::kCPU), Precision::kFp32);
  EXPECT_EQ(resolve_precision(parse_setting<PrecisionSetting>("p", "bf16"), torch::kCPU), Precision::kBf16);
  EXPECT_EQ(resolve_precision(parse_setting<PrecisionSetting>("p", "fp16"), torch::kCPU), Precision::kFp16);
  EXPECT_THROW(parse_setting<PrecisionSetting>("p", "fp8"), std::runtime_error);
  EXPECT_FALSE(resolve_channels_last(parse_setting<OnOffAuto>("c", "auto"), torch::kCPU));
  EXPECT_TRUE(resolve_channels_last(parse_setting<OnOffAuto>("c", "true"), torch::kCPU));
  EXPECT_THROW(parse_setting<OnOffAuto>("c", "yes"), std::runtime_error);
}

// bf16 on a CPU that would emulate it is a warning (it runs, slower than fp32); the CPU's answer is the
// kernel's flags, asked here of /proc/cpuinfo by grep.
TEST(Precision, Bf16OnACpuWithoutNativeBf16IsAWarning) {
  const bool native = std::system("grep -qw -e avx512_bf16 -e amx_bf16 /proc/cpuinfo") == 0;
  EXPECT_EQ(cpu_has_native_bf16(), native);
  const std::string w = cpu_bf16_warning(Precision::kBf16, torch::kCPU);
  EXPECT_EQ(w.empty(), native) << w;
  if (!native) EXPECT_NE(w.find("without AMX or AVX-512 BF16"), std::string::npos) << w;
  EXPECT_EQ(cpu_bf16_warning(Precision::kFp32, torch::kCPU), "");
  EXPECT_EQ(cpu_bf16_warning(Precision::kBf16, torch::Device(torch::kCUDA, 0)), "");
}

TEST(Autocast, Bf16InsideTheGuardFp32AfterIt) {
  torch::nn::Linear lin(4, 2);
  const torch::Tensor x = torch::rand({3, 4});
  {
    Autocast autocast(torch::kCPU, Precision::kBf16);
    EXPECT_EQ(lin(x).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  EXPECT_EQ(lin(x).scalar_type(), torch::kFloat32);
  Autocast off(torch::kCPU, Precision::kFp32);
  EXPECT_EQ(lin(x).scalar_type(), torch::kFloat32);
}

TEST(ChannelsLast, SameLogitsAsContiguous) {
  auto a = tiny_model(3), b = tiny_model(3);
  set_memory_format(*b, true);
  bool any_nhwc = false;
  for (const auto& p : b->parameters())
    if (p.dim() == 4) any_nhwc |= p.is_contiguous(torch::MemoryFormat::ChannelsLast) && !p.is_contiguous();
  EXPECT_TRUE(any_nhwc);
  a->eval(), b->eval();
  const torch::Tensor x = fixed_batch(torch::kCPU).x;
  EXPECT_TRUE(torch::allclose(a->forward(x), b->forward(x.contiguous(torch::MemoryFormat::ChannelsLast)),
                              1e-4, 1e-5));
}

TEST(TrainStep, Fp16SkipsTheStepWhenScaledGradientsOverflow) {
  auto model = tiny_model(4);
  const auto before = copies(model->parameters());
  LossScalerOptions huge;
  huge.init_scale = 1e38;  // the scaled loss is finite, its gradients are not
  train_steps(*model, torch::kCPU, Precision::kFp16, 1, huge);
  EXPECT_TRUE(all_equal(before, model->parameters()));  // skipped
  LossScalerOptions normal;
  normal.init_scale = 1024;
  train_steps(*model, torch::kCPU, Precision::kFp16, 1, normal);
  EXPECT_FALSE(all_equal(before, model->parameters()));  // applied
}

TEST(TrainStep, Bf16AndFp16TrackFp32OnCpu) {
  auto fp32 = tiny_model(5), bf16 = tiny_model(5), fp16 = tiny_model(5);
  const auto l32 = train_steps(*fp32, torch::kCPU, Precision::kFp32, 6);
  const auto lbf = train_steps(*bf16, torch::kCPU, Precision::kBf16, 6);
  const auto lhf = train_steps(*fp16, torch::kCPU, Precision::kFp16, 6);
  EXPECT_LT(l32.back(), l32.front());
  EXPECT_LT(lbf.back(), lbf.front());
  EXPECT_LT(lhf.back(), lhf.front());
  EXPECT_NE(lbf, l32);  // autocast really ran in lower precision
  EXPECT_NE(lhf, l32);
  for (size_t i = 0; i < l32.size(); ++i) {
    EXPECT_NEAR(lbf[i], l32[i], 0.03) << "step " << i;
    EXPECT_NEAR(lhf[i], l32[i], 0.01) << "step " << i;
  }
}

// ---- CUDA (skipped without a GPU) --------------------------------------------------------------------

bool have_cuda() {
  return cuda::compiled_with_cuda() && torch::cuda::is_available();
}

TEST(SyncDebugCuda, TheGuardCatchesAHostSync) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const torch::Tensor t = torch::ones({1}, torch::kCUDA);
  {
    cuda::SyncDebugErrorGuard guard;
    EXPECT_THROW(t.item<float>(), c10::Error);
  }
  EXPECT_EQ(t.item<float>(), 1.0f);  // allowed again
}

TEST(TrainStepCuda, Bf16AndFp16TrainOnTheGpu) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  auto fp32 = tiny_model(6), fp16 = tiny_model(6);
  const auto l32 = train_steps(*fp32, gpu, Precision::kFp32, 6);
  const auto lhf = train_steps(*fp16, gpu, Precision::kFp16, 6);
  for (size_t i = 0; i < l32.size(); ++i) EXPECT_NEAR(lhf[i], l32[i], 0.01) << "step " << i;
  if (cuda::bf16_supported(gpu)) {
    auto bf16 = tiny_model(6);
    const auto lbf = train_steps(*bf16, gpu, Precision::kBf16, 6);
    for (size_t i = 0; i < l32.size(); ++i) EXPECT_NEAR(lbf[i], l32[i], 0.03) << "step " << i;
  }
  auto skipped = tiny_model(7);
  const auto before = copies(skipped->parameters());
  LossScalerOptions huge;
  huge.init_scale = 1e38;
  train_steps(*skipped, gpu, Precision::kFp16, 1, huge);
  EXPECT_TRUE(all_equal(before, skipped->parameters()));
}

class TrainerCudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::make_dataset(*dir_ / "ds", 96, 64, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static test::TempDir* dir_;
};
test::TempDir* TrainerCudaTest::dir_ = nullptr;

// The training loop itself (next batch with its side-stream copy, forward, backward, clipping,
// optimizer step, stop poll) under sync-debug "error": any host-device sync in a step throws. fp16 too:
// its inf/NaN check is decided on the device by the fused optimizer.
TEST_F(TrainerCudaTest, TrainingStepsNeverWaitForTheDevice) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  std::vector<std::string> precisions = {"fp32", "fp16"};  // fp16: the fused step skips on the device
  if (cuda::bf16_supported(gpu)) precisions.push_back("bf16");
  for (const auto& precision : precisions) {
    const std::string out = *dir_ / ("run_" + precision);
    const Config c =
        parse_config("", "test",
                     {"data.root=" + *dir_ / "ds", "data.image_size=48", "model.name=resnet18",
                      "train.batch_size=8", "train.epochs=1", "train.accum_steps=2", "optim.grad_clip=1.0",
                      "train.log_every_seconds=0.01", "train.precision=" + precision, "output.dir=" + out});
    RunLog log(false);
    auto coll = make_local_collectives();
    TrainOptions options;
    options.device = gpu;
    options.forbid_device_sync = true;
    std::atomic<int> no_stop{0};
    options.stop_signal = &no_stop;
    TrainSummary s;
    ASSERT_NO_THROW(s = train(c, *coll, log, options)) << precision;
    EXPECT_EQ(s.epochs, 1) << precision;
    const auto m = test::read_metrics(out);
    ASSERT_EQ(m.size(), 1u);
    EXPECT_TRUE(std::isfinite(m[0]["train_loss"].get<double>())) << precision;
  }
}

}  // namespace
}  // namespace ranzcr
