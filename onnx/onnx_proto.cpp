#include "onnx/onnx_proto.h"

#include <onnx/checker.h>
#include <onnx/common/version.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include "core/check.h"
#include "core/text.h"

namespace ranzcr::onnx_ir {

Node& Node::attr(const std::string& name, int64_t value) {
  attributes.push_back({name, Attribute::Kind::kInt, value, {}, 0.0f});
  return *this;
}

Node& Node::attr(const std::string& name, std::vector<int64_t> values) {
  attributes.push_back({name, Attribute::Kind::kInts, 0, std::move(values), 0.0f});
  return *this;
}

Node& Node::attr_float(const std::string& name, double value) {
  attributes.push_back({name, Attribute::Kind::kFloat, 0, {}, static_cast<float>(value)});
  return *this;
}

namespace {

void fill(onnx::ValueInfoProto& v, const ValueInfo& info) {
  v.set_name(info.name);
  v.set_doc_string(info.doc);
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : info.dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (d < 0)
      dim->set_dim_param("batch");
    else
      dim->set_dim_value(d);
  }
}

void fill(onnx::NodeProto& n, const Node& node) {
  n.set_op_type(node.op);
  n.set_name(node.outputs.front());
  for (const auto& i : node.inputs) n.add_input(i);
  for (const auto& o : node.outputs) n.add_output(o);
  for (const Attribute& a : node.attributes) {
    onnx::AttributeProto& p = *n.add_attribute();
    p.set_name(a.name);
    switch (a.kind) {
      case Attribute::Kind::kInt:
        p.set_type(onnx::AttributeProto::INT);
        p.set_i(a.i);
        break;
      case Attribute::Kind::kInts:
        p.set_type(onnx::AttributeProto::INTS);
        for (int64_t v : a.ints) p.add_ints(v);
        break;
      case Attribute::Kind::kFloat:
        p.set_type(onnx::AttributeProto::FLOAT);
        p.set_f(a.f);
        break;
    }
  }
}

void fill(onnx::GraphProto& g, const Graph& graph) {
  g.set_name(graph.name);
  g.set_doc_string(graph.doc);
  for (const auto& v : graph.inputs) fill(*g.add_input(), v);
  for (const auto& v : graph.outputs) fill(*g.add_output(), v);
  for (const auto& n : graph.nodes) fill(*g.add_node(), n);
  for (const Tensor& t : graph.initializers) {
    onnx::TensorProto& p = *g.add_initializer();
    p.set_name(t.name);
    p.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : t.dims) p.add_dims(d);
    p.set_raw_data(t.raw);
  }
}

}  // namespace

std::string serialize_checked(const Graph& graph) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("ranzcr");
  onnx::OperatorSetIdProto& opset = *model.add_opset_import();
  opset.set_domain("");
  opset.set_version(graph.opset);
  for (const auto& [key, value] : graph.metadata) {
    onnx::StringStringEntryProto& p = *model.add_metadata_props();
    p.set_key(key);
    p.set_value(value);
  }
  fill(*model.mutable_graph(), graph);
  try {
    onnx::checker::check_model(model);
    onnx::ShapeInferenceOptions options(/*check_type=*/true, /*strict_mode=*/1, /*data_prop=*/true);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), options);
  } catch (const std::exception& e) {
    RANZCR_FAIL("the ONNX graph failed ONNX's checker: ", first_line(e.what()));
  }
  std::string bytes;
  RANZCR_CHECK(model.SerializeToString(&bytes), "cannot serialise the ONNX graph (over 2 GiB?)");
  return bytes;
}

std::map<std::string, std::string> metadata(const std::string& model_bytes) {
  onnx::ModelProto model;
  RANZCR_CHECK(model.ParseFromString(model_bytes), "not an ONNX model");
  std::map<std::string, std::string> out;
  for (const auto& p : model.metadata_props()) out[p.key()] = p.value();
  return out;
}

std::string library_version() {
  return onnx::LAST_RELEASE_VERSION;
}

}  // namespace ranzcr::onnx_ir
