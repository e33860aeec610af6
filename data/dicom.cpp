#include "data/dicom.h"

#include <gdcmAttribute.h>
#include <gdcmImage.h>
#include <gdcmImageChangeTransferSyntax.h>
#include <gdcmImageReader.h>
#include <gdcmImageWriter.h>
#include <gdcmReader.h>
#include <gdcmTrace.h>
#include <gdcmUIDs.h>
#include <gdcmWriter.h>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "data/dicom_check.h"
#include "data/pixel_budget.h"
#include "data/printable.h"

namespace gdcm {
// The longest value GDCM's ByteValue::SetLength allocates on this thread (scripts/gdcm-patches/
// value_length_cap.pl: a GDCM built by scripts/gdcm.sh).
extern thread_local unsigned long long ranzcr_max_value_length;
}  // namespace gdcm

namespace ranzcr {
namespace {

const gdcm::Tag kPixelData(0x7fe0, 0x0010), kNumberOfFrames(0x0028, 0x0008), kSopClass(0x0008, 0x0016),
    kPhotometric(0x0028, 0x0004), kWindowCenter(0x0028, 0x1050), kWindowWidth(0x0028, 0x1051),
    kVoiFunction(0x0028, 0x1056), kVoiLutSequence(0x0028, 0x3010), kModalityLutSequence(0x0028, 0x3000),
    kLutDescriptor(0x0028, 0x3002), kLutData(0x0028, 0x3006), kRescaleIntercept(0x0028, 0x1052),
    kRescaleSlope(0x0028, 0x1053), kRows(0x0028, 0x0010), kColumns(0x0028, 0x0011);

// `what` quotes values from the file (a SOP class UID, a Number of Frames, ...): escaped and cut to one line.
[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw std::runtime_error("DICOM file " + name + ": " + printable(what, 1000));
}

// GDCM reports problems on stderr by default; ours go into one error line instead.
void silence_gdcm() {
  static std::once_flag once;
  std::call_once(once, [] {
    gdcm::Trace::SetDebug(false);
    gdcm::Trace::SetWarning(false);
    gdcm::Trace::SetError(false);
  });
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && s[b] == ' ') ++b;
  return s.substr(b);
}

// A text element's value (trailing padding removed), "" when absent.
std::string text(const gdcm::DataSet& ds, const gdcm::Tag& tag) {
  if (!ds.FindDataElement(tag)) return "";
  const gdcm::ByteValue* bv = ds.GetDataElement(tag).GetByteValue();
  return bv ? trim(std::string(bv->GetPointer(), bv->GetLength())) : "";
}

// Two bytes in host (little-endian) order: GDCM has swapped a big-endian file's US/SS/OW values.
uint16_t u16(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint16_t>(b[0] | (b[1] << 8));
}

// A US element's one value, -1 when absent or not 2 bytes.
int us_value(const gdcm::DataSet& ds, const gdcm::Tag& tag) {
  if (!ds.FindDataElement(tag)) return -1;
  const gdcm::ByteValue* bv = ds.GetDataElement(tag).GetByteValue();
  if (!bv || bv->GetLength() != 2) return -1;
  return u16(bv->GetPointer());
}

// GDCM takes a JPEG stream's size when the header says another (for one vendor's files), and swaps the rows
// and columns of some ACR-NEMA files; we do not guess which is right: the image must be the header's size.
void check_header_size(const gdcm::DataSet& ds, const gdcm::Image& image, const std::string& name) {
  const int rows = us_value(ds, kRows), cols = us_value(ds, kColumns);
  const unsigned int* dims = image.GetDimensions();
  if (rows < 0 || cols < 0)
    fail(name, "has no Rows and Columns of one 16-bit value each, expected the image's size");
  if (static_cast<unsigned int>(cols) != dims[0] || static_cast<unsigned int>(rows) != dims[1])
    fail(name, "declares " + std::to_string(cols) + " x " + std::to_string(rows) +
                   " pixels, but its pixel data is " + std::to_string(dims[0]) + " x " +
                   std::to_string(dims[1]) + ", expected the same size");
}

void put_text(gdcm::DataSet& ds, const gdcm::Tag& tag, const gdcm::VR& vr, std::string value) {
  if (value.size() % 2) value += (vr == gdcm::VR::UI ? '\0' : ' ');
  gdcm::DataElement de(tag);
  de.SetVR(vr);
  de.SetByteValue(value.data(), static_cast<uint32_t>(value.size()));
  ds.Replace(de);
}

// The values of a multi-valued decimal string (DS), e.g. Window Center "40\400".
std::vector<double> decimals(const gdcm::DataSet& ds, const gdcm::Tag& tag, const std::string& name) {
  std::vector<double> out;
  std::stringstream in(text(ds, tag));
  for (std::string item; std::getline(in, item, '\\');) {
    item = trim(item);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(v))
      fail(name, "element " + tag.PrintAsPipeSeparatedString() + " holds '" + item + "', expected a number");
    out.push_back(v);
  }
  return out;
}

