// DICOM files decoded in the sandboxed helper (data/dicom_sandbox.h, dicom/decoder_main.cpp): a helper that
// crashes, hangs, allocates without bound or tries a forbidden system call costs one image one error line
// naming it, and the next image decodes in a fresh helper; two files crafted from the public descriptions of
// GDCM CVEs (scripts/dicom/make_cve_files.py), which crash an in-process decode, end the same way.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "data/dicom_sandbox.h"
#include "data/image_pipeline.h"
#include "dicom/decode.h"
#include "dicom/write.h"
#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Limits of this suite alone: the helpers it starts (after the test-fault variable is set) serve no other.
DicomConfig sandbox_config(double seconds = 2.5) {
  DicomConfig c;
  c.window = DicomWindow::kMinMax;
  c.timeout_seconds = seconds;
  c.memory_limit_mb = 384;
  return c;
}

class DicomSandbox : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("RANZCR_DICOM_DECODER_TEST_FAULTS", "1", 1);
    dir_ = new test::TempDir();
    DicomWriteOptions o;
    o.study_uid = "1.2", o.sop_instance_uid = "1.2.1", o.patient_id = "p";
    cv::Mat stored(96, 80, CV_16UC1);
    for (int y = 0; y < stored.rows; ++y)
      for (int x = 0; x < stored.cols; ++x) stored.at<uint16_t>(y, x) = static_cast<uint16_t>(40 * x + 7 * y);
    write_dicom(good(), stored, o);
    for (const char* fault : {"crash", "hang", "alloc", "open"})
      test::write_file(fault_file(fault), std::string("RANZCR-TEST-FAULT:") + fault);
  }
  static void TearDownTestSuite() {
    ::unsetenv("RANZCR_DICOM_DECODER_TEST_FAULTS");
    delete dir_;
  }
  static std::string good() { return *dir_ / "good.dcm"; }
  static std::string fault_file(const std::string& fault) { return *dir_ / (fault + ".dcm"); }

  // The good file decodes in a helper to what this process's own decode gives.
  static void expect_good_decodes(const DicomConfig& config) {
    cv::Size size;
    const cv::Mat got = decode_grayscale(good(), 32, &size, config);
    const DicomU8 want = decode_dicom_u8(read_bytes(good()), good(), config.window, 32);
    EXPECT_EQ(size, cv::Size(80, 96));
    ASSERT_EQ(got.size(), want.image.size());
    EXPECT_EQ(cv::norm(got, want.image, cv::NORM_INF), 0.0);
  }

  // decode_grayscale of `path` throws one line naming it that holds `expected`.
  static void expect_refused(const std::string& path, const std::string& expected,
                             const DicomConfig& config) {
    try {
      decode_grayscale(path, 32, nullptr, config);
      ADD_FAILURE() << path << " decoded";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_NE(what.find("DICOM file " + path + ": "), std::string::npos) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << what;
    }
  }

  static inline test::TempDir* dir_ = nullptr;
};

TEST_F(DicomSandbox, EachFaultCostsOneImageOneLineAndTheNextDecodes) {
  const DicomConfig config = sandbox_config();
  expect_good_decodes(config);
  expect_refused(fault_file("crash"), "the DICOM decoder crashed (SIGSEGV)", config);
  expect_good_decodes(config);
  const auto start = std::chrono::steady_clock::now();
  expect_refused(fault_file("hang"), "the DICOM decoder exceeded 2.5 s and was stopped", config);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 2.4);
  EXPECT_LT(waited, 60.0);  // stopped, not waited for
  expect_good_decodes(config);
  expect_refused(fault_file("alloc"), "the DICOM decoder exceeded 384 MiB of memory", config);
  expect_good_decodes(config);
}

// The seccomp filter kills a decode that tries to open a file: SIGSYS, before open returns.
TEST_F(DicomSandbox, TheFilterKillsADecodeThatOpensAFile) {
  const DicomConfig config = sandbox_config();
  expect_refused(fault_file("open"),
                 "the DICOM decoder was killed by its sandbox (SIGSYS: it made a system call its seccomp "
                 "filter forbids)",
                 config);
  expect_good_decodes(config);
}

TEST_F(DicomSandbox, FilesCraftedAfterGdcmCvesEndAsOneLine) {
  const DicomConfig config = sandbox_config();
  const std::pair<const char*, const char*> files[] = {
      {"cve-2024-22391-palette-icon-short-lut.dcm",
       "has a palette colour LUT (0028|1101) declaring 65536 entries of 8 bits with 2 bytes of data"},
      {"cve-2025-52582-overlay-larger-than-image.dcm",
       "has an overlay (group 6000) in the unused bits of its pixel data of 4096 x 4096 pixels, the image is "
       "8 x 8"}};
  for (const auto& [name, expected] : files) {
    const std::string path = *dir_ / name;
    std::filesystem::copy_file(std::string(test::source_dir()) + "/tests/data/files/" + name, path);
    expect_refused(path, expected, config);
    expect_good_decodes(config);
  }
}

// Other threads decoding at the same time never see one helper's crash.
TEST_F(DicomSandbox, OtherThreadsNeverSeeACrash) {
  const DicomConfig config = sandbox_config();
  std::atomic<int> decoded{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 15; ++i) {
        try {
          if (decode_grayscale(good(), 32, nullptr, config).empty()) ++failed;
          ++decoded;
        } catch (const std::exception&) {
          ++failed;
        }
      }
    });
  for (int i = 0; i < 6; ++i) expect_refused(fault_file("crash"), "crashed (SIGSEGV)", config);
  for (auto& t : threads) t.join();
  EXPECT_EQ(decoded.load(), 45);
  EXPECT_EQ(failed.load(), 0);
}

// Without the test variable in its environment a helper takes a fault file for what it is: not DICOM.
TEST_F(DicomSandbox, FaultsNeedTheTestVariable) {
  ::unsetenv("RANZCR_DICOM_DECODER_TEST_FAULTS");
  const DicomConfig config = sandbox_config(3.5);  // other limits: helpers started now, without it
  expect_refused(fault_file("crash"), "cannot be", config);
  ::setenv("RANZCR_DICOM_DECODER_TEST_FAULTS", "1", 1);
}

}  // namespace
}  // namespace ranzcr
