// Image decoding and transforms (OpenCV). Images are single-channel (grayscale) throughout.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <string>

#include "data/data_config.h"

namespace ranzcr {

/// Decodes an image file to CV_8UC1 grayscale. JPEGs whose shorter side is at least twice `target_size`
/// are decoded at reduced resolution (1/2, 1/4 or 1/8, the largest factor that keeps the shorter side
/// >= target_size). Throws std::runtime_error for a missing, unreadable, truncated or corrupt file.
cv::Mat decode_grayscale(const std::string& path, int target_size);

/// A seed from (seed, epoch, sample index): augmentation randomness never depends on thread timing.
uint64_t mix_seed(uint64_t seed, uint64_t epoch, uint64_t index);

struct TransformOptions {
  int image_size = 256;   // output side, pixels
  bool train = false;     // random augmentation (train) or deterministic resize only (eval)
  AugmentConfig augment;  // ranges of the random augmentation; augment.clahe applies to both modes
  uint64_t seed = 0;
};

/// An image after the geometric part of the transform, with its photometric part still to apply:
/// the float image is clamp(u8 * scale + offset, 0, 1). Keeping the 8-bit image lets a loader ship a
/// quarter of the bytes and the GPU do the float conversion (see normalize_images).
struct TransformedImage {
  cv::Mat u8;                  // CV_8UC1 [image_size, image_size]
  double scale = 1.0 / 255.0;  // contrast / 255
  double offset = 0.0;         // 0.5 - 0.5 * contrast + brightness
};

/// Resize (and for training: random affine, flip, brightness/contrast), from CV_8UC1 of any size to
/// CV_32FC1 [image_size, image_size] with values in [0, 1]. Deterministic for (seed, epoch, index).
class ImageTransform {
 public:
  explicit ImageTransform(TransformOptions options) : options_(std::move(options)) {}
  /// The float image: to_float(transform_u8(...)).
  cv::Mat operator()(const cv::Mat& gray, int64_t epoch, int64_t sample_index) const;
  /// Resize, CLAHE, affine and flip as 8-bit; brightness/contrast as the returned scale and offset.
  TransformedImage transform_u8(const cv::Mat& gray, int64_t epoch, int64_t sample_index) const;
  const TransformOptions& options() const { return options_; }

 private:
  TransformOptions options_;
};

/// CV_32FC1 clamp(u8 * scale + offset, 0, 1): the same float image on every path.
cv::Mat to_float(const TransformedImage& image);

}  // namespace ranzcr
