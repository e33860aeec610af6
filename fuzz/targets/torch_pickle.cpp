// The pickle interpreter behind model.pretrained, reached the way a torch.save file reaches it. The input is
// 16 little-endian 16-bit sizes, then a data.pkl: the target writes a well-formed archive with LibTorch's own
// PyTorchStreamWriter holding that data.pkl and storage records data/0 ... data/15 of those sizes (0: no
// record), and reads it with read_weight_file. The archive layer is weight_file's target; this one mutates
// the pickle and the storage sizes alone, past the archive's checks. The seeds are the data.pkl of real
// torch.save files with their records' sizes in front (scripts/fuzz/make_corpus.sh).
#include <caffe2/serialize/inline_container.h>

#include "engine/io/weight_file.h"
#include "fuzz/fuzz_util.h"

namespace {

constexpr size_t kRecords = 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  if (size < 2 * kRecords) return 0;
  static const std::string path = fuzz::write_input("in.pth", nullptr, 0);
  static const std::string zeros(65536, '\0');
  {
    caffe2::serialize::PyTorchStreamWriter writer(path);
    writer.writeRecord("byteorder", "little", 6);
    writer.writeRecord("data.pkl", data + 2 * kRecords, size - 2 * kRecords);
    for (size_t k = 0; k < kRecords; ++k) {
      const size_t bytes = data[2 * k] | (size_t{data[2 * k + 1]} << 8);
      if (bytes > 0) writer.writeRecord("data/" + std::to_string(k), zeros.data(), bytes);
    }
    writer.writeEndOfFile();
  }
  fuzz::expect_read_or_refused([&] { timm_names_from_torchvision(read_weight_file(path)); }, path);
  return 0;
}