std::string transfer_syntax_name(const gdcm::TransferSyntax& ts) {
  const char* uid = gdcm::TransferSyntax::GetTSString(ts);
  gdcm::UIDs u;
  if (uid && u.SetFromUID(uid) && u.GetName()) return std::string(u.GetName()) + " (" + uid + ")";
  return uid ? uid : "unknown transfer syntax";
}

// The SOP class of a data set ((0008,0016)) or of a file meta group ((0002,0002)).
std::string sop_class_name(const gdcm::DataSet& ds) {
  std::string uid = text(ds, kSopClass);
  if (uid.empty()) uid = text(ds, gdcm::Tag(0x0002, 0x0002));
  gdcm::UIDs u;
  if (!uid.empty() && u.SetFromUID(uid.c_str()) && u.GetName()) return u.GetName();
  return uid.empty() ? "no SOP class" : uid;
}

// Refuses, from the header alone, what is not one greyscale frame, naming what the file holds instead.
// Runs before GDCM builds the image: some malformed values (a Number of Frames of "1A") trip its asserts.
void check_header(const gdcm::DataSet& ds, const std::string& name) {
  const std::string frames = text(ds, kNumberOfFrames);
  char* end = nullptr;
  const long n = frames.empty() ? 1 : std::strtol(frames.c_str(), &end, 10);
  if (!frames.empty() && (*end != '\0' || n < 0))
    fail(name, "has Number of Frames '" + frames + "', expected a whole number");
  if (n > 1) fail(name, "is a multi-frame image (" + frames + " frames), expected a single frame");
  const std::string pi = text(ds, kPhotometric);
  if (!pi.empty() && pi != "MONOCHROME1" && pi != "MONOCHROME2")
    fail(name, "is a colour image (" + pi + "), expected greyscale (MONOCHROME1 or MONOCHROME2)");
}

// A file GDCM's parser gives up on: with the DICM preamble it is DICOM, just not readable.
[[noreturn]] void unparsable(const std::vector<unsigned char>& bytes, const std::string& name) {
  if (has_dicom_preamble(bytes.data(), bytes.size()))
    fail(name,
         "cannot be parsed (a DICOM preamble, then data GDCM cannot read: corrupt, truncated or malformed)");
  fail(name, "cannot be read (not DICOM, corrupt or truncated)");
}

// Why GDCM could not read the file as an image: it does not parse, holds no pixel data, or holds pixel
// data GDCM cannot make an image of.
[[noreturn]] void explain_unreadable(const std::vector<unsigned char>& bytes, const std::string& name) {
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  gdcm::Reader whole;
  whole.SetStream(in);
  if (!whole.Read()) unparsable(bytes, name);
  const gdcm::File& file = whole.GetFile();
  const gdcm::DataSet& ds = file.GetDataSet();
  if (!ds.FindDataElement(kPixelData)) {
    std::string sop = sop_class_name(ds);
    if (sop == "no SOP class") sop = sop_class_name(file.GetHeader());  // e.g. a DICOMDIR: only in the meta
    fail(name, "holds no pixel data (" + sop + "), expected an image");
  }
  fail(name, "holds pixel data GDCM cannot read as an image (" +
                 transfer_syntax_name(file.GetHeader().GetDataSetTransferSyntax()) + ")");
}

