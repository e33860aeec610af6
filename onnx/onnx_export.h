// ONNX graphs of the zoo's models, for `ranzcr export --out model.onnx` and the OpenVINO inference backend.
// Each network is traced once by LibTorch's own tracer (no second copy of any forward), and the handful of
// ATen operators the zoo uses are mapped to ONNX nodes by one table (onnx_export.cpp, op_table()); an operator
// outside the table is an error naming it. The graph is written with ONNX's C++ library and passes its
// checker and strict shape inference before anyone sees it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/registry.h"

namespace ranzcr {

/// Names of every graph's input and outputs.
inline constexpr const char* kOnnxInput = "images";                 // [batch, C, H, W] float32, normalised
inline constexpr const char* kOnnxLogits = "logits";                // [batch, classes] float32 (one model)
inline constexpr const char* kOnnxProbabilities = "probabilities";  // [batch, classes]: sigmoid of logits

/// One network of a graph: the model (float32, on the CPU) and the normalisation its input expects.
struct OnnxMember {
  Classifier* model = nullptr;
  std::vector<double> input_mean{0.0};  // per channel, or one for all (model.input_mean)
  std::vector<double> input_std{1.0};
};

struct OnnxGraphSpec {
  int in_channels = 1;
  int image_size = 256;  // H = W of the input, fixed; the batch axis is dynamic
  int num_classes = 11;
  /// metadata_props, written as given (labels, sizes, normalisation, model name: export_metadata).
  std::map<std::string, std::string> metadata;
  std::string doc;  // the graph's doc_string
};

/// The serialized ONNX model (opset 17, IR 8) of `members`, checked with ONNX's checker and strict shape
/// inference. Input kOnnxInput, normalised with the first member's mean and std. One member: outputs
/// kOnnxLogits and kOnnxProbabilities. Several (an ensemble of equal input size and channels): each member
/// re-normalises the input to its own mean and std where they differ, and the one output kOnnxProbabilities
/// is the mean of the members' sigmoids. Throws std::runtime_error, one line: an operator the table does not
/// map (named), a model that is not float32 on the CPU, a build without ONNX.
std::string onnx_model_bytes(const std::vector<OnnxMember>& members, const OnnxGraphSpec& spec);

/// Whether this build can write ONNX (Debian's libonnx-dev was found); ranzcr --version says it.
bool onnx_export_available();

/// The ONNX library's version this build uses ("" without it).
std::string onnx_library_version();

/// The metadata_props of a serialized ONNX model (for tests and tools; throws on bytes that do not parse).
std::map<std::string, std::string> onnx_metadata(const std::string& model_bytes);

}  // namespace ranzcr
