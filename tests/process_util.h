// Helpers for tests that run the ranzcr binary as real processes: start, wait, find, signal.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "distributed/world.h"
#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr::test {

using Clock = std::chrono::steady_clock;

// Starts `program` (the ranzcr binary unless named; a bare name is found on PATH) with `args` and extra
// environment, output to `log`; returns its pid.
inline pid_t spawn(const std::vector<std::string>& args, const EnvMap& extra, const std::string& log,
                   const std::string& program = test::ranzcr_binary()) {
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  EnvMap env = current_environment();
  for (const auto& kv : extra) env[kv.first] = kv.second;
  std::vector<std::string> env_s;
  for (const auto& kv : env) env_s.push_back(kv.first + "=" + kv.second);
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  for (auto& e : env_s) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execvpe(argv[0], argv.data(), envp.data());  // a bare name is looked up on PATH
    ::_exit(127);
  }
  ::close(fd);
  return pid;
}

// Exit status (128 + signal when killed), or -1 after `timeout` seconds (the process is then killed).
inline int wait_exit(pid_t pid, double timeout) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  int status = 0;
  while (Clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

// Live processes (not zombies) whose command line mentions `marker`.
inline std::vector<pid_t> processes_mentioning(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = test::read_file(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    const std::string stat = test::read_file(e.path() / "stat");
    const size_t close = stat.rfind(')');
    const bool zombie = close != std::string::npos && stat.size() > close + 2 && stat[close + 2] == 'Z';
    if (cmd.find(marker) != std::string::npos && !zombie && std::stoi(name) != ::getpid())
      out.push_back(std::stoi(name));
  }
  return out;
}

/// Polls `ready` every 20 ms until it holds; false after `timeout` seconds.
template <class Predicate>
bool wait_until(Predicate ready, double timeout) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  while (Clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline bool wait_for_file(const std::string& path, double timeout) {
  return wait_until([&] { return std::filesystem::exists(path); }, timeout);
}

/// The value of `key` in the environment of process `pid` ("" when absent or unreadable).
inline std::string process_env(pid_t pid, const std::string& key) {
  const std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
  const std::string needle = key + "=";
  for (size_t at = 0; at < env.size();) {
    const size_t end = env.find('\0', at);
    const std::string entry = env.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (entry.rfind(needle, 0) == 0) return entry.substr(needle.size());
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

/// Waits until the file at `path` contains `text`; false after `timeout` seconds.
inline bool wait_for_text(const std::string& path, const std::string& text, double timeout) {
  return wait_until([&] { return read_file(path).find(text) != std::string::npos; }, timeout);
}

}  // namespace ranzcr::test