// GDCM reads the frame count of multi-frame SOP classes (RT Dose, XA, NM, enhanced CT/MR, ...) from Number
// of Frames and asserts when it is absent. Such a file holds one frame: it is read again with Number of
// Frames 1 (with_one_frame). Classes GDCM reads as 2-D need no count.
bool lacks_frame_count(const gdcm::DataSet& ds) {
  static const std::set<std::string> kTwoDimensional = {
      "1.2.840.10008.5.1.4.1.1.1",     "1.2.840.10008.5.1.4.1.1.1.1",   "1.2.840.10008.5.1.4.1.1.1.1.1",
      "1.2.840.10008.5.1.4.1.1.1.2",   "1.2.840.10008.5.1.4.1.1.1.2.1", "1.2.840.10008.5.1.4.1.1.1.3",
      "1.2.840.10008.5.1.4.1.1.1.3.1", "1.2.840.10008.5.1.4.1.1.2",     "1.2.840.10008.5.1.4.1.1.4",
      "1.2.840.10008.5.1.4.1.1.7"};  // CR, DX, MG, IO (for presentation / processing), CT, MR, SC
  return !ds.FindDataElement(kNumberOfFrames) && !kTwoDimensional.count(text(ds, kSopClass));
}

void check_not_truncated(const gdcm::File& file, size_t file_size, const std::string& name);

std::string with_one_frame(std::istream& in, size_t file_size, const std::string& name) {
  gdcm::Reader whole;
  whole.SetStream(in);
  if (!whole.Read()) fail(name, "cannot be read (not DICOM, corrupt or truncated)");
  check_not_truncated(whole.GetFile(), file_size, name);
  put_text(whole.GetFile().GetDataSet(), kNumberOfFrames, gdcm::VR::IS, "1");
  std::ostringstream out;
  gdcm::Writer writer;
  writer.SetStream(out);
  writer.SetFile(whole.GetFile());
  if (!writer.Write()) fail(name, "cannot be read (not DICOM, corrupt or truncated)");
  return out.str();
}

// An uncompressed file shorter than its elements declare is truncated: GDCM reads the missing pixel
// bytes as zeros ("Incomplete Pixel Data"), so compare the file's size with the declared lengths.
void check_not_truncated(const gdcm::File& file, size_t file_size, const std::string& name) {
  const gdcm::TransferSyntax ts = file.GetHeader().GetDataSetTransferSyntax();
  if (ts.IsEncapsulated() || ts == gdcm::TransferSyntax::DeflatedExplicitVRLittleEndian) return;
  const gdcm::DataSet& ds = file.GetDataSet();
  const uint64_t body = ts.GetNegociatedType() == gdcm::TransferSyntax::Implicit
                            ? static_cast<uint64_t>(ds.GetLength<gdcm::ImplicitDataElement>())
                            : static_cast<uint64_t>(ds.GetLength<gdcm::ExplicitDataElement>());
  // GetFullLength: the preamble and "DICM" when present, and the file meta group.
  const uint64_t declared = static_cast<uint64_t>(file.GetHeader().GetFullLength()) + body;
  if (file_size < declared)
    fail(name, "is truncated (" + std::to_string(file_size) + " bytes, its elements declare " +
                   std::to_string(declared) + ")");
}

