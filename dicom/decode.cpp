#include "dicom/decode.h"

#include <dcmtk/dcmdata/dcdatset.h>
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcdict.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcistrmb.h>
#include <dcmtk/dcmdata/dcmetinf.h>
#include <dcmtk/dcmdata/dcpixel.h>
#include <dcmtk/dcmdata/dcpixseq.h>
#include <dcmtk/dcmdata/dcpxitem.h>
#include <dcmtk/dcmdata/dcrledrg.h>
#include <dcmtk/dcmdata/dcsequen.h>
#include <dcmtk/dcmdata/dcuid.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <dcmtk/dcmjpeg/djdecode.h>
#include <dcmtk/dcmjpls/djdecode.h>
#include <dcmtk/oflog/oflog.h>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "core/check.h"
#include "core/jpeg_header.h"
#include "core/pixel_budget.h"
#include "core/printable.h"
#include "dicom/j2k.h"
#include "dicom/length_check.h"

namespace ranzcr {

// DCMTK's decoders (RLE, JPEG baseline/extended/lossless, JPEG-LS) registered once, its log silenced (our
// messages are one line each), and its data dictionary loaded.
void init_dicom_library() {
  static std::once_flag once;
  std::call_once(once, [] {
    OFLog::configure(OFLogger::FATAL_LOG_LEVEL);
    DcmRLEDecoderRegistration::registerCodecs();
    DJDecoderRegistration::registerCodecs();
    DJLSDecoderRegistration::registerCodecs();
    (void)dcmDataDict.isDictionaryLoaded();
    // Deregistered at exit, which frees the registry's entries (a leak report otherwise).
    std::atexit([] {
      DJLSDecoderRegistration::cleanup();
      DJDecoderRegistration::cleanup();
      DcmRLEDecoderRegistration::cleanup();
    });
  });
}

namespace {

// `what` quotes values from the file (a SOP class UID, a Number of Frames, ...): escaped and cut to one line.
[[noreturn]] void fail(const std::string& name, const std::string& what) {
  RANZCR_FAIL("DICOM file ", name, ": ", printable(what, 1000));
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && s[b] == ' ') ++b;
  return s.substr(b);
}

// A text element's whole value (every value, backslashes kept; padding removed), "" when absent.
std::string text(DcmItem& item, const DcmTagKey& tag) {
  OFString value;
  if (item.findAndGetOFStringArray(tag, value).bad()) return "";
  return trim(value.c_str());
}

std::string tag_name(const DcmTagKey& tag) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04x|%04x", tag.getGroup(), tag.getElement());
  return buf;
}

// The values of a multi-valued decimal string (DS), e.g. Window Center "40\400".
std::vector<double> decimals(DcmItem& item, const DcmTagKey& tag, const std::string& name) {
  std::vector<double> out;
  std::stringstream in(text(item, tag));
  for (std::string value; std::getline(in, value, '\\');) {
    value = trim(value);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v))
      fail(name, "element " + tag_name(tag) + " holds '" + value + "', expected a number");
    out.push_back(v);
  }
  return out;
}

std::string transfer_syntax_name(E_TransferSyntax xfer) {
  const DcmXfer x(xfer);
  return std::string(x.getXferName()) + " (" + x.getXferID() + ")";
}

// The SOP class of a data set ((0008,0016)) or of a file meta group ((0002,0002)).
std::string sop_class_name(DcmItem& item, const DcmTagKey& tag) {
  const std::string uid = text(item, tag);
  if (uid.empty()) return "no SOP class";
  const char* known = dcmFindNameOfUID(uid.c_str());
  return known ? known : uid;
}

// A US element's one value, -1 when absent or not one 16-bit value.
int us_value(DcmItem& item, const DcmTagKey& tag) {
  Uint16 v = 0;
  return item.findAndGetUint16(tag, v).good() ? v : -1;
}

