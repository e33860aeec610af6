// A build without ONNX's library (the offline GPU host's): no ONNX export, said in one line.
#include "core/check.h"
#include "onnx/onnx_export.h"

namespace ranzcr {

namespace {
constexpr const char* kNoOnnx =
    "this ranzcr was built without ONNX (Debian's libonnx-dev): install it and build again "
    "(scripts/setup.sh)";
}

std::string onnx_model_bytes(const std::vector<OnnxMember>&, const OnnxGraphSpec&) {
  RANZCR_FAIL(kNoOnnx);
}

bool onnx_export_available() {
  return false;
}

std::string onnx_library_version() {
  return "";
}

std::map<std::string, std::string> onnx_metadata(const std::string&) {
  RANZCR_FAIL(kNoOnnx);
}

}  // namespace ranzcr
