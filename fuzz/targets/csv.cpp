// data.train_csv and predict's --csv: the CSV reader, then the data set index built from it (ids, groups,
// 0/1 labels; images not looked up), with labels (train) and without (predict's id list).
#include "data/csv.h"
#include "data/dataset_index.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  const std::string path = fuzz::write_input("train.csv", data, size);
  IndexOptions options;
  options.check_images_exist = false;
  fuzz::expect_read_or_refused([&] { load_index(path, "images", options); }, path);
  options.with_labels = false;
  fuzz::expect_read_or_refused([&] { load_index(path, "images", options); }, path);
  return 0;
}
