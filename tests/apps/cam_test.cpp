// predict --cam end to end: a tiny_cnn trained on a synthetic set (the quickstart recipe on 1000 images, 6
// epochs) draws Grad-CAM overlays of 200 unseen synthetic images, and its maps' peaks fall on the
// annotated devices more often than chance (scripts/cam/localisation.py; skipped without numpy or Pillow).
// The figures of the full quickstart model are in docs/evaluation.md.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>

#include <filesystem>
#include <string>

#include "data/csv.h"
#include "tests/build_paths.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using test::run_command;

using test::python;

TEST(CamTest, PeaksFallOnTheDevicesMoreOftenThanChance) {
  test::TempDir dir;
  const std::string bin = test::ranzcr_binary(), ds = dir / "ds", run = dir / "run";
  const auto t = run_command(bin + " train --config " + test::source_dir() +
                             "/configs/quickstart.yaml --set data.root=" + ds + " --set synth.root=" + ds +
                             " --set synth.num_images=1000 --set synth.num_test_images=0 --set train.epochs=6"
                             " --set output.dir=" +
                             run);
  ASSERT_EQ(t.status, 0) << t.output;
  const auto s = run_command(bin + " synth --out " + (dir / "unseen") +
                             " --num-images 200 --num-test-images 0 --image-size 256 --seed 11");
  ASSERT_EQ(s.status, 0) << s.output;
  const auto p = run_command(bin + " predict --checkpoint " + run + "/checkpoints/best.pt --images " +
                             (dir / "unseen/train") + " --csv " + (dir / "unseen/train.csv") + " --out " +
                             (dir / "sub.csv") + " --cam " + (dir / "cam") + " --cam-labels all");
  ASSERT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("wrote 200 overlays"), std::string::npos) << p.output;
  const cv::Mat png = cv::imread(dir / "cam/1.2.826.0.1.3680043.8.498.11.1100000.png");
  EXPECT_EQ(png.cols, 11 * 320);  // a panel per label
  EXPECT_EQ(png.rows, 320 + 28);
  EXPECT_EQ(read_csv(dir / "cam/cam_peaks.csv").rows.size(), 200u * 11u);

  const auto l =
      run_command(python() + " " + test::source_dir() + "/scripts/cam/localisation.py " + (dir / "unseen") +
                  " " + (dir / "cam/cam_peaks.csv") + " --json " + (dir / "loc.json"));
  if (l.status == 77) RANZCR_SKIP_WITHOUT_REFERENCE("no numpy or Pillow: " << l.output);
  ASSERT_EQ(l.status, 0) << l.output;
  std::cout << l.output;
  const auto j = nlohmann::json::parse(test::read_file(dir / "loc.json"));
  EXPECT_GT(j["all"]["n"].get<int>(), 100);
  EXPECT_GT(j["all"]["hit_rate"].get<double>(), j["all"]["chance"].get<double>() * 1.2) << l.output;
}

}  // namespace
}  // namespace ranzcr
