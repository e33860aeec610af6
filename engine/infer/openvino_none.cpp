// A build without OpenVINO (the offline GPU host's, or one whose .venv lacks the wheel): LibTorch runs every
// model; infer.backend openvino is refused in one line by resolve_backend.
#include "core/check.h"
#include "engine/infer/model_runner.h"

namespace ranzcr {

std::unique_ptr<ModelRunner> openvino_runner(const std::string&, const BackendOptions&,
                                             const std::vector<int64_t>&) {
  RANZCR_FAIL("this ranzcr was built without OpenVINO (scripts/setup.sh installs it into .venv)");
}

bool openvino_available() {
  return false;
}

std::string openvino_version() {
  return "";
}

bool openvino_cpu_has_bf16() {
  return false;
}

}  // namespace ranzcr