// Refuses, from the header alone, what is not one greyscale frame, naming what the file holds instead.
void check_header(DcmDataset& ds, const std::string& name) {
  const std::string frames = text(ds, DCM_NumberOfFrames);
  char* end = nullptr;
  const long n = frames.empty() ? 1 : std::strtol(frames.c_str(), &end, 10);
  if (!frames.empty() && (*end != '\0' || n < 0))
    fail(name, "has Number of Frames '" + frames + "', expected a whole number");
  if (n > 1) fail(name, "is a multi-frame image (" + frames + " frames), expected a single frame");
  const std::string pi = text(ds, DCM_PhotometricInterpretation);
  if (!pi.empty() && pi != "MONOCHROME1" && pi != "MONOCHROME2")
    fail(name, "is a colour image (" + pi + "), expected greyscale (MONOCHROME1 or MONOCHROME2)");
  const int samples = us_value(ds, DCM_SamplesPerPixel);
  if (samples > 1)
    fail(name, "has " + std::to_string(samples) + " samples per pixel, expected 1 (greyscale)");
}

// The pixel format the header declares, checked.
struct PixelFormat {
  int cols = 0, rows = 0, allocated = 0, stored = 0;
  bool is_signed = false;
  size_t bytes() const {  // of one frame
    const size_t count = static_cast<size_t>(rows) * cols;
    return allocated == 1 ? (count + 7) / 8 : count * static_cast<size_t>(allocated / 8);
  }
};

PixelFormat pixel_format(DcmDataset& ds, size_t file_size, const std::string& name) {
  PixelFormat f;
  f.rows = us_value(ds, DCM_Rows);
  f.cols = us_value(ds, DCM_Columns);
  if (f.rows < 0 || f.cols < 0)
    fail(name, "has no Rows and Columns of one 16-bit value each, expected the image's size");
  const std::string problem = pixel_count_problem(f.cols, f.rows, file_size);
  if (!problem.empty()) fail(name, problem);
  f.allocated = us_value(ds, DCM_BitsAllocated);
  f.stored = us_value(ds, DCM_BitsStored);
  f.is_signed = us_value(ds, DCM_PixelRepresentation) == 1;
  if (f.allocated != 1 && f.allocated != 8 && f.allocated != 16 && f.allocated != 32)
    fail(name, "has " + std::to_string(f.allocated) + " bits allocated per pixel, expected 1, 8, 16 or 32");
  if (f.stored < 1 || f.stored > f.allocated)
    fail(name,
         "has " + std::to_string(f.stored) + " bits stored of " + std::to_string(f.allocated) + " allocated");
  return f;
}

// The encapsulated frame's fragments (after the basic offset table), joined: one frame's stream.
std::vector<unsigned char> frame_stream(DcmPixelData& pixels, const std::string& name) {
  E_TransferSyntax xfer = EXS_Unknown;
  const DcmRepresentationParameter* parameter = nullptr;
  pixels.getOriginalRepresentationKey(xfer, parameter);
  DcmPixelSequence* sequence = nullptr;
  if (pixels.getEncapsulatedRepresentation(xfer, parameter, sequence).bad() || !sequence)
    fail(name, "has compressed pixel data that is not encapsulated");
  std::vector<unsigned char> stream;
  for (unsigned long i = 1; i < sequence->card(); ++i) {
    DcmPixelItem* item = nullptr;
    Uint8* data = nullptr;
    if (sequence->getItem(item, i).bad() || !item || item->getUint8Array(data).bad()) continue;
    if (data) stream.insert(stream.end(), data, data + item->getLength());
  }
  if (stream.empty()) fail(name, "has compressed pixel data without a fragment");
  return stream;
}

