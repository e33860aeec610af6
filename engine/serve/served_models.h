// The models `ranzcr serve` keeps in memory, and what it does with one uploaded file: decode and prepare it
// as predict's loader does, run batches of such images, draw the input and the Grad-CAM overlays.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "engine/infer/ensemble.h"
#include "engine/infer/inference.h"
#include "engine/io/trained_model.h"

namespace ranzcr {

/// One upload, decoded and prepared for every model: what predict's loader hands the model for that file.
struct PreparedImage {
  std::string format;                 // "jpeg", "png" or "dicom"
  int width = 0, height = 0;          // the file's own size
  std::vector<torch::Tensor> inputs;  // per model: [1, S, S] float32 in [0, 1] on the CPU (S its image_size)
};

class ServedModels {
 public:
  /// Loads every one of `paths` on `device` (all stay in memory), each with `options_for` its info
  /// (predict's member options). Throws std::runtime_error (one line) as predict does: a missing or bad
  /// file, models predicting other labels.
  ServedModels(const std::vector<std::string>& paths, const MemberOptions& options_for,
               const torch::Device& device);

  /// Decodes `bytes` (JPEG, PNG or DICOM by content; DICOM in the sandboxed helper) and prepares it for
  /// each model. Throws std::runtime_error with one line for anything that is not such an image, or is
  /// corrupt, too large or refused by the DICOM helper. Thread-safe.
  PreparedImage prepare(const std::vector<unsigned char>& bytes) const;

  /// The probabilities [N, C] float64 of `images`, one batch per model (predict's numbers for each file:
  /// the same transform, normalisation, precision, TTA and ensemble mean). Not thread-safe: one caller.
  torch::Tensor predict(const std::vector<const PreparedImage*>& images);

  /// What runs each model ("libtorch", "openvino f32", ...), in the order of paths().
  std::vector<std::string> runner_names() const;

  /// The first model's input as an 8-bit grey PNG (image_size square): the picture the model saw.
  std::vector<unsigned char> input_png(const PreparedImage& image) const;

  /// The Grad-CAM overlay PNG predict --cam draws for this image: `labels` is {"top1"}, {"all"} or label
  /// names (std::runtime_error naming an unknown one). Not thread-safe: one caller, as predict.
  std::vector<unsigned char> cam_png(const PreparedImage& image, const std::vector<std::string>& labels);

  /// Before /readyz, on the thread that will run the batches (its CUDA handles are its own): a forward of
  /// blank images per model at each size of batch_plan(max_batch, pad) (first-call allocations, cuDNN's
  /// autotuning, OpenVINO's compilation). With `pad` (default: on a CUDA device, where cuDNN's benchmark mode
  /// tunes every new input shape on its first call, 0.5-3 s per convolution, and under OpenVINO, which
  /// compiles a static shape per batch size) predict() from then on pads each batch to the next of those
  /// sizes, so no request meets an untuned shape; without, batches run at their own size.
  void warm_up(int max_batch, std::optional<bool> pad = std::nullopt);
  /// The sizes batches run at since warm_up when padded (empty: their own size).
  const std::vector<int>& padded_sizes() const { return padded_sizes_; }

  const std::vector<std::string>& label_names() const { return infos_.front().label_names; }
  const std::vector<TrainedModelInfo>& infos() const { return infos_; }
  const std::vector<InferenceOptions>& options() const { return options_; }
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  // The batch of `images` as model m takes it (DeviceBatch::images).
  torch::Tensor device_input(size_t m, const std::vector<const PreparedImage*>& images) const;

  std::vector<std::string> paths_;
  std::vector<TrainedModelInfo> infos_;
  std::vector<std::shared_ptr<Classifier>> models_;    // LibTorch's (Grad-CAM runs them whatever the backend)
  std::vector<std::unique_ptr<ModelRunner>> runners_;  // what predict() runs (options_[m].backend)
  std::vector<InferenceOptions> options_;
  torch::Device device_;
  std::vector<int> padded_sizes_;
};

/// The batch sizes serve warms up for batches of 1 to `max_batch`: with `pad`, 1, 2, 4, ... and max_batch
/// (each batch is padded to the next of them: at most twice the images, a handful of shapes to tune);
/// without, 1 and max_batch.
std::vector<int> batch_plan(int max_batch, bool pad);
/// The smallest of `sizes` (ascending) that holds `n` images; `n` when none does or `sizes` is empty.
int padded_batch_size(int n, const std::vector<int>& sizes);

}  // namespace ranzcr
