// The inference backends end to end, as real processes: `export --out x.onnx` writes a checked graph whose
// metadata reads back; predict, evaluate and serve (/v1/predict and /v2/.../infer) under infer.backend
// openvino (f32) give LibTorch's numbers within 1e-4, and evaluate's default reproduces the AUC training
// logged; the bad settings and exports are one line each, and a failed export leaves no file behind.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "data/csv.h"
#include "data/synth.h"
#include "engine/infer/model_runner.h"
#include "onnx/onnx_export.h"
#include "tests/apps/serve_server.h"
#include "tests/apps/user_error.h"
#include "tests/build_paths.h"
#include "tests/http_client.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using nlohmann::json;
using test::run_command;

class InferBackendTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    ASSERT_NO_FATAL_FAILURE(test::train_tiny_model(dir_->str(), 60, 64, 6, 2));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!openvino_available() || !onnx_export_available())
      RANZCR_SKIP_WITHOUT_REFERENCE("this build has no OpenVINO or no ONNX (scripts/setup.sh installs them)");
  }
  static std::string bin() { return test::ranzcr_binary(); }
  static std::string checkpoint() { return *dir_ / "run/checkpoints/best.pt"; }
  // predict's CSV under `sets` (e.g. " --set infer.backend=openvino").
  static CsvTable predict(const std::string& sets, const std::string& out) {
    const auto r = run_command(bin() + " predict --checkpoint " + checkpoint() + " --images " +
                               (*dir_ / "ds/test") + " --out " + out + sets);
    EXPECT_EQ(r.status, 0) << r.output;
    return read_csv(out);
  }
  // Runs the binary and checks it failed with exactly one `error: ` line containing `expected`.
  static void expect_user_error(const std::string& args, const std::string& expected) {
    test::expect_user_error(bin() + " " + args, expected);
  }
  static inline test::TempDir* dir_ = nullptr;
};

// The largest difference of two predict CSVs' probabilities (same rows, same columns).
double largest_difference(const CsvTable& a, const CsvTable& b) {
  EXPECT_EQ(a.header, b.header);
  EXPECT_EQ(a.rows.size(), b.rows.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.rows.size() && i < b.rows.size(); ++i) {
    EXPECT_EQ(a.rows[i][0], b.rows[i][0]);
    for (size_t c = 1; c < a.header.size(); ++c)
      worst = std::max(worst, std::abs(std::stod(a.rows[i][c]) - std::stod(b.rows[i][c])));
  }
  return worst;
}

TEST_F(InferBackendTest, ExportWritesACheckedGraphWhoseMetadataReadsBack) {
  const std::string out = *dir_ / "model.onnx";
  const auto r = run_command(bin() + " export --checkpoint " + checkpoint() + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("ONNX opset 17"), std::string::npos) << r.output;
  const auto meta = onnx_metadata(test::read_file(out));
  EXPECT_EQ(meta.at("format"), "ranzcr-onnx");
  EXPECT_EQ(meta.at("model_name"), "tiny_cnn");
  EXPECT_EQ(meta.at("in_chans"), "1");
  EXPECT_EQ(meta.at("image_size"), "256");  // data.image_size of test::write_config
  EXPECT_EQ(meta.at("input"), "images");
  EXPECT_EQ(json::parse(meta.at("label_names")).get<std::vector<std::string>>(), ranzcr_label_names());
  EXPECT_EQ(json::parse(meta.at("outputs")), json({"logits", "probabilities"}));
  EXPECT_EQ(meta.at("epoch"), "2");
  EXPECT_FALSE(json::parse(meta.at("mean")).empty());
}

