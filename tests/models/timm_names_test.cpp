// Our ResNet and EfficientNet state dicts equal timm's: the same keys, shapes and dtypes, so timm weights
// load by name. The expected lists, tests/models/timm_keys/<name>.txt, were written from timm 1.0.31's own
// model code (create_model(name, in_chans=1, num_classes=11).state_dict(), no weights) run on this
// project's torch by scripts/timm/state_dict_keys.py, which stubs the packages timm imports but never uses
// to build a model (torchvision, PIL, huggingface_hub, safetensors). Rerun it to refresh them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>

#include "models/pretrained.h"
#include "models/registry.h"
#include "tests/build_paths.h"
#include "tests/models/key_files.h"

namespace ranzcr {
namespace {

using Entry = test::KeyEntry;

std::string describe(const Entry& e) {
  std::string s = e.dtype + " [";
  for (size_t i = 0; i < e.shape.size(); ++i) s += (i ? "," : "") + std::to_string(e.shape[i]);
  return s + "]";
}

std::map<std::string, Entry> read_timm_keys(const std::string& model) {
  const auto lines = test::read_key_file("timm_keys/" + model + ".txt");
  return std::map<std::string, Entry>(lines.begin(), lines.end());
}

std::map<std::string, Entry> our_keys(const std::string& model) {
  torch::manual_seed(0);
  auto m = create_model(model, ModelSpec{});  // 1 channel, 11 classes
  std::map<std::string, Entry> keys;
  auto add = [&](const std::string& k, const torch::Tensor& t) { keys[k] = test::key_entry(t); };
  for (const auto& kv : m->named_parameters(/*recurse=*/true)) add(kv.key(), kv.value());
  for (const auto& kv : m->named_buffers(/*recurse=*/true)) add(kv.key(), kv.value());
  return keys;
}

class TimmNames : public ::testing::TestWithParam<std::string> {};

TEST_P(TimmNames, StateDictKeysAndShapesEqualTimms) {
  const auto expected = read_timm_keys(GetParam());
  const auto ours = our_keys(GetParam());
  ASSERT_FALSE(expected.empty());
  std::string diff;
  for (const auto& kv : expected) {
    auto it = ours.find(kv.first);
    if (it == ours.end())
      diff += "  missing " + kv.first + " " + describe(kv.second) + "\n";
    else if (!(it->second == kv.second))
      diff += "  " + kv.first + ": ours " + describe(it->second) + ", timm " + describe(kv.second) + "\n";
  }
  for (const auto& kv : ours)
    if (!expected.count(kv.first)) diff += "  unexpected " + kv.first + " " + describe(kv.second) + "\n";
  EXPECT_TRUE(diff.empty()) << GetParam() << " differs from timm:\n" << diff;
  EXPECT_EQ(ours.size(), expected.size());
}

INSTANTIATE_TEST_SUITE_P(Zoo, TimmNames,
                         ::testing::Values("resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                                           "resnet18d", "resnet34d", "resnet50d", "resnet101d", "resnet152d",
                                           "resnet200d", "efficientnet_b0", "efficientnet_b1",
                                           "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
                                           "efficientnet_b5", "efficientnet_b6", "efficientnet_b7"));

// Every model but tiny_cnn (ours alone) has a timm key list.
TEST(TimmNames, EveryZooModelButTinyCnnIsCovered) {
  for (const auto& name : model_names()) {
    if (name == "tiny_cnn") continue;
    std::ifstream in(std::string(test::source_dir()) + "/tests/models/timm_keys/" + name + ".txt");
    EXPECT_TRUE(in.good()) << name;
  }
}

// --- torchvision names: timm_names_from_torchvision on the state-dict keys of torchvision 0.28's own model
// code (tests/models/torchvision_keys/, written by scripts/timm/torchvision_keys.py) ---

std::vector<std::pair<std::string, test::KeyEntry>> read_keys(const std::string& model) {
  return test::read_key_file("torchvision_keys/" + model + ".txt");
}

class TorchvisionNames : public ::testing::TestWithParam<std::string> {};

// Each torchvision state-dict key, translated, is one of our model's keys (3 input channels, 11 classes)
// with the same shape and dtype, and every one of ours is hit exactly once.
TEST_P(TorchvisionNames, TranslateToOurKeysAndShapes) {
  const auto keys = read_keys(GetParam());
  ASSERT_FALSE(keys.empty());
  NamedTensors tv;
  for (const auto& [k, e] : keys)
    tv.emplace_back(k, torch::empty(e.shape, e.dtype == "int64" ? torch::kLong : torch::kFloat32));
  const NamedTensors ours_named = timm_names_from_torchvision(tv);
  ASSERT_EQ(ours_named.size(), tv.size());

  ModelSpec spec;
  spec.in_channels = 3;
  spec.num_classes = 11;
  auto model = create_model(GetParam(), spec);
  std::map<std::string, torch::Tensor> ours;
  for (const auto& kv : model->named_parameters()) ours[kv.key()] = kv.value();
  for (const auto& kv : model->named_buffers()) ours[kv.key()] = kv.value();

  std::string diff;
  std::map<std::string, int> hits;
  for (size_t i = 0; i < tv.size(); ++i) {
    const std::string& k = ours_named[i].first;
    auto it = ours.find(k);
    if (it == ours.end()) {
      diff += "  " + tv[i].first + " -> " + k + ": not ours\n";
      continue;
    }
    if (++hits[k] > 1) diff += "  " + k + " hit twice\n";
    if (it->second.sizes() != ours_named[i].second.sizes() ||
        it->second.scalar_type() != ours_named[i].second.scalar_type())
      diff += "  " + tv[i].first + " -> " + k + ": other shape or dtype\n";
  }
  for (const auto& kv : ours)
    if (!hits.count(kv.first)) diff += "  ours only: " + kv.first + "\n";
  EXPECT_TRUE(diff.empty()) << GetParam() << ":\n" << diff;
}

INSTANTIATE_TEST_SUITE_P(Zoo, TorchvisionNames,
                         ::testing::Values("efficientnet_b0", "efficientnet_b1", "efficientnet_b2",
                                           "efficientnet_b3", "efficientnet_b4", "efficientnet_b5",
                                           "efficientnet_b6", "efficientnet_b7", "resnet18", "resnet34",
                                           "resnet50", "resnet101", "resnet152"));

TEST(TorchvisionNames, SpotChecksAndOtherNamingsUnchanged) {
  NamedTensors tv;
  for (const auto& [k, e] : read_keys("efficientnet_b0")) tv.emplace_back(k, torch::zeros({1}));
  std::map<std::string, std::string> renamed;
  const NamedTensors t = timm_names_from_torchvision(tv);
  for (size_t i = 0; i < tv.size(); ++i) renamed[tv[i].first] = t[i].first;
  EXPECT_EQ(renamed["features.0.0.weight"], "conv_stem.weight");
  EXPECT_EQ(renamed["features.0.1.running_var"], "bn1.running_var");
  EXPECT_EQ(renamed["features.1.0.block.0.0.weight"], "blocks.0.0.conv_dw.weight");
  EXPECT_EQ(renamed["features.1.0.block.1.fc1.weight"], "blocks.0.0.se.conv_reduce.weight");
  EXPECT_EQ(renamed["features.1.0.block.2.1.bias"], "blocks.0.0.bn2.bias");
  EXPECT_EQ(renamed["features.2.0.block.0.0.weight"], "blocks.1.0.conv_pw.weight");
  EXPECT_EQ(renamed["features.2.0.block.1.1.weight"], "blocks.1.0.bn2.weight");
  EXPECT_EQ(renamed["features.2.0.block.2.fc2.bias"], "blocks.1.0.se.conv_expand.bias");
  EXPECT_EQ(renamed["features.2.0.block.3.0.weight"], "blocks.1.0.conv_pwl.weight");
  EXPECT_EQ(renamed["features.7.0.block.3.1.num_batches_tracked"], "blocks.6.0.bn3.num_batches_tracked");
  EXPECT_EQ(renamed["features.8.0.weight"], "conv_head.weight");
  EXPECT_EQ(renamed["features.8.1.weight"], "bn2.weight");
  EXPECT_EQ(renamed["classifier.1.weight"], "classifier.weight");

  // tiny_cnn's own features.N names and timm's names pass through.
  const NamedTensors tiny = {{"features.0.weight", torch::zeros({1})}, {"fc.weight", torch::zeros({1})}};
  const NamedTensors timm = {{"conv_stem.weight", torch::zeros({1})},
                             {"blocks.0.0.conv_dw.weight", torch::zeros({1})}};
  for (const auto& names : {tiny, timm}) {
    const NamedTensors same = timm_names_from_torchvision(names);
    for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(same[i].first, names[i].first);
  }
}

}  // namespace
}  // namespace ranzcr
