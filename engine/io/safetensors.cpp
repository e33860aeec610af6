#include "engine/io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "engine/io/atomic_file.h"  // write_file_atomic

namespace ranzcr {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100 * 1000 * 1000;  // the reference implementation's limit

struct DtypeName {
  const char* name;
  torch::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool}};

const char* dtype_name(torch::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  throw std::runtime_error(std::string("safetensors: unsupported tensor dtype ") + c10::toString(t));
}

bool dtype_of(const std::string& name, torch::ScalarType* t) {
  for (const auto& d : kDtypes)
    if (name == d.name) {
      *t = d.type;
      return true;
    }
  return false;
}

bool little_endian_host() {
  const uint16_t one = 1;
  unsigned char first = 0;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

}  // namespace

std::string serialize_safetensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  if (!little_endian_host()) throw std::runtime_error("safetensors: only little-endian hosts are supported");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || header.contains(name))
      throw std::runtime_error("safetensors: tensor name '" + name + "' is reserved or repeated");
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const uint64_t bytes = t.numel() * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // pad to 8 bytes, as the reference writer does
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  out.reserve(out.size() + offset);
  for (const auto& t : data) out.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  return out;
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what) {
  auto fail = [&](const std::string& why) -> std::runtime_error {
    return std::runtime_error(what + ": not a valid safetensors file (" + why + ")");
  };
  if (!little_endian_host()) throw std::runtime_error("safetensors: only little-endian hosts are supported");
  if (bytes.size() < 8) throw fail("shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > kMaxHeaderBytes) throw fail("header length " + std::to_string(n) + " is implausible");
  if (n > bytes.size() - 8)
    throw fail("header length " + std::to_string(n) + " runs past the end of the file (" +
               std::to_string(bytes.size()) + " bytes): truncated?");
  const nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + n, nullptr,
                                                      /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) throw fail("the header is not a JSON object");
  const char* data = bytes.data() + 8 + n;
  const uint64_t data_size = bytes.size() - 8 - n;

  SafetensorsFile file;
  struct Span {
    uint64_t begin, end;
    std::string name;
    torch::Tensor tensor;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw fail("__metadata__ value of '" + k + "' is not a string");
        file.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string at = "tensor '" + name + "': ";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      throw fail(at + "needs dtype, shape and data_offsets");
    const auto& dt = entry["dtype"];
    torch::ScalarType type;
    if (!dt.is_string() || !dtype_of(dt.get<std::string>(), &type))
      throw fail(at + "unsupported dtype " + dt.dump() +
                 " (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
    std::vector<int64_t> shape;
    const auto& sh = entry["shape"];
    if (!sh.is_array()) throw fail(at + "shape is not a list");
    uint64_t numel = 1;
    for (const auto& d : sh) {
      if (!d.is_number_unsigned()) throw fail(at + "shape holds " + d.dump());
      const uint64_t v = d.get<uint64_t>();
      if (v != 0 && numel > (uint64_t{1} << 62) / v) throw fail(at + "shape is too large");
      numel *= v;
      shape.push_back(static_cast<int64_t>(v));
    }
    const auto& off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw fail(at + "data_offsets is not [begin, end]");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (end < begin || end > data_size)
      throw fail(at + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] lie outside the " + std::to_string(data_size) + " data bytes: truncated?");
    const uint64_t expected = numel * c10::elementSize(type);
    if (end - begin != expected)
      throw fail(at + std::to_string(end - begin) + " bytes for a " + dt.get<std::string>() + " tensor of " +
                 std::to_string(numel) + " elements (" + std::to_string(expected) + " bytes)");
    torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
    if (expected > 0) std::memcpy(t.data_ptr(), data + begin, expected);
    spans.push_back({begin, end, name, t});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  for (const auto& s : spans) {
    if (s.begin != pos)
      throw fail("tensor '" + s.name + "' starts at byte " + std::to_string(s.begin) + ", expected " +
                 std::to_string(pos) + " (overlapping or gapped data)");
    pos = s.end;
    file.tensors.emplace_back(s.name, s.tensor);
  }
  if (pos != data_size) throw fail(std::to_string(data_size - pos) + " bytes after the last tensor");
  return file;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char size_bytes[8] = {};
  if (!in.read(reinterpret_cast<char*>(size_bytes), 8)) return {};
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | size_bytes[i];
  if (n == 0 || n > kMaxHeaderBytes) return {};
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) return {};
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::map<std::string, std::string> metadata;
  if (header.is_discarded() || !header.is_object() || !header.contains("__metadata__") ||
      !header.at("__metadata__").is_object())
    return metadata;
  for (const auto& [k, v] : header.at("__metadata__").items())
    if (v.is_string()) metadata[k] = v.get<std::string>();
  return metadata;
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read " + path);
  return parse_safetensors(buf.str(), path);
}

}  // namespace ranzcr
