#include "engine/jobs/step_profile.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "core/check.h"
#include "core/durable_file.h"
#include "core/text.h"

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
  std::stable_sort(out.begin(), out.end(),  // ties stay in name order (the map's)
                   [](const KernelTime& a, const KernelTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

// A trace's pid or tid (a number, or a name such as "Spans") as text, to key threads by.
std::string id_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Microseconds (the trace's unit; ts is relative to the trace's baseTimeNanoseconds) to whole nanoseconds.
uint64_t trace_ns(const nlohmann::json& v) {
  const double us = v.is_number() ? v.get<double>() : 0.0;
  return us > 0.0 ? static_cast<uint64_t>(std::llround(us * 1000.0)) : 0;
}

nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  RANZCR_CHECK(in.good(), "profile: cannot read the trace ", path);
  nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  RANZCR_CHECK(!trace.is_discarded(), "profile: ", path, " is not JSON");
  if (trace.is_object()) trace = trace.value("traceEvents", nlohmann::json());
  RANZCR_CHECK(trace.is_array(), "profile: ", path, " has no traceEvents (not a Kineto trace)");
  return trace;
}

// The device's activities by name; annotations (gpu_user_annotation) are not among them.
std::vector<KernelTime> device_times(const nlohmann::json& events) {
  static const std::set<std::string> device_kinds = {"kernel", "gpu_memcpy", "gpu_memset"};
  std::map<std::string, KernelTime> by_name;
  for (const auto& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X" || !device_kinds.count(e.value("cat", ""))) continue;
    const std::string name = e.value("name", "");
    KernelTime& k = by_name[name];
    k.name = name;
    ++k.calls;
    k.total_ms += static_cast<double>(trace_ns(e.value("dur", nlohmann::json()))) / 1e6;
  }
  return ranked(std::move(by_name));
}

// The operators' self times: cpu_op events only (user annotations neither count nor nest).
std::vector<KernelTime> operator_times(const nlohmann::json& events) {
  std::map<std::string, uint64_t> threads;
  std::vector<TimedEvent> ops;
  for (const auto& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X" || e.value("cat", "") != "cpu_op") continue;
    const std::string thread =
        id_text(e.value("pid", nlohmann::json())) + "/" + id_text(e.value("tid", nlohmann::json()));
    const uint64_t key = threads.emplace(thread, threads.size()).first->second;
    const uint64_t start = trace_ns(e.value("ts", nlohmann::json()));
    ops.push_back({e.value("name", ""), key, start, start + trace_ns(e.value("dur", nlohmann::json()))});
  }
  return self_times(std::move(ops));
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

void table_from_trace(const std::string& trace_path, bool cuda, StepProfile& p) {
  RANZCR_CHECK(p.steps > 0, "profile: the steps the trace holds must be known");
  const nlohmann::json events = read_trace(trace_path);
  p.kernel_source = cuda ? "cuda kernels" : "cpu operators (self time)";
  p.kernels = cuda ? device_times(events) : operator_times(events);
  double total = 0.0;
  for (const auto& k : p.kernels) total += k.total_ms;
  p.device_ms_per_step = total / p.steps;
}

// The one line of a profiler's failure (a c10::Error's message without its backtrace).
std::string failure_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return first_line(c10_error ? c10_error->what_without_backtrace() : e.what());
}

StepProfile profile_steps(const std::function<void()>& step, int steps, const torch::Device& device,
                          const std::string& trace_path, int warmup) {
  RANZCR_CHECK(steps > 0 && warmup >= 0, "profile: at least one step to record");
  const profiler::ProfilerConfig config(profiler::ProfilerState::KINETO, /*report_input_shapes=*/true);
  std::set<profiler::ActivityType> activities{profiler::ActivityType::CPU};
  if (device.is_cuda()) activities.insert(profiler::ActivityType::CUDA);
  // Every step runs whatever the profiler does: with several ranks the others take the same steps, each
  // with its gradient all-reduce, and a step left out would leave theirs unpaired. A profiler failure is
  // thrown once they are done.
  std::string failure;
  const auto attempt = [&](const std::function<void()>& call) {
    if (!failure.empty()) return false;
    try {
      call();
      return true;
    } catch (const std::exception& e) {
      failure = failure_line(e);
      return false;
    }
  };
  device_sync(device);
  attempt([&] { kineto::prepareProfiler(config, activities); });
  for (int i = 0; i < warmup; ++i) {  // prepared, not recording: CUPTI's set-up falls here
    step();
    device_sync(device);
  }
  const bool recording = attempt([&] { kineto::enableProfiler(config, activities); });
  double cpu_ms = 0.0, wall_ms = 0.0;
  for (int i = 0; i < steps; ++i) {
    const Clock::time_point start = Clock::now();
    {
      RECORD_USER_SCOPE("ProfilerStep#" + std::to_string(warmup + i));
      step();
    }
    const Clock::time_point queued = Clock::now();
    device_sync(device);
    cpu_ms += ms_between(start, queued);
    wall_ms += ms_between(start, Clock::now());
  }
  std::unique_ptr<kineto::ProfilerResult> result;
  if (recording) attempt([&] { result = kineto::disableProfiler(); });
  RANZCR_CHECK(failure.empty(), "profile: LibTorch's profiler failed: ", failure);
  RANZCR_CHECK(result != nullptr, "profile: LibTorch's profiler returned no result");
  result->save(trace_path);

  StepProfile p;
  p.device = device.str();
  p.steps = steps;
  p.cpu_ms_per_step = cpu_ms / steps;
  p.wall_ms_per_step = wall_ms / steps;
  table_from_trace(trace_path, device.is_cuda(), p);
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

void prepare_profile_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  RANZCR_CHECK(!ec && std::filesystem::is_directory(dir), "--profile ", dir, ": cannot create the folder (",
               ec ? ec.message() : "not a folder", ")");
  const std::string probe = dir + "/.write-check";
  const bool writable = std::ofstream(probe).good();
  std::filesystem::remove(probe, ec);
  RANZCR_CHECK(writable, "--profile ", dir, ": cannot write in the folder");
}

StepProfile write_step_profile(const std::function<void()>& step, int steps, const torch::Device& device,
                               const std::string& dir, int warmup) {
  prepare_profile_folder(dir);
  const StepProfile p = profile_steps(step, steps, device, dir + "/trace.json", warmup);
  write_file_atomic(dir + "/kernels.json", profile_json(p, "ranzcr"));
  write_file_atomic(dir + "/kernels.md", profile_table(p));
  return p;
}

}  // namespace ranzcr
