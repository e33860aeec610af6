// model.aux_seg_weight > 0: the auxiliary segmentation head as a training feature. It loads the device
// annotations (the loader then rasterises their masks), trains the head (aux_seg.h) on the backbone's
// stride-8 features as an ExtraLoss of every step (AuxSegLoss), reports train_aux_loss per epoch, and saves
// the head as the checkpoint part "aux_head" (inference never reads it).
#include <stdexcept>

#include "core/check.h"
#include "data/annotations.h"
#include "engine/runtime/precision.h"
#include "engine/train/aux_seg.h"
#include "engine/train/feature_list.h"

namespace ranzcr {
namespace {

constexpr const char* kPart = "aux_head";
constexpr const char* kWhat = "auxiliary segmentation head weights";

// Loads data.annotations_csv for the index's images; throws when no training image is annotated.
std::shared_ptr<const ImageAnnotations> annotations_for(const DataConfig& data, const DatasetIndex& index,
                                                        RunLog& log) {
  const std::string path = annotations_csv_path(data);
  auto a = std::make_shared<ImageAnnotations>(
      load_annotations(path, index, data.id_column, data.skip_bad_annotations));
  log.info("annotations: " + std::to_string(a->rows) + " devices on " +
           std::to_string(a->annotated_images()) + " of " + std::to_string(index.size()) + " images (" +
           path + ")");
  if (a->skipped_rows > 0)
    log.warn(std::to_string(a->skipped_rows) + " bad rows of " + path +
             " skipped (data.skip_bad_annotations)");
  RANZCR_CHECK(a->annotated_images() > 0, path,
               ": no annotated training images; model.aux_seg_weight needs some");
  return a;
}

class AuxHeadFeature : public TrainingFeature {
 public:
  explicit AuxHeadFeature(double weight) : weight_(weight) {}

  // ---- TrainingFeature ----
  void setup(TrainingSetup& s) override {
    s.loader.annotations = annotations_for(s.config.data, s.index, s.log);
    int64_t channels = 0;
    try {
      channels = s.model.feature_channels();
    } catch (const std::runtime_error& e) {
      RANZCR_FAIL("model.aux_seg_weight: ", e.what());
    }
    head_ = AuxSegHead(channels);  // after the model: the model's initialisation is that of a plain run
    head_->to(s.device);
    set_memory_format(*head_, s.channels_last);
    s.trained_modules.emplace_back(kPart, head_.ptr());
    loss_ = std::make_unique<AuxSegLoss>(head_, weight_, &s.collectives);
    s.extra_loss = loss_.get();
    collectives_ = &s.collectives;
    channels_last_ = s.channels_last;
  }
  void restore(const ResumeSource& from) override {
    RANZCR_CHECK(from.reader.has_part(kPart), from.holds,
                 "without an auxiliary segmentation head, but this config has model.aux_seg_weight > 0",
                 from.fix);
    from.reader.restore_part(kPart, kWhat, *head_);
    set_memory_format(*head_, channels_last_);
  }
  void on_validate(const ValidateModel&, EpochRecord& record) override {
    // The epoch's mean mask BCE per annotated image, over every rank.
    torch::Tensor t = loss_->take_sums();
    collectives_->all_reduce_sum(t);
    const auto v = t.accessor<double, 1>();
    record.train_scalars.push_back({"train_aux_loss", v[0] / std::max(1.0, v[1])});
  }
  void save(CheckpointParts& parts) override { parts.emplace_back(kPart, head_.get()); }

 private:
  double weight_;
  AuxSegHead head_{nullptr};
  Collectives* collectives_ = nullptr;
  bool channels_last_ = false;
  std::unique_ptr<AuxSegLoss> loss_;
};

// model.aux_seg_weight = 0: a checkpoint with a head cannot be resumed (its optimizer state holds the
// head's parameters too).
class NoAuxHead : public TrainingFeature {
 public:
  void restore(const ResumeSource& from) override {
    RANZCR_CHECK(!from.reader.has_part(kPart), from.holds,
                 "with an auxiliary segmentation head, but this config has model.aux_seg_weight = 0",
                 from.fix);
  }
};

}  // namespace

std::unique_ptr<TrainingFeature> make_aux_head_feature(const Config& config) {
  if (config.model.aux_seg_weight > 0) return std::make_unique<AuxHeadFeature>(config.model.aux_seg_weight);
  return std::make_unique<NoAuxHead>();
}

}  // namespace ranzcr
