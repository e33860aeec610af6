// Image decoding and transforms (OpenCV). Images are single-channel (grayscale) throughout.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "data/data_config.h"

namespace ranzcr {

/// Decodes an image file to CV_8UC1 grayscale. JPEGs whose shorter side is at least twice `target_size`
/// are decoded at reduced resolution (1/2, 1/4 or 1/8, the largest factor that keeps the shorter side
/// >= target_size). DICOM files (a .dcm/.dicom name or the DICM preamble) go through decode_dicom_u8 with
/// `dicom.window` in a sandboxed helper process under `dicom`'s limits (decode_dicom_sandboxed;
/// DicomSandboxUnavailable when none can run); at full bit depth they are shrunk by the largest integer
/// factor that keeps the shorter side
/// >= target_size (area average), then rounded to 8 bits. Only JPEG, PNG (8 or 16 bit) and DICOM are
/// read, told by their first bytes, each of at most 16384 x 16384 pixels by its header, checked before
/// anything is decoded. Throws std::runtime_error naming the file for a missing, unreadable, truncated or
/// corrupt file, another format or a larger image. `original_size` (optional) gets the file's own size,
/// before any reduction.
cv::Mat decode_grayscale(const std::string& path, int target_size, cv::Size* original_size = nullptr,
                         const DicomConfig& dicom = {});

/// decode_grayscale of a file's bytes already in memory (`path` names it in messages). A .dcm/.dicom `path`
/// counts as DICOM only with `by_name`; else the content alone decides (an upload has no trusted name).
cv::Mat decode_grayscale_bytes(const std::vector<unsigned char>& bytes, const std::string& path,
                               int target_size, cv::Size* original_size = nullptr,
                               const DicomConfig& dicom = {}, bool by_name = false);

/// What decode_grayscale reads `bytes` as: "dicom" (the DICM preamble, or a .dcm/.dicom `name` when one is
/// given), "jpeg", "png", or "" (none of these).
std::string image_format(const std::vector<unsigned char>& bytes, const std::string& name = "");

/// What every epoch starts from, and what data.cache stores: the image decoded, resized to side x side and
/// (clahe) contrast-equalised. Bigger than the network input, so the augmentation's zoom never upsamples.
struct PrepareOptions {
  int side = 256;      // pixels
  bool clahe = false;  // CLAHE (clip 2, 8 x 8 tiles) at side x side
  DicomConfig dicom;   // how DICOM files are decoded (decode_grayscale)
};

/// data.cache_size when set (> 0), else the smallest multiple of 32 at or above image_size * (1 + zoom),
/// `zoom` the augmentation's zoom range (data.augment.scale): at the largest zoom an output pixel still
/// spans at least one prepared pixel.
int prepared_size(int image_size, double zoom, int cache_size);

/// The largest prepared side (data.image_size with its zoom margin, or data.cache_size): a cache file
/// declaring larger images is corrupt.
constexpr int kMaxPreparedSide = 16384;

/// How `data` prepares images (data.cache_size or its default, CLAHE, DICOM): the recipe of its cache, the
/// prepared size of its transforms.
PrepareOptions prepare_options(const DataConfig& data);

/// decode_grayscale at options.side, then prepare_decoded.
cv::Mat prepare_image(const std::string& path, const PrepareOptions& options,
                      cv::Size* original_size = nullptr);

/// A decoded CV_8UC1 image of any size to CV_8UC1 side x side (area average when shrinking, bilinear
/// when enlarging), then CLAHE if set.
cv::Mat prepare_decoded(const cv::Mat& gray, const PrepareOptions& options);

/// A seed from (seed, epoch, sample index): augmentation randomness never depends on thread timing.
uint64_t mix_seed(uint64_t seed, uint64_t epoch, uint64_t index);

struct TransformOptions {
  int image_size = 256;   // output side, pixels
  bool train = false;     // random augmentation (train) or deterministic resize only (eval)
  AugmentConfig augment;  // ranges of the random augmentation; augment.clahe applies to both modes
  uint64_t seed = 0;
  DicomConfig dicom;      // how the loader decodes DICOM files (decode_grayscale)
  int prepared_size = 0;  // the images' size before the transform (prepare_image); 0: image_size
  /// How the loader prepares an image for this transform (side, CLAHE, DICOM).
  PrepareOptions prepare() const;
};

/// The random geometric part of a training transform, in the coordinates of the image resized to
/// image_size: a rotation by `angle` degrees with zoom `scale` about the image centre, a shift (tx, ty) in
/// pixels, then a horizontal flip. The identity for evaluation. The loader warps the prepared image
/// straight to the output (the resize and this map composed), so the image is interpolated once.
struct Geometry {
  double angle = 0.0, scale = 1.0, tx = 0.0, ty = 0.0;
  bool flip = false;
};

/// Applies `g` to a CV_8UC1 image already at the output size (bilinear, zero border; then the flip).
cv::Mat apply_geometry(const cv::Mat& image, const Geometry& g);

/// A mask through the same geometry as its image: `mask` is CV_8UC1 0/255 at the output size, drawn in
/// the resized image's coordinates; the result is CV_8UC1 0/1, the bilinear warp thresholded at 128, so
/// it equals apply_geometry of the same picture thresholded (a 0/255 image drawn like the mask).
cv::Mat transform_mask(const cv::Mat& mask, const Geometry& g);

/// An image after the geometric part of the transform, with its photometric part still to apply:
/// the float image is clamp(u8 * scale + offset, 0, 1). Keeping the 8-bit image lets a loader ship a
/// quarter of the bytes and the GPU do the float conversion (see normalize_images in engine/runtime).
struct TransformedImage {
  cv::Mat u8;                  // CV_8UC1 [image_size, image_size]
  double scale = 1.0 / 255.0;  // contrast / 255
  double offset = 0.0;         // 0.5 - 0.5 * contrast + brightness
  Geometry geometry;           // what was applied after the resize (for the image's mask)
};

/// Resize (and for training: random affine, flip, brightness/contrast), from a prepared CV_8UC1 image
/// (prepare_image; any size works) to CV_32FC1 [image_size, image_size] with values in [0, 1].
/// Deterministic for (seed, epoch, index). CLAHE is the preparation's, not the transform's.
class ImageTransform {
 public:
  explicit ImageTransform(TransformOptions options) : options_(std::move(options)) {}
  /// The float image: to_float(transform_u8(...)).
  cv::Mat operator()(const cv::Mat& gray, int64_t epoch, int64_t sample_index) const;
  /// Resize with affine and flip (one warp) as 8-bit; brightness/contrast as the returned scale and offset.
  TransformedImage transform_u8(const cv::Mat& gray, int64_t epoch, int64_t sample_index) const;
  const TransformOptions& options() const { return options_; }

 private:
  TransformOptions options_;
};

/// CV_32FC1 clamp(u8 * scale + offset, 0, 1): the same float image on every path.
cv::Mat to_float(const TransformedImage& image);
/// to_float into `out`, a CV_32FC1 image of the same size over memory the caller owns (a batch's slot).
void to_float(const TransformedImage& image, cv::Mat& out);

/// The training augmentation of `data` (data.image_size, data.augment), seeded by `seed`.
TransformOptions train_transform(const DataConfig& data, uint64_t seed);

}  // namespace ranzcr
