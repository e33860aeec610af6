#include "engine/serve/inference_protocol.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>

#include "core/digits.h"

namespace ranzcr {
namespace {

using json = nlohmann::json;

[[noreturn]] void refuse(const std::string& message) {
  throw ProtocolError(400, message);
}

// The object member `key` of `j` when it is an object holding it, else nullptr.
const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

// A boolean parameter of `parameters` (false when absent); anything else than a boolean is refused.
bool bool_parameter(const json* parameters, const char* key) {
  const json* v = parameters ? member(*parameters, key) : nullptr;
  if (!v) return false;
  if (!v->is_boolean()) refuse(std::string("parameter ") + key + " must be true or false");
  return v->get<bool>();
}

// The element count of a shape: non-negative integers whose product fits.
int64_t element_count(const json* shape) {
  if (!shape || !shape->is_array() || shape->empty())
    refuse("input 'image' needs a shape: a list of non-negative integers, e.g. [1]");
  int64_t n = 1;
  for (const json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      refuse("input 'image' has a bad shape: a list of non-negative integers, e.g. [1]");
    const int64_t v = d.get<int64_t>();
    if (v != 0 && n > std::numeric_limits<int32_t>::max() / v) refuse("input 'image' has too many elements");
    n *= v;
  }
  return n;
}

// BYTES elements in the binary form: each a 4-byte little-endian length, then the bytes.
std::vector<std::string> binary_bytes_elements(const std::string& blob) {
  std::vector<std::string> out;
  for (size_t at = 0; at < blob.size();) {
    if (blob.size() - at < 4) refuse("input 'image': its binary data ends inside an element's length");
    const auto* p = reinterpret_cast<const unsigned char*>(blob.data() + at);
    const uint64_t len = uint64_t{p[0]} | uint64_t{p[1]} << 8 | uint64_t{p[2]} << 16 | uint64_t{p[3]} << 24;
    at += 4;
    if (len > blob.size() - at) refuse("input 'image': an element is longer than its binary data");
    out.push_back(blob.substr(at, static_cast<size_t>(len)));
    at += static_cast<size_t>(len);
  }
  return out;
}

// BYTES elements in JSON: strings, nested in lists as the shape says (flattened here), at most kMaxDepth deep
// (the recursion must not follow a client's nesting down the stack).
constexpr int kMaxDepth = 8;

void json_bytes_elements(const json& data, bool base64, std::vector<std::string>& out, int depth = 0) {
  if (data.is_array()) {
    if (depth >= kMaxDepth)
      refuse("input 'image': \"data\" is nested deeper than " + std::to_string(kMaxDepth));
    for (const json& d : data) json_bytes_elements(d, base64, out, depth + 1);
    return;
  }
  if (!data.is_string()) refuse("input 'image': every element of \"data\" must be a string");
  const std::string& s = data.get_ref<const std::string&>();
  if (!base64) {
    out.push_back(s);
    return;
  }
  std::string decoded;
  if (!base64_decode(s, decoded))
    refuse("input 'image': an element is not base64 (its content_type says so)");
  out.push_back(std::move(decoded));
}

// The images of the one input, from the JSON and the binary data that follows it.
std::vector<std::string> read_images(const json& input, const std::string& binary) {
  const json* name = member(input, "name");
  if (!name || !name->is_string()) refuse("every input needs a \"name\"");
  if (name->get<std::string>() != "image")
    refuse("unknown input '" + name->get<std::string>() + "': the model's input is 'image'");
  const json* datatype = member(input, "datatype");
  if (!datatype || !datatype->is_string() || datatype->get<std::string>() != "BYTES")
    refuse("input 'image' must have datatype BYTES (each element one image file)");
  const int64_t n = element_count(member(input, "shape"));
  const json* parameters = member(input, "parameters");
  const json* size = parameters ? member(*parameters, "binary_data_size") : nullptr;
  std::vector<std::string> images;
  if (size) {
    if (!size->is_number_unsigned() || size->get<uint64_t>() != binary.size())
      refuse("input 'image': binary_data_size does not match the binary data after the JSON header");
    if (member(input, "data")) refuse("input 'image' has both \"data\" and binary_data_size");
    images = binary_bytes_elements(binary);
  } else {
    if (!binary.empty()) refuse("binary data after the JSON header, but no input has binary_data_size");
    const json* data = member(input, "data");
    if (!data) refuse("input 'image' has no \"data\" and no binary_data_size");
    const json* type = parameters ? member(*parameters, "content_type") : nullptr;
    if (type && (!type->is_string() || type->get<std::string>() != "base64"))
      refuse("input 'image': the only content_type understood is \"base64\"");
    json_bytes_elements(*data, type != nullptr, images);
  }
  if (static_cast<int64_t>(images.size()) != n)
    refuse("input 'image' has " + std::to_string(images.size()) + " elements, its shape says " +
           std::to_string(n));
  if (images.empty()) refuse("input 'image' has no elements: send one image file per element");
  return images;
}

// The outputs asked for: every output (binary when the request says binary_data_output) when none is named.
std::vector<RequestedOutput> read_outputs(const json& request, const std::vector<std::string>& output_names) {
  const bool binary_default = bool_parameter(member(request, "parameters"), "binary_data_output");
  std::vector<RequestedOutput> out;
  const json* outputs = member(request, "outputs");
  if (!outputs) {
    for (const std::string& name : output_names) out.push_back({name, binary_default});
    return out;
  }
  if (!outputs->is_array()) refuse("\"outputs\" must be a list");
  for (const json& o : *outputs) {
    const json* name = member(o, "name");
    if (!name || !name->is_string()) refuse("every requested output needs a \"name\"");
    const std::string n = name->get<std::string>();
    if (std::find(output_names.begin(), output_names.end(), n) == output_names.end()) {
      std::string known;
      for (const std::string& k : output_names) known += (known.empty() ? "'" : ", '") + k + "'";
      refuse("unknown output '" + n + "': the model's outputs are " + known);
    }
    const json* parameters = member(o, "parameters");
    if (parameters && member(*parameters, "classification"))
      refuse("output '" + n + "': the classification extension is not supported");
    const bool binary = parameters && member(*parameters, "binary_data")
                            ? bool_parameter(parameters, "binary_data")
                            : binary_default;
    out.push_back({n, binary});
  }
  return out;
}

// The JSON header and the binary data after it, split by the Inference-Header-Content-Length header.
void split_body(const std::string& body, const std::string& header_length, std::string& head,
                std::string& binary) {
  if (header_length.empty()) {
    head = body;
    return;
  }
  const std::optional<int64_t> n = parse_digits64(header_length, 18);
  if (!n || static_cast<uint64_t>(*n) > body.size() || *n == 0)
    refuse("Inference-Header-Content-Length must be the JSON header's length, within the body (" +
           std::to_string(body.size()) + " bytes)");
  head = body.substr(0, static_cast<size_t>(*n));
  binary = body.substr(static_cast<size_t>(*n));
}

// Little-endian bytes of the tensor's values (the binary-data extension).
std::string raw_bytes(const OutputTensor& t) {
  std::string out;
  const auto append = [&out](const void* p, size_t n) {
    const auto* b = static_cast<const char*>(p);
    out.append(b, n);  // this build's targets are little-endian (x86-64, aarch64)
  };
  if (t.datatype == "FP64")
    append(t.fp64.data(), t.fp64.size() * sizeof(double));
  else
    append(t.int32.data(), t.int32.size() * sizeof(int32_t));
  return out;
}

}  // namespace

bool base64_decode(const std::string& text, std::string& out) {
  static const std::array<int8_t, 256> kValue = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i)
      v[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return v;
  }();
  out.clear();
  out.reserve(text.size() / 4 * 3 + 3);
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=' && text.size() - end < 2) --end;
  if (end % 4 == 1 || (text.size() != end && text.size() % 4 != 0)) return false;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < end; ++i) {
    const int v = kValue[static_cast<unsigned char>(text[i])];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return true;
}

