// End-to-end tests of the ranzcr binary: real processes, exit statuses, messages and files.
#include <torch/cuda.h>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <regex>
#include <utility>
#include <vector>

#include "data/csv.h"
#include "distributed/world.h"
#include "engine/config/config.h"
#include "tests/apps/user_error.h"
#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using test::run_command;

class CliTest : public test::CliSuite<CliTest> {
 public:
  static test::CliSetup setup() {
    return test::CliSetup{80,
                          64,
                          12,  // on the CPU (2 Gloo ranks, fp32, "device": "cpu"), on a GPU host too
                          {{"data.image_size", "48"},
                           {"train.epochs", "2"},
                           {"train.batch_size", "16"},
                           {"output.dir", *dir_ / "run"}}};
  }

 protected:
  friend void expect_thresholds_reproduce_operating_points(const std::string&, const std::string&);
  // Runs the binary and checks it failed with exactly one `error: ` line containing `expected`.
  static void expect_user_error(const std::string& args, const std::string& expected) {
    test::expect_user_error(bin() + " " + args, expected);
  }
};

// Beside its JSON, evaluate writes roc.png, pr.png and operating_points.csv; predict --thresholds on the
// same images and model then calls positive exactly as the operating point says: each label's 0/1 column
// has the sensitivity and specificity of its row. predict runs the computation evaluate ran (LibTorch, fp32):
// its default backend on a CPU is OpenVINO, whose bf16 (on a CPU with AVX-512 BF16 or AMX) or even f32
// kernels move probabilities enough to flip a barely trained model's near-ties at a threshold.
void expect_thresholds_reproduce_operating_points(const std::string& checkpoint, const std::string& run) {
  const std::string ds = *CliTest::dir_ / "ds";
  for (const auto& name : {"roc.png", "pr.png"}) EXPECT_EQ(cv::imread(run + "/" + name).cols, 1320) << name;
  const CsvTable points = read_csv(run + "/operating_points.csv");
  ASSERT_GT(points.rows.size(), 0u);
  EXPECT_EQ(points.rows.size() % 5, 0u);
  const auto p = run_command(CliTest::bin() + " predict --checkpoint " + checkpoint + " --images " + ds +
                             "/test --csv " + ds + "/test_labels.csv --thresholds " + run +
                             "/operating_points.csv --at sens90 --set infer.backend=libtorch --out " + run +
                             "/sub_at.csv");
  ASSERT_EQ(p.status, 0) << p.output;
  const CsvTable sub = read_csv(run + "/sub_at.csv"), truth = read_csv(ds + "/test_labels.csv");
  const size_t labelled = points.rows.size() / 5;
  if (labelled < 11)
    EXPECT_NE(p.output.find("their :sens90 columns stay empty"), std::string::npos) << p.output;
  ASSERT_EQ(sub.header.size(), 23u);       // id, 11 probabilities, 11 decisions
  for (const auto& name : truth.header) {  // a label without a threshold: empty cells, not 0
    const int col = sub.column(name + ":sens90");
    const bool has_row = std::any_of(points.rows.begin(), points.rows.end(),
                                     [&](const auto& row) { return row[points.column("label")] == name; });
    if (col >= 0 && !has_row)
      for (const auto& row : sub.rows) EXPECT_EQ(row[col], "") << name;
  }
  int checked = 0;
  for (size_t r = 0; r < points.rows.size(); ++r) {
    const auto& row = points.rows[r];
    if (row[points.column("point")] != "sens90") continue;
    const std::string label = row[points.column("label")];
    const int decided = sub.column(label + ":sens90"), truth_col = truth.column(label);
    ASSERT_GE(decided, 0) << label;
    double tp = 0, fp = 0, pos = 0, neg = 0;
    for (size_t i = 0; i < sub.rows.size(); ++i) {
      const std::string& id = sub.rows[i][0];
      const auto t =
          std::find_if(truth.rows.begin(), truth.rows.end(), [&](const auto& x) { return x[0] == id; });
      ASSERT_NE(t, truth.rows.end()) << id;
      const bool yes = sub.rows[i][decided] == "1", positive = (*t)[truth_col] == "1";
      (positive ? pos : neg) += 1;
      if (yes) (positive ? tp : fp) += 1;
    }
    EXPECT_NEAR(tp / pos, std::stod(row[points.column("sensitivity")]), 1e-6) << label;
    EXPECT_NEAR(1 - fp / neg, std::stod(row[points.column("specificity")]), 1e-6) << label;
    EXPECT_GE(tp / pos, 0.9) << label;
    ++checked;
  }
  EXPECT_GT(checked, 0);
  const std::string predict =
      "predict --checkpoint " + checkpoint + " --images " + ds + "/test --out " + run + "/x.csv";
  CliTest::expect_user_error(predict + " --thresholds " + run + "/absent.csv", run + "/absent.csv");
  test::write_file(run + "/bad_points.csv", "a,b\n1,2\n");
  CliTest::expect_user_error(predict + " --thresholds " + run + "/bad_points.csv",
                             "is not an operating_points.csv");
  CliTest::expect_user_error(predict + " --thresholds " + run + "/operating_points.csv --at sens99", "--at");
  EXPECT_FALSE(std::filesystem::exists(run + "/x.csv"));
}

