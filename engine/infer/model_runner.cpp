#include "engine/infer/model_runner.h"

#include <torch/torch.h>

#include "core/check.h"

namespace ranzcr {

namespace {

class LibTorchRunner : public ModelRunner {
 public:
  LibTorchRunner(Classifier& model, const torch::Device& device, Precision precision)
      : model_(model), device_(device), precision_(precision) {}
  torch::Tensor logits(const torch::Tensor& images) override {
    Autocast autocast(device_, precision_);
    return model_.forward(images).to(torch::kFloat32);
  }
  std::string name() const override { return "libtorch"; }

 private:
  Classifier& model_;
  torch::Device device_;
  Precision precision_;
};

}  // namespace

std::unique_ptr<ModelRunner> libtorch_runner(Classifier& model, const torch::Device& device,
                                             Precision precision) {
  return std::make_unique<LibTorchRunner>(model, device, precision);
}

BackendOptions resolve_backend(const Config& config, const torch::Device& device, InferUse use) {
  BackendOptions o;
  // As many threads as LibTorch has (train.num_threads, else OMP_NUM_THREADS, else the cores this process was
  // given: share_cores), so that OpenVINO never takes more cores than the LibTorch forward it replaces.
  o.num_threads = config.train.num_threads > 0 ? config.train.num_threads : torch::get_num_threads();
  switch (config.infer.backend) {
    case InferBackendSetting::kAuto:
      // Metrics run the very computation that logged the training AUC (LibTorch): OpenVINO's f32 kernels sum
      // in another order, and logits 1e-6 apart flip near-ties, which moved a barely trained model's AUC by
      // 0.014.
      o.backend = device.is_cpu() && openvino_available() && use == InferUse::kPredictions
                      ? InferBackend::kOpenVino
                      : InferBackend::kLibTorch;
      break;
    case InferBackendSetting::kLibTorch:
      o.backend = InferBackend::kLibTorch;
      break;
    case InferBackendSetting::kOpenVino:
      RANZCR_CHECK(openvino_available(),
                   "infer.backend is openvino, but this ranzcr was built without OpenVINO (scripts/setup.sh "
                   "installs it into .venv), expected infer.backend auto or libtorch here");
      RANZCR_CHECK(device.is_cpu(), "infer.backend openvino runs on the CPU, but the device is ",
                   device.str(), ": set train.device: cpu, or infer.backend: libtorch");
      o.backend = InferBackend::kOpenVino;
      break;
  }
  o.precision = config.infer.precision;
  if (o.precision == InferPrecisionSetting::kAuto && use == InferUse::kMetrics)
    o.precision = InferPrecisionSetting::kFp32;
  if (o.backend == InferBackend::kOpenVino && o.precision == InferPrecisionSetting::kBf16)
    RANZCR_CHECK(openvino_cpu_has_bf16(),
                 "infer.precision is bf16, but this CPU has no native bf16 (no AMX nor ",
                 "AVX-512 BF16; OpenVINO would run f32 anyway): expected fp32 or auto");
  return o;
}

std::string backend_name(const BackendOptions& options) {
  if (options.backend == InferBackend::kLibTorch) return "libtorch";
  switch (options.precision) {
    case InferPrecisionSetting::kFp32:
      return "openvino f32";
    case InferPrecisionSetting::kBf16:
      return "openvino bf16";
    default:
      return openvino_cpu_has_bf16() ? "openvino bf16" : "openvino f32";
  }
}

}  // namespace ranzcr
