// The three hostile files of issue 17, given to the real binary as evaluate's --checkpoint: each ends with
// one `error:` line naming the file, under a 2 GiB limit on what the process allocates (ulimit -d,
// RLIMIT_DATA: brk and private writable mappings; an allocation of what the file claims would fail instead.
// Not its address space: a CUDA build of LibTorch maps gigabytes of it before main) and a 120 s guard against
// a hang. What each took is in docs/security.md.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

// Runs `evaluate --checkpoint path` allocating at most 2 GiB.
test::CommandResult evaluate_bounded(const std::string& path) {
  return test::run_command("bash -c 'ulimit -d 2097152; exec timeout 120 " +
                           std::string(test::ranzcr_binary()) + " evaluate --checkpoint " + path + "'");
}

void expect_one_error_line(const test::CommandResult& r, const std::string& path,
                           const std::string& expected) {
  EXPECT_EQ(r.status, 1) << r.output;  // an error, not a crash (>= 128), a timeout (124) or a bad_alloc abort
  const std::vector<std::string> errors = test::error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_NE(errors[0].find(path), std::string::npos) << r.output;
  EXPECT_NE(errors[0].find(expected), std::string::npos) << r.output;
}

// A torch archive as LibTorch writes it, holding `data_pkl` and one 16-byte storage record.
std::string torch_archive(const std::string& data_pkl) {
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  writer.writeRecord("data.pkl", data_pkl.data(), data_pkl.size());
  writer.writeRecord("data/0", std::string(16, '\0').data(), 16);
  writer.writeEndOfFile();
  return bytes;
}

TEST(UntrustedFiles, A200ByteSafetensorsClaimingATerabyteTensor) {
  test::TempDir dir;
  std::string json = R"({"w":{"dtype":"F32","shape":[1099511627776],"data_offsets":[0,0]},)"
                     R"("__metadata__":{"model_name":"tiny_cnn","label_names":"[\"a\"]","in_chans":"1"}})";
  json.append(192 - json.size(), ' ');
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(json.size());
  const std::string path = dir / "huge.safetensors";
  test::write_file(path, bytes + json);
  ASSERT_EQ(bytes.size() + json.size(), 200u);
  expect_one_error_line(evaluate_bounded(path), path, "0 bytes for a F32 tensor of 1099511627776 elements");
}

TEST(UntrustedFiles, ADeeplyNestedPickle) {
  test::TempDir dir;
  const int n = 1000000;  // a million lists, each appended to the one below it
  const std::string path = dir / "nested.pt";
  test::write_file(path, torch_archive("\x80\x02" + std::string(n, ']') + std::string(n - 1, 'a') + "."));
  expect_one_error_line(evaluate_bounded(path), path, "data.pkl: objects nest more than 100 deep");
}

TEST(UntrustedFiles, AZipWithAHugeDeclaredEntry) {
  test::TempDir dir;
  std::string bytes = torch_archive("\x80\x02}.");
  // data.pkl's central directory entry declares 4 GiB - 2 bytes, compressed and not.
  const size_t entry = bytes.find("PK\x01\x02");
  ASSERT_NE(entry, std::string::npos);
  const char size[4] = {'\xfe', '\xff', '\xff', '\xff'};
  std::memcpy(&bytes[entry + 20], size, 4);
  std::memcpy(&bytes[entry + 24], size, 4);
  const std::string path = dir / "huge_entry.pt";
  test::write_file(path, bytes);
  expect_one_error_line(evaluate_bounded(path), path, "not a valid torch archive");
}

}  // namespace
}  // namespace ranzcr