TEST_F(CliTest, TrainEvaluatePredict) {
  const auto t = run_command(bin() + " train --config " + cfg());
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("epoch 2/2"), std::string::npos);
  const std::string run = *dir_ / "run";

  // evaluate best.pt reproduces the best logged validation AUC.
  double best = -1;
  for (const auto& m : test::read_metrics(run)) best = std::max(best, m["val_auc_mean"].get<double>());
  const auto e = run_command(bin() + " evaluate --config " + cfg() + " --checkpoint " + run +
                             "/checkpoints/best.pt --out " + run + "/eval.json");
  ASSERT_EQ(e.status, 0) << e.output;
  const auto j = nlohmann::json::parse(test::read_file(run + "/eval.json"));
  EXPECT_NEAR(j["auc_mean"].get<double>(), best, 1e-4);
  EXPECT_EQ(j["auc"].size(), 11u);
  EXPECT_TRUE(j.contains("loss"));
  EXPECT_GT(j["num_images"].get<int>(), 0);

  // evaluate on an explicit CSV (the synthetic test labels), with the checkpoint's own config.
  const auto e2 =
      run_command(bin() + " evaluate --checkpoint " + run + "/checkpoints/last.pt --csv " +
                  *dir_ / "ds/test_labels.csv --images " + *dir_ / "ds/test --out " + run + "/test.json");
  ASSERT_EQ(e2.status, 0) << e2.output;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(run + "/test.json"))["num_images"].get<int>(), 12);
  expect_thresholds_reproduce_operating_points(run + "/checkpoints/last.pt", run);

  // plot redraws the training curves from metrics.jsonl.
  for (const auto& name : {"curves_loss.png", "curves_auc.png", "curves_auc_per_label.png"}) {
    ASSERT_TRUE(std::filesystem::exists(run + "/" + name)) << name;  // drawn by train
    std::filesystem::remove(run + "/" + name);
  }
  const auto pl = run_command(bin() + " plot " + run);
  ASSERT_EQ(pl.status, 0) << pl.output;
  for (const auto& name : {"curves_loss.png", "curves_auc.png", "curves_auc_per_label.png"})
    EXPECT_FALSE(cv::imread(run + "/" + name).empty()) << name;

  // predict writes one row per test image, probabilities in [0, 1].
  const auto p =
      run_command(bin() + " predict --config " + cfg() + " --checkpoint " + run +
                  "/checkpoints/best.pt --images " + *dir_ / "ds/test --tta --out " + run + "/sub.csv");
  ASSERT_EQ(p.status, 0) << p.output;
  const CsvTable sub = read_csv(run + "/sub.csv");
  ASSERT_EQ(sub.rows.size(), 12u);
  ASSERT_EQ(sub.header.size(), 12u);
  EXPECT_EQ(sub.header[0], "StudyInstanceUID");
  EXPECT_EQ(sub.header[1], "ETT - Abnormal");
  for (const auto& row : sub.rows)
    for (size_t k = 1; k < row.size(); ++k) {
      const double v = std::stod(row[k]);
      EXPECT_GE(v, 0.0);
      EXPECT_LE(v, 1.0);
    }
}

