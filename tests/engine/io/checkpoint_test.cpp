#include "engine/io/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <functional>
#include <sstream>

#include "models/registry.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

void train_step(Classifier& m, torch::optim::Optimizer& opt, const torch::Tensor& x) {
  opt.zero_grad();
  torch::binary_cross_entropy_with_logits(m.forward(x), torch::ones({x.size(0), 11})).backward();
  opt.step();
}

TEST(Checkpoint, RoundTripRestoresOutputsAndOptimizerState) {
  test::TempDir dir;
  torch::manual_seed(1);
  const torch::Tensor x = torch::rand({4, 1, 32, 32});
  auto a = create_model("tiny_cnn", ModelSpec{});
  torch::optim::AdamW opt_a(a->parameters(), torch::optim::AdamWOptions(1e-2));
  train_step(*a, opt_a, x);
  CheckpointMeta meta;
  meta.epoch = 3;
  meta.step = 17;
  meta.best_metric = 0.91;
  meta.config_yaml = "seed: 1\n";
  meta.model_name = "tiny_cnn";
  meta.label_names = {"A - x", "B, y"};
  meta.epochs_since_best = 2;
  meta.rng_states = torch::randint(0, 255, {2, 16}, torch::kUInt8);
  save_checkpoint(dir / "c.pt", meta, *a, &opt_a);
  for (const auto& e : std::filesystem::directory_iterator(dir.str()))
    EXPECT_EQ(e.path().filename(), "c.pt");  // no temporary file left behind

  torch::manual_seed(2);
  auto b = create_model("tiny_cnn", ModelSpec{});
  torch::optim::AdamW opt_b(b->parameters(), torch::optim::AdamWOptions(1e-2));
  const CheckpointMeta got = load_checkpoint(dir / "c.pt", *b, &opt_b);
  EXPECT_EQ(got.epoch, 3);
  EXPECT_EQ(got.step, 17);
  EXPECT_DOUBLE_EQ(got.best_metric, 0.91);
  EXPECT_EQ(got.config_yaml, "seed: 1\n");
  EXPECT_EQ(got.label_names, meta.label_names);
  EXPECT_EQ(got.epochs_since_best, 2);
  ASSERT_TRUE(got.rng_states.defined());
  EXPECT_TRUE(torch::equal(got.rng_states, meta.rng_states));
  a->eval();
  b->eval();
  EXPECT_TRUE(torch::equal(a->forward(x), b->forward(x)));
  // Same optimizer state: one more identical step keeps the parameters identical.
  a->train();
  b->train();
  train_step(*a, opt_a, x);
  train_step(*b, opt_b, x);
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
}

TEST(Checkpoint, NotACheckpointIsAClearError) {
  test::TempDir dir;
  test::write_file(dir / "x.pt", "hello");
  auto m = create_model("tiny_cnn", ModelSpec{});
  for (const std::string& path : {dir / "x.pt", dir / "missing.pt"}) {
    try {
      load_checkpoint(path, *m, nullptr);
      FAIL() << path;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  // A LibTorch archive that is not ours.
  torch::serialize::OutputArchive other;
  other.write("w", torch::ones({2}));
  other.save_to(dir / "other.pt");
  EXPECT_THROW(read_checkpoint_meta(dir / "other.pt"), std::runtime_error);
  // Ours, with a required key of the wrong type: one line naming the file and the key (it was LibTorch's
  // multi-line internal assertion).
  torch::serialize::OutputArchive odd;
  odd.write("ranzcr_format_version", c10::IValue(kCheckpointFormatVersion));
  odd.write("epoch", c10::IValue(std::string("three")));
  odd.save_to(dir / "odd.pt");
  try {
    read_checkpoint_meta(dir / "odd.pt");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir / "odd.pt" + ": checkpoint key 'epoch' holds a String, expected an integer"),
              std::string::npos)
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// The trackers' run ids are one map by tracker name; a checkpoint from before the map, which kept one
// tracker's id as <name>_run_id, reads into it.
TEST(Checkpoint, TrackerRunIdsAreAMapAndOlderPerTrackerKeysReadIntoIt) {
  test::TempDir dir;
  auto m = create_model("tiny_cnn", ModelSpec{});
  CheckpointMeta meta;
  meta.model_name = "tiny_cnn";
  meta.tracker_run_ids = {{"mlflow", "0123abcd"}, {"other", "run=7"}};
  test::write_file(dir / "new.pt", serialize_checkpoint(meta, *m, nullptr));
  EXPECT_EQ(read_checkpoint_meta(dir / "new.pt").tracker_run_ids, meta.tracker_run_ids);
  meta.tracker_run_ids.clear();
  test::write_file(dir / "none.pt", serialize_checkpoint(meta, *m, nullptr));
  EXPECT_TRUE(read_checkpoint_meta(dir / "none.pt").tracker_run_ids.empty());

  torch::serialize::OutputArchive old;  // the meta as a checkpoint of format 2 without the map held it
  old.write("ranzcr_format_version", c10::IValue(kCheckpointFormatVersion));
  for (const char* key : {"epoch", "step", "world_size", "epoch_batches_done", "batch_size"})
    old.write(key, c10::IValue(int64_t{1}));
  old.write("best_metric", c10::IValue(0.5));
  old.write("config_yaml", c10::IValue(std::string("seed: 1\n")));
  old.write("model_name", c10::IValue(std::string("tiny_cnn")));
  old.write("label_names", c10::IValue(std::string("a\nb\n")));
  old.write("mlflow_run_id", c10::IValue(std::string("5f3e9d")));
  old.save_to(dir / "old.pt");
  EXPECT_EQ(read_checkpoint_meta(dir / "old.pt").tracker_run_ids,
            (std::map<std::string, std::string>{{"mlflow", "5f3e9d"}}));
}

// The checkpoint `bytes` written again with `edit` applied to each record (name, contents).
std::string rewrite_archive(const std::string& bytes,
                            const std::function<void(const std::string&, std::string&)>& edit) {
  std::istringstream in(bytes);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  });
  for (const std::string& name : reader.getAllRecords()) {
    if (name == "version" || name == ".data/version" || name == ".data/serialization_id") continue;
    auto [data, size] = reader.getRecord(name);
    std::string record(static_cast<const char*>(data.get()), size);
    edit(name, record);
    writer.writeRecord(name, record.data(), record.size());
  }
  writer.writeEndOfFile();
  return out;
}

