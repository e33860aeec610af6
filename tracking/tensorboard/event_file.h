// TensorBoard event files without TensorFlow or protobuf: the few `Event` fields TensorBoard reads for
// scalars, encoded by hand, in TFRecord framing. Field numbers from tensorboard/compat/proto/event.proto
// and summary.proto: Event{wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary), session_log = 7 (SessionLog{status = 1})}, Summary{value = 1 (repeated Value)},
// Value{tag = 1 (string), simple_value = 2 (float)}.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tracking/tracker.h"

namespace ranzcr::tracking {
namespace tensorboard {

/// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), as TFRecord uses it.
uint32_t crc32c(const std::string& bytes);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const std::string& bytes);
/// One TFRecord: uint64 length (little endian), masked CRC of the length, data, masked CRC of the data.
std::string frame_record(const std::string& data);

struct Scalar {
  std::string tag;
  float value = 0.0f;
};

/// A serialized Event holding file_version (the first event of a file: "brain.Event:2").
std::string encode_file_version_event(double wall_time, const std::string& version = "brain.Event:2");
/// A serialized Event holding SessionLog{status = 1 (START)} (Event field 7): TensorBoard then drops the
/// events it has read with a step >= `step`.
std::string encode_session_start_event(double wall_time, int64_t step);
/// A serialized Event holding a Summary of simple_value scalars at `step`.
std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

/// One event file per run (or resumed run) in a folder, named like TensorFlow's
/// (events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>), created with the first event (a finished run
/// started again adds none) and flushed after every event so that a crash leaves a readable file.
class EventFile {
 public:
  /// Creates `dir` if needed; throws std::runtime_error when it cannot.
  /// `resumed_step` > 0: a run resumed from a checkpoint at that optimizer step; a session START at the
  /// next step makes TensorBoard drop what the interrupted run wrote after its checkpoint.
  explicit EventFile(const std::string& dir, int64_t resumed_step = 0);
  /// Appends one scalars event and flushes.
  void write_scalars(int64_t step, const std::vector<Scalar>& scalars);
  /// The event file ("" before the first event).
  const std::string& path() const { return path_; }

 private:
  void open_file();
  void write_record(const std::string& event);

  std::string dir_, path_;
  int64_t resumed_step_;
  std::ofstream out_;
};

}  // namespace tensorboard

/// TensorBoard as a Tracker: the event files of <run>/tensorboard. The training figures (train/loss,
/// train/lr, train/images_per_sec) and the epochs' curves (val/loss, val/auc_mean, val/auc/<label>, the
/// further validations' and features' figures) as scalars at x = optimizer step; undefined values (NaN) are
/// left out. A new event file per start; a resumed run's tells TensorBoard to drop what came after the
/// checkpoint. No run id, no files, no status.
class TensorBoardTracker : public Tracker {
 public:
  /// <run>/tensorboard.
  static std::string folder(const std::string& run_dir);

  std::string name() const override { return "tensorboard"; }
  bool open(const RunStart& start) override;
  void log_step(int64_t step, const std::vector<Figure>& figures) override;
  void log_epoch(const EpochFigures& figures) override;
  void finish(RunStatus) override { file_.reset(); }
  /// Removes <run_dir>/tensorboard.
  void clear(const std::string& run_dir) override;
  /// The event file ("" before the first event).
  std::string path() const { return file_ ? file_->path() : ""; }

 private:
  void write(int64_t step, const std::vector<Figure>& figures);
  std::unique_ptr<tensorboard::EventFile> file_;
};

}  // namespace ranzcr::tracking
