#include "engine/train/trainer.h"
#include "engine/train/train_step.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <map>
#include <sstream>

#include "engine/io/checkpoint.h"
#include "engine/io/run_folder.h"
#include "engine/io/trained_model.h"
#include "engine/report/curves.h"
#include "engine/train/aux_seg.h"
#include "engine/train/feature_list.h"
#include "engine/train/fused_optimizer.h"
#include "models/registry.h"
#include "tests/build_paths.h"
#include "tests/test_util.h"
#include "tracking/tensorboard/event_file.h"

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

// Parameters and buffers of two modules of one architecture are identical.
void expect_same_state(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pb = b.named_parameters();
  for (const auto& kv : a.named_parameters()) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << kv.key();
  const auto bb = b.named_buffers();
  for (const auto& kv : a.named_buffers()) EXPECT_TRUE(torch::equal(kv.value(), bb[kv.key()])) << kv.key();
}

// The weights of two checkpoints are identical.
void expect_same_weights(const std::string& a_path, const std::string& b_path, ModelSpec spec = {}) {
  auto a = create_model("tiny_cnn", spec), b = create_model("tiny_cnn", spec);
  load_checkpoint(a_path, *a, nullptr);
  load_checkpoint(b_path, *b, nullptr);
  expect_same_state(*a, *b);
}

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
  // Validation's time, of which the loss and AUC, inside the epoch's.
  const double val = m[0]["val_seconds"].get<double>(), auc = m[0]["auc_seconds"].get<double>();
  EXPECT_GT(auc, 0.0);
  EXPECT_LT(auc, val);
  EXPECT_LT(val, m[0]["epoch_seconds"].get<double>());
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

  expect_same_weights(full + "/checkpoints/last.pt", resumed + "/checkpoints/last.pt");
  EXPECT_DOUBLE_EQ(test::read_metrics(full)[3]["val_auc_mean"].get<double>(),
                   test::read_metrics(resumed).back()["val_auc_mean"].get<double>());
  // The resumed run trained epochs 3 and 4 only: equal weights are not a rerun of the same seed.
  EXPECT_EQ(test::trained_epochs(full), (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(test::trained_epochs(resumed), (std::vector<int64_t>{3, 4}));
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

// A stop asked for before the first step ends the run right after it, mid-epoch, with last.pt saved;
// resuming from it equals the uninterrupted run, also with dropout (each rank's generator is saved).
TEST_F(TrainerTest, MidEpochStopAndResumeEqualTheUninterruptedRunWithDropout) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string full = *dir_ / "drop_full", cut = *dir_ / "drop_cut";
  Config c = config(full, 2);
  c.model.dropout = 0.5;
  train(c, *coll, log, TrainOptions{});

  Config r = config(cut, 2);
  r.model.dropout = 0.5;
  std::atomic<int> stop{SIGTERM};
  TrainOptions stopping;
  stopping.stop_signal = &stop;
  const TrainSummary s = train(r, *coll, log, stopping);
  EXPECT_EQ(s.stopped_by_signal, SIGTERM);
  const CheckpointMeta meta = read_checkpoint_meta(cut + "/checkpoints/last.pt");
  EXPECT_EQ(meta.epoch, 0);
  EXPECT_EQ(meta.epoch_batches_done, 1);
  ASSERT_TRUE(meta.rng_states.defined());
  EXPECT_EQ(meta.rng_states.size(0), 1);
  EXPECT_TRUE(test::read_metrics(cut).empty());

  const TrainSummary done = train(r, *coll, log, TrainOptions{});  // train.resume: auto
  EXPECT_EQ(done.epochs, 2);
  ModelSpec spec;
  spec.dropout = 0.5;
  expect_same_weights(full + "/checkpoints/last.pt", cut + "/checkpoints/last.pt", spec);
  const auto m = test::read_metrics(cut);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["epoch"], 1);
  EXPECT_EQ(m[1]["epoch"], 2);
  EXPECT_DOUBLE_EQ(test::read_metrics(full)[1]["val_auc_mean"].get<double>(),
                   m[1]["val_auc_mean"].get<double>());
}

