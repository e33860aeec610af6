// train.early_stop_patience > 0: the run ends once that many epochs passed without a better selection
// metric (CheckpointMeta::epochs_since_best, kept in every checkpoint, so a resumed run counts on).
#include "engine/train/features.h"

namespace ranzcr {
namespace {

class EarlyStop : public TrainingFeature {
 public:
  explicit EarlyStop(int patience) : patience_(patience) {}
  void setup(TrainingSetup& s) override { collectives_ = &s.collectives; }
  void on_epoch_end(EpochEnd& end) override {
    // Rank 0 decides and tells everyone, so no rank waits for the others forever.
    torch::Tensor stop = torch::tensor({end.meta.epochs_since_best >= patience_ ? 1.0 : 0.0}, torch::kDouble);
    collectives_->broadcast(stop, 0);
    if (stop.item<double>() > 0)
      end.stop =
          "early stop: no better val_auc_mean for " + std::to_string(end.meta.epochs_since_best) + " epochs";
  }

 private:
  int patience_;
  Collectives* collectives_ = nullptr;
};

}  // namespace

std::unique_ptr<TrainingFeature> make_early_stop_feature(const Config& config) {
  const int patience = config.train.early_stop_patience;
  return patience > 0 ? std::make_unique<EarlyStop>(patience) : nullptr;
}

}  // namespace ranzcr
