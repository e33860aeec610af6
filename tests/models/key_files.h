// The state-dict key lists under tests/models/ (timm_keys/, torchvision_keys/): one line per tensor,
// "<key> <dtype> <d0,d1,...>", '#' comment lines; written by scripts/timm/*.py from the libraries' own code.
#pragma once

#include <gtest/gtest.h>
#include <torch/types.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
#include "tests/build_paths.h"

namespace ranzcr::test {

struct KeyEntry {
  std::string dtype;  // torch's name: float32, int64
  std::vector<int64_t> shape;
  bool operator==(const KeyEntry& o) const { return dtype == o.dtype && shape == o.shape; }
};

/// The entries of tests/models/`file` (e.g. "timm_keys/resnet18.txt") in file order.
inline std::vector<std::pair<std::string, KeyEntry>> read_key_file(const std::string& file) {
  const std::string path = std::string(test::source_dir()) + "/tests/models/" + file;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<std::pair<std::string, KeyEntry>> keys;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string key, shape;
    KeyEntry e;
    fields >> key >> e.dtype >> shape;
    std::istringstream dims(shape);
    for (std::string d; std::getline(dims, d, ',');) e.shape.push_back(std::stoll(d));
    keys.emplace_back(key, e);
  }
  return keys;
}

/// The entry of a tensor: its dtype as torch names it and its shape.
inline KeyEntry key_entry(const torch::Tensor& t) {
  const std::string dtype = t.scalar_type() == torch::kFloat  ? "float32"
                            : t.scalar_type() == torch::kLong ? "int64"
                                                              : std::string(c10::toString(t.scalar_type()));
  return KeyEntry{dtype, t.sizes().vec()};
}

}  // namespace ranzcr::test
