// model.pretrained: timm through the local Hub (tests/hub/fake_hub.py) serving real timm weights (timm 1.0.31
// create_model(pretrained=False) saved by timm's save_for_hf): the weights ranzcr starts from give timm's
// logits; `train` logs and pins them; a 2-process job downloads once; HF_HUB_OFFLINE; and the cache is the
// one the real huggingface_hub (from PyPI, in .venv) reads and writes, in both directions.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include "tests/test_util.h"

#include <cstdlib>
#include <filesystem>

#include "apps/hub_weights.h"
#include "engine/io/pretrained.h"
#include "engine/io/safetensors.h"
#include "net/http.h"
#include "tests/build_paths.h"
#include "tests/hub/fake_hub.h"

namespace fs = std::filesystem;

namespace ranzcr::test {
namespace {

constexpr int kSkip = 77;
const char* kRepo = "timm/resnet18.a1_in1k";

// One local Hub with timm's resnet18 weights for the whole suite (making them takes seconds).
class PretrainedHub : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    hub_ = new FakeHub();
    commit_ = hub_->add_timm_repo(kRepo, "resnet18");
    data_ = new TempDir();
    make_dataset(*data_ / "ds", 40, 64, 0);
  }
  static void TearDownTestSuite() {
    delete hub_;
    delete data_;
  }
  void SetUp() override {
    if (net::http_client_version().empty()) GTEST_SKIP() << "this build has no libcurl";
    if (commit_.empty())
      RANZCR_SKIP_WITHOUT_REFERENCE(
          "no torch, timm, safetensors or huggingface_hub in .venv to make timm weights");
  }
  std::vector<std::string> train_args(const std::string& run, const std::vector<std::string>& sets = {}) {
    write_config(dir_ / "cfg.yaml", *data_ / "ds",
                 {{"model.name", "resnet18"},
                  {"model.pretrained", "timm"},
                  {"train.epochs", "1"},
                  {"train.batch_size", "8"},
                  {"data.image_size", "64"},
                  {"data.num_workers", "1"}});
    std::vector<std::string> args = {"train", "--config", dir_ / "cfg.yaml", "--set", "output.dir=" + run};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    return args;
  }
  static inline FakeHub* hub_ = nullptr;
  static inline TempDir* data_ = nullptr;
  static inline std::string commit_;
  TempDir dir_;
};

// The app's own step (resolve_weights with the environment's Hub options) then starting_model, as the
// trainer does; timm loads the same file.
TEST_F(PretrainedHub, TheModelStartsFromTimmsWeights) {
  const std::string python = venv_python();
  for (const int channels : {1, 3}) {
    ::setenv("HF_ENDPOINT", hub_->endpoint().c_str(), 1);
    ::setenv("HF_HUB_CACHE", (dir_ / "cache").c_str(), 1);
    ::unsetenv("HF_HUB_OFFLINE");
    Config config;
    config.model.name = "resnet18";
    config.model.pretrained.kind = hub::PretrainedSource::Kind::kTimm;
    config.model.in_channels = channels;
    RunLog log(false);
    const ResolvedWeights weights =
        resolve_weights(config, hub_options(log), /*network=*/true, "", pretrained_log(log));
    const Config resolved = config_with(config, weights);
    EXPECT_EQ(setting_text(resolved.model.pretrained), std::string("hf-hub:") + kRepo + "@" + commit_);
    EXPECT_EQ(weights.file,
              dir_ / "cache" + "/models--timm--resnet18.a1_in1k/snapshots/" + commit_ + "/model.safetensors");
    if (channels == 1) {  // the mean of timm's RGB statistics, as the first conv sums RGB
      ASSERT_EQ(resolved.model.input_mean.size(), 1u);
      EXPECT_NEAR(resolved.model.input_mean[0], (0.485 + 0.456 + 0.406) / 3, 1e-12);
      EXPECT_NEAR(resolved.model.input_std[0], (0.229 + 0.224 + 0.225) / 3, 1e-12);
    } else {
      EXPECT_EQ(resolved.model.input_mean, (std::vector<double>{0.485, 0.456, 0.406}));
      EXPECT_EQ(resolved.model.input_std, (std::vector<double>{0.229, 0.224, 0.225}));
    }
    // 1000 classes: timm's classifier is kept, so every logit comes from the served weights.
    auto model = starting_model(resolved, weights, 1000, torch::kCPU, /*channels_last=*/false).model;
    model->eval();
    torch::manual_seed(5);
    const torch::Tensor input = torch::randn({2, channels, 96, 96});
    torch::Tensor logits;
    {
      torch::NoGradGuard no_grad;
      logits = model->forward(input);
    }
    const std::string data = dir_ / ("logits" + std::to_string(channels) + ".safetensors");
    save_safetensors(data, {{"__input__", input}, {"__logits__", logits}}, {});
    const CommandResult r =
        run_command(python + " -W ignore '" + FakeHub::script("timm_logits.py") +
                    "' --model resnet18 --num-classes 1000 --in-chans " + std::to_string(channels) +
                    " --weights '" + weights.file + "' --data '" + data + "'");
    if (r.status == kSkip) RANZCR_SKIP_WITHOUT_REFERENCE(r.output);
    EXPECT_EQ(r.status, 0) << r.output;
    std::cout << r.output;
  }
}

