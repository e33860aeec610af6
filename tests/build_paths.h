// Where this build put the ranzcr binary, and the source tree it was built from, for the tests.
#pragma once

namespace ranzcr::test {

/// The ranzcr binary this build made (CMake's $<TARGET_FILE:ranzcr>).
const char* ranzcr_binary();

/// The source tree this build was made from (the clone's root).
const char* source_dir();

}  // namespace ranzcr::test
