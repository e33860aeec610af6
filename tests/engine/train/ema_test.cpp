#include "engine/train/ema.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace ranzcr {
namespace {

TEST(Ema, DecayWarmsUpLikeTimm) {
  EmaOptions o;
  o.decay = 0.999;
  EXPECT_EQ(ema_decay_at(1, o), 0.0);  // the first update copies
  EXPECT_NEAR(ema_decay_at(2, o), 1.0 - std::pow(2.0, -2.0 / 3.0), 1e-15);
  EXPECT_NEAR(ema_decay_at(11, o), 1.0 - std::pow(11.0, -2.0 / 3.0), 1e-15);
  EXPECT_EQ(ema_decay_at(100000000, o), 0.999);  // capped at train.ema_decay
  o.min_decay = 0.5;
  EXPECT_EQ(ema_decay_at(2, o), 0.5);
}

// After K updates the shadow equals the recurrence e_k = d_k e_{k-1} + (1 - d_k) w_k, computed here in
// double precision from the weights the model had at each update; integer buffers are copied.
TEST(Ema, WeightsAfterKStepsEqualTheFormula) {
  torch::manual_seed(3);
  torch::nn::Sequential model(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
  torch::nn::Sequential shadow(torch::nn::Linear(4, 3), torch::nn::BatchNorm1d(3));
  EmaOptions o;
  o.decay = 0.9;
  ModelEma ema(*model, shadow.ptr(), o);
  std::vector<torch::Tensor> expected;
  for (const auto& p : model->parameters()) expected.push_back(p.detach().to(torch::kDouble).clone());
  for (int64_t k = 1; k <= 12; ++k) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(torch::randn_like(p));
    model->forward(torch::randn({5, 4}));  // moves the BatchNorm statistics and counter
    ema.update(k);
    const double d = ema_decay_at(k, o);
    const auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      expected[i] = d * expected[i] + (1.0 - d) * params[i].detach().to(torch::kDouble);
  }
  const auto got = shadow->parameters();
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE((got[i].to(torch::kDouble) - expected[i]).abs().max().item<double>(), 1e-6)
        << "parameter " << i;
  const auto mb = model->buffers(), sb = shadow->buffers();
  const auto counter =
      std::find_if(sb.begin(), sb.end(), [](const auto& b) { return !b.is_floating_point(); });
  ASSERT_NE(counter, sb.end());
  EXPECT_EQ(counter->item<int64_t>(), 12);   // num_batches_tracked copied, not averaged
  EXPECT_FALSE(torch::equal(sb[0], mb[0]));  // running statistics averaged, not copied
}

}  // namespace
}  // namespace ranzcr