InferRequest parse_infer_request(const std::string& body, const std::string& header_length,
                                 const std::vector<std::string>& output_names) {
  std::string head, binary;
  split_body(body, header_length, head, binary);
  json request;
  try {
    request = json::parse(head);
  } catch (const json::parse_error& e) {
    refuse("the inference request is not valid JSON (at byte " + std::to_string(e.byte) + ")");
  } catch (const json::exception&) {  // a number out of range, ...: the library's words stay out
    refuse("the inference request is not JSON this server can read (a number out of range?)");
  }
  if (!request.is_object()) refuse("the inference request must be a JSON object");
  InferRequest out;
  if (const json* id = member(request, "id")) {
    if (!id->is_string()) refuse("\"id\" must be a string");
    out.id = id->get<std::string>();
  }
  const json* inputs = member(request, "inputs");
  if (!inputs || !inputs->is_array() || inputs->size() != 1)
    refuse("\"inputs\" must be a list of one input, 'image' (BYTES: one image file per element)");
  out.images = read_images(inputs->front(), binary);
  out.outputs = read_outputs(request, output_names);
  return out;
}

InferAnswer write_infer_answer(const std::string& model_name, const std::string& model_version,
                               const InferRequest& request, const std::vector<OutputTensor>& tensors) {
  json head = {{"model_name", model_name}, {"model_version", model_version}};
  if (!request.id.empty()) head["id"] = request.id;
  head["outputs"] = json::array();
  std::string binary;
  for (const RequestedOutput& wanted : request.outputs) {
    const auto t = std::find_if(tensors.begin(), tensors.end(),
                                [&](const OutputTensor& x) { return x.name == wanted.name; });
    if (t == tensors.end()) continue;  // asked for, not produced (parse_infer_request checked the names)
    json o = {{"name", t->name}, {"datatype", t->datatype}, {"shape", {t->rows, t->cols}}};
    if (wanted.binary) {
      const std::string bytes = raw_bytes(*t);
      o["parameters"] = {{"binary_data_size", bytes.size()}};
      binary += bytes;
    } else if (t->datatype == "FP64") {
      o["data"] = t->fp64;
    } else {
      o["data"] = t->int32;
    }
    head["outputs"].push_back(std::move(o));
  }
  InferAnswer answer;
  answer.body = head.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!binary.empty() ||
      std::any_of(request.outputs.begin(), request.outputs.end(), [](const auto& o) { return o.binary; })) {
    answer.header_length = static_cast<int64_t>(answer.body.size());
    answer.body += binary;
  }
  return answer;
}

}  // namespace ranzcr
