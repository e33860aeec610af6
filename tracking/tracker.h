// An experiment tracker: where a run's parameters, figures, files and final status go besides its run
// folder. The trainer and cv call this interface and never name a tracker; the trackers a job gets are
// picked from the config in one place (apps/trackers.cpp). Implementations live beside it, one folder
// each (tracking/mlflow/, tracking/tensorboard/). No LibTorch. Main rank only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ranzcr::tracking {

using KeyValue = std::pair<std::string, std::string>;  // a parameter or a tag

/// One named number. Keys are the run's own ("val_auc/Normal"); a tracker makes them fit its rules.
struct Figure {
  std::string key;
  double value = 0;  // NaN and infinities allowed
};

enum class RunStatus { kRunning, kFinished, kFailed, kKilled };

/// Where a tracker's lines go (the run's log).
struct TrackerLog {
  std::function<void(const std::string&)> info, warn;
};

/// What a tracked run starts from.
struct RunStart {
  std::string command;               // "train", "cv": what the run is
  std::string run_dir;               // the run (or cv) folder: a tracker keeps its own files there
  std::string resume_id;             // this tracker's run id from the checkpoint resumed ("" = none)
  bool continue_folder_run = false;  // no checkpoint yet: continue the run the folder's record names
  int64_t resumed_step = 0;          // the optimizer step of the checkpoint resumed (0 = a new run)
  std::string parent_run_id;         // this tracker's run of the job above (cv's, for a fold); "" = none
  std::vector<KeyValue> params;      // every resolved config key, as the run folder's config.yaml has it
  std::vector<KeyValue> tags;        // the job's: device, world size, model
};

/// An epoch's figures, in the two shapes trackers take them: the metrics file's record (every number of
/// its line, per-label values as key/label) and the points of the curves drawn over optimizer steps.
struct EpochFigures {
  int64_t epoch = 0;           // 1-based
  int64_t step = 0;            // optimizer steps so far
  std::vector<Figure> record;  // train_loss, val_loss, val_auc_mean, val_auc/<label>, lr, ...
  std::vector<Figure> curves;  // val/loss, val/auc_mean, val/auc/<label>, val/ema_loss, train/aux_loss, ...
};

class Tracker {
 public:
  virtual ~Tracker() = default;
  /// The tracker's name: the key its run id is kept under in checkpoints ("mlflow").
  virtual std::string name() const = 0;
  /// Starts a new run or continues one (start.resume_id, else the folder's), with the parameters and tags.
  /// False when it goes without (a server that is away and not required: it has warned once). Throws
  /// std::runtime_error (one line) when it cannot start and must.
  virtual bool open(const RunStart& start) = 0;
  /// The id a checkpoint keeps so that a resume continues the same run ("" = nothing to keep).
  virtual std::string run_id() const { return ""; }
  /// Training figures at optimizer step `step`, every train.log_every_seconds: train/loss, train/lr,
  /// train/images_per_sec.
  virtual void log_step(int64_t /*step*/, const std::vector<Figure>& /*figures*/) {}
  /// An epoch's figures, when its validation ends.
  virtual void log_epoch(const EpochFigures& /*figures*/) {}
  /// The checkpoints of epoch `epoch` are saved: its figures will not be trained again on a resume (a
  /// tracker that cannot take figures back sends them now).
  virtual void epoch_saved(int64_t /*epoch*/) {}
  /// Figures of the whole run at `step` (cv's out-of-fold figures).
  virtual void log_figures(const std::vector<Figure>& /*figures*/, int64_t /*step*/) {}
  /// A file of the run, kept as <dir>/<its name> (when it exists).
  virtual void log_artifact(const std::string& /*path*/, const std::string& /*dir*/ = "") {}
  /// The run's end with its status; waits for delivery as long as the tracker does.
  virtual void finish(RunStatus status) = 0;
  /// Forgets the tracking files of the run folder `run_dir` (train.resume: never, starting over there).
  virtual void clear(const std::string& /*run_dir*/) {}
};

/// The trackers of a job, made (not yet open) for `command` ("train", "cv"); what apps hands the engine.
using TrackerFactory = std::function<std::vector<std::unique_ptr<Tracker>>(const std::string& command)>;

}  // namespace ranzcr::tracking
