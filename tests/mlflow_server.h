// A real MLflow tracking server for the tests: `python -m mlflow server` of the project's .venv on a free
// port of 127.0.0.1, its SQLite store and proxied artifacts in a temporary folder; stopped (its whole process
// group) and started again on the same port and store; and MLflow's own Python client run against it
// (tests/tracking/mlflow_check.py).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <cerrno>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/http.h"
#include "tests/build_paths.h"
#include "tests/hub/fake_hub.h"
#include "tests/process_util.h"
#include "tests/python_worker.h"
#include "tests/test_util.h"

extern char** environ;

namespace ranzcr::test {

/// Whether the .venv has MLflow (scripts/setup.sh installs it).
inline bool mlflow_available() {
  return python_has(venv_python(), "mlflow");
}

/// A free TCP port of 127.0.0.1 (free when asked: another process could take it before it is used).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t n = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

class MlflowTestServer {
 public:
  /// Starts the server (ADD_FAILURE with its log when it does not answer GET /health within 90 s).
  MlflowTestServer() : port_(free_port()) { start(); }
  ~MlflowTestServer() { stop(); }
  MlflowTestServer(const MlflowTestServer&) = delete;
  MlflowTestServer& operator=(const MlflowTestServer&) = delete;

  std::string uri() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const TempDir& dir() const { return dir_; }
  std::string log() const { return read_file(dir_ / "server.log"); }
  bool running() const { return pid_ > 0; }

  /// Starts it (again: the same port, store and artifacts) and waits until it answers.
  void start() {
    if (pid_ > 0) return;
    const std::vector<std::string> args = {venv_python(),
                                           "-m",
                                           "mlflow",
                                           "server",
                                           "--host",
                                           "127.0.0.1",
                                           "--port",
                                           std::to_string(port_),
                                           "--backend-store-uri",
                                           "sqlite:///" + (dir_ / "mlflow.db"),
                                           "--artifacts-destination",
                                           dir_ / "artifacts",
                                           "--workers",
                                           "1"};
    // No job runner (its huey consumers: seven more Python processes, seconds of start-up).
    pid_ = spawn_group(args, {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false", "PYTHONWARNINGS=ignore"},
                       dir_ / "server.log");
    const auto started = Clock::now();
    const bool up = wait_until([&] { return healthy() || exited(); }, 90) && !exited();
    if (!up) {
      ADD_FAILURE() << "the MLflow server did not start within 90 s:\n" << log();
      stop();
      return;
    }
    start_seconds_ = std::chrono::duration<double>(Clock::now() - started).count();
  }

  /// SIGTERM to its process group (uvicorn's workers included), SIGKILL after 20 s; waits until all are gone.
  void stop() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGTERM);
    if (wait_exit(pid_, 20) < 0) ::kill(-pid_, SIGKILL);
    // The group's other processes (the uvicorn worker) are gone when kill(-pgid, 0) finds none.
    if (!wait_until([&] { return ::kill(-pid_, 0) != 0 && errno == ESRCH; }, 20)) {
      ::kill(-pid_, SIGKILL);
      wait_until([&] { return ::kill(-pid_, 0) != 0 && errno == ESRCH; }, 5);
    }
    pid_ = -1;
  }

  /// Seconds the last start() took until the server answered.
  double start_seconds() const { return start_seconds_; }

  /// Runs `script`'s main with `args` (split at spaces) and MLFLOW_TRACKING_URI set to this server: in one
  /// worker process per script (tests/python_worker.h), which imports MLflow's client once, not once per
  /// call.
  CommandResult run_script(const std::string& script, const std::string& args) const {
    auto& worker = workers_[script];
    if (!worker)
      worker = std::make_unique<PythonWorker>(venv_python(), script,
                                              dir_ / ("worker-" + std::to_string(workers_.size()) + ".log"));
    return worker->call(args, {{"MLFLOW_TRACKING_URI", uri()}});
  }
  /// tests/tracking/mlflow_check.py `args` (run_script).
  CommandResult check(const std::string& args) const { return run_script(script(), args); }
  /// check() and its last output line as JSON (null, with a test failure, when it failed).
  nlohmann::json check_json(const std::string& args) const {
    const CommandResult r = check(args);
    EXPECT_EQ(r.status, 0) << "mlflow_check.py " << args << ":\n" << r.output;
    std::string s = r.output;
    while (!s.empty() && s.back() == '\n') s.pop_back();
    const size_t nl = s.find_last_of('\n');
    return nlohmann::json::parse(nl == std::string::npos ? s : s.substr(nl + 1), nullptr, false);
  }
  static std::string script() { return std::string(test::source_dir()) + "/tests/tracking/mlflow_check.py"; }

  /// Starts `args` (argv[0] a path) in a process group of its own with `extra_env` ("K=V") added, output
  /// appended to `log`; the pid (= the group's id).
  static pid_t spawn_group(const std::vector<std::string>& args, const std::vector<std::string>& extra_env,
                           const std::string& log) {
    std::vector<std::string> env_s(extra_env);
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      bool overridden = false;
      for (const auto& x : extra_env)
        overridden |= entry.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0;
      if (!overridden) env_s.push_back(entry);
    }
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    for (const auto& e : env_s) envp.push_back(const_cast<char*>(e.c_str()));
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here: the group exists before a kill(-pid) can come
    ::close(fd);
    return pid;
  }

 private:
  bool healthy() const {
    try {
      net::HttpRequest r;
      r.url = uri() + "/health";
      r.timeout_s = 2;
      return net::http_send(r, net::HttpOptions()).status == 200;
    } catch (const net::HttpError&) {
      return false;
    }
  }
  bool exited() {
    int status = 0;
    if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      ::kill(-pid_, SIGKILL);
      pid_ = -1;
    }
    return pid_ <= 0;
  }

  TempDir dir_;
  int port_;
  pid_t pid_ = -1;
  double start_seconds_ = 0;
  mutable std::map<std::string, std::unique_ptr<PythonWorker>> workers_;  // by script
};

}  // namespace ranzcr::test