// A mid-epoch checkpoint holds each rank's generator state with its device type. One of another type (a
// run stopped on a GPU, continued on a CPU: a CUDA state is 16 bytes, a CPU one thousands) or of another
// size cannot be restored: the run continues with a warning instead of failing. A checkpoint written
// before the type was recorded (no rng_device) with a fitting state resumes exactly as before.
TEST_F(TrainerTest, MidEpochResumeAcrossDeviceTypes) {
  std::ostringstream out, err;
  RunLog log(true, out, err, false);
  RunLog quiet(false);
  auto coll = make_local_collectives();
  auto cfg = [](const std::string& name) {
    Config c = config(*dir_ / name, 2);
    c.model.dropout = 0.5;
    return c;
  };
  train(cfg("xdev_full"), *coll, quiet, TrainOptions{});
  std::atomic<int> stop{SIGTERM};
  TrainOptions stopping;
  stopping.stop_signal = &stop;
  ASSERT_EQ(train(cfg("xdev_cut"), *coll, quiet, stopping).stopped_by_signal, SIGTERM);
  const CheckpointMeta cut = read_checkpoint_meta(*dir_ / "xdev_cut/checkpoints/last.pt");
  ASSERT_TRUE(cut.rng_states.defined());
  EXPECT_EQ(cut.rng_device, "cpu");

  // A copy of the stopped run whose last.pt has `rng_device` and `rng_states` replaced.
  ModelSpec spec;
  spec.dropout = 0.5;
  auto variant = [&](const std::string& name, const std::string& device, const torch::Tensor& states) {
    std::filesystem::copy(*dir_ / "xdev_cut", *dir_ / name, std::filesystem::copy_options::recursive);
    const std::string path = *dir_ / name + "/checkpoints/last.pt";
    CheckpointReader reader(path);
    CheckpointMeta meta = reader.meta();
    auto model = create_model("tiny_cnn", spec);
    auto optimizer = make_optimizer(cfg(name).optim, *model);
    reader.restore(*model, optimizer.get());
    meta.rng_device = device;
    meta.rng_states = states;
    write_file_atomic(path, serialize_checkpoint(meta, *model, optimizer.get()));
    EXPECT_EQ(read_checkpoint_meta(path).rng_device, device);
    return cfg(name);
  };
  const torch::Tensor cuda_sized = torch::arange(16, torch::kUInt8).unsqueeze(0);  // seed and offset

  const TrainSummary moved = train(variant("xdev_cuda", "cuda", cuda_sized), *coll, log, TrainOptions{});
  EXPECT_EQ(moved.epochs, 2);
  EXPECT_EQ(test::read_metrics(*dir_ / "xdev_cuda").size(), 2u);
  EXPECT_NE(
      err.str().find("warning: the checkpoint's random generator states are a cuda generator's and this "
                     "run is on cpu: not restored"),
      std::string::npos)
      << err.str();
  EXPECT_NE(out.str().find("resumed from " + *dir_ / "xdev_cuda/checkpoints/last.pt at epoch 0, step " +
                           std::to_string(cut.step) + ", batch " + std::to_string(cut.epoch_batches_done)),
            std::string::npos)
      << out.str();

  err.str("");  // an old checkpoint (no recorded type) whose state does not fit: a warning too
  EXPECT_EQ(train(variant("xdev_old_bad", "", cuda_sized), *coll, log, TrainOptions{}).epochs, 2);
  EXPECT_NE(err.str().find("random generator states hold 16 bytes, this run's cpu generator"),
            std::string::npos)
      << err.str();

  err.str("");  // an old checkpoint with a fitting state: restored, the same as the uninterrupted run
  EXPECT_EQ(train(variant("xdev_old", "", cut.rng_states), *coll, log, TrainOptions{}).epochs, 2);
  EXPECT_EQ(err.str().find("random generator"), std::string::npos) << err.str();
  expect_same_weights(*dir_ / "xdev_full/checkpoints/last.pt", *dir_ / "xdev_old/checkpoints/last.pt", spec);
}

// A stop that arrives during validation (or the checkpoint write after it) is honoured right after the
// epoch's save, not one epoch later, and nothing of the epoch is lost.
TEST_F(TrainerTest, StopDuringValidationEndsTheRunAfterTheEpochsSave) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string out = *dir_ / "stop_in_validation";
  std::atomic<int> stop{0};
  TrainOptions o;
  o.stop_signal = &stop;
  o.before_validation = [&](int64_t epoch) {
    if (epoch == 1) stop = SIGTERM;
  };
  const TrainSummary s = train(config(out, 5), *coll, log, o);
  EXPECT_EQ(s.stopped_by_signal, SIGTERM);
  EXPECT_EQ(s.epochs, 2);
  const auto m = test::read_metrics(out);
  ASSERT_EQ(m.size(), 2u);
  const CheckpointMeta meta = read_checkpoint_meta(out + "/checkpoints/last.pt");
  EXPECT_EQ(meta.epoch, 2);
  EXPECT_EQ(meta.epoch_batches_done, 0);
}

