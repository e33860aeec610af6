#include "onnx/onnx_export.h"

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "core/check.h"
#include "core/text.h"
#include "onnx/onnx_proto.h"

namespace ranzcr {

namespace {

using torch::jit::Node;
using torch::jit::Value;

// The forward of `model` as LibTorch's tracer records it, on an all-zero batch of 2 (so that nothing
// specialises to a batch of 1). Parameters and buffers become constants of the graph; the tracer refuses
// constants that require grad, so they are switched off for the trace and back on after it.
std::shared_ptr<torch::jit::Graph> trace_forward(Classifier& model, const OnnxGraphSpec& spec) {
  for (const auto& p : model.parameters())
    RANZCR_CHECK(p.device().is_cpu() && p.scalar_type() == torch::kFloat32,
                 "cannot export to ONNX: the model's weights must be float32 on the CPU, not ",
                 p.scalar_type(), " on ", p.device());
  std::vector<torch::Tensor> grad_on;
  for (auto& p : model.parameters())
    if (p.requires_grad()) grad_on.push_back(p);
  const bool was_training = model.is_training();
  struct Restore {
    std::function<void()> undo;
    ~Restore() { undo(); }
  } restore{[&] {
    for (auto& p : grad_on) p.set_requires_grad(true);
    model.train(was_training);
  }};
  for (auto& p : grad_on) p.set_requires_grad(false);
  model.eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::zeros({2, spec.in_channels, spec.image_size, spec.image_size});
  auto forward = [&model](torch::jit::Stack in) -> torch::jit::Stack {
    return {model.forward(in[0].toTensor())};
  };
  auto traced = torch::jit::tracer::trace(
      {x}, forward, [](const torch::autograd::Variable&) { return std::string(); }, /*strict=*/true,
      /*force_outplace=*/true);
  std::shared_ptr<torch::jit::Graph> graph = traced.first->graph;
  torch::jit::EliminateDeadCode(graph);
  return graph;
}

// A float32 tensor as an ONNX initializer (raw little-endian bytes, as ONNX's own tools write them).
onnx_ir::Tensor to_initializer(const std::string& name, const torch::Tensor& value) {
  const torch::Tensor v = value.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return {name, v.sizes().vec(),
          std::string(static_cast<const char*>(v.data_ptr()), v.numel() * sizeof(float))};
}

// Writes one traced graph's nodes into an ONNX graph: names of the values so far, constants (parameters,
// buffers, scalars, lists) read from the trace, initializers made from constant tensors on first use.
class GraphWriter {
 public:
  GraphWriter(onnx_ir::Graph& graph, std::string prefix, std::unordered_map<const void*, std::string> names)
      : graph_(graph), prefix_(std::move(prefix)), parameter_names_(std::move(names)) {}

  // The ONNX name of a tensor operand: a value an earlier node made, or a constant tensor (an initializer).
  std::string input(const Value* v) {
    if (auto it = names_.find(v); it != names_.end()) return it->second;
    if (auto it = transposed_.find(v); it != transposed_.end())
      return bind(v, initializer(it->second.t(), constant_name(it->second) + ".T"));
    const c10::IValue c = constant(v);
    if (c.isTensor()) return bind(v, initializer(c.toTensor(), constant_name(c.toTensor())));
    TORCH_INTERNAL_ASSERT(c.isDouble() || c.isInt(), "not a tensor operand: ", v->debugName());
    return bind(v, initializer(torch::tensor(static_cast<float>(c.toScalar().toDouble())), "scalar"));
  }
  // A constant operand (prim::Constant, or a list of constants); throws naming the operator otherwise.
  c10::IValue constant(const Value* v) const {
    const Node* n = v->node();
    if (n->kind() == c10::prim::Constant) return *torch::jit::toIValue(v);
    if (n->kind() == c10::prim::ListConstruct) {
      c10::impl::GenericList list(c10::AnyType::get());
      for (const Value* item : n->inputs()) list.push_back(constant(item));
      return list;
    }
    RANZCR_FAIL("cannot export to ONNX: ", n->kind().toQualString(),
                " gives an operand that must be constant");
  }
  std::vector<int64_t> ints(const Value* v) const {
    const c10::IValue list = constant(v);  // alive while its items are read
    std::vector<int64_t> out;
    for (const c10::IValue& i : list.toListRef()) out.push_back(i.toInt());
    return out;
  }
  // A 2-d operator's size argument: one value stands for both axes (torch::max_pool2d(x, 3, 2, 1)).
  std::vector<int64_t> ints2(const Value* v) const {
    std::vector<int64_t> out = ints(v);
    if (out.size() == 1) out.push_back(out[0]);
    return out;
  }
  bool is_none(const Value* v) const {
    return v->node()->kind() == c10::prim::Constant && constant(v).isNone();
  }
  torch::Tensor constant_tensor(const Value* v) const { return constant(v).toTensor(); }

