// Helpers shared by the tests: temporary folders, small data sets, running the CLI.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/synth.h"
#include "tests/build_paths.h"

/// Skips a test whose reference (a Python package, torchrun, network namespaces) is missing here, with
/// `message` (stream operands: "no pydicom: " << output); under CI (CI=true) fails instead, so that a green
/// CI has run every comparison with a reference.
#define RANZCR_SKIP_WITHOUT_REFERENCE(message)                                                          \
  do {                                                                                                  \
    if (::ranzcr::test::in_ci()) {                                                                      \
      GTEST_FAIL() << "CI=true and a reference is missing (scripts/setup.sh installs it): " << message; \
    } else {                                                                                            \
      GTEST_SKIP() << message;                                                                          \
    }                                                                                                   \
  } while (0)

namespace ranzcr::test {

/// True under CI (CI=true, as .ci/run sets it).
/// The python that runs a test's Python reference: `env_override`'s value when that variable is set, else the
/// project's .venv python (scripts/setup.sh puts the reference packages there), else python3.
inline std::string python(const char* env_override = nullptr) {
  if (const char* env = env_override ? std::getenv(env_override) : nullptr) return env;
  const std::string venv = std::string(test::source_dir()) + "/.venv/bin/python";
  return std::filesystem::exists(venv) ? venv : "python3";
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

/// A fresh temporary folder, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "ranzcr_test_XXXXXX").string();
    path_ = mkdtemp(templ.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A small synthetic data set (Kaggle layout) in `dir`.
inline void make_dataset(const std::string& dir, int num_images = 60, int image_size = 96,
                         int num_test = 10) {
  SynthConfig c;
  c.num_images = num_images;
  c.num_test_images = num_test;
  c.image_size = image_size;
  c.seed = 3;
  generate_synthetic(dir, c, 2);
}

/// Writes the config file of a CLI test to `path`: tiny_cnn on the data set in `data_root`, on the CPU
/// (train.device cpu: these tests mean CPU ranks over Gloo, also on a GPU host), plus `keys` (dotted key
/// -> YAML value, e.g. {"train.epochs", "2"}), which override those.
inline void write_config(const std::string& path, const std::string& data_root,
                         const std::vector<std::pair<std::string, std::string>>& keys) {
  std::vector<std::pair<std::string, std::string>> all = {
      {"data.root", data_root}, {"model.name", "tiny_cnn"}, {"train.device", "cpu"}};
  all.insert(all.end(), keys.begin(), keys.end());
  std::map<std::string, std::map<std::string, std::string>> sections;  // section -> rest of key -> value
  for (const auto& [key, value] : all) {
    const size_t dot = key.find('.');
    sections[key.substr(0, dot)][key.substr(dot + 1)] = value;
  }
  std::string yaml;
  for (const auto& [section, entries] : sections) {
    yaml += section + ":\n";
    for (const auto& [name, value] : entries) yaml += "  " + name + ": " + value + "\n";
  }
  write_file(path, yaml);
}

/// What a CLI suite runs on: a synthetic data set of `images` training images (`test_images` test ones)
/// of `image_size` pixels, and the config keys written with write_config.
struct CliSetup {
  int images = 80, image_size = 64, test_images = 0;
  std::vector<std::pair<std::string, std::string>> keys;
};

/// A suite that runs the ranzcr binary on one data set and config file made once for the suite in a
/// temporary folder; `Suite::setup()` (a static CliSetup) says which.
template <class Suite>
class CliSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const CliSetup s = Suite::setup();
    make_dataset(*dir_ / "ds", s.images, s.image_size, s.test_images);
    write_config(*dir_ / "cfg.yaml", *dir_ / "ds", s.keys);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string bin() { return test::ranzcr_binary(); }
  static std::string cfg() { return *dir_ / "cfg.yaml"; }
  static inline TempDir* dir_ = nullptr;
};

/// The lines of a run folder's metrics.jsonl.
inline std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::vector<nlohmann::json> lines;
  std::stringstream ss(read_file(run_dir + "/metrics.jsonl"));
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

/// The epochs a run folder's metrics.jsonl reports, in order (a resumed run: only those it trained).
inline std::vector<int64_t> trained_epochs(const std::string& run_dir) {
  std::vector<int64_t> epochs;
  for (const auto& m : read_metrics(run_dir))
    if (m.contains("epoch")) epochs.push_back(m["epoch"].get<int64_t>());
  return epochs;
}

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

/// Runs `command` with a shell, capturing stdout and stderr.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

/// The lines of `output` that start with "error: ".
inline std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::stringstream ss(output);
  for (std::string line; std::getline(ss, line);)
    if (line.rfind("error: ", 0) == 0) lines.push_back(line);
  return lines;
}

}  // namespace ranzcr::test
