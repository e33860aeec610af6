// hub/: the Hugging Face cache layout, downloads against a local Hub (tests/hub/fake_hub.py, a real HTTP
// server on 127.0.0.1 answering as the Hub documents), their failures, and `ranzcr fetch-weights` as
// processes (killed mid-download, two at once, a full disk).
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "hub/download.h"
#include "hub/hub_cache.h"
#include "hub/pretrained_weights.h"
#include "models/registry.h"
#include "net/http.h"
#include "tests/hub/fake_hub.h"

namespace fs = std::filesystem;

namespace ranzcr::test {
namespace {

using hub::HubError;
using hub::HubErrorKind;

bool can_download() {
  return !net::http_client_version().empty();
}

hub::HubOptions options_for(const FakeHub& hub, const std::string& cache,
                            std::vector<std::string>* notes = nullptr) {
  hub::HubOptions o;
  o.endpoint = hub.endpoint();
  o.cache_dir = cache;
  o.token = "";
  o.backoff_s = 0.05;
  o.retries = 3;
  if (notes) o.note = [notes](const std::string& line) { notes->push_back(line); };
  return o;
}

HubErrorKind error_kind(const std::function<void()>& f, std::string* message) {
  try {
    f();
  } catch (const HubError& e) {
    *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "no HubError";
  return HubErrorKind::kOther;
}

bool any_contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines)
    if (contains(l, part)) return true;
  return false;
}

TEST(HubCache, NamesAsHuggingFaceHub) {
  EXPECT_EQ(hub::repo_folder_name("timm/resnet50.a1_in1k"), "models--timm--resnet50.a1_in1k");
  EXPECT_TRUE(hub::is_commit_hash(std::string(40, 'a')));
  EXPECT_FALSE(hub::is_commit_hash(std::string(40, 'A')));
  EXPECT_FALSE(hub::is_commit_hash("main"));
  hub::RepoCache cache("/c", "org/name");
  EXPECT_EQ(cache.blob_path("abc"), "/c/models--org--name/blobs/abc");
  EXPECT_EQ(cache.lock_path("abc"), "/c/.locks/models--org--name/abc.lock");
  EXPECT_EQ(cache.snapshot_path("c0", "sub/f.txt"), "/c/models--org--name/snapshots/c0/sub/f.txt");
  for (const std::string bad : {"noslash", "a/b/c", "a--b/c", "a/b..c", "-a/b", "a/", "a b/c"}) {
    std::string message;
    EXPECT_EQ(error_kind([&] { hub::check_repo_id(bad); }, &message), HubErrorKind::kOther) << bad;
    EXPECT_TRUE(contains(message, "'" + bad + "' is not a Hub repository id")) << message;
  }
}

TEST(HubOptions, FromTheEnvironmentAsHuggingFaceHub) {
  TempDir dir;
  auto o = hub::hub_options_from_env({{"HOME", "/home/u"}});
  EXPECT_EQ(o.cache_dir, "/home/u/.cache/huggingface/hub");
  EXPECT_EQ(o.endpoint, "https://huggingface.co");
  EXPECT_FALSE(o.offline);
  o = hub::hub_options_from_env({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/x"}});
  EXPECT_EQ(o.cache_dir, "/x/huggingface/hub");
  o = hub::hub_options_from_env(
      {{"HOME", "/home/u"}, {"HF_HOME", dir.str()}, {"HF_ENDPOINT", "http://h:1/"}});
  EXPECT_EQ(o.cache_dir, dir.str() + "/hub");
  EXPECT_EQ(o.endpoint, "http://h:1");
  o = hub::hub_options_from_env({{"HF_HOME", "/a"}, {"HF_HUB_CACHE", "/b"}, {"HF_HUB_OFFLINE", "yes"}});
  EXPECT_EQ(o.cache_dir, "/b");
  EXPECT_TRUE(o.offline);
  EXPECT_TRUE(hub::hub_options_from_env({{"TRANSFORMERS_OFFLINE", "1"}}).offline);
  EXPECT_FALSE(hub::hub_options_from_env({{"HF_HUB_OFFLINE", "0"}}).offline);
  // The token: HF_TOKEN, else the file `hf auth login` writes ($HF_HOME/token).
  write_file(dir / "token", "hf_from_file\n");
  EXPECT_EQ(hub::hub_options_from_env({{"HF_HOME", dir.str()}}).token, "hf_from_file");
  EXPECT_EQ(hub::hub_options_from_env({{"HF_HOME", dir.str()}, {"HF_TOKEN", "hf_env"}}).token, "hf_env");
  std::string message;
  EXPECT_EQ(error_kind(
                [&] {
                  hub::hub_options_from_env({{"HF_HUB_DOWNLOAD_TIMEOUT", "soon"}});
                },
                &message),
            HubErrorKind::kOther);
  EXPECT_TRUE(contains(message, "HF_HUB_DOWNLOAD_TIMEOUT=soon: expected a number of seconds")) << message;
}

class HubDownload : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!can_download()) GTEST_SKIP() << "this build has no libcurl (RANZCR_WITH_CURL=OFF)";
    write_random_file(dir_ / "weights", 3'000'000);
    write_file(dir_ / "config.json",
               R"({"pretrained_cfg": {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}})");
    commit_ = hub_.add_repo("org/model",
                            {"model.safetensors=" + dir_ / "weights", "config.json=" + dir_ / "config.json"});
    ASSERT_EQ(commit_.size(), 40u) << commit_;
    sha_ = net::file_sha256(dir_ / "weights");
  }
  std::string cache() const { return dir_ / "cache"; }
  TempDir dir_;
  FakeHub hub_;
  std::string commit_, sha_;
};

