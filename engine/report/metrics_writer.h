// Where training metrics go: every writer gets the same records (a progress record every
// train.log_every_seconds, an epoch record after validation). The console and metrics.jsonl are
// writers; further sinks (TensorBoard, plots) are new writers, not new branches in the training loop.
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
  int64_t train_images = 0, val_images = 0, skipped_images = 0;
  bool improved = false;  // a new best val_auc_mean (of the EMA weights when has_ema)
  bool has_ema = false;   // train.ema_decay > 0: the EMA weights were validated too
  double ema_val_loss = 0.0;
  AucReport ema_auc;
  bool has_aux = false;         // model.aux_seg_weight > 0
  double train_aux_loss = 0.0;  // mean mask BCE per annotated training image (unweighted)
};

class MetricsWriter {
 public:
  virtual ~MetricsWriter() = default;
  virtual void progress(const ProgressRecord&) {}
  virtual void epoch(const EpochRecord&) {}
};

/// Progress and epoch lines through the run log (stdout + log.txt).
std::unique_ptr<MetricsWriter> make_console_writer(RunLog& log);
/// One JSON object per epoch appended to `path` (metrics.jsonl).
std::unique_ptr<MetricsWriter> make_jsonl_writer(const std::string& path);

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

 private:
  std::vector<std::unique_ptr<MetricsWriter>> writers_;
};

}  // namespace ranzcr