// train.resume: auto (the default) continues the run folder's last.pt; metrics.jsonl never repeats an
// epoch; a finished run is left as it is; `never` starts over; another model's run folder is an error.
TEST_F(TrainerTest, AutoResumeContinuesTheRunFolder) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string out = *dir_ / "auto";
  train(config(out, 1), *coll, log, TrainOptions{});
  const TrainSummary more = train(config(out, 3), *coll, log, TrainOptions{});
  EXPECT_EQ(more.epochs, 3);
  auto epochs = [&] {
    std::vector<int64_t> e;
    for (const auto& m : test::read_metrics(out)) e.push_back(m["epoch"].get<int64_t>());
    return e;
  };
  EXPECT_EQ(epochs(), (std::vector<int64_t>{1, 2, 3}));
  const std::string before = test::read_file(out + "/checkpoints/last.pt");
  const TrainSummary again = train(config(out, 3), *coll, log, TrainOptions{});
  EXPECT_TRUE(again.already_finished);
  EXPECT_EQ(test::read_file(out + "/checkpoints/last.pt"), before);
  EXPECT_EQ(epochs(), (std::vector<int64_t>{1, 2, 3}));

  Config other = config(out, 3);
  other.model.name = "resnet18";
  try {
    train(other, *coll, log, TrainOptions{});
    ADD_FAILURE() << "another model's run folder was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("train.resume=never"), std::string::npos) << e.what();
  }
  EXPECT_EQ(test::read_file(out + "/checkpoints/last.pt"), before);

  Config fresh = config(out, 1);
  fresh.train.resume = ResumeSetting::kNever;
  train(fresh, *coll, log, TrainOptions{});
  EXPECT_EQ(epochs(), (std::vector<int64_t>{1}));
  EXPECT_EQ(read_checkpoint_meta(out + "/checkpoints/last.pt").epoch, 1);
}

// The early-stopping counter survives a resume: stopping happens at the same epoch.
TEST_F(TrainerTest, EarlyStopCounterIsSaved) {
  RunLog log(false);
  auto coll = make_local_collectives();
  Config c = config(*dir_ / "es_full", 30);
  c.train.early_stop_patience = 2;
  c.optim.lr = 1e-9;
  const TrainSummary full = train(c, *coll, log, TrainOptions{});
  ASSERT_TRUE(full.early_stopped);
  ASSERT_GE(full.epochs, 3);
  // The same run, stopped after the epoch before the one that early-stopped, then resumed.
  Config cut = c;
  cut.output.dir = *dir_ / "es_cut";
  std::atomic<int> stop{0};
  TrainOptions o;
  o.stop_signal = &stop;
  o.before_validation = [&](int64_t epoch) {
    if (epoch + 2 == full.epochs) stop = SIGTERM;
  };
  ASSERT_EQ(train(cut, *coll, log, o).epochs, full.epochs - 1);
  EXPECT_GT(read_checkpoint_meta(cut.output.dir + "/checkpoints/last.pt").epochs_since_best, 0);
  const TrainSummary resumed = train(cut, *coll, log, TrainOptions{});
  EXPECT_TRUE(resumed.early_stopped);
  EXPECT_EQ(resumed.epochs, full.epochs);
  // Running it once more trains nothing: the run ended by early stopping.
  const size_t lines = test::read_metrics(cut.output.dir).size();
  EXPECT_TRUE(train(cut, *coll, log, TrainOptions{}).already_finished);
  EXPECT_EQ(test::read_metrics(cut.output.dir).size(), lines);
}