// A JPEG 2000 frame, decoded by OpenJPEG.
std::vector<unsigned char> j2k_frame(DcmPixelData& pixels, const PixelFormat& f, const std::string& name) {
  if (f.allocated != 8 && f.allocated != 16)
    fail(name,
         "has JPEG 2000 pixel data of " + std::to_string(f.allocated) + " bits allocated, expected 8 or 16");
  const std::vector<unsigned char> stream = frame_stream(pixels, name);
  std::vector<unsigned char> out;
  const std::string problem =
      detail::decode_j2k(stream.data(), stream.size(), f.cols, f.rows, f.allocated, &out);
  if (!problem.empty()) fail(name, problem);
  return out;
}

// Structures a decoder may trust too far, refused whatever decodes the image (GDCM 3.0.21 wrote or read
// out of bounds on both: CVE-2024-22391, CVE-2025-52582), although we use neither.
//
// Every palette colour LUT, in any item (an icon's too), holds what its descriptor declares.
void check_palettes(DcmItem& item, const std::string& name, int depth = 0) {
  static const std::pair<DcmTagKey, DcmTagKey> kLuts[] = {
      {DCM_RedPaletteColorLookupTableDescriptor, DCM_RedPaletteColorLookupTableData},
      {DCM_GreenPaletteColorLookupTableDescriptor, DCM_GreenPaletteColorLookupTableData},
      {DCM_BluePaletteColorLookupTableDescriptor, DCM_BluePaletteColorLookupTableData}};
  for (const auto& [descriptor, data] : kLuts) {
    if (!item.tagExists(descriptor)) continue;
    const Uint16* d = nullptr;
    unsigned long n = 0;
    DcmElement* values = nullptr;
    if (item.findAndGetUint16Array(descriptor, d, &n).bad() || n != 3 ||
        item.findAndGetElement(data, values).bad())
      fail(name, "has a palette colour LUT without a 3-value descriptor and its data (" +
                     tag_name(descriptor) + ")");
    const size_t entries = d[0] == 0 ? 65536 : d[0], bytes = values->getLength();
    const bool fits = bytes == 2 * entries || (d[2] <= 8 && (bytes == entries || bytes == entries + 1));
    if ((d[2] != 8 && d[2] != 16) || !fits)
      fail(name, "has a palette colour LUT (" + tag_name(descriptor) + ") declaring " +
                     std::to_string(entries) + " entries of " + std::to_string(d[2]) + " bits with " +
                     std::to_string(bytes) + " bytes of data, expected data for every entry");
  }
  if (depth >= 16) return;  // length_check.cpp refused deeper nesting already
  for (unsigned long i = 0; i < item.card(); ++i) {
    auto* sequence = dynamic_cast<DcmSequenceOfItems*>(item.getElement(i));
    for (unsigned long j = 0; sequence && j < sequence->card(); ++j)
      if (DcmItem* nested = sequence->getItem(j)) check_palettes(*nested, name, depth + 1);
  }
}

// An overlay kept in the unused high bits of the pixel data (no Overlay Data; retired since 2004) is the
// image's size and lies in those bits.
void check_overlays(DcmDataset& ds, const PixelFormat& f, const std::string& name) {
  for (Uint16 group = 0x6000; group <= 0x601E; group += 2) {
    Uint16 rows = 0, cols = 0, bit = 0;
    if (ds.findAndGetUint16(DcmTagKey(group, 0x0010), rows).bad() || ds.tagExists(DcmTagKey(group, 0x3000)))
      continue;
    ds.findAndGetUint16(DcmTagKey(group, 0x0011), cols);
    ds.findAndGetUint16(DcmTagKey(group, 0x0102), bit);
    char g[8];
    std::snprintf(g, sizeof g, "%04x", group);
    if (rows != f.rows || cols != f.cols)
      fail(name, std::string("has an overlay (group ") + g + ") in the unused bits of its pixel data of " +
                     std::to_string(cols) + " x " + std::to_string(rows) + " pixels, the image is " +
                     std::to_string(f.cols) + " x " + std::to_string(f.rows) + ", expected the same size");
    if (bit < f.stored || bit >= f.allocated)
      fail(name, std::string("has an overlay (group ") + g + ") in the pixel data at bit " +
                     std::to_string(bit) + ", expected one of the unused bits " + std::to_string(f.stored) +
                     " to " + std::to_string(f.allocated - 1));
  }
}