TEST_F(HubDownload, WritesTheLayoutHuggingFaceHubReads) {
  const auto o = options_for(hub_, cache());
  const hub::HubFile f = hub::hub_download(o, "org/model", "main", "model.safetensors");
  EXPECT_TRUE(f.downloaded);
  EXPECT_EQ(f.commit, commit_);
  EXPECT_EQ(f.etag, sha_);
  EXPECT_EQ(f.size, 3'000'000);
  const fs::path repo = fs::path(cache()) / "models--org--model";
  EXPECT_EQ(f.path, (repo / "snapshots" / commit_ / "model.safetensors").string());
  ASSERT_TRUE(fs::is_symlink(f.path));
  EXPECT_EQ(fs::read_symlink(f.path).string(), "../../blobs/" + sha_);
  EXPECT_EQ(read_file((repo / "blobs" / sha_).string()), read_file(dir_ / "weights"));
  EXPECT_EQ(read_file((repo / "refs" / "main").string()), commit_);
  EXPECT_TRUE(fs::exists(fs::path(cache()) / ".locks" / "models--org--model" / (sha_ + ".lock")));
  EXPECT_TRUE(fs::exists(fs::path(cache()) / "CACHEDIR.TAG"));
  // A small file is not LFS: its blob is named by its git blob id (the Hub's ETag), SHA-1 of "blob N\0" +
  // bytes.
  const hub::HubFile c = hub::hub_download(o, "org/model", "main", "config.json");
  EXPECT_EQ(c.etag.size(), 40u);
  EXPECT_TRUE(fs::exists(repo / "blobs" / c.etag));
  for (const auto& e : fs::recursive_directory_iterator(cache()))
    EXPECT_NE(e.path().extension(), ".incomplete");
  // Again: asked (HEAD), not fetched; by commit, not even asked: the server may be gone.
  const int gets = hub_.stats()["cdn_get"].get<int>();
  EXPECT_FALSE(hub::hub_download(o, "org/model", "main", "model.safetensors").downloaded);
  EXPECT_EQ(hub_.stats()["cdn_get"].get<int>(), gets);
  hub_.stop();
  const hub::HubFile pinned = hub::hub_download(o, "org/model", commit_, "model.safetensors");
  EXPECT_FALSE(pinned.downloaded);
  EXPECT_EQ(pinned.path, f.path);
}