// Early stopping's count is its checkpoint value; a checkpoint that holds it in its meta alone (as those
// written before feature values did) resumes with it. Early stopping moves no numbers: the same epochs
// without it give the same metrics and weights.
TEST_F(TrainerTest, EarlyStopResumesTheCountOfOldCheckpointsAndMovesNoNumbers) {
  std::ostringstream out, err;
  RunLog log(true, out, err, false);
  RunLog quiet(false);
  auto coll = make_local_collectives();
  Config c = config(*dir_ / "es_old_full", 30);
  c.train.early_stop_patience = 2;
  c.optim.lr = 1e-9;
  c.output.keep_every = 1;
  const TrainSummary full = train(c, *coll, log, TrainOptions{});
  ASSERT_TRUE(full.early_stopped);
  ASSERT_GE(full.epochs, 3);
  const std::string why = "early stop: no better val_auc_mean for 2 epochs";
  EXPECT_EQ(full.stop_reason, why);
  EXPECT_NE(out.str().find(why), std::string::npos) << out.str();

  // The same run without early stopping, stopped by a signal after the same epoch (train.epochs, which
  // shapes the schedule, unchanged).
  Config plain = c;
  plain.output.dir = *dir_ / "es_old_plain";
  plain.train.early_stop_patience = 0;
  std::atomic<int> stop{0};
  TrainOptions stopping;
  stopping.stop_signal = &stop;
  stopping.before_validation = [&](int64_t epoch) {
    if (epoch + 1 == full.epochs) stop = SIGTERM;
  };
  const TrainSummary p = train(plain, *coll, quiet, stopping);
  EXPECT_FALSE(p.early_stopped);
  EXPECT_EQ(p.epochs, full.epochs);
  auto numbers = [](const std::string& run) {
    std::vector<nlohmann::json> lines = test::read_metrics(run);
    for (auto& j : lines)
      for (const char* timing : {"images_per_sec", "epoch_seconds", "val_seconds", "auc_seconds"})
        j.erase(timing);
    return lines;
  };
  EXPECT_EQ(numbers(c.output.dir), numbers(plain.output.dir));
  expect_same_weights(c.output.dir + "/checkpoints/last.pt", plain.output.dir + "/checkpoints/last.pt");

  // The checkpoint of the epoch before the stop, written again the old way: the count in the meta alone.
  const std::string old = *dir_ / "es_old.pt";
  {
    CheckpointReader reader(run_folder::epoch_checkpoint(c.output.dir + "/checkpoints", full.epochs - 1));
    ASSERT_EQ(reader.meta().epochs_since_best, 1);
    EXPECT_EQ(reader.int_value("early_stop_epochs_since_best"), std::optional<int64_t>(1));
    auto model = create_model("tiny_cnn", ModelSpec{});
    auto optimizer = make_optimizer(c.optim, *model);
    reader.restore(*model, optimizer.get());
    write_file_atomic(old, serialize_checkpoint(reader.meta(), *model, optimizer.get()));
  }
  ASSERT_FALSE(CheckpointReader(old).int_value("early_stop_epochs_since_best").has_value());
  Config r = c;
  r.output.dir = *dir_ / "es_old_resumed";
  TrainOptions o;
  o.resume_path = old;
  const TrainSummary resumed = train(r, *coll, quiet, o);
  EXPECT_TRUE(resumed.early_stopped);
  EXPECT_EQ(resumed.stop_reason, why);
  EXPECT_EQ(test::trained_epochs(r.output.dir), std::vector<int64_t>{full.epochs});
  // Run again, it has nothing to train: the features say it had stopped.
  EXPECT_TRUE(train(r, *coll, log, TrainOptions{}).already_finished);
  EXPECT_NE(out.str().find("nothing to train: the run in " + r.output.dir + " has finished (" +
                           std::to_string(full.epochs) +
                           " epochs, stopped early; raise train.epochs or train.early_stop_patience to train "
                           "on, or set train.resume=never to start over)"),
            std::string::npos)
      << out.str();
}

// train.ema_decay: the EMA weights are validated (ema_val_* in metrics.jsonl), choose best.pt, are saved
// in checkpoints and resume exactly.
TEST_F(TrainerTest, EmaIsValidatedSavedAndResumedExactly) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string full = *dir_ / "ema_full", resumed = *dir_ / "ema_resumed";
  Config c = config(full, 4);
  c.train.ema_decay = 0.9;
  c.output.keep_every = 2;
  train(c, *coll, log, TrainOptions{});
  Config r = config(resumed, 4);
  r.train.ema_decay = 0.9;
  TrainOptions opts;
  opts.resume_path = full + "/checkpoints/epoch_002.pt";
  train(r, *coll, log, opts);

  auto ema_of = [](const std::string& path) {
    auto m = create_model("tiny_cnn", ModelSpec{});
    CheckpointReader reader(path);
    EXPECT_TRUE(reader.has_ema()) << path;
    reader.restore_ema(*m);
    return m;
  };
  auto a = ema_of(full + "/checkpoints/last.pt"), b = ema_of(resumed + "/checkpoints/last.pt");
  expect_same_state(*a, *b);
  // The EMA differs from the raw weights it averages.
  auto raw = create_model("tiny_cnn", ModelSpec{});
  load_checkpoint(full + "/checkpoints/last.pt", *raw, nullptr);
  EXPECT_FALSE(torch::equal(raw->parameters()[0], a->parameters()[0]));

  const auto m = test::read_metrics(full);
  double best = -1;
  for (const auto& e : m) {
    ASSERT_TRUE(e.contains("ema_val_auc_mean") && e.contains("ema_val_loss") && e.contains("ema_val_auc"));
    best = std::max(best, e["ema_val_auc_mean"].get<double>());
  }
  EXPECT_DOUBLE_EQ(read_checkpoint_meta(full + "/checkpoints/best.pt").best_metric, best);
  EXPECT_DOUBLE_EQ(m.back()["ema_val_auc_mean"].get<double>(),
                   test::read_metrics(resumed).back()["ema_val_auc_mean"].get<double>());
}

