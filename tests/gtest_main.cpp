// The test programs' main: GoogleTest's, plus one flag for ctest. ctest runs a whole gtest suite per process
// (tests/gtest_suites.cmake), and a suite whose tests were all skipped (no CUDA, no reference) should read as
// skipped, not passed: with --ranzcr_skipped_exit=N the program exits N when it ran tests, none failed, and
// every one was skipped. Without the flag it behaves as gtest_main.
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

namespace {

constexpr char kSkippedExitFlag[] = "--ranzcr_skipped_exit=";

/// Removes --ranzcr_skipped_exit=N from argv (gtest would warn of a flag it does not know); returns N, or 0.
int take_skipped_exit(int& argc, char** argv) {
  int code = 0;
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], kSkippedExitFlag, sizeof(kSkippedExitFlag) - 1) == 0) {
      code = std::atoi(argv[i] + sizeof(kSkippedExitFlag) - 1);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  const int skipped_exit = take_skipped_exit(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const auto& unit = *::testing::UnitTest::GetInstance();
  if (rc == 0 && skipped_exit != 0 && unit.test_to_run_count() > 0 &&
      unit.skipped_test_count() == unit.test_to_run_count())
    return skipped_exit;
  return rc;
}
