// Self-launcher, like torch.multiprocessing.spawn: starts this node's workers as exec'd copies of a
// program with the worker environment, prefixes their output with the rank, and fails fast.
#pragma once

#include <string>
#include <vector>

#include "distributed/world.h"

namespace ranzcr {

struct LaunchOptions {
  std::string program = "/proc/self/exe";  // what each worker executes
  std::vector<std::string> args;           // its arguments (argv[1..])
  int nproc = 1;                           // workers on this node
  NodePlan node;                           // nodes, this node's rank, master address/port (0: one node,
                                           // the launcher hosts the store on a port the kernel picks)
  double grace_seconds = 120.0;            // after SIGTERM, before SIGKILL
  bool host_store = true;                  // one node, port 0: host the env:// store here
  EnvMap extra_env;                        // added to every worker's environment
};

/// A stop signal repeated within this many seconds of the first is a duplicate (Slurm signals every
/// process of a job step, launchers forward, users press Ctrl-C twice): ignored by launcher and workers.
/// Later, from a user, it means "stop now".
constexpr int kSignalRepeatSeconds = 5;

/// Runs the workers to completion and returns the exit status for the launcher: 0 when every worker
/// succeeded; otherwise the first failure's status (128 + signal when killed), after the other workers
/// got SIGTERM, `grace_seconds`, then SIGKILL. SIGINT/SIGTERM/SIGHUP to the launcher are forwarded the
/// same way (a repeat kSignalRepeatSeconds later kills at once). Workers die with the launcher
/// (PR_SET_PDEATHSIG). Prints one `error: ...` line on failure, saying whether stopped workers saved.
int launch_workers(const LaunchOptions& options);

/// A TCP port that was free a moment ago on 127.0.0.1.
int pick_free_port();

}  // namespace ranzcr
