#include "engine/infer/ensemble.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <numeric>

#include "engine/io/checkpoint.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

// A tiny_cnn checkpoint (initialised from `seed`) of a run at `image_size` px.
std::string write_checkpoint(const test::TempDir& dir, const std::string& name, int seed, int image_size,
                             const std::vector<std::string>& labels) {
  Config config;
  config.model.name = "tiny_cnn";
  config.data.image_size = image_size;
  ModelSpec spec;
  spec.num_classes = static_cast<int>(labels.size());
  torch::manual_seed(seed);
  auto model = create_model("tiny_cnn", spec);
  CheckpointMeta meta;
  meta.config_yaml = config_to_yaml(config);
  meta.model_name = "tiny_cnn";
  meta.label_names = labels;
  const std::string path = dir / name;
  write_file_atomic(path, serialize_checkpoint(meta, *model, nullptr));
  return path;
}

// Two models of different input sizes: the ensemble's probabilities are the mean of each model's own
// sigmoid(logits) (1e-6; computed in float64), row for row; one model alone gives exactly its float32
// sigmoid; models with other labels are refused.
TEST(Ensemble, ProbabilitiesAreTheMeanOfTheModels) {
  test::TempDir dir;
  test::make_dataset(dir / "ds", 20, 64, 0);
  IndexOptions io;
  const DatasetIndex index = load_index(dir / "ds/train.csv", dir / "ds/train", io);
  std::vector<int64_t> rows(index.size());
  std::iota(rows.begin(), rows.end(), 0);
  const std::string a = write_checkpoint(dir, "a.pt", 1, 48, index.label_names);
  const std::string b = write_checkpoint(dir, "b.pt", 2, 32, index.label_names);
  auto options_for = [](const TrainedModelInfo& info) {
    InferenceOptions o;
    o.image_size = parse_config(info.config_yaml, "embedded").data.image_size;
    o.num_workers = 1;
    o.batch_size = 8;
    return o;
  };
  auto collectives = make_local_collectives();
  const EnsembleResult ra = run_ensemble({a}, options_for, index, rows, torch::kCPU, *collectives);
  const EnsembleResult rb = run_ensemble({b}, options_for, index, rows, torch::kCPU, *collectives);
  const EnsembleResult both = run_ensemble({a, b}, options_for, index, rows, torch::kCPU, *collectives);
  ASSERT_EQ(both.probs.sizes(), ra.probs.sizes());
  EXPECT_TRUE(torch::equal(ra.rows, both.rows));
  EXPECT_EQ(both.options[0].image_size, 48);
  EXPECT_EQ(both.options[1].image_size, 32);
  EXPECT_TRUE(torch::equal(ra.probs, torch::sigmoid(ra.logits).to(torch::kDouble)));
  const torch::Tensor mean = (ra.probs + rb.probs) / 2;
  EXPECT_LT((both.probs - mean).abs().max().item<double>(), 1e-6);
  EXPECT_GT((ra.probs - rb.probs).abs().max().item<double>(), 1e-3);  // the two models do differ

  std::vector<std::string> other = index.label_names;
  other.back() = "Something else";
  const std::string c = write_checkpoint(dir, "c.pt", 3, 48, other);
  try {
    run_ensemble({a, c}, options_for, index, rows, torch::kCPU, *collectives);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(c + " predicts other labels than " + a), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ranzcr
