#include "engine/io/trained_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "data/batch_loader.h"
#include "engine/io/checkpoint.h"
#include "engine/io/safetensors.h"
#include "engine/runtime/device_batches.h"
#include "tests/models/key_files.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

const std::vector<std::string> kLabels = {"ETT - Abnormal", "NGT - Normal", "CVC, Normal"};

// A checkpoint of `name` (3 labels) whose EMA weights differ from the model's, with a config that sets
// the input normalisation.
std::string write_checkpoint(const test::TempDir& dir, const std::string& name, int in_channels) {
  Config config;
  config.model.name = name;
  config.model.in_channels = in_channels;
  config.model.input_mean = std::vector<double>(in_channels, 0.45);
  config.model.input_std = {0.25};
  config.data.image_size = 96;
  config.data.label_columns = kLabels;
  ModelSpec spec;
  spec.in_channels = in_channels;
  spec.num_classes = 3;
  torch::manual_seed(3);
  auto model = create_model(name, spec);
  auto ema = create_model(name, spec);
  for (auto& b : ema->buffers())  // non-trivial BatchNorm statistics
    if (b.is_floating_point()) b.uniform_(0.5, 1.5);
  CheckpointMeta meta;
  meta.epoch = 4;
  meta.config_yaml = config_to_yaml(config);
  meta.model_name = name;
  meta.label_names = kLabels;
  const std::string path = dir / "best.pt";
  write_file_atomic(path, serialize_checkpoint(meta, *model, nullptr, {{"ema", ema.get()}}));
  return path;
}

// The exported file holds the EMA weights under the model's (timm's) names with the metadata inference
// needs, and loading it gives the checkpoint's outputs bit for bit.
TEST(TrainedModel, ExportedFileGivesTheCheckpointsOutputs) {
  test::TempDir dir;
  const std::string ckpt = write_checkpoint(dir, "resnet18", 1);
  const TrainedModel a = load_trained_model(ckpt);
  EXPECT_TRUE(a.info.ema);
  EXPECT_EQ(a.info.label_names, kLabels);
  EXPECT_EQ(a.info.model.input_mean, std::vector<double>{0.45});
  const std::string out = dir / "model.safetensors";
  EXPECT_EQ(export_safetensors(a, out), 122);  // resnet18: 62 parameters, 60 buffers

  const SafetensorsFile file = load_safetensors(out);
  for (const auto& [key, t] : file.tensors)  // the EMA's BatchNorm statistics, not the model's ones
    if (key == "bn1.running_var") EXPECT_FALSE(torch::equal(t, torch::ones_like(t)));
  EXPECT_EQ(file.metadata.at("model_name"), "resnet18");
  EXPECT_EQ(nlohmann::json::parse(file.metadata.at("label_names")).get<std::vector<std::string>>(), kLabels);
  EXPECT_EQ(file.metadata.at("in_chans"), "1");
  EXPECT_EQ(file.metadata.at("num_classes"), "3");
  EXPECT_EQ(file.metadata.at("input_size"), "[1,96,96]");
  EXPECT_EQ(file.metadata.at("mean"), "[0.45]");
  EXPECT_EQ(file.metadata.at("std"), "[0.25]");
  EXPECT_EQ(file.metadata.at("weights"), "ema");
  EXPECT_EQ(file.metadata.at("epoch"), "4");
  EXPECT_EQ(parse_config(file.metadata.at("ranzcr_config"), "metadata").model.input_std,
            std::vector<double>{0.25});

  const TrainedModel b = load_trained_model(out);
  EXPECT_EQ(b.info.model.name, "resnet18");
  EXPECT_EQ(b.info.label_names, kLabels);
  EXPECT_EQ(b.info.model.input_mean, a.info.model.input_mean);
  EXPECT_EQ(b.info.model.input_std, a.info.model.input_std);
  EXPECT_TRUE(b.info.ema);
  EXPECT_EQ(b.info.epoch, 4);
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::rand({2, 1, 64, 64});
  EXPECT_TRUE(torch::equal(a.model->forward(x), b.model->forward(x)));
}

// The exported resnet18 (11 classes) has exactly timm's state dict with one input channel and exactly
// torchvision's with three: keys and shapes (tests/models/timm_keys and torchvision_keys, written from
// timm 1.0.31 and torchvision 0.28 themselves).
TEST(TrainedModel, ExportedResnet18HasTimmsAndTorchvisionsKeysAndShapes) {
  for (int channels : {1, 3}) {
    test::TempDir dir;
    Config config;
    config.model.in_channels = channels;
    CheckpointMeta meta;
    meta.config_yaml = config_to_yaml(config);
    meta.model_name = "resnet18";
    for (int k = 0; k < 11; ++k) meta.label_names.push_back("label " + std::to_string(k));
    ModelSpec spec;
    spec.in_channels = channels;
    auto model = create_model("resnet18", spec);
    write_file_atomic(dir / "c.pt", serialize_checkpoint(meta, *model, nullptr));
    export_safetensors(load_trained_model(dir / "c.pt"), dir / "m.safetensors");

    std::map<std::string, test::KeyEntry> got;
    for (const auto& [key, t] : load_safetensors(dir / "m.safetensors").tensors)
      got[key] = test::key_entry(t);
    const auto want =
        test::read_key_file(channels == 1 ? "timm_keys/resnet18.txt" : "torchvision_keys/resnet18.txt");
    EXPECT_EQ(got, (std::map<std::string, test::KeyEntry>(want.begin(), want.end())));
  }
}