// JPEG processes (1.2.840.10008.1.2.4.50 to .70) and JPEG-LS (.80, .81).
bool is_jpeg_or_jpeg_ls(E_TransferSyntax xfer) {
  const std::string id = DcmXfer(xfer).getXferID(), prefix = "1.2.840.10008.1.2.4.";
  if (id.compare(0, prefix.size(), prefix) != 0) return false;
  const int n = std::atoi(id.c_str() + prefix.size());
  return n >= 50 && n <= 89;
}

std::string hex_byte(int v) {
  char s[4];
  std::snprintf(s, sizeof s, "%02x", v & 0xFF);
  return s;
}

// What DCMTK's decoders take from a JPEG or JPEG-LS stream unchecked, each found by the dicom fuzz target
// (docs/security.md): a precision outside 2..16 bits or a point transform not below it (IJG's lossless
// predictor shifts by P - Al - 1), a Huffman table id out of range or a DC or lossless symbol above 16 (IJG
// indexes its tables with them), a JPEG-LS interleave mode CharLS has no value for (it loads the byte into
// its enum).
void check_scan_headers(const JpegScanHeaders& h, bool is_jpeg_ls, const std::string& name) {
  const std::string what = is_jpeg_ls ? "JPEG-LS" : "JPEG";
  if (h.precision < 2 || h.precision > 16)
    fail(name,
         "has a " + what + " frame of " + std::to_string(h.precision) + "-bit samples, expected 2 to 16");
  if (h.al < 0) fail(name, "has a " + what + " stream without a whole scan header (SOS)");
  if (h.al >= h.precision)
    fail(name, "has a " + what + " scan with a point transform of " + std::to_string(h.al) + " bits for " +
                   std::to_string(h.precision) + "-bit samples, expected fewer");
  if (h.bad_table >= 0)
    fail(name, "has a JPEG Huffman table with class and destination 0x" + hex_byte(h.bad_table) +
                   ", expected class 0 or 1 and destination 0 to 3");
  if (h.dc_symbol_over_16 >= 0)
    fail(name, "has a JPEG Huffman table (DC or lossless) with a symbol of " +
                   std::to_string(h.dc_symbol_over_16) + " bits, expected at most 16");
  if (is_jpeg_ls && h.se > 2)
    fail(name, "has a JPEG-LS scan of interleave mode " + std::to_string(h.se) + ", expected 0, 1 or 2");
}

// A JPEG or JPEG-LS frame's own size (its SOF marker) must be the header's: DCMTK decodes a smaller stream
// into the header's buffer and leaves the rest as it was. We do not guess which size is right. Then what
// check_scan_headers refuses.
void check_jpeg_frame_size(DcmPixelData& pixels, const PixelFormat& f, bool is_jpeg_ls,
                           const std::string& name) {
  const std::vector<unsigned char> stream = frame_stream(pixels, name);
  const JpegScanHeaders h = jpeg_scan_headers(stream.data(), stream.size());
  if (h.sof < 0) fail(name, "has JPEG pixel data without a frame header (SOF marker)");
  if (h.width != f.cols || h.height != f.rows)
    fail(name, "declares " + std::to_string(f.cols) + " x " + std::to_string(f.rows) +
                   " pixels, but its pixel data is " + std::to_string(h.width) + " x " +
                   std::to_string(h.height) + ", expected the same size");
  check_scan_headers(h, is_jpeg_ls, name);
}

