#include "engine/io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/durable_file.h"  // write_file_atomic

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
  RANZCR_FAIL("safetensors: unsupported tensor dtype ", c10::toString(t));
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

// RANZCR_CHECK for a corrupt file: "<what>: not a valid safetensors file (<why...>)" unless `cond`.
#define CHECK_SAFETENSORS(cond, what, ...) \
  RANZCR_CHECK(cond, what, ": not a valid safetensors file (", __VA_ARGS__, ")")

// A JSON value for an error message: a scalar as JSON (a string cut to 40 characters), a container by its
// type alone (dumping it would recurse as deep as it nests).
std::string brief(const nlohmann::json& v) {
  if (v.is_structured()) return std::string("an ") + v.type_name();
  std::string text = v.dump();
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

uint64_t little_endian_u64(const char* p) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return n;
}

/// The parts of a safetensors file: its JSON header and the data bytes after it.
struct Layout {
  nlohmann::json header;
  const char* data;
  uint64_t data_size;
};

/// Reads the 8-byte header length and parses the JSON header after it.
Layout split_header(const std::string& bytes, const std::string& what) {
  CHECK_SAFETENSORS(bytes.size() >= 8, what, "shorter than its 8-byte header length");
  const uint64_t n = little_endian_u64(bytes.data());
  CHECK_SAFETENSORS(n <= kMaxHeaderBytes, what, "header length ", n, " is implausible");
  CHECK_SAFETENSORS(n <= bytes.size() - 8, what, "header length ", n, " runs past the end of the file (",
                    bytes.size(), " bytes): truncated?");
  Layout layout;
  layout.header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + n, nullptr,
                                        /*allow_exceptions=*/false);
  CHECK_SAFETENSORS(!layout.header.is_discarded() && layout.header.is_object(), what,
                    "the header is not a JSON object");
  layout.data = bytes.data() + 8 + n;
  layout.data_size = bytes.size() - 8 - n;
  return layout;
}

/// The "__metadata__" entry: an object of strings.
std::map<std::string, std::string> parse_metadata(const nlohmann::json& entry, const std::string& what) {
  CHECK_SAFETENSORS(entry.is_object(), what, "__metadata__ is not an object");
  std::map<std::string, std::string> metadata;
  for (const auto& [k, v] : entry.items()) {
    CHECK_SAFETENSORS(v.is_string(), what, "__metadata__ value of '", k, "' is not a string");
    metadata[k] = v.get<std::string>();
  }
  return metadata;
}

