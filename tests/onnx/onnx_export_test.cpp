// ONNX export of every zoo model against LibTorch: ranzcr writes each graph (1 input channel; 3 as well for
// one model per stem) and the logits and probabilities LibTorch computes for batches of 1 and 5;
// tests/onnx/check_onnx.py runs ONNX's checker with full shape inference, reads the metadata back, and
// compares ONNX Runtime and OpenVINO (f32) with LibTorch within 1e-4 of the largest |output| (the .venv's
// packages; skipped without them, failed under CI). An operator outside the table is one line naming it.
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "models/registry.h"
#include "onnx/onnx_export.h"
#include "tests/build_paths.h"
#include "tests/python_worker.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

constexpr int kSkip = 77;  // check_onnx.py: no onnx, onnxruntime or openvino in that python

// Eval-mode BatchNorm that matters (running statistics and shifts away from 0 and 1), with the branch-ending
// BNs scaled down as in trained networks, so that deep models' logits stay of order 1..100 (see
// tests/models/timm_parity_test.cpp).
void randomise_batch_norms(Classifier& model, const std::string& name) {
  torch::NoGradGuard no_grad;
  const bool basic_blocks = name == "resnet18" || name == "resnet34";
  for (const auto& kv : model.named_modules("", /*include_self=*/false)) {
    auto* bn = kv.value()->as<torch::nn::BatchNorm2d>();
    if (!bn) continue;
    bn->running_var.uniform_(0.5, 1.5);
    bn->running_mean.normal_(0.0, 0.5);
    bn->bias.normal_(0.0, 0.1);
    if (ends_with(kv.key(), ".bn3") || (basic_blocks && ends_with(kv.key(), ".bn2")))
      bn->weight.uniform_(0.125, 0.375);
  }
}

void write_floats(const std::string& path, const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous().to(torch::kFloat32);
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()), c.numel() * sizeof(float));
}

// Writes NAME.onnx, its inputs and LibTorch's outputs into `dir`, and the case file check_onnx.py reads.
std::string write_case(const std::string& dir, const std::string& name, int channels, int size) {
  torch::manual_seed(7);
  ModelSpec spec;
  spec.in_channels = channels;
  auto model = create_model(name, spec);
  randomise_batch_norms(*model, name);
  model->eval();
  OnnxGraphSpec g;
  g.in_channels = channels;
  g.image_size = size;
  g.metadata = {{"model_name", name}, {"in_chans", std::to_string(channels)}};
  const std::string stem = name + "_" + std::to_string(channels);
  test::write_file(dir + "/" + stem + ".onnx", onnx_model_bytes({{model.get(), {0.5}, {0.25}}}, g));
  nlohmann::json cases = nlohmann::json::array();
  for (int batch : {1, 5}) {
    const torch::Tensor x = torch::randn({batch, channels, size, size});
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = model->forward(x);
    }
    const std::string b = stem + "_b" + std::to_string(batch);
    write_floats(dir + "/" + b + "_in.bin", x);
    write_floats(dir + "/" + b + "_logits.bin", logits);
    write_floats(dir + "/" + b + "_probabilities.bin", torch::sigmoid(logits));
    cases.push_back({{"input", b + "_in.bin"},
                     {"shape", {batch, channels, size, size}},
                     {"outputs",
                      {{"logits", {b + "_logits.bin", {batch, 11}}},
                       {"probabilities", {b + "_probabilities.bin", {batch, 11}}}}}});
  }
  const std::string case_file = dir + "/" + stem + ".json";
  test::write_file(
      case_file,
      nlohmann::json{{"model", stem + ".onnx"}, {"metadata", g.metadata}, {"cases", cases}}.dump());
  return case_file;
}

// One test per zoo model, each with 1 channel (the app's grayscale default), and with 3 for the smallest
// model of each stem: the channel count changes only the stem's first convolution, which each family builds
// the same way at every depth (models/resnet.cpp's plain and deep stems, models/efficientnet.cpp,
// models/tiny_cnn.cpp). One python worker for the suite (ctest runs it in one process): onnx, ONNX Runtime
// and OpenVINO imported once.
class OnnxZoo : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    python_ = new test::PythonWorker(
        test::python(), std::string(test::source_dir()) + "/tests/onnx/check_onnx.py", *dir_ / "python.log");
  }
  static void TearDownTestSuite() {
    delete python_;
    python_ = nullptr;
    delete dir_;
    dir_ = nullptr;
  }
  static std::vector<int> channel_counts(const std::string& name) {
    for (const char* stem : {"tiny_cnn", "resnet18", "resnet18d", "efficientnet_b0"})
      if (name == stem) return {1, 3};
    return {1};
  }
  static inline test::TempDir* dir_ = nullptr;
  static inline test::PythonWorker* python_ = nullptr;
};

