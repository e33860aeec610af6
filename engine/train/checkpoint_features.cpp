// Checkpoints kept beside the last and the best: every N epochs (output.keep_every) and the k best
// (output.keep_best_k, top_checkpoints.h).
#include "engine/io/run_folder.h"
#include "engine/train/feature_list.h"
#include "engine/train/top_checkpoints.h"

namespace ranzcr {
namespace {

class KeepEvery : public TrainingFeature {
 public:
  explicit KeepEvery(int every) : every_(every) {}
  void setup(TrainingSetup& s) override { dir_ = s.checkpoint_dir; }
  void on_epoch_end(EpochEnd& end) override {
    if (end.epoch % every_ == 0) end.paths.push_back(run_folder::epoch_checkpoint(dir_, end.epoch));
  }

 private:
  int every_;
  std::string dir_;
};

class TopK : public TrainingFeature {
 public:
  explicit TopK(int k) : k_(k) {}
  void setup(TrainingSetup& s) override {
    top_ = std::make_unique<TopCheckpoints>(s.checkpoint_dir, k_);
    main_ = s.collectives.is_main();
  }
  // Takes over the files kept so far (those of later epochs are trained again).
  void start(const CheckpointMeta& meta) override {
    if (main_) top_->scan(meta.epoch);
  }
  void on_epoch_end(EpochEnd& end) override {
    if (!main_) return;
    if (const std::string path = top_->admit(end.epoch, end.metric); !path.empty()) end.paths.push_back(path);
  }
  void after_save() override { top_->prune(); }

 private:
  int k_;
  bool main_ = false;
  std::unique_ptr<TopCheckpoints> top_;
};

}  // namespace

std::unique_ptr<TrainingFeature> make_keep_every_feature(const Config& config) {
  const int every = config.output.keep_every;
  return every > 0 ? std::make_unique<KeepEvery>(every) : nullptr;
}

// Also with keep_best_k 0: it removes the top_epoch files an earlier run of the folder kept.
std::unique_ptr<TrainingFeature> make_top_checkpoints_feature(const Config& config) {
  return std::make_unique<TopK>(config.output.keep_best_k);
}

}  // namespace ranzcr
