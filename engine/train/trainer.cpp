#include "engine/train/trainer.h"
#include "core/check.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/io/pretrained.h"
#include "engine/io/run_folder.h"
#include "engine/report/curves.h"
#include "engine/runtime/random_state.h"
#include "engine/train/feature_list.h"
#include "engine/train/fused_optimizer.h"
#include "engine/train/trainer_impl.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

// Keeps the first `epochs` lines of the metrics file (after a resume the later ones are recomputed).
void truncate_metrics(const std::string& path, int64_t epochs) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.value("epoch", int64_t{0}) <= epochs) kept += line + "\n";
  }
  in.close();
  write_file_atomic(path, kept);
}

// This rank's generator state from a mid-epoch checkpoint when it fits this run's generator, else
// undefined, with a warning: a state of another device type (a run moved between CPU and GPU) or size
// cannot be restored, and the random ops (dropout) of the rest of that epoch then differ.
torch::Tensor fitting_rng_state(const CheckpointMeta& saved, int rank, const torch::Device& device,
                                RunLog& log) {
  const torch::Tensor state = saved.rng_states[rank];
  const std::string type = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  const int64_t bytes = generator_state(device).numel();
  std::string why;
  if (!saved.rng_device.empty() && saved.rng_device != type)
    why = "are a " + saved.rng_device + " generator's and this run is on " + type;
  else if (state.numel() != bytes)
    why = "hold " + std::to_string(state.numel()) + " bytes, this run's " + type + " generator " +
          std::to_string(bytes);
  if (why.empty()) return state.clone();
  log.warn("the checkpoint's random generator states " + why +
           ": not restored, so random ops (dropout) in the rest of the epoch differ from the original run");
  return torch::Tensor();
}

// Whether the sampler drops the last partial batch: when every rank gets at least one full batch.
bool drop_last_batch(const Config& config, size_t train_rows, int world_size) {
  return train_rows >= static_cast<size_t>(config.train.batch_size * world_size);
}

}  // namespace

bool run_finished(const TrainConfig& train, const CheckpointMeta& meta) {
  return meta.epoch >= train.epochs || stopped_early(train, meta);
}

int stop_requested(Collectives& collectives, const std::atomic<int>* flag) {
  return Poll(collectives, flag, /*every_step=*/false).signal_between_epochs();
}

TrainSummary train(Config config, Collectives& collectives, RunLog& log, const TrainOptions& options) {
  return Trainer(std::move(config), collectives, log, options).fit();
}

Trainer::Trainer(Config config, Collectives& collectives, RunLog& log, TrainOptions options)
    : config_(std::move(config)), collectives_(collectives), log_(log), options_(std::move(options)) {
  load_data();
  build_model();
  if (collectives_.is_main() && options_.trackers)
    if (auto trackers = options_.trackers("train"); !trackers.empty())
      tracked_ = std::make_unique<TrackedRun>(std::move(trackers));
  if (const std::string from = resume_source(); !from.empty()) resume(from, options_.resume_path.empty());
  for (auto& f : features_) f->start(meta_);
  start_metrics();
  build_step();
  plan_epochs();
}

Trainer::~Trainer() = default;

void Trainer::load_data() {
  const auto& dc = config_.data;
  const Clock::time_point start = Clock::now();
  index_ = load_train_index(dc, index_options(dc));
  config_.data.label_columns =
      index_.label_names;  // resolved: written to the run's config file and the checkpoint
  split_ = validation_split(config_.data, index_.groups, static_cast<uint64_t>(config_.seed));
  char index_seconds[32];
  std::snprintf(index_seconds, sizeof index_seconds, "%.3f", seconds_since(start));
  const fs::path out(config_.output.dir);
  out_dir_ = out.string();
  ckpt_dir_ = run_folder::checkpoints(out_dir_);
  meta_.config_yaml = config_to_yaml(config_);
  if (collectives_.is_main()) {
    fs::create_directories(ckpt_dir_);
    write_file_atomic(run_folder::config_file(out_dir_), meta_.config_yaml);
    log_.open_file(run_folder::log_file(out_dir_));
  }
  writers_.add(make_console_writer(log_));
  log_.info("data: " + std::to_string(index_.size()) + " images, " + std::to_string(index_.num_labels()) +
            " labels; train " + std::to_string(split_.train.size()) + ", validation " +
            std::to_string(split_.val.size()) + " (grouped by " +
            (dc.group_column.empty() ? std::string("row") : dc.group_column) + "; read and split in " +
            index_seconds + " s)");
  const bool drop_last = drop_last_batch(config_, split_.train.size(), collectives_.world_size());
  loader_options_ = train_loader_options(config_, options_.device, drop_last);
  loader_options_.cache = open_cache();
}

// data.cache: the prepared images of the whole table, built once (by whichever process of the node gets
// there first; the others wait on its lock file, then map the same file).
std::shared_ptr<const CachedImages> Trainer::open_cache() {
  // Every rank says what it does (the one that builds may be any of them; launchers label the lines).
  return open_run_cache(config_.data, index_.image_paths, [this](const std::string& line) {
    if (collectives_.is_main())
      log_.info(line);
    else
      std::fprintf(stderr, "%s\n", line.c_str());
  });
}