// With train.ema_decay the deployed weights are the EMA's: evaluate best.pt reproduces the best logged
// ema_val_auc_mean.
TEST_F(CliTest, EvaluateUsesTheEmaWeights) {
  const std::string run = *dir_ / "ema_run";
  const auto t = run_command(bin() + " train --config " + cfg() + " --set output.dir=" + run +
                             " --set train.ema_decay=0.9");
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("ema_val_auc"), std::string::npos) << t.output;
  double best = -1;
  for (const auto& m : test::read_metrics(run)) best = std::max(best, m["ema_val_auc_mean"].get<double>());
  const auto e = run_command(bin() + " evaluate --config " + cfg() + " --checkpoint " + run +
                             "/checkpoints/best.pt --out " + run + "/eval.json");
  ASSERT_EQ(e.status, 0) << e.output;
  EXPECT_NEAR(nlohmann::json::parse(test::read_file(run + "/eval.json"))["auc_mean"].get<double>(), best,
              1e-6);
}

// export writes the deployable weights with their metadata: evaluate and predict give the same results
// from the exported file as from best.pt, with the run's input normalisation whatever --config says; a
// run started from the file with other labels loads all but the classifier and says so.
TEST_F(CliTest, ExportedFileEvaluatesPredictsAndStartsARun) {
  const std::string run = *dir_ / "export_run", file = run + "/model.safetensors";
  const auto t = run_command(bin() + " train --config " + cfg() + " --set output.dir=" + run +
                             " --set train.ema_decay=0.9 --set 'model.input_mean=[0.4]'" +
                             " --set 'model.input_std=[0.3]'");
  ASSERT_EQ(t.status, 0) << t.output;
  const auto x = run_command(bin() + " export --checkpoint " + run + "/checkpoints/best.pt --out " + file);
  ASSERT_EQ(x.status, 0) << x.output;
  EXPECT_NE(x.output.find("the EMA weights"), std::string::npos) << x.output;

  auto evaluate = [&](const std::string& model, const std::string& out) {
    const auto e =
        run_command(bin() + " evaluate --config " + cfg() + " --checkpoint " + model + " --out " + out);
    EXPECT_EQ(e.status, 0) << e.output;
    return nlohmann::json::parse(test::read_file(out));
  };
  const auto a = evaluate(run + "/checkpoints/best.pt", run + "/a.json");
  const auto b = evaluate(file, run + "/b.json");
  EXPECT_NEAR(a["auc_mean"].get<double>(), b["auc_mean"].get<double>(), 1e-6);
  EXPECT_NEAR(a["loss"].get<double>(), b["loss"].get<double>(), 1e-6);
  EXPECT_EQ(b["weights"], "ema");
  double best = -1;  // the run's own validation, with its normalisation (cfg() has none)
  for (const auto& m : test::read_metrics(run)) best = std::max(best, m["ema_val_auc_mean"].get<double>());
  EXPECT_NEAR(b["auc_mean"].get<double>(), best, 1e-6);

  for (const auto& [model, out] :
       {std::pair{run + "/checkpoints/best.pt", run + "/a.csv"}, {file, run + "/b.csv"}}) {
    const auto p =
        run_command(bin() + " predict --checkpoint " + model + " --images " + *dir_ / "ds/test --out " + out);
    ASSERT_EQ(p.status, 0) << p.output;
  }
  EXPECT_EQ(test::read_file(run + "/a.csv"), test::read_file(run + "/b.csv"));

  const auto f = run_command(bin() + " train --config " + cfg() + " --set output.dir=" + run + "_from" +
                             " --set model.pretrained=" + file + " --set train.epochs=1" +
                             " --set 'data.label_columns=[\"ETT - Abnormal\", \"NGT - Normal\"]'");
  ASSERT_EQ(f.status, 0) << f.output;
  EXPECT_NE(f.output.find("classifier freshly initialised (shape differs: fc.weight [11,"), std::string::npos)
      << f.output;
  EXPECT_NE(f.output.find("was trained with input mean [0.4] std [0.3]; this run normalises with "
                          "model.input_mean [0.0] model.input_std [1.0]"),
            std::string::npos)
      << f.output;
}