torch::ScalarType parse_dtype(const nlohmann::json& dtype, const std::string& name, const std::string& what) {
  torch::ScalarType type = torch::kFloat32;
  CHECK_SAFETENSORS(dtype.is_string() && dtype_of(dtype.get<std::string>(), &type), what, "tensor '", name,
                    "': unsupported dtype ", brief(dtype),
                    " (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  return type;
}

/// A list of non-negative sizes; `numel` gets their product, which must stay within 2^62.
std::vector<int64_t> parse_shape(const nlohmann::json& shape, const std::string& name,
                                 const std::string& what, uint64_t* numel) {
  CHECK_SAFETENSORS(shape.is_array(), what, "tensor '", name, "': shape is not a list");
  std::vector<int64_t> sizes;
  *numel = 1;
  for (const auto& d : shape) {
    CHECK_SAFETENSORS(d.is_number_unsigned(), what, "tensor '", name, "': shape holds ", brief(d));
    const uint64_t v = d.get<uint64_t>();
    CHECK_SAFETENSORS(v == 0 || *numel <= (uint64_t{1} << 62) / v, what, "tensor '", name,
                      "': shape is too large");
    *numel *= v;
    sizes.push_back(static_cast<int64_t>(v));
  }
  return sizes;
}

/// [begin, end] within the data bytes.
std::pair<uint64_t, uint64_t> parse_offsets(const nlohmann::json& offsets, const std::string& name,
                                            uint64_t data_size, const std::string& what) {
  CHECK_SAFETENSORS(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                        offsets[1].is_number_unsigned(),
                    what, "tensor '", name, "': data_offsets is not [begin, end]");
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  CHECK_SAFETENSORS(begin <= end && end <= data_size, what, "tensor '", name, "': data_offsets [", begin,
                    ", ", end, "] lie outside the ", data_size, " data bytes: truncated?");
  return {begin, end};
}

/// A tensor and the data bytes it was read from.
struct Span {
  uint64_t begin, end;
  std::string name;
  torch::Tensor tensor;
};

/// One tensor entry of the header ({"dtype", "shape", "data_offsets"}), read from the data bytes.
Span parse_tensor(const std::string& name, const nlohmann::json& entry, const Layout& layout,
                  const std::string& what) {
  CHECK_SAFETENSORS(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                        entry.contains("data_offsets"),
                    what, "tensor '", name, "': needs dtype, shape and data_offsets");
  const torch::ScalarType type = parse_dtype(entry["dtype"], name, what);
  uint64_t numel = 0;
  const std::vector<int64_t> shape = parse_shape(entry["shape"], name, what, &numel);
  const auto [begin, end] = parse_offsets(entry["data_offsets"], name, layout.data_size, what);
  // numel may be up to 2^62: the byte count must not wrap (it is then compared with the data, so nothing
  // larger than the file is ever allocated).
  CHECK_SAFETENSORS(numel <= std::numeric_limits<uint64_t>::max() / c10::elementSize(type), what, "tensor '",
                    name, "': a ", dtype_name(type), " tensor of ", numel, " elements is too large");
  const uint64_t expected = numel * c10::elementSize(type);
  CHECK_SAFETENSORS(end - begin == expected, what, "tensor '", name, "': ", end - begin, " bytes for a ",
                    dtype_name(type), " tensor of ", numel, " elements (", expected, " bytes)");
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
  if (expected > 0) std::memcpy(t.data_ptr(), layout.data + begin, expected);
  return {begin, end, name, t};
}

/// The tensors by data offset; their bytes must tile the data exactly (no overlap, gap or trailing bytes).
std::vector<std::pair<std::string, torch::Tensor>> in_file_order(std::vector<Span> spans, uint64_t data_size,
                                                                 const std::string& what) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  uint64_t pos = 0;
  for (const auto& s : spans) {
    CHECK_SAFETENSORS(s.begin == pos, what, "tensor '", s.name, "' starts at byte ", s.begin, ", expected ",
                      pos, " (overlapping or gapped data)");
    pos = s.end;
    tensors.emplace_back(s.name, s.tensor);
  }
  CHECK_SAFETENSORS(pos == data_size, what, data_size - pos, " bytes after the last tensor");
  return tensors;
}

}  // namespace

std::string serialize_safetensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  RANZCR_CHECK(little_endian_host(), "safetensors: only little-endian hosts are supported");
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    RANZCR_CHECK(name != "__metadata__" && !header.contains(name), "safetensors: tensor name '", name,
                 "' is reserved or repeated");
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
  RANZCR_CHECK(little_endian_host(), "safetensors: only little-endian hosts are supported");
  const Layout layout = split_header(bytes, what);
  SafetensorsFile file;
  std::vector<Span> spans;
  for (const auto& [name, entry] : layout.header.items()) {  // by name (nlohmann::json sorts its keys)
    if (name == "__metadata__")
      file.metadata = parse_metadata(entry, what);
    else
      spans.push_back(parse_tensor(name, entry, layout, what));
  }
  file.tensors = in_file_order(std::move(spans), layout.data_size, what);
  return file;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const std::streamoff file_size = in ? static_cast<std::streamoff>(in.tellg()) : -1;
  char size_bytes[8] = {};
  if (file_size < 8 || !in.seekg(0) || !in.read(size_bytes, 8)) return {};
  const uint64_t n = little_endian_u64(size_bytes);
  // Nothing is allocated for a header the file cannot hold.
  if (n == 0 || n > kMaxHeaderBytes || n > static_cast<uint64_t>(file_size - 8)) return {};
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
  RANZCR_CHECK(in, "cannot open ", path);
  std::ostringstream buf;
  buf << in.rdbuf();
  RANZCR_CHECK(!in.bad(), "cannot read ", path);
  return parse_safetensors(buf.str(), path);
}

}  // namespace ranzcr
