// One Python process that runs a test script's checks on request (tests/python_worker.py): the script and
// what it imports (MLflow's client, 2-3 s) are loaded once per suite rather than once per check.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr::test {

class PythonWorker {
 public:
  /// `python` (a path, or a name looked up on PATH) runs tests/python_worker.py with `script` (a path); the
  /// worker's own stderr goes to `log`.
  PythonWorker(std::string python, std::string script, std::string log)
      : python_(std::move(python)), script_(std::move(script)), log_(std::move(log)) {}
  ~PythonWorker() { stop(); }
  PythonWorker(const PythonWorker&) = delete;
  PythonWorker& operator=(const PythonWorker&) = delete;

  /// The script's main with `args` (split at spaces, as a shell would split them unquoted) and `env` added to
  /// the worker's environment: its exit status and output, as run_command would give them. A worker that
  /// died or did not answer within `timeout` seconds is status -1 (its log as the output), and is started
  /// again for the next call.
  CommandResult call(const std::string& args, const std::map<std::string, std::string>& env = {},
                     double timeout = 300) {
    std::vector<std::string> argv;
    std::istringstream words(args);
    for (std::string w; words >> w;) argv.push_back(w);
    if (pid_ <= 0) start();
    const std::string request = nlohmann::json{{"args", argv}, {"env", env}}.dump() + "\n";
    std::string line;
    if (!write_all(request) || !read_line(timeout, line)) {
      stop();
      return {-1, "python_worker.py gave no answer to " + args + ":\n" + read_file(log_)};
    }
    const auto answer = nlohmann::json::parse(line, nullptr, false);
    if (answer.is_discarded() || !answer.contains("status")) return {-1, "python_worker.py answered " + line};
    return {answer["status"].get<int>(), answer["output"].get<std::string>()};
  }

 private:
  void start() {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    const std::string worker = std::string(test::source_dir()) + "/tests/python_worker.py";
    std::vector<std::string> args = {python_, "-W", "ignore", worker, script_};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int log = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(log, 2);
      ::execvp(argv[0], argv.data());  // python_ may be a bare name (test::python()'s python3): PATH
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(log);
    to_ = in[1];
    from_ = out[0];
    buffer_.clear();
  }
  void stop() {
    if (pid_ <= 0) return;
    ::close(to_);  // the end of its stdin ends it
    ::close(from_);
    for (int i = 0; i < 100 && ::waitpid(pid_, nullptr, WNOHANG) == 0; ++i) ::usleep(50000);
    if (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  bool write_all(const std::string& s) {
    ::signal(SIGPIPE, SIG_IGN);  // a dead worker is an answer of -1, not the end of the test binary
    for (size_t done = 0; done < s.size();) {
      const ssize_t n = ::write(to_, s.data() + done, s.size() - done);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  bool read_line(double timeout, std::string& line) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout * 1000));
    for (;;) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return true;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{from_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char chunk[65536];
      const ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n <= 0) return false;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  std::string python_, script_, log_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string buffer_;
};

}  // namespace ranzcr::test
