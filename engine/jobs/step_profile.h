// `ranzcr bench --profile DIR`: LibTorch's Kineto profiler over a few training steps, and what the device
// spent its time on. The trace (DIR/trace.json, for Perfetto or chrome://tracing) records every operator
// with its input shapes and strides, so a layout can be read from it; DIR/kernels.json and DIR/kernels.md
// hold the top kernels by device time (on a CPU, where there are no kernels, the operators by self time),
// in the schema scripts/bench/pytorch_reference.py --profile writes for PyTorch (compare.sh --profile).
// Both sides read their table from the trace file they wrote, by the same rules (scripts/bench/
// kineto_trace.py is the reference's reader), and profile 2 warm-up steps before the recorded ones.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ranzcr {

struct KernelTime {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0.0;
  double share = 0.0;  // of all kernel (operator self) time
};

struct StepProfile {
  std::string device;
  int steps = 0;
  double cpu_ms_per_step = 0.0;     // host wall time per step until its work is queued (the CPU side)
  double wall_ms_per_step = 0.0;    // per step with the device's work done
  double device_ms_per_step = 0.0;  // kernel (operator self) time per step
  std::string kernel_source;        // "cuda kernels" | "cpu operators (self time)"
  std::vector<KernelTime> kernels;  // by total time, longest first (all of them)
};

/// Runs `warmup` calls of `step` with the profiler prepared but not recording (as torch.profiler's
/// schedule(warmup=...) does: the first recorded step pays no set-up), then records `steps` calls (CPU
/// operators with shapes and strides; CUDA kernels on a CUDA device), each inside a "ProfilerStep#N" range,
/// writes the trace to `trace_path` and reads the kernel table back from it (table_from_trace).
StepProfile profile_steps(const std::function<void()>& step, int steps, const torch::Device& device,
                          const std::string& trace_path, int warmup = 2);

/// The kernel table of a Kineto trace file (the chrome-trace JSON LibTorch and torch.profiler write), into
/// `profile` (kernels, kernel_source, device_ms_per_step over profile.steps). On CUDA the device's own
/// activities (categories kernel, gpu_memcpy, gpu_memset) by name: never the annotations Kineto mirrors onto
/// the GPU timeline (gpu_user_annotation: ProfilerStep#N, Optimizer.step#..., each spanning the kernels it
/// holds, so counting them would count those kernels twice). On a CPU the operators' (cpu_op) self times;
/// user annotations are neither rows nor nested operators there. Throws on a file that is not a trace.
void table_from_trace(const std::string& trace_path, bool cuda, StepProfile& profile);

/// Sums per-operator self time from nested intervals: an event's self time is its duration less that of
/// the events directly inside it on the same thread. (Exposed for its test.)
struct TimedEvent {
  std::string name;
  uint64_t thread = 0;
  uint64_t start_ns = 0, end_ns = 0;
};
std::vector<KernelTime> self_times(std::vector<TimedEvent> events);

/// kernels.json (the top `top` kernels) and kernels.md, the table compare.sh prints.
std::string profile_json(const StepProfile& profile, const std::string& implementation, size_t top = 25);
std::string profile_table(const StepProfile& profile, size_t top = 25);

/// Makes `dir` and checks that a file can be written in it; throws one line naming the folder otherwise.
void prepare_profile_folder(const std::string& dir);

/// Writes DIR/trace.json (by profile_steps), DIR/kernels.json and DIR/kernels.md for `step`.
StepProfile write_step_profile(const std::function<void()>& step, int steps, const torch::Device& device,
                               const std::string& dir, int warmup = 2);

}  // namespace ranzcr
