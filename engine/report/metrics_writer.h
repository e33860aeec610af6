// Where training metrics go: every writer gets the same records (a progress record every
// train.log_every_seconds, an epoch record after validation). The console and the metrics file are
// writers; further sinks (the experiment trackers, plots) are new writers, not new branches in the training
// loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/report/metrics.h"
#include "engine/report/run_log.h"

namespace ranzcr {

struct ProgressRecord {
  int64_t epoch = 0, epochs = 0;   // 1-based epoch of `epochs`
  int64_t batch = 0, batches = 0;  // batches of this epoch done (a resumed epoch counts the skipped ones)
  int64_t step = 0;                // optimizer steps so far
  double loss = 0.0;               // mean training loss since the last record (this rank)
  double lr = 0.0;
  double images_per_sec = 0.0;  // all ranks
  double eta_seconds = 0.0;     // rest of the epoch's training
};

struct EpochRecord {
  int64_t epoch = 0, epochs = 0;  // 1-based
  int64_t step = 0;
  double train_loss = 0.0, val_loss = 0.0, lr = 0.0;
  AucReport auc;
  std::vector<std::string> label_names;
  double images_per_sec = 0.0, epoch_seconds = 0.0;
  double val_seconds = 0.0;  // validation of every model validated (the EMA's too): inference, loss, AUC
  double auc_seconds = 0.0;  // of which the losses and AUCs over the gathered predictions
  int64_t train_images = 0, val_images = 0, skipped_images = 0;
  bool improved = false;  // a new best of the metric checkpoints are chosen on (see selects_best)
  /// Further weights validated this epoch (the EMA's: "ema"), written as <name>_val_loss,
  /// <name>_val_auc_mean and <name>_val_auc (the metrics file) and val/<name>_loss, val/<name>_auc_mean
  /// (the trackers' curves).
  struct Validation {
    std::string name;
    double loss = 0.0;
    AucReport auc;
    bool selects_best = false;  // the best checkpoint, early stopping and top-k go by this one's mean AUC
  };
  std::vector<Validation> validations;
  /// Further per-epoch training figures of the features in use (the auxiliary head's "train_aux_loss"):
  /// written under their name to the metrics file and the console, and to the trackers' curves with the
  /// first '_' as '/' (train/aux_loss).
  struct Scalar {
    std::string name;
    double value = 0.0;
  };
  std::vector<Scalar> train_scalars;
  /// The metric checkpoints are chosen on: the mean AUC of the validation that selects_best, else val_auc.
  double selection_metric() const;
};

class MetricsWriter {
 public:
  virtual ~MetricsWriter() = default;
  virtual void progress(const ProgressRecord&) {}
  virtual void epoch(const EpochRecord&) {}
  /// The checkpoints of epoch `epoch` (1-based) are saved: its record will not be trained again on a resume
  /// (a writer that cannot take records back, such as an experiment tracker, sends them now).
  virtual void saved(int64_t epoch) {}
};

/// Progress and epoch lines through the run log (stdout + the run's log file).
std::unique_ptr<MetricsWriter> make_console_writer(RunLog& log);
/// One JSON object per epoch appended to `path` (the metrics file).
std::unique_ptr<MetricsWriter> make_jsonl_writer(const std::string& path);
/// The metrics file's line for `r` (one JSON object, no newline).
std::string epoch_json_line(const EpochRecord& r);

/// Fans records out to every writer added.
class MetricsWriters : public MetricsWriter {
 public:
  void add(std::unique_ptr<MetricsWriter> writer) { writers_.push_back(std::move(writer)); }
  void progress(const ProgressRecord& r) override {
    for (auto& w : writers_) w->progress(r);
  }
  void epoch(const EpochRecord& r) override {
    for (auto& w : writers_) w->epoch(r);
  }
  void saved(int64_t epoch) override {
    for (auto& w : writers_) w->saved(epoch);
  }

 private:
  std::vector<std::unique_ptr<MetricsWriter>> writers_;
};

}  // namespace ranzcr
