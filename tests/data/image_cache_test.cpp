#include "data/image_cache.h"

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>

#include "data/batch_loader.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;

// A picture with structure at every scale (so a wrong resize or warp shows), w x h.
cv::Mat picture(int w, int h, int seed) {
  cv::Mat img(h, w, CV_8UC1);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      img.at<uint8_t>(y, x) = static_cast<uint8_t>((x * 255 / w + (y / 7 + seed) * 37 + (x / 11) * 53) % 256);
  cv::circle(img, cv::Point(w / 3, h / 2), std::min(w, h) / 5, cv::Scalar(255), -1);
  return img;
}

struct Files {
  test::TempDir dir;
  std::vector<std::string> paths;
  Files() {
    fs::create_directories(dir / "img");
    paths = {dir / "img/a.png", dir / "img/b.jpg", dir / "img/bad.jpg", dir / "img/c.png"};
    cv::imwrite(paths[0], picture(300, 200, 1));
    cv::imwrite(paths[1], picture(150, 170, 2));
    test::write_file(paths[2], std::string("\xFF\xD8\xFF\xE0 not really a JPEG", 24));
    cv::imwrite(paths[3], picture(40, 40, 3));
  }
};

void log_into(std::vector<std::string>* lines, ImageCacheOptions* o) {
  o->log = [lines](const std::string& line) { lines->push_back(line); };
}

int count_with(const std::vector<std::string>& lines, const std::string& part) {
  int n = 0;
  for (const auto& l : lines) n += l.find(part) != std::string::npos ? 1 : 0;
  return n;
}

TEST(ImageCache, PreparedSizeCoversTheZoomInMultiplesOf32) {
  EXPECT_EQ(prepared_size(512, 0.08, 0), 576);  // 552.96 -> 576
  EXPECT_EQ(prepared_size(128, 0.08, 0), 160);  // 138.24 -> 160
  EXPECT_EQ(prepared_size(256, 0.0, 0), 256);
  EXPECT_EQ(prepared_size(512, 0.08, 640), 640);
}

TEST(ImageCache, HoldsWhatPrepareImageMakesAndEachFilesError) {
  Files f;
  const PrepareOptions recipe{64, /*clahe=*/true, {}};
  ImageCacheOptions o;
  o.dir = f.dir / "cache";
  std::vector<std::string> lines;
  log_into(&lines, &o);
  auto cache = open_or_build_image_cache(f.paths, recipe, o);
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->size(), 4u);
  EXPECT_EQ(cache->side(), 64);
  EXPECT_EQ(count_with(lines, "cache: building"), 1);
  EXPECT_EQ(count_with(lines, "4/4 images (100%), "), 1);
  for (size_t i = 0; i < f.paths.size(); ++i) {
    ASSERT_EQ(cache->find(f.paths[i]), static_cast<int64_t>(i));
    if (i == 2) {
      std::string expected;
      try {
        prepare_image(f.paths[i], recipe);
      } catch (const std::runtime_error& e) {
        expected = e.what();
      }
      ASSERT_FALSE(expected.empty());
      try {
        cache->image(2);
        FAIL() << "a bad image read from the cache";
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), expected);
      }
      continue;
    }
    cv::Size original, cached_original;
    const cv::Mat want = prepare_image(f.paths[i], recipe, &original);
    const cv::Mat got = cache->image(static_cast<int64_t>(i), &cached_original);
    EXPECT_EQ(cv::countNonZero(want != got), 0) << f.paths[i];
    EXPECT_EQ(cached_original, original);
  }
  EXPECT_EQ(cache->find(f.dir / "img/other.png"), -1);
  // Relative paths name the same images.
  const fs::path cwd = fs::current_path();
  fs::current_path(f.dir.str());
  EXPECT_EQ(cache->find("img/c.png"), 3);
  fs::current_path(cwd);
  // Published whole: the file, its lock, no temporary.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(o.dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], image_cache_file_name(f.paths, recipe));
  EXPECT_EQ(names[1], names[0] + ".lock");
}