TEST_F(CliTest, VersionNamesTheLibraries) {
  const auto v = run_command(bin() + " --version");
  EXPECT_EQ(v.status, 0) << v.output;
  for (const char* part : {"ranzcr ", "LibTorch ", "OpenCV ", "NCCL ", "JPEG decoder "})
    EXPECT_NE(v.output.find(part), std::string::npos) << part << " in " << v.output;
  // The JPEG line names the library: linked in with its SIMD state (the offline bundle; the rehearsal
  // requires "SIMD yes"), or the shared libjpeg Debian's OpenCV loaded.
  const std::string jpeg = v.output.substr(v.output.find("JPEG decoder "));
  EXPECT_TRUE(jpeg.find("SIMD yes") != std::string::npos || jpeg.find("SIMD no") != std::string::npos ||
              jpeg.find("libjpeg.so") != std::string::npos)
      << jpeg;
}

TEST_F(CliTest, UserErrorsGiveOneLineAndNonZeroExit) {
  const std::string d = dir_->str();
  expect_user_error("trian --config x.yaml", "unknown command 'trian'; the commands are train, evaluate");
  expect_user_error("", "no command given");
  expect_user_error("train --config " + d + "/nope.yaml", "config file not found");
  test::write_file(d + "/unknown.yaml", "train:\n  epochs: 1\n  epohcs: 2\n");
  expect_user_error("train --config " + d + "/unknown.yaml",
                    "unknown config key 'train.epohcs' at " + d + "/unknown.yaml:3");
  test::write_file(d + "/type.yaml", "train:\n  epochs: three\n");
  expect_user_error("train --config " + d + "/type.yaml",
                    "'train.epochs' at " + d + "/type.yaml:2: expected an integer");
  expect_user_error("train --config " + cfg() + " --set data.root=" + d + "/absent", "data set not found");
  expect_user_error("train --config " + cfg() + " --set model.name=resnet9", "unknown model name 'resnet9'");
  test::write_file(d + "/junk.pt", "not a checkpoint");
  expect_user_error("evaluate --config " + cfg() + " --checkpoint " + d + "/junk.pt",
                    "is not a ranzcr checkpoint");
  expect_user_error("export --checkpoint " + d + "/absent.pt --out " + d + "/x.safetensors",
                    "checkpoint not found");
  expect_user_error("export --checkpoint " + d + "/junk.pt", "--out is required");
  expect_user_error("evaluate --config " + cfg() + " --checkpoint " + d + "/absent.pt",
                    "checkpoint not found");
  if (!torch::cuda::is_available())
    expect_user_error(
        "train --config " + cfg() +
            " --set train.device=auto --set distributed.nproc_per_node=2 --set distributed.backend=nccl",
        "distributed.backend nccl needs GPUs");
  expect_user_error(
      "train --config " + cfg() + " --set distributed.nproc_per_node=2 --set distributed.backend=nccl",
      "distributed.backend nccl needs GPUs, but train.device is cpu");
  expect_user_error("train --config " + cfg() + " --set distributed.nproc_per_node=x",
                    "positive integer or auto");
  expect_user_error("train", "--config is required");
  expect_user_error("train --config " + cfg() + " --set data.root=" + d + "/gen --set synth.root=" + d +
                        "/gen --set synth.generate_if_missing=true --set synth.format=dcm",
                    "synth.format dcm writes .dcm files, but data.image_ext is '.jpg'");
  EXPECT_FALSE(std::filesystem::exists(d + "/gen"));
  expect_user_error("plot " + d, "no metrics.jsonl in " + d);
  expect_user_error("plot", "RUN_DIR is required");
  expect_user_error("bogus", "");
}