std::string error_of(const std::string& path) {
  try {
    load_trained_model(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainedModel, FilesThatAreNotTrainedModelsAreOneLineErrors) {
  test::TempDir dir;
  EXPECT_NE(error_of(dir / "absent.pt").find("checkpoint not found: "), std::string::npos);
  test::write_file(dir / "junk.pt", "not a model at all");
  EXPECT_NE(error_of(dir / "junk.pt").find("is not a ranzcr checkpoint (.pt) nor a .safetensors file"),
            std::string::npos);

  // Plain timm weights (no metadata) belong in model.pretrained.
  auto model = create_model("tiny_cnn", ModelSpec{});
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& kv : model->named_parameters()) tensors.emplace_back(kv.key(), kv.value());
  save_safetensors(dir / "timm.safetensors", tensors);
  EXPECT_NE(error_of(dir / "timm.safetensors").find("has no 'model_name' metadata"), std::string::npos);

  // Metadata that names another model than the weights: every problem in one line.
  save_safetensors(dir / "other.safetensors", tensors,
                   {{"model_name", "resnet18"}, {"label_names", "[\"a\"]"}, {"in_chans", "1"}});
  const std::string e = error_of(dir / "other.safetensors");
  EXPECT_NE(e.find("the weights do not fit the model its metadata names: missing conv1.weight"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("unexpected "), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);
  save_safetensors(dir / "bad.safetensors", tensors,
                   {{"model_name", "tiny_cnn"}, {"label_names", "[a]"}, {"in_chans", "1"}});
  EXPECT_NE(error_of(dir / "bad.safetensors").find("metadata 'label_names' is malformed"), std::string::npos);
}

// (pixel - mean) / std per channel, as float32 arithmetic; the identity changes nothing.
TEST(TrainedModel, InputNormalisationPerChannel) {
  const torch::Tensor x = torch::rand({2, 1, 5, 5});
  EXPECT_TRUE(normalize_input(x, {0.0}, {1.0}).is_same(x));
  EXPECT_TRUE(torch::equal(normalize_input(x, {0.449}, {0.226}), (x - 0.449) / 0.226));
  const torch::Tensor y = normalize_input(x, {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 3, 5, 5}));
  EXPECT_TRUE(torch::equal(y.select(1, 0), (x.select(1, 0) - 0.485) / 0.229));
  EXPECT_TRUE(torch::equal(y.select(1, 2), (x.select(1, 0) - 0.406) / 0.225));
  const torch::Tensor three = torch::rand({1, 3, 4, 4});
  EXPECT_TRUE(
      torch::equal(normalize_input(three, {0.5}, {2.0}).select(1, 1), (three.select(1, 1) - 0.5) / 2.0));
}

// The loader's batches reach the model normalised and repeated to the model's channels.
TEST(TrainedModel, DeviceBatchesNormaliseTheLoadersImages) {
  test::TempDir dir;
  test::make_dataset(dir / "ds", 12, 32, 0);
  IndexOptions io;
  const DatasetIndex index = load_index(dir / "ds/train.csv", dir / "ds/train", io);
  std::vector<int64_t> rows(index.size());
  std::iota(rows.begin(), rows.end(), 0);
  TransformOptions to;
  to.image_size = 32;
  LoaderOptions lo;
  lo.batch_size = 4;
  lo.num_workers = 1;
  BatchLoader plain(index, rows, ImageTransform(to), 0, lo);
  BatchLoader normalised(index, rows, ImageTransform(to), 0, lo);
  DeviceBatchOptions dbo;
  dbo.in_channels = 3;
  dbo.input_mean = {0.485, 0.456, 0.406};
  dbo.input_std = {0.229, 0.224, 0.225};
  DeviceBatches batches(normalised, dbo);
  int n = 0;
  while (auto want = plain.next()) {
    auto got = batches.next();
    ASSERT_TRUE(got.has_value());
    ASSERT_EQ(got->images.size(1), 3);
    for (int c = 0; c < 3; ++c)
      EXPECT_TRUE(torch::allclose(got->images.select(1, c),
                                  (want->images.select(1, 0) - dbo.input_mean[c]) / dbo.input_std[c]));
    ++n;
  }
  EXPECT_EQ(n, 3);
}

}  // namespace
}  // namespace ranzcr