// The frame's pixel data as uncompressed pixel data would hold it (little endian), decoded when encapsulated.
std::vector<unsigned char> frame_bytes(DcmDataset& ds, const PixelFormat& f, const std::string& name) {
  const E_TransferSyntax xfer = ds.getOriginalXfer();
  DcmElement* element = nullptr;
  if (ds.findAndGetElement(DCM_PixelData, element).bad() || !element) fail(name, "holds no pixel data");
  auto* pixels = dynamic_cast<DcmPixelData*>(element);
  if (!pixels) fail(name, "has a Pixel Data element DCMTK cannot read as pixels");
  if (xfer == EXS_JPEG2000LosslessOnly || xfer == EXS_JPEG2000) return j2k_frame(*pixels, f, name);
  if (DcmXfer(xfer).isEncapsulated()) {
    if (is_jpeg_or_jpeg_ls(xfer))
      check_jpeg_frame_size(*pixels, f, xfer == EXS_JPEGLSLossless || xfer == EXS_JPEGLSLossy, name);
    const OFCondition st = ds.chooseRepresentation(EXS_LittleEndianExplicit, nullptr);
    if (st.bad())
      fail(name, "its pixel data cannot be decoded (truncated, corrupt, or " + transfer_syntax_name(xfer) +
                     " not supported: " + st.text() + ")");
  }
  Uint8* data = nullptr;  // DCMTK gives OW values back in little-endian byte order here
  if (pixels->getUint8Array(data).bad() || (!data && f.bytes() > 0))
    fail(name, "its pixel data cannot be read (" + transfer_syntax_name(xfer) + ")");
  const size_t have = pixels->getLength();
  if (have < f.bytes())
    fail(name, "holds " + std::to_string(have) + " bytes of pixel data, its " + std::to_string(f.cols) +
                   " x " + std::to_string(f.rows) + " pixels of " + std::to_string(f.allocated) +
                   " bits need " + std::to_string(f.bytes()));
  std::vector<unsigned char> out(data, data + f.bytes());
  // A big-endian file's 32-bit pixels come back swapped as two 16-bit halves (checked against pydicom).
  if (f.allocated == 32 && xfer == EXS_BigEndianExplicit)
    for (size_t i = 0; i + 3 < out.size(); i += 4) {
      std::swap(out[i], out[i + 2]);
      std::swap(out[i + 1], out[i + 3]);
    }
  return out;
}

// The stored values as CV_32FC1, masked to Bits Stored and sign-extended when signed. 1-bit images are
// unpacked (least significant bit first).
cv::Mat stored_values(const std::vector<unsigned char>& buf, const PixelFormat& f) {
  cv::Mat out(f.rows, f.cols, CV_32F);
  float* dst = out.ptr<float>();
  const size_t count = static_cast<size_t>(f.rows) * f.cols;
  const uint64_t mask = f.stored >= 32 ? 0xFFFFFFFFull : ((1ull << f.stored) - 1);
  for (size_t i = 0; i < count; ++i) {
    uint64_t raw = 0;
    if (f.allocated == 1) raw = (buf[i / 8] >> (i % 8)) & 1u;
    if (f.allocated == 8) raw = buf[i];
    if (f.allocated == 16) raw = buf[2 * i] | (uint64_t{buf[2 * i + 1]} << 8);
    if (f.allocated == 32)
      raw = buf[4 * i] | (uint64_t{buf[4 * i + 1]} << 8) | (uint64_t{buf[4 * i + 2]} << 16) |
            (uint64_t{buf[4 * i + 3]} << 24);
    raw &= mask;
    int64_t v = static_cast<int64_t>(raw);
    if (f.is_signed && (raw >> (f.stored - 1)) & 1u) v -= static_cast<int64_t>(1) << f.stored;
    dst[i] = static_cast<float>(v);
  }
  return out;
}

// A lookup table (Modality or VOI LUT Sequence item): y = data[clamp(x - first, 0, n - 1)].
struct Lut {
  int64_t first = 0;
  int bits = 16;
  std::vector<float> data;
};

