// safetensors: the 8-byte header length, the JSON header and the tensor data (parse_safetensors), and
// the header-only metadata read (read_safetensors_metadata) that evaluate/predict use to tell files apart.
#include "engine/io/safetensors.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string bytes = fuzz::as_string(data, size);
  fuzz::expect_read_or_refused([&] { parse_safetensors(bytes, "in.safetensors"); }, "in.safetensors");
  const std::string path = fuzz::write_input("in.safetensors", data, size);
  fuzz::expect_read_or_refused([&] { read_safetensors_metadata(path); }, path);
  return 0;
}