// The stored values as CV_32FC1, masked to Bits Stored and sign-extended when signed. 1-bit images are
// unpacked (least significant bit first). Compressed pixel data is decoded into buffers sized by the header,
// so the header's size is checked against the file's (pixel_budget.h) before GDCM or we allocate them.
cv::Mat stored_values(const gdcm::Image& image, size_t file_size, const std::string& name) {
  const unsigned int* dims = image.GetDimensions();
  const std::string problem = pixel_count_problem(dims[0], dims[1], file_size);
  if (!problem.empty()) fail(name, problem);
  const int cols = static_cast<int>(dims[0]), rows = static_cast<int>(dims[1]);
  const gdcm::PixelFormat pf = image.GetPixelFormat();
  const int allocated = pf.GetBitsAllocated(), stored = pf.GetBitsStored();
  const bool is_signed = pf.GetPixelRepresentation() == 1;
  if (allocated != 1 && allocated != 8 && allocated != 16 && allocated != 32)
    fail(name, "has " + std::to_string(allocated) + " bits allocated per pixel, expected 1, 8, 16 or 32");
  if (stored < 1 || stored > allocated)
    fail(name,
         "has " + std::to_string(stored) + " bits stored of " + std::to_string(allocated) + " allocated");
  const size_t count = static_cast<size_t>(rows) * cols;
  std::vector<char> buf(image.GetBufferLength());
  const size_t need = allocated == 1 ? (count + 7) / 8 : count * (allocated / 8);
  if (buf.size() < need || !image.GetBuffer(buf.data()))
    fail(name, "its pixel data cannot be decoded (truncated, corrupt, or " +
                   transfer_syntax_name(image.GetTransferSyntax()) + " not supported)");
  // GDCM swaps big-endian 32-bit pixels as two 16-bit halves (checked against pydicom): swap them back.
  if (allocated == 32 && image.GetTransferSyntax() == gdcm::TransferSyntax::ExplicitVRBigEndian) {
    auto* words = reinterpret_cast<uint32_t*>(buf.data());
    for (size_t i = 0; i < count; ++i) words[i] = (words[i] << 16) | (words[i] >> 16);
  }
  cv::Mat out(rows, cols, CV_32F);
  float* dst = out.ptr<float>();
  const uint64_t mask = stored >= 32 ? 0xFFFFFFFFull : ((1ull << stored) - 1);
  for (size_t i = 0; i < count; ++i) {
    uint64_t raw = 0;
    if (allocated == 1) raw = (static_cast<unsigned char>(buf[i / 8]) >> (i % 8)) & 1u;
    if (allocated == 8) raw = static_cast<unsigned char>(buf[i]);
    if (allocated == 16) raw = reinterpret_cast<const uint16_t*>(buf.data())[i];
    if (allocated == 32) raw = reinterpret_cast<const uint32_t*>(buf.data())[i];
    raw &= mask;
    int64_t v = static_cast<int64_t>(raw);
    if (is_signed && (raw >> (stored - 1)) & 1u) v -= static_cast<int64_t>(1) << stored;
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

// GDCM has already swapped the US/SS/OW values of a big-endian file to host (little-endian) order.
Lut read_lut(const gdcm::DataSet& item, bool signed_first, const std::string& name) {
  const gdcm::ByteValue* desc =
      item.FindDataElement(kLutDescriptor) ? item.GetDataElement(kLutDescriptor).GetByteValue() : nullptr;
  const gdcm::ByteValue* data =
      item.FindDataElement(kLutData) ? item.GetDataElement(kLutData).GetByteValue() : nullptr;
  if (!desc || desc->GetLength() != 6 || !data) fail(name, "has a LUT without a 3-value descriptor or data");
  const char* d = desc->GetPointer();
  Lut lut;
  const size_t entries = u16(d) == 0 ? 65536 : u16(d);
  lut.first = signed_first ? static_cast<int16_t>(u16(d + 2)) : u16(d + 2);
  lut.bits = u16(d + 4);
  if (lut.bits < 1 || lut.bits > 16)
    fail(name, "has a LUT of " + std::to_string(lut.bits) + " bits, expected 1 to 16");
  const size_t bytes = data->GetLength();
  const bool packed8 = lut.bits <= 8 && (bytes == entries || bytes == entries + 1);
  if (!packed8 && bytes < 2 * entries)
    fail(name, "has a LUT of " + std::to_string(entries) + " entries with " + std::to_string(bytes) +
                   " bytes of data");
  lut.data.resize(entries);
  for (size_t i = 0; i < entries; ++i)
    lut.data[i] =
        packed8 ? static_cast<unsigned char>(data->GetPointer()[i]) : u16(data->GetPointer() + 2 * i);
  return lut;
}

void apply_lut(cv::Mat& values, const Lut& lut) {
  const int64_t last = static_cast<int64_t>(lut.data.size()) - 1;
  for (float& v : cv::Mat_<float>(values)) {
    const int64_t i = std::clamp(static_cast<int64_t>(std::llround(v)) - lut.first, int64_t{0}, last);
    v = lut.data[static_cast<size_t>(i)];
  }
}

// A copy of the first item of a LUT sequence, or nullopt. A copy: for a sequence GDCM kept as bytes
// (implicit VR, defined length) GetValueAsSQ parses a new sequence that only `sq` owns.
std::optional<gdcm::DataSet> first_item(const gdcm::DataSet& ds, const gdcm::Tag& tag) {
  if (!ds.FindDataElement(tag)) return std::nullopt;
  gdcm::SmartPointer<gdcm::SequenceOfItems> sq = ds.GetDataElement(tag).GetValueAsSQ();
  if (!sq || sq->GetNumberOfItems() == 0) return std::nullopt;
  return sq->GetItem(1).GetNestedDataSet();
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
void apply_file_voi(cv::Mat& values, const gdcm::DataSet& ds, bool signed_first, const std::string& name) {
  if (const std::optional<gdcm::DataSet> item = first_item(ds, kVoiLutSequence)) {
    const Lut lut = read_lut(*item, signed_first, name);
    apply_lut(values, lut);
    values.convertTo(values, CV_32F, 1.0 / (std::pow(2.0, lut.bits) - 1.0));
    return;
  }
  const std::vector<double> centers = decimals(ds, kWindowCenter, name),
                            widths = decimals(ds, kWindowWidth, name);
  const std::string function = text(ds, kVoiFunction);
  if (!function.empty() && function != "LINEAR" && function != "LINEAR_EXACT" && function != "SIGMOID")
    fail(name, "has VOI LUT Function '" + function + "', expected LINEAR, LINEAR_EXACT or SIGMOID");
  if (!centers.empty() && !widths.empty()) return apply_window(values, centers[0], widths[0], function, name);
  double lo = 0, hi = 0;
  cv::minMaxLoc(values, &lo, &hi);
  stretch(values, lo, hi);
}

// Rescale Slope/Intercept as the file gives them (GDCM's image may override them for some modalities).
void apply_rescale(cv::Mat& values, const gdcm::DataSet& ds, const std::string& name) {
  const std::vector<double> slope = decimals(ds, kRescaleSlope, name),
                            intercept = decimals(ds, kRescaleIntercept, name);
  const double s = slope.empty() ? 1.0 : slope[0], b = intercept.empty() ? 0.0 : intercept[0];
  if (s != 1.0 || b != 0.0) values.convertTo(values, CV_32F, s, b);
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

namespace {

// gdcm::ranzcr_max_value_length (scripts/gdcm-patches/value_length_cap.pl) for this thread while a file
// is parsed: GDCM refuses any value longer than the file can hold. Lifted while the pixel data is
// decoded, whose output may be larger than the file, and restored after it: GDCM parses a LUT sequence it
// kept as bytes only when asked for it (GetValueAsSQ).
class ValueLengthCap {
 public:
  explicit ValueLengthCap(unsigned long long n) : n_(n) { restore(); }
  ~ValueLengthCap() { lift(); }
  void lift() { gdcm::ranzcr_max_value_length = ~0ULL; }
  void restore() { gdcm::ranzcr_max_value_length = n_; }
  ValueLengthCap(const ValueLengthCap&) = delete;
  ValueLengthCap& operator=(const ValueLengthCap&) = delete;

 private:
  unsigned long long n_;
};

cv::Mat decode(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window) {
  silence_gdcm();
  // Before GDCM allocates what the file declares: our walk of its lengths, and a cap on any value GDCM's
  // own re-reads under other interpretations would allocate.
  ValueLengthCap cap(check_dicom_lengths(bytes.data(), bytes.size(), name));
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  {
    gdcm::Reader header;
    header.SetStream(in);
    if (!header.ReadUpToTag(kPixelData)) {  // no pixel data: the whole file must parse to say so
      in.clear();
      in.seekg(0);
      explain_unreadable(bytes, name);
    }
    check_header(header.GetFile().GetDataSet(), name);
    if (lacks_frame_count(header.GetFile().GetDataSet())) {
      in.clear();
      in.seekg(0);
      in.str(with_one_frame(in, bytes.size(), name));
    }
  }
  in.clear();
  in.seekg(0);
  gdcm::ImageReader reader;
  reader.SetStream(in);
  if (!reader.Read()) explain_unreadable(bytes, name);
  const gdcm::DataSet& ds = reader.GetFile().GetDataSet();
  const gdcm::Image& image = reader.GetImage();
  if (image.GetNumberOfDimensions() > 2 && image.GetDimensions()[2] > 1)
    fail(name, "is a multi-frame image (" + std::to_string(image.GetDimensions()[2]) +
                   " frames), expected a single frame");
  if (image.GetPixelFormat().GetSamplesPerPixel() != 1)
    fail(name, "has " + std::to_string(image.GetPixelFormat().GetSamplesPerPixel()) +
                   " samples per pixel, expected 1 (greyscale)");
  check_not_truncated(reader.GetFile(), in.str().size(), name);
  check_header_size(ds, image, name);
  cap.lift();
  cv::Mat values = stored_values(image, bytes.size(), name);
  cap.restore();
  const bool signed_pixels = image.GetPixelFormat().GetPixelRepresentation() == 1;
  const std::optional<gdcm::DataSet> modality_lut = first_item(ds, kModalityLutSequence);
  if (modality_lut)
    apply_lut(values, read_lut(*modality_lut, signed_pixels, name));
  else
    apply_rescale(values, ds, name);
  if (window == DicomWindow::kFile) {
    apply_file_voi(values, ds, signed_pixels, name);
  } else if (window == DicomWindow::kPercentile) {
    stretch(values, percentile(values, 0.01), percentile(values, 0.99));
  } else {
    double lo = 0, hi = 0;
    cv::minMaxLoc(values, &lo, &hi);
    stretch(values, lo, hi);
  }
  if (image.GetPhotometricInterpretation() == gdcm::PhotometricInterpretation::MONOCHROME1)
    values.convertTo(values, CV_32F, -1.0, 1.0);
  return values;
}

}  // namespace

cv::Mat decode_dicom(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window) {
  try {
    return decode(bytes, name, window);
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::bad_alloc&) {
    fail(name, "does not fit in memory");
  } catch (const std::exception& e) {  // GDCM's and OpenCV's own (several lines): the first line only
    const std::string what = e.what();
    fail(name, "GDCM or OpenCV failed: " + what.substr(0, what.find('\n')));
  } catch (const char* what) {  // GDCM throws C strings in places
    fail(name, std::string("GDCM failed: ") + what);
  } catch (const std::string& what) {  // gdcmAssertAlwaysMacro: "Assert: In FILE, line N, function ..."
    const std::string where = what.substr(0, what.find(", function"));
    const size_t slash = where.rfind('/');  // npos + 1 == 0: no folder
    fail(name, "GDCM failed one of its own checks (" + where.substr(slash + 1) + ")");
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

namespace {

gdcm::TransferSyntax::TSType syntax_of(DicomWriteOptions::Syntax s) {
  switch (s) {
    case DicomWriteOptions::Syntax::kRle:
      return gdcm::TransferSyntax::RLELossless;
    case DicomWriteOptions::Syntax::kJpegLossless:
      return gdcm::TransferSyntax::JPEGLosslessProcess14_1;
    case DicomWriteOptions::Syntax::kJpegLsLossless:
      return gdcm::TransferSyntax::JPEGLSLossless;
    case DicomWriteOptions::Syntax::kJpeg2000Lossless:
      return gdcm::TransferSyntax::JPEG2000Lossless;
    case DicomWriteOptions::Syntax::kExplicitLittle:
      break;
  }
  return gdcm::TransferSyntax::ExplicitVRLittleEndian;
}

std::string decimal_string(double v) {
  std::ostringstream s;
  s.precision(10);
  s << v;
  return s.str();
}

}  // namespace

void write_dicom(const std::string& path, const cv::Mat& stored, const DicomWriteOptions& o) {
  silence_gdcm();
  if (stored.type() != (o.is_signed ? CV_16SC1 : CV_16UC1) || !stored.isContinuous())
    throw std::runtime_error("write_dicom: expected a continuous " +
                             std::string(o.is_signed ? "CV_16SC1" : "CV_16UC1"));
  gdcm::SmartPointer<gdcm::Image> image = new gdcm::Image;
  image->SetNumberOfDimensions(2);
  image->SetDimension(0, static_cast<unsigned int>(stored.cols));
  image->SetDimension(1, static_cast<unsigned int>(stored.rows));
  gdcm::PixelFormat pf(o.is_signed ? gdcm::PixelFormat::INT16 : gdcm::PixelFormat::UINT16);
  pf.SetBitsStored(static_cast<unsigned short>(o.bits_stored));
  image->SetPixelFormat(pf);
  image->SetPhotometricInterpretation(o.monochrome1 ? gdcm::PhotometricInterpretation::MONOCHROME1
                                                    : gdcm::PhotometricInterpretation::MONOCHROME2);
  image->SetTransferSyntax(gdcm::TransferSyntax::ExplicitVRLittleEndian);
  gdcm::DataElement pixels(kPixelData);
  pixels.SetByteValue(reinterpret_cast<const char*>(stored.data), static_cast<uint32_t>(stored.total() * 2));
  image->SetDataElement(pixels);
  gdcm::ImageChangeTransferSyntax change;
  change.SetTransferSyntax(syntax_of(o.syntax));
  change.SetInput(*image);
  if (!change.Change())
    throw std::runtime_error("cannot encode " + path + " as " + transfer_syntax_name(syntax_of(o.syntax)));
  gdcm::ImageWriter writer;
  writer.SetImage(change.GetOutput());
  gdcm::DataSet& ds = writer.GetFile().GetDataSet();
  put_text(ds, kSopClass, gdcm::VR::UI,
           "1.2.840.10008.5.1.4.1.1.1.1");  // DX Image Storage - For Presentation
  put_text(ds, gdcm::Tag(0x0008, 0x0018), gdcm::VR::UI, o.sop_instance_uid);
  put_text(ds, gdcm::Tag(0x0020, 0x000d), gdcm::VR::UI, o.study_uid);
  put_text(ds, gdcm::Tag(0x0020, 0x000e), gdcm::VR::UI, o.study_uid + ".1");
  put_text(ds, gdcm::Tag(0x0010, 0x0020), gdcm::VR::LO, o.patient_id);
  put_text(ds, gdcm::Tag(0x0008, 0x0060), gdcm::VR::CS, "DX");
  put_text(ds, gdcm::Tag(0x0008, 0x0020), gdcm::VR::DA, "20000101");  // fixed: GDCM would write today's
  put_text(ds, gdcm::Tag(0x0008, 0x0030), gdcm::VR::TM, "000000");
  put_text(ds, gdcm::Tag(0x0008, 0x0068), gdcm::VR::CS, "FOR PRESENTATION");
  if (o.slope != 1.0 || o.intercept != 0.0) {  // written as elements: GDCM's image refuses them for DX
    put_text(ds, kRescaleIntercept, gdcm::VR::DS, decimal_string(o.intercept));
    put_text(ds, kRescaleSlope, gdcm::VR::DS, decimal_string(o.slope));
  }
  if (o.window_width > 0) {
    put_text(ds, kWindowCenter, gdcm::VR::DS, decimal_string(o.window_center));
    put_text(ds, kWindowWidth, gdcm::VR::DS, decimal_string(o.window_width));
  }
  std::ofstream out(path, std::ios::binary);
  writer.SetStream(out);
  bool written = false;
  try {
    written = out && writer.Write() && out.flush();
  } catch (const char* what) {  // GDCM throws C strings in places
    throw std::runtime_error("cannot write DICOM file " + path + ": " + what);
  }
  if (!written) throw std::runtime_error("cannot write DICOM file " + path);
}

}  // namespace ranzcr
