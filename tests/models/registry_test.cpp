#include "models/registry.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace ranzcr {
namespace {

int64_t reference_params(const std::string& name) {
  ModelSpec spec;
  spec.in_channels = 3;
  spec.num_classes = 1000;
  return count_parameters(*create_model(name, spec));
}

// torchvision's parameter counts (3-channel input, 1000 classes).
TEST(Models, ParameterCountsMatchTheReferenceArchitectures) {
  EXPECT_EQ(reference_params("resnet18"), 11689512);
  EXPECT_EQ(reference_params("resnet34"), 21797672);
  EXPECT_EQ(reference_params("resnet50"), 25557032);
  EXPECT_EQ(reference_params("resnet101"), 44549160);
  EXPECT_EQ(reference_params("efficientnet_b0"), 5288548);
  EXPECT_EQ(reference_params("efficientnet_b1"), 7794184);
}

TEST(Models, OutputShapesForGrayscaleInput) {
  torch::manual_seed(0);
  ModelSpec spec;  // 1 channel, 11 classes
  for (const char* name :
       {"tiny_cnn", "resnet18", "resnet18d", "resnet50d", "efficientnet_b0", "efficientnet_b2"}) {
    auto m = create_model(name, spec);
    m->eval();
    torch::NoGradGuard g;
    const auto y = m->forward(torch::rand({2, 1, 64, 64}));
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 11})) << name;
    EXPECT_TRUE(torch::isfinite(y).all().item<bool>()) << name;
  }
}

TEST(Models, ResNetDHasTheDeepStem) {
  ModelSpec spec;
  auto d = create_model("resnet50d", spec), plain = create_model("resnet50", spec);
  // The deep stem (3x3 convs 1->32->32->64) replaces the 7x7 conv (1->64); avg-pool shortcuts add none.
  const int64_t stem_d = 32 * 1 * 9 + 32 * 32 * 9 + 64 * 32 * 9 + 2 * 32 * 2, stem_plain = 64 * 1 * 49;
  EXPECT_EQ(count_parameters(*d) - count_parameters(*plain), stem_d - stem_plain);
}

TEST(Models, UnknownNameListsTheValidOnes) {
  try {
    create_model("resnet9000", ModelSpec{});
    FAIL();
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown model name 'resnet9000'"), std::string::npos);
    EXPECT_NE(msg.find("resnet200d"), std::string::npos);
    EXPECT_NE(msg.find("efficientnet_b7"), std::string::npos);
  }
  EXPECT_EQ(model_names().size(), 20u);
}

}  // namespace
}  // namespace ranzcr