TEST_P(OnnxZoo, EqualsLibTorchInOnnxRuntimeAndOpenVino) {
  if (!onnx_export_available()) RANZCR_SKIP_WITHOUT_REFERENCE("this build has no ONNX export (libonnx-dev)");
  const std::string name = GetParam();
  test::TempDir dir;
  for (int channels : channel_counts(name)) {
    SCOPED_TRACE(name + " with " + std::to_string(channels) + " channels");
    // 72 px: feature maps of 9, 5 and 3 at strides 8, 16 and 32 (odd sizes: padding, ceil-mode pooling).
    const std::string case_file = write_case(dir.str(), name, channels, 72);
    const auto r = python_->call(case_file);  // split at spaces: a temporary folder has none
    if (r.status == kSkip) RANZCR_SKIP_WITHOUT_REFERENCE(test::python() << ": " << r.output);
    ASSERT_EQ(r.status, 0) << r.output;
    std::cout << name << " " << channels << ": " << r.output.substr(r.output.rfind("worst"));
  }
}

INSTANTIATE_TEST_SUITE_P(EveryModel, OnnxZoo, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// A model with an operator the table does not map: one line naming it, nothing written.
struct GeluNet : Classifier {
  torch::Tensor forward(torch::Tensor x) override { return torch::gelu(x).mean({2, 3}).repeat({1, 11}); }
};

TEST(OnnxExport, AnUnmappedOperatorIsOneLineNamingIt) {
  if (!onnx_export_available()) RANZCR_SKIP_WITHOUT_REFERENCE("this build has no ONNX export (libonnx-dev)");
  GeluNet net;
  OnnxGraphSpec g;
  g.image_size = 8;
  try {
    onnx_model_bytes({{&net, {0.0}, {1.0}}}, g);
    FAIL() << "exported a model with gelu";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("aten::gelu"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// The metadata reads back; an ensemble of two with different normalisations is one graph whose
// probabilities are the mean of the members' (checked by check_onnx.py in both runtimes).
TEST(OnnxExport, AnEnsembleAveragesItsMembersProbabilities) {
  if (!onnx_export_available()) RANZCR_SKIP_WITHOUT_REFERENCE("this build has no ONNX export (libonnx-dev)");
  torch::manual_seed(3);
  ModelSpec spec;
  auto a = create_model("tiny_cnn", spec), b = create_model("tiny_cnn", spec);
  for (auto* m : {&a, &b}) {
    randomise_batch_norms(**m, "tiny_cnn");
    (*m)->eval();
  }
  OnnxGraphSpec g;
  g.image_size = 32;
  g.metadata = {{"label_names", "[\"x\"]"}, {"members", "2"}};
  const std::string bytes = onnx_model_bytes({{a.get(), {0.5}, {0.25}}, {b.get(), {0.2}, {0.5}}}, g);
  EXPECT_EQ(onnx_metadata(bytes), g.metadata);
  test::TempDir dir;
  test::write_file(dir / "e.onnx", bytes);
  const torch::Tensor x = torch::randn({3, 1, 32, 32});  // normalised as member a wants
  torch::Tensor probs;
  {
    torch::NoGradGuard no_grad;
    const torch::Tensor raw = x * 0.25 + 0.5;  // pixels / 255
    probs = 0.5 * (torch::sigmoid(a->forward(x)) + torch::sigmoid(b->forward((raw - 0.2) / 0.5)));
  }
  write_floats(dir / "x.bin", x);
  write_floats(dir / "p.bin", probs);
  test::write_file(dir / "e.json", nlohmann::json{{"model", "e.onnx"},
                                                  {"metadata", g.metadata},
                                                  {"cases",
                                                   {{{"input", "x.bin"},
                                                     {"shape", {3, 1, 32, 32}},
                                                     {"outputs", {{"probabilities", {"p.bin", {3, 11}}}}}}}}}
                                       .dump());
  const auto r = test::run_command(test::python() + " '" + test::source_dir() +
                                   "/tests/onnx/check_onnx.py' '" + (dir / "e.json") + "' 2>&1");
  if (r.status == kSkip) RANZCR_SKIP_WITHOUT_REFERENCE(test::python() << ": " << r.output);
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace ranzcr
