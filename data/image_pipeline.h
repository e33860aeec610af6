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

/// Resize (and for training: random affine, flip, brightness/contrast), from CV_8UC1 of any size to
/// CV_32FC1 [image_size, image_size] with values in [0, 1]. Deterministic for (seed, epoch, index).
class ImageTransform {
 public:
  explicit ImageTransform(TransformOptions options) : options_(std::move(options)) {}
  cv::Mat operator()(const cv::Mat& gray, int64_t epoch, int64_t sample_index) const;
  const TransformOptions& options() const { return options_; }

 private:
  TransformOptions options_;
};

}  // namespace ranzcr
