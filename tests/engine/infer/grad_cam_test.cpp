// Grad-CAM against its closed form: every model of the zoo pools its last map A globally into a linear
// layer W, so d logit_c / d A_k(i, j) = W[c, k] / (h w) and Grad-CAM is relu(sum_k W[c, k] / (h w) A_k),
// upsampled (the class activation map of Zhou et al. 2016). The autograd path must give exactly that.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/infer/grad_cam.h"
#include "models/registry.h"

namespace ranzcr {
namespace {

// The classifier's weight: the last parameter named "*.weight" of shape [num_classes, C].
torch::Tensor head_weight(Classifier& model, int64_t channels) {
  torch::Tensor w;
  for (const auto& p : model.named_parameters())
    if (p.key().size() > 7 && p.key().substr(p.key().size() - 7) == ".weight" && p.value().dim() == 2 &&
        p.value().size(0) == 11 && p.value().size(1) == channels)
      w = p.value();
  return w;
}

// One model per code path of the zoo: the larger members of a family (resnet34..200d, efficientnet_b1..b7)
// run the same forward_with_features as these, with more blocks.
TEST(GradCam, EqualsTheClosedFormOnEveryModelFamily) {
  for (const std::string& name : {"tiny_cnn", "resnet18", "resnet18d", "resnet50", "efficientnet_b0"}) {
    torch::manual_seed(3);
    ModelSpec spec;
    spec.in_channels = 1;
    spec.num_classes = 11;
    auto model = create_model(name, spec);
    model->eval();
    {  // non-trivial BatchNorm statistics, so that eval mode matters
      torch::NoGradGuard no_grad;
      for (auto& b : model->named_buffers())
        if (b.key().find("running_var") != std::string::npos) b.value().uniform_(0.5, 1.5);
    }
    const torch::Tensor x = torch::rand({2, 1, 64, 48});
    const std::vector<int64_t> labels{3, 9};
    const torch::Tensor cam = grad_cam(*model, x, labels);
    ASSERT_EQ(cam.sizes(), (std::vector<int64_t>{2, 64, 48})) << name;

    torch::NoGradGuard no_grad;
    const ClassifierOutput out = model->forward_with_features(x);
    const torch::Tensor a = out.last_features;
    // last_features is what the head pools into the logits
    const torch::Tensor w = head_weight(*model, a.size(1));
    ASSERT_TRUE(w.defined()) << name;
    const torch::Tensor pooled = a.mean({2, 3});
    const torch::Tensor bias_free = torch::matmul(pooled, w.t());
    const double size = out.logits.abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(out.logits - bias_free, (out.logits - bias_free)[0].expand_as(out.logits),
                                1e-4, 1e-4 * size))
        << name;  // logits = pooled W^T + bias
    for (int i = 0; i < 2; ++i) {
      const torch::Tensor alpha = w[labels[i]] / static_cast<double>(a.size(2) * a.size(3));
      torch::Tensor want = torch::relu((alpha.view({-1, 1, 1}) * a[i]).sum(0, true)).unsqueeze(0);
      namespace F = torch::nn::functional;
      want = F::interpolate(want, F::InterpolateFuncOptions()
                                      .size(std::vector<int64_t>{64, 48})
                                      .mode(torch::kBilinear)
                                      .align_corners(false));
      const double scale = want.abs().max().item<double>() + 1e-12;
      EXPECT_LT((cam[i] - want[0][0]).abs().max().item<double>() / scale, 1e-4) << name << " image " << i;
    }
    EXPECT_EQ(model->is_training(), false);
  }
}

TEST(GradCam, LabelNames) {
  CamOptions o;
  const std::vector<std::string> names{"a", "b", "c"};
  o.labels = {"all"};
  EXPECT_EQ(cam_label_indices(o, names), (std::vector<int64_t>{0, 1, 2}));
  o.labels = {"top1"};
  EXPECT_EQ(cam_label_indices(o, names), (std::vector<int64_t>{-1}));
  o.labels = {"c", "a"};
  EXPECT_EQ(cam_label_indices(o, names), (std::vector<int64_t>{2, 0}));
  o.labels = {"d"};
  try {
    cam_label_indices(o, names);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no label 'd' (all, top1 or one of 'a', 'b', 'c')"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ranzcr