// DCMTK has swapped the US/SS/OW values of a big-endian file to host (little-endian) order.
Lut read_lut(DcmItem& item, bool signed_first, const std::string& name) {
  const Uint16* desc = nullptr;
  unsigned long desc_count = 0;
  DcmElement* data = nullptr;
  if (item.findAndGetUint16Array(DCM_LUTDescriptor, desc, &desc_count).bad() || desc_count != 3 ||
      item.findAndGetElement(DCM_LUTData, data).bad() || !data)
    fail(name, "has a LUT without a 3-value descriptor or data");
  Lut lut;
  const size_t entries = desc[0] == 0 ? 65536 : desc[0];
  lut.first = signed_first ? static_cast<int16_t>(desc[1]) : desc[1];
  lut.bits = desc[2];
  if (lut.bits < 1 || lut.bits > 16)
    fail(name, "has a LUT of " + std::to_string(lut.bits) + " bits, expected 1 to 16");
  const size_t bytes = data->getLength();
  Uint16* words = nullptr;
  Uint8* raw = nullptr;
  if (data->getUint16Array(words).bad()) words = nullptr;
  if (!words && data->getUint8Array(raw).bad()) raw = nullptr;
  const auto* b = words ? reinterpret_cast<const unsigned char*>(words) : raw;
  if (!b && bytes > 0) fail(name, "has LUT data DCMTK cannot read");
  const bool packed8 = lut.bits <= 8 && (bytes == entries || bytes == entries + 1);
  if (!packed8 && bytes < 2 * entries)
    fail(name, "has a LUT of " + std::to_string(entries) + " entries with " + std::to_string(bytes) +
                   " bytes of data");
  lut.data.resize(entries);
  for (size_t i = 0; i < entries; ++i)
    lut.data[i] = packed8 ? b[i] : static_cast<float>(b[2 * i] | (b[2 * i + 1] << 8));
  return lut;
}

void apply_lut(cv::Mat& values, const Lut& lut) {
  const int64_t last = static_cast<int64_t>(lut.data.size()) - 1;
  for (float& v : cv::Mat_<float>(values)) {
    const int64_t i = std::clamp(static_cast<int64_t>(std::llround(v)) - lut.first, int64_t{0}, last);
    v = lut.data[static_cast<size_t>(i)];
  }
}

// The first item of a LUT sequence, or nullptr.
DcmItem* first_item(DcmItem& ds, const DcmTagKey& tag) {
  DcmItem* item = nullptr;
  return ds.findAndGetSequenceItem(tag, item, 0).good() ? item : nullptr;
}

// Maps values to [0, 1] linearly from [lo, hi], clipped; a flat image maps to 0.
void stretch(cv::Mat& values, double lo, double hi) {
  const double range = hi - lo;
  values.convertTo(values, CV_32F, range > 0 ? 1.0 / range : 0.0, range > 0 ? -lo / range : 0.0);
  cv::min(values, 1.0, values);
  cv::max(values, 0.0, values);
}

