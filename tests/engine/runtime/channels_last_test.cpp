// channels_last means every layer runs NHWC: a RecordFunction callback sees the 4-d inputs, weights and
// outputs of every convolution, BatchNorm and pooling operator of a forward (and of their backward
// operators, with the weight gradients, in a training step), and each must suggest the ChannelsLast memory
// format (the format cuDNN, oneDNN and the pooling kernels choose their layout from).
// One NCHW tensor there (the 1-channel stem weight [64,1,7,7], a 1x1 weight [O,I,1,1], a 1-channel input
// [N,1,H,W]: each "contiguous" in both formats) makes that operator, and what follows it, run NCHW.
#include <ATen/record_function.h>
#include <c10/core/AutogradState.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/dataset_index.h"
#include "distributed/collectives.h"
#include "engine/infer/inference.h"
#include "engine/runtime/device_batches.h"
#include "engine/runtime/precision.h"
#include "models/registry.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

constexpr auto kNhwc = torch::MemoryFormat::ChannelsLast;

// Records, while it lives, every 4-d tensor of a layout-bearing operator (on this thread) whose suggested
// memory format is not ChannelsLast. An activation with a 1x1 spatial size (the pooled map of a head or a
// squeeze-excitation block) has no layout to get wrong and is not counted; a weight always is.
class NchwRecorder {
 public:
  NchwRecorder() {
    current_ = this;
    handle_ =
        at::addThreadLocalCallback(at::RecordFunctionCallback(&NchwRecorder::on_start, &NchwRecorder::on_end)
                                       .needsInputs(true)
                                       .needsOutputs(true));
  }
  ~NchwRecorder() {
    at::removeCallback(handle_);
    current_ = nullptr;
  }
  NchwRecorder(const NchwRecorder&) = delete;
  NchwRecorder& operator=(const NchwRecorder&) = delete;

  const std::vector<std::string>& nchw() const { return nchw_; }
  int checked() const { return checked_; }  // 4-d tensors looked at
  std::set<std::string> ops_seen() const { return ops_seen_; }
  std::string report() const {
    std::ostringstream ss;
    for (size_t i = 0; i < nchw_.size() && i < 12; ++i) ss << "\n  " << nchw_[i];
    if (nchw_.size() > 12) ss << "\n  ... " << nchw_.size() - 12 << " more";
    return ss.str();
  }

 private:
  static bool layout_op(const std::string& name) {
    static const std::set<std::string> ops = {"aten::convolution", "aten::batch_norm", "aten::max_pool2d",
                                              "aten::avg_pool2d", "aten::adaptive_avg_pool2d"};
    return ops.count(name) > 0 || backward_op(name);
  }
  // The backward operators of the layers above (on CUDA, cuDNN's BatchNorm; on a CPU, the native one):
  // every 4-d tensor in and out is checked, the weight gradient among them.
  static bool backward_op(const std::string& name) {
    static const std::set<std::string> ops = {
        "aten::convolution_backward",       "aten::cudnn_batch_norm_backward",
        "aten::native_batch_norm_backward", "aten::max_pool2d_with_indices_backward",
        "aten::avg_pool2d_backward",        "aten::_adaptive_avg_pool2d_backward"};
    return ops.count(name) > 0;
  }
  // Roles: the forward convolution's inputs are (input, weight); convolution_backward's are (grad_output,
  // input, weight) and its outputs (grad_input, grad_weight, grad_bias).
  static const char* role(const std::string& op, size_t i, bool output) {
    if (op == "aten::convolution_backward")
      return output ? (i == 1 ? "weight gradient" : "gradient") : (i == 2 ? "weight" : "activation");
    if (output) return "output";
    return i == 0 ? "input" : (op == "aten::convolution" ? "weight" : "arg");
  }
  void check(const c10::IValue& v, const std::string& op, const char* role) {
    if (!v.isTensor()) return;
    const torch::Tensor& t = v.toTensor();
    if (!t.defined() || t.dim() != 4) return;
    ops_seen_.insert(op);
    const bool weight = std::string(role).find("weight") != std::string::npos;
    if (!weight && t.size(2) * t.size(3) == 1) return;
    ++checked_;
    if (t.suggest_memory_format() == kNhwc) return;
    std::ostringstream ss;
    ss << op << " " << role << " sizes " << t.sizes() << " strides " << t.strides();
    nchw_.push_back(ss.str());
  }
  static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (current_ && layout_op(fn.name())) {
      const auto inputs = fn.inputs();
      const size_t n = backward_op(fn.name()) ? inputs.size() : std::min<size_t>(inputs.size(), 2);
      for (size_t i = 0; i < n; ++i) current_->check(inputs[i], fn.name(), role(fn.name(), i, false));
    }
    return nullptr;
  }
  static void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
    if (!current_ || !layout_op(fn.name())) return;
    const auto outputs = fn.outputs();
    for (size_t i = 0; i < outputs.size(); ++i)
      current_->check(outputs[i], fn.name(), role(fn.name(), i, true));
  }

  static thread_local NchwRecorder* current_;
  at::CallbackHandle handle_ = 0;
  std::vector<std::string> nchw_;
  std::set<std::string> ops_seen_;
  int checked_ = 0;
};
thread_local NchwRecorder* NchwRecorder::current_ = nullptr;