// model.aux_seg_weight: the auxiliary loss is logged and falls, the head is saved apart from the model
// (which loads as the plain classifier), and a resumed run ends with the same model and head.
TEST_F(TrainerTest, AuxSegHeadTrainsIsSavedApartAndResumesExactly) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string full = *dir_ / "aux_full", resumed = *dir_ / "aux_resumed";
  Config c = config(full, 4);
  c.model.aux_seg_weight = 0.5;
  c.output.keep_every = 2;
  train(c, *coll, log, TrainOptions{});
  const auto m = test::read_metrics(full);
  ASSERT_EQ(m.size(), 4u);
  ASSERT_TRUE(m[0].contains("train_aux_loss"));
  EXPECT_LT(m[3]["train_aux_loss"].get<double>(), m[0]["train_aux_loss"].get<double>());

  Config r = config(resumed, 4);
  r.model.aux_seg_weight = 0.5;
  TrainOptions opts;
  opts.resume_path = full + "/checkpoints/epoch_002.pt";
  train(r, *coll, log, opts);
  expect_same_weights(full + "/checkpoints/last.pt", resumed + "/checkpoints/last.pt");
  auto head_of = [](const std::string& path) {
    AuxSegHead head(64);
    CheckpointReader reader(path);
    EXPECT_TRUE(reader.has_part("aux_head")) << path;
    reader.restore_part("aux_head", "auxiliary segmentation head weights", *head);
    return head;
  };
  AuxSegHead a = head_of(full + "/checkpoints/last.pt"), b = head_of(resumed + "/checkpoints/last.pt");
  expect_same_state(*a, *b);
  // The model alone is the plain classifier: its state dict has no head, and it loads for inference.
  const TrainedModel trained = load_trained_model(full + "/checkpoints/last.pt");
  for (const auto& kv : trained.model->named_parameters()) EXPECT_EQ(kv.key().find("aux"), std::string::npos);

  // Resuming with the head switched off (or on for a plain run) is one clear error.
  Config off = config(*dir_ / "aux_off", 4);
  TrainOptions from_aux;
  from_aux.resume_path = full + "/checkpoints/epoch_002.pt";
  try {
    train(off, *coll, log, from_aux);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("model.aux_seg_weight"), std::string::npos) << e.what();
  }
}

// output.keep_best_k: exactly the k best epochs by validation AUC are kept as top_epoch_NNN.pt, also
// across a resume.
TEST_F(TrainerTest, KeepsTheBestKEpochs) {
  RunLog log(false);
  auto coll = make_local_collectives();
  auto kept = [](const std::string& run) {
    std::vector<int64_t> epochs;
    for (const auto& e : std::filesystem::directory_iterator(run + "/checkpoints")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("top_epoch_", 0) != 0) continue;
      const CheckpointMeta meta = read_checkpoint_meta(e.path().string());
      EXPECT_EQ("top_epoch_00" + std::to_string(meta.epoch) + ".pt", name);
      epochs.push_back(meta.epoch);
    }
    std::sort(epochs.begin(), epochs.end());
    return epochs;
  };
  auto best2 = [](const std::string& run) {  // the two best epochs of metrics.jsonl
    std::vector<std::pair<double, int64_t>> by_auc;
    for (const auto& m : test::read_metrics(run))
      by_auc.emplace_back(-m["val_auc_mean"].get<double>(), m["epoch"].get<int64_t>());
    std::sort(by_auc.begin(), by_auc.end());
    std::vector<int64_t> epochs = {by_auc.at(0).second, by_auc.at(1).second};
    std::sort(epochs.begin(), epochs.end());
    return epochs;
  };
  const std::string full = *dir_ / "top_full", parts = *dir_ / "top_parts";
  Config c = config(full, 5);
  c.output.keep_best_k = 2;
  train(c, *coll, log, TrainOptions{});
  EXPECT_EQ(kept(full), best2(full));

  // Stopped after epoch 3 (same schedule), then continued: the kept files follow the whole run.
  Config parted = config(parts, 5);
  parted.output.keep_best_k = 2;
  std::atomic<int> stop{0};
  TrainOptions o;
  o.stop_signal = &stop;
  o.before_validation = [&](int64_t epoch) {
    if (epoch == 2) stop = SIGTERM;
  };
  ASSERT_EQ(train(parted, *coll, log, o).epochs, 3);
  EXPECT_EQ(kept(parts).size(), 2u);
  train(parted, *coll, log, TrainOptions{});
  EXPECT_EQ(test::read_metrics(parts).size(), 5u);
  EXPECT_EQ(kept(parts), best2(parts));
  EXPECT_EQ(kept(parts), kept(full));
}

// The PNG curves are drawn after every epoch: decodable, the expected size, not blank.
TEST_F(TrainerTest, CurvesAreDrawnAfterTraining) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string out = *dir_ / "curves";
  train(config(out, 2), *coll, log, TrainOptions{});
  const std::vector<std::string> names{"curves_loss.png", "curves_auc.png", "curves_auc_per_label.png"};
  ASSERT_EQ(run_folder::curves_files(out).size(), names.size());
  for (const auto& name : names) {
    EXPECT_EQ(run_folder::curves_files(out)[&name - names.data()], out + "/" + name);
    const cv::Mat img = cv::imread(out + "/" + name, cv::IMREAD_COLOR);
    ASSERT_FALSE(img.empty()) << name;
    EXPECT_EQ(img.cols, kCurvesWidth);
    EXPECT_EQ(img.rows, kCurvesHeight);
    cv::Mat background(img.size(), img.type(), cv::Scalar(255, 255, 255)), diff;
    cv::absdiff(img, background, diff);
    EXPECT_GT(cv::countNonZero(diff.reshape(1)), 2000) << name;
  }
}

