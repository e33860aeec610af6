// A DICOM file as ranzcr-dicom-decoder reads it for the loader (decode_dicom_u8, in this process: the
// decoder itself is what is fuzzed, not the sandbox around it): DCMTK parses and decodes the pixel data
// (uncompressed, RLE, JPEG, JPEG-LS), OpenJPEG JPEG 2000 -- both built instrumented by scripts/fuzz.sh
// (scripts/dicom-libs.sh) -- then ours: stored values, modality LUT or rescale, VOI LUT
// or window (the window setting picked by the input's size), MONOCHROME1, the reduction to 8 bits.
#include "dicom/decode.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string name = "in.dcm";
  const std::vector<unsigned char> bytes(data, data + size);
  const DicomWindow windows[] = {DicomWindow::kFile, DicomWindow::kMinMax, DicomWindow::kPercentile};
  fuzz::expect_read_or_refused([&] { decode_dicom_u8(bytes, name, windows[size % 3], 64); }, name);
  return 0;
}
