// k-fold cross-validation (`ranzcr cv`): the fold loop, the fold run folders, whether a fold is done,
// and the out-of-fold predictions of the fold models (run_folder.h names their files).
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/report/metrics.h"
#include "engine/report/run_log.h"
#include "engine/train/trainer.h"

namespace ranzcr {

/// The training run of fold `fold` of the cv run `config`: data.fold = fold, output.dir = its fold folder
/// (run_folder::fold_dir).
Config fold_config(Config config, int fold);

/// Why fold run `fold_config` has nothing left to train ("" = it has: no last checkpoint yet, epochs left, or
/// train.resume never). The same test `train` makes (run_finished) before it says "nothing to train".
std::string fold_finished(const Config& fold_config);

struct FoldReport {
  int fold = 0;
  std::string checkpoint;    // the fold's best checkpoint
  int64_t epoch = 0;         // epochs done when it was saved
  double best_val_auc = -1;  // the run's best validation mean AUC (its checkpoint's best metric)
  double oof_auc = 0;        // mean AUC of its out-of-fold probabilities
  int64_t num_images = 0;    // its validation rows predicted
};

struct CvReport {
  AucReport auc;  // of the out-of-fold probabilities, all folds together
  std::vector<FoldReport> folds;
  int64_t num_images = 0;
};

/// Predicts each fold's validation rows with that fold's best checkpoint (the deployable weights: the EMA's
/// when kept; the fold's own preprocessing and train.tta_hflip, as its validation) on `device`, and writes
/// the out-of-fold file (the id column, `fold`, one probability per label; one row per training image,
/// in train.csv's order; float64 sigmoid of the logits with 17 significant digits, so the file holds
/// exactly the values scored and close logits do not tie) and
/// the cv report (auc_mean and auc per label of those probabilities, each fold's report,
/// num_images). `config` is the cv run's (data.folds >= 2, every fold trained).
CvReport write_out_of_fold(const Config& config, const torch::Device& device, RunLog& log);

/// `ranzcr cv`'s training, on every rank of a job: trains each fold of data.folds in turn in this process
/// group (a train run of fold_config, skipped when fold_finished says so on the main rank). Returns 0, or
/// the signal of a stop request (options.stop_signal on any rank), which ends it after the fold's last
/// checkpoint is saved. The main rank then writes the out-of-fold predictions (write_out_of_fold).
int train_folds(const Config& config, Collectives& collectives, RunLog& log, const TrainOptions& options);

}  // namespace ranzcr
