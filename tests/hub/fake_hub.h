// The local Hub of the tests: tests/hub/fake_hub.py started as a real process on 127.0.0.1, its repositories
// made with tests/hub/make_repo.py, its controls and request counts over HTTP.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <mutex>
#include <string>

#include "tests/build_paths.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr::test {

/// Whether `s` holds `part`.
inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// The project's .venv python when it exists (torch, timm, huggingface_hub), else "".
inline std::string venv_python() {
  const std::string venv = std::string(test::source_dir()) + "/.venv/bin/python";
  return std::filesystem::exists(venv) ? venv : "";
}

/// Whether `python` imports every module of `modules` (space-separated). Asked once per process for each pair
/// (importing torch takes seconds, and a suite asks before each weights file it makes).
inline bool python_has(const std::string& python, const std::string& modules) {
  if (python.empty()) return false;
  static std::mutex mutex;
  static std::map<std::string, bool> known;
  const std::lock_guard<std::mutex> lock(mutex);
  const std::string key = python + "\n" + modules;
  const auto found = known.find(key);
  if (found != known.end()) return found->second;
  std::string imports;
  for (size_t b = 0, e; b < modules.size(); b = e + 1) {
    e = modules.find(' ', b);
    if (e == std::string::npos) e = modules.size();
    imports += "import " + modules.substr(b, e - b) + ";";
  }
  const bool has = run_command(python + " -W ignore -c '" + imports + "'").status == 0;
  known[key] = has;
  return has;
}

class FakeHub {
 public:
  /// Starts the server on a free port of 127.0.0.1 over the (empty) repository folder root().
  explicit FakeHub(const std::string& token = "hf_test_token") {
    std::filesystem::create_directories(dir_ / "repos");
    const std::string port_file = dir_ / "port";
    pid_ =
        spawn({script("fake_hub.py"), "--root", dir_ / "repos", "--port-file", port_file, "--token", token},
              {}, dir_ / "server.log", "python3");
    if (!wait_for_file(port_file, 20))
      ADD_FAILURE() << "fake hub did not start: " << read_file(dir_ / "server.log");
    port_ = read_file(port_file);
  }
  ~FakeHub() { stop(); }
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    wait_exit(pid_, 10);
    pid_ = -1;
  }
  std::string endpoint() const { return "http://127.0.0.1:" + port_; }
  std::string root() const { return dir_ / "repos"; }

  /// Puts files (NAME=SOURCE) into repository `repo` (a new commit when the bytes differ); returns the
  /// commit.
  std::string add_repo(const std::string& repo, const std::vector<std::string>& files, bool gated = false) {
    std::string cmd = "python3 '" + script("make_repo.py") + "' --root '" + root() + "' --repo " + repo;
    for (const auto& f : files) cmd += " --file '" + f + "'";
    if (gated) cmd += " --gated";
    return last_line(run_command(cmd));
  }
  /// Real timm weights of `model` (with timm's config.json) as repository `repo`; "" when the .venv python
  /// cannot make them (no torch, timm, safetensors or huggingface_hub).
  std::string add_timm_repo(const std::string& repo, const std::string& model, int seed = 0) {
    const std::string python = venv_python();
    if (!python_has(python, "torch safetensors huggingface_hub")) return "";
    const CommandResult r =
        run_command(python + " -W ignore '" + script("make_repo.py") + "' --root '" + root() + "' --repo " +
                    repo + " --timm-model " + model + " --seed " + std::to_string(seed));
    return r.status == 0 ? last_line(r) : "";
  }
  /// Points `repo`'s main back at `commit`, one of its revisions already made (as a push of those files
  /// would).
  void move_main(const std::string& repo, const std::string& commit) {
    const std::string repo_dir = root() + "/" + repo;
    ASSERT_TRUE(std::filesystem::is_directory(repo_dir + "/revisions/" + commit))
        << repo << " has no " << commit;
    write_file(repo_dir + "/refs/main", commit);
  }
  /// POST /_control with `json` (see fake_hub.py).
  void control(const std::string& json) {
    const CommandResult r = run_command(
        "python3 -c 'import sys, urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1], "
        "data=sys.argv[2].encode(), method=\"POST\"), timeout=10).read()' " +
        endpoint() + "/_control '" + json + "'");
    EXPECT_EQ(r.status, 0) << r.output;
  }
  /// GET /_stats: {"head", "resolve_get", "cdn_get", "cdn_ranges", "auth"}.
  nlohmann::json stats() {
    const CommandResult r = run_command(
        "python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], "
        "timeout=10).read().decode())' " +
        endpoint() + "/_stats");
    return nlohmann::json::parse(last_line(r), nullptr, false);
  }
  /// The environment that points a process at this Hub with its own cache folder `cache`.
  EnvMap env(const std::string& cache) const {
    return {{"HF_ENDPOINT", endpoint()}, {"HF_HUB_CACHE", cache}, {"HF_TOKEN", ""}, {"HF_HUB_OFFLINE", "0"}};
  }

  static std::string script(const std::string& name) {
    return std::string(test::source_dir()) + "/tests/hub/" + name;
  }

 private:
  static std::string last_line(const CommandResult& r) {
    std::string s = r.output;
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s.substr(s.find_last_of('\n') == std::string::npos ? 0 : s.find_last_of('\n') + 1);
  }
  TempDir dir_;
  pid_t pid_ = -1;
  std::string port_;
};

/// Runs the ranzcr binary with `args` and extra environment `env` to completion; its status and output.
inline CommandResult run_ranzcr(const std::vector<std::string>& args, const EnvMap& env,
                                const std::string& log, double timeout = 600) {
  CommandResult r;
  r.status = wait_exit(spawn(args, env, log), timeout);
  r.output = read_file(log);
  return r;
}

/// `bytes` pseudo-random bytes (a fixed generator: the same bytes every run) in the file `path`.
inline void write_random_file(const std::string& path, size_t bytes, uint32_t seed = 1) {
  std::string s(bytes, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x & 0xff);
  }
  write_file(path, s);
}

}  // namespace ranzcr::test