// train.device: the shipped quickstart recipe (on the small data set) trains on the CPU when asked to;
// bad values are config errors naming the key.
TEST_F(CliTest, TrainDeviceCpu) {
  const std::string run = *dir_ / "device_cpu", ds = *dir_ / "ds";
  const auto t = run_command(bin() + " train --config " + test::source_dir() + "/configs/quickstart.yaml" +
                             " --set train.device=cpu --set data.root=" + ds + " --set synth.root=" + ds +
                             " --set data.image_size=48 --set train.epochs=1 --set output.dir=" + run);
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("device cpu"), std::string::npos) << t.output;
  EXPECT_NE(test::read_file(run + "/log.txt").find("device cpu"), std::string::npos);
  EXPECT_EQ(load_config(run + "/config.yaml").train.device.kind, DeviceSetting::Kind::kCpu);
  EXPECT_EQ(test::read_metrics(run).size(), 1u);
  for (const char* bad : {"gpu", "cuda:x", "cuda:-1"})
    expect_user_error(
        "train --config " + cfg() + " --set train.device=" + bad,
        std::string("train.device must be auto, cpu, cuda or cuda:N (N a GPU index, 0 or more), got '") +
            bad + "'");
}

// train.device cuda (or cuda:N) on a machine without a GPU: one error line naming train.device, from a
// single process and from the launcher of 2 workers (before it starts any).
TEST_F(CliTest, TrainDeviceCudaWithoutAGpuIsAnError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU";
  const std::string base = "train --config " + cfg() + " --set output.dir=" + *dir_ / "device_cuda";
  expect_user_error(base + " --set train.device=cuda", "train.device cuda: no CUDA GPU is visible");
  expect_user_error(base + " --set train.device=cuda:0", "train.device cuda:0: no CUDA GPU is visible");
  expect_user_error(base + " --set train.device=cuda --set distributed.nproc_per_node=2",
                    "train.device cuda: no CUDA GPU is visible");
  const auto r =
      run_command(bin() + " " + base + " --set train.device=cuda --set distributed.nproc_per_node=2");
  EXPECT_EQ(r.output.find("launching"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "device_cuda/checkpoints")) << r.output;
}

TEST_F(CliTest, MissingCsvImageAndCorruptJpeg) {
  const std::string d = dir_->str();
  test::make_dataset(d + "/broken", 20, 64, 0);
  const std::string base = "train --config " + cfg() + " --set train.epochs=1 --set output.dir=" + d + "/r2";
  std::filesystem::rename(d + "/broken/train.csv", d + "/broken/labels.csv");
  expect_user_error(base + " --set data.root=" + d + "/broken", "data set not found");
  expect_user_error(
      base + " --set data.root=" + d + "/broken --set data.train_csv=labels.csv --set data.id_column=id",
      "'id' (data.id_column)");
  const CsvTable t = read_csv(d + "/broken/labels.csv");
  const std::string victim = d + "/broken/train/" + t.rows[3][0] + ".jpg";
  const std::string bytes = test::read_file(victim);
  std::filesystem::remove(victim);
  expect_user_error(base + " --set data.root=" + d + "/broken --set data.train_csv=labels.csv",
                    "1 images missing");
  test::write_file(victim, bytes.substr(0, bytes.size() / 3));
  expect_user_error(base + " --set data.root=" + d + "/broken --set data.train_csv=labels.csv",
                    "corrupt or truncated JPEG " + victim);
  // ... unless asked to skip such files.
  const auto ok = run_command(bin() + " " + base + " --set data.root=" + d +
                              "/broken --set data.train_csv=labels.csv --set data.skip_bad_images=true");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("unreadable images skipped"), std::string::npos) << ok.output;
}

