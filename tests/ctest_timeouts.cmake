# Tighter ctest timeouts than the 900 s every discovered test gets (tests/CMakeLists.txt), for the tests that
# run on a GPU host's short device session (scripts/offline/device-check.sh): one of them that hangs must not
# take the session's minutes. Included after the gtest suites files, like ctest_costs.cmake.
set_tests_properties(SyncBatchNorm.CudaKernelsEqualOneBatchNormOverBoth PROPERTIES TIMEOUT 180)
set_tests_properties(ChannelsLast.CudaBf16TrainingStepsOfTheZooRunNhwc PROPERTIES TIMEOUT 180)