// A python with tensorboard: RANZCR_TENSORBOARD_PYTHON, the project's .venv (scripts/setup.sh installs
// it there), or /tmp/tbvenv; "" when none has it.
std::string tensorboard_python() {
  std::vector<std::string> candidates{std::string(test::source_dir()) + "/.venv/bin/python",
                                      "/tmp/tbvenv/bin/python"};
  if (const char* env = std::getenv("RANZCR_TENSORBOARD_PYTHON")) candidates.insert(candidates.begin(), env);
  for (const auto& python : candidates)
    if (std::filesystem::exists(python) && test::run_command(python + " -c 'import tensorboard'").status == 0)
      return python;
  return "";
}

// TensorBoard's own reader finds every scalar at the optimizer step, with metrics.jsonl's values.
TEST_F(TrainerTest, TensorBoardReadsTheEventFiles) {
  const std::string python = tensorboard_python();
  if (python.empty())
    RANZCR_SKIP_WITHOUT_REFERENCE(
        "no python with tensorboard (scripts/setup.sh puts it in .venv; or set "
        "RANZCR_TENSORBOARD_PYTHON)");
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string out = *dir_ / "tb";
  Config c = config(out, 2);
  c.train.ema_decay = 0.9;  // the EMA's validation goes to TensorBoard too
  TrainOptions options;
  options.trackers = [](const std::string&) {
    std::vector<std::unique_ptr<tracking::Tracker>> trackers;
    trackers.push_back(std::make_unique<tracking::TensorBoardTracker>());
    return trackers;
  };
  train(c, *coll, log, options);
  const std::string script = *dir_ / "read_tb.py";
  test::write_file(script,
                   "import sys\n"
                   "from tensorboard.backend.event_processing import event_accumulator as ea\n"
                   "acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})\n"
                   "acc.Reload()\n"
                   "for tag in sorted(acc.Tags()['scalars']):\n"
                   "    for e in acc.Scalars(tag):\n"
                   "        print('scalar', repr(tag), e.step, repr(e.value))\n");
  const auto r = test::run_command(python + " " + script + " " + out + "/tensorboard");
  ASSERT_EQ(r.status, 0) << r.output;
  std::map<std::string, std::map<int64_t, double>> scalars;  // tag -> step -> value
  std::stringstream ss(r.output);
  for (std::string line; std::getline(ss, line);) {
    if (line.rfind("scalar '", 0) != 0) continue;
    const size_t end = line.find("' ", 8);
    std::stringstream rest(line.substr(end + 2));
    int64_t step;
    double value;
    rest >> step >> value;
    scalars[line.substr(8, end - 8)][step] = value;
  }
  for (const char* tag : {"train/loss", "train/lr", "train/images_per_sec", "val/loss", "val/auc_mean"})
    EXPECT_EQ(scalars[tag].size(), 2u) << tag << "\n" << r.output;
  for (const auto& m : test::read_metrics(out)) {
    const int64_t step = m["step"].get<int64_t>();
    EXPECT_EQ(static_cast<float>(scalars["val/auc_mean"][step]), m["val_auc_mean"].get<float>());
    EXPECT_EQ(static_cast<float>(scalars["val/loss"][step]), m["val_loss"].get<float>());
    EXPECT_EQ(static_cast<float>(scalars["val/ema_auc_mean"][step]), m["ema_val_auc_mean"].get<float>());
    EXPECT_EQ(static_cast<float>(scalars["val/ema_loss"][step]), m["ema_val_loss"].get<float>());
    for (const auto& item : m["val_auc"].items())
      if (item.value().is_number())
        EXPECT_EQ(static_cast<float>(scalars["val/auc/" + item.key()][step]), item.value().get<float>())
            << item.key();
  }
}

// What the trainer hands a tracker, recorded by one defined here (the trainer knows none by name).
struct TrackerCalls {
  int opens = 0;
  std::vector<std::string> resume_ids;
  std::vector<int64_t> resumed_steps;
  std::vector<tracking::KeyValue> params, tags;
  std::vector<int64_t> steps, epochs, saved;
  std::map<int64_t, double> val_auc_mean;  // by epoch, from the epoch's record
  std::vector<std::string> artifacts;      // <dir>/<file name>
  std::vector<tracking::RunStatus> statuses;
};

