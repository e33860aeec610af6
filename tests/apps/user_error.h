// The check that a command failed as a user error: a non-zero exit, no crash, exactly one `error: ` line,
// and that line names what was wrong.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/test_util.h"

namespace ranzcr::test {

/// Runs `command` and checks it failed with exactly one `error: ` line containing `expected`.
inline void expect_user_error(const std::string& command, const std::string& expected) {
  const auto r = run_command(command);
  EXPECT_NE(r.status, 0) << command;
  EXPECT_LT(r.status, 128) << "crashed: " << r.output;
  const std::vector<std::string> errors = error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_NE(errors[0].find(expected), std::string::npos) << "got: " << r.output;
}

}  // namespace ranzcr::test
