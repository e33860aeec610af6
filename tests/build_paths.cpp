// The only test file whose compile command names paths of this clone (tests/CMakeLists.txt defines them here
// alone): every other test file's command is the same in any clone, so ccache (scripts/setup.sh) shares its
// result between clones, and CI's fresh clone recompiles this one small file.
#include "tests/build_paths.h"

namespace ranzcr::test {

const char* ranzcr_binary() {
  return RANZCR_BINARY;
}

const char* source_dir() {
  return RANZCR_SOURCE_DIR;
}

}  // namespace ranzcr::test
