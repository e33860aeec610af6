#include "data/image_pipeline.h"

#include "core/check.h"
#include "core/jpeg_header.h"
#include "core/pixel_budget.h"
#include "data/dicom_sandbox.h"

#include <sys/stat.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

namespace ranzcr {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

bool is_jpeg(const std::vector<uchar>& buf) {
  return buf.size() > 4 && buf[0] == 0xFF && buf[1] == 0xD8;
}

bool is_png(const std::vector<uchar>& buf) {
  static const uchar kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return buf.size() >= 8 && std::equal(kSignature, kSignature + 8, buf.begin());
}

// Width and height from a PNG's IHDR chunk (the first one, right after the signature), or false.
bool png_size(const std::vector<uchar>& b, int64_t* width, int64_t* height) {
  if (b.size() < 24 || std::memcmp(b.data() + 12, "IHDR", 4) != 0) return false;
  auto be32 = [&](size_t at) {
    return (int64_t{b[at]} << 24) | (int64_t{b[at + 1]} << 16) | (int64_t{b[at + 2]} << 8) | b[at + 3];
  };
  *width = be32(16);
  *height = be32(20);
  return true;
}

void check_pixel_count(int64_t width, int64_t height, size_t file_size, const std::string& path) {
  const std::string problem = pixel_count_problem(width, height, file_size);
  RANZCR_CHECK(problem.empty(), "image ", path, " ", problem);
}

// A complete JPEG ends with the EOI marker (possibly followed by padding bytes).
bool jpeg_complete(const std::vector<uchar>& b) {
  size_t end = b.size();
  while (end > 2 && b[end - 1] == 0x00) --end;
  return end >= 4 && b[end - 2] == 0xFF && b[end - 1] == 0xD9;
}

// The file's bytes in one read of its size (a byte-wise copy through a stream iterator took 14 % of the
// loader's CPU time on 1.3 MB JPEGs); false when it is no regular file or cannot be opened or read.
bool read_whole_file(const std::string& path, std::vector<uchar>* buf) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  const std::streamoff size = in.tellg();
  if (size < 0) return false;
  buf->resize(static_cast<size_t>(size));
  in.seekg(0);
  return size == 0 || static_cast<bool>(in.read(reinterpret_cast<char*>(buf->data()), size));
}

}  // namespace

uint64_t mix_seed(uint64_t seed, uint64_t epoch, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ index);
}

std::string image_format(const std::vector<unsigned char>& bytes, const std::string& name) {
  if (has_dicom_preamble(bytes.data(), bytes.size()) || (!name.empty() && has_dicom_extension(name)))
    return "dicom";
  if (is_jpeg(bytes)) return "jpeg";
  if (is_png(bytes)) return "png";
  return "";
}

cv::Mat decode_grayscale(const std::string& path, int target_size, cv::Size* original_size,
                         const DicomConfig& dicom) {
  std::vector<uchar> buf;
  RANZCR_CHECK(read_whole_file(path, &buf), "cannot open image ", path);
  RANZCR_CHECK(!buf.empty(), "empty image file ", path);
  return decode_grayscale_bytes(buf, path, target_size, original_size, dicom, /*by_name=*/true);
}

