#include "core/durable_file.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "tests/test_util.h"

namespace ranzcr {
namespace {

// metrics.jsonl lines: appended whole, and a failed append is an error naming the file.
TEST(AtomicFile, AppendLineIsCheckedAndLeavesNoHalfLine) {
  test::TempDir dir;
  append_line(dir / "m.jsonl", "{\"epoch\":1}");
  append_line(dir / "m.jsonl", "{\"epoch\":2}");
  EXPECT_EQ(test::read_file(dir / "m.jsonl"), "{\"epoch\":1}\n{\"epoch\":2}\n");
  try {
    append_line("/dev/full", "{\"epoch\":3}");
    ADD_FAILURE() << "a write to a full device succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
  }
  EXPECT_THROW(append_line(dir / "no/such/folder/m.jsonl", "x"), std::runtime_error);
}

// A failed rename (the target is a folder with a file in it) names the reason and leaves no temporary file.
TEST(AtomicFile, AFailedRenameSaysWhyAndLeavesNoTemporaryFile) {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "out/inside");
  try {
    write_file_atomic(dir / "out", "bytes");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cannot rename"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find(std::strerror(EISDIR)) != std::string::npos ||
                msg.find(std::strerror(ENOTEMPTY)) != std::string::npos)
        << msg;
  }
  for (const auto& e : std::filesystem::directory_iterator(dir.str()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace ranzcr