// bench --profile DIR: a Kineto trace that opens as Chrome trace JSON, with the profiled steps marked and
// the convolution recorded with its input shapes and strides (the layout), and the kernel table (on a CPU,
// operators by self time: the shares of all of them add up to one).
void expect_profile(const std::string& dir, const std::string& output) {
  const auto trace = nlohmann::json::parse(test::read_file(dir + "/trace.json"));
  ASSERT_TRUE(trace.contains("traceEvents")) << dir;
  bool step_marked = false, conv_with_strides = false;
  std::vector<std::pair<double, double>> steps;  // the recorded steps' spans
  std::vector<double> convs;                     // when each convolution started
  for (const auto& e : trace["traceEvents"]) {
    const std::string name = e.value("name", "");
    step_marked |= name == "ProfilerStep#3";  // the second recorded step, after 2 warm-up steps (#0, #1)
    if (name.rfind("ProfilerStep#", 0) == 0 && e.value("cat", "") == "user_annotation")
      steps.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
    if (name == "aten::convolution") convs.push_back(e["ts"].get<double>());
    if (name == "aten::convolution" && e.contains("args")) {
      const auto& args = e["args"];
      conv_with_strides |= args.contains("Input Dims") && args.contains("Input Strides") &&
                           args["Input Dims"][0].size() == 4 && args["Input Strides"][0].size() == 4;
    }
  }
  EXPECT_TRUE(step_marked) << dir;
  EXPECT_TRUE(conv_with_strides) << dir;
  // The warm-up steps ran with the profiler prepared but not recording: every convolution in the trace lies
  // inside one of the 2 recorded steps.
  EXPECT_EQ(steps.size(), 2u) << dir;
  EXPECT_FALSE(convs.empty());
  for (double t : convs)
    EXPECT_TRUE(
        std::any_of(steps.begin(), steps.end(), [t](const auto& s) { return s.first <= t && t <= s.second; }))
        << "a convolution at " << t << " outside the recorded steps";
  const auto k = nlohmann::json::parse(test::read_file(dir + "/kernels.json"));
  EXPECT_EQ(k["implementation"], "ranzcr");
  EXPECT_EQ(k["device"], "cpu");
  EXPECT_EQ(k["steps"], 2);
  EXPECT_EQ(k["kernel_source"], "cpu operators (self time)");
  EXPECT_GT(k["cpu_ms_per_step"].get<double>(), 0.0);
  EXPECT_GT(k["device_ms_per_step"].get<double>(), 0.0);
  double share = 0.0;
  bool conv = false;
  for (const auto& row : k["kernels"]) {
    share += row["share"].get<double>();
    EXPECT_GT(row["calls"].get<int>(), 0);
    conv |= row["name"].get<std::string>().find("conv") != std::string::npos;
  }
  EXPECT_LE(share, 1.0 + 1e-9);
  EXPECT_GT(share, 0.5);  // the top 25 of a small net's operators hold most of the time
  EXPECT_TRUE(conv) << k.dump();
  EXPECT_NE(test::read_file(dir + "/kernels.md").find("| kernel | calls | total ms | share |"),
            std::string::npos);
  EXPECT_NE(output.find(dir + "/kernels.md"), std::string::npos) << output;
}