TEST_F(HubDownload, ACutTransferIsResumedWithARangeRequest) {
  hub_.control(R"({"cut_after": 1000000, "cuts": 1})");
  std::vector<std::string> notes;
  const hub::HubFile f =
      hub::hub_download(options_for(hub_, cache(), &notes), "org/model", "main", "model.safetensors");
  EXPECT_TRUE(f.downloaded);
  EXPECT_EQ(net::file_sha256(f.path), sha_);
  const auto stats = hub_.stats();
  EXPECT_EQ(stats["cdn_get"].get<int>(), 2);
  ASSERT_EQ(stats["cdn_ranges"].size(), 1u) << stats.dump();
  EXPECT_EQ(stats["cdn_ranges"][0].get<int>(), 1000000);
  EXPECT_TRUE(any_contains(notes, "resuming the partial download at 1.0 MB"))
      << testing::PrintToString(notes);
}

TEST_F(HubDownload, ACorruptDownloadIsRefusedAndFetchedAgain) {
  hub_.control(R"({"corrupt": 1})");
  std::vector<std::string> notes;
  const hub::HubFile f =
      hub::hub_download(options_for(hub_, cache(), &notes), "org/model", "main", "model.safetensors");
  EXPECT_EQ(net::file_sha256(f.path), sha_);
  EXPECT_EQ(hub_.stats()["cdn_get"].get<int>(), 2);
  EXPECT_TRUE(any_contains(notes, "org/model/model.safetensors: the download is corrupt (SHA-256 "))
      << testing::PrintToString(notes);
  // Always corrupt: refused after the retries, nothing published.
  fs::remove_all(cache());
  hub_.control(R"({"corrupt": 100})");
  std::string message;
  EXPECT_EQ(
      error_kind(
          [&] { hub::hub_download(options_for(hub_, cache()), "org/model", "main", "model.safetensors"); },
          &message),
      HubErrorKind::kOther);
  EXPECT_TRUE(contains(message, "the download is corrupt")) << message;
  EXPECT_FALSE(fs::exists(fs::path(cache()) / "models--org--model" / "blobs" / sha_));
  EXPECT_FALSE(
      fs::exists(fs::path(cache()) / "models--org--model" / "snapshots" / commit_ / "model.safetensors"));
}

TEST_F(HubDownload, ADamagedBlobInTheCacheIsFetchedAgain) {
  const auto o = options_for(hub_, cache());
  const std::string blob = hub::hub_download(o, "org/model", "main", "model.safetensors").path;
  for (const bool truncate : {true, false}) {
    std::string bytes = read_file(blob);
    if (truncate)
      bytes.resize(1000);
    else
      bytes[12345] ^= 1;  // same size, one bit off
    write_file(fs::canonical(blob).string(), bytes);
    std::vector<std::string> notes;
    const hub::HubFile f =
        hub::hub_download(options_for(hub_, cache(), &notes), "org/model", "main", "model.safetensors");
    EXPECT_TRUE(f.downloaded);
    EXPECT_EQ(net::file_sha256(f.path), sha_);
    EXPECT_TRUE(any_contains(notes, "is damaged (")) << testing::PrintToString(notes);
  }
}

TEST_F(HubDownload, OfflineReadsTheCacheOnly) {
  auto o = options_for(hub_, cache());
  o.offline = true;
  std::string message;
  EXPECT_EQ(error_kind([&] { hub::hub_download(o, "org/model", "main", "model.safetensors"); }, &message),
            HubErrorKind::kOfflineMiss);
  EXPECT_TRUE(
      contains(message, "org/model model.safetensors (revision main) is not in the Hugging Face cache " +
                            cache() + ", and HF_HUB_OFFLINE=1 forbids downloading it"))
      << message;
  EXPECT_EQ(hub_.stats()["head"].get<int>(), 0);
  hub::hub_download(options_for(hub_, cache()), "org/model", "main", "model.safetensors");
  hub_.stop();
  const hub::HubFile f = hub::hub_download(o, "org/model", "main", "model.safetensors");
  EXPECT_EQ(f.commit, commit_);
  EXPECT_FALSE(f.downloaded);
}