cv::Mat decode_grayscale_bytes(const std::vector<unsigned char>& buf, const std::string& path,
                               int target_size, cv::Size* original_size, const DicomConfig& dicom,
                               bool by_name) {
  RANZCR_CHECK(!buf.empty(), "empty image file ", path);
  if (image_format(buf, by_name ? path : "") == "dicom") {
    DicomSandboxLimits limits;
    limits.seconds_per_image = dicom.timeout_seconds;
    limits.memory_bytes = int64_t{dicom.memory_limit_mb} << 20;
    DicomU8 decoded = decode_dicom_sandboxed(buf, path, dicom.window, target_size, limits);
    if (original_size) *original_size = decoded.original_size;
    return decoded.image;
  }
  int flags = cv::IMREAD_GRAYSCALE;
  int w = 0, h = 0;
  if (is_jpeg(buf)) {
    RANZCR_CHECK(jpeg_frame_size(buf.data(), buf.size(), &w, &h) && jpeg_complete(buf),
                 "corrupt or truncated JPEG ", path);
    check_pixel_count(w, h, buf.size(), path);
    const int side = std::min(w, h);
    if (side >= 8 * target_size)
      flags = cv::IMREAD_REDUCED_GRAYSCALE_8;
    else if (side >= 4 * target_size)
      flags = cv::IMREAD_REDUCED_GRAYSCALE_4;
    else if (side >= 2 * target_size)
      flags = cv::IMREAD_REDUCED_GRAYSCALE_2;
  } else if (is_png(buf)) {
    int64_t pw = 0, ph = 0;
    RANZCR_CHECK(png_size(buf, &pw, &ph), "corrupt PNG ", path, " (no IHDR chunk first)");
    check_pixel_count(pw, ph, buf.size(), path);
  } else {
    // OpenCV would guess among a dozen other formats (BMP, TIFF, WebP, PNM, ...); the loader reads these.
    RANZCR_FAIL("image ", path, " is not a JPEG, PNG or DICOM file");
  }
  cv::Mat img = cv::imdecode(buf, flags);
  RANZCR_CHECK(!img.empty(), "cannot decode image ", path, " (corrupt or not an image)");
  if (img.depth() != CV_8U) img.convertTo(img, CV_8U, img.depth() == CV_16U ? 1.0 / 257.0 : 1.0);
  if (original_size) *original_size = w > 0 ? cv::Size(w, h) : img.size();
  return img;
}

namespace {

// `gray` as a new s x s image: area average when shrinking (bilinear would alias), bilinear when enlarging.
cv::Mat resize_to(const cv::Mat& gray, int s) {
  if (gray.cols == s && gray.rows == s) return gray.clone();
  cv::Mat out;
  const int interp = (gray.cols > s || gray.rows > s) ? cv::INTER_AREA : cv::INTER_LINEAR;
  cv::resize(gray, out, cv::Size(s, s), 0, 0, interp);
  return out;
}

}  // namespace

int prepared_size(int image_size, double zoom, int cache_size) {
  if (cache_size > 0) return cache_size;
  const int needed = static_cast<int>(std::ceil(image_size * (1.0 + std::max(0.0, zoom)) - 1e-9));
  return (needed + 31) / 32 * 32;
}

cv::Mat prepare_decoded(const cv::Mat& gray, const PrepareOptions& options) {
  cv::Mat img = resize_to(gray, options.side);
  if (options.clahe) {
    cv::Ptr<cv::CLAHE> clahe = cv::createCLAHE(2.0, cv::Size(8, 8));
    clahe->apply(img, img);
  }
  return img;
}

cv::Mat prepare_image(const std::string& path, const PrepareOptions& options, cv::Size* original_size) {
  return prepare_decoded(decode_grayscale(path, options.side, original_size, options.dicom), options);
}

PrepareOptions prepare_options(const DataConfig& data) {
  return PrepareOptions{prepared_size(data.image_size, data.augment.scale, data.cache_size),
                        data.augment.clahe, data.dicom};
}

PrepareOptions TransformOptions::prepare() const {
  return PrepareOptions{prepared_size > 0 ? prepared_size : image_size, augment.clahe, dicom};
}

namespace {

// The 2 x 3 map from a w x h source to s x s output coordinates that a resize makes (pixel centres kept).
cv::Mat resize_map(int w, int h, int s) {
  const double fx = static_cast<double>(s) / w, fy = static_cast<double>(s) / h;
  return (cv::Mat_<double>(2, 3) << fx, 0, 0.5 * fx - 0.5, 0, fy, 0.5 * fy - 0.5);
}

// `second` after `first`, both 2 x 3 affine maps.
cv::Mat compose(const cv::Mat& second, const cv::Mat& first) {
  cv::Mat a = cv::Mat::eye(3, 3, CV_64F), b = cv::Mat::eye(3, 3, CV_64F);
  second.copyTo(a.rowRange(0, 2));
  first.copyTo(b.rowRange(0, 2));
  return cv::Mat(a * b).rowRange(0, 2).clone();
}

// The geometry's own map in output coordinates (image_size s): rotation and zoom about the centre, shift.
cv::Mat geometry_map(const Geometry& g, int s) {
  const float c = 0.5f * static_cast<float>(s - 1);
  cv::Mat m = cv::getRotationMatrix2D(cv::Point2f(c, c), g.angle, g.scale);
  m.at<double>(0, 2) += g.tx;
  m.at<double>(1, 2) += g.ty;
  return m;
}

}  // namespace