TEST(Checkpoint, CodeThatDefinesAMethodIsRefusedBeforeLibTorchLoadsIt) {
  // torch::jit::load compiles a checkpoint's TorchScript code and runs a __setstate__ it defines while
  // unpickling. Ours hold attributes only: a checkpoint whose code defines any function is refused first.
  test::TempDir dir;
  auto m = create_model("tiny_cnn", ModelSpec{});
  CheckpointMeta meta;
  meta.model_name = "tiny_cnn";
  const std::string bytes = serialize_checkpoint(meta, *m, nullptr);
  test::write_file(dir / "plain.pt", rewrite_archive(bytes, [](const std::string&, std::string&) {}));
  EXPECT_EQ(read_checkpoint_meta(dir / "plain.pt").model_name, "tiny_cnn");  // the rewrite alone is fine
  test::write_file(dir / "code.pt", rewrite_archive(bytes, [](const std::string& name, std::string& record) {
                     if (name == "code/__torch__.py")
                       record +=
                           "  def __setstate__(self, state: Tuple[int, int]) -> None:\n    return None\n";
                   }));
  try {
    read_checkpoint_meta(dir / "code.pt");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(
        msg.find(dir / "code.pt" + " is not a ranzcr checkpoint (its TorchScript code (code/__torch__.py) "
                                   "defines functions"),
        std::string::npos)
        << msg;
  }
}

// Plain values (what training features keep beside their modules) come back by name and type; a
// checkpoint without them, as written before there were any, reads as lacking each; a file that holds
// them still loads where only the meta and the model are read.
TEST(Checkpoint, PlainValuesRoundTripAndOlderCheckpointsLackThem) {
  test::TempDir dir;
  auto m = create_model("tiny_cnn", ModelSpec{});
  CheckpointMeta meta;
  meta.model_name = "tiny_cnn";
  meta.epoch = 4;
  const CheckpointValues values{{"some_count", int64_t{7}}, {"some_figure", 0.25}};
  test::write_file(dir / "new.pt", serialize_checkpoint(meta, *m, nullptr, {}, values));
  test::write_file(dir / "old.pt", serialize_checkpoint(meta, *m, nullptr));

  CheckpointReader reader(dir / "new.pt");
  EXPECT_EQ(reader.int_value("some_count"), std::optional<int64_t>(7));
  EXPECT_EQ(reader.double_value("some_figure"), std::optional<double>(0.25));
  EXPECT_FALSE(reader.int_value("other_count").has_value());
  try {
    reader.int_value("some_figure");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              dir / "new.pt" + ": checkpoint value 'some_figure' holds a Double, expected an integer");
  }
  EXPECT_EQ(read_checkpoint_meta(dir / "new.pt").epoch, 4);
  auto b = create_model("tiny_cnn", ModelSpec{});
  EXPECT_EQ(load_checkpoint(dir / "new.pt", *b, nullptr).epoch, 4);

  CheckpointReader old(dir / "old.pt");
  EXPECT_FALSE(old.int_value("some_count").has_value());
  EXPECT_FALSE(old.double_value("some_figure").has_value());

  // A name that is not a feature's and a value's joined by '_' is refused when written.
  for (const std::string name : {"count", "Some_count", "_count", "some.count", "some count", ""})
    EXPECT_THROW(serialize_checkpoint(meta, *m, nullptr, {}, {{name, int64_t{1}}}), c10::Error) << name;
}

}  // namespace
}  // namespace ranzcr
