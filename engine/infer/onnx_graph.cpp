#include "engine/infer/onnx_graph.h"

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/durable_file.h"
#include "onnx/onnx_export.h"

namespace ranzcr {

int trained_image_size(const TrainedModelInfo& info) {
  RANZCR_CHECK(
      !info.config_yaml.empty(), info.path,
      " holds no training config, so its input size is unknown (export it from a ranzcr checkpoint)");
  return parse_config(info.config_yaml, info.path + " (embedded config)").data.image_size;
}

namespace {

// The first model's inputs and labels, which every other member must share.
void check_members_agree(const std::vector<const TrainedModel*>& models) {
  const TrainedModelInfo& a = models.front()->info;
  for (const TrainedModel* m : models) {
    const TrainedModelInfo& b = m->info;
    RANZCR_CHECK(trained_image_size(b) == trained_image_size(a), "cannot put ", a.path, " (",
                 trained_image_size(a), " px) and ", b.path, " (", trained_image_size(b),
                 " px) in one ONNX graph: their input sizes differ");
    RANZCR_CHECK(b.model.in_channels == a.model.in_channels, "cannot put ", a.path, " (", a.model.in_channels,
                 " channels) and ", b.path, " (", b.model.in_channels,
                 " channels) in one ONNX graph: their input channels differ");
    RANZCR_CHECK(b.label_names == a.label_names, "cannot put ", a.path, " and ", b.path,
                 " in one ONNX graph: their labels differ");
  }
}

}  // namespace

std::string trained_models_onnx(const std::vector<const TrainedModel*>& models) {
  RANZCR_CHECK(!models.empty(), "no model to export");
  check_members_agree(models);
  const TrainedModelInfo& first = models.front()->info;
  OnnxGraphSpec spec;
  spec.in_channels = first.model.in_channels;
  spec.image_size = trained_image_size(first);
  spec.num_classes = static_cast<int>(first.label_names.size());
  spec.metadata = export_metadata(first);
  spec.metadata["format"] = "ranzcr-onnx";
  spec.metadata["image_size"] = std::to_string(spec.image_size);
  spec.metadata["input"] = kOnnxInput;
  spec.metadata["outputs"] = models.size() == 1 ? nlohmann::json({kOnnxLogits, kOnnxProbabilities}).dump()
                                                : nlohmann::json({kOnnxProbabilities}).dump();
  nlohmann::json members = nlohmann::json::array();
  std::vector<OnnxMember> onnx_members;
  for (const TrainedModel* m : models) {
    members.push_back({{"file", m->info.path}, {"model_name", m->info.model.name}, {"epoch", m->info.epoch}});
    onnx_members.push_back({m->model.get(), m->info.model.input_mean, m->info.model.input_std});
  }
  spec.metadata["members"] = members.dump();
  spec.doc = "ranzcr " + first.model.name +
             (models.size() > 1 ? " ensemble of " + std::to_string(models.size()) : "") +
             ": normalised images in, " + std::to_string(spec.num_classes) +
             " labels out (metadata label_names)";
  return onnx_model_bytes(onnx_members, spec);
}

int64_t export_onnx(const std::vector<std::string>& paths, const std::string& out) {
  std::vector<TrainedModel> models;
  for (const auto& path : paths) models.push_back(load_trained_model(path, torch::kCPU));
  std::vector<const TrainedModel*> members;
  for (const auto& m : models) members.push_back(&m);
  const std::string bytes = trained_models_onnx(members);
  write_file_atomic(out, bytes);
  return static_cast<int64_t>(bytes.size());
}

}  // namespace ranzcr