TEST_F(InferBackendTest, PredictAndEvaluateUnderOpenVinoGiveLibTorchsNumbers) {
  const CsvTable torch = predict(" --set infer.backend=libtorch", *dir_ / "libtorch.csv");
  const CsvTable f32 =
      predict(" --set infer.backend=openvino --set infer.precision=fp32", *dir_ / "ov32.csv");
  EXPECT_LE(largest_difference(torch, f32), 1e-4);
  const CsvTable by_default = predict("", *dir_ / "default.csv");  // this CPU's own precision
  const double d = largest_difference(torch, by_default);
  std::cout << "predict's default ("
            << backend_name(BackendOptions{InferBackend::kOpenVino, InferPrecisionSetting::kAuto, 0})
            << ") against LibTorch: largest difference " << d << "\n";
  EXPECT_LE(d, openvino_cpu_has_bf16() ? 2e-2 : 1e-4);

  // evaluate: by default the AUC training logged for best.pt (LibTorch, as validation ran it); under OpenVINO
  // f32 its loss is LibTorch's within 1e-5 (the AUC of a barely trained model may still move on near-ties).
  double best = -1;
  for (const auto& m : test::read_metrics(*dir_ / "run"))
    best = std::max(best, m["val_auc_mean"].get<double>());
  auto evaluate = [&](const std::string& sets, const std::string& out) {
    const auto e =
        run_command(bin() + " evaluate --checkpoint " + checkpoint() + " --bootstrap 0 --out " + out + sets);
    EXPECT_EQ(e.status, 0) << e.output;
    return std::make_pair(e.output, json::parse(test::read_file(out)));
  };
  const auto [log, lt] = evaluate("", *dir_ / "eval.json");
  EXPECT_NE(log.find("run by libtorch"), std::string::npos) << log;
  EXPECT_DOUBLE_EQ(lt["auc_mean"].get<double>(), best);
  const auto [ov_log, ov] = evaluate(" --set infer.backend=openvino", *dir_ / "eval_ov.json");
  EXPECT_NE(ov_log.find("run by openvino f32"), std::string::npos) << ov_log;
  EXPECT_NEAR(ov["loss"].get<double>(), lt["loss"].get<double>(), 1e-5);
  std::cout << "evaluate's AUC: " << lt["auc_mean"] << " (libtorch), " << ov["auc_mean"]
            << " (openvino f32); logged " << best << "\n";
}

