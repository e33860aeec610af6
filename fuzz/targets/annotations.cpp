// data.annotations_csv (Kaggle's train_annotations.csv): the CSV, each row's id looked up in the training
// table, its polyline parsed, and the devices drawn as the auxiliary head's masks; strict and with
// data.skip_bad_annotations. Also the polyline parser alone on the whole input.
#include "data/annotations.h"
#include "fuzz/fuzz_util.h"

namespace {

ranzcr::DatasetIndex make_index() {
  ranzcr::DatasetIndex index;
  for (const char* id : {"1.2.826.0.1.3680043.8.498.1", "a", "b"}) {
    index.ids.push_back(id);
    index.groups.push_back("");
    index.image_paths.push_back(std::string("images/") + id + ".jpg");
  }
  return index;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranzcr;
  static const DatasetIndex index = make_index();
  const std::string path = fuzz::write_input("train_annotations.csv", data, size);
  for (const bool skip : {false, true})
    fuzz::expect_read_or_refused(
        [&] {
          const ImageAnnotations a = load_annotations(path, index, "StudyInstanceUID", skip);
          for (const auto& devices : a.by_row)
            if (!devices.empty()) rasterize_mask(devices, cv::Size(3000, 2500), 64);
        },
        path);
  fuzz::expect_read_or_refused([&] { parse_polyline(fuzz::as_string(data, size)); }, "");
  return 0;
}
