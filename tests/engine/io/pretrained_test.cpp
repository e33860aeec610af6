#include "engine/io/pretrained.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/io/safetensors.h"
#include "models/registry.h"
#include "tests/build_paths.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;
using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;

// A model's state dict (timm's names, which are ours) as safetensors input.
Tensors state_of(const torch::nn::Module& m) {
  Tensors t;
  for (const auto& kv : m.named_parameters()) t.emplace_back(kv.key(), kv.value().detach().clone());
  for (const auto& kv : m.named_buffers()) t.emplace_back(kv.key(), kv.value().detach().clone());
  return t;
}

std::string write(const std::string& name, const Tensors& t) {
  const std::string path =
      (fs::temp_directory_path() / ("ranzcr_pretrained_" + name + ".safetensors")).string();
  save_safetensors(path, t);
  return path;
}

torch::Tensor get(const torch::nn::Module& m, const std::string& key) {
  for (const auto& kv : m.named_parameters())
    if (kv.key() == key) return kv.value();
  for (const auto& kv : m.named_buffers())
    if (kv.key() == key) return kv.value();
  throw std::runtime_error("no " + key);
}

std::string error_of(torch::nn::Module& m, const std::string& path) {
  try {
    load_pretrained(m, path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// ImageNet-shaped weights (3 channels, 1000 classes) into a grayscale 11-label model: the first conv
// summed over RGB (timm's adapt_input_conv), the classifier left as initialised, everything else equal.
TEST(Pretrained, ImageNetShapedWeightsAdaptTheStemAndKeepTheClassifier) {
  for (const char* name : {"resnet18", "resnet50d", "efficientnet_b0"}) {
    torch::manual_seed(1);
    ModelSpec imagenet;
    imagenet.in_channels = 3;
    imagenet.num_classes = 1000;
    auto source = create_model(name, imagenet);
    for (auto& b : source->buffers())  // non-trivial BatchNorm statistics
      if (b.is_floating_point()) b.uniform_(0.5, 1.5);
    const std::string path = write(name, state_of(*source));

    torch::manual_seed(2);
    auto model = create_model(name, ModelSpec{});
    const Tensors fresh = state_of(*model);
    const PretrainedReport r = load_pretrained(*model, path);
    fs::remove(path);

    const std::string stem = std::string(name) == "efficientnet_b0" ? "conv_stem.weight"
                             : std::string(name) == "resnet50d"     ? "conv1.0.weight"
                                                                    : "conv1.weight";
    const std::string head = std::string(name) == "efficientnet_b0" ? "classifier." : "fc.";
    EXPECT_NE(r.adapted_input_conv.find(stem), std::string::npos) << r.adapted_input_conv;
    ASSERT_EQ(r.reinitialised.size(), 2u) << name;
    EXPECT_EQ(r.loaded, static_cast<int64_t>(fresh.size()) - 2) << name;
    EXPECT_NE(r.summary(path).find("classifier freshly initialised"), std::string::npos);
    for (const auto& [key, before] : fresh) {
      const torch::Tensor now = get(*model, key);
      if (key == stem)
        EXPECT_TRUE(torch::allclose(now, get(*source, key).sum(1, true))) << name;
      else if (key.rfind(head, 0) == 0)
        EXPECT_TRUE(torch::equal(now, before)) << name << " " << key;
      else
        EXPECT_TRUE(torch::equal(now, get(*source, key))) << name << " " << key;
    }
  }
}

TEST(Pretrained, SameShapesLoadEverythingFromHalfPrecisionAndModulePrefixes) {
  torch::manual_seed(3);
  auto source = create_model("resnet18", ModelSpec{});
  Tensors t;
  for (auto& [k, v] : state_of(*source))
    t.emplace_back("module." + k, v.is_floating_point() ? v.to(torch::kFloat16) : v);
  const std::string path = write("half", t);
  torch::manual_seed(4);
  auto model = create_model("resnet18", ModelSpec{});
  const PretrainedReport r = load_pretrained(*model, path);
  fs::remove(path);
  EXPECT_TRUE(r.adapted_input_conv.empty());
  EXPECT_TRUE(r.reinitialised.empty());
  EXPECT_EQ(r.loaded, static_cast<int64_t>(t.size()));
  for (const auto& [k, v] : state_of(*source))
    EXPECT_TRUE(
        torch::equal(get(*model, k), v.is_floating_point() ? v.to(torch::kFloat16).to(torch::kFloat32) : v))
        << k;
}

TEST(Pretrained, MissingUnexpectedAndMisshapenKeysInOneError) {
  torch::manual_seed(5);
  auto source = create_model("resnet18", ModelSpec{});
  Tensors t;
  for (auto& [k, v] : state_of(*source)) {
    if (k == "layer1.0.conv1.weight") continue;                                 // missing
    if (k.find("num_batches_tracked") != std::string::npos) continue;           // optional
    t.emplace_back(k == "layer4.1.bn2.weight" ? "layer4.1.bn9.weight" : k, v);  // missing + unexpected
  }
  t.emplace_back("layer2.0.conv2.weight_extra", torch::zeros({2}));
  for (auto& [k, v] : t)
    if (k == "layer3.0.conv1.weight") v = torch::zeros({1, 1, 3, 3});  // other shape
  const std::string path = write("bad", t);
  auto model = create_model("resnet18", ModelSpec{});
  const Tensors before = state_of(*model);
  const std::string e = error_of(*model, path);
  fs::remove(path);
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_NE(e.find("does not fit the model"), std::string::npos) << e;
  EXPECT_NE(e.find("missing (2): layer1.0.conv1.weight [64,64,3,3], layer4.1.bn2.weight [512]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("unexpected (2):"), std::string::npos) << e;
  EXPECT_NE(e.find("layer4.1.bn9.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("layer3.0.conv1.weight file [1,1,3,3] model [256,128,3,3]"), std::string::npos) << e;
  for (const auto& [k, v] : before) EXPECT_TRUE(torch::equal(get(*model, k), v)) << k;  // untouched
}

TEST(Pretrained, CorruptArchivesAndMissingFilesAreRefusedClearly) {
  auto model = create_model("tiny_cnn", ModelSpec{});
  const std::string zip = (fs::temp_directory_path() / "ranzcr_pretrained.pth").string();
  std::ofstream(zip, std::ios::binary) << "PK\x03\x04 not really a zip";
  const std::string e = error_of(*model, zip);
  EXPECT_NE(e.find("model.pretrained: " + zip + ": cannot read the torch.save archive"), std::string::npos)
      << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  fs::remove(zip);
  EXPECT_NE(error_of(*model, "/nonexistent/w.safetensors").find("model.pretrained: cannot open"),
            std::string::npos);
}

// A stem of 6 input channels cannot become a 1-channel model's: one line naming the key (it was LibTorch's
// multi-line shape error in the copy).
TEST(Pretrained, AStemOfSixChannelsIsRefusedForOneChannel) {
  ModelSpec six;
  six.in_channels = 6;
  auto source = create_model("resnet18", six);
  const std::string path = write("six", state_of(*source));
  auto model = create_model("resnet18", ModelSpec{});
  const std::string e = error_of(*model, path);
  EXPECT_NE(e.find("conv1.weight: cannot adapt 6 input channels to 1"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  fs::remove(path);
}

// make_torch_saved.py's TinyNet: features (Conv2d 1->4 3x3 no bias, BatchNorm2d 4, ReLU), fc (Linear 4->3).
struct TinyNet : torch::nn::Module {
  TinyNet() {
    features->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).bias(false)));
    features->push_back(torch::nn::BatchNorm2d(4));
    features->push_back(torch::nn::ReLU());
    register_module("features", features);
    register_module("fc", fc);
  }
  torch::nn::Sequential features;
  torch::nn::Linear fc{4, 3};
};

// A state dict written by the real torch.save (an OrderedDict, "module."-prefixed) loads by name.
TEST(Pretrained, LoadsATorchSavedStateDict) {
  TinyNet model;
  const PretrainedReport r = load_pretrained(
      model, std::string(test::source_dir()) + "/tests/engine/io/fixtures/state_dict_module.pth");
  EXPECT_EQ(r.loaded, 8);
  EXPECT_TRUE(r.adapted_input_conv.empty());
  EXPECT_TRUE(r.reinitialised.empty());
  EXPECT_TRUE(torch::equal(get(model, "features.0.weight"),
                           (torch::arange(36, torch::kFloat32) * 0.25).reshape({4, 1, 3, 3})));
  EXPECT_TRUE(
      torch::equal(get(model, "features.1.running_var"), torch::arange(4, torch::kFloat32) * 0.25 + 4));
  EXPECT_EQ(get(model, "features.1.num_batches_tracked").item<int64_t>(), 7);
  EXPECT_TRUE(torch::equal(get(model, "fc.bias"), torch::arange(3, torch::kFloat32) * 0.25 + 7));
}

// A torchvision-named EfficientNet state dict (the keys of torchvision's own efficientnet_b0, ImageNet's
// 3 channels and 1000 classes), saved as a .pth, loads into our grayscale 11-label efficientnet_b0.
TEST(Pretrained, TorchvisionEfficientNetWeightsLoadByTimmName) {
  std::ifstream in(std::string(test::source_dir()) + "/tests/models/torchvision_keys/efficientnet_b0.txt");
  c10::Dict<std::string, torch::Tensor> dict;
  std::vector<std::string> keys;
  torch::manual_seed(7);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, dtype, shape;
    fields >> key >> dtype >> shape;
    std::vector<int64_t> dims;
    std::istringstream ds(shape);
    for (std::string d; std::getline(ds, d, ',');) dims.push_back(std::stoll(d));
    if (key == "features.0.0.weight") dims[1] = 3;
    if (key == "classifier.1.weight") dims[0] = 1000;
    if (key == "classifier.1.bias") dims[0] = 1000;
    dict.insert(key, dtype == "int64" ? torch::full(dims, 5, torch::kLong) : torch::rand(dims) + 0.5);
    keys.push_back(key);
  }
  ASSERT_EQ(keys.size(), 360u);
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  const std::string path = (fs::temp_directory_path() / "ranzcr_pretrained_torchvision.pth").string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto model = create_model("efficientnet_b0", ModelSpec{});
  const PretrainedReport r = load_pretrained(*model, path);
  fs::remove(path);
  EXPECT_EQ(r.loaded, 358);
  EXPECT_NE(r.adapted_input_conv.find("conv_stem.weight [32,3,3,3] -> [32,1,3,3]"), std::string::npos);
  ASSERT_EQ(r.reinitialised.size(), 2u);
  EXPECT_TRUE(torch::allclose(get(*model, "conv_stem.weight"), dict.at("features.0.0.weight").sum(1, true)));
  EXPECT_TRUE(
      torch::equal(get(*model, "blocks.0.0.conv_dw.weight"), dict.at("features.1.0.block.0.0.weight")));
  EXPECT_TRUE(
      torch::equal(get(*model, "blocks.1.0.se.conv_expand.bias"), dict.at("features.2.0.block.2.fc2.bias")));
  EXPECT_TRUE(
      torch::equal(get(*model, "blocks.6.0.bn3.running_var"), dict.at("features.7.0.block.3.1.running_var")));
  EXPECT_TRUE(torch::equal(get(*model, "bn2.weight"), dict.at("features.8.1.weight")));
}

// The weights a job resolved reach the model it starts from (the trainer's and bench's); none: the model as
// initialised, the random stream used as create_model uses it.
TEST(Pretrained, StartingModelLoadsTheResolvedWeights) {
  torch::manual_seed(6);
  auto source = create_model("resnet18", ModelSpec{});
  const std::string path = write("config", state_of(*source));
  Config config;
  config.model.name = "resnet18";
  config.model.pretrained = hub::parse_pretrained_source(path);
  const ResolvedWeights weights = resolve_weights(config, {}, /*network=*/false, "", {});
  EXPECT_EQ(weights.file, path);
  EXPECT_TRUE(weights.input_mean.empty() && weights.input_std.empty());
  const StartingModel start = starting_model(config, weights, 11, torch::kCPU, /*channels_last=*/false);
  fs::remove(path);
  EXPECT_EQ(start.loaded, std::to_string(state_of(*source).size()) + " tensors from " + path);
  EXPECT_EQ(start.warning, "");
  for (const auto& [k, v] : state_of(*source)) EXPECT_TRUE(torch::equal(get(*start.model, k), v)) << k;

  config.model.pretrained = {};
  torch::manual_seed(7);
  const StartingModel fresh = starting_model(config, ResolvedWeights{}, 11, torch::kCPU, false);
  torch::manual_seed(7);
  auto same = create_model("resnet18", model_spec(config.model, 11));
  EXPECT_EQ(fresh.loaded, "");
  for (const auto& [k, v] : state_of(*same)) EXPECT_TRUE(torch::equal(get(*fresh.model, k), v)) << k;
}

}  // namespace
}  // namespace ranzcr
