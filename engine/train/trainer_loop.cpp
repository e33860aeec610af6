// The Trainer's epoch loop: fit over train_epoch (train_batch, after_step) and finish_epoch (validate,
// the epoch record, the features' epoch end, save), then asks the features whether to stop. Set-up:
// trainer.cpp.

#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/check.h"
#include "engine/io/run_folder.h"
#include "engine/report/metrics.h"
#include "engine/runtime/cuda_support.h"
#include "engine/runtime/random_state.h"
#include "engine/train/trainer_impl.h"

namespace ranzcr {

TrainSummary Trainer::fit() {
  fit_epochs();
  end_tracking();
  return summary_;
}

void Trainer::end_tracking() {
  if (!tracked_) return;
  tracked_->log_artifact(run_folder::config_file(out_dir_));
  tracked_->log_artifact(run_folder::metrics_file(out_dir_));
  tracked_->log_artifact(run_folder::log_file(out_dir_));
  for (const auto& png : run_folder::curves_files(out_dir_)) tracked_->log_artifact(png, "curves");
  tracked_->finish(summary_.stopped_by_signal ? tracking::RunStatus::kKilled
                                              : tracking::RunStatus::kFinished);
}

TrainSummary Trainer::fit_epochs() {
  summary_.best_auc = meta_.best_metric;
  summary_.epochs = meta_.epoch;
  // A resumed run that had ended (all epochs, or a feature stopped it) has nothing to train.
  if (const std::optional<StopReason> stopped = stop_reason();
      stopped || meta_.epoch >= config_.train.epochs) {
    summary_.already_finished = true;
    const std::string raise = stopped && !stopped->raise.empty() ? " or " + stopped->raise : "";
    log_.info("nothing to train: the run in " + out_dir_ + " has finished (" + std::to_string(meta_.epoch) +
              " epochs" + (stopped ? ", stopped early" : "") + "; raise train.epochs" + raise +
              " to train on, or set train.resume=never to start over)");
    return summary_;
  }
  for (int64_t epoch = meta_.epoch; epoch < config_.train.epochs; ++epoch) {
    const auto start = Clock::now();
    const std::optional<EpochTotals> totals = train_epoch(epoch);
    if (!totals) return summary_;  // stopped mid-epoch; the last checkpoint saved
    finish_epoch(epoch, *totals, start);
    if (epoch + 1 == config_.train.epochs) break;
    if (const std::optional<StopReason> stop = stop_reason()) {
      log_.info(stop->why);
      summary_.early_stopped = true;
      summary_.stop_reason = stop->why;
      break;
    }
    // A stop asked for during validation or the checkpoint write: the epoch is saved, stop here.
    if (!summary_.stopped_by_signal) summary_.stopped_by_signal = poll_->signal_between_epochs();
    if (summary_.stopped_by_signal) {
      log_.warn("stopped after epoch " + std::to_string(epoch + 1) + "; saved " +
                run_folder::last_checkpoint(out_dir_) + " (run the same command again to continue)");
      return summary_;
    }
  }
  return summary_;
}

std::optional<StopReason> Trainer::stop_reason() {
  std::optional<StopReason> first;
  for (auto& f : features_)  // every feature, also after an answer: each may run a collective
    if (std::optional<StopReason> r = f->stop_reason(); r && !first) first = std::move(r);
  return first;
}

std::vector<int64_t> Trainer::epoch_rows(int64_t epoch) {
  sampler_->set_epoch(epoch);
  std::vector<int64_t> rows;
  for (int64_t p : sampler_->indices()) rows.push_back(split_.train[p]);
  if (skip_batches_ > 0)  // resuming mid-epoch: the same order, minus what was done
    rows.erase(rows.begin(),
               rows.begin() + std::min<int64_t>(rows.size(), skip_batches_ * loader_options_.batch_size));
  return rows;
}

void Trainer::seed_epoch(int64_t epoch) {
  // Each rank its own stream (rank 0 keeps the single-process one), new every epoch.
  const uint64_t seed = static_cast<uint64_t>(config_.seed) * 1000003ULL + static_cast<uint64_t>(epoch) +
                        static_cast<uint64_t>(collectives_.rank()) * 0x9E3779B97F4A7C15ULL;
  torch::manual_seed(seed);
  if (!resume_rng_.defined()) return;
  set_generator_state(options_.device, resume_rng_);
  resume_rng_ = torch::Tensor();
}

std::optional<EpochTotals> Trainer::train_epoch(int64_t epoch) {
  seed_epoch(epoch);
  const int64_t done_before = skip_batches_;
  BatchLoader loader(index_, epoch_rows(epoch),
                     ImageTransform(train_transform(config_.data, static_cast<uint64_t>(config_.seed))),
                     epoch, loader_options_);
  skip_batches_ = 0;
  DeviceBatches batches(loader, batch_options_);
  const int64_t n = loader.num_batches();
  Progress progress(options_.device, epoch, config_.train.epochs, done_before, n,
                    config_.train.log_every_seconds);
  model_->train();
  for (const auto& m : trained_modules_) m.second->train();
  optimizer_->zero_grad();
  for (int64_t i = 0;; ++i) {
    bool stepped = false;
    {  // the step: nothing in here waits for the device (checked by tests with forbid_device_sync)
      std::optional<cuda::SyncDebugErrorGuard> no_sync;
      if (options_.forbid_device_sync) no_sync.emplace();
      std::optional<DeviceBatch> batch = batches.next();
      if (!batch) break;
      stepped = train_batch(*batch, i, n, progress);
    }
    if (stepped && after_step(epoch, i + 1 == n) && i + 1 < n) {
      // mid-epoch: save where we are (at the epoch's end: finish the epoch first)
      stop_mid_epoch(epoch, done_before + i + 1, done_before + n);
      return std::nullopt;
    }
    progress.maybe_report(i + 1, meta_.step, lr_, collectives_.world_size(), writers_);
  }
  return progress.totals(collectives_);
}

bool Trainer::train_batch(const DeviceBatch& batch, int64_t i, int64_t n, Progress& progress) {
  const bool sync = step_->ends_window(i, n);
  if (extra_loss_) extra_loss_->begin(batch);
  const torch::Tensor loss = step_->forward_backward(batch.images, batch.labels, sync);
  progress.add(loss, batch.size(), batch.skipped);
  watch_->add(extra_loss_ && loss.defined() ? loss + extra_loss_->value() : loss);
  if (!sync) return false;
  lr_ = scheduled_lr(meta_.step, total_steps_, warmup_steps_, config_.optim.lr, config_.optim.min_lr_ratio);
  step_->optimizer_step(lr_);
  ++meta_.step;
  for (auto& f : features_) f->on_optimizer_step(meta_.step);
  return true;
}

bool Trainer::after_step(int64_t epoch, bool epoch_end) {
  if (summary_.stopped_by_signal) return false;  // already stopping at this epoch's end
  const Poll::Result r = poll_->after_step(meta_.step, epoch_end, *watch_);
  if (r.diverged) RANZCR_FAIL(divergence_message(epoch));
  summary_.stopped_by_signal = r.signal;
  return r.signal != 0;
}

std::string Trainer::divergence_message(int64_t epoch) const {
  std::ostringstream m;
  m << "training diverged: the loss became NaN or infinite in epoch " << epoch + 1 << " by optimizer step "
    << meta_.step << " (lr " << std::setprecision(3) << lr_ << "); nothing was saved since ";
  if (meta_.epoch > 0)
    m << "epoch " << meta_.epoch << " (" << run_folder::last_checkpoint(out_dir_)
      << " is the last good checkpoint)";
  else
    m << "the start (no checkpoint yet)";
  m << ". Try a lower optim.lr"
    << (config_.optim.grad_clip > 0 ? "" : ", gradient clipping (optim.grad_clip: 1.0)")
    << (resolve_precision(config_.train.precision, options_.device) == Precision::kFp32
            ? ""
            : " or train.precision=fp32");
  return m.str();
}

void Trainer::stop_mid_epoch(int64_t epoch, int64_t batches_done, int64_t epoch_batches) {
  meta_.epoch_batches_done = batches_done;
  meta_.epoch_metric = -1;
  // Every rank's generator state, so random ops continue where they were.
  meta_.rng_states = collectives_.all_gather_cat(generator_state(options_.device).unsqueeze(0)).cpu();
  meta_.rng_device = c10::DeviceTypeName(options_.device.type(), /*lower_case=*/true);
  sync_buffers();
  if (collectives_.is_main()) save({run_folder::last_checkpoint(out_dir_)});
  meta_.rng_states = torch::Tensor();
  meta_.rng_device.clear();
  collectives_.barrier();
  log_.warn("stopped at epoch " + std::to_string(epoch + 1) + " batch " + std::to_string(batches_done) + "/" +
            std::to_string(epoch_batches) + "; saved " + run_folder::last_checkpoint(out_dir_) +
            " (run the same command again to continue)");
}

void Trainer::finish_epoch(int64_t epoch, const EpochTotals& totals, Clock::time_point start) {
  for (auto& f : features_) f->before_validation(epoch);
  EpochRecord r;
  const int64_t val_skipped = validate(r);
  r.epoch = epoch + 1, r.epochs = config_.train.epochs;
  r.train_loss = totals.loss_sum / std::max(1.0, totals.images);
  r.images_per_sec = totals.images / std::max(totals.seconds, 1e-9);
  r.label_names = index_.label_names;
  r.epoch_seconds = seconds_since(start);
  const double metric = r.selection_metric();  // what the best checkpoint is chosen on
  r.improved = !std::isnan(metric) && metric > meta_.best_metric;
  if (r.improved) meta_.best_metric = metric;
  meta_.epoch = epoch + 1;
  meta_.epoch_batches_done = 0;
  summary_.last_auc = metric;
  summary_.best_auc = meta_.best_metric;
  summary_.epochs = meta_.epoch;
  r.step = meta_.step, r.lr = lr_;
  r.train_images = static_cast<int64_t>(totals.images);
  r.skipped_images = static_cast<int64_t>(totals.skipped) + val_skipped;
  writers_.epoch(r);
  meta_.epoch_metric = metric;
  EpochEnd end{meta_.epoch, meta_, metric, r.improved, {run_folder::last_checkpoint(out_dir_)}};
  if (r.improved) end.paths.push_back(run_folder::best_checkpoint(out_dir_));
  for (auto& f : features_) f->on_epoch_end(end);
  if (collectives_.is_main()) {
    save(end.paths);
    for (auto& f : features_) f->after_save();
    writers_.saved(meta_.epoch);
  }
  collectives_.barrier();
}

int64_t Trainer::validate(EpochRecord& r) {
  const Clock::time_point start = Clock::now();
  sync_buffers();
  double auc_seconds = 0.0;
  auto score = [&](Classifier& model) {
    const InferenceResult v = run_inference(model, index_, split_.val, inference_options_, collectives_);
    const Clock::time_point scored = Clock::now();
    EpochRecord::Validation out;
    out.loss = torch::binary_cross_entropy_with_logits(v.logits, v.labels).item<double>();
    out.auc = multilabel_auc(v.logits, v.labels, index_.label_names);
    auc_seconds += seconds_since(scored);
    return std::make_pair(out, v);
  };
  const auto [plain, val] = score(*model_);
  r.val_loss = plain.loss, r.auc = plain.auc;
  r.val_images = val.rows.size(0);
  const ValidateModel validate_model = [&](Classifier& model) { return score(model).first; };
  for (auto& f : features_) f->on_validate(validate_model, r);
  r.val_seconds = seconds_since(start);  // every model validated (the EMA's too)
  r.auc_seconds = auc_seconds;
  return val.skipped;
}

void Trainer::save(const std::vector<std::string>& paths) {
  if (const LossScaler* scaler = step_->loss_scaler()) {
    meta_.loss_scale = scaler->scale_value();
    meta_.loss_scale_growth = scaler->growth_tracker();
  }
  CheckpointParts parts;
  CheckpointValues values;
  for (auto& f : features_) {
    f->save(parts);
    f->save_values(values, meta_);
  }
  const std::string bytes = serialize_checkpoint(meta_, *model_, optimizer_.get(), parts, values);
  for (const auto& path : paths) write_file_atomic(path, bytes);
}

// BatchNorm statistics agree on every rank before evaluation and checkpoints.
void Trainer::sync_buffers() {
  if (config_.distributed.bn_sync == BnSync::kBroadcast)
    ddp_->before_forward();
  else
    ddp_->average_buffers();
  for (auto& f : features_) f->sync_buffers(collectives_);
}

}  // namespace ranzcr
