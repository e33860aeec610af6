// model.pretrained's weight files as they come: format detection (safetensors, zip, legacy torch.save),
// the zip archive, the pickle inside it and the state dict found in it; then torchvision's names to timm's.
#include "engine/io/weight_file.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string path = fuzz::write_input("in.pth", data, size);
  fuzz::expect_read_or_refused([&] { timm_names_from_torchvision(read_weight_file(path)); }, path);
  return 0;
}