TransformedImage ImageTransform::transform_u8(const cv::Mat& gray, int64_t epoch,
                                              int64_t sample_index) const {
  const int s = options_.image_size;
  const auto& aug = options_.augment;
  TransformedImage out;
  if (!options_.train) {
    out.u8 = resize_to(gray, s);
    return out;
  }
  std::mt19937_64 rng(mix_seed(options_.seed, epoch, sample_index));
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  Geometry& g = out.geometry;
  g.angle = uniform(-aug.rotate_deg, aug.rotate_deg);
  g.scale = uniform(1.0 - aug.scale, 1.0 + aug.scale);
  g.tx = uniform(-aug.shift, aug.shift) * s, g.ty = uniform(-aug.shift, aug.shift) * s;
  g.flip = aug.hflip && uniform(0.0, 1.0) < 0.5;
  const double brightness = uniform(-aug.brightness, aug.brightness);
  const double contrast = uniform(1.0 - aug.contrast, 1.0 + aug.contrast);
  // Far larger than the output (a big cache_size): area-average first, as a bilinear warp would alias.
  const int near = static_cast<int>(std::ceil(s * (1.0 + aug.scale)));
  const cv::Mat src = (gray.cols > 2 * near || gray.rows > 2 * near) ? resize_to(gray, near) : gray;
  const cv::Mat m = compose(geometry_map(g, s), resize_map(src.cols, src.rows, s));
  cv::warpAffine(src, out.u8, m, cv::Size(s, s), cv::INTER_LINEAR, cv::BORDER_CONSTANT, cv::Scalar(0));
  if (g.flip) cv::flip(out.u8, out.u8, 1);
  // float = (x - 0.5) * contrast + 0.5 + brightness, clipped to [0, 1]
  out.scale = contrast / 255.0;
  out.offset = 0.5 - 0.5 * contrast + brightness;
  return out;
}

cv::Mat apply_geometry(const cv::Mat& image, const Geometry& g) {
  cv::Mat img = image;
  if (g.angle != 0.0 || g.scale != 1.0 || g.tx != 0.0 || g.ty != 0.0) {
    CV_Assert(img.cols == img.rows);
    cv::Mat warped;
    cv::warpAffine(img, warped, geometry_map(g, img.cols), img.size(), cv::INTER_LINEAR, cv::BORDER_CONSTANT,
                   cv::Scalar(0));
    img = warped;
  }
  if (g.flip) {
    cv::Mat flipped;
    cv::flip(img, flipped, 1);
    img = flipped;
  }
  return img;
}

cv::Mat transform_mask(const cv::Mat& mask, const Geometry& g) {
  cv::Mat out;
  cv::threshold(apply_geometry(mask, g), out, 127, 1, cv::THRESH_BINARY);
  return out;
}

cv::Mat to_float(const TransformedImage& image) {
  cv::Mat out(image.u8.size(), CV_32FC1);
  to_float(image, out);
  return out;
}

void to_float(const TransformedImage& image, cv::Mat& out) {
  CV_Assert(out.type() == CV_32FC1 && out.size() == image.u8.size());
  const void* before = out.data;
  image.u8.convertTo(out, CV_32F, image.scale, image.offset);  // in place: same size and type
  CV_Assert(out.data == before);
  cv::min(out, 1.0, out);
  cv::max(out, 0.0, out);
}

cv::Mat ImageTransform::operator()(const cv::Mat& gray, int64_t epoch, int64_t sample_index) const {
  return to_float(transform_u8(gray, epoch, sample_index));
}

TransformOptions train_transform(const DataConfig& data, uint64_t seed) {
  TransformOptions to;
  to.image_size = data.image_size;
  to.train = true;
  to.augment = data.augment;
  to.seed = seed;
  to.dicom = data.dicom;
  to.prepared_size = prepare_options(data).side;
  return to;
}

}  // namespace ranzcr
