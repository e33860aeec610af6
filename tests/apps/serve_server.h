// A real `ranzcr serve` process for the tests (tests/apps/serve_*_test.cpp): started on a free port, stopped
// with SIGTERM when the object goes.
#pragma once

#include <signal.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/csv.h"
#include "tests/build_paths.h"
#include "tests/http_client.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr::test {

// A running `ranzcr serve`: started with `args` on a free port, stopped (SIGTERM) with the object.
class ServeProcess {
 public:
  ServeProcess(const std::string& log, std::vector<std::string> args) : log_(log) {
    args.insert(args.begin(), "serve");
    args.insert(args.end(), {"--port", "0"});
    pid_ = spawn(args, {}, log);
    if (!wait_for_text(log, "serving on ", 120)) return;
    std::smatch m;
    const std::string text = read_file(log);
    if (std::regex_search(text, m, std::regex("serving on http://127\\.0\\.0\\.1:(\\d+)")))
      port_ = std::stoi(m[1]);
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGTERM);
      wait_exit(pid_, 30);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return read_file(log_); }
  HttpClient client() const {
    HttpClient c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  int stop_and_wait(double timeout) {
    ::kill(pid_, SIGTERM);
    exited_ = true;
    return wait_exit(pid_, timeout);
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
};

/// A tiny_cnn trained `epochs` on `images` synthetic images of `size` px (and `test_images` test ones) in
/// DIR/ds, its run in DIR/run (checkpoint DIR/run/checkpoints/best.pt); with `predictions`, predict's CSV for
/// the test images there. The serve tests' fixtures call it in SetUpTestSuite (ASSERT_NO_FATAL_FAILURE).
inline void train_tiny_model(const std::string& dir, int images, int size, int test_images, int epochs,
                             const std::string& predictions = "") {
  make_dataset(dir + "/ds", images, size, test_images);
  write_config(dir + "/cfg.yaml", dir + "/ds",
               {{"train.epochs", std::to_string(epochs)}, {"output.dir", dir + "/run"}});
  const std::string bin = test::ranzcr_binary();
  auto r = run_command(bin + " train --config " + dir + "/cfg.yaml");
  ASSERT_EQ(r.status, 0) << r.output;
  if (predictions.empty()) return;
  r = run_command(bin + " predict --checkpoint " + dir + "/run/checkpoints/best.pt --images " + dir +
                  "/ds/test --out " + predictions);
  ASSERT_EQ(r.status, 0) << r.output;
}

/// A serve suite's fixture (`Base`: ::testing::Test, or TestWithParam<P>): train_tiny_model once for the
/// suite in a folder of its own, with predict's CSV for the test images (DIR/sub.csv) when `kPredict`.
template <int kImages, int kSize, int kTestImages, int kEpochs, bool kPredict = true,
          class Base = ::testing::Test>
class TinyModelSuite : public Base {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_NO_FATAL_FAILURE(train_tiny_model(dir_->str(), kImages, kSize, kTestImages, kEpochs,
                                             kPredict ? *dir_ / "sub.csv" : ""));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string checkpoint() { return *dir_ / "run/checkpoints/best.pt"; }
  /// Test JPEG `i`, in predict's CSV's order.
  static std::string jpeg(int i) {
    return *dir_ / ("ds/test/" + read_csv(*dir_ / "sub.csv").rows.at(i)[0] + ".jpg");
  }
  static inline TempDir* dir_ = nullptr;
};

}  // namespace ranzcr::test
