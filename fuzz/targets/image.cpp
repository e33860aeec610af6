// An image as the loader reads it: decode_grayscale (JPEG with reduced decoding, PNG, 8 and 16 bit; any
// file with the DICOM preamble goes to the DICOM decoder helper), at a small target size (reduced JPEG decoding) and a large one,
// then the training transform (resize, augmentation) of what was decoded.
#include "data/image_pipeline.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string path = fuzz::write_input("in.jpg", data, size);
  TransformOptions options;
  options.image_size = 32;
  options.train = true;
  const ImageTransform transform(options);
  for (const int target : {8, 512})
    fuzz::expect_read_or_refused(
        [&] {
          cv::Size original;
          const cv::Mat image = decode_grayscale(path, target, &original);
          transform(image, 0, 0);
        },
        path);
  return 0;
}