TEST(ImageCache, ReusedUntilAnImageOrTheRecipeChanges) {
  Files f;
  PrepareOptions recipe{48, false, {}};
  ImageCacheOptions o;
  o.dir = f.dir / "cache";
  std::vector<std::string> lines;
  log_into(&lines, &o);
  open_or_build_image_cache(f.paths, recipe, o);
  const std::string file = o.dir + "/" + image_cache_file_name(f.paths, recipe);
  const auto built = fs::last_write_time(file);
  lines.clear();
  auto again = open_or_build_image_cache(f.paths, recipe, o);
  EXPECT_TRUE(lines.empty()) << lines.front();
  EXPECT_EQ(fs::last_write_time(file), built);

  // Another picture in c.png (same name): the same file is rebuilt, saying which line of the key changed.
  cv::imwrite(f.paths[3], picture(40, 40, 9));
  fs::last_write_time(f.paths[3], fs::last_write_time(f.paths[3]) + std::chrono::seconds(5));
  lines.clear();
  auto rebuilt = open_or_build_image_cache(f.paths, recipe, o);
  ASSERT_EQ(count_with(lines, "cache: building " + file), 1);
  EXPECT_EQ(count_with(lines, "image " + f.paths[3] + " changed since"), 1) << lines.front();
  EXPECT_EQ(cv::countNonZero(rebuilt->image(3) != prepare_image(f.paths[3], recipe)), 0);
  EXPECT_GT(cv::countNonZero(rebuilt->image(3) != again->image(3)), 0);  // the old mapping stays valid

  // Another recipe (CLAHE on) is another file; the first stays.
  recipe.clahe = true;
  lines.clear();
  open_or_build_image_cache(f.paths, recipe, o);
  EXPECT_EQ(count_with(lines, "there is none yet"), 1);
  EXPECT_TRUE(fs::exists(file));
  EXPECT_NE(image_cache_file_name(f.paths, recipe), fs::path(file).filename().string());
}