// A batch as the loader hands it over (grey, [N,1,S,S] float32 in [0,1]), put on the device the way
// training, validation, evaluate, predict, cv and serve all do (upload_batch).
torch::Tensor uploaded_batch(int in_channels, int size, bool channels_last,
                             const torch::Device& device = torch::kCPU) {
  Batch batch;
  torch::manual_seed(5);
  batch.images = torch::rand({2, 1, size, size});
  batch.labels = torch::zeros({2, 11});
  batch.indices = torch::arange(2);
  DeviceBatchOptions options{device, in_channels, channels_last, std::vector<double>(in_channels, 0.5),
                             std::vector<double>(in_channels, 0.25)};
  return upload_batch(std::move(batch), options).images;
}

struct ZooCase {
  std::string model;
  int in_channels;
};

std::string case_name(const testing::TestParamInfo<ZooCase>& info) {
  return info.param.model + "_" + std::to_string(info.param.in_channels) + "ch";
}

std::vector<ZooCase> zoo_cases() {
  std::vector<ZooCase> cases;
  for (const auto& name : model_names())
    for (int channels : {1, 3}) cases.push_back({name, channels});
  return cases;
}

class ChannelsLastZoo : public testing::TestWithParam<ZooCase> {};

// The forward in training mode (batch statistics) and in eval mode (validation, EMA, evaluate, predict, cv,
// serve) through the feature-map forward (Grad-CAM, the auxiliary head; forward() returns its logits): no
// convolution, BatchNorm or pooling sees or makes an NCHW tensor. 32 px, the smallest size every stride-32
// model takes.
TEST_P(ChannelsLastZoo, EveryLayerRunsNhwc) {
  const ZooCase& c = GetParam();
  torch::manual_seed(1);
  ModelSpec spec;
  spec.in_channels = c.in_channels;
  auto model = create_model(c.model, spec);
  set_memory_format(*model, true);
  const torch::Tensor x = uploaded_batch(c.in_channels, 32, true);
  NchwRecorder recorder;
  torch::NoGradGuard no_grad;  // the layouts of a forward do not depend on autograd; it only costs time here
  model->train();
  model->forward(x);
  model->eval();
  try {
    model->forward_with_features(x);     // forward() is its logits
  } catch (const std::runtime_error&) {  // a model without feature maps (tiny_cnn)
    model->forward(x);
  }
  EXPECT_GT(recorder.checked(), 0) << "the recorder saw no layout-bearing operator";
  EXPECT_TRUE(recorder.nchw().empty())
      << recorder.nchw().size() << " NCHW tensors in " << c.model << ":" << recorder.report();
}

// While alive, this thread's backward passes run on this thread (torch.autograd.set_multithreading_enabled
// (False)): the engine gives every node, CUDA ones too, to the calling thread's own ready queue.
class SingleThreadedAutograd {
 public:
  SingleThreadedAutograd() : previous_(c10::AutogradState::get_tls_state().get_multithreading_enabled()) {
    c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
  }
  ~SingleThreadedAutograd() { c10::AutogradState::get_tls_state().set_multithreading_enabled(previous_); }
  SingleThreadedAutograd(const SingleThreadedAutograd&) = delete;
  SingleThreadedAutograd& operator=(const SingleThreadedAutograd&) = delete;

