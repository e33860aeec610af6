#include "engine/train/trainer.h"

#include <ATen/Context.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "engine/runtime/cuda_support.h"
#include "engine/report/curves.h"
#include "engine/train/fused_optimizer.h"
#include "engine/report/metrics.h"
#include "engine/io/pretrained.h"
#include "engine/io/safetensors.h"
#include "engine/report/tensorboard_writer.h"
#include "models/registry.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace ranzcr {
namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Keeps the first `epochs` lines of metrics.jsonl (after a resume the later ones are recomputed).
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

// Stop flags and the divergence check are combined over the ranks (and read from the GPU) only every
// this many optimizer steps and at the end of an epoch: a collective, and on CUDA a host sync, per step
// would stall the pipeline. One process on the CPU checks every step (it costs nothing there).
constexpr int64_t kPollSteps = 8;
// Consecutive non-finite losses tolerated before the run counts as diverged: none, except with fp16,
// where the loss scaler skips overflowing steps and an overflow now and then is expected.
constexpr int64_t kFp16NonFiniteLosses = 8;

}  // namespace

// ---- free helpers ------------------------------------------------------------------------------------

InferenceOptions inference_options(const Config& config, torch::Device device, bool tta) {
  InferenceOptions io;
  io.image_size = config.data.image_size;
  io.clahe = config.data.augment.clahe;
  io.batch_size = config.train.eval_batch_size;
  io.num_workers = config.data.num_workers;
  io.prefetch_batches = config.data.prefetch_batches;
  io.skip_bad_images = config.data.skip_bad_images;
  io.tta_hflip = tta || config.train.tta_hflip;
  io.in_channels = config.model.in_channels;
  io.input_mean = config.model.input_mean;
  io.input_std = config.model.input_std;
  io.device = device;
  io.precision = resolve_precision(config.train.precision, device);
  io.channels_last = resolve_channels_last(config.train.channels_last, device);
  return io;
}

Split validation_split(const Config& config, const DatasetIndex& index) {
  const DataConfig& d = config.data;
  return d.folds > 0 ? group_kfold(index.groups, d.folds, d.fold, config.seed)
                     : group_split(index.groups, d.val_fraction, config.seed);
}

bool run_finished(const TrainConfig& train, const CheckpointMeta& meta) {
  const int patience = train.early_stop_patience;
  return meta.epoch >= train.epochs || (patience > 0 && meta.epochs_since_best >= patience);
}

double scheduled_lr(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_ratio) {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const double span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  const double floor = lr * min_ratio;
  return floor + 0.5 * (lr - floor) * (1.0 + std::cos(M_PI * progress));
}

// "" or a warning: model.pretrained is an exported file whose run normalised its input otherwise.
static std::string normalisation_mismatch(const ModelConfig& model) {
  const auto meta = read_safetensors_metadata(model.pretrained);
  auto mean = meta.find("mean"), std = meta.find("std");
  if (mean == meta.end() || std == meta.end()) return "";
  const std::string ours_mean = nlohmann::json(model.input_mean).dump();
  const std::string ours_std = nlohmann::json(model.input_std).dump();
  if (nlohmann::json::parse(mean->second, nullptr, false) == nlohmann::json::parse(ours_mean) &&
      nlohmann::json::parse(std->second, nullptr, false) == nlohmann::json::parse(ours_std))
    return "";
  return model.pretrained + " was trained with input mean " + mean->second + " std " + std->second +
         "; this run normalises with model.input_mean " + ours_mean + " model.input_std " + ours_std;
}

std::shared_ptr<Classifier> make_model(const Config& config, int64_t num_classes, const torch::Device& device,
                                       bool channels_last, std::string* pretrained_log) {
  ModelSpec spec;
  spec.in_channels = config.model.in_channels;
  spec.num_classes = static_cast<int>(num_classes);
  spec.dropout = config.model.dropout;
  std::shared_ptr<Classifier> model = create_model(config.model.name, spec);
  if (!config.model.pretrained.empty()) {
    const PretrainedReport report = load_pretrained(*model, config.model.pretrained);
    if (pretrained_log) *pretrained_log = report.summary(config.model.pretrained);
  }
  model->to(device);
  set_memory_format(*model, channels_last);
  return model;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o, Classifier& model) {
  return make_optimizer(o, model.parameters());
}

