// How a trained model's forward runs for predict, evaluate, serve and cv's out-of-fold pass: LibTorch (eager,
// on the CPU or CUDA; also training's validation) or OpenVINO (the model's ONNX graph compiled for this CPU).
// Batching, TTA and ensembles sit above this seam and do not change with the backend.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>

#include "engine/config/config.h"
#include "engine/runtime/precision.h"
#include "models/registry.h"

namespace ranzcr {

struct TrainedModel;

enum class InferBackend { kLibTorch, kOpenVino };

/// The backend and precision one command runs its models with (infer.backend, infer.precision resolved).
struct BackendOptions {
  InferBackend backend = InferBackend::kLibTorch;
  /// OpenVINO's inference precision: fp32, bf16, or kAuto for the CPU's own default (bf16 where it has AMX or
  /// AVX-512 BF16, else f32). LibTorch ignores it (its autocast is InferenceOptions::precision).
  InferPrecisionSetting precision = InferPrecisionSetting::kFp32;
  int num_threads = 0;  // OpenVINO's inference threads: LibTorch's count (0: OpenVINO's default, every core)
};

/// Which command the models run for: metrics (evaluate, cv's out-of-fold pass) must reproduce the AUC
/// training logged, so infer.precision auto is fp32 there; predictions (predict, serve) take the CPU's
/// fastest.
enum class InferUse { kMetrics, kPredictions };

/// infer.backend and infer.precision for `device` and `use`. auto: OpenVINO on a CPU where the build has it,
/// LibTorch on CUDA. Throws one line for openvino in a build without it, on a CUDA device, or bf16 asked of a
/// CPU that has none.
BackendOptions resolve_backend(const Config& config, const torch::Device& device, InferUse use);

/// "libtorch" or "openvino f32" / "openvino bf16" (the precision the compiled model actually runs).
std::string backend_name(const BackendOptions& options);

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  /// [N, C, H, W] float32 normalised images (on the runner's device) -> [N, classes] float32 logits, in the
  /// caller's grad mode. Safe to call from several threads at once.
  virtual torch::Tensor logits(const torch::Tensor& images) = 0;
  /// What runs: "libtorch", "openvino f32", ...
  virtual std::string name() const = 0;
};

/// LibTorch's forward of `model` (kept alive by the caller) under `precision`'s autocast on `device`.
std::unique_ptr<ModelRunner> libtorch_runner(Classifier& model, const torch::Device& device,
                                             Precision precision);

/// OpenVINO's runner of a serialised ONNX graph (onnx/onnx_export.h: input "images", output "logits"),
/// compiled once for each batch size it is given (a static shape runs faster than a dynamic one), ready at
/// once for the sizes in `warm_batches`. Throws one line in a build without OpenVINO.
std::unique_ptr<ModelRunner> openvino_runner(const std::string& onnx_bytes, const BackendOptions& options,
                                             const std::vector<int64_t>& warm_batches = {});

/// Whether this build has OpenVINO, and its version ("" without).
bool openvino_available();
std::string openvino_version();
/// Whether this CPU runs bf16 natively in OpenVINO (its capabilities list BF16); false without OpenVINO.
bool openvino_cpu_has_bf16();

}  // namespace ranzcr