  std::string bind(const Value* v, std::string name) { return names_[v] = std::move(name); }
  std::string output(const Value* v) { return bind(v, prefix_ + v->debugName()); }
  std::string fresh(const std::string& hint) { return prefix_ + hint + "." + std::to_string(counter_++); }
  void transpose_later(const Value* v, torch::Tensor t) { transposed_[v] = std::move(t); }
  const torch::Tensor* transposed(const Value* v) const {
    auto it = transposed_.find(v);
    return it == transposed_.end() ? nullptr : &it->second;
  }

  onnx_ir::Node& node(const std::string& op, const std::vector<std::string>& in,
                      const std::vector<std::string>& out) {
    graph_.nodes.push_back({op, in, out, {}});
    return graph_.nodes.back();
  }
  std::string initializer(const torch::Tensor& value, const std::string& hint) {
    const std::string name = fresh(hint);
    graph_.initializers.push_back(to_initializer(name, value));
    return name;
  }

 private:
  std::string constant_name(const torch::Tensor& t) const {
    auto it = parameter_names_.find(t.data_ptr());
    return it == parameter_names_.end() ? "constant" : it->second;
  }

  onnx_ir::Graph& graph_;
  std::string prefix_;
  std::unordered_map<const void*, std::string> parameter_names_;  // data pointer -> the module's name
  std::unordered_map<const Value*, std::string> names_;
  std::unordered_map<const Value*, torch::Tensor> transposed_;  // aten::t of a constant, folded
  int counter_ = 0;
};

using OpWriter = std::function<void(GraphWriter&, const Node*)>;

OpWriter unary(const char* op) {
  return [op](GraphWriter& w, const Node* n) { w.node(op, {w.input(n->input(0))}, {w.output(n->output())}); };
}

OpWriter binary(const char* op) {
  return [op](GraphWriter& w, const Node* n) {
    if (n->inputs().size() > 2)  // aten::add's alpha
      RANZCR_CHECK(w.constant(n->input(2)).toScalar().toDouble() == 1.0,
                   "cannot export to ONNX: ", n->kind().toQualString(),
                   " with alpha other than 1 is not mapped");
    w.node(op, {w.input(n->input(0)), w.input(n->input(1))}, {w.output(n->output())});
  };
}

// The input itself (dropout in eval mode, layout changes, detach).
void alias(GraphWriter& w, const Node* n) {
  w.bind(n->output(), w.input(n->input(0)));
}

void dropout(GraphWriter& w, const Node* n) {
  RANZCR_CHECK(!w.constant(n->input(2)).toBool(), "cannot export to ONNX: ", n->kind().toQualString(),
               " in training mode");
  alias(w, n);
}

// aten::_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
// and aten::conv2d(input, weight, bias, stride, padding, dilation, groups).
void convolution(GraphWriter& w, const Node* n) {
  const bool full = n->kind() == c10::Symbol::fromQualString("aten::_convolution");
  if (full)
    RANZCR_CHECK(!w.constant(n->input(6)).toBool(),
                 "cannot export to ONNX: transposed convolutions are not mapped");
  std::vector<std::string> in{w.input(n->input(0)), w.input(n->input(1))};
  if (!w.is_none(n->input(2))) in.push_back(w.input(n->input(2)));
  onnx_ir::Node& node = w.node("Conv", in, {w.output(n->output())});
  std::vector<int64_t> pads = w.ints2(n->input(4));
  pads.insert(pads.end(), pads.begin(), pads.end());
  node.attr("strides", w.ints2(n->input(3)));
  node.attr("pads", pads);
  node.attr("dilations", w.ints2(n->input(5)));
  node.attr("group", w.constant(n->input(full ? 8 : 6)).toInt());
}

// aten::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled).
void batch_norm(GraphWriter& w, const Node* n) {
  RANZCR_CHECK(!w.constant(n->input(5)).toBool(), "cannot export to ONNX: batch_norm in training mode");
  const int64_t c = w.constant_tensor(n->input(3)).numel();
  const std::string scale =
      w.is_none(n->input(1)) ? w.initializer(torch::ones({c}), "bn.ones") : w.input(n->input(1));
  const std::string bias =
      w.is_none(n->input(2)) ? w.initializer(torch::zeros({c}), "bn.zeros") : w.input(n->input(2));
  onnx_ir::Node& node = w.node(
      "BatchNormalization", {w.input(n->input(0)), scale, bias, w.input(n->input(3)), w.input(n->input(4))},
      {w.output(n->output())});
  node.attr_float("epsilon", w.constant(n->input(7)).toDouble());
}

// aten::max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode) and aten::avg_pool2d(input,
// kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override).
void pool(GraphWriter& w, const Node* n) {
  const bool max = n->kind() == c10::Symbol::fromQualString("aten::max_pool2d");
  const std::vector<int64_t> kernel = w.ints2(n->input(1));
  std::vector<int64_t> stride = w.ints2(n->input(2));
  if (stride.empty()) stride = kernel;  // PyTorch's default
  std::vector<int64_t> pads = w.ints2(n->input(3));
  pads.insert(pads.end(), pads.begin(), pads.end());
  onnx_ir::Node& node =
      w.node(max ? "MaxPool" : "AveragePool", {w.input(n->input(0))}, {w.output(n->output())});
  node.attr("kernel_shape", kernel);
  node.attr("strides", stride);
  node.attr("pads", pads);
  if (max) {
    node.attr("dilations", w.ints2(n->input(4)));
    node.attr("ceil_mode", static_cast<int64_t>(w.constant(n->input(5)).toBool()));
  } else {
    RANZCR_CHECK(w.is_none(n->input(6)),
                 "cannot export to ONNX: avg_pool2d with divisor_override is not mapped");
    node.attr("ceil_mode", static_cast<int64_t>(w.constant(n->input(4)).toBool()));
    node.attr("count_include_pad", static_cast<int64_t>(w.constant(n->input(5)).toBool()));
  }
}

void adaptive_avg_pool(GraphWriter& w, const Node* n) {
  const std::vector<int64_t> size = w.ints2(n->input(1));
  RANZCR_CHECK(size == std::vector<int64_t>({1, 1}), "cannot export to ONNX: adaptive_avg_pool2d to ",
               size[0], "x", size.back(), " is not mapped (only to 1x1)");
  w.node("GlobalAveragePool", {w.input(n->input(0))}, {w.output(n->output())});
}

void flatten(GraphWriter& w, const Node* n) {
  const int64_t start = w.constant(n->input(1)).toInt(), end = w.constant(n->input(2)).toInt();
  RANZCR_CHECK(start == 1 && end == -1, "cannot export to ONNX: flatten(", start, ", ", end,
               ") is not mapped (only flatten(1, -1))");
  w.node("Flatten", {w.input(n->input(0))}, {w.output(n->output())}).attr("axis", int64_t{1});
}

void silu(GraphWriter& w, const Node* n) {
  const std::string x = w.input(n->input(0)), s = w.fresh("sigmoid");
  w.node("Sigmoid", {x}, {s});
  w.node("Mul", {x, s}, {w.output(n->output())});
}

// aten::t: folded where it transposes a constant (a linear layer's weight), else a Transpose node.
void transpose(GraphWriter& w, const Node* n) {
  const Value* in = n->input(0);
  if (in->node()->kind() == c10::prim::Constant) {
    w.transpose_later(n->output(), w.constant_tensor(in));
    return;
  }
  w.node("Transpose", {w.input(in)}, {w.output(n->output())}).attr("perm", std::vector<int64_t>{1, 0});
}

// aten::addmm(bias, x, weight_t, beta, alpha) -> Gemm(x, weight, bias, transB) and aten::linear(x, weight,
// bias).
void gemm(GraphWriter& w, const Node* n) {
  const bool linear = n->kind() == c10::Symbol::fromQualString("aten::linear");
  const Value* x = n->input(linear ? 0 : 1);
  const Value* b = n->input(linear ? 1 : 2);
  const Value* c = n->input(linear ? 2 : 0);
  bool trans_b = linear;
  std::string b_name;
  if (const torch::Tensor* weight = w.transposed(b)) {  // x @ W.t(): W itself, transposed by Gemm
    b_name = w.initializer(*weight, "linear.weight");
    trans_b = true;
  } else {
    b_name = w.input(b);
  }
  std::vector<std::string> in{w.input(x), b_name};
  if (!w.is_none(c)) in.push_back(w.input(c));
  onnx_ir::Node& node = w.node("Gemm", in, {w.output(n->output())});
  node.attr("transB", static_cast<int64_t>(trans_b));
  if (!linear) {
    node.attr_float("beta", w.constant(n->input(3)).toScalar().toDouble());
    node.attr_float("alpha", w.constant(n->input(4)).toScalar().toDouble());
  }
}

// The one table from ATen operators to ONNX nodes.
const std::unordered_map<std::string, OpWriter>& op_table() {
  static const std::unordered_map<std::string, OpWriter> table{
      {"aten::_convolution", convolution},
      {"aten::conv2d", convolution},
      {"aten::batch_norm", batch_norm},
      {"aten::relu", unary("Relu")},
      {"aten::sigmoid", unary("Sigmoid")},
      {"aten::silu", silu},
      {"aten::max_pool2d", pool},
      {"aten::avg_pool2d", pool},
      {"aten::adaptive_avg_pool2d", adaptive_avg_pool},
      {"aten::flatten", flatten},
      {"aten::add", binary("Add")},
      {"aten::mul", binary("Mul")},
      {"aten::t", transpose},
      {"aten::addmm", gemm},
      {"aten::linear", gemm},
      {"aten::dropout", dropout},
      {"aten::feature_dropout", dropout},
      {"aten::contiguous", alias},
      {"aten::detach", alias},
  };
  return table;
}

std::string mapped_ops() {
  std::vector<std::string> names;
  for (const auto& kv : op_table()) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  return join(names, ", ");
}

// The module's names of its parameters and buffers, by data pointer (the trace's constants hold them).
std::unordered_map<const void*, std::string> tensor_names(Classifier& model) {
  std::unordered_map<const void*, std::string> names;
  for (const auto& kv : model.named_parameters()) names.emplace(kv.value().data_ptr(), kv.key());
  for (const auto& kv : model.named_buffers()) names.emplace(kv.value().data_ptr(), kv.key());
  return names;
}

// One member's nodes, reading `input`; returns the name of its logits.
std::string write_member(onnx_ir::Graph& graph, Classifier& model, const OnnxGraphSpec& spec,
                         const std::string& input, const std::string& prefix) {
  const std::shared_ptr<torch::jit::Graph> traced = trace_forward(model, spec);
  GraphWriter w(graph, prefix, tensor_names(model));
  TORCH_INTERNAL_ASSERT(traced->inputs().size() == 1 && traced->outputs().size() == 1);
  w.bind(traced->inputs()[0], input);
  for (const Node* n : traced->nodes()) {
    const std::string kind = n->kind().toQualString();
    if (kind == "prim::Constant" || kind == "prim::ListConstruct")
      continue;  // read by the operators using them
    auto op = op_table().find(kind);
    RANZCR_CHECK(op != op_table().end(), "cannot export to ONNX: the model uses ", kind,
                 ", which has no ONNX mapping (mapped: ", mapped_ops(), ")");
    op->second(w, n);
  }
  return w.input(traced->outputs()[0]);
}

// Per channel: the first member's mean and std as `channels` values.
std::vector<double> per_channel(const std::vector<double>& v, int channels, const char* what) {
  RANZCR_CHECK(v.size() == 1 || static_cast<int>(v.size()) == channels, "cannot export to ONNX: ", what,
               " has ", v.size(), " values for ", channels, " channels");
  return v.size() == 1 ? std::vector<double>(channels, v[0]) : v;
}

// Member k's input from the graph's (normalised with member 0's mean m0 and std s0): x * s0/sk + (m0-mk)/sk,
// or the graph's input itself where the normalisations agree.
std::string member_input(GraphWriter& w, const OnnxMember& first, const OnnxMember& member, int channels) {
  const auto m0 = per_channel(first.input_mean, channels, "model.input_mean");
  const auto s0 = per_channel(first.input_std, channels, "model.input_std");
  const auto mk = per_channel(member.input_mean, channels, "model.input_mean");
  const auto sk = per_channel(member.input_std, channels, "model.input_std");
  if (m0 == mk && s0 == sk) return kOnnxInput;
  torch::Tensor scale = torch::empty({1, channels, 1, 1}), shift = torch::empty({1, channels, 1, 1});
  for (int c = 0; c < channels; ++c) {
    scale[0][c][0][0] = s0[c] / sk[c];
    shift[0][c][0][0] = (m0[c] - mk[c]) / sk[c];
  }
  const std::string scaled = w.fresh("renormalise"), out = w.fresh("renormalised");
  w.node("Mul", {kOnnxInput, w.initializer(scale, "renormalise.scale")}, {scaled});
  w.node("Add", {scaled, w.initializer(shift, "renormalise.shift")}, {out});
  return out;
}

void write_graph(onnx_ir::Graph& graph, const std::vector<OnnxMember>& members, const OnnxGraphSpec& spec) {
  graph.name = "ranzcr";
  graph.doc = spec.doc;
  graph.metadata = spec.metadata;
  graph.inputs.push_back(
      {kOnnxInput,
       {-1, spec.in_channels, spec.image_size, spec.image_size},
       "images, [batch, channels, height, width] float32, normalised: (pixel / 255 - mean) / std"});
  GraphWriter top(graph, "", {});
  std::vector<std::string> probabilities;
  std::string logits;
  for (size_t k = 0; k < members.size(); ++k) {
    const std::string prefix = members.size() == 1 ? "" : "m" + std::to_string(k) + "/";
    const std::string input = member_input(top, members[0], members[k], spec.in_channels);
    logits = write_member(graph, *members[k].model, spec, input, prefix);
    if (members.size() > 1) {
      probabilities.push_back(top.fresh(prefix + "probabilities"));
      top.node("Sigmoid", {logits}, {probabilities.back()});
    }
  }
  const std::string classes_doc = "[batch, classes] float32, in the order of metadata label_names";
  if (members.size() == 1) {
    top.node("Identity", {logits}, {kOnnxLogits});
    top.node("Sigmoid", {kOnnxLogits}, {kOnnxProbabilities});
    graph.outputs.push_back({kOnnxLogits, {-1, spec.num_classes}, "logits " + classes_doc});
  } else {
    top.node("Mean", probabilities, {kOnnxProbabilities});
  }
  graph.outputs.push_back(
      {kOnnxProbabilities,
       {-1, spec.num_classes},
       "probabilities (sigmoid of the logits; the members' mean for an ensemble) " + classes_doc});
}

}  // namespace

std::string onnx_model_bytes(const std::vector<OnnxMember>& members, const OnnxGraphSpec& spec) {
  RANZCR_CHECK(!members.empty(), "cannot export to ONNX: no model");
  onnx_ir::Graph graph;
  write_graph(graph, members, spec);
  return onnx_ir::serialize_checked(graph);
}

bool onnx_export_available() {
  return true;
}

std::string onnx_library_version() {
  return onnx_ir::library_version();
}

std::map<std::string, std::string> onnx_metadata(const std::string& model_bytes) {
  return onnx_ir::metadata(model_bytes);
}

}  // namespace ranzcr