TEST_F(HubDownload, FailuresAreOneLineEach) {
  write_file(dir_ / "small", "x");
  hub_.add_repo("org/gated", {"model.safetensors=" + dir_ / "weights"}, /*gated=*/true);
  auto o = options_for(hub_, cache());
  std::string m;
  EXPECT_EQ(error_kind([&] { hub::hub_download(o, "org/nothing", "main", "model.safetensors"); }, &m),
            HubErrorKind::kRepoNotFound);
  EXPECT_TRUE(contains(m, "repository org/nothing not found on the Hugging Face Hub (HTTP 401 from " +
                              hub_.endpoint() + "); check the name (a private repository needs HF_TOKEN)"))
      << m;
  EXPECT_EQ(error_kind([&] { hub::hub_download(o, "org/gated", "main", "model.safetensors"); }, &m),
            HubErrorKind::kAuth);
  EXPECT_TRUE(contains(m, "org/gated is gated or private and needs an access token (HTTP 401")) << m;
  o.token = "hf_wrong";
  EXPECT_EQ(error_kind([&] { hub::hub_download(o, "org/gated", "main", "model.safetensors"); }, &m),
            HubErrorKind::kAuth);
  EXPECT_TRUE(contains(m, "org/gated refused the token in HF_TOKEN (HTTP 403")) << m;
  o.token = "hf_test_token";
  EXPECT_TRUE(hub::hub_download(o, "org/gated", "main", "model.safetensors").downloaded);
  EXPECT_EQ(hub_.stats()["auth"].back().get<std::string>(), "Bearer hf_test_token");
  EXPECT_EQ(error_kind([&] { hub::hub_download(o, "org/model", "v9", "model.safetensors"); }, &m),
            HubErrorKind::kRevisionNotFound);
  EXPECT_TRUE(contains(m, "revision 'v9' not found in org/model (HTTP 404")) << m;
  EXPECT_EQ(error_kind([&] { hub::hub_download(o, "org/model", "main", "pytorch_model.bin"); }, &m),
            HubErrorKind::kEntryNotFound);
  EXPECT_TRUE(contains(m, "org/model has no file pytorch_model.bin at revision main (HTTP 404")) << m;
  // A busy server (503) is asked again; an endpoint nobody answers on is one line at once.
  hub_.control(R"({"fail_5xx": 2})");
  EXPECT_FALSE(hub::hub_download(o, "org/model", "main", "model.safetensors").path.empty());
  o.endpoint = "http://127.0.0.1:1";
  EXPECT_EQ(error_kind([&] { hub::hub_download(o, "org/other", "main", "model.safetensors"); }, &m),
            HubErrorKind::kNetwork);
  EXPECT_TRUE(contains(
      m, "cannot reach the Hugging Face Hub at http://127.0.0.1:1 for org/other/model.safetensors: "))
      << m;
  // No answer, but the cache holds it: used, with a note (as huggingface_hub does).
  std::vector<std::string> notes;
  auto offline_ish = options_for(hub_, cache(), &notes);
  offline_ish.endpoint = "http://127.0.0.1:1";
  EXPECT_EQ(hub::hub_download(offline_ish, "org/model", "main", "model.safetensors").commit, commit_);
  EXPECT_TRUE(any_contains(notes, "cannot reach http://127.0.0.1:1")) << testing::PrintToString(notes);
}