// The model, then the features (which may train modules beside it), then one optimizer over all.
void Trainer::build_model() {
  const torch::Device device = options_.device;
  inference_options_ = inference_options(config_, device);
  inference_options_.cache = loader_options_.cache;
  torch::manual_seed(config_.seed);
  const StartingModel start =
      starting_model(config_, options_.weights, static_cast<int64_t>(index_.num_labels()), device,
                     inference_options_.channels_last);
  model_ = start.model;
  if (!start.loaded.empty()) log_.info("pretrained: " + start.loaded);
  if (!start.warning.empty()) log_.warn(start.warning);
  features_ = make_training_features(config_, options_);
  TrainingSetup setup{config_, collectives_, log_,    device,           inference_options_.channels_last,
                      index_,  ckpt_dir_,    *model_, trained_modules_, loader_options_};
  for (auto& f : features_) f->setup(setup);
  extra_loss_ = setup.extra_loss;
  std::vector<torch::Tensor> parameters = model_->parameters();
  if (!trained_modules_.empty()) {
    synced_ = std::make_shared<torch::nn::Module>();
    synced_->register_module("model", model_);
    for (const auto& [name, module] : trained_modules_) {
      synced_->register_module(name, module);
      for (const auto& p : module->parameters()) parameters.push_back(p);
    }
  }
  optimizer_ = make_optimizer(config_.optim, parameters);
  meta_.model_name = config_.model.name;
  meta_.label_names = index_.label_names;
  meta_.world_size = collectives_.world_size();
  meta_.batch_size = config_.train.batch_size;
}

std::string Trainer::resume_source() {
  if (!options_.resume_path.empty()) return options_.resume_path;
  const std::string last = run_folder::last_checkpoint(out_dir_);
  // Rank 0 looks and everyone follows its answer, so all ranks take the same path.
  torch::Tensor found =
      torch::tensor({collectives_.is_main() && fs::exists(last) ? 1.0 : 0.0}, torch::kDouble);
  collectives_.broadcast(found, 0);
  if (found.item<double>() == 0) return "";
  if (config_.train.resume == ResumeSetting::kAuto) return last;
  if (collectives_.is_main()) {
    std::string what = "a previous run";
    try {
      const CheckpointMeta old = read_checkpoint_meta(last);
      what = "a run of " + old.model_name + " at epoch " + std::to_string(old.epoch);
    } catch (const std::exception&) {
    }
    log_.warn("train.resume=never: starting over in " + out_dir_ + "; it held " + what +
              ", whose checkpoints, " + run_folder::kMetrics + " and trackers' files are removed now");
    for (const auto& entry : fs::directory_iterator(ckpt_dir_))
      if (entry.path().extension() == ".pt") fs::remove(entry.path());
    if (tracked_) tracked_->clear(out_dir_);
  }
  collectives_.barrier();  // nobody looks at the folder before it is cleared
  return "";
}

void Trainer::resume(const std::string& path, bool automatic) {
  collectives_.barrier();                          // the file is complete before anyone reads it
  CheckpointReader reader(path, options_.device);  // one read: check, then restore
  const CheckpointMeta& saved = reader.meta();
  const ResumeSource from{
      reader,
      automatic ? "output.dir " + out_dir_ + " holds a run (" + run_folder::kLast + ") "
                : "--resume " + path + ": the checkpoint holds a run ",
      automatic ? ": use another output.dir, or set train.resume=never to start over there" : ""};
  RANZCR_CHECK(saved.model_name == config_.model.name, from.holds, "of model '", saved.model_name,
               "' but the config trains '", config_.model.name, "'", from.fix);
  RANZCR_CHECK(saved.label_names == index_.label_names, from.holds,
               "with other label columns than the data's", from.fix);
  reader.restore(*model_, nullptr);
  set_memory_format(*model_, inference_options_.channels_last);
  for (auto& f : features_) f->restore(from);
  reader.restore_optimizer(*optimizer_);
  restore_meta(saved, path, automatic);
}

void Trainer::restore_meta(const CheckpointMeta& saved, const std::string& path, bool automatic) {
  meta_.epoch = saved.epoch;
  meta_.step = saved.step;
  meta_.best_metric = saved.best_metric;
  meta_.loss_scale = saved.loss_scale;
  meta_.loss_scale_growth = saved.loss_scale_growth;
  meta_.tracker_run_ids = saved.tracker_run_ids;
  const int world = collectives_.world_size();
  if (saved.world_size != world)
    log_.warn("resuming a checkpoint written by " + std::to_string(saved.world_size) + " processes with " +
              std::to_string(world) + ": the data order of later epochs differs from the original run");
  if (saved.epoch_batches_done > 0) {
    if (saved.world_size == world && saved.batch_size == config_.train.batch_size) {
      skip_batches_ = saved.epoch_batches_done;
      if (saved.rng_states.defined() && saved.rng_states.size(0) == world)
        resume_rng_ = fitting_rng_state(saved, collectives_.rank(), options_.device, log_);
    } else {
      log_.warn("the checkpoint was saved mid-epoch by a run of another shape; epoch " +
                std::to_string(saved.epoch + 1) + " restarts from its beginning");
    }
  }
  log_.info("resumed from " + path + " at epoch " + std::to_string(meta_.epoch) + ", step " +
            std::to_string(meta_.step) + (skip_batches_ ? ", batch " + std::to_string(skip_batches_) : "") +
            (automatic ? " (train.resume: auto)" : ""));
}

