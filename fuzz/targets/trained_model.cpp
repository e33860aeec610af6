// evaluate/predict/export's --checkpoint: a ranzcr checkpoint (LibTorch archive) or an exported
// .safetensors file, told apart by content, its metadata checked and its model built and filled.
#include "engine/io/trained_model.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string path = fuzz::write_input("in.pt", data, size);
  fuzz::expect_read_or_refused([&] { load_trained_model(path, torch::kCPU); }, path);
  return 0;
}
