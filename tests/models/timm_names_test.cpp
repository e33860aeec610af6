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

#include "models/registry.h"
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
    std::ifstream in(std::string(RANZCR_SOURCE_DIR) + "/tests/models/timm_keys/" + name + ".txt");
    EXPECT_TRUE(in.good()) << name;
  }
}

}  // namespace
}  // namespace ranzcr
