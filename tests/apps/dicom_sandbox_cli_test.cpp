// The DICOM sandbox as a user meets it, through the real binary: a training run over DICOM files among which
// are the two files crafted after GDCM CVEs and three that make the helper crash, hang and allocate without
// bound (RANZCR_DICOM_DECODER_TEST_FAULTS) skips each under data.skip_bad_images with one line naming it and
// finishes its epochs; predict over a folder holding one such file ends with one error line naming it.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/csv.h"
#include "data/synth.h"
#include "tests/build_paths.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;

const char* const kCveFiles[] = {"cve-2024-22391-palette-icon-short-lut.dcm",
                                 "cve-2025-52582-overlay-larger-than-image.dcm"};

std::string cve_file(const std::string& name) {
  return std::string(test::source_dir()) + "/tests/data/files/" + name;
}

class DicomSandboxCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    SynthConfig c;
    c.num_images = 48;
    c.num_test_images = 3;
    c.image_size = 64;
    c.seed = 5;
    c.format = SynthFormat::kDicom;
    generate_synthetic(*dir_ / "ds", c, 2);
    const CsvTable t = read_csv(*dir_ / "ds/train.csv");
    const std::vector<std::string> contents = {
        test::read_file(cve_file(kCveFiles[0])), test::read_file(cve_file(kCveFiles[1])),
        "RANZCR-TEST-FAULT:crash", "RANZCR-TEST-FAULT:hang", "RANZCR-TEST-FAULT:alloc"};
    for (size_t i = 0; i < contents.size(); ++i) {
      victims_.push_back(*dir_ / ("ds/train/" + t.rows[2 * i + 1][0] + ".dcm"));
      test::write_file(victims_.back(), contents[i]);
    }
    test::write_config(*dir_ / "cfg.yaml", *dir_ / "ds",
                       {{"data.image_ext", ".dcm"},
                        {"data.image_size", "48"},
                        {"train.epochs", "2"},
                        {"train.batch_size", "8"},
                        {"data.skip_bad_images", "true"},
                        {"output.dir", *dir_ / "run"}});
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string bin() {
    return "RANZCR_DICOM_DECODER_TEST_FAULTS=1 " + std::string(test::ranzcr_binary());
  }
  // write_config writes two-level keys only: the data.dicom ones go on the command line.
  static std::string train() {
    return bin() + " train --config " + *dir_ / "cfg.yaml" +
           " --set data.dicom.timeout_seconds=2 --set data.dicom.memory_limit_mb=512";
  }

  static inline test::TempDir* dir_ = nullptr;
  static inline std::vector<std::string> victims_;
};

TEST_F(DicomSandboxCli, TrainingSkipsEachHostileFileWithOneLineAndFinishes) {
  const auto r = test::run_command(train());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::vector<std::string> expected = {"", "", "the DICOM decoder crashed (SIGSEGV)",
                                             "the DICOM decoder exceeded 2 s and was stopped",
                                             "the DICOM decoder exceeded 512 MiB of memory"};
  for (size_t i = 0; i < victims_.size(); ++i) {
    const std::string line =
        "warning: skipped unreadable image: DICOM file " + victims_[i] + ": " + expected[i];
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  const auto metrics = test::read_metrics(*dir_ / "run");
  int epochs = 0;
  for (const auto& m : metrics)
    if (m.contains("skipped_images")) {
      EXPECT_EQ(m["skipped_images"].get<int>(), 5) << m.dump();  // every epoch, training and validation
      ++epochs;
    }
  EXPECT_EQ(epochs, 2) << r.output;
  EXPECT_TRUE(fs::exists(*dir_ / "run/checkpoints/best.pt"));
}

TEST_F(DicomSandboxCli, PredictEndsWithOneLineNamingTheFile) {
  if (!fs::exists(*dir_ / "run/checkpoints/best.pt")) {
    const auto r = test::run_command(train());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  const std::vector<std::pair<std::string, std::string>> files = {
      {"a.dcm", test::read_file(cve_file(kCveFiles[0]))},
      {"b.dcm", test::read_file(cve_file(kCveFiles[1]))},
      {"c.dcm", "RANZCR-TEST-FAULT:crash"}};
  for (const auto& [name, bytes] : files) {
    const std::string images = *dir_ / ("predict-" + name);
    fs::create_directories(images);
    for (const auto& e : fs::directory_iterator(*dir_ / "ds/test"))
      fs::copy_file(e.path(), images + "/" + e.path().filename().string());
    test::write_file(images + "/" + name, bytes);
    const std::string out = images + "/submission.csv";
    const auto r =
        test::run_command(bin() + " predict --checkpoint " + *dir_ / "run/checkpoints/best.pt" +
                          " --images " + images + " --out " + out + " --set data.skip_bad_images=false");
    EXPECT_EQ(r.status, 1) << r.output;
    const std::vector<std::string> errors = test::error_lines(r.output);
    ASSERT_EQ(errors.size(), 1u) << r.output;
    EXPECT_NE(errors[0].find("DICOM file " + images + "/" + name + ": "), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out));
  }
}

// A Ctrl-C or a job manager's SIGTERM reaches the helpers too (they are in ranzcr's process group): they
// ignore it, so the run stops as it does without DICOM (saved mid-epoch, 128 + SIGTERM), with no image
// lost to a helper that died under it; the helpers end after ranzcr.
TEST_F(DicomSandboxCli, SigtermToTheWholeProcessGroupStopsTheRunGracefully) {
  const std::string run = *dir_ / "sigterm";
  const std::string log = run + ".log";
  const pid_t pid = test::spawn(
      {"train", "--config", *dir_ / "cfg.yaml", "--set", "output.dir=" + run, "--set", "train.epochs=200"},
      {}, log);
  ASSERT_TRUE(test::wait_for_text(log, "epoch 2/200", 120)) << test::read_file(log);
  std::vector<pid_t> group{pid};  // ranzcr and its helpers, as kill(-pgid) would reach them
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;) group.push_back(child);
  }
  ASSERT_GE(group.size(), 2u) << "no helper running";
  for (pid_t p : group) ::kill(p, SIGTERM);
  EXPECT_EQ(test::wait_exit(pid, 120), 128 + SIGTERM) << test::read_file(log);
  const std::string out = test::read_file(log);
  EXPECT_NE(out.find("warning: stopped "), std::string::npos) << out;  // mid-epoch or after one: saved
  EXPECT_NE(out.find("/checkpoints/last.pt (run the same command again to continue)"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("SIGTERM)"), std::string::npos) << out;  // no image lost to a helper killed by it
  EXPECT_TRUE(test::error_lines(out).empty()) << out;
  EXPECT_TRUE(test::wait_until(
      [&] {
        for (size_t i = 1; i < group.size(); ++i)
          if (::kill(group[i], 0) == 0) return false;
        return true;
      },
      10))
      << "a helper outlived ranzcr";
}

}  // namespace
}  // namespace ranzcr