// base64 of `bytes` (the /v2 infer request's plain-JSON form).
std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += k[(v >> s) & 63];
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (two ? uint8_t(bytes[i + 1]) << 8 : 0);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += two ? k[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// Under each backend, serve's /v1/predict and /v2/models/NAME/infer answer that backend's predict.
TEST_F(InferBackendTest, ServeAnswersPredictsNumbersUnderEachBackend) {
  for (const std::string backend : {"libtorch", "openvino"}) {
    SCOPED_TRACE(backend);
    const std::string sets = " --set infer.backend=" + backend + " --set infer.precision=fp32";
    const CsvTable sub = predict(sets, *dir_ / ("serve_" + backend + ".csv"));
    test::ServeProcess server(
        *dir_ / ("serve_" + backend + ".log"),
        {"--checkpoint", checkpoint(), "--set", "infer.backend=" + backend, "--set", "infer.precision=fp32"});
    ASSERT_GT(server.port(), 0) << server.log();
    EXPECT_NE(server.log().find("run by " + std::string(backend == "libtorch" ? "libtorch" : "openvino f32")),
              std::string::npos)
        << server.log();
    for (size_t i = 0; i < sub.rows.size(); ++i) {
      const std::string file = test::read_file(*dir_ / ("ds/test/" + sub.rows[i][0] + ".jpg"));
      const auto v1 = server.client().Post("/v1/predict", {}, file, "application/octet-stream");
      ASSERT_TRUE(v1 && v1->status == 200) << (v1 ? v1->body : "no answer");
      const json request = {{"inputs",
                             {{{"name", "image"},
                               {"shape", {1}},
                               {"datatype", "BYTES"},
                               {"parameters", {{"content_type", "base64"}}},
                               {"data", {base64(file)}}}}}};
      const auto v2 = server.client().Post("/v2/models/ranzcr/infer", {}, request.dump(), "application/json");
      ASSERT_TRUE(v2 && v2->status == 200) << (v2 ? v2->body : "no answer");
      const json a = json::parse(v1->body), b = json::parse(v2->body);
      const std::vector<double> p2 = b["outputs"][0]["data"].get<std::vector<double>>();
      for (size_t c = 1; c < sub.header.size(); ++c) {
        const double want = std::stod(sub.rows[i][c]);
        EXPECT_NEAR(a["probabilities"][sub.header[c]].get<double>(), want, 1e-6) << sub.header[c];
        EXPECT_NEAR(p2.at(c - 1), want, 1e-6) << sub.header[c];
      }
    }
  }
}

TEST_F(InferBackendTest, BadSettingsAreOneLine) {
  const std::string predict_args = "predict --checkpoint " + checkpoint() + " --images " +
                                   (*dir_ / "ds/test") + " --out " + (*dir_ / "x.csv");
  expect_user_error(predict_args + " --set infer.backend=tensorrt", "infer.backend");
  expect_user_error(predict_args + " --set infer.precision=fp16", "infer.precision");
  if (!openvino_cpu_has_bf16())
    expect_user_error(predict_args + " --set infer.backend=openvino --set infer.precision=bf16",
                      "this CPU has no native bf16");
}

// A folder nobody may write, even root (these tests run as root in CI): a read-only tmpfs mounted over a
// fresh folder where mounting is allowed, else a folder without write permission. Unmounted at the end.
class ReadOnlyFolder {
 public:
  explicit ReadOnlyFolder(const std::string& path) : path_(path) {
    std::filesystem::create_directories(path);
    mounted_ = ::geteuid() == 0 && ::mount("tmpfs", path.c_str(), "tmpfs", MS_RDONLY, "size=1m") == 0;
    if (!mounted_)
      std::filesystem::permissions(path,
                                   std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  ~ReadOnlyFolder() {
    if (mounted_) ::umount(path_.c_str());
  }
  bool truly_read_only() const { return mounted_ || ::geteuid() != 0; }

 private:
  std::string path_;
  bool mounted_ = false;
};

TEST_F(InferBackendTest, FailedExportsAreOneLineAndLeaveNoFile) {
  const std::string d = *dir_ / "exports";
  std::filesystem::create_directories(d);
  expect_user_error("export --checkpoint " + checkpoint() + " --out " + d + "/model.pb",
                    "expected .safetensors or .onnx");
  EXPECT_FALSE(std::filesystem::exists(d + "/model.pb"));
  // A corrupt checkpoint: the file already there stays as it was.
  test::write_file(d + "/kept.onnx", "an earlier export");
  test::write_file(d + "/junk.pt", "not a checkpoint");
  expect_user_error("export --checkpoint " + d + "/junk.pt --out " + d + "/kept.onnx",
                    "is not a ranzcr checkpoint");
  EXPECT_EQ(test::read_file(d + "/kept.onnx"), "an earlier export");
  ReadOnlyFolder ro(d + "/read-only");
  if (!ro.truly_read_only()) GTEST_SKIP() << "root without mount(2): no folder is read-only to it here";
  expect_user_error("export --checkpoint " + checkpoint() + " --out " + d + "/read-only/model.onnx",
                    "cannot write");
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(d + "/read-only"))
    left.push_back(e.path().string());
  EXPECT_TRUE(left.empty()) << left.front();
}

// An ensemble of the folds of a cv-like folder: one graph; members of other input sizes: one line.
TEST_F(InferBackendTest, EnsembleExportNeedsOneInputSize) {
  const std::string cv = *dir_ / "cv";
  for (int k : {0, 1}) {
    std::filesystem::create_directories(cv + "/fold_" + std::to_string(k) + "/checkpoints");
    std::filesystem::copy_file(checkpoint(), cv + "/fold_" + std::to_string(k) + "/checkpoints/best.pt");
  }
  const auto r = run_command(bin() + " export --checkpoints-from " + cv + " --out " + cv + "/ensemble.onnx");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("an ensemble of 2 models"), std::string::npos) << r.output;
  EXPECT_EQ(json::parse(onnx_metadata(test::read_file(cv + "/ensemble.onnx")).at("outputs")),
            json({"probabilities"}));
  const auto t = run_command(bin() + " train --config " + (*dir_ / "cfg.yaml") + " --set data.image_size=48" +
                             " --set train.epochs=1 --set output.dir=" + cv + "/fold_1");
  ASSERT_EQ(t.status, 0) << t.output;
  expect_user_error("export --checkpoints-from " + cv + " --out " + cv + "/mixed.onnx",
                    "their input sizes differ");
  EXPECT_FALSE(std::filesystem::exists(cv + "/mixed.onnx"));
}

}  // namespace
}  // namespace ranzcr