TEST_F(HubDownload, AStalledTransferTimesOutAndIsRetried) {
  hub_.control(R"({"rate": 1})");  // one 16 kB chunk, then a pause of hours
  auto o = options_for(hub_, cache());
  o.idle_timeout_s = 1;
  o.retries = 2;
  std::vector<std::string> notes;
  o.note = [&](const std::string& line) { notes.push_back(line); };
  std::string m;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_kind([&] { hub::hub_download(o, "org/model", "main", "model.safetensors"); }, &m),
            HubErrorKind::kNetwork);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));  // bounded: no hang
  EXPECT_TRUE(contains(m, "org/model/model.safetensors: download failed after 3 tries: ")) << m;
  EXPECT_EQ(hub_.stats()["cdn_get"].get<int>(), 3);
  EXPECT_TRUE(any_contains(notes, "resuming the partial download at ")) << testing::PrintToString(notes);
  EXPECT_FALSE(fs::exists(fs::path(cache()) / "models--org--model" / "blobs" / sha_));
}

TEST_F(HubDownload, WeightsAndTheirNormalisation) {
  const auto o = options_for(hub_, cache());
  const hub::HubWeights w = hub::fetch_hub_weights(o, {"org/model", "main"});
  EXPECT_EQ(w.weights.filename, "model.safetensors");
  EXPECT_EQ(setting_text(w.pinned()), "hf-hub:org/model@" + commit_);
  EXPECT_EQ(w.mean, (std::vector<double>{0.5, 0.4, 0.3}));
  EXPECT_EQ(w.std, (std::vector<double>{0.2, 0.25, 0.3}));
  EXPECT_EQ(w.config_source, "config.json");
  // pytorch_model.bin when there is no model.safetensors; a repository with neither is refused.
  hub_.add_repo("org/bin", {"pytorch_model.bin=" + dir_ / "weights"});
  const hub::HubWeights b = hub::fetch_hub_weights(o, {"org/bin", "main"});
  EXPECT_EQ(b.weights.filename, "pytorch_model.bin");
  EXPECT_TRUE(b.mean.empty());
  EXPECT_EQ(b.config_note, "org/bin has no config.json");
  hub_.add_repo("org/empty", {"README.md=" + dir_ / "config.json"});
  std::string m;
  EXPECT_EQ(error_kind(
                [&] {
                  hub::fetch_hub_weights(o, {"org/empty", "main"});
                },
                &m),
            HubErrorKind::kEntryNotFound);
  EXPECT_TRUE(
      contains(m,
               "org/empty has neither model.safetensors nor pytorch_model.bin at revision main: not a "
               "timm-format weights repository"))
      << m;
}

