#include "engine/jobs/step_profile.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/durable_file.h"

namespace ranzcr {
namespace {

namespace kineto = torch::autograd::profiler;
namespace profiler = torch::profiler::impl;
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void device_sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// The rows of `by_name`, each with its share of their total time, longest first.
std::vector<KernelTime> ranked(std::map<std::string, KernelTime> by_name) {
  double total = 0.0;
  for (const auto& kv : by_name) total += kv.second.total_ms;
  std::vector<KernelTime> out;
  for (auto& kv : by_name) {
    kv.second.share = total > 0.0 ? kv.second.total_ms / total : 0.0;
    out.push_back(std::move(kv.second));
  }
  std::sort(out.begin(), out.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

// Kernel time per name: the device's kernels (and copies) on a GPU; operator self time on a CPU.
std::vector<KernelTime> kernel_times(const std::vector<kineto::KinetoEvent>& events, bool cuda) {
  if (!cuda) {
    std::vector<TimedEvent> ops;
    for (const auto& e : events)
      if (e.deviceType() == c10::DeviceType::CPU &&
          e.scope() != static_cast<uint8_t>(at::RecordScope::USER_SCOPE))
        ops.push_back({e.name(), e.startThreadId(), e.startNs(), e.endNs()});
    return self_times(std::move(ops));
  }
  std::map<std::string, KernelTime> by_name;
  for (const auto& e : events) {
    if (e.deviceType() != c10::DeviceType::CUDA) continue;
    KernelTime& k = by_name[e.name()];
    k.name = e.name();
    ++k.calls;
    k.total_ms += static_cast<double>(e.durationNs()) / 1e6;
  }
  return ranked(std::move(by_name));
}

std::string shortened(const std::string& name, size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

}  // namespace

std::vector<KernelTime> self_times(std::vector<TimedEvent> events) {
  std::sort(events.begin(), events.end(), [](const TimedEvent& a, const TimedEvent& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;  // the enclosing event first
  });
  std::vector<uint64_t> inner(events.size(), 0);
  std::vector<size_t> open;  // the chain of enclosing events of the current one
  for (size_t i = 0; i < events.size(); ++i) {
    const TimedEvent& e = events[i];
    while (!open.empty() &&
           (events[open.back()].thread != e.thread || events[open.back()].end_ns <= e.start_ns))
      open.pop_back();
    if (!open.empty()) inner[open.back()] += e.end_ns - e.start_ns;
    open.push_back(i);
  }
  std::map<std::string, KernelTime> by_name;
  for (size_t i = 0; i < events.size(); ++i) {
    const uint64_t duration = events[i].end_ns - events[i].start_ns;
    KernelTime& k = by_name[events[i].name];
    k.name = events[i].name;
    ++k.calls;
    k.total_ms += static_cast<double>(duration > inner[i] ? duration - inner[i] : 0) / 1e6;
  }
  return ranked(std::move(by_name));
}

StepProfile profile_steps(const std::function<void()>& step, int steps, const torch::Device& device,
                          const std::string& trace_path) {
  RANZCR_CHECK(steps > 0, "profile: at least one step to record");
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO, /*report_input_shapes=*/true);
  std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU};
  if (device.is_cuda()) activities.insert(profiler::ActivityType::CUDA);
  device_sync(device);
  kineto::prepareProfiler(config, activities);
  kineto::enableProfiler(config, activities);
  double cpu_ms = 0.0, wall_ms = 0.0;
  for (int i = 0; i < steps; ++i) {
    const Clock::time_point start = Clock::now();
    {
      RECORD_USER_SCOPE("ProfilerStep#" + std::to_string(i));
      step();
    }
    const Clock::time_point queued = Clock::now();
    device_sync(device);
    cpu_ms += ms_between(start, queued);
    wall_ms += ms_between(start, Clock::now());
  }
  std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  RANZCR_CHECK(result != nullptr, "profile: LibTorch's profiler returned no result");
  result->save(trace_path);

  StepProfile p;
  p.device = device.str();
  p.steps = steps;
  p.cpu_ms_per_step = cpu_ms / steps;
  p.wall_ms_per_step = wall_ms / steps;
  p.kernel_source = device.is_cuda() ? "cuda kernels" : "cpu operators (self time)";
  p.kernels = kernel_times(result->events(), device.is_cuda());
  double total = 0.0;
  for (const auto& k : p.kernels) total += k.total_ms;
  p.device_ms_per_step = total / steps;
  return p;
}

std::string profile_json(const StepProfile& p, const std::string& implementation, size_t top) {
  nlohmann::json j;
  j["implementation"] = implementation;
  j["device"] = p.device;
  j["steps"] = p.steps;
  j["cpu_ms_per_step"] = p.cpu_ms_per_step;
  j["wall_ms_per_step"] = p.wall_ms_per_step;
  j["device_ms_per_step"] = p.device_ms_per_step;
  j["kernel_source"] = p.kernel_source;
  j["kernels"] = nlohmann::json::array();
  for (size_t i = 0; i < p.kernels.size() && i < top; ++i) {
    const KernelTime& k = p.kernels[i];
    j["kernels"].push_back(
        {{"name", k.name}, {"calls", k.calls}, {"total_ms", k.total_ms}, {"share", k.share}});
  }
  return j.dump(2) + "\n";
}

std::string profile_table(const StepProfile& p, size_t top) {
  std::ostringstream ss;
  ss << std::fixed << std::setprecision(2);
  ss << "Profile of " << p.steps << " steps on " << p.device << ": " << p.cpu_ms_per_step
     << " ms per step on the host (until queued), " << p.wall_ms_per_step << " ms with the device done, "
     << p.device_ms_per_step << " ms of " << p.kernel_source << "\n\n";
  ss << "| kernel | calls | total ms | share |\n|---|---:|---:|---:|\n";
  for (size_t i = 0; i < p.kernels.size() && i < top; ++i) {
    const KernelTime& k = p.kernels[i];
    std::string name = shortened(k.name, 100);
    std::replace(name.begin(), name.end(), '|', '/');
    ss << "| " << name << " | " << k.calls << " | " << k.total_ms << " | " << std::setprecision(1)
       << 100.0 * k.share << "% |\n"
       << std::setprecision(2);
  }
  return ss.str();
}

StepProfile write_step_profile(const std::function<void()>& step, int steps, const torch::Device& device,
                               const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  RANZCR_CHECK(!ec && std::filesystem::is_directory(dir), "--profile ", dir, ": cannot create the folder (",
               ec.message(), ")");
  const StepProfile p = profile_steps(step, steps, device, dir + "/trace.json");
  write_file_atomic(dir + "/kernels.json", profile_json(p, "ranzcr"));
  write_file_atomic(dir + "/kernels.md", profile_table(p));
  return p;
}

}  // namespace ranzcr
