// The OpenVINO backend: the model's ONNX graph read from memory, compiled for the CPU once per batch size.
#include <openvino/openvino.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include "core/check.h"
#include "core/text.h"
#include "engine/infer/model_runner.h"
#include "onnx/onnx_export.h"

namespace ranzcr {

namespace {

ov::Core& core() {
  static ov::Core c;  // plugins load once per process
  return c;
}

// OpenVINO's messages run over several lines (a trace of where); ours are one.
[[noreturn]] void fail(const std::string& what, const std::exception& e) {
  RANZCR_FAIL("OpenVINO ", what, ": ", first_line(e.what()));
}

// One compiled model for one batch size, and its idle infer requests (one per concurrent caller).
class CompiledBatch {
 public:
  explicit CompiledBatch(ov::CompiledModel compiled) : compiled_(std::move(compiled)) {}
  ov::InferRequest take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.empty()) return compiled_.create_infer_request();
    ov::InferRequest r = std::move(idle_.back());
    idle_.pop_back();
    return r;
  }
  void give_back(ov::InferRequest r) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(r));
  }
  const ov::CompiledModel& compiled() const { return compiled_; }

 private:
  ov::CompiledModel compiled_;
  std::mutex mutex_;
  std::vector<ov::InferRequest> idle_;
};

class OpenVinoRunner : public ModelRunner {
 public:
  OpenVinoRunner(const std::string& onnx_bytes, const BackendOptions& options, std::vector<int64_t> warm)
      : options_(options) {
    try {
      model_ = core().read_model(onnx_bytes, ov::Tensor());
    } catch (const std::exception& e) {
      fail("cannot read the model's ONNX graph", e);
    }
    if (warm.empty()) warm.push_back(1);
    for (int64_t b : warm) batch(b);
    const ov::element::Type p = batch(warm.front()).compiled().get_property(ov::hint::inference_precision);
    name_ = std::string("openvino ") + (p == ov::element::bf16  ? "bf16"
                                        : p == ov::element::f16 ? "f16"
                                                                : "f32");
  }

  torch::Tensor logits(const torch::Tensor& images) override {
    const torch::Tensor x = images.to(torch::kCPU, torch::kFloat32).contiguous();
    CompiledBatch& b = batch(x.size(0));
    ov::InferRequest request = b.take();
    torch::Tensor out;
    try {
      request.set_input_tensor(ov::Tensor(ov::element::f32, ov::Shape(x.sizes().begin(), x.sizes().end()),
                                          const_cast<void*>(x.data_ptr())));
      request.infer();
      const ov::Tensor logits = request.get_tensor(kOnnxLogits);
      const ov::Shape s = logits.get_shape();
      out = torch::from_blob(const_cast<float*>(logits.data<const float>()),
                             {static_cast<int64_t>(s[0]), static_cast<int64_t>(s[1])}, torch::kFloat32)
                .clone();
    } catch (const std::exception& e) {
      fail("inference failed", e);
    }
    b.give_back(std::move(request));
    return out;
  }

  std::string name() const override { return name_; }

 private:
  CompiledBatch& batch(int64_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = compiled_.find(size);
    if (it != compiled_.end()) return *it->second;
    return *compiled_.emplace(size, std::make_unique<CompiledBatch>(compile(size))).first->second;
  }

  ov::CompiledModel compile(int64_t size) const {
    try {
      std::shared_ptr<ov::Model> m = model_->clone();
      ov::PartialShape shape = m->input().get_partial_shape();
      shape[0] = size;  // a static batch: faster than a dynamic one on the CPU
      m->reshape(shape);
      ov::AnyMap config{ov::hint::performance_mode(ov::hint::PerformanceMode::LATENCY), ov::num_streams(1)};
      if (options_.num_threads > 0) config.emplace(ov::inference_num_threads(options_.num_threads));
      if (options_.precision == InferPrecisionSetting::kFp32)
        config.emplace(ov::hint::inference_precision(ov::element::f32));
      if (options_.precision == InferPrecisionSetting::kBf16)
        config.emplace(ov::hint::inference_precision(ov::element::bf16));
      return core().compile_model(m, "CPU", config);
    } catch (const std::exception& e) {
      fail("cannot compile the model for batches of " + std::to_string(size), e);
    }
  }

  BackendOptions options_;
  std::shared_ptr<ov::Model> model_;
  std::mutex mutex_;
  std::map<int64_t, std::unique_ptr<CompiledBatch>> compiled_;
  std::string name_;
};

}  // namespace

std::unique_ptr<ModelRunner> openvino_runner(const std::string& onnx_bytes, const BackendOptions& options,
                                             const std::vector<int64_t>& warm_batches) {
  return std::make_unique<OpenVinoRunner>(onnx_bytes, options, warm_batches);
}

bool openvino_available() {
  return true;
}

std::string openvino_version() {
  const ov::Version v = ov::get_openvino_version();
  return v.buildNumber;
}

bool openvino_cpu_has_bf16() {
  try {
    const auto caps = core().get_property("CPU", ov::device::capabilities);
    return std::find(caps.begin(), caps.end(), ov::device::capability::BF16) != caps.end();
  } catch (const std::exception& e) {
    fail("cannot read the CPU's capabilities", e);
  }
}

}  // namespace ranzcr
