// Early stopping: the run ends once train.early_stop_patience (> 0) epochs passed without a better
// selection metric. The count of those epochs is this feature's: counted with patience 0 too (so that a
// run resumed with a patience counts the epochs before), saved as the checkpoint value
// "early_stop_epochs_since_best" and, for readers of the meta alone, as CheckpointMeta::epochs_since_best
// (all that checkpoints written before feature values hold).
#include <optional>

#include "core/check.h"
#include "engine/train/feature_list.h"

namespace ranzcr {
namespace {

constexpr const char* kCount = "early_stop_epochs_since_best";

// The rule: `patience` (> 0) epochs without a better metric end the run.
bool patience_spent(int patience, int64_t epochs_since_best) {
  return patience > 0 && epochs_since_best >= patience;
}

class EarlyStop : public TrainingFeature {
 public:
  explicit EarlyStop(int patience) : patience_(patience) {}
  void setup(TrainingSetup& s) override { collectives_ = &s.collectives; }
  // Every rank reads the same file, so the counts agree.
  void restore(const ResumeSource& from) override {
    const std::optional<int64_t> saved = from.reader.int_value(kCount);
    count_ = saved ? *saved : from.reader.meta().epochs_since_best;  // older checkpoints: the meta's
    RANZCR_CHECK(count_ >= 0, from.reader.path(), ": checkpoint value '", kCount, "' is ", count_,
                 ", expected a count >= 0");
  }
  void on_epoch_end(EpochEnd& end) override {
    count_ = end.improved ? 0 : count_ + 1;
    if (patience_ == 0) return;
    // Rank 0's count on every rank, so that all stop after the same epoch and none waits forever.
    torch::Tensor count = torch::tensor({static_cast<double>(count_)}, torch::kDouble);
    collectives_->broadcast(count, 0);
    count_ = static_cast<int64_t>(count.item<double>());
  }
  std::optional<StopReason> stop_reason() override {
    if (!patience_spent(patience_, count_)) return std::nullopt;
    return StopReason{"early stop: no better val_auc_mean for " + std::to_string(count_) + " epochs",
                      "train.early_stop_patience"};
  }
  void save_values(CheckpointValues& values, CheckpointMeta& meta) override {
    values[kCount] = count_;
    meta.epochs_since_best = count_;
  }

 private:
  int patience_;
  int64_t count_ = 0;  // epochs since the metric last improved
  Collectives* collectives_ = nullptr;
};

}  // namespace

std::unique_ptr<TrainingFeature> make_early_stop_feature(const Config& config) {
  return std::make_unique<EarlyStop>(config.train.early_stop_patience);
}

bool stopped_early(const TrainConfig& train, const CheckpointMeta& meta) {
  return patience_spent(train.early_stop_patience, meta.epochs_since_best);
}

}  // namespace ranzcr
