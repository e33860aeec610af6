#include "engine/train/aux_seg.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace ranzcr {
namespace {

struct Case {
  torch::Tensor features, masks, has;
};

Case make_case(int64_t n) {
  torch::manual_seed(3);
  Case c;
  c.features = torch::randn({n, 8, 4, 4});
  c.masks = (torch::rand({n, 1, 32, 32}) > 0.8).to(torch::kUInt8);
  c.has = (torch::arange(n) % 3 != 1).to(torch::kFloat32);  // every third image has no annotations
  return c;
}

// Gradients of the head's parameters for `loss_of(head, rows)`.
std::vector<torch::Tensor> grads(AuxSegHead& head, const torch::Tensor& loss) {
  head->zero_grad();
  loss.backward();
  std::vector<torch::Tensor> out;
  for (const auto& p : head->parameters()) out.push_back(p.grad().clone());
  return out;
}

torch::Tensor local_sum(AuxSegHead& head, const Case& c, int64_t from, int64_t n) {
  const torch::Tensor logits = head->forward(c.features.narrow(0, from, n));
  return aux_seg_loss_sum(logits, mask_targets(c.masks.narrow(0, from, n), 4, 4), c.has.narrow(0, from, n));
}

// 2 ranks x batch B (gradients averaged, as DDP does) give the gradients of 1 rank x batch 2B.
TEST(AuxSeg, TwoRanksOfBEqualOneRankOf2B) {
  const int64_t b = 5;
  const Case c = make_case(2 * b);
  torch::manual_seed(1);
  AuxSegHead head(8);
  head->eval();  // BatchNorm statistics of the whole batch would differ from each half's
  const double weight = 0.7;
  const torch::Tensor one_count = c.has.sum();
  const auto one = grads(head, aux_seg_rank_loss(local_sum(head, c, 0, 2 * b), one_count, weight, 1));
  const torch::Tensor global = c.has.sum();  // all-reduced count
  const auto r0 = grads(head, aux_seg_rank_loss(local_sum(head, c, 0, b), global, weight, 2));
  const auto r1 = grads(head, aux_seg_rank_loss(local_sum(head, c, b, b), global, weight, 2));
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_TRUE(torch::allclose((r0[i] + r1[i]) / 2, one[i], 1e-5, 1e-7)) << i;
  // And the single-process loss is the mean over the annotated images of their mean BCE.
  const torch::Tensor logits = head->forward(c.features);
  const torch::Tensor targets = mask_targets(c.masks, 4, 4);
  double expected = 0;
  for (int64_t i = 0; i < 2 * b; ++i)
    if (c.has[i].item<float>() > 0)
      expected += torch::binary_cross_entropy_with_logits(logits[i], targets[i]).item<double>();
  expected /= c.has.sum().item<double>();
  EXPECT_NEAR(aux_seg_rank_loss(local_sum(head, c, 0, 2 * b), one_count, 1.0, 1).item<double>(), expected,
              1e-6);
}

TEST(AuxSeg, ImagesWithoutAnnotationsContributeNothing) {
  Case c = make_case(3);
  AuxSegHead head(8);
  head->eval();  // in training mode BatchNorm's batch statistics tie the images together
  torch::Tensor features = c.features.clone().requires_grad_(true);
  const torch::Tensor logits = head->forward(features);
  aux_seg_rank_loss(aux_seg_loss_sum(logits, mask_targets(c.masks, 4, 4), c.has), c.has.sum(), 1.0, 1)
      .backward();
  EXPECT_EQ(features.grad()[1].abs().sum().item<float>(), 0.0f);
  EXPECT_GT(features.grad()[0].abs().sum().item<float>(), 0.0f);
  // No annotated image anywhere: a zero loss, not a division by zero.
  EXPECT_EQ(aux_seg_rank_loss(torch::zeros({}), torch::zeros({}), 1.0, 4).item<float>(), 0.0f);
}

TEST(AuxSeg, TargetsAreTheCoveredShareOfEachCell) {
  torch::Tensor masks = torch::zeros({1, 1, 16, 16}, torch::kUInt8);
  masks.index_put_({0, 0, torch::indexing::Slice(0, 4), torch::indexing::Slice(0, 2)}, 1);
  const torch::Tensor t = mask_targets(masks, 4, 4);
  EXPECT_FLOAT_EQ(t[0][0][0][0].item<float>(), 0.5f);
  EXPECT_FLOAT_EQ(t.sum().item<float>(), 0.5f);
}

}  // namespace
}  // namespace ranzcr
