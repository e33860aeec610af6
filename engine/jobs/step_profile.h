// `ranzcr bench --profile DIR`: LibTorch's Kineto profiler over a few training steps, and what the device
// spent its time on. The trace (DIR/trace.json, for Perfetto or chrome://tracing) records every operator
// with its input shapes and strides, so a layout can be read from it; DIR/kernels.json and DIR/kernels.md
// hold the top kernels by device time (on a CPU, where there are no kernels, the operators by self time),
// in the schema scripts/bench/pytorch_reference.py --profile writes for PyTorch (compare.sh --profile).
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

/// Records `steps` calls of `step` under the profiler (CPU operators with shapes and strides; CUDA kernels
/// on a CUDA device), each inside a "ProfilerStep#N" range, and writes the trace to `trace_path`.
StepProfile profile_steps(const std::function<void()>& step, int steps, const torch::Device& device,
                          const std::string& trace_path);

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

/// Writes DIR/trace.json (by profile_steps), DIR/kernels.json and DIR/kernels.md for `step`.
StepProfile write_step_profile(const std::function<void()>& step, int steps, const torch::Device& device,
                               const std::string& dir);

}  // namespace ranzcr