void Trainer::start_metrics() {
  if (!collectives_.is_main()) return;
  const std::string path = run_folder::metrics_file(out_dir_);
  truncate_metrics(path, meta_.epoch);  // the epochs after the checkpoint are trained again
  writers_.add(make_jsonl_writer(path));
  writers_.add(make_curves_writer(out_dir_));  // after the jsonl writer: redrawn from the metrics file
  start_tracking();
}

void Trainer::start_tracking() {
  if (!tracked_) return;
  const bool resumed = meta_.epoch > 0 || meta_.step > 0;
  if (resumed && run_finished(config_.train, meta_)) {
    tracked_.reset();  // nothing to train: its trackers' runs stay as they are
    return;
  }
  tracking::RunStart start;
  start.command = "train";
  start.run_dir = out_dir_;
  start.continue_folder_run = !resumed && config_.train.resume == ResumeSetting::kAuto;
  start.resumed_step = meta_.step;
  start.params = config_params(config_);
  start.tags = {{"ranzcr.device", options_.device.str()},
                {"ranzcr.world_size", std::to_string(collectives_.world_size())},
                {"ranzcr.model", config_.model.name}};
  tracked_->open(start, meta_.tracker_run_ids, options_.parent_run_ids);
  meta_.tracker_run_ids = tracked_->run_ids(meta_.tracker_run_ids);
  writers_.add(tracked_->writer());
}

// After any resume: the DDP wrapper hooks the parameters' gradient accumulators, which restoring
// weights into the parameters (set_/set_data) may replace.
void Trainer::build_step() {
  const torch::Device device = options_.device;
  torch::nn::Module& synced = synced_ ? *synced_ : static_cast<torch::nn::Module&>(*model_);
  ddp_ = std::make_unique<DistributedDataParallel>(synced, collectives_, ddp_options(config_));
  if (const int64_t layers = sync_batch_norms(config_, synced, collectives_); layers > 0 && !bn_sync_said_) {
    log_.info("distributed: " + std::to_string(layers) + " BatchNorm layers normalise over all " +
              std::to_string(collectives_.world_size()) + " ranks' batches (bn_sync: sync)");
    bn_sync_said_ = true;
  }
  const StepOptions so = step_options(config_, device);
  step_ = std::make_unique<TrainStep>(*model_, *optimizer_, *ddp_, device, so, extra_loss_);
  if (LossScaler* scaler = step_->loss_scaler(); scaler && meta_.loss_scale > 0)
    scaler->load(meta_.loss_scale, meta_.loss_scale_growth);
  watch_ = std::make_unique<LossWatch>(device, so.precision == Precision::kFp16 ? kFp16NonFiniteLosses : 0);
  poll_ = std::make_unique<Poll>(collectives_, options_.stop_signal,
                                 collectives_.world_size() == 1 && !device.is_cuda());
  log_.info("model: " + config_.model.name + ", " + std::to_string(count_parameters(*model_)) +
            " parameters, device " + device.str() + ", precision " + precision_name(so.precision) +
            (inference_options_.channels_last ? ", channels_last" : "") + ", world size " +
            std::to_string(collectives_.world_size()));
  if (const std::string w = cpu_bf16_warning(so.precision, device); !w.empty()) log_.warn(w);
}

void Trainer::plan_epochs() {
  SamplerOptions so;
  so.rank = collectives_.rank();
  so.world_size = collectives_.world_size();
  so.seed = static_cast<uint64_t>(config_.seed);
  so.drop_last = loader_options_.drop_last;
  sampler_ = std::make_unique<DistributedSampler>(static_cast<int64_t>(split_.train.size()), so);
  batch_options_ = device_batch_options(inference_options_);  // as validation sees them

  const int64_t per_rank = sampler_->num_samples(), bs = loader_options_.batch_size;
  const int64_t batches = loader_options_.drop_last ? per_rank / bs : (per_rank + bs - 1) / bs;
  const int accum = config_.train.accum_steps;
  steps_per_epoch_ = (batches + accum - 1) / accum;
  total_steps_ = steps_per_epoch_ * config_.train.epochs;
  warmup_steps_ = static_cast<int64_t>(std::llround(config_.optim.warmup_epochs * steps_per_epoch_));
  lr_ = config_.optim.lr;
}

}  // namespace ranzcr