double percentile(const cv::Mat& values, double q) {
  std::vector<float> v(values.begin<float>(), values.end<float>());
  const size_t k = static_cast<size_t>(std::llround(q * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// The window of PS3.3 C.11.2.1.2 (LINEAR, LINEAR_EXACT, SIGMOID), to [0, 1].
void apply_window(cv::Mat& values, double c, double w, const std::string& function, const std::string& name) {
  if (function == "SIGMOID" || function == "LINEAR_EXACT" ? w <= 0 : w < 1)
    fail(name, "has Window Width " + std::to_string(w) + ", invalid for VOI LUT Function " +
                   (function.empty() ? "LINEAR" : function) + " (set data.dicom.window: minmax)");
  for (float& v : cv::Mat_<float>(values)) {
    const double x = v;
    if (function == "SIGMOID") {
      v = static_cast<float>(1.0 / (1.0 + std::exp(-4.0 * (x - c) / w)));
    } else if (function == "LINEAR_EXACT") {
      v = x <= c - w / 2 ? 0.f : x > c + w / 2 ? 1.f : static_cast<float>((x - c) / w + 0.5);
    } else {
      const double lo = c - 0.5 - (w - 1) / 2, hi = c - 0.5 + (w - 1) / 2;
      v = x <= lo ? 0.f : x > hi ? 1.f : static_cast<float>((x - (c - 0.5)) / (w - 1) + 0.5);
    }
  }
}

// `signed_first`: the LUT Descriptor's first mapped value is SS, as PS3.3 C.11.2.1.1 has it when Pixel
// Representation is 1 (also after a Modality LUT, whose output is unsigned; pydicom reads it the same way).
void apply_file_voi(cv::Mat& values, DcmDataset& ds, bool signed_first, const std::string& name) {
  if (DcmItem* item = first_item(ds, DCM_VOILUTSequence)) {
    const Lut lut = read_lut(*item, signed_first, name);
    apply_lut(values, lut);
    values.convertTo(values, CV_32F, 1.0 / (std::pow(2.0, lut.bits) - 1.0));
    return;
  }
  const std::vector<double> centers = decimals(ds, DCM_WindowCenter, name),
                            widths = decimals(ds, DCM_WindowWidth, name);
  const std::string function = text(ds, DCM_VOILUTFunction);
  if (!function.empty() && function != "LINEAR" && function != "LINEAR_EXACT" && function != "SIGMOID")
    fail(name, "has VOI LUT Function '" + function + "', expected LINEAR, LINEAR_EXACT or SIGMOID");
  if (!centers.empty() && !widths.empty()) return apply_window(values, centers[0], widths[0], function, name);
  double lo = 0, hi = 0;
  cv::minMaxLoc(values, &lo, &hi);
  stretch(values, lo, hi);
}

// Rescale Slope/Intercept as the file gives them.
void apply_rescale(cv::Mat& values, DcmDataset& ds, const std::string& name) {
  const std::vector<double> slope = decimals(ds, DCM_RescaleSlope, name),
                            intercept = decimals(ds, DCM_RescaleIntercept, name);
  const double s = slope.empty() ? 1.0 : slope[0], b = intercept.empty() ? 0.0 : intercept[0];
  if (s != 1.0 || b != 0.0) values.convertTo(values, CV_32F, s, b);
}

// The file's bytes as a stream that DCMTK can reopen at an offset. DCMTK allocates a value's declared
// length before it reads the value; with a reopenable stream it instead skips any value longer than
// kDeferredLength (a skip past the end is a read error) and loads it when it is used, so no value the bytes
// do not hold is ever allocated. (A DcmInputBufferStream cannot be reopened.) A deflated data set is read
// whole, as before: its values' lengths lie in the compressed stream (length_check.cpp bounds it at 1032
// times the file, deflate's limit).
class MemoryStream : public DcmInputBufferStream {
 public:
  MemoryStream(const unsigned char* data, size_t size, size_t offset)
      : data_(data), size_(size), offset_(offset) {
    if (offset < size) setBuffer(data + offset, static_cast<offile_off_t>(size - offset));
    setEos();
  }
  DcmInputStreamFactory* newFactory() const override {
    if (inflating_) return nullptr;  // positions in an inflated stream are not offsets into `data_`
    return new Factory(data_, size_, offset_ + static_cast<size_t>(tell()));
  }
  OFCondition installCompressionFilter(E_StreamCompression filter) override {
    inflating_ = true;
    return DcmInputBufferStream::installCompressionFilter(filter);
  }

 private:
  class Factory : public DcmInputStreamFactory {
   public:
    Factory(const unsigned char* data, size_t size, size_t offset)
        : data_(data), size_(size), offset_(offset) {}
    DcmInputStream* create() const override { return new MemoryStream(data_, size_, offset_); }
    DcmInputStreamFactory* clone() const override { return new Factory(*this); }
    DcmInputStreamFactoryType ident() const override { return DFT_DcmInputFileStreamFactory; }

   private:
    const unsigned char* data_;
    size_t size_, offset_;
  };
  const unsigned char* data_;
  size_t size_, offset_;
  bool inflating_ = false;
};

constexpr Uint32 kDeferredLength = 4096;

// Parses the whole file; a file DCMTK cannot parse is one line, and with the DICM preamble it is DICOM,
// just not readable. `bytes` must outlive `file` (its long values are read from them when used).
void parse(const std::vector<unsigned char>& bytes, const std::string& name, DcmFileFormat& file) {
  MemoryStream in(bytes.data(), bytes.size(), 0);
  file.transferInit();
  const OFCondition st = file.read(in, EXS_Unknown, EGL_noChange, kDeferredLength);
  file.transferEnd();
  if (st.good()) return;
  if (has_dicom_preamble(bytes.data(), bytes.size()))
    fail(name,
         std::string("cannot be parsed (a DICOM preamble, then data DCMTK cannot read: ") + st.text() + ")");
  fail(name, std::string("cannot be read (not DICOM, corrupt or truncated: ") + st.text() + ")");
}

cv::Mat decode(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window) {
  init_dicom_library();
  check_dicom_lengths(bytes.data(), bytes.size(), name);  // before DCMTK allocates what the file declares
  DcmFileFormat file;
  parse(bytes, name, file);
  DcmDataset& ds = *file.getDataset();
  if (!ds.tagExists(DCM_PixelData)) {
    std::string sop = sop_class_name(ds, DCM_SOPClassUID);
    if (sop == "no SOP class") sop = sop_class_name(*file.getMetaInfo(), DCM_MediaStorageSOPClassUID);
    fail(name, "holds no pixel data (" + sop + "), expected an image");
  }
  check_header(ds, name);
  const PixelFormat f = pixel_format(ds, bytes.size(), name);
  check_palettes(ds, name);
  check_overlays(ds, f, name);
  cv::Mat values = stored_values(frame_bytes(ds, f, name), f);
  if (DcmItem* modality_lut = first_item(ds, DCM_ModalityLUTSequence))
    apply_lut(values, read_lut(*modality_lut, f.is_signed, name));
  else
    apply_rescale(values, ds, name);
  if (window == DicomWindow::kFile) {
    apply_file_voi(values, ds, f.is_signed, name);
  } else if (window == DicomWindow::kPercentile) {
    stretch(values, percentile(values, 0.01), percentile(values, 0.99));
  } else {
    double lo = 0, hi = 0;
    cv::minMaxLoc(values, &lo, &hi);
    stretch(values, lo, hi);
  }
  if (text(ds, DCM_PhotometricInterpretation) == "MONOCHROME1") values.convertTo(values, CV_32F, -1.0, 1.0);
  return values;
}

}  // namespace

bool has_dicom_preamble(const unsigned char* bytes, size_t size) {
  return size >= 132 && std::memcmp(bytes + 128, "DICM", 4) == 0;
}

bool has_dicom_extension(const std::string& path) {
  std::string lower = path;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  auto ends = [&](const std::string& s) {
    return lower.size() >= s.size() && lower.compare(lower.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".dcm") || ends(".dicom");
}

cv::Mat decode_dicom(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window) {
  try {
    return decode(bytes, name, window);
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::bad_alloc&) {
    fail(name, "does not fit in memory");
  } catch (const std::exception& e) {  // OpenCV's own (several lines): the first line only
    const std::string what = e.what();
    fail(name, "DCMTK or OpenCV failed: " + what.substr(0, what.find('\n')));
  }
}

DicomU8 decode_dicom_u8(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window,
                        int target_size) {
  const cv::Mat image = decode_dicom(bytes, name, window);
  const int factor = std::min(image.cols, image.rows) / std::max(1, target_size);
  cv::Mat small = image;
  if (factor >= 2)
    cv::resize(image, small, cv::Size(image.cols / factor, image.rows / factor), 0, 0, cv::INTER_AREA);
  DicomU8 out;
  small.convertTo(out.image, CV_8U, 255.0);
  out.original_size = image.size();
  return out;
}

}  // namespace ranzcr
