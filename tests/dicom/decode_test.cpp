// DICOM decoding against files written by others: every file of pydicom's own test set is decoded by us
// and by pydicom (scripts/dicom/reference.py, with the pylibjpeg plug-ins in the project's .venv); single
// greyscale frames must match, everything else must be refused with one line naming the file. The python:
// RANZCR_DICOM_PYTHON, the project's .venv, or python3; the test skips where it has no pydicom (exit 77).
// Plus our own files (write_dicom) in every transfer syntax the synthetic generator uses.
#include <gtest/gtest.h>

#include <opencv2/core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/dicom_sandbox.h"
#include "data/image_pipeline.h"
#include "data/synth.h"
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

std::string dicom_python() {
  return test::python("RANZCR_DICOM_PYTHON");
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  for (std::string cell; std::getline(in, cell, '\t');) out.push_back(cell);
  return out;
}

// The error line of decoding `path`, "" when it decodes.
std::string decode_error(const std::string& path) {
  try {
    decode_dicom(read_bytes(path), path, DicomWindow::kFile);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// Files pydicom's plug-ins cannot decode and ours can: there is nothing to compare them with.
// JPEG-lossy.dcm: 12-bit JPEG extended; pylibjpeg-libjpeg rejects its codestream.
const std::set<std::string> kGdcmOnly = {"JPEG-lossy.dcm"};

struct Comparison {
  int images = 0, refused = 0;
};

// The sandboxed helper gives what this process's own decode gives: the same 8-bit image or the same
// refusal (so no codec path is killed by the helper's seccomp filter).
void expect_sandbox_agrees(const std::string& path) {
  const std::vector<unsigned char> bytes = read_bytes(path);
  std::string in_process, sandboxed;
  cv::Mat a, b;
  try {
    a = decode_dicom_u8(bytes, path, DicomWindow::kFile, 1 << 20).image;
  } catch (const std::runtime_error& e) {
    in_process = e.what();
  }
  try {
    b = decode_dicom_sandboxed(bytes, path, DicomWindow::kFile, 1 << 20).image;
  } catch (const std::runtime_error& e) {
    sandboxed = e.what();
  }
  EXPECT_EQ(sandboxed, in_process) << path;
  if (in_process.empty() && sandboxed.empty()) {
    ASSERT_EQ(a.size(), b.size()) << path;
    EXPECT_EQ(cv::norm(a, b, cv::NORM_INF), 0.0) << path;
  }
}

// Runs reference.py on `files` (default: pydicom's test set) into `dir` and compares every image with
// ours; everything else must be refused with one line naming the file. Skips (returns nullopt) without
// pydicom.
std::optional<Comparison> compare_with_pydicom(const test::TempDir& dir, const std::string& files = "") {
  const auto r = test::run_command(dicom_python() + " " + test::source_dir() +
                                   "/scripts/dicom/reference.py " + dir.str() + "/ref " + files);
  if (r.status / 256 == 77 || r.status == 77) return std::nullopt;
  EXPECT_EQ(r.status, 0) << r.output;
  std::ifstream manifest(dir / "ref/manifest.tsv");
  Comparison out;
  for (std::string line; std::getline(manifest, line);) {
    const std::vector<std::string> c = split_tabs(line);
    EXPECT_GE(c.size(), 2u) << line;
    if (c.size() < 2) continue;
    const std::string& path = c[0];
    const std::string name = std::filesystem::path(path).filename().string();
    expect_sandbox_agrees(path);
    if (c[1] != "image") {
      const std::string error = decode_error(path);
      if (c[1] == "pydicom" && error.empty() && kGdcmOnly.count(name)) {
        std::cout << "  decoded  " << name << " [" << c[4] << "], no reference: pydicom cannot decode it\n";
        continue;
      }
      std::cout << "  refused  " << name << " [" << c[1] << ": " << c.back() << "] -> " << error << "\n";
      EXPECT_NE(error, "") << path << " (" << line << ") decoded, expected a refusal";
      EXPECT_NE(error.find(path), std::string::npos) << error;
      EXPECT_EQ(error.find('\n'), std::string::npos) << error;
      ++out.refused;
      continue;
    }
    EXPECT_EQ(c.size(), 8u) << line;
    if (c.size() != 8) continue;
    const int rows = std::stoi(c[2]), cols = std::stoi(c[3]);
    const bool lossy = c[7].rfind("lossy ", 0) == 0;
    const std::string ref_path = c[7].substr(c[7].find(' ') + 1);
    cv::Mat ref(rows, cols, CV_32F);
    std::ifstream(ref_path, std::ios::binary).read(reinterpret_cast<char*>(ref.data), rows * cols * 4);
    cv::Mat ours;
    try {
      ours = decode_dicom(read_bytes(path), path, DicomWindow::kFile);
    } catch (const std::runtime_error& e) {
      ADD_FAILURE() << path << " (" << c[4] << "): " << e.what();
      continue;
    }
    EXPECT_EQ(ours.size(), ref.size()) << path;
    if (ours.size() != ref.size()) continue;
    cv::Mat diff;
    cv::absdiff(ours, ref, diff);
    double max_diff = 0;
    cv::minMaxLoc(diff, nullptr, &max_diff);
    const double mean_diff = cv::mean(diff)[0];
    std::cout << "  decoded  " << name << " [" << c[4] << ", " << c[5] << ", " << c[6]
              << "] max |ours - pydicom| " << max_diff << ", mean " << mean_diff << "\n";
    // Lossless: the same stored values, so only float rounding of the windowing differs. Lossy codecs
    // (JPEG extended's IDCT, JPEG 2000's wavelets) may round a stored value differently by one or two.
    EXPECT_LE(max_diff, lossy ? 0.02 : 1e-5) << path;
    EXPECT_LE(mean_diff, lossy ? 1e-3 : 1e-6) << path;
    ++out.images;
  }
  return out;
}

TEST(Dicom, MatchesPydicomOnItsOwnTestFiles) {
  test::TempDir dir;
  const std::optional<Comparison> c = compare_with_pydicom(dir);
  if (!c) RANZCR_SKIP_WITHOUT_REFERENCE("no pydicom");
  std::cout << c->images << " images matched, " << c->refused << " files refused\n";
  EXPECT_GE(c->images, 53);
}

// pydicom's test set has no LUT: files written by pydicom with a VOI LUT Sequence (implicit VR, where a
// parser keeps the sequence as bytes, and big endian), a Modality LUT Sequence with a signed first mapped
// value and a window, and a Modality LUT then a VOI LUT.
TEST(Dicom, LutsMatchPydicom) {
  test::TempDir dir;
  const auto r = test::run_command(dicom_python() + " " + test::source_dir() +
                                   "/scripts/dicom/reference.py --make-lut-files " + (dir / "luts"));
  if (r.status / 256 == 77 || r.status == 77) RANZCR_SKIP_WITHOUT_REFERENCE("no pydicom: " << r.output);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::optional<Comparison> c = compare_with_pydicom(dir, dir / "luts");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->images, 4);
  EXPECT_EQ(c->refused, 0);
}

// A 16-bit ramp with a known minimum and maximum.
cv::Mat ramp(int rows, int cols, int lo, int step, int type = CV_16UC1) {
  cv::Mat m(rows, cols, CV_32S);
  for (int i = 0; i < rows * cols; ++i) m.at<int>(i) = lo + step * i;
  cv::Mat out;
  m.convertTo(out, type);
  return out;
}

TEST(Dicom, EveryWrittenSyntaxRoundTripsTheStoredValues) {
  test::TempDir dir;
  using S = DicomWriteOptions::Syntax;
  for (S syntax : {S::kExplicitLittle, S::kRle, S::kJpegLossless, S::kJpegLsLossless, S::kJpeg2000Lossless}) {
    for (bool is_signed : {false, true}) {
      if (is_signed && syntax != S::kExplicitLittle && syntax != S::kRle) continue;
      DicomWriteOptions o;
      o.syntax = syntax;
      o.is_signed = is_signed;
      o.bits_stored = 12;
      o.study_uid = "1.2.3", o.sop_instance_uid = "1.2.3.4", o.patient_id = "p";
      const cv::Mat stored = is_signed ? ramp(16, 20, -1000, 9, CV_16SC1) : ramp(16, 20, 7, 11);
      const std::string path = dir / ("f" + std::to_string(static_cast<int>(syntax)) + ".dcm");
      write_dicom(path, stored, o);
      const cv::Mat got = decode_dicom(read_bytes(path), path, DicomWindow::kMinMax);
      cv::Mat want;
      double lo = 0, hi = 0;
      cv::minMaxLoc(stored, &lo, &hi);
      stored.convertTo(want, CV_32F, 1.0 / (hi - lo), -lo / (hi - lo));
      cv::Mat diff;
      cv::absdiff(got, want, diff);
      double max_diff = 0;
      cv::minMaxLoc(diff, nullptr, &max_diff);
      EXPECT_LT(max_diff, 1e-6) << path << " signed " << is_signed;
    }
  }
}

TEST(Dicom, WindowRescaleAndMonochrome1) {
  test::TempDir dir;
  DicomWriteOptions o;
  o.bits_stored = 12;
  o.slope = 0.5, o.intercept = -100;            // rescaled = 0.5 * stored - 100
  o.window_center = 100, o.window_width = 201;  // LINEAR: [0, 200] -> [0, 1]
  o.study_uid = "1.2", o.sop_instance_uid = "1.2.1", o.patient_id = "p";
  cv::Mat stored(1, 5, CV_16UC1);
  const uint16_t values[] = {0, 200, 300, 500, 4095};  // rescaled -100, 0, 50, 150, 1947.5
  for (int i = 0; i < 5; ++i) stored.at<uint16_t>(i) = values[i];
  write_dicom(dir / "w.dcm", stored, o);
  cv::Mat v = decode_dicom(read_bytes(dir / "w.dcm"), "w.dcm", DicomWindow::kFile);
  // LINEAR: x <= c - 0.5 - (w-1)/2 = -0.5 -> 0; x > 199.5 -> 1; else (x - 99.5) / 200 + 0.5
  const float want[] = {0.f, 0.0025f, 0.2525f, 0.7525f, 1.f};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(v.at<float>(i), want[i], 1e-6) << i;
  o.monochrome1 = true;
  write_dicom(dir / "m1.dcm", stored, o);
  v = decode_dicom(read_bytes(dir / "m1.dcm"), "m1.dcm", DicomWindow::kFile);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(v.at<float>(i), 1.f - want[i], 1e-6) << i;
  // percentile: the 1st..99th percentile of 101 values 0..100 is 1..99
  o.monochrome1 = false, o.slope = 1, o.intercept = 0;
  write_dicom(dir / "p.dcm", ramp(1, 101, 0, 1), o);
  v = decode_dicom(read_bytes(dir / "p.dcm"), "p.dcm", DicomWindow::kPercentile);
  EXPECT_FLOAT_EQ(v.at<float>(0), 0.f);
  EXPECT_FLOAT_EQ(v.at<float>(50), 0.5f);
  EXPECT_FLOAT_EQ(v.at<float>(100), 1.f);
  EXPECT_NEAR(v.at<float>(25), 24.0 / 98.0, 1e-6);
}

TEST(Dicom, DecodeGrayscaleShrinksAtFullDepthThenRoundsTo8Bits) {
  test::TempDir dir;
  DicomWriteOptions o;
  o.study_uid = "1.2", o.sop_instance_uid = "1.2.1", o.patient_id = "p";
  cv::Mat stored(400, 300, CV_16UC1, cv::Scalar(0));
  stored(cv::Rect(0, 0, 300, 200)).setTo(65535);
  stored.at<uint16_t>(399, 299) = 257;  // one pixel: invisible after the 3x area average
  write_dicom(dir / "a.dcm", stored, o);
  cv::Size size;
  const cv::Mat u8 = decode_grayscale(dir / "a.dcm", 100, &size, DicomConfig{DicomWindow::kMinMax});
  EXPECT_EQ(size, cv::Size(300, 400));
  EXPECT_EQ(u8.size(), cv::Size(100, 133));  // factor 3 = 300 / 100
  EXPECT_EQ(u8.type(), CV_8UC1);
  EXPECT_EQ(u8.at<uchar>(0, 0), 255);
  EXPECT_EQ(u8.at<uchar>(132, 99), 0);  // 257 / 65535 / 9 * 255 rounds to 0
  // Detected by the preamble whatever the file is called.
  std::filesystem::copy_file(dir / "a.dcm", dir / "a.img");
  EXPECT_EQ(decode_grayscale(dir / "a.img", 100, nullptr, DicomConfig{DicomWindow::kMinMax}).size(),
            cv::Size(100, 133));
}

// Every kind of synthetic DICOM file decodes to the picture the JPEG data set stores (to 8-bit rounding).
TEST(Dicom, SyntheticKindsDecodeToTheSamePicture) {
  test::TempDir dir;
  for (int64_t i = 0; i < 5; ++i) {
    SynthStudy st = render_study(7, i, 0, 96, false);
    st.id = "1.2.3." + std::to_string(i), st.patient = "p";
    const std::string path = dir / (std::to_string(i) + ".dcm");
    write_synthetic_dicom(path, st, i);
    const cv::Mat got = decode_grayscale(path, 96);
    ASSERT_EQ(got.size(), st.image.size());
    cv::Mat diff;
    cv::absdiff(got, st.image, diff);
    double max_diff = 0;
    cv::minMaxLoc(diff, nullptr, &max_diff);
    EXPECT_LE(max_diff, 1.0) << "kind " << i;
  }
}

std::string write_bytes(const test::TempDir& dir, const std::string& name,
                        const std::vector<unsigned char>& b) {
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
  return dir / name;
}

// A 64 x 64 ramp that write_dicom stored in `syntax` as dir/name, read back.
std::vector<unsigned char> written_ramp(const test::TempDir& dir, const std::string& name,
                                        DicomWriteOptions::Syntax syntax) {
  DicomWriteOptions o;
  o.study_uid = "1.2", o.sop_instance_uid = "1.2.1", o.patient_id = "p";
  o.syntax = syntax;
  write_dicom(dir / name, ramp(64, 64, 0, 3), o);
  return read_bytes(dir / name);
}

TEST(Dicom, BrokenFilesGiveOneLineNamingTheFile) {
  test::TempDir dir;
  const std::vector<unsigned char> good =
      written_ramp(dir, "good.dcm", DicomWriteOptions::Syntax::kJpegLsLossless);
  auto write_prefix = [&](const std::string& name, size_t n) {
    return write_bytes(dir, name, std::vector<unsigned char>(good.begin(), good.begin() + n));
  };
  for (const std::string& path : {write_prefix("trunc.dcm", good.size() - 200), write_prefix("head.dcm", 300),
                                  write_prefix("preamble.dcm", 132)}) {
    std::string error;
    try {
      decode_grayscale(path, 32);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(path), std::string::npos) << path << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  test::write_file(dir / "text.dcm", "this is not a DICOM file");
  EXPECT_THROW(decode_grayscale(dir / "text.dcm", 32), std::runtime_error);
}

// `bytes` (written by write_dicom: explicit VR little endian) with Rows and Columns set to `rows` x `cols`.
std::vector<unsigned char> with_size(std::vector<unsigned char> bytes, uint16_t rows, uint16_t cols) {
  for (const auto& [element, value] : {std::pair<unsigned char, uint16_t>{0x10, rows}, {0x11, cols}}) {
    const unsigned char tag[] = {0x28, 0x00, element, 0x00, 'U', 'S', 0x02, 0x00};
    const auto at = std::search(bytes.begin(), bytes.end(), std::begin(tag), std::end(tag));
    EXPECT_NE(at, bytes.end());
    if (at == bytes.end()) continue;
    at[8] = static_cast<unsigned char>(value & 0xFF);
    at[9] = static_cast<unsigned char>(value >> 8);
  }
  return bytes;
}

// A compressed image is decoded into buffers the header sizes: a file of a few KB declaring 16384 x 16384
// pixels (a JPEG 2000 one cost 2.5 GB and 74 s in the sanitizer build) is refused before they are allocated.
TEST(Dicom, SmallFilesCannotDeclareLargeImages) {
  test::TempDir dir;
  using S = DicomWriteOptions::Syntax;
  for (S syntax : {S::kExplicitLittle, S::kRle, S::kJpegLossless, S::kJpegLsLossless, S::kJpeg2000Lossless}) {
    const std::vector<unsigned char> small = written_ramp(dir, "small.dcm", syntax);
    const std::string big = write_bytes(dir, "big.dcm", with_size(small, 16384, 16384));
    const std::string free = write_bytes(dir, "free.dcm", with_size(small, 4096, 4096));
    const std::string error = decode_error(big);
    EXPECT_NE(error.find("DICOM file " + big + ": declares 16384 x 16384 pixels in a file of " +
                         std::to_string(small.size()) + " bytes, expected at least 1 byte per 128 pixels"),
              std::string::npos)
        << static_cast<int>(syntax) << ": " << error;
    // 4096 x 4096 is allowed whatever the file's size; a stream of 64 x 64 does not fill it. A JPEG or
    // JPEG-LS stream says its own size (SOF), which must be the header's: we do not guess which is right.
    const std::string free_error = decode_error(free);
    if (syntax == S::kJpegLossless || syntax == S::kJpegLsLossless)
      EXPECT_EQ(free_error,
                "DICOM file " + free +
                    ": declares 4096 x 4096 pixels, but its pixel data is 64 x 64, expected the same size");
    else
      EXPECT_NE(free_error, "") << static_cast<int>(syntax);
    EXPECT_EQ(free_error.find('\n'), std::string::npos) << free_error;
  }
}

// A JPEG 2000 codestream of another size than the header's is refused from the stream's header, before
// its image is decoded (GDCM 3.0.21 filled the header's size from a smaller stream and returned the rest of
// its unzeroed buffer as pixels).
TEST(Dicom, JpegTwoThousandStreamMustMatchTheHeader) {
  test::TempDir dir;
  const std::vector<unsigned char> good =
      written_ramp(dir, "good.dcm", DicomWriteOptions::Syntax::kJpeg2000Lossless);
  EXPECT_EQ(decode_error(dir / "good.dcm"), "");
  for (const auto& [rows, cols] : {std::pair<uint16_t, uint16_t>{128, 128}, {64, 65}, {65, 64}, {32, 64}}) {
    const std::string path = write_bytes(dir, "bad.dcm", with_size(good, rows, cols));
    const std::string error = decode_error(path);
    EXPECT_EQ(error, "DICOM file " + path + ": its JPEG 2000 stream is 64 x 64 pixels, the header declares " +
                         std::to_string(cols) + " x " + std::to_string(rows) + ", expected the same size")
        << rows << " x " << cols;
  }
}

}  // namespace
}  // namespace ranzcr
