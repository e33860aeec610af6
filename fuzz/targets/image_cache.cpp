// data.cache's file (data/image_cache.h), which a shared or copied cache folder can hold in any state:
// mapped and checked whole (header, regions, index entries, the key's image lines, the stored error
// lines), then every entry read as a prepared image or as its one-line error.
#include <opencv2/core.hpp>

#include "data/image_cache.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string path = fuzz::write_input("cache.rzc", data, size);
  fuzz::expect_read_or_refused(
      [&] {
        const auto cache = ImageCache::open(path, nullptr);
        double sum = 0.0;
        for (size_t i = 0; i < cache->size(); ++i) {
          try {
            sum += cv::sum(cache->image(static_cast<int64_t>(i)))[0];
          } catch (const std::runtime_error& e) {  // a stored error: one line (the image's, not this file's)
            fuzz::check_refusal(e.what(), "");
          }
        }
        if (sum < 0.0) fuzz::violation("negative pixel sum", path);
      },
      path);
  return 0;
}
