#include "engine/io/atomic_file.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ranzcr