// Where bench's CPU went: the loader figure ran on the loader's threads, the compute figure on the main
// thread (and at most LibTorch's other OpenMP threads) with no loader thread left, e2e on both; the e2e queue
// was sampled at every timed step, and its shares are shares.
void expect_cpu_figures(const nlohmann::json& j, const std::string& output) {
  EXPECT_NE(output.find("CPU, cores by thread group"), std::string::npos) << output;
  EXPECT_NE(output.find("prefetch queue empty"), std::string::npos) << output;
  const auto& cpu = j["cpu"];
  const auto& loader = cpu["loader"]["groups"];
  ASSERT_TRUE(loader.contains("loader")) << cpu.dump();
  EXPECT_GE(loader["loader"]["threads"].get<int>(), 1)
      << cpu.dump();  // a thread with no CPU in it is left out
  EXPECT_LE(loader["loader"]["threads"].get<int>(), j["loader_workers"].get<int>()) << cpu.dump();
  EXPECT_GT(loader["loader"]["cpu_s"].get<double>(), 0.0);
  const auto& compute = cpu["compute"]["groups"];
  EXPECT_FALSE(compute.contains("loader")) << cpu.dump();
  EXPECT_GT(compute["main"]["cpu_s"].get<double>(), 0.0) << cpu.dump();
  if (compute.contains("intra-op"))  // LibTorch's team, less the main thread (tiny ops may not use it)
    EXPECT_LE(compute["intra-op"]["threads"].get<int>(), j["threads"].get<int>() - 1) << cpu.dump();
  const auto& e2e = cpu["e2e"]["groups"];
  EXPECT_TRUE(e2e.contains("loader") && e2e.contains("main")) << cpu.dump();
  EXPECT_GT(cpu["e2e"]["wall_s"].get<double>(), 0.0);
  EXPECT_GT(cpu["e2e"]["cores"].get<double>(), 0.0);
  for (const char* section : {"loader", "compute", "e2e"}) {
    EXPECT_GE(cpu[section]["page_faults"].get<long>(), 0) << cpu.dump();
    for (const auto& [name, g] : cpu[section]["groups"].items()) {  // kernel time: a part of the CPU time
      EXPECT_GE(g["kernel_s"].get<double>(), 0.0) << section << " " << name;
      EXPECT_LE(g["kernel_s"].get<double>(), g["cpu_s"].get<double>() + 0.05) << section << " " << name;
    }
  }
  EXPECT_NE(output.find("page faults"), std::string::npos) << output;
  EXPECT_EQ(j["e2e_queue_depth_per_step"].size(), j["steps"].get<size_t>());
  for (const auto& depth : j["e2e_queue_depth_per_step"]) EXPECT_GE(depth.get<int>(), 0);
  for (const char* key : {"e2e_batch_wait_share", "e2e_queue_empty_share"}) {
    EXPECT_GE(j[key].get<double>(), 0.0) << key;
    EXPECT_LE(j[key].get<double>(), 1.0) << key;
  }
  EXPECT_GE(j["e2e_batch_wait_ms_per_step"].get<double>(), 0.0);
  EXPECT_GE(j["e2e_queue_depth_mean"].get<double>(), 0.0);
}

// `bench` measures the three throughput figures, prints a table and writes the JSON contract; with
// two ranks (self-launched, Gloo) the figures are the job's and the gradient-sync share is reported.
TEST_F(CliTest, BenchWritesTheThreeFigures) {
  for (int nproc : {1, 2}) {
    const std::string out = *dir_ / ("bench" + std::to_string(nproc) + ".json");
    const std::string profile = *dir_ / ("profile" + std::to_string(nproc));
    // --loader-steps past the prefetch window (4 batches): on a fast machine the loader refills the window
    // while the warm-up takes it, and 3 timed batches would all be made before the clock starts (no loader
    // CPU in the figure's window).
    const auto r = run_command(bin() + " bench --config " + cfg() +
                               " --steps 3 --warmup 1 --loader-steps 12 --out " + out + " --nproc-per-node " +
                               std::to_string(nproc) + " --profile " + profile + " --profile-steps 2");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("e2e"), std::string::npos) << r.output;
    expect_profile(profile, r.output);
    const auto j = nlohmann::json::parse(test::read_file(out));
    EXPECT_EQ(j["versions"]["torch"], j["torch_version"]);
    // On a CPU no cuDNN is used; cuBLAS is what the process loaded: none with a CPU LibTorch, the CUDA
    // build's own (as major.minor.patch) even on a machine without a GPU.
    EXPECT_TRUE(j["versions"]["cudnn"].is_null());
    const auto& cublas = j["versions"]["cublas"];
    EXPECT_TRUE(cublas.is_null() ||
                std::regex_match(cublas.get<std::string>(), std::regex(R"(\d+\.\d+\.\d+)")))
        << cublas;
    EXPECT_EQ(j["profile_dir"], profile);
    for (const char* key : {"loader_images_per_sec", "compute_images_per_sec", "e2e_images_per_sec"})
      EXPECT_GT(j[key].get<double>(), 0.0) << key;
    EXPECT_EQ(j["device"], "cpu");
    EXPECT_EQ(j["model"], "tiny_cnn");
    EXPECT_EQ(j["image_size"], 48);
    EXPECT_EQ(j["batch_size"], 16);
    EXPECT_EQ(j["precision"], "fp32");
    EXPECT_EQ(j["world_size"], nproc);
    EXPECT_EQ(j.contains("sync_wait_share"), nproc > 1);
    expect_cpu_figures(j, r.output);
    if (nproc > 1) {
      EXPECT_GT(j["sync_wait_share"].get<double>(), 0.0);
      EXPECT_LT(j["sync_wait_share"].get<double>(), 1.0);
    }
  }
  expect_user_error("bench --config " + cfg() + " --set train.precision=fp8", "train.precision");
}

