// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian header length
// N, N bytes of JSON ({"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"key": "value"}}), then the tensors' raw little-endian bytes, offsets relative to the
// end of the header. The format timm and the Hugging Face hub use for weights.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ranzcr {

/// Tensors in file order (by data offset), with the file's string metadata.
struct SafetensorsFile {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // CPU, contiguous, the file's dtypes
  std::map<std::string, std::string> metadata;                 // "__metadata__"
};

/// Supported dtypes: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL.

/// The bytes of a safetensors file holding `tensors` in the given order (any device, any layout; written
/// as contiguous CPU data) and `metadata`. Throws on an unsupported dtype or a repeated name.
std::string serialize_safetensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

/// Parses the bytes of a safetensors file; `what` names it in errors. A truncated or corrupt file throws
/// std::runtime_error with one line naming `what` and the problem.
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what);

/// Writes `path` atomically (write_file_atomic: temporary file, fsync, rename).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads `path`; a missing, truncated or corrupt file throws a one-line std::runtime_error.
SafetensorsFile load_safetensors(const std::string& path);

/// The "__metadata__" of `path`, reading only its header; empty when the file is not a readable
/// safetensors file or has none (load_safetensors tells what is wrong with it).
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);

}  // namespace ranzcr
