// A DICOM file as the loader reads it (data.image_ext: .dcm): GDCM parses and decodes the pixel data
// (uncompressed, RLE, JPEG, JPEG-LS, JPEG 2000), then ours: stored values, modality LUT or rescale, VOI LUT
// or window (the window setting picked by the input's size), MONOCHROME1, the reduction to 8 bits.
#include "data/image_pipeline.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string path = fuzz::write_input("in.dcm", data, size);
  const DicomWindow windows[] = {DicomWindow::kFile, DicomWindow::kMinMax, DicomWindow::kPercentile};
  fuzz::expect_read_or_refused([&] { decode_grayscale(path, 64, nullptr, windows[size % 3]); }, path);
  return 0;
}