 private:
  bool previous_;
};

// A training step's forward and backward under `precision` on `device`: no convolution, BatchNorm or pooling
// operator of either sees or makes an NCHW tensor, and every 4-d weight gradient is NHWC. At 32 px the last
// feature map is 1x1 and not checked; at 64 px EfficientNet's last BatchNorm backward gets an NCHW gradient
// ([N,1280,2,2]): the global average pool's backward materialises its gradient NCHW and SiLU's backward takes
// its layout from that gradient (PyTorch's own adaptive_avg_pool2d and SiLU do the same). Known, left as is. The backward runs
// on this thread (multithreaded autograd off, as torch.autograd.set_multithreading_enabled(False)), where
// the recorder listens; on CUDA it would otherwise run on the device's autograd thread.
void expect_training_step_nhwc(const ZooCase& c, const torch::Device& device, Precision precision) {
  SCOPED_TRACE(c.model + " " + std::to_string(c.in_channels) + " ch on " + device.str() + " in " +
               precision_name(precision));
  torch::manual_seed(1);
  ModelSpec spec;
  spec.in_channels = c.in_channels;
  auto model = create_model(c.model, spec);
  model->to(device);
  set_memory_format(*model, true);
  model->train();
  const torch::Tensor x = uploaded_batch(c.in_channels, 32, true, device);
  ASSERT_EQ(x.device(), device);
  {
    SingleThreadedAutograd on_this_thread;
    NchwRecorder recorder;
    torch::Tensor loss;
    {
      Autocast autocast(device, precision);
      loss = model->forward(x).to(torch::kFloat).square().mean();
    }
    loss.backward();
    EXPECT_GT(recorder.checked(), 0) << "the recorder saw no layout-bearing operator";
    EXPECT_GT(recorder.ops_seen().count("aten::convolution_backward"), 0u) << "the backward was not seen";
    EXPECT_TRUE(recorder.nchw().empty()) << recorder.nchw().size() << " NCHW tensors:" << recorder.report();
  }
  int weights = 0;
  for (const auto& p : model->named_parameters()) {
    if (p.value().dim() != 4) continue;
    ++weights;
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_EQ(p.value().grad().suggest_memory_format(), kNhwc)
        << p.key() << " gradient strides " << p.value().grad().strides();
  }
  EXPECT_GT(weights, 0);
}

// On a CPU (so that the check itself runs in CI): fp32 and bf16 autocast.
TEST(ChannelsLast, TrainingStepRunsNhwcForwardAndBackward) {
  expect_training_step_nhwc({"resnet18d", 1}, torch::kCPU, Precision::kFp32);
  expect_training_step_nhwc({"efficientnet_b0", 3}, torch::kCPU, Precision::kFp32);
  expect_training_step_nhwc({"resnet18d", 1}, torch::kCPU, Precision::kBf16);
}

// The same on a GPU in bf16, as training runs there by default (train.precision auto, channels_last auto):
// every model of the zoo, 1 and 3 channels (one test, not one per model: on a CPU it is one skip).
TEST(ChannelsLast, CudaBf16TrainingStepsOfTheZooRunNhwc) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a CUDA GPU";
  for (const ZooCase& c : zoo_cases())
    expect_training_step_nhwc(c, torch::Device(torch::kCUDA, 0), Precision::kBf16);
}

INSTANTIATE_TEST_SUITE_P(Zoo, ChannelsLastZoo, testing::ValuesIn(zoo_cases()), case_name);

// The recorder does see NCHW: the same model without channels_last trips it (so the test above can fail).
TEST(ChannelsLast, RecorderSeesAnNchwForward) {
  ModelSpec spec;
  auto model = create_model("resnet18d", spec);
  model->eval();
  NchwRecorder recorder;
  torch::NoGradGuard no_grad;
  model->forward(uploaded_batch(1, 32, false));
  EXPECT_GT(recorder.nchw().size(), 20u);
  EXPECT_EQ(recorder.ops_seen(),
            (std::set<std::string>{"aten::convolution", "aten::batch_norm", "aten::max_pool2d",
                                   "aten::avg_pool2d", "aten::adaptive_avg_pool2d"}));
}

