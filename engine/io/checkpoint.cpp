#include "engine/io/checkpoint.h"

#include <torch/serialize.h>

#include <filesystem>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

torch::serialize::InputArchive open_archive(const std::string& path,
                                            const torch::Device& device = torch::kCPU) {
  if (!fs::is_regular_file(path)) throw std::runtime_error("checkpoint not found: " + path);
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device);
  } catch (const std::exception&) {
    throw std::runtime_error(path + " is not a ranzcr checkpoint (cannot read it as a LibTorch archive)");
  }
  return archive;
}

CheckpointMeta read_meta(torch::serialize::InputArchive& archive, const std::string& path) {
  CheckpointMeta meta;
  c10::IValue v;
  if (!archive.try_read("ranzcr_format_version", v) || !v.isInt())
    throw std::runtime_error(path + " is not a ranzcr checkpoint (no ranzcr_format_version)");
  meta.format_version = v.toInt();
  if (meta.format_version != kCheckpointFormatVersion)
    throw std::runtime_error(
        path + ": checkpoint format version " + std::to_string(meta.format_version) +
        " is not supported (expected " + std::to_string(kCheckpointFormatVersion) + ")" +
        (meta.format_version == 1 ? "; version 1 predates the models' timm parameter names: retrain" : ""));
  auto need = [&](const char* key) {
    c10::IValue value;
    if (!archive.try_read(key, value)) throw std::runtime_error(path + ": checkpoint lacks '" + key + "'");
    return value;
  };
  meta.epoch = need("epoch").toInt();
  meta.step = need("step").toInt();
  meta.best_metric = need("best_metric").toDouble();
  meta.config_yaml = need("config_yaml").toStringRef();
  meta.model_name = need("model_name").toStringRef();
  meta.label_names = split_lines(need("label_names").toStringRef());
  meta.world_size = need("world_size").toInt();
  meta.epoch_batches_done = need("epoch_batches_done").toInt();
  meta.batch_size = need("batch_size").toInt();
  c10::IValue optional;  // added later within format version 1: absent in older files
  if (archive.try_read("loss_scale", optional) && optional.isDouble()) meta.loss_scale = optional.toDouble();
  if (archive.try_read("loss_scale_growth", optional) && optional.isInt())
    meta.loss_scale_growth = optional.toInt();
  if (archive.try_read("epochs_since_best", optional) && optional.isInt())
    meta.epochs_since_best = optional.toInt();
  if (archive.try_read("epoch_metric", optional) && optional.isDouble())
    meta.epoch_metric = optional.toDouble();
  torch::Tensor rng;
  if (archive.try_read("rng_states", rng)) meta.rng_states = rng.cpu();
  if (archive.try_read("rng_device", optional) && optional.isString())
    meta.rng_device = optional.toStringRef();
  return meta;
}

}  // namespace

std::string epoch_checkpoint_path(const std::string& dir, const std::string& prefix, int64_t epoch) {
  std::ostringstream name;
  name << dir << "/" << prefix << std::setw(3) << std::setfill('0') << epoch << ".pt";
  return name.str();
}

std::string serialize_checkpoint(const CheckpointMeta& meta, torch::nn::Module& model,
                                 torch::optim::Optimizer* optimizer, const CheckpointParts& parts) {
  torch::serialize::OutputArchive archive;
  archive.write("ranzcr_format_version", c10::IValue(meta.format_version));
  archive.write("epoch", c10::IValue(meta.epoch));
  archive.write("step", c10::IValue(meta.step));
  archive.write("best_metric", c10::IValue(meta.best_metric));
  archive.write("config_yaml", c10::IValue(meta.config_yaml));
  archive.write("model_name", c10::IValue(meta.model_name));
  archive.write("label_names", c10::IValue(join(meta.label_names)));
  archive.write("world_size", c10::IValue(meta.world_size));
  archive.write("epoch_batches_done", c10::IValue(meta.epoch_batches_done));
  archive.write("batch_size", c10::IValue(meta.batch_size));
  archive.write("loss_scale", c10::IValue(meta.loss_scale));
  archive.write("loss_scale_growth", c10::IValue(meta.loss_scale_growth));
  archive.write("epochs_since_best", c10::IValue(meta.epochs_since_best));
  archive.write("epoch_metric", c10::IValue(meta.epoch_metric));
  if (meta.rng_states.defined()) archive.write("rng_states", meta.rng_states.cpu());
  if (!meta.rng_device.empty()) archive.write("rng_device", c10::IValue(meta.rng_device));
  auto write_part = [&](const char* key, const auto* part) {  // a module or the optimizer, when there is one
    if (!part) return;
    torch::serialize::OutputArchive part_archive;
    part->save(part_archive);
    archive.write(key, part_archive);
  };
  write_part("model", &model);
  write_part("optimizer", optimizer);
  for (const auto& [name, module] : parts) write_part(name.c_str(), module);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void save_checkpoint(const std::string& path, const CheckpointMeta& meta, torch::nn::Module& model,
                     torch::optim::Optimizer* optimizer) {
  write_file_atomic(path, serialize_checkpoint(meta, model, optimizer));
}

CheckpointReader::CheckpointReader(const std::string& path, const torch::Device& device)
    : path_(path), archive_(open_archive(path, device)), meta_(read_meta(archive_, path)) {}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  return CheckpointReader(path).meta();
}

CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model,
                               torch::optim::Optimizer* optimizer, const torch::Device& device) {
  CheckpointReader reader(path, device);
  reader.restore(model, optimizer);
  return reader.meta();
}

// Throws one line naming the file: a state of another model (c10::Error from LibTorch), or a part
// missing or unreadable.
template <typename Load>
void CheckpointReader::load_or_explain(Load&& load) {
  try {
    load();
  } catch (const c10::Error& e) {
    throw std::runtime_error(path_ + ": checkpoint does not match the model '" + meta_.model_name +
                             "': " + e.what_without_backtrace());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path_ + ": cannot restore the checkpoint: " + e.what());
  }
}

void CheckpointReader::restore(torch::nn::Module& model, torch::optim::Optimizer* optimizer) {
  load_or_explain([&] {
    torch::serialize::InputArchive part;
    archive_.read("model", part);
    model.load(part);
  });
  if (optimizer) restore_optimizer(*optimizer);
}

void CheckpointReader::restore_optimizer(torch::optim::Optimizer& optimizer) {
  load_or_explain([&] {
    torch::serialize::InputArchive part;
    if (!archive_.try_read("optimizer", part)) throw std::runtime_error("it holds no optimizer state");
    optimizer.load(part);
  });
}

bool CheckpointReader::has_part(const std::string& name) {
  torch::serialize::InputArchive part;
  return archive_.try_read(name, part);
}

void CheckpointReader::restore_part(const std::string& name, const std::string& what,
                                    torch::nn::Module& module) {
  torch::serialize::InputArchive part;
  if (!archive_.try_read(name, part)) throw std::runtime_error(path_ + ": the checkpoint holds no " + what);
  try {
    module.load(part);
  } catch (const c10::Error& e) {
    throw std::runtime_error(path_ + ": the checkpoint's " + what + " do not match the model '" +
                             meta_.model_name + "': " + e.what_without_backtrace());
  }
}

}  // namespace ranzcr