TEST(HubWeightsNames, TheTimmTableCoversEveryZooModel) {
  EXPECT_STREQ(hub::kTimmTagsVersion, "1.0.31");
  for (const std::string& name : model_names()) {
    if (name == "tiny_cnn") {
      EXPECT_FALSE(hub::timm_default_repo(name)) << "tiny_cnn is ours, not timm's";
      continue;
    }
    const auto repo = hub::timm_default_repo(name);
    ASSERT_TRUE(repo) << name << " is missing from hub/timm_default_tags.inc (scripts/timm/default_tags.py)";
    if (name == "efficientnet_b6" || name == "efficientnet_b7") {
      EXPECT_EQ(*repo, "") << name;
    } else {
      EXPECT_EQ(repo->rfind("timm/" + name + ".", 0), 0u) << name << ": " << *repo;
    }
  }
  EXPECT_EQ(*hub::timm_default_repo("resnet200d"), "timm/resnet200d.ra2_in1k");
  EXPECT_EQ(*hub::timm_default_repo("resnet50"), "timm/resnet50.a1_in1k");
  EXPECT_EQ(*hub::timm_default_repo("efficientnet_b0"), "timm/efficientnet_b0.ra_in1k");
  EXPECT_EQ(*hub::timm_default_repo("efficientnet_b5"), "timm/efficientnet_b5.sw_in12k_ft_in1k");
  const auto ref = [](const std::string& spec, const std::string& model) {
    return hub::hub_weights_ref(hub::parse_pretrained_source(spec), model);
  };
  EXPECT_EQ(ref("timm", "resnet18").repo_id, "timm/resnet18.a1_in1k");
  const auto r = ref("hf-hub:org/name@v1.0", "resnet18");
  EXPECT_EQ(r.repo_id, "org/name");
  EXPECT_EQ(r.revision, "v1.0");
  EXPECT_EQ(ref("hf-hub:org/name", "x").revision, "main");
  std::string m;
  EXPECT_EQ(error_kind([&] { ref("timm", "efficientnet_b7"); }, &m), HubErrorKind::kOther);
  EXPECT_EQ(
      m,
      "model.pretrained: timm: timm 1.0.31 has no pretrained weights for efficientnet_b7 (use a weights file "
      "or hf-hub:ORG/REPO, or another model)");
  EXPECT_EQ(error_kind([&] { ref("timm", "tiny_cnn"); }, &m), HubErrorKind::kOther);
  EXPECT_TRUE(contains(m, "timm has no model named tiny_cnn")) << m;
  EXPECT_EQ(error_kind([&] { ref("hf-hub:org/name@", "x"); }, &m), HubErrorKind::kOther);
  EXPECT_EQ(error_kind([&] { ref("hf-hub:org--x/name", "x"); }, &m), HubErrorKind::kOther);
  EXPECT_TRUE(contains(m, "model.pretrained: hf-hub:org--x/name: 'org--x/name' is not a Hub repository id"))
      << m;
}

// ---- `ranzcr fetch-weights` as processes ----

class FetchWeightsCli : public HubDownload {};

