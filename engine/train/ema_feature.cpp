// train.ema_decay > 0: the EMA of the weights as a training feature (the averaging itself: ema.h).
#include "engine/io/pretrained.h"
#include "engine/runtime/precision.h"
#include "engine/runtime/random_state.h"
#include "engine/train/ema.h"
#include "engine/train/feature_list.h"

namespace ranzcr {
namespace {

class EmaFeature : public TrainingFeature {
 public:
  explicit EmaFeature(double decay) : decay_(decay) {}

  void setup(TrainingSetup& s) override {
    // Its weights come from the model (ModelEma copies them), so it starts from none. Its initialisation
    // leaves the run's random stream as it was, so what is built after it (the auxiliary head) starts as in
    // a run without EMA.
    const torch::Tensor state = generator_state(torch::kCPU);
    model_ =
        starting_model(s.config, ResolvedWeights{}, s.index.num_labels(), s.device, s.channels_last).model;
    set_generator_state(torch::kCPU, state);
    EmaOptions eo;
    eo.decay = decay_;
    ema_ = std::make_unique<ModelEma>(s.model, model_, eo);
    channels_last_ = s.channels_last;
    log_ = &s.log;
  }
  void restore(const ResumeSource& from) override {
    if (!from.reader.has_ema()) {
      ema_->reset();
      log_->warn("the checkpoint holds no EMA weights: the EMA starts from its weights");
      return;
    }
    from.reader.restore_ema(*model_);
    set_memory_format(*model_, channels_last_);
  }
  void on_optimizer_step(int64_t step) override { ema_->update(step); }
  // Each rank averages its own BatchNorm statistics: rank 0's count.
  void sync_buffers(Collectives& collectives) override {
    if (collectives.world_size() > 1) broadcast_coalesced(collectives, model_->buffers(), 0);
  }
  void on_validate(const ValidateModel& validate, EpochRecord& record) override {
    EpochRecord::Validation v = validate(*model_);
    v.name = "ema";
    v.selects_best = true;  // the best checkpoint, top-k and early stopping go by the averaged weights
    record.validations.push_back(std::move(v));
  }
  void save(CheckpointParts& parts) override { parts.emplace_back("ema", model_.get()); }

 private:
  double decay_;
  bool channels_last_ = false;
  RunLog* log_ = nullptr;
  std::shared_ptr<Classifier> model_;  // the averaged weights
  std::unique_ptr<ModelEma> ema_;
};

}  // namespace

std::unique_ptr<TrainingFeature> make_ema_feature(const Config& config) {
  return config.train.ema_decay > 0 ? std::make_unique<EmaFeature>(config.train.ema_decay) : nullptr;
}

}  // namespace ranzcr