class RecordingTracker : public tracking::Tracker {
 public:
  RecordingTracker(TrackerCalls& calls, std::string id) : calls_(calls), id_(std::move(id)) {}
  std::string name() const override { return "recorder"; }
  bool open(const tracking::RunStart& start) override {
    ++calls_.opens;
    calls_.resume_ids.push_back(start.resume_id);
    calls_.resumed_steps.push_back(start.resumed_step);
    calls_.params = start.params;
    calls_.tags = start.tags;
    return true;
  }
  std::string run_id() const override { return id_; }
  void log_step(int64_t step, const std::vector<tracking::Figure>&) override { calls_.steps.push_back(step); }
  void log_epoch(const tracking::EpochFigures& f) override {
    calls_.epochs.push_back(f.epoch);
    for (const auto& figure : f.record)
      if (figure.key == "val_auc_mean") calls_.val_auc_mean[f.epoch] = figure.value;
  }
  void epoch_saved(int64_t epoch) override { calls_.saved.push_back(epoch); }
  void log_artifact(const std::string& path, const std::string& dir) override {
    calls_.artifacts.push_back(dir + "/" + std::filesystem::path(path).filename().string());
  }
  void finish(tracking::RunStatus status) override { calls_.statuses.push_back(status); }

 private:
  TrackerCalls& calls_;
  std::string id_;
};

