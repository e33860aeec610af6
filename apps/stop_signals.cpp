#include "apps/stop_signals.h"

#include <csignal>
#include <ctime>

#include <unistd.h>

#include "distributed/launcher.h"

namespace ranzcr {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int64_t> g_first_signal_ns{0};

int64_t monotonic_ns() {  // async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// First SIGINT/SIGTERM: save soon and stop. Repeats are expected and ignored: Slurm signals every
// process of a step and our launcher forwards the same signal, torchrun may repeat it. A further signal
// stops at once only when it comes from someone else than our parent, kSignalRepeatSeconds or more
// after the first (a user who insists).
void on_stop_signal(int sig, siginfo_t* info, void*) {
  const int64_t now = monotonic_ns();
  int expected = 0;
  if (g_stop_signal.compare_exchange_strong(expected, sig)) {
    g_first_signal_ns = now;
    return;
  }
  const bool from_parent = info && info->si_code == SI_USER && info->si_pid == ::getppid();
  if (from_parent || now - g_first_signal_ns.load() < kSignalRepeatSeconds * 1000000000LL) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_sigaction = on_stop_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;  // file writes and waits go on; the flag is polled
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

const std::atomic<int>& stop_signal() {
  return g_stop_signal;
}

}  // namespace ranzcr
