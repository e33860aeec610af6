#include "distributed/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ranzcr {
namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) {
  g_signal = sig;
}

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Copies `fd` to `out` line by line, each line prefixed with `prefix`.
void pump(int fd, std::ostream& out, std::mutex& mutex, const std::string& prefix) {
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find_first_of("\n\r")) != std::string::npos) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.empty()) continue;
      std::lock_guard<std::mutex> lock(mutex);
      out << prefix << line << std::endl;
    }
  }
  if (!pending.empty()) {
    std::lock_guard<std::mutex> lock(mutex);
    out << prefix << pending << std::endl;
  }
  ::close(fd);
}

}  // namespace

int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("cannot open a socket to pick a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot pick a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

int launch_workers(const LaunchOptions& o) {
  const NodePlan& node = o.node;
  const int world = node.nnodes * o.nproc;
  const int port = node.master_port > 0 ? node.master_port : pick_free_port();
  const pid_t launcher = ::getpid();

  // Everything the children need is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_s{o.program};
  argv_s.insert(argv_s.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{}, old_hup{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);

  std::mutex out_mutex;
  std::vector<std::thread> pumps;
  std::vector<Worker> workers(o.nproc);
  for (int lr = 0; lr < o.nproc; ++lr) {
    Worker& w = workers[lr];
    w.local_rank = lr;
    w.rank = node.node_rank * o.nproc + lr;
    EnvMap env = current_environment();
    for (const auto& kv : o.extra_env) env[kv.first] = kv.second;
    env["RANK"] = std::to_string(w.rank);
    env["LOCAL_RANK"] = std::to_string(lr);
    env["WORLD_SIZE"] = std::to_string(world);
    env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
    env["NODE_RANK"] = std::to_string(node.node_rank);
    env["GROUP_RANK"] = std::to_string(node.node_rank);
    env["MASTER_ADDR"] = node.master_addr;
    env["MASTER_PORT"] = std::to_string(port);
    env["RANZCR_LAUNCHER"] = "self";
    std::vector<std::string> env_s;
    for (const auto& kv : env) env_s.push_back(kv.first + "=" + kv.second);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
      throw std::runtime_error("cannot create pipes for the workers");
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("cannot start worker processes (fork failed)");
    if (pid == 0) {
      ::setpgid(0, 0);  // own process group: the launcher decides who gets which signal
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(1);  // the launcher died before prctl
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigaction(SIGINT, &dfl, nullptr);
      sigaction(SIGTERM, &dfl, nullptr);
      sigaction(SIGHUP, &dfl, nullptr);
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      ::execve(o.program.c_str(), argv.data(), envp.data());
      const char msg[] = "error: cannot execute the worker program\n";
      (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
      ::_exit(127);
    }
    ::setpgid(pid, pid);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    w.pid = pid;
    w.running = true;
    const std::string prefix = "[rank " + std::to_string(w.rank) + "] ";
    pumps.emplace_back(pump, out_pipe[0], std::ref(std::cout), std::ref(out_mutex), prefix);
    pumps.emplace_back(pump, err_pipe[0], std::ref(std::cerr), std::ref(out_mutex), prefix);
  }

  using Clock = std::chrono::steady_clock;
  int running = o.nproc;
  int result = 0;
  std::string failure;
  bool stopping = false;
  Clock::time_point kill_at;
  auto stop_all = [&](int sig) {
    for (auto& w : workers)
      if (w.running) ::kill(-w.pid, sig);
  };
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (auto& w : workers) {
        if (w.pid != pid || !w.running) continue;
        w.running = false;
        w.status = status;
        --running;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && result == 0 && !stopping) {
          result = exit_code(status);
          failure =
              "rank " + std::to_string(w.rank) + " (pid " + std::to_string(pid) + ") " + describe(status);
        }
        if (!ok && !stopping) {
          stopping = true;
          kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
          stop_all(SIGTERM);
        }
      }
      continue;
    }
    const int sig = g_signal.exchange(0);
    if (sig != 0) {
      if (stopping) {
        stop_all(SIGKILL);  // a second signal: no more grace
      } else {
        stopping = true;
        result = 128 + sig;
        failure = std::string("interrupted by ") + strsignal(sig) + "; workers were asked to save and stop";
        kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000));
        stop_all(SIGTERM);
      }
    }
    if (stopping && Clock::now() > kill_at) stop_all(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : pumps) t.join();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (result != 0) std::cerr << "error: " << failure << "; stopped the other workers" << std::endl;
  return result;
}

}  // namespace ranzcr
