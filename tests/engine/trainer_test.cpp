#include "engine/trainer.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "engine/checkpoint.h"
#include "models/registry.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::make_dataset(*dir_ / "ds", 96, 64, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static Config config(const std::string& out, int epochs) {
    return parse_config("", "test",
                        {"data.root=" + *dir_ / "ds", "data.image_size=48", "model.name=tiny_cnn",
                         "train.batch_size=16", "train.epochs=" + std::to_string(epochs),
                         "train.log_every_seconds=1000", "optim.lr=0.003", "output.dir=" + out});
  }
  static test::TempDir* dir_;
};
test::TempDir* TrainerTest::dir_ = nullptr;

TEST_F(TrainerTest, LossFallsAndRunFolderIsComplete) {
  RunLog log(true);
  auto coll = make_local_collectives();
  const std::string out = *dir_ / "run";
  const TrainSummary s = train(config(out, 4), *coll, log, TrainOptions{});
  const auto m = test::read_metrics(out);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_LT(m[3]["train_loss"].get<double>(), 0.8 * m[0]["train_loss"].get<double>());
  for (const char* key : {"epoch", "train_loss", "val_loss", "val_auc_mean", "val_auc", "lr",
                          "images_per_sec", "epoch_seconds"})
    EXPECT_TRUE(m[0].contains(key)) << key;
  EXPECT_EQ(m[0]["val_auc"].size(), 11u);
  for (const char* f :
       {"config.yaml", "metrics.jsonl", "log.txt", "checkpoints/last.pt", "checkpoints/best.pt"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  // config.yaml is the resolved config: it parses and names the label columns found in the CSV.
  const Config resolved = load_config(out + "/config.yaml");
  EXPECT_EQ(resolved.data.label_columns.size(), 11u);
  EXPECT_EQ(read_checkpoint_meta(out + "/checkpoints/last.pt").epoch, 4);
  EXPECT_NEAR(read_checkpoint_meta(out + "/checkpoints/best.pt").best_metric, s.best_auc, 1e-12);
}

TEST_F(TrainerTest, ResumeFromEpoch2EqualsTheUninterruptedRun) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string full = *dir_ / "full", resumed = *dir_ / "resumed";
  Config c = config(full, 4);
  c.output.keep_every = 2;
  train(c, *coll, log, TrainOptions{});
  Config r = config(resumed, 4);
  TrainOptions opts;
  opts.resume_path = full + "/checkpoints/epoch_002.pt";
  train(r, *coll, log, opts);

  auto a = create_model("tiny_cnn", ModelSpec{}), b = create_model("tiny_cnn", ModelSpec{});
  load_checkpoint(full + "/checkpoints/last.pt", *a, nullptr);
  load_checkpoint(resumed + "/checkpoints/last.pt", *b, nullptr);
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& kv : pa) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << kv.key();
  const auto ba = a->named_buffers(), bb = b->named_buffers();
  for (const auto& kv : ba) EXPECT_TRUE(torch::equal(kv.value(), bb[kv.key()])) << kv.key();
  EXPECT_DOUBLE_EQ(test::read_metrics(full)[3]["val_auc_mean"].get<double>(),
                   test::read_metrics(resumed).back()["val_auc_mean"].get<double>());
}

TEST_F(TrainerTest, EarlyStoppingEndsTheRun) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string out = *dir_ / "early";
  Config c = config(out, 30);
  c.train.early_stop_patience = 1;
  c.optim.lr = 1e-9;  // nothing to learn: the AUC stops improving
  const TrainSummary s = train(c, *coll, log, TrainOptions{});
  EXPECT_TRUE(s.early_stopped);
  const auto m = test::read_metrics(out);
  ASSERT_LT(m.size(), 30u);
  double best_before = -1;
  for (size_t i = 0; i + 1 < m.size(); ++i)
    best_before = std::max(best_before, m[i]["val_auc_mean"].get<double>());
  EXPECT_LE(m.back()["val_auc_mean"].get<double>(), best_before);  // the last epoch did not improve
}

TEST(Schedule, WarmupThenCosine) {
  EXPECT_DOUBLE_EQ(scheduled_lr(0, 100, 10, 1.0, 0.0), 0.1);
  EXPECT_DOUBLE_EQ(scheduled_lr(9, 100, 10, 1.0, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(10, 100, 10, 1.0, 0.0), 1.0);
  EXPECT_NEAR(scheduled_lr(55, 100, 10, 1.0, 0.0), 0.5, 1e-12);
  EXPECT_NEAR(scheduled_lr(100, 100, 10, 1.0, 0.1), 0.1, 1e-12);
}

}  // namespace
}  // namespace ranzcr