// optim.fused auto follows torch.optim's defaults: the fused/multi-tensor kernels for CUDA parameters, the
// per-parameter step on a CPU (where nothing is launched, and the numbers stay LibTorch's).
static bool use_fused_kernels(const OptimConfig& o, const std::vector<torch::Tensor>& parameters) {
  const torch::Device device = parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
  return resolve_on_for_cuda("optim.fused", o.fused, device);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o,
                                                        std::vector<torch::Tensor> parameters) {
  const bool fused = use_fused_kernels(o, parameters);
  if (o.name == "sgd")
    return std::make_unique<FusedSgd>(
        parameters,
        torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(true).weight_decay(o.weight_decay),
        fused);
  return std::make_unique<FusedAdamW>(parameters,
                                      torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay), fused);
}

std::string annotations_csv_path(const DataConfig& data) {
  return (fs::path(data.root) / data.annotations_csv).string();
}

StepOptions step_options(const Config& config, const torch::Device& device) {
  StepOptions so;
  so.accum_steps = config.train.accum_steps;
  so.grad_clip = config.optim.grad_clip;
  so.precision = resolve_precision(config.train.precision, device);
  return so;
}

LoaderOptions train_loader_options(const Config& config, const torch::Device& device, bool drop_last) {
  LoaderOptions lo;
  lo.batch_size = config.train.batch_size;
  lo.num_workers = config.data.num_workers;
  lo.prefetch_batches = config.data.prefetch_batches;
  lo.skip_bad_images = config.data.skip_bad_images;
  lo.drop_last = drop_last;
  set_loader_transfer(lo, device);
  return lo;
}

DdpOptions ddp_options(const Config& config) {
  DdpOptions o;
  o.bucket_bytes = static_cast<int64_t>(config.distributed.bucket_mb * 1024 * 1024);
  o.broadcast_buffers = config.distributed.bn_sync == "broadcast";
  return o;
}

TransformOptions train_transform(const Config& config) {
  TransformOptions to;
  to.image_size = config.data.image_size;
  to.train = true;
  to.augment = config.data.augment;
  to.seed = static_cast<uint64_t>(config.seed);
  return to;
}

void configure_device(const torch::Device& device) {
  if (device.is_cuda()) at::globalContext().setBenchmarkCuDNN(true);  // fixed shapes: pick the fastest conv
}

// ---- Trainer pieces ----------------------------------------------------------------------------------

/// Non-finite losses, counted on the device (reading the count is a host sync: done only when polled).
class Trainer::LossWatch {
 public:
  LossWatch(const torch::Device& device, int64_t tolerated) : tolerated_(static_cast<double>(tolerated)) {
    const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(device);
    run_ = torch::zeros({}, opts), worst_ = torch::zeros({}, opts);
  }
  void add(const torch::Tensor& loss) {
    if (!loss.defined()) return;
    const torch::Tensor bad = torch::isfinite(loss).logical_not().to(torch::kDouble);
    run_.add_(1.0).mul_(bad);  // consecutive non-finite losses so far
    worst_ = torch::maximum(worst_, run_);
  }
  /// 1 when more consecutive losses than tolerated were non-finite since the last call, else 0.
  double take_diverged() {
    const double worst = worst_.item<double>();
    worst_.copy_(run_);
    return worst > tolerated_ ? 1.0 : 0.0;
  }

 private:
  double tolerated_;
  torch::Tensor run_, worst_;
};

/// What every rank must agree on after a step: was any rank asked to stop (SIGTERM/SIGINT), did any
/// rank's loss diverge. One process reads its own flag every step (free); several all-reduce their
/// flags every kPollSteps steps and at the end of an epoch.
class Trainer::Poll {
 public:
  struct Result {
    int signal = 0;  // this rank's signal, or SIGTERM when another rank's stopped it; 0 = none
    bool diverged = false;
  };
  Poll(Collectives& collectives, const std::atomic<int>* flag, bool every_step)
      : collectives_(collectives), flag_(flag), every_step_(every_step) {}
  /// After optimizer step `step`.
  Result after_step(int64_t step, bool epoch_end, LossWatch& watch) {
    const bool due = every_step_ || epoch_end || step % kPollSteps == 0;
    if (collectives_.world_size() == 1) return {local(), due && watch.take_diverged() > 0};
    if (!due) return {};
    return combine(watch.take_diverged());
  }
  /// Between epochs (after validation and the checkpoint save): whether a stop was asked meanwhile.
  int signal_between_epochs() { return collectives_.world_size() == 1 ? local() : combine(0.0).signal; }

