#include "data/synth.h"

#include "data/dataset_index.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

TEST(Synth, RenderIsDeterministicAndLabelsMatchAnnotations) {
  for (int i = 0; i < 40; ++i) {
    const SynthStudy a = render_study(5, i, i / 3, 96, false), b = render_study(5, i, i / 3, 96, false);
    ASSERT_EQ(a.labels, b.labels);
    ASSERT_EQ(cv::norm(a.image, b.image, cv::NORM_INF), 0.0);
    std::vector<int> from_annotations(11, 0);
    for (const auto& an : a.annotations) {
      const auto& names = ranzcr_label_names();
      const auto k = std::find(names.begin(), names.end(), an.label) - names.begin();
      ASSERT_LT(k, 11);
      from_annotations[k] = 1;
      EXPECT_GE(an.polyline.size(), 2u);
    }
    EXPECT_EQ(from_annotations, a.labels) << "study " << i;
  }
}

TEST(Synth, PrevalenceIsNearTheRealSet) {
  std::vector<double> count(11, 0.0);
  const int n = 3000;
  for (int i = 0; i < n; ++i) {
    const SynthStudy s = render_study(1, i, i / 9, 64, false);
    for (int k = 0; k < 11; ++k) count[k] += s.labels[k];
  }
  // Real prevalence (train.csv, 30,083 images); rare columns are floored at about 1%
  // (docs/synthetic-data.md).
  const std::vector<double> real = {0.0026, 0.0378, 0.2407, 0.0093, 0.0176, 0.0913,
                                    0.1595, 0.1062, 0.2812, 0.7088, 0.0276};
  for (int k = 0; k < 11; ++k) {
    const double p = count[k] / n;
    EXPECT_NEAR(p, std::max(real[k], 0.011), 0.35 * std::max(real[k], 0.011) + 0.006)
        << ranzcr_label_names()[k];
  }
}

TEST(Synth, WritesTheKaggleLayout) {
  test::TempDir dir;
  test::make_dataset(dir / "ds", 30, 64, 7);
  const DatasetIndex idx = load_index(dir / "ds/train.csv", dir / "ds/train", IndexOptions{});
  EXPECT_EQ(idx.size(), 30u);
  EXPECT_EQ(idx.label_names, ranzcr_label_names());
  EXPECT_EQ(index_from_folder(dir / "ds/test", ".jpg").size(), 7u);
  IndexOptions sub;
  sub.with_labels = false;
  EXPECT_EQ(load_index(dir / "ds/sample_submission.csv", dir / "ds/test", sub).size(), 7u);
  EXPECT_EQ(load_index(dir / "ds/test_labels.csv", dir / "ds/test", IndexOptions{}).size(), 7u);
  const std::string ann = test::read_file(dir / "ds/train_annotations.csv");
  EXPECT_EQ(ann.rfind("StudyInstanceUID,label,data\n", 0), 0u);
  EXPECT_NE(ann.find("\"[["), std::string::npos);
  EXPECT_THROW(test::make_dataset(dir / "ds", 30, 64, 7), std::runtime_error);  // never overwrites
  EXPECT_FALSE(std::filesystem::exists(dir / "ds.tmp-" + std::to_string(getpid())));
}

}  // namespace
}  // namespace ranzcr
