#include "engine/io/trained_model.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "core/check.h"
#include "core/printable.h"
#include "engine/io/checkpoint.h"
#include "engine/io/safetensors.h"
#include "engine/io/weight_file.h"

namespace ranzcr {
namespace {

// Our checkpoints are LibTorch (zip) archives; exported models are safetensors files.
FileFormat trained_model_format(const std::string& path) {
  RANZCR_CHECK(std::ifstream(path, std::ios::binary), "checkpoint not found: ", path);
  const FileFormat format = file_format(path);
  RANZCR_CHECK(format == FileFormat::kZipArchive || format == FileFormat::kSafetensors, path,
               " is not a ranzcr checkpoint (.pt) nor a .safetensors file written by `ranzcr export`");
  return format;
}

// At most this many labels: a file cannot make the classifier head as large as it likes (RANZCR has 11,
// ChestX-ray14 and CheXpert 14).
constexpr size_t kMaxLabels = 1000;

// What the model is built from, checked before anything is allocated for it: the file names it.
void check_model_info(const TrainedModelInfo& info, const std::string& path) {
  const ModelConfig& m = info.model;
  RANZCR_CHECK(m.in_channels == 1 || m.in_channels == 3, path, ": the model has ", m.in_channels,
               " input channels, expected 1 or 3");
  RANZCR_CHECK(!info.label_names.empty() && info.label_names.size() <= kMaxLabels, path, ": the model has ",
               info.label_names.size(), " labels, expected 1 to ", kMaxLabels);
  for (const auto* values : {&m.input_mean, &m.input_std})
    RANZCR_CHECK(values->size() == 1 || values->size() == static_cast<size_t>(m.in_channels), path,
                 ": the model's input mean/std hold ", values->size(), " values, expected 1 or ",
                 m.in_channels);
  RANZCR_CHECK(m.dropout >= 0.0 && m.dropout < 1.0, path, ": the model's dropout is ", m.dropout,
               ", expected [0, 1)");
}

std::shared_ptr<Classifier> build(const TrainedModelInfo& info) {
  check_model_info(info, info.path);
  ModelSpec spec;
  spec.in_channels = info.model.in_channels;
  spec.num_classes = static_cast<int>(info.label_names.size());
  spec.dropout = info.model.dropout;
  try {
    return create_model(info.model.name, spec);
  } catch (
      const std::runtime_error& e) {  // an unknown name (from the file): the registry lists the valid ones
    RANZCR_FAIL(info.path, ": ", printable(e.what(), 400));
  }
}

TrainedModel from_checkpoint(const std::string& path, const torch::Device& device) {
  CheckpointReader reader(path, device);
  const CheckpointMeta& meta = reader.meta();
  TrainedModel out;
  out.info.path = path;
  try {
    out.info.model = parse_config(meta.config_yaml, path + " (embedded config)").model;
  } catch (const std::runtime_error& e) {  // not every config error names its origin
    const std::string what = e.what();
    if (what.find(path) != std::string::npos) throw;
    RANZCR_FAIL(path, ": its embedded config: ", what);
  }
  out.info.model.name = meta.model_name;
  out.info.model.pretrained = {};
  out.info.label_names = meta.label_names;
  out.info.config_yaml = meta.config_yaml;
  out.info.epoch = meta.epoch;
  out.model = build(out.info);
  out.model->to(device);
  reader.restore(*out.model, nullptr);
  out.info.ema = reader.has_ema();
  if (out.info.ema) reader.restore_ema(*out.model);  // the averaged weights: validated, chosen, deployed
  return out;
}

template <class T>
T metadata_json(const SafetensorsFile& file, const std::string& path, const std::string& key, T fallback,
                bool required) {
  auto it = file.metadata.find(key);
  if (it == file.metadata.end()) {
    RANZCR_CHECK(!required, path, " has no '", key, "' metadata: it was not written by `ranzcr export`");
    return fallback;
  }
  try {
    return nlohmann::json::parse(it->second).get<T>();
  } catch (const nlohmann::json::exception&) {
    const std::string& v = it->second;
    RANZCR_FAIL(path, ": metadata '", key, "' is malformed: ",
                v.find('\n') == std::string::npos && v.size() <= 80
                    ? v
                    : v.substr(0, std::min<size_t>(v.find('\n'), 80)) + "...");
  }
}

// "missing a, b, c, d, e, ... (12 in all)": a kind of problem with its first names.
std::string listed(const char* kind, const std::vector<std::string>& names) {
  std::string out = kind;
  for (size_t k = 0; k < names.size() && k < 5; ++k) out += (k ? ", " : " ") + names[k];
  if (names.size() > 5) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

// Copies every tensor of `file` into the parameter or buffer of the same name; nothing may be missing,
// left over or of another shape.
void copy_exactly(torch::nn::Module& model, const SafetensorsFile& file, const std::string& path) {
  std::map<std::string, torch::Tensor> source(file.tensors.begin(), file.tensors.end());
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;
  std::vector<std::string> missing, reshaped, unexpected;
  auto take = [&](const std::string& key, const torch::Tensor& dst) {
    auto it = source.find(key);
    if (it == source.end()) {
      missing.push_back(key);
    } else if (it->second.sizes() != dst.sizes()) {
      reshaped.push_back(key);
    } else {
      copies.emplace_back(dst, it->second);
    }
    if (it != source.end()) source.erase(it);
  };
  for (const auto& kv : model.named_parameters()) take(kv.key(), kv.value());
  for (const auto& kv : model.named_buffers()) take(kv.key(), kv.value());
  for (const auto& kv : source) unexpected.push_back(kv.first);
  std::string problems;
  for (const auto& [kind, names] :
       {std::pair<const char*, const std::vector<std::string>*>{"missing", &missing},
        {"of another shape:", &reshaped},
        {"unexpected", &unexpected}})
    if (!names->empty()) problems += (problems.empty() ? "" : "; ") + listed(kind, *names);
  RANZCR_CHECK(problems.empty(), path, ": the weights do not fit the model its metadata names: ", problems);
  torch::NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src.to(dst.scalar_type()));
}

TrainedModel from_safetensors(const std::string& path, const torch::Device& device) {
  const SafetensorsFile file = load_safetensors(path);
  TrainedModel out;
  TrainedModelInfo& info = out.info;
  info.path = path;
  auto name = file.metadata.find("model_name");
  RANZCR_CHECK(name != file.metadata.end(), path,
               " has no 'model_name' metadata: it was not written by `ranzcr export` (timm weights "
               "without it are a starting point: model.pretrained)");
  info.model.name = name->second;
  info.label_names = metadata_json<std::vector<std::string>>(file, path, "label_names", {}, true);
  info.model.in_channels = metadata_json<int>(file, path, "in_chans", 1, true);
  info.model.input_mean = metadata_json<std::vector<double>>(file, path, "mean", {0.0}, false);
  info.model.input_std = metadata_json<std::vector<double>>(file, path, "std", {1.0}, false);
  info.epoch = metadata_json<int64_t>(file, path, "epoch", 0, false);
  auto config = file.metadata.find("ranzcr_config");
  if (config != file.metadata.end()) info.config_yaml = config->second;
  auto weights = file.metadata.find("weights");
  info.ema = weights != file.metadata.end() && weights->second == "ema";
  out.model = build(info);
  copy_exactly(*out.model, file, path);
  out.model->to(device);
  return out;
}

}  // namespace

TrainedModel load_trained_model(const std::string& path, const torch::Device& device) {
  TrainedModel out = trained_model_format(path) == FileFormat::kZipArchive ? from_checkpoint(path, device)
                                                                           : from_safetensors(path, device);
  out.model->eval();
  return out;
}

std::map<std::string, std::string> export_metadata(const TrainedModelInfo& info) {
  int image_size = 0;
  if (!info.config_yaml.empty())
    image_size = parse_config(info.config_yaml, info.path + " (embedded config)").data.image_size;
  const int c = info.model.in_channels;
  return {{"format", "pt"},
          {"model_name", info.model.name},
          {"label_names", nlohmann::json(info.label_names).dump()},
          {"num_classes", std::to_string(info.label_names.size())},
          {"in_chans", std::to_string(c)},
          {"input_size", nlohmann::json({c, image_size, image_size}).dump()},
          {"mean", nlohmann::json(info.model.input_mean).dump()},
          {"std", nlohmann::json(info.model.input_std).dump()},
          {"weights", info.ema ? "ema" : "model"},
          {"epoch", std::to_string(info.epoch)},
          {"ranzcr_config", info.config_yaml}};
}

int64_t export_safetensors(const TrainedModel& trained, const std::string& out) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& kv : trained.model->named_parameters())
    tensors.emplace_back(kv.key(), kv.value().detach().to(torch::kCPU, torch::kFloat32));
  for (const auto& kv : trained.model->named_buffers()) {
    const torch::Tensor b = kv.value().detach().cpu();
    tensors.emplace_back(kv.key(), b.is_floating_point() ? b.to(torch::kFloat32) : b);
  }
  save_safetensors(out, tensors, export_metadata(trained.info));
  return static_cast<int64_t>(tensors.size());
}

}  // namespace ranzcr
