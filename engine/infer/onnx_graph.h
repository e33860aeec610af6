// Trained models as ONNX graphs: `ranzcr export --out model.onnx` (one model, or an ensemble averaging its
// members' probabilities) and the graph the OpenVINO backend compiles. onnx/onnx_export.h makes the graph;
// this adds what the checkpoint knows: input size, channels, normalisation, labels, as metadata_props.
#pragma once

#include <string>
#include <vector>

#include "engine/io/trained_model.h"

namespace ranzcr {

/// The input side of a trained model: data.image_size of the run it came from. Throws (one line naming the
/// file) when the file holds no training config to read it from.
int trained_image_size(const TrainedModelInfo& info);

/// The serialized, checked ONNX graph of `models` (one model: logits and probabilities; several: the mean of
/// their probabilities), with export_metadata's keys (of the first model; `members` lists every file) plus
/// format "ranzcr-onnx", input, outputs and image_size. The models must agree in input size, channels and
/// labels (else one line naming both files).
std::string trained_models_onnx(const std::vector<const TrainedModel*>& models);

/// `ranzcr export` to .onnx: loads `paths` on the CPU, writes their graph to `out` atomically (a temporary
/// file in the same folder, renamed once the checker passed). Returns the file's size in bytes.
int64_t export_onnx(const std::vector<std::string>& paths, const std::string& out);

}  // namespace ranzcr