// A tracker added by a test alone: it gets the config as parameters, every epoch (with its record, once
// saved), the run's files and the final status; a stopped run resumed continues the same tracker run (the
// checkpoint keeps its id by the tracker's name).
TEST_F(TrainerTest, ATrackerOfItsOwnSeesParamsEpochsArtifactsResumeAndStatus) {
  RunLog log(false);
  auto coll = make_local_collectives();
  const std::string out = *dir_ / "own_tracker";
  const Config c = config(out, 3);
  TrackerCalls first, second;
  std::atomic<int> stop{0};
  TrainOptions stopping;
  stopping.stop_signal = &stop;
  stopping.before_validation = [&stop](int64_t epoch) {
    if (epoch == 0) stop = SIGTERM;  // the run stops once epoch 1 is saved
  };
  stopping.trackers = [&first](const std::string& command) {
    std::vector<std::unique_ptr<tracking::Tracker>> t;
    if (command == "train") t.push_back(std::make_unique<RecordingTracker>(first, "run-7"));
    return t;
  };
  EXPECT_EQ(train(c, *coll, log, stopping).stopped_by_signal, SIGTERM);
  EXPECT_EQ(first.opens, 1);
  EXPECT_EQ(first.resume_ids, std::vector<std::string>{""});
  EXPECT_EQ(first.resumed_steps, std::vector<int64_t>{0});
  const std::map<std::string, std::string> params(first.params.begin(), first.params.end());
  EXPECT_EQ(params.at("model.name"), "tiny_cnn");
  EXPECT_EQ(params.at("train.epochs"), "3");
  EXPECT_EQ(params.at("output.dir"), out);
  EXPECT_EQ(first.epochs, std::vector<int64_t>{1});
  EXPECT_EQ(first.saved, std::vector<int64_t>{1});
  EXPECT_FALSE(first.steps.empty());
  EXPECT_EQ(first.statuses, std::vector<tracking::RunStatus>{tracking::RunStatus::kKilled});
  const CheckpointMeta cut = read_checkpoint_meta(out + "/checkpoints/last.pt");
  EXPECT_EQ(cut.tracker_run_ids, (std::map<std::string, std::string>{{"recorder", "run-7"}}));

  TrainOptions resuming;  // train.resume: auto
  resuming.trackers = [&second](const std::string&) {
    std::vector<std::unique_ptr<tracking::Tracker>> t;
    t.push_back(std::make_unique<RecordingTracker>(second, "run-7"));
    return t;
  };
  EXPECT_EQ(train(c, *coll, log, resuming).epochs, 3);
  EXPECT_EQ(second.resume_ids, std::vector<std::string>{"run-7"});
  ASSERT_EQ(second.resumed_steps.size(), 1u);
  EXPECT_EQ(second.resumed_steps[0], cut.step);
  EXPECT_EQ(second.epochs, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(second.saved, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(second.statuses, std::vector<tracking::RunStatus>{tracking::RunStatus::kFinished});
  for (const std::string file : {"/config.yaml", "/metrics.jsonl", "/log.txt", "curves/curves_loss.png"})
    EXPECT_NE(std::find(second.artifacts.begin(), second.artifacts.end(), file), second.artifacts.end())
        << file;
  for (const auto& m : test::read_metrics(out)) {
    const int64_t epoch = m["epoch"].get<int64_t>();
    const std::map<int64_t, double>& seen = epoch == 1 ? first.val_auc_mean : second.val_auc_mean;
    EXPECT_EQ(seen.at(epoch), m["val_auc_mean"].get<double>()) << epoch;
  }
  EXPECT_EQ(read_checkpoint_meta(out + "/checkpoints/last.pt").tracker_run_ids.at("recorder"), "run-7");
}

// optim.fused: auto takes the fused kernels for CUDA parameters only (torch.optim's default), so a CPU
// run steps with LibTorch's per-parameter AdamW/SGD and its numbers stay LibTorch's; true forces the
// fused kernel on the CPU, false never takes it.
// The early-stop feature alone: its count is a plain checkpoint value, saved and restored (the value, not
// the meta, when both are there); a checkpoint holding it in its meta alone gives it from there.
TEST(EarlyStopFeature, CountSurvivesSaveAndResumeAndComesFromTheMetaOfOldCheckpoints) {
  test::TempDir dir;
  Config config;
  config.train.early_stop_patience = 2;
  auto coll = make_local_collectives();
  RunLog log(false);
  DatasetIndex index;
  LoaderOptions loader;
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
  auto model = create_model("tiny_cnn", ModelSpec{});
  TrainingSetup setup{config, *coll, log, torch::kCPU, false, index, dir.str(), *model, modules, loader};
  CheckpointMeta meta;
  auto epoch_end = [&](TrainingFeature& f, bool improved) {
    EpochEnd end{1, meta, 0.5, improved, {}};
    f.on_epoch_end(end);
  };
  auto resumed = [&](const std::string& path) {
    std::unique_ptr<TrainingFeature> f = make_early_stop_feature(config);
    f->setup(setup);
    CheckpointReader reader(path);
    f->restore(ResumeSource{reader, "", ""});
    return f;
  };

  std::unique_ptr<TrainingFeature> f = make_early_stop_feature(config);
  f->setup(setup);
  epoch_end(*f, true);
  epoch_end(*f, false);
  EXPECT_FALSE(f->stop_reason().has_value());
  CheckpointValues values;
  f->save_values(values, meta);
  ASSERT_EQ(values.count("early_stop_epochs_since_best"), 1u);
  EXPECT_EQ(std::get<int64_t>(values.at("early_stop_epochs_since_best")), 1);
  EXPECT_EQ(meta.epochs_since_best, 1);  // kept in the meta too, for its readers
  write_file_atomic(dir / "new.pt", serialize_checkpoint(meta, *model, nullptr, {}, values));

  std::unique_ptr<TrainingFeature> g = resumed(dir / "new.pt");
  EXPECT_FALSE(g->stop_reason().has_value());
  epoch_end(*g, false);
  const std::optional<StopReason> stop = g->stop_reason();
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->why, "early stop: no better val_auc_mean for 2 epochs");
  EXPECT_EQ(stop->raise, "train.early_stop_patience");

  meta.epochs_since_best = 0;  // the value is what is restored
  write_file_atomic(dir / "value.pt", serialize_checkpoint(meta, *model, nullptr, {},
                                                           {{"early_stop_epochs_since_best", int64_t{2}}}));
  EXPECT_TRUE(resumed(dir / "value.pt")->stop_reason().has_value());

  meta.epochs_since_best = 2;  // an old checkpoint: the count in the meta alone
  write_file_atomic(dir / "old.pt", serialize_checkpoint(meta, *model, nullptr));
  EXPECT_TRUE(resumed(dir / "old.pt")->stop_reason().has_value());
  meta.epochs_since_best = 1;
  write_file_atomic(dir / "old1.pt", serialize_checkpoint(meta, *model, nullptr));
  EXPECT_FALSE(resumed(dir / "old1.pt")->stop_reason().has_value());

  // Without a patience it counts (a run resumed with one counts on) and never stops.
  config.train.early_stop_patience = 0;
  std::unique_ptr<TrainingFeature> off = resumed(dir / "old.pt");
  epoch_end(*off, false);
  EXPECT_FALSE(off->stop_reason().has_value());
  values.clear();
  off->save_values(values, meta);
  EXPECT_EQ(std::get<int64_t>(values.at("early_stop_epochs_since_best")), 3);
}

TEST(MakeOptimizer, OptimFusedPicksTheStep) {
  for (const std::string name : {"adamw", "sgd"})
    for (const std::string fused : {"auto", "true", "false"}) {
      const Config c = parse_config("", "test", {"optim.name=" + name, "optim.fused=" + fused});
      torch::manual_seed(3);
      std::vector<torch::Tensor> params = {torch::randn({4, 3}).requires_grad_(true)};
      params[0].mutable_grad() = torch::randn({4, 3});
      const torch::Tensor before = params[0].detach().clone();
      auto optimizer = make_optimizer(c.optim, params);
      auto* step = dynamic_cast<SkippableStep*>(optimizer.get());
      ASSERT_NE(step, nullptr) << name;
      step->step_unless(torch::Tensor());
      EXPECT_EQ(step->last_step_fused(), fused == "true") << name << " optim.fused=" << fused;
      EXPECT_FALSE(torch::equal(before, params[0])) << name << " optim.fused=" << fused << ": no step";
    }
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