 private:
  Result combine(double diverged) {
    torch::Tensor t = torch::tensor({local() > 0 ? 1.0 : 0.0, diverged}, torch::kDouble);
    collectives_.all_reduce_sum(t);
    const auto v = t.accessor<double, 1>();
    return {v[0] > 0 ? (local() > 0 ? local() : SIGTERM) : 0, v[1] > 0};
  }
  int local() const { return flag_ ? flag_->load() : 0; }
  Collectives& collectives_;
  const std::atomic<int>* flag_;
  bool every_step_;
};

/// Loss sums of an epoch (kept on the device: reading them is a host sync, done only for progress
/// records and at the end of the epoch) and the periodic progress record.
class Trainer::Progress {
 public:
  Progress(const torch::Device& device, int64_t epoch, int64_t epochs, int64_t batches_before,
           int64_t batches, double period)
      : epoch_(epoch), epochs_(epochs), before_(batches_before), batches_(batches), period_(period) {
    const auto opts = torch::TensorOptions().dtype(torch::kDouble).device(device);
    loss_sum_ = torch::zeros({}, opts), window_loss_ = torch::zeros({}, opts);
  }
  void add(const torch::Tensor& loss, int64_t n, int64_t skipped) {
    skipped_ += skipped;
    if (!loss.defined()) return;
    const torch::Tensor weighted = loss.to(torch::kDouble) * static_cast<double>(n);
    loss_sum_ += weighted, window_loss_ += weighted;
    seen_ += n, window_n_ += n;
  }
  /// The auxiliary loss of a batch: its sum over the batch's annotated images and their number.
  void add_aux(const torch::Tensor& sum, const torch::Tensor& images) {
    if (!aux_sum_.defined()) aux_sum_ = torch::zeros({2}, sum.options().dtype(torch::kDouble));
    aux_sum_ += torch::stack({sum.to(torch::kDouble), images.to(torch::kDouble)});
  }
  /// After batch `done` (1-based, this run): a progress record every `period` seconds and at the end.
  void maybe_report(int64_t done, int64_t step, double lr, int world, MetricsWriter& out) {
    if (seconds_since(last_) < period_ && done != batches_) return;
    const double elapsed = seconds_since(start_);
    ProgressRecord r;
    r.epoch = epoch_ + 1, r.epochs = epochs_, r.batch = before_ + done, r.batches = before_ + batches_;
    r.step = step, r.lr = lr;
    r.loss = window_n_ > 0 ? window_loss_.item<double>() / window_n_ : 0.0;
    r.images_per_sec = seen_ * world / std::max(elapsed, 1e-9);
    r.eta_seconds = elapsed / done * (batches_ - done);
    out.progress(r);
    window_loss_.zero_();
    window_n_ = 0.0;
    last_ = Clock::now();
  }
  /// The epoch's totals over every rank.
  EpochTotals totals(Collectives& collectives) const {
    const double seconds = seconds_since(start_);
    const torch::Tensor aux = aux_sum_.defined() ? aux_sum_.cpu() : torch::zeros({2}, torch::kDouble);
    torch::Tensor stats = torch::tensor({loss_sum_.item<double>(), seen_, static_cast<double>(skipped_),
                                         aux[0].item<double>(), aux[1].item<double>()},
                                        torch::kDouble);
    collectives.all_reduce_sum(stats);
    const auto s = stats.accessor<double, 1>();
    return EpochTotals{s[0], s[1], s[2], seconds, s[3], s[4]};
  }

