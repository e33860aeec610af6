// Our models compute timm's function, not only timm's names: for the same weights and input, timm 1.0.31's
// create_model (and torchvision's resnet18, when torchvision imports) gives our eval-mode logits to 1e-4.
// The test writes each model's state dict, a random input and our logits to a safetensors file and runs
// scripts/timm/parity.py on the files; it skips where no python can import torch and timm (the script
// exits 77). The python: RANZCR_TIMM_PYTHON, the project's .venv (scripts/setup.sh installs timm there
// with --no-deps), or python3. RANZCR_TIMM_PARITY_DIR=FOLDER keeps the files there, to rerun the script by
// hand (`python3 scripts/timm/parity.py FOLDER/*.safetensors`).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/text.h"
#include "engine/io/safetensors.h"
#include "models/registry.h"
#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

constexpr int kSkip = 77;  // parity.py: no torch or timm in that python

struct Case {
  std::string model;
  int in_channels;
};

// The python that runs parity.py; "" when none exists.
std::string timm_python() {
  if (const char* env = std::getenv("RANZCR_TIMM_PYTHON")) return env;
  const std::string venv = std::string(test::source_dir()) + "/.venv/bin/python";
  if (std::filesystem::exists(venv)) return venv;
  if (test::run_command("command -v python3").status == 0) return "python3";
  return "";
}

// Builds `c` with a fixed seed, gives every BatchNorm non-trivial running statistics and shift (eval-mode
// BN then matters: running_var ~ U(0.5, 1.5), running_mean ~ N(0, 0.5), bias ~ N(0, 0.1)), runs a random [2,
// in_channels, 104, 104] float32 input in eval mode on the CPU and writes the state dict (timm's names),
// "__input__" and "__logits__" to `path`. 104 px: the feature maps of stride 8, 16 and 32 are 13, 7 and 4
// wide, so odd sizes test the strided padding and the ceil-mode average pool of the ResNet-D shortcuts.
void write_case(const Case& c, const std::string& path) {
  torch::manual_seed(42);
  ModelSpec spec;
  spec.in_channels = c.in_channels;
  spec.num_classes = 11;
  auto model = create_model(c.model, spec);
  {
    torch::NoGradGuard no_grad;
    const bool basic_blocks = c.model == "resnet18" || c.model == "resnet34";
    for (const auto& kv : model->named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
      auto* bn = kv.value()->as<torch::nn::BatchNorm2d>();
      if (!bn) continue;
      const std::string& name = kv.key();
      bn->running_var.uniform_(0.5, 1.5);
      bn->running_mean.normal_(0.0, 0.5);
      bn->bias.normal_(0.0, 0.1);
      // The BN that ends a residual branch (bn3 of bottlenecks and MBConvs, bn2 of basic blocks) gets a
      // small scale, as in trained networks: with 1, the 66 blocks of resnet200d grow the eval-mode
      // logits to ~1e13, where an absolute 1e-4 would mean nothing.
      const bool ends_branch = ends_with(name, ".bn3") || (basic_blocks && ends_with(name, ".bn2"));
      if (ends_branch) bn->weight.uniform_(0.125, 0.375);
    }
  }
  model->eval();
  const torch::Tensor input = torch::randn({2, c.in_channels, 104, 104});
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    logits = model->forward(input);
  }
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 11}));
  // Logits of order 1..100: an absolute tolerance of 1e-4 is then a relative one of ~1e-5.
  const double largest = logits.abs().max().item<double>();
  ASSERT_TRUE(largest > 0.1 && largest < 1000) << c.model << ": max |logit| " << largest;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& kv : model->named_parameters(/*recurse=*/true)) tensors.emplace_back(kv.key(), kv.value());
  for (const auto& kv : model->named_buffers(/*recurse=*/true)) tensors.emplace_back(kv.key(), kv.value());
  tensors.emplace_back("__input__", input);
  tensors.emplace_back("__logits__", logits);
  save_safetensors(path, tensors,
                   {{"model", c.model},
                    {"in_chans", std::to_string(c.in_channels)},
                    {"num_classes", std::to_string(spec.num_classes)}});
}

TEST(TimmParity, LogitsEqualTimmsForTheSameWeights) {
  const std::string python = timm_python();
  if (python.empty()) RANZCR_SKIP_WITHOUT_REFERENCE("no python (set RANZCR_TIMM_PYTHON)");
  const std::string script = python + " '" + test::source_dir() + "/scripts/timm/parity.py'";
  const auto check = test::run_command(script + " --check");  // skip before building the models
  if (check.status == kSkip) RANZCR_SKIP_WITHOUT_REFERENCE(python << ": " << check.output);
  ASSERT_EQ(check.status, 0) << python << " scripts/timm/parity.py --check:\n" << check.output;
  test::TempDir temp;
  std::string dir = temp.str();
  if (const char* keep = std::getenv("RANZCR_TIMM_PARITY_DIR")) {
    dir = keep;
    std::filesystem::create_directories(dir);
  }
  // resnet18 with 3 channels is the one torchvision's resnet18 is compared with too.
  const std::vector<Case> cases{
      {"resnet18", 1}, {"resnet50d", 1}, {"resnet200d", 1}, {"efficientnet_b0", 1}, {"resnet18", 3}};
  std::string files;
  for (const auto& c : cases) {
    const std::string path = dir + "/" + (c.model + "_in" + std::to_string(c.in_channels) + ".safetensors");
    write_case(c, path);
    if (HasFatalFailure()) return;
    files += " '" + path + "'";
  }
  const auto r = test::run_command(script + files);
  if (r.status == kSkip) RANZCR_SKIP_WITHOUT_REFERENCE(python << ": " << r.output);
  ASSERT_EQ(r.status, 0) << python << " scripts/timm/parity.py:\n" << r.output;
  size_t compared = 0;  // one "timm.<model> ... ok" line per file
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("timm.", 0) == 0 && line.find(" ok ") != std::string::npos) ++compared;
  EXPECT_EQ(compared, cases.size()) << r.output;
  std::cout << r.output;  // the per-model differences, for the logs
}

}  // namespace
}  // namespace ranzcr
