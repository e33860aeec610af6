#include "engine/train/feature_list.h"

#include "engine/train/trainer.h"

namespace ranzcr {
namespace {

class BeforeValidation : public TrainingFeature {
 public:
  explicit BeforeValidation(std::function<void(int64_t)> callback) : callback_(std::move(callback)) {}
  void before_validation(int64_t epoch) override { callback_(epoch); }

 private:
  std::function<void(int64_t)> callback_;
};

}  // namespace

std::unique_ptr<TrainingFeature> make_before_validation_feature(std::function<void(int64_t)> callback) {
  return callback ? std::make_unique<BeforeValidation>(std::move(callback)) : nullptr;
}

TrainingFeatures make_training_features(const Config& config, const TrainOptions& options) {
  std::vector<std::unique_ptr<TrainingFeature>> all;
  all.push_back(make_ema_feature(config));
  all.push_back(make_aux_head_feature(config));
  all.push_back(make_keep_every_feature(config));
  all.push_back(make_top_checkpoints_feature(config));
  all.push_back(make_early_stop_feature(config));
  all.push_back(make_before_validation_feature(options.before_validation));
  TrainingFeatures used;
  for (auto& f : all)
    if (f) used.push_back(std::move(f));
  return used;
}

}  // namespace ranzcr
