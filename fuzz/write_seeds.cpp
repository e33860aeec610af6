// Writes the seeds of the checkpoint targets with the project's own writers, small enough to fuzz (a
// tiny_cnn checkpoint with its optimizer and EMA weights is 9 MB): a checkpoint of a 2 -> 3 linear model
// named tiny_cnn with every meta field (mid-epoch, two ranks' generator states), AdamW's state after one
// step and EMA weights; and an export of the same weights with export_metadata's keys.
//   fuzz_write_seeds OUT_DIR   (scripts/fuzz/make_corpus.sh runs it)
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include <opencv2/imgcodecs.hpp>

#include "data/image_cache.h"
#include "engine/io/checkpoint.h"
#include "engine/io/safetensors.h"
#include "engine/io/trained_model.h"
#include "fuzz/micro_model.h"

namespace {

std::vector<std::string> labels() {
  std::vector<std::string> names;
  for (int k = 0; k < 11; ++k) names.push_back("label " + std::to_string(k));
  return names;
}

// Three images at 8 x 8 (a PNG, a JPEG, a file that is neither), and two of them at 16 x 16 with CLAHE.
void write_cache_seeds(const std::string& out) {
  using namespace ranzcr;
  const std::string dir = out + "/cache_images";
  std::filesystem::create_directories(dir);
  cv::Mat img(12, 20, CV_8UC1);
  cv::randu(img, 0, 255);
  cv::imwrite(dir + "/a.png", img);
  cv::imwrite(dir + "/b.jpg", img.t());
  std::FILE* f = std::fopen((dir + "/c.jpg").c_str(), "wb");
  std::fputs("not an image", f);
  std::fclose(f);
  const std::vector<std::string> three = {dir + "/a.png", dir + "/b.jpg", dir + "/c.jpg"};
  const PrepareOptions small{8, false, {}}, clahe{16, true, {}};
  build_image_cache(out + "/three.rzc", image_cache_key(three, small), three, small, 1, {});
  const std::vector<std::string> two(three.begin(), three.begin() + 2);
  build_image_cache(out + "/clahe.rzc", image_cache_key(two, clahe), two, clahe, 1, {});
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ranzcr;
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_write_seeds OUT_DIR\n");
    return 2;
  }
  const std::string out = argv[1];
  std::filesystem::create_directories(out);
  torch::manual_seed(0);
  fuzz::MicroModel model, ema;
  torch::optim::AdamW optimizer(model.parameters(), torch::optim::AdamWOptions(1e-3));
  model.fc->forward(torch::ones({4, 2})).sum().backward();
  optimizer.step();

  Config config;
  config.model.name = "tiny_cnn";
  CheckpointMeta meta;
  meta.epoch = 1;
  meta.step = 10;
  meta.best_metric = 0.75;
  meta.config_yaml = config_to_yaml(config);
  meta.model_name = "tiny_cnn";
  meta.label_names = labels();
  meta.world_size = 2;
  meta.epoch_batches_done = 3;
  meta.batch_size = 8;
  meta.loss_scale = 65536.0;
  meta.loss_scale_growth = 5;
  meta.epochs_since_best = 1;
  meta.epoch_metric = 0.7;
  meta.rng_states = torch::arange(32, torch::kUInt8).reshape({2, 16});
  meta.rng_device = "cpu";
  write_file_atomic(out + "/checkpoint.pt", serialize_checkpoint(meta, model, &optimizer, {{"ema", &ema}}));

  TrainedModelInfo info;
  info.model = config.model;
  info.label_names = {"a", "b", "c"};
  info.config_yaml = meta.config_yaml;
  info.epoch = 1;
  save_safetensors(out + "/export.safetensors",
                   {{"fc.weight", model.fc->weight}, {"fc.bias", model.fc->bias}}, export_metadata(info));
  write_cache_seeds(out);
  std::printf("wrote %s/checkpoint.pt, %s/export.safetensors and two .rzc caches\n", out.c_str(),
              out.c_str());
  return 0;
}
