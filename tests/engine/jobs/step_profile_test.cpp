// The kernel table of `bench --profile`: self times from nested operator intervals, and a CPU profile of
// real training steps.
#include "engine/jobs/step_profile.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "models/registry.h"
#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

const KernelTime& row(const std::vector<KernelTime>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.name == name) return r;
  throw std::runtime_error("no row " + name);
}

// conv [0, 100) holds im2col [10, 30) and gemm [30, 90), gemm holds fill [40, 45); another thread's conv
// [5, 25) overlaps them in time but not in nesting. Self times (ns): conv 20 + 20, im2col 20, gemm 55,
// fill 5.
TEST(StepProfile, SelfTimeIsDurationLessTheDirectlyNestedEvents) {
  const std::vector<KernelTime> rows = self_times({{"gemm", 1, 30'000'000, 90'000'000},
                                                   {"conv", 1, 0, 100'000'000},
                                                   {"fill", 1, 40'000'000, 45'000'000},
                                                   {"im2col", 1, 10'000'000, 30'000'000},
                                                   {"conv", 2, 5'000'000, 25'000'000}});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].name, "gemm");  // longest first
  EXPECT_DOUBLE_EQ(row(rows, "gemm").total_ms, 55.0);
  EXPECT_DOUBLE_EQ(row(rows, "conv").total_ms, 40.0);
  EXPECT_EQ(row(rows, "conv").calls, 2);
  EXPECT_DOUBLE_EQ(row(rows, "im2col").total_ms, 20.0);
  EXPECT_DOUBLE_EQ(row(rows, "fill").total_ms, 5.0);
  EXPECT_DOUBLE_EQ(row(rows, "gemm").share, 55.0 / 120.0);
  double share = 0.0;
  for (const auto& r : rows) share += r.share;
  EXPECT_NEAR(share, 1.0, 1e-12);
}

// The hand-written Kineto trace of two CUDA training steps (tests/engine/jobs/kineto_trace/: its README
// says how each expected number follows from the events), read as ranzcr reads its own trace: the device
// table counts kernels, copies and memsets once, never the ProfilerStep#N and Optimizer.step#... annotations
// mirrored on the GPU timeline; the CPU table is the operators' self time. scripts/bench/kineto_trace.py
// (the PyTorch reference's reader) is held to the same expected.json by tests/scripts/kineto_trace_test.sh.
void expect_table(const StepProfile& p, const nlohmann::json& expected) {
  ASSERT_EQ(p.kernels.size(), expected.size());
  double total = 0.0;
  for (const auto& k : p.kernels) total += k.total_ms;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    EXPECT_EQ(p.kernels[i].name, expected[i]["name"].get<std::string>());
    EXPECT_EQ(p.kernels[i].calls, expected[i]["calls"].get<int64_t>());
    EXPECT_NEAR(p.kernels[i].total_ms, expected[i]["total_ms"].get<double>(), 1e-9);
    EXPECT_NEAR(p.kernels[i].share, p.kernels[i].total_ms / total, 1e-12);
    EXPECT_EQ(p.kernels[i].name.rfind("ProfilerStep", 0), std::string::npos);
    EXPECT_EQ(p.kernels[i].name.rfind("Optimizer.", 0), std::string::npos);
  }
}

TEST(StepProfile, AHandWrittenTraceCountsEachKernelOnceAndNoAnnotation) {
  const std::string dir = std::string(test::source_dir()) + "/tests/engine/jobs/kineto_trace/";
  const auto expected = nlohmann::json::parse(test::read_file(dir + "expected.json"));
  StepProfile cuda;
  cuda.steps = expected["steps"].get<int>();
  table_from_trace(dir + "trace.json", /*cuda=*/true, cuda);
  EXPECT_EQ(cuda.kernel_source, "cuda kernels");
  EXPECT_NEAR(cuda.device_ms_per_step, expected["cuda"]["device_ms_per_step"].get<double>(), 1e-9);
  expect_table(cuda, expected["cuda"]["kernels"]);
  StepProfile cpu;
  cpu.steps = cuda.steps;
  table_from_trace(dir + "trace.json", /*cuda=*/false, cpu);
  EXPECT_EQ(cpu.kernel_source, "cpu operators (self time)");
  expect_table(cpu, expected["cpu"]["kernels"]);
}

TEST(StepProfile, AFileThatIsNotATraceIsAnError) {
  test::TempDir dir;
  test::write_file(dir / "bad.json", "{\"traceEvents\": 3}");
  StepProfile p;
  p.steps = 1;
  EXPECT_THROW(table_from_trace(dir / "bad.json", true, p), std::exception);
  EXPECT_THROW(table_from_trace(dir / "absent.json", true, p), std::exception);
}

// Profiling real steps on the CPU: one conv per step in the table, the time per step measured, the JSON in
// the schema compare.sh reads, and the trace written.
TEST(StepProfile, RecordsTheStepsOperators) {
  test::TempDir dir;
  torch::manual_seed(0);
  auto model = create_model("tiny_cnn", ModelSpec{});
  torch::optim::SGD sgd(model->parameters(), 0.1);
  const torch::Tensor x = torch::rand({4, 1, 32, 32}), y = torch::zeros({4, 11});
  auto step = [&] {
    sgd.zero_grad();
    torch::binary_cross_entropy_with_logits(model->forward(x), y).backward();
    sgd.step();
  };
  step();
  const StepProfile p = write_step_profile(step, 3, torch::kCPU, dir / "p");
  EXPECT_EQ(p.steps, 3);
  EXPECT_GT(p.cpu_ms_per_step, 0.0);
  EXPECT_GE(p.wall_ms_per_step, p.cpu_ms_per_step);
  EXPECT_GT(p.device_ms_per_step, 0.0);
  EXPECT_LE(p.device_ms_per_step, p.wall_ms_per_step * 1.01);  // self times never add up past the wall time
  int convs = 0;
  for (const auto& k : p.kernels)
    if (k.name == "aten::convolution") convs = static_cast<int>(k.calls);
  EXPECT_EQ(convs % 3, 0);
  EXPECT_GT(convs, 0);
  const auto j = nlohmann::json::parse(test::read_file(dir / "p/kernels.json"));
  for (const char* key : {"implementation", "device", "steps", "cpu_ms_per_step", "device_ms_per_step",
                          "kernel_source", "kernels"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_LE(j["kernels"].size(), 25u);
  EXPECT_TRUE(nlohmann::json::parse(test::read_file(dir / "p/trace.json")).contains("traceEvents"));
}

}  // namespace
}  // namespace ranzcr