// set_memory_format gives the weights that are "contiguous" in both formats NHWC strides without copying
// them (same storage, same values), and takes them back; the 1-channel input gets them the same way.
TEST(ChannelsLast, OneChannelAndOneByOneTensorsGetNhwcStridesWithoutACopy) {
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 7)),
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 1)));
  const torch::Tensor stem = net->parameters()[0], pointwise = net->parameters()[2];
  ASSERT_EQ(stem.sizes(), torch::IntArrayRef({8, 1, 7, 7}));
  ASSERT_EQ(pointwise.sizes(), torch::IntArrayRef({16, 8, 1, 1}));
  const torch::Tensor stem_before = stem.detach().clone(), pointwise_before = pointwise.detach().clone();
  const void* stem_data = stem.data_ptr();
  ASSERT_TRUE(stem.is_contiguous(kNhwc)) << "the case this test is about: already 'contiguous' in NHWC";
  ASSERT_EQ(stem.suggest_memory_format(), torch::MemoryFormat::Contiguous);

  set_memory_format(*net, true);
  EXPECT_EQ(stem.suggest_memory_format(), kNhwc);
  EXPECT_EQ(pointwise.suggest_memory_format(), kNhwc);
  EXPECT_EQ(stem.strides(), torch::IntArrayRef({49, 1, 7, 1}));
  EXPECT_EQ(pointwise.strides(), torch::IntArrayRef({8, 1, 8, 8}));
  EXPECT_EQ(stem.data_ptr(), stem_data);
  EXPECT_TRUE(torch::equal(stem, stem_before));
  EXPECT_TRUE(torch::equal(pointwise, pointwise_before));

  set_memory_format(*net, false);
  EXPECT_EQ(stem.suggest_memory_format(), torch::MemoryFormat::Contiguous);
  EXPECT_EQ(pointwise.suggest_memory_format(), torch::MemoryFormat::Contiguous);
  EXPECT_TRUE(stem.is_contiguous());
  EXPECT_TRUE(torch::equal(pointwise, pointwise_before));

  const torch::Tensor grey = uploaded_batch(1, 16, true);
  EXPECT_EQ(grey.suggest_memory_format(), kNhwc);
  EXPECT_EQ(grey.strides(), torch::IntArrayRef({256, 1, 16, 1}));
  EXPECT_EQ(uploaded_batch(3, 16, true).suggest_memory_format(), kNhwc);
  EXPECT_EQ(uploaded_batch(1, 16, false).suggest_memory_format(), torch::MemoryFormat::Contiguous);
  EXPECT_TRUE(uploaded_batch(3, 16, false).is_contiguous());
}

// The inference path of validation, evaluate, predict and cv (run_inference: the eval loader, upload_batch,
// eval_logits with hflip TTA) runs every layer NHWC, and its logits equal the NCHW model's.
TEST(ChannelsLast, InferenceRunsNhwcWithTheSameLogits) {
  test::TempDir dir;
  test::make_dataset(dir / "ds", 6, 48, 0);
  const DatasetIndex index = load_index(dir / "ds/train.csv", dir / "ds/train", IndexOptions{});
  std::vector<int64_t> rows(static_cast<size_t>(index.size()));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  InferenceOptions options;
  options.image_size = 32;
  options.batch_size = 3;
  options.num_workers = 1;
  options.tta_hflip = true;
  torch::manual_seed(2);
  auto nchw = create_model("resnet18d", ModelSpec{});
  torch::manual_seed(2);
  auto nhwc = create_model("resnet18d", ModelSpec{});
  set_memory_format(*nhwc, true);
  auto one = make_local_collectives();
  const InferenceResult reference = run_inference(*nchw, index, rows, options, *one);
  options.channels_last = true;
  NchwRecorder recorder;
  const InferenceResult result = run_inference(*nhwc, index, rows, options, *one);
  EXPECT_GT(recorder.checked(), 0);
  EXPECT_TRUE(recorder.nchw().empty()) << recorder.report();
  EXPECT_TRUE(torch::allclose(result.logits, reference.logits, 1e-4, 1e-5));
}

}  // namespace
}  // namespace ranzcr