 private:
  int64_t epoch_, epochs_, before_, batches_;
  double period_;
  torch::Tensor loss_sum_, window_loss_;
  torch::Tensor aux_sum_;  // [2] double on the device: mask BCE sum, annotated images
  double seen_ = 0.0, window_n_ = 0.0;
  int64_t skipped_ = 0;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

// ---- Trainer -----------------------------------------------------------------------------------------

Trainer::Trainer(Config config, Collectives& collectives, RunLog& log, TrainOptions options)
    : config_(std::move(config)), collectives_(collectives), log_(log), options_(std::move(options)) {
  load_data();
  build_model();
  if (const std::string from = resume_source(); !from.empty()) resume(from, options_.resume_path.empty());
  start_metrics();
  build_step();
  plan_epochs();
}

Trainer::~Trainer() = default;

void Trainer::load_data() {
  const auto& dc = config_.data;
  index_ = load_train_index(dc, index_options(dc));
  config_.data.label_columns = index_.label_names;  // resolved: written to config.yaml and the checkpoint
  split_ = validation_split(config_, index_);
  const fs::path out(config_.output.dir);
  out_dir_ = out.string();
  ckpt_dir_ = (out / "checkpoints").string();
  meta_.config_yaml = config_to_yaml(config_);
  if (collectives_.is_main()) {
    fs::create_directories(ckpt_dir_);
    write_file_atomic((out / "config.yaml").string(), meta_.config_yaml);
    log_.open_file((out / "log.txt").string());
  }
  writers_.add(make_console_writer(log_));
  log_.info("data: " + std::to_string(index_.size()) + " images, " + std::to_string(index_.num_labels()) +
            " labels; train " + std::to_string(split_.train.size()) + ", validation " +
            std::to_string(split_.val.size()) + " (grouped by " +
            (dc.group_column.empty() ? std::string("row") : dc.group_column) + ")");
  if (config_.model.aux_seg_weight > 0) load_annotations();
}

void Trainer::load_annotations() {
  const std::string path = annotations_csv_path(config_.data);
  auto a = std::make_shared<ImageAnnotations>(
      ranzcr::load_annotations(path, index_, config_.data.id_column, config_.data.skip_bad_annotations));
  log_.info("annotations: " + std::to_string(a->rows) + " devices on " +
            std::to_string(a->annotated_images()) + " of " + std::to_string(index_.size()) + " images (" +
            path + ")");
  if (a->skipped_rows > 0)
    log_.warn(std::to_string(a->skipped_rows) + " bad rows of " + path +
              " skipped (data.skip_bad_annotations)");
  if (a->annotated_images() == 0)
    throw std::runtime_error(path + ": no annotated training images; model.aux_seg_weight needs some");
  annotations_ = std::move(a);
}

void Trainer::build_model() {
  const torch::Device device = options_.device;
  configure_device(device);
  inference_options_ = inference_options(config_, device);
  torch::manual_seed(config_.seed);
  std::string pretrained;
  model_ = make_model(config_, static_cast<int64_t>(index_.num_labels()), device,
                      inference_options_.channels_last, &pretrained);
  if (!pretrained.empty()) log_.info("pretrained: " + pretrained);
  if (!config_.model.pretrained.empty())
    if (const std::string w = normalisation_mismatch(config_.model); !w.empty()) log_.warn(w);
  std::vector<torch::Tensor> parameters = model_->parameters();
  if (config_.model.aux_seg_weight > 0) {
    build_aux_head();
    for (const auto& p : aux_head_->parameters()) parameters.push_back(p);
  }
  optimizer_ = make_optimizer(config_.optim, parameters);
  if (config_.train.ema_decay > 0) {
    Config shadow = config_;  // its weights come from the model (ModelEma copies them)
    shadow.model.pretrained.clear();
    ema_model_ = make_model(shadow, static_cast<int64_t>(index_.num_labels()), device,
                            inference_options_.channels_last);
    EmaOptions eo;
    eo.decay = config_.train.ema_decay;
    ema_ = std::make_unique<ModelEma>(*model_, ema_model_, eo);
  }
  meta_.model_name = config_.model.name;
  meta_.label_names = index_.label_names;
  meta_.world_size = collectives_.world_size();
  meta_.batch_size = config_.train.batch_size;
}

void Trainer::build_aux_head() {
  int64_t channels = 0;
  try {
    channels = model_->feature_channels();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("model.aux_seg_weight: " + std::string(e.what()));
  }
  aux_head_ = AuxSegHead(channels);  // after the model: the model's initialisation is that of a plain run
  aux_head_->to(options_.device);
  set_memory_format(*aux_head_, inference_options_.channels_last);
  synced_ = std::make_shared<torch::nn::Module>();
  synced_->register_module("model", model_);
  synced_->register_module("aux_head", aux_head_.ptr());
}

// After any resume: the DDP wrapper hooks the parameters' gradient accumulators, which restoring
// weights into the parameters (set_/set_data) may replace.
void Trainer::build_step() {
  const torch::Device device = options_.device;
  torch::nn::Module& synced = synced_ ? *synced_ : static_cast<torch::nn::Module&>(*model_);
  ddp_ = std::make_unique<DistributedDataParallel>(synced, collectives_, ddp_options(config_));
  const StepOptions so = step_options(config_, device);
  AuxSegStep aux;
  if (aux_head_) aux = AuxSegStep{aux_head_, config_.model.aux_seg_weight, &collectives_};
  step_ = std::make_unique<TrainStep>(*model_, *optimizer_, *ddp_, device, so, aux);
  if (LossScaler* scaler = step_->loss_scaler(); scaler && meta_.loss_scale > 0)
    scaler->load(meta_.loss_scale, meta_.loss_scale_growth);
  watch_ = std::make_unique<LossWatch>(device, so.precision == Precision::kFp16 ? kFp16NonFiniteLosses : 0);
  poll_ = std::make_unique<Poll>(collectives_, options_.stop_signal,
                                 collectives_.world_size() == 1 && !device.is_cuda());
  log_.info("model: " + config_.model.name + ", " + std::to_string(count_parameters(*model_)) +
            " parameters, device " + device.str() + ", precision " + precision_name(so.precision) +
            (inference_options_.channels_last ? ", channels_last" : "") + ", world size " +
            std::to_string(collectives_.world_size()));
}

std::string Trainer::resume_source() {
  if (!options_.resume_path.empty()) return options_.resume_path;
  const std::string last = ckpt_dir_ + "/last.pt";
  // Rank 0 looks and everyone follows its answer, so all ranks take the same path.
  torch::Tensor found =
      torch::tensor({collectives_.is_main() && fs::exists(last) ? 1.0 : 0.0}, torch::kDouble);
  collectives_.broadcast(found, 0);
  if (found.item<double>() == 0) return "";
  if (config_.train.resume == "auto") return last;
  if (collectives_.is_main()) {
    std::string what = "a previous run";
    try {
      const CheckpointMeta old = read_checkpoint_meta(last);
      what = "a run of " + old.model_name + " at epoch " + std::to_string(old.epoch);
    } catch (const std::exception&) {
    }
    log_.warn("train.resume=never: starting over in " + out_dir_ + "; it held " + what +
              ", whose checkpoints, metrics.jsonl and TensorBoard event files are removed now");
    for (const auto& entry : fs::directory_iterator(ckpt_dir_))
      if (entry.path().extension() == ".pt") fs::remove(entry.path());
    fs::remove_all(out_dir_ + "/tensorboard");
  }
  collectives_.barrier();  // nobody looks at the folder before it is cleared
  return "";
}

namespace {

// This rank's generator state from a mid-epoch checkpoint when it fits this run's generator, else
// undefined, with a warning: a state of another device type (a run moved between CPU and GPU) or size
// cannot be restored, and the random ops (dropout) of the rest of that epoch then differ.
torch::Tensor fitting_rng_state(const CheckpointMeta& saved, int rank, const torch::Device& device,
                                RunLog& log) {
  const torch::Tensor state = saved.rng_states[rank];
  const std::string type = c10::DeviceTypeName(device.type(), /*lower_case=*/true);
  at::Generator gen = at::globalContext().defaultGenerator(device);
  int64_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    bytes = gen.get_state().numel();
  }
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

}  // namespace

void Trainer::resume(const std::string& path, bool automatic) {
  collectives_.barrier();                          // the file is complete before anyone reads it
  CheckpointReader reader(path, options_.device);  // one read: check, then restore
  const CheckpointMeta& saved = reader.meta();
  const std::string what = automatic ? "output.dir " + out_dir_ + " holds a run (checkpoints/last.pt) "
                                     : "--resume " + path + ": the checkpoint holds a run ";
  const std::string fix =
      automatic ? ": use another output.dir, or set train.resume=never to start over there" : "";
  if (saved.model_name != config_.model.name)
    throw std::runtime_error(what + "of model '" + saved.model_name + "' but the config trains '" +
                             config_.model.name + "'" + fix);
  if (saved.label_names != index_.label_names)
    throw std::runtime_error(what + "with other label columns than the data's" + fix);
  if (reader.has_aux_head() != static_cast<bool>(aux_head_))
    throw std::runtime_error(what + (aux_head_ ? "without" : "with") +
                             " an auxiliary segmentation head, but this config has model.aux_seg_weight " +
                             (aux_head_ ? "> 0" : "= 0") + fix);
  reader.restore(*model_, optimizer_.get());
  if (aux_head_) {
    reader.restore_aux_head(*aux_head_);
    set_memory_format(*aux_head_, inference_options_.channels_last);
  }
  set_memory_format(*model_, inference_options_.channels_last);
  if (ema_ && reader.has_ema()) {
    reader.restore_ema(*ema_model_);
    set_memory_format(*ema_model_, inference_options_.channels_last);
  } else if (ema_) {
    ema_->reset();
    log_.warn("the checkpoint holds no EMA weights: the EMA starts from its weights");
  }
  meta_.epoch = saved.epoch;
  meta_.step = saved.step;
  meta_.best_metric = saved.best_metric;
  meta_.epochs_since_best = saved.epochs_since_best;
  meta_.loss_scale = saved.loss_scale;
  meta_.loss_scale_growth = saved.loss_scale_growth;
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
  top_ = std::make_unique<TopCheckpoints>(ckpt_dir_, config_.output.keep_best_k);
  if (!collectives_.is_main()) return;
  top_->scan(meta_.epoch);
  const std::string path = out_dir_ + "/metrics.jsonl";
  truncate_metrics(path, meta_.epoch);  // the epochs after the checkpoint are trained again
  writers_.add(make_jsonl_writer(path));
  // A new event file per start; a resumed one tells TensorBoard to drop what came after the checkpoint.
  writers_.add(std::make_unique<TensorBoardWriter>(out_dir_ + "/tensorboard", meta_.step));
  writers_.add(make_curves_writer(out_dir_));  // after the jsonl writer: redrawn from metrics.jsonl
}

void Trainer::plan_epochs() {
  SamplerOptions so;
  so.rank = collectives_.rank();
  so.world_size = collectives_.world_size();
  so.seed = static_cast<uint64_t>(config_.seed);
  so.drop_last = split_.train.size() >= static_cast<size_t>(config_.train.batch_size * so.world_size);
  sampler_ = std::make_unique<DistributedSampler>(static_cast<int64_t>(split_.train.size()), so);

  loader_options_ = train_loader_options(config_, options_.device, so.drop_last);
  loader_options_.annotations = annotations_;
  batch_options_.device = options_.device;
  batch_options_.in_channels = config_.model.in_channels;
  batch_options_.input_mean = config_.model.input_mean;
  batch_options_.input_std = config_.model.input_std;
  batch_options_.channels_last = inference_options_.channels_last;

  const int64_t per_rank = sampler_->num_samples(), bs = loader_options_.batch_size;
  const int64_t batches = loader_options_.drop_last ? per_rank / bs : (per_rank + bs - 1) / bs;
  const int accum = config_.train.accum_steps;
  steps_per_epoch_ = (batches + accum - 1) / accum;
  total_steps_ = steps_per_epoch_ * config_.train.epochs;
  warmup_steps_ = static_cast<int64_t>(std::llround(config_.optim.warmup_epochs * steps_per_epoch_));
  lr_ = config_.optim.lr;
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

TrainSummary Trainer::fit() {
  summary_.best_auc = meta_.best_metric;
  summary_.epochs = meta_.epoch;
  const bool early_stopped = early_stop_due();
  if (run_finished(config_.train, meta_)) {
    summary_.already_finished = true;
    log_.info("nothing to train: the run in " + out_dir_ + " has finished (" + std::to_string(meta_.epoch) +
              " epochs" + (early_stopped ? ", stopped early" : "") + "; raise train.epochs" +
              (early_stopped ? " or train.early_stop_patience" : "") +
              " to train on, or set train.resume=never to start over)");
    return summary_;
  }
  for (int64_t epoch = meta_.epoch; epoch < config_.train.epochs; ++epoch) {
    const auto start = Clock::now();
    const std::optional<EpochTotals> totals = train_epoch(epoch);
    if (!totals) return summary_;  // stopped mid-epoch; last.pt saved
    if (finish_epoch(epoch, *totals, start)) break;
    if (epoch + 1 == config_.train.epochs) break;
    // A stop asked for during validation or the checkpoint write: the epoch is saved, stop here.
    if (!summary_.stopped_by_signal) summary_.stopped_by_signal = poll_->signal_between_epochs();
    if (summary_.stopped_by_signal) {
      log_.warn("stopped after epoch " + std::to_string(epoch + 1) + "; saved " + ckpt_dir_ +
                "/last.pt (run the same command again to continue)");
      return summary_;
    }
  }
  return summary_;
}

void Trainer::seed_epoch(int64_t epoch) {
  // Each rank its own stream (rank 0 keeps the single-process one), new every epoch.
  const uint64_t seed = static_cast<uint64_t>(config_.seed) * 1000003ULL + static_cast<uint64_t>(epoch) +
                        static_cast<uint64_t>(collectives_.rank()) * 0x9E3779B97F4A7C15ULL;
  torch::manual_seed(seed);
  if (!resume_rng_.defined()) return;
  at::Generator gen = at::globalContext().defaultGenerator(options_.device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(resume_rng_);
  resume_rng_ = torch::Tensor();
}

std::optional<Trainer::EpochTotals> Trainer::train_epoch(int64_t epoch) {
  seed_epoch(epoch);
  const int64_t done_before = skip_batches_;
  BatchLoader loader(index_, epoch_rows(epoch), ImageTransform(train_transform(config_)), epoch,
                     loader_options_);
  skip_batches_ = 0;
  DeviceBatches batches(loader, batch_options_);
  const int64_t n = loader.num_batches();
  Progress progress(options_.device, epoch, config_.train.epochs, done_before, n,
                    config_.train.log_every_seconds);
  model_->train();
  if (aux_head_) aux_head_->train();
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
  const AuxTarget target{batch.masks, batch.has_annotation};
  const torch::Tensor loss =
      step_->forward_backward(batch.images, batch.labels, sync, aux_head_ ? &target : nullptr);
  progress.add(loss, batch.size(), batch.skipped);
  if (aux_head_ && loss.defined()) {
    progress.add_aux(step_->aux_loss_sum(), step_->aux_images());
    watch_->add(loss + step_->aux_loss_sum());
  } else {
    watch_->add(loss);
  }
  if (!sync) return false;
  lr_ = scheduled_lr(meta_.step, total_steps_, warmup_steps_, config_.optim.lr, config_.optim.min_lr_ratio);
  step_->optimizer_step(lr_);
  ++meta_.step;
  if (ema_) ema_->update(meta_.step);
  return true;
}

bool Trainer::after_step(int64_t epoch, bool epoch_end) {
  if (summary_.stopped_by_signal) return false;  // already stopping at this epoch's end
  const Poll::Result r = poll_->after_step(meta_.step, epoch_end, *watch_);
  if (r.diverged) throw std::runtime_error(divergence_message(epoch));
  summary_.stopped_by_signal = r.signal;
  return r.signal != 0;
}

std::string Trainer::divergence_message(int64_t epoch) const {
  std::ostringstream m;
  m << "training diverged: the loss became NaN or infinite in epoch " << epoch + 1 << " by optimizer step "
    << meta_.step << " (lr " << std::setprecision(3) << lr_ << "); nothing was saved since ";
  if (meta_.epoch > 0)
    m << "epoch " << meta_.epoch << " (" << ckpt_dir_ << "/last.pt is the last good checkpoint)";
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
  {  // every rank's generator state, so random ops continue where they were
    at::Generator gen = at::globalContext().defaultGenerator(options_.device);
    torch::Tensor state;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      state = gen.get_state();
    }
    meta_.rng_states = collectives_.all_gather_cat(state.unsqueeze(0)).cpu();
    meta_.rng_device = c10::DeviceTypeName(options_.device.type(), /*lower_case=*/true);
  }
  sync_buffers();
  if (collectives_.is_main()) save({ckpt_dir_ + "/last.pt"});
  meta_.rng_states = torch::Tensor();
  meta_.rng_device.clear();
  collectives_.barrier();
  log_.warn("stopped at epoch " + std::to_string(epoch + 1) + " batch " + std::to_string(batches_done) + "/" +
            std::to_string(epoch_batches) + "; saved " + ckpt_dir_ +
            "/last.pt (run the same command again to continue)");
}

bool Trainer::early_stop_due() const {
  const int patience = config_.train.early_stop_patience;
  return patience > 0 && meta_.epochs_since_best >= patience;
}

bool Trainer::finish_epoch(int64_t epoch, const EpochTotals& totals, Clock::time_point start) {
  if (options_.before_validation) options_.before_validation(epoch);
  EpochRecord r;
  const int64_t val_skipped = validate(r);
  r.epoch = epoch + 1, r.epochs = config_.train.epochs;
  r.train_loss = totals.loss_sum / std::max(1.0, totals.images);
  r.has_aux = static_cast<bool>(aux_head_);
  r.train_aux_loss = totals.aux_loss_sum / std::max(1.0, totals.aux_images);
  r.images_per_sec = totals.images / std::max(totals.seconds, 1e-9);
  r.label_names = index_.label_names;
  r.epoch_seconds = seconds_since(start);
  const double metric = r.has_ema ? r.ema_auc.mean : r.auc.mean;  // what best.pt is chosen on
  r.improved = !std::isnan(metric) && metric > meta_.best_metric;
  if (r.improved) meta_.best_metric = metric;
  meta_.epochs_since_best = r.improved ? 0 : meta_.epochs_since_best + 1;
  // Early stopping: rank 0 decides and tells everyone, so no rank waits for the others forever.
  torch::Tensor stop_early = torch::tensor({early_stop_due() ? 1.0 : 0.0}, torch::kDouble);
  collectives_.broadcast(stop_early, 0);
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
  if (collectives_.is_main()) {
    std::vector<std::string> paths = checkpoint_paths(r.improved);
    if (const std::string top = top_->admit(meta_.epoch, metric); !top.empty()) paths.push_back(top);
    save(paths);
    top_->prune();
  }
  collectives_.barrier();
  if (stop_early.item<double>() > 0 && epoch + 1 < config_.train.epochs) {
    log_.info("early stop: no better val_auc_mean for " + std::to_string(meta_.epochs_since_best) +
              " epochs");
    summary_.early_stopped = true;
    return true;
  }
  return false;
}

int64_t Trainer::validate(EpochRecord& r) {
  sync_buffers();
  auto score = [&](Classifier& model, double* loss, AucReport* auc) {
    const InferenceResult v = run_inference(model, index_, split_.val, inference_options_, collectives_);
    *loss = torch::binary_cross_entropy_with_logits(v.logits, v.labels).item<double>();
    *auc = multilabel_auc(v.logits, v.labels, index_.label_names);
    return v;
  };
  const InferenceResult val = score(*model_, &r.val_loss, &r.auc);
  r.val_images = val.rows.size(0);
  if (ema_) {
    score(*ema_model_, &r.ema_val_loss, &r.ema_auc);
    r.has_ema = true;
  }
  return val.skipped;
}

std::vector<std::string> Trainer::checkpoint_paths(bool improved) const {
  std::vector<std::string> paths = {ckpt_dir_ + "/last.pt"};
  if (improved) paths.push_back(ckpt_dir_ + "/best.pt");
  if (config_.output.keep_every > 0 && meta_.epoch % config_.output.keep_every == 0) {
    paths.push_back(epoch_checkpoint_path(ckpt_dir_, "epoch_", meta_.epoch));
  }
  return paths;
}

// Serialized once, written to as many files as needed (last, best, epoch_NNN).
void Trainer::save(const std::vector<std::string>& paths) {
  if (const LossScaler* scaler = step_->loss_scaler()) {
    meta_.loss_scale = scaler->scale_value();
    meta_.loss_scale_growth = scaler->growth_tracker();
  }
  const std::string bytes = serialize_checkpoint(meta_, *model_, optimizer_.get(), ema_model_.get(),
                                                 aux_head_ ? aux_head_.get() : nullptr);
  for (const auto& path : paths) write_file_atomic(path, bytes);
}

// BatchNorm statistics agree on every rank before evaluation and checkpoints (the EMA's: rank 0's, as
// each rank averages its own).
void Trainer::sync_buffers() {
  if (config_.distributed.bn_sync == "broadcast")
    ddp_->before_forward();
  else
    ddp_->average_buffers();
  if (ema_ && collectives_.world_size() > 1) broadcast_coalesced(collectives_, ema_model_->buffers(), 0);
}

TrainSummary train(Config config, Collectives& collectives, RunLog& log, const TrainOptions& options) {
  return Trainer(std::move(config), collectives, log, options).fit();
}

}  // namespace ranzcr