TEST_F(FetchWeightsCli, AKilledDownloadResumesInTheNextRun) {
  write_random_file(dir_ / "big", 8'000'000, 7);
  hub_.add_repo("org/big", {"model.safetensors=" + dir_ / "big"});
  const std::string sha = net::file_sha256(dir_ / "big");
  const std::string incomplete = cache() + "/models--org--big/blobs/" + sha + ".incomplete";
  hub_.control(R"({"rate": 2000000})");
  const pid_t pid = spawn({"fetch-weights", "hf-hub:org/big"}, hub_.env(cache()), dir_ / "first.log");
  ASSERT_TRUE(
      wait_until([&] { return fs::exists(incomplete) && fs::file_size(incomplete) >= 3'000'000; }, 60))
      << read_file(dir_ / "first.log");
  ::kill(pid, SIGKILL);
  EXPECT_EQ(wait_exit(pid, 30), 128 + SIGKILL);
  const auto kept = fs::file_size(incomplete);
  EXPECT_FALSE(fs::exists(cache() + "/models--org--big/blobs/" + sha))
      << "a killed download left a complete-looking blob";
  hub_.control(R"({"rate": 0})");
  const CommandResult r =
      run_ranzcr({"fetch-weights", "hf-hub:org/big"}, hub_.env(cache()), dir_ / "second.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "org/big/model.safetensors: resuming the partial download at ")) << r.output;
  EXPECT_TRUE(contains(r.output, "hf-hub:org/big: hf-hub:org/big@")) << r.output;
  const auto ranges = hub_.stats()["cdn_ranges"];
  ASSERT_EQ(ranges.size(), 1u) << ranges.dump();
  EXPECT_GE(ranges[0].get<int64_t>(), static_cast<int64_t>(kept) - 1);
  EXPECT_EQ(net::file_sha256(cache() + "/models--org--big/blobs/" + sha), sha);
  EXPECT_FALSE(fs::exists(incomplete));
}

TEST_F(FetchWeightsCli, TwoProcessesAtOnceMakeOneGoodFile) {
  write_random_file(dir_ / "big", 8'000'000, 9);
  hub_.add_repo("org/big", {"model.safetensors=" + dir_ / "big"});
  hub_.control(R"({"rate": 1000000})");
  const std::string sha = net::file_sha256(dir_ / "big");
  const pid_t a = spawn({"fetch-weights", "hf-hub:org/big"}, hub_.env(cache()), dir_ / "a.log");
  // The second starts while the first is downloading (about 8 s at 1 MB/s).
  ASSERT_TRUE(
      wait_until([&] { return fs::exists(cache() + "/models--org--big/blobs/" + sha + ".incomplete"); }, 60))
      << read_file(dir_ / "a.log");
  const pid_t b = spawn({"fetch-weights", "hf-hub:org/big"}, hub_.env(cache()), dir_ / "b.log");
  EXPECT_EQ(wait_exit(a, 120), 0) << read_file(dir_ / "a.log");
  EXPECT_EQ(wait_exit(b, 120), 0) << read_file(dir_ / "b.log");
  EXPECT_EQ(hub_.stats()["cdn_get"].get<int>(), 1) << "the second process downloaded it again";
  const std::string logs = read_file(dir_ / "a.log") + read_file(dir_ / "b.log");
  EXPECT_TRUE(contains(logs, "another process is downloading it")) << logs;
  EXPECT_TRUE(contains(logs, " downloaded")) << logs;
  EXPECT_TRUE(contains(read_file(dir_ / "b.log"), " already cached")) << logs;
  EXPECT_EQ(net::file_sha256(cache() + "/models--org--big/blobs/" + sha), sha);
}

TEST_F(FetchWeightsCli, AFullDiskIsOneLineAndNoCompleteLookingFile) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const std::string small = dir_ / "small-disk";
  fs::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here";
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount(path.c_str()); }
  } unmount{small};
  const CommandResult r =
      run_ranzcr({"fetch-weights", "hf-hub:org/model"}, hub_.env(small + "/cache"), dir_ / "full.log");
  std::vector<std::string> blobs;
  for (const auto& e : fs::directory_iterator(small + "/cache/models--org--model/blobs"))
    blobs.push_back(e.path().filename());
  EXPECT_NE(r.status, 0);
  const auto errors = error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_TRUE(contains(errors[0], "No space left on device (the partial download stays as ")) << errors[0];
  ASSERT_EQ(blobs.size(), 1u);
  EXPECT_EQ(blobs[0], sha_ + ".incomplete");
}

TEST_F(FetchWeightsCli, BadNamesAndNoNetworkAreOneLineEach) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"fetch-weights", "efficientnet_b7"}, "timm 1.0.31 has no pretrained weights for efficientnet_b7"},
      {{"fetch-weights", "tiny_cnn"}, "timm has no model named tiny_cnn"},
      {{"fetch-weights", "hf-hub:org/absent"},
       "repository org/absent not found on the Hugging Face Hub (HTTP 401"},
      {{"fetch-weights"}, "fetch-weights: name a zoo model or hf-hub:ORG/REPO, or give --all"},
  };
  for (const auto& [args, expected] : cases) {
    const CommandResult r = run_ranzcr(args, hub_.env(cache()), dir_ / "bad.log");
    EXPECT_NE(r.status, 0) << r.output;
    const auto errors = error_lines(r.output);
    ASSERT_EQ(errors.size(), 1u) << r.output;
    EXPECT_TRUE(contains(errors[0], expected)) << errors[0];
  }
  EnvMap env = hub_.env(cache());
  env["HF_ENDPOINT"] = "http://127.0.0.1:1";
  const CommandResult r = run_ranzcr({"fetch-weights", "hf-hub:org/model"}, env, dir_ / "net.log");
  EXPECT_NE(r.status, 0);
  ASSERT_EQ(error_lines(r.output).size(), 1u) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "error: fetch-weights hf-hub:org/model: cannot reach the Hugging Face Hub at "
                       "http://127.0.0.1:1"))
      << r.output;
}

}  // namespace
}  // namespace ranzcr::test
