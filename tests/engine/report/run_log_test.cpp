#include "engine/report/run_log.h"

#include <gtest/gtest.h>

#include <sstream>

#include "engine/report/metrics_writer.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

ProgressRecord record(int64_t batch) {
  ProgressRecord r;
  r.epoch = 3, r.epochs = 12, r.batch = batch, r.batches = 74, r.step = 200, r.loss = 0.25, r.lr = 0.001;
  r.images_per_sec = 180.5, r.eta_seconds = 75;
  return r;
}

// On a terminal: one line redrawn in place (carriage return, erase to the end of the line), cleared
// before any other line; the log file gets the periodic lines.
TEST(RunLog, ProgressIsRedrawnInPlaceOnATerminal) {
  test::TempDir dir;
  std::ostringstream out, err;
  RunLog log(true, out, err, true);
  log.open_file(dir / "log.txt");
  auto console = make_console_writer(log);
  console->progress(record(37));
  console->progress(record(74));
  log.info("epoch 3/12 done");
  EXPECT_EQ(out.str(),
            "\repoch 3/12 [############------------] 37/74 loss 0.2500 lr 0.001000 180.5 img/s eta 1:15\033[K"
            "\repoch 3/12 [########################] 74/74 loss 0.2500 lr 0.001000 180.5 img/s eta 1:15\033[K"
            "\r\033[Kepoch 3/12 done\n");
  const std::string file = test::read_file(dir / "log.txt");
  EXPECT_NE(file.find("] epoch 3/12 step 37/74 loss 0.2500"), std::string::npos) << file;
  EXPECT_NE(file.find("] epoch 3/12 step 74/74 loss 0.2500"), std::string::npos) << file;
  EXPECT_EQ(file.find('\r'), std::string::npos);
}

TEST(RunLog, ProgressIsALinePerRecordInPipesAndLogs) {
  std::ostringstream out, err;
  RunLog log(true, out, err, false);
  make_console_writer(log)->progress(record(37));
  EXPECT_EQ(out.str(), "epoch 3/12 step 37/74 loss 0.2500 lr 0.001000 180.5 img/s eta 1:15\n");
  RunLog quiet(false, out, err, true);  // another rank: nothing
  make_console_writer(quiet)->progress(record(38));
  EXPECT_EQ(out.str(), "epoch 3/12 step 37/74 loss 0.2500 lr 0.001000 180.5 img/s eta 1:15\n");
}

// Runs one after another in one process (the folds of cv) each write their own log file.
TEST(RunLog, AnotherFileTakesOverFromTheFirst) {
  test::TempDir dir;
  std::ostringstream out, err;
  RunLog log(true, out, err, false);
  log.open_file(dir / "a.txt");
  log.info("first");
  log.open_file(dir / "b.txt");
  log.info("second");
  const std::string a = test::read_file(dir / "a.txt"), b = test::read_file(dir / "b.txt");
  EXPECT_NE(a.find("] first"), std::string::npos) << a;
  EXPECT_EQ(a.find("second"), std::string::npos) << a;
  EXPECT_NE(b.find("] second"), std::string::npos) << b;
  EXPECT_EQ(b.find("first"), std::string::npos) << b;
}

}  // namespace
}  // namespace ranzcr
