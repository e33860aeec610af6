// An ONNX graph as plain structs, and the one place that turns it into ONNX's protobuf: serialised, checked
// by ONNX's checker and strict shape inference. No LibTorch here: the torch wheel ships its own (older)
// protobuf headers, which must not meet ONNX's in one translation unit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ranzcr::onnx_ir {

struct Attribute {
  enum class Kind { kInt, kInts, kFloat };
  std::string name;
  Kind kind = Kind::kInt;
  int64_t i = 0;
  std::vector<int64_t> ints;
  float f = 0.0f;
};

struct Node {
  std::string op;  // ONNX operator type (default domain)
  std::vector<std::string> inputs, outputs;
  std::vector<Attribute> attributes;

  Node& attr(const std::string& name, int64_t value);
  Node& attr(const std::string& name, std::vector<int64_t> values);
  Node& attr_float(const std::string& name, double value);
};

/// A float32 initializer: its dims and the values' bytes (little-endian, row-major).
struct Tensor {
  std::string name;
  std::vector<int64_t> dims;
  std::string raw;
};

/// A float32 graph input or output; a dim of -1 is the dynamic axis named "batch".
struct ValueInfo {
  std::string name;
  std::vector<int64_t> dims;
  std::string doc;
};

struct Graph {
  std::string name, doc;
  std::vector<ValueInfo> inputs, outputs;
  std::vector<Node> nodes;
  std::vector<Tensor> initializers;
  std::map<std::string, std::string> metadata;  // the model's metadata_props
  int64_t opset = 17;
};

/// The serialised ModelProto (IR version 8) of `graph` after ONNX's checker and shape inference in strict
/// mode (node errors throw, types checked, declared outputs must agree). Throws std::runtime_error, one line.
std::string serialize_checked(const Graph& graph);

/// The metadata_props of a serialised model (throws on bytes that do not parse).
std::map<std::string, std::string> metadata(const std::string& model_bytes);

/// ONNX's version ("1.12.0").
std::string library_version();

}  // namespace ranzcr::onnx_ir