TEST_F(PretrainedHub, TrainLogsAndPinsTheWeightsAndResumesWithoutTheNetwork) {
  const std::string run = dir_ / "run";
  const EnvMap env = hub_->env(dir_ / "cache");
  CommandResult r = run_ranzcr(train_args(run), env, dir_ / "train.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, std::string("pretrained: ") + kRepo + " revision main = commit " + commit_ +
                                     ", model.safetensors ("))
      << r.output;
  EXPECT_TRUE(
      contains(r.output, ", downloaded) " + dir_ / "cache" + "/models--timm--resnet18.a1_in1k/snapshots/"))
      << r.output;
  EXPECT_TRUE(
      contains(r.output,
               "pretrained: normalisation mean [0.449] std [0.226] (from config.json; the weights' RGB "
               "mean [0.485, 0.456, 0.406] std [0.229, 0.224, 0.225])"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "pretrained: 120 tensors from " + dir_ / "cache" +
                                     "/models--timm--resnet18.a1_in1k/snapshots/" + commit_ +
                                     "/model.safetensors; first conv adapted"))
      << r.output;
  const std::string yaml = read_file(run + "/config.yaml");
  EXPECT_TRUE(contains(yaml, std::string("pretrained: hf-hub:") + kRepo + "@" + commit_)) << yaml;
  EXPECT_TRUE(contains(yaml, "input_mean:\n    - 0.449")) << yaml;
  EXPECT_FALSE(contains(yaml, "pretrained_file")) << yaml;
  // main moves on; the same command continues the run with the weights its checkpoint pinned, from the cache:
  // no request reaches the Hub.
  const std::string other = hub_->add_timm_repo(kRepo, "resnet18", /*seed=*/1);
  ASSERT_NE(other, commit_);
  const int heads = hub_->stats()["head"].get<int>();
  r = run_ranzcr(train_args(run, {"train.epochs=2"}), env, dir_ / "resume.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "pinned " + std::string(kRepo) + " at commit " + commit_ + ": using it"))
      << r.output;
  EXPECT_TRUE(contains(r.output, std::string(kRepo) + " commit " + commit_ + ", model.safetensors ("))
      << r.output;
  EXPECT_EQ(hub_->stats()["head"].get<int>(), heads);
  // A new run gets main's new weights; one that resumes the first run's checkpoint by --resume gets its own.
  r = run_ranzcr(train_args(dir_ / "run2"), env, dir_ / "train2.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "revision main = commit " + other)) << r.output;
  auto resume_args = train_args(dir_ / "run3", {"train.epochs=3"});
  resume_args.insert(resume_args.end(), {"--resume", run + "/checkpoints/last.pt"});
  r = run_ranzcr(resume_args, env, dir_ / "resume3.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, std::string(kRepo) + " commit " + commit_ + ", model.safetensors ("))
      << r.output;
  EXPECT_TRUE(contains(read_file(dir_ / "run3/config.yaml"), "@" + commit_))
      << read_file(dir_ / "run3/config.yaml");
  hub_->move_main(kRepo, commit_);  // main back for the other tests
}

TEST_F(PretrainedHub, OfflineTrainsFromTheCacheOrNamesTheFetchCommand) {
  EnvMap env = hub_->env(dir_ / "cache");
  env["HF_HUB_OFFLINE"] = "1";
  CommandResult r = run_ranzcr(train_args(dir_ / "run"), env, dir_ / "offline.log");
  EXPECT_NE(r.status, 0);
  const auto errors = error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_EQ(errors[0],
            "error: model.pretrained timm: " + std::string(kRepo) +
                " model.safetensors (revision main) is not in the Hugging Face cache " + dir_ / "cache" +
                ", and HF_HUB_OFFLINE=1 forbids downloading it; on a machine with network run `ranzcr "
                "fetch-weights resnet18` and copy " +
                dir_ / "cache" + " here (or unset HF_HUB_OFFLINE)");
  EXPECT_FALSE(fs::exists(dir_ / "run/checkpoints/last.pt"));
  env["HF_HUB_OFFLINE"] = "0";
  r = run_ranzcr({"fetch-weights", "resnet18"}, env, dir_ / "fetch.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(
      contains(r.output, "resnet18: hf-hub:" + std::string(kRepo) + "@" + commit_ + " model.safetensors "))
      << r.output;
  env["HF_HUB_OFFLINE"] = "1";
  const nlohmann::json before = hub_->stats();
  r = run_ranzcr(train_args(dir_ / "run"), env, dir_ / "offline2.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "= commit " + commit_ + ", model.safetensors (")) << r.output;
  EXPECT_TRUE(contains(r.output, ", cached) ")) << r.output;
  EXPECT_EQ(hub_->stats()["head"], before["head"]) << "HF_HUB_OFFLINE=1 asked the Hub";
}

// Under torchrun the node's first process fetches while the others wait at a barrier, then read the cache.
TEST_F(PretrainedHub, ATorchrunJobDownloadsOnce) {
  const std::string torchrun = std::string(test::source_dir()) + "/.venv/bin/torchrun";
  if (!fs::exists(torchrun)) RANZCR_SKIP_WITHOUT_REFERENCE("no torchrun at " << torchrun);
  std::vector<std::string> args = {"--standalone", "--nproc-per-node=2", "--no-python",
                                   test::ranzcr_binary()};
  for (const auto& a : train_args(dir_ / "run")) args.push_back(a);
  EnvMap env = hub_->env(dir_ / "cache");
  env["OMP_NUM_THREADS"] = "1";
  const int before = hub_->stats()["cdn_get"].get<int>();
  const pid_t agent = spawn(args, env, dir_ / "torchrun.log", torchrun);
  ASSERT_EQ(wait_exit(agent, 600), 0) << read_file(dir_ / "torchrun.log");
  EXPECT_EQ(hub_->stats()["cdn_get"].get<int>() - before, 1) << read_file(dir_ / "torchrun.log");
  EXPECT_TRUE(contains(read_file(dir_ / "run/config.yaml"), "@" + commit_));
}

TEST_F(PretrainedHub, ATwoProcessJobDownloadsOnce) {
  const int before = hub_->stats()["cdn_get"].get<int>();
  const CommandResult r = run_ranzcr(
      [&] {
        auto a = train_args(dir_ / "run");
        a.insert(a.end(), {"--nproc-per-node", "2"});
        return a;
      }(),
      hub_->env(dir_ / "cache"), dir_ / "ddp.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(hub_->stats()["cdn_get"].get<int>() - before, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "world size 2")) << r.output;
}

TEST_F(PretrainedHub, TheCacheIsSharedWithHuggingFaceHubBothWays) {
  const std::string python = venv_python();
  if (!python_has(python, "huggingface_hub")) RANZCR_SKIP_WITHOUT_REFERENCE("no huggingface_hub in .venv");
  const std::string check = python + " -W ignore '" + FakeHub::script("hf_cache_check.py") + "' ";
  const std::string endpoint = "HF_ENDPOINT=" + hub_->endpoint() + " HF_HUB_DISABLE_TELEMETRY=1 ";
  // 1. huggingface_hub fills a cache; ranzcr uses it with the network forbidden.
  const std::string a = dir_ / "from-python";
  CommandResult r = run_command(endpoint + "HF_HUB_CACHE=" + a + " " + check + "download " + kRepo +
                                " model.safetensors config.json");
  ASSERT_EQ(r.status, 0) << r.output;
  EnvMap env = hub_->env(a);
  env["HF_HUB_OFFLINE"] = "1";
  r = run_ranzcr({"fetch-weights", "resnet18"}, env, dir_ / "a.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "@" + commit_ + " model.safetensors ")) << r.output;
  EXPECT_TRUE(contains(r.output, " already cached mean [0.485, 0.456, 0.406] std [0.229, 0.224, 0.225]"))
      << r.output;
  // 2. ranzcr fills a cache; huggingface_hub finds every file, scan_cache_dir has no warning, and
  //    hf_hub_download fetches nothing more.
  const std::string b = dir_ / "from-ranzcr";
  r = run_ranzcr({"fetch-weights", "resnet18"}, hub_->env(b), dir_ / "b.log");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command("HF_HUB_CACHE=" + b + " " + check + "check " + kRepo + " model.safetensors config.json");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "warnings: 0")) << r.output;
  EXPECT_TRUE(contains(r.output, "repo " + std::string(kRepo) + ": 2 files")) << r.output;
  EXPECT_TRUE(contains(r.output, "refs main")) << r.output;
  const int gets = hub_->stats()["cdn_get"].get<int>();
  r = run_command(endpoint + "HF_HUB_CACHE=" + b + " " + check + "download " + kRepo +
                  " model.safetensors config.json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(
      contains(r.output, b + "/models--timm--resnet18.a1_in1k/snapshots/" + commit_ + "/model.safetensors"))
      << r.output;
  EXPECT_EQ(hub_->stats()["cdn_get"].get<int>(), gets)
      << "huggingface_hub downloaded again what ranzcr had cached";
}

}  // namespace
}  // namespace ranzcr::test
