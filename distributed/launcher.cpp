#include "distributed/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "core/check.h"

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
  RANZCR_CHECK(fd >= 0, "cannot open a socket to pick a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    RANZCR_FAIL("cannot pick a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

// Hosts the rendezvous store for a one-node job on a port the kernel picks (no bind-then-close race):
// the workers connect to it as clients, as under torchrun's agent.
c10::intrusive_ptr<c10d::Store> host_store(int world, int* port) {
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.numWorkers = world;
  so.waitWorkers = false;
  try {
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
    *port = store->getPort();
    return store;
  } catch (const std::exception& e) {
    RANZCR_FAIL("cannot host the rendezvous store on 127.0.0.1: ", e.what());
  }
}

// argv/envp arrays for execve, built before fork (after it only async-signal-safe calls).
struct ExecArgs {
  explicit ExecArgs(std::vector<std::string> strings) : strings_(std::move(strings)) {
    for (auto& s : strings_) pointers_.push_back(s.data());
    pointers_.push_back(nullptr);
  }
  char* const* get() { return pointers_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<char*> pointers_;
};

EnvMap worker_env(const LaunchOptions& o, const Worker& w, int world, int port, bool hosted) {
  EnvMap env = current_environment();
  for (const auto& kv : o.extra_env) env[kv.first] = kv.second;
  env["RANK"] = std::to_string(w.rank);
  env["LOCAL_RANK"] = std::to_string(w.local_rank);
  env["WORLD_SIZE"] = std::to_string(world);
  env["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc);
  env["NODE_RANK"] = std::to_string(o.node.node_rank);
  env["GROUP_RANK"] = std::to_string(o.node.node_rank);
  env["MASTER_ADDR"] = hosted ? "127.0.0.1" : o.node.master_addr;
  env["MASTER_PORT"] = std::to_string(port);
  env["RANZCR_LAUNCHER"] = "self";
  if (hosted)
    env["RANZCR_STORE_HOSTED"] = "1";
  else
    env.erase("RANZCR_STORE_HOSTED");
  return env;
}

// Starts one worker in its own process group with its output piped; returns its pid.
pid_t spawn_worker(const LaunchOptions& o, ExecArgs& argv, ExecArgs& envp, int* out_fd, int* err_fd) {
  const pid_t launcher = ::getpid();
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    RANZCR_FAIL("cannot create pipes for the workers");
  const pid_t pid = ::fork();
  RANZCR_CHECK(pid >= 0, "cannot start worker processes (fork failed)");
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
    ::execve(o.program.c_str(), argv.get(), envp.get());
    const char msg[] = "error: cannot execute the worker program\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  *out_fd = out_pipe[0];
  *err_fd = err_pipe[0];
  return pid;
}

// After a stop signal: what became of the workers, in one line.
// A worker that saved and stopped exits 0 or 128 + SIGINT/SIGTERM/SIGHUP.
std::string stop_outcome(int sig, const std::vector<Worker>& workers, double grace) {
  std::string killed, failed;
  for (const auto& w : workers) {
    const int code = exit_code(w.status);
    if (WIFSIGNALED(w.status) && WTERMSIG(w.status) == SIGKILL)
      killed += (killed.empty() ? "" : ", ") + std::to_string(w.rank);
    else if (code != 0 && code != 128 + SIGINT && code != 128 + SIGTERM && code != 128 + SIGHUP)
      failed += (failed.empty() ? "rank " : ", rank ") + std::to_string(w.rank) + " " + describe(w.status);
  }
  std::string line = std::string("interrupted by ") + strsignal(sig);
  if (killed.empty() && failed.empty()) return line + "; the workers saved and stopped";
  std::ostringstream g;
  g << grace;
  if (!killed.empty())
    line += "; rank(s) " + killed + " did not stop within distributed.grace_seconds (" + g.str() +
            " s) and were killed: their last save may be older";
  if (!failed.empty()) line += "; " + failed;
  return line;
}

using Clock = std::chrono::steady_clock;

// Waits for the workers: fails fast when one fails, forwards stop signals, SIGKILLs after the grace.
class Supervisor {
 public:
  Supervisor(std::vector<Worker>& workers, double grace) : workers_(workers), grace_(grace) {}
  int run() {
    int running = static_cast<int>(workers_.size());
    while (running > 0) {
      handle_signal();
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid > 0) {
        running -= reap(pid, status);
        continue;
      }
      if (stopping_ && Clock::now() > kill_at_) stop_all(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (signal_ != 0) failure_ = stop_outcome(signal_, workers_, grace_);
    return result_;
  }
  const std::string& failure() const { return failure_; }
  bool interrupted() const { return signal_ != 0; }

 private:
  void stop_all(int sig) {
    for (auto& w : workers_)
      if (w.running) ::kill(-w.pid, sig);
  }
  void begin_stop() {
    stopping_ = true;
    stop_began_ = Clock::now();
    kill_at_ = stop_began_ + std::chrono::milliseconds(static_cast<int64_t>(grace_ * 1000));
    stop_all(SIGTERM);
  }
  // A repeat of the stop signal (Slurm signals every process of the step, users press Ctrl-C twice) is
  // ignored; one kSignalRepeatSeconds or more after the stop began kills the workers at once.
  void handle_signal() {
    const int sig = g_signal.exchange(0);
    if (sig == 0) return;
    if (!stopping_) {
      signal_ = sig;
      result_ = 128 + sig;
      begin_stop();
    } else if (Clock::now() - stop_began_ >= std::chrono::seconds(kSignalRepeatSeconds)) {
      stop_all(SIGKILL);
    }
  }
  int reap(pid_t pid, int status) {
    for (auto& w : workers_) {
      if (w.pid != pid || !w.running) continue;
      w.running = false;
      w.status = status;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && !stopping_) {
        result_ = exit_code(status);
        failure_ = "rank " + std::to_string(w.rank) + " (pid " + std::to_string(pid) + ") " +
                   describe(status) + "; stopped the other workers";
        begin_stop();
      }
      return 1;
    }
    return 0;
  }

  std::vector<Worker>& workers_;
  double grace_;
  bool stopping_ = false;
  int signal_ = 0, result_ = 0;
  std::string failure_;
  Clock::time_point stop_began_, kill_at_;
};

}  // namespace

int launch_workers(const LaunchOptions& o) {
  const NodePlan& node = o.node;
  const int world = node.nnodes * o.nproc;
  int port = node.master_port;
  c10::intrusive_ptr<c10d::Store> store;  // hosted here while the workers run
  const bool hosted = port == 0 && o.host_store;
  if (hosted) store = host_store(world, &port);
  if (port == 0) port = pick_free_port();  // unused by the workers (tcp:// or file:// init)

  std::vector<std::string> args{o.program};
  args.insert(args.end(), o.args.begin(), o.args.end());
  ExecArgs argv(args);

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
    std::vector<std::string> env_s;
    for (const auto& kv : worker_env(o, w, world, port, hosted)) env_s.push_back(kv.first + "=" + kv.second);
    ExecArgs envp(env_s);
    int out_fd = -1, err_fd = -1;
    w.pid = spawn_worker(o, argv, envp, &out_fd, &err_fd);
    w.running = true;
    const std::string prefix = "[rank " + std::to_string(w.rank) + "] ";
    pumps.emplace_back(pump, out_fd, std::ref(std::cout), std::ref(out_mutex), prefix);
    pumps.emplace_back(pump, err_fd, std::ref(std::cerr), std::ref(out_mutex), prefix);
  }

  Supervisor supervisor(workers, o.grace_seconds);
  const int result = supervisor.run();
  for (auto& t : pumps) t.join();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  if (result != 0)
    std::cerr << (supervisor.interrupted() ? "stopped: " : "error: ") << supervisor.failure() << std::endl;
  return result;
}

}  // namespace ranzcr