// bench --profile into a folder that cannot be made (it would lie under a file): the figures are printed and
// written all the same, the profile is one line, and the exit status is 0; with two ranks too (the other rank
// learns that no profile is taken, so no step is left unpaired).
TEST_F(CliTest, BenchKeepsItsFiguresWhenTheProfileCannotBeWritten) {
  test::write_file(*dir_ / "a-file", "not a folder");
  for (int nproc : {1, 2}) {
    const std::string out = *dir_ / ("bench-noprofile" + std::to_string(nproc) + ".json");
    const std::string profile = *dir_ / "a-file/profile";
    const auto r = run_command(bin() + " bench --config " + cfg() + " --steps 2 --warmup 0 --out " + out +
                               " --nproc-per-node " + std::to_string(nproc) + " --profile " + profile);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto j = nlohmann::json::parse(test::read_file(out));
    for (const char* key : {"loader_images_per_sec", "compute_images_per_sec", "e2e_images_per_sec"})
      EXPECT_GT(j[key].get<double>(), 0.0) << key;
    EXPECT_NE(j.value("profile_error", "").find(profile), std::string::npos) << j.dump();
    size_t lines = 0;
    for (size_t at = r.output.find("profile: failed"); at != std::string::npos;
         at = r.output.find("profile: failed", at + 1))
      ++lines;
    EXPECT_EQ(lines, 1u) << r.output;
    EXPECT_LT(r.output.find("e2e"), r.output.find("profile: failed")) << "the figures come first:\n"
                                                                      << r.output;
  }
}

// train.num_threads: 0 in a job of two ranks: each rank takes OMP_NUM_THREADS when it is set (as PyTorch and
// torchrun have it), else this machine's usable CPUs shared between the two (bench's JSON records rank 0's).
TEST_F(CliTest, ThreadsOfEachRankComeFromOmpNumThreadsOrTheSharedCores) {
  const auto threads = [&](const std::string& env) {
    const std::string out = *dir_ / "threads.json";
    const auto r =
        run_command(env + " " + bin() + " bench --config " + cfg() +
                    " --steps 1 --warmup 0 --nproc-per-node 2 --set train.num_threads=0 --out " + out);
    EXPECT_EQ(r.status, 0) << r.output;
    return r.status == 0 ? nlohmann::json::parse(test::read_file(out))["threads"].get<int>() : -1;
  };
  const int cpus = usable_cpus(current_environment());
  if (cpus < 2) GTEST_SKIP() << "one CPU: OMP_NUM_THREADS=2 and the shared cores would both be 1 thread";
  EXPECT_EQ(threads("OMP_NUM_THREADS=2"),
            2);  // LibTorch caps it at the cores: 2 is the most a 2-core machine shows
  EXPECT_EQ(threads("env -u OMP_NUM_THREADS"), cpus / 2);
}

}  // namespace
}  // namespace ranzcr
