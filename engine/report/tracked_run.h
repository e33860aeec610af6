// A run's trackers (tracking/tracker.h) as the engine feeds them: opened together with the run's config as
// parameters and the run ids its checkpoint kept, fed the same progress and epoch records as the other
// metric writers, given the run's files and finished together. Names no tracker: which ones a job has is
// decided where they are made (apps/trackers.cpp). Main rank only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/report/metrics_writer.h"
#include "tracking/tracker.h"

namespace ranzcr {

/// A tracker's run id by the tracker's name (what a checkpoint keeps).
using TrackerRunIds = std::map<std::string, std::string>;

class TrackedRun {
 public:
  explicit TrackedRun(std::vector<std::unique_ptr<tracking::Tracker>> trackers);
  ~TrackedRun();  // a tracker not finished ends as its destructor says (a remote one: FAILED)
  TrackedRun(const TrackedRun&) = delete;
  TrackedRun& operator=(const TrackedRun&) = delete;

  bool empty() const { return trackers_.empty(); }
  /// Each tracker forgets the run folder's tracking files (train.resume: never, starting over).
  void clear(const std::string& run_dir);
  /// Opens every tracker with `start`, its resume_id and parent_run_id taken from `resume` and `parents` by
  /// the tracker's name; a tracker that goes without (open() false) is dropped. Throws what open() throws.
  void open(tracking::RunStart start, const TrackerRunIds& resume, const TrackerRunIds& parents);
  /// `ids` with the open trackers' run ids put in (the others' kept).
  TrackerRunIds run_ids(TrackerRunIds ids) const;
  /// A metric writer that hands each record to every open tracker (log_step, log_epoch, epoch_saved).
  std::unique_ptr<MetricsWriter> writer();
  void log_figures(const std::vector<tracking::Figure>& figures, int64_t step);
  void log_artifact(const std::string& path, const std::string& dir = "");
  void finish(tracking::RunStatus status);

 private:
  std::vector<std::unique_ptr<tracking::Tracker>> trackers_;
};

/// Every resolved config key with its value as the run folder's config.yaml has it: scalars as written,
/// lists and maps in YAML's flow style.
std::vector<tracking::KeyValue> config_params(const Config& config);

/// The numbers of one metrics-file line (epoch_json_line, or any flat JSON object): objects flattened as
/// key/label; nulls (an undefined AUC) left out.
std::vector<tracking::Figure> figures_of_json_line(const std::string& line);

/// A progress record's figures: train/loss, train/lr, train/images_per_sec.
std::vector<tracking::Figure> step_figures(const ProgressRecord& r);
/// An epoch record's figures: the metrics file's numbers, and the curves' points (val/loss, val/auc_mean,
/// val/auc/<label>; each further validation's val/<name>_loss and val/<name>_auc_mean; the features'
/// per-epoch figures with the first '_' as '/': train/aux_loss).
tracking::EpochFigures epoch_figures(const EpochRecord& r);

}  // namespace ranzcr