TEST(ImageCache, TruncatedOrForeignFilesAreOneLineAndRebuilt) {
  Files f;
  const PrepareOptions recipe{32, false, {}};
  ImageCacheOptions o;
  o.dir = f.dir / "cache";
  o.quiet = true;
  open_or_build_image_cache(f.paths, recipe, o);
  const std::string file = o.dir + "/" + image_cache_file_name(f.paths, recipe);
  const std::string whole = test::read_file(file);
  const std::string key = image_cache_key(f.paths, recipe);
  // Every prefix of the file is refused with one line naming it, never read past.
  for (size_t n = 0; n < whole.size(); n += (n < 200 ? 1 : 97)) {
    try {
      ImageCache::view(reinterpret_cast<const uint8_t*>(whole.data()), n, "cut", &key);
      FAIL() << "a " << n << "-byte prefix was taken for a cache";
    } catch (const ImageCacheError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("image cache cut ", 0), 0u) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  auto expect_refused = [&](const std::string& bytes, const std::string& part) {
    test::write_file(file, bytes);
    try {
      ImageCache::open(file, &key);
      FAIL() << "taken: " << part;
    } catch (const ImageCacheError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    std::vector<std::string> lines;
    ImageCacheOptions loud = o;
    loud.quiet = false;
    log_into(&lines, &loud);
    auto rebuilt = open_or_build_image_cache(f.paths, recipe, loud);
    EXPECT_EQ(count_with(lines, "cache: building"), 1);
    EXPECT_EQ(count_with(lines, part), 1);
    EXPECT_EQ(test::read_file(file), whole);
  };
  expect_refused(whole.substr(0, whole.size() - 10), "is truncated or corrupt");
  expect_refused("PK\x03\x04 a zip, not a cache, but longer than a header ...................",
                 "is not an image cache");
  expect_refused("", "is truncated (0 bytes");
  std::string other_version = whole;
  other_version[8] = 7;
  expect_refused(other_version, "has format version 7");
}

TEST(ImageCache, NoRoomIsOneLineBeforeAnyDecoding) {
  // A size no disk here holds: 4096 images of 16384 x 16384 (1 TiB), refused before anything is reserved.
  Files f;
  const PrepareOptions recipe{16384, false, {}};
  try {
    build_image_cache(f.dir / "huge.rzc", "key", std::vector<std::string>(4096, f.paths[0]), recipe, 1, {});
    FAIL() << "a 1 TiB cache was written";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no room for the image cache"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(f.dir / "huge.rzc"));
  for (const auto& e : fs::directory_iterator(f.dir.str()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(ImageCache, CallersAtOnceBuildItOnce) {
  // The lock is flock(2) on a file opened by each caller, so callers in one process exclude each other as
  // the ranks of a node do (tests/apps: two real processes of a training run).
  Files f;
  const PrepareOptions recipe{64, true, {}};
  std::atomic<int> builds{0}, opened{0};
  std::vector<std::thread> callers;
  for (int p = 0; p < 3; ++p)
    callers.emplace_back([&] {
      ImageCacheOptions o;
      o.dir = f.dir / "cache";
      o.log = [&](const std::string& line) { builds += line.rfind("cache: building", 0) == 0 ? 1 : 0; };
      auto cache = open_or_build_image_cache(f.paths, recipe, o);
      opened += cache && cache->size() == 4 ? 1 : 0;
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(opened, 3);
}

TEST(ImageCache, LoaderBatchesAreTheSameWithAndWithoutIt) {
  test::TempDir dir;
  test::make_dataset(dir / "ds", 12, 96, 0);
  DatasetIndex index = load_index(dir / "ds/train.csv", dir / "ds/train", IndexOptions{});
  index.image_paths[5] = dir / "ds/empty.jpg";  // an unreadable image: stored, then skipped alike
  TransformOptions to;
  to.image_size = 48;
  to.prepared_size = 64;
  to.train = true;
  to.augment.clahe = true;
  to.seed = 11;
  ImageCacheOptions co;
  co.dir = dir / "cache";
  co.quiet = true;
  test::write_file(index.image_paths[5], "");  // exists for the key, empty for the decoder
  auto cache =
      CachedImages::of(open_or_build_image_cache(index.image_paths, to.prepare(), co), index.image_paths);
  ASSERT_TRUE(cache && cache->complete());
  std::vector<int64_t> rows = {3, 5, 0, 11, 7, 1, 2};
  for (bool uint8 : {false, true}) {
    LoaderOptions lo;
    lo.batch_size = 4;
    lo.num_workers = 2;
    lo.skip_bad_images = true;
    lo.uint8_images = uint8;
    BatchLoader decoded(index, rows, ImageTransform(to), /*epoch=*/2, lo);
    lo.cache = cache;
    BatchLoader cached(index, rows, ImageTransform(to), /*epoch=*/2, lo);
    int64_t skipped = 0;
    while (auto a = decoded.next()) {
      auto b = cached.next();
      ASSERT_TRUE(b);
      EXPECT_TRUE(torch::equal(a->images, b->images));
      EXPECT_TRUE(torch::equal(a->indices, b->indices));
      EXPECT_EQ(a->skipped, b->skipped);
      skipped += b->skipped;
    }
    EXPECT_FALSE(cached.next());
    EXPECT_EQ(skipped, 1);
  }
  // A loader with a cache of another size, entries of another list or without the rows' images is a bug
  // of the caller.
  TransformOptions other = to;
  other.prepared_size = 96;
  LoaderOptions lo;
  lo.cache = cache;
  EXPECT_THROW(BatchLoader(index, rows, ImageTransform(other), 0, lo), std::logic_error);
  DatasetIndex shorter = index;
  shorter.image_paths.pop_back();
  EXPECT_THROW(BatchLoader(shorter, rows, ImageTransform(to), 0, lo), std::logic_error);
  DatasetIndex moved = index;
  moved.image_paths[3] = dir / "elsewhere.jpg";
  EXPECT_FALSE(cache->of_list(moved.image_paths));  // as long, another list: its entries do not apply
  EXPECT_THROW(BatchLoader(moved, {0, 1}, ImageTransform(to), 0, lo), std::logic_error);
  lo.cache = CachedImages::of(cache->cache, moved.image_paths);
  EXPECT_TRUE(lo.cache->of_list(moved.image_paths));
  EXPECT_FALSE(lo.cache->complete());
  EXPECT_THROW(BatchLoader(moved, rows, ImageTransform(to), 0, lo), std::logic_error);
  rows.erase(rows.begin());   // without row 3, the moved image
  lo.skip_bad_images = true;  // row 5
  BatchLoader fine(moved, rows, ImageTransform(to), 0, lo);
  EXPECT_TRUE(fine.next());
}

TEST(ImageCache, WarpFromTheLargerPreparedImageMatchesResizeThenWarp) {
  // The loader warps the prepared image straight to the output: the same map as resizing to image_size
  // and then applying the geometry, interpolated once.
  cv::Mat big = picture(160, 160, 4);
  cv::GaussianBlur(big, big, cv::Size(0, 0), 1.5);
  cv::Mat small;
  cv::resize(big, small, cv::Size(128, 128), 0, 0, cv::INTER_AREA);
  TransformOptions to;
  to.image_size = 128;
  to.train = true;
  to.augment.brightness = to.augment.contrast = 0.0;
  to.seed = 3;
  const ImageTransform t(to);
  for (int i = 0; i < 8; ++i) {
    const TransformedImage direct = t.transform_u8(big, 0, i), staged = t.transform_u8(small, 0, i);
    ASSERT_EQ(direct.u8.size(), cv::Size(128, 128));
    cv::Mat diff;
    cv::absdiff(direct.u8, staged.u8, diff);
    // Inside the picture (the zero border differs by a pixel at most), the two agree to about a level
    // (measured: 1.0 to 1.1; a 1.5-pixel shift: 12.7 to 15.3).
    const cv::Rect inner(16, 16, 96, 96);
    EXPECT_LT(cv::mean(diff(inner))[0], 2.0) << "sample " << i;
    // and a map off by a pixel would not: shift the staged one and the difference grows.
    cv::Mat shifted;
    const cv::Mat shift = (cv::Mat_<double>(2, 3) << 1, 0, 1.5, 0, 1, 0);
    cv::warpAffine(staged.u8, shifted, shift, staged.u8.size());
    cv::absdiff(direct.u8, shifted, diff);
    EXPECT_GT(cv::mean(diff(inner))[0], 8.0) << "sample " << i;
  }
}

}  // namespace
}  // namespace ranzcr
