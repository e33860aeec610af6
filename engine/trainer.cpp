#include "engine/trainer.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "data/batch_loader.h"
#include "data/dataset_index.h"
#include "data/sampler.h"
#include "data/split.h"
#include "distributed/ddp.h"
#include "engine/checkpoint.h"
#include "engine/inference.h"
#include "engine/metrics.h"
#include "models/registry.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace ranzcr {
namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string fmt(double v, int precision = 4) {
  std::ostringstream ss;
  ss << std::fixed << std::setprecision(precision) << v;
  return ss.str();
}

std::string fmt_duration(double s) {
  const int64_t t = static_cast<int64_t>(std::max(0.0, s));
  std::ostringstream ss;
  ss << t / 60 << ":" << std::setw(2) << std::setfill('0') << t % 60;
  return ss.str();
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o, Classifier& model) {
  if (o.name == "sgd")
    return std::make_unique<torch::optim::SGD>(
        model.parameters(),
        torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(true).weight_decay(o.weight_decay));
  return std::make_unique<torch::optim::AdamW>(model.parameters(),
                                               torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
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

}  // namespace

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
  io.device = device;
  return io;
}

Split validation_split(const Config& config, const DatasetIndex& index) {
  const DataConfig& d = config.data;
  return d.folds > 0 ? group_kfold(index.groups, d.folds, d.fold, config.seed)
                     : group_split(index.groups, d.val_fraction, config.seed);
}

double scheduled_lr(int64_t step, int64_t total_steps, int64_t warmup_steps, double lr, double min_ratio) {
  if (step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  const double span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  const double floor = lr * min_ratio;
  return floor + 0.5 * (lr - floor) * (1.0 + std::cos(M_PI * progress));
}

TrainSummary train(Config config, Collectives& collectives, RunLog& log, const TrainOptions& options) {
  const bool main = collectives.is_main();
  const auto& dc = config.data;
  DatasetIndex index = load_train_index(dc, index_options(dc));
  config.data.label_columns = index.label_names;  // resolved: written to config.yaml and the checkpoint
  const Split split = validation_split(config, index);
  const int64_t num_classes = static_cast<int64_t>(index.num_labels());

  const fs::path out_dir(config.output.dir);
  const std::string config_yaml = config_to_yaml(config);
  if (main) {
    fs::create_directories(out_dir / "checkpoints");
    write_file_atomic((out_dir / "config.yaml").string(), config_yaml);
    log.open_file((out_dir / "log.txt").string());
  }
  log.info("data: " + std::to_string(index.size()) + " images, " + std::to_string(num_classes) +
           " labels; train " + std::to_string(split.train.size()) + ", validation " +
           std::to_string(split.val.size()) + " (grouped by " +
           (dc.group_column.empty() ? std::string("row") : dc.group_column) + ")");

  torch::manual_seed(config.seed);
  ModelSpec spec;
  spec.in_channels = config.model.in_channels;
  spec.num_classes = static_cast<int>(num_classes);
  spec.dropout = config.model.dropout;
  std::shared_ptr<Classifier> model = create_model(config.model.name, spec);
  model->to(options.device);
  auto optimizer = make_optimizer(config.optim, *model);
  log.info("model: " + config.model.name + ", " + std::to_string(count_parameters(*model)) + " parameters, " +
           "device " + options.device.str() + ", world size " + std::to_string(collectives.world_size()));

  CheckpointMeta meta;
  meta.config_yaml = config_yaml;
  meta.model_name = config.model.name;
  meta.label_names = index.label_names;
  meta.world_size = collectives.world_size();
  meta.batch_size = config.train.batch_size;
  int64_t skip_batches = 0;  // of the first epoch, when resuming a run stopped mid-epoch
  if (!options.resume_path.empty()) {
    collectives.barrier();  // the file is complete before anyone reads it
    CheckpointReader reader(options.resume_path, options.device);  // one read: check, then restore
    const CheckpointMeta& saved = reader.meta();
    if (saved.model_name != config.model.name)
      throw std::runtime_error("--resume " + options.resume_path + ": checkpoint holds model '" +
                               saved.model_name + "' but the config says '" + config.model.name + "'");
    if (saved.label_names != index.label_names)
      throw std::runtime_error("--resume " + options.resume_path +
                               ": the checkpoint's label columns differ from the data's");
    reader.restore(*model, optimizer.get());
    const CheckpointMeta& loaded = saved;
    meta.epoch = loaded.epoch;
    meta.step = loaded.step;
    meta.best_metric = loaded.best_metric;
    if (loaded.world_size != collectives.world_size())
      log.warn("resuming a checkpoint written by " + std::to_string(loaded.world_size) + " processes with " +
               std::to_string(collectives.world_size()) +
               ": the data order of later epochs differs from the original run");
    if (loaded.epoch_batches_done > 0) {
      if (loaded.world_size == collectives.world_size() && loaded.batch_size == config.train.batch_size) {
        skip_batches = loaded.epoch_batches_done;
      } else {
        log.warn("the checkpoint was saved mid-epoch by a run of another shape; epoch " +
                 std::to_string(loaded.epoch + 1) + " restarts from its beginning");
      }
    }
    if (main) truncate_metrics((out_dir / "metrics.jsonl").string(), meta.epoch);
    log.info("resumed from " + options.resume_path + " at epoch " + std::to_string(meta.epoch) + ", step " +
             std::to_string(meta.step) + (skip_batches ? ", batch " + std::to_string(skip_batches) : ""));
  }
  DdpOptions ddp_options;
  ddp_options.bucket_bytes = static_cast<int64_t>(config.distributed.bucket_mb * 1024 * 1024);
  ddp_options.broadcast_buffers = config.distributed.bn_sync == "broadcast";
  DistributedDataParallel ddp(*model, collectives, ddp_options);
  // BatchNorm statistics agree on every rank before evaluation and checkpoints.
  auto sync_buffers = [&] {
    if (ddp_options.broadcast_buffers)
      ddp.before_forward();
    else
      ddp.average_buffers();
  };
  // Serialized once, written to as many files as needed (last, best, epoch_NNN).
  auto save = [&](const std::vector<std::string>& paths) {
    const std::string bytes = serialize_checkpoint(meta, *model, optimizer.get());
    for (const auto& path : paths) write_file_atomic(path, bytes);
  };
  const std::string ckpt_dir = (out_dir / "checkpoints").string();

  SamplerOptions so;
  so.rank = collectives.rank();
  so.world_size = collectives.world_size();
  so.seed = static_cast<uint64_t>(config.seed);
  so.drop_last = split.train.size() >= static_cast<size_t>(config.train.batch_size * so.world_size);
  DistributedSampler sampler(static_cast<int64_t>(split.train.size()), so);

  LoaderOptions lo;
  lo.batch_size = config.train.batch_size;
  lo.num_workers = dc.num_workers;
  lo.prefetch_batches = dc.prefetch_batches;
  lo.skip_bad_images = dc.skip_bad_images;
  lo.drop_last = so.drop_last;
  lo.pin_memory = options.device.is_cuda();
  TransformOptions to;
  to.image_size = dc.image_size;
  to.train = true;
  to.augment = dc.augment;
  to.seed = static_cast<uint64_t>(config.seed);

  const int64_t per_rank = sampler.num_samples();
  const int64_t batches =
      lo.drop_last ? per_rank / lo.batch_size : (per_rank + lo.batch_size - 1) / lo.batch_size;
  const int accum = config.train.accum_steps;
  const int64_t steps_per_epoch = (batches + accum - 1) / accum;
  const int64_t total_steps = steps_per_epoch * config.train.epochs;
  const int64_t warmup_steps =
      static_cast<int64_t>(std::llround(config.optim.warmup_epochs * steps_per_epoch));

  const InferenceOptions io = inference_options(config, options.device);

  TrainSummary summary;
  int64_t epochs_since_best = 0;
  summary.best_auc = meta.best_metric;
  double lr = config.optim.lr;
  for (int64_t epoch = meta.epoch; epoch < config.train.epochs; ++epoch) {
    const auto epoch_start = Clock::now();
    torch::manual_seed(static_cast<uint64_t>(config.seed) * 1000003ULL + static_cast<uint64_t>(epoch));
    sampler.set_epoch(epoch);
    std::vector<int64_t> rows;
    for (int64_t p : sampler.indices()) rows.push_back(split.train[p]);
    const int64_t skipped_batches = skip_batches;
    if (skip_batches > 0) {  // resuming mid-epoch: the same order, minus what was done
      rows.erase(rows.begin(), rows.begin() + std::min<int64_t>(rows.size(), skip_batches * lo.batch_size));
      skip_batches = 0;
    }
    BatchLoader loader(index, rows, ImageTransform(to), epoch, lo);
    model->train();
    optimizer->zero_grad();
    // Loss sums stay on the device (float64): reading them forces a sync, so only progress lines do.
    const auto sum_options = torch::TensorOptions().dtype(torch::kDouble).device(options.device);
    torch::Tensor loss_sum = torch::zeros({}, sum_options), window_loss = torch::zeros({}, sum_options);
    double seen = 0.0, window_n = 0.0;
    int64_t skipped = 0, batch_i = 0;
    const int64_t epoch_batches = loader.num_batches() + skipped_batches;
    auto last_print = Clock::now();
    while (auto batch = loader.next()) {
      skipped += batch->skipped;
      const int64_t n = batch->images.size(0);
      const bool sync_step = (batch_i + 1) % accum == 0 || batch_i + 1 == loader.num_batches();
      ddp.set_require_sync(sync_step);
      if (n > 0) {
        ddp.before_forward();
        const torch::Tensor x = model_input(batch->images, config.model.in_channels, options.device);
        const torch::Tensor y = batch->labels.to(options.device, true);
        const torch::Tensor loss = torch::binary_cross_entropy_with_logits(model->forward(x), y);
        const torch::Tensor scaled = loss / accum;
        if (sync_step) ddp.prepare_backward(scaled);
        scaled.backward();
        const torch::Tensor weighted = loss.detach().to(torch::kDouble) * static_cast<double>(n);
        loss_sum += weighted, window_loss += weighted;
        seen += n, window_n += n;
      }
      ++batch_i;
      if (sync_step) {
        ddp.finish_gradient_sync();
        if (config.optim.grad_clip > 0)
          torch::nn::utils::clip_grad_norm_(model->parameters(), config.optim.grad_clip);
        lr = scheduled_lr(meta.step, total_steps, warmup_steps, config.optim.lr, config.optim.min_lr_ratio);
        for (auto& group : optimizer->param_groups()) group.options().set_lr(lr);
        optimizer->step();
        optimizer->zero_grad();
        ++meta.step;
        // A stop request (SIGTERM/SIGINT) on any rank stops every rank at this same step.
        const int local_stop = options.stop_signal ? options.stop_signal->load() : 0;
        torch::Tensor stop = torch::tensor({static_cast<double>(local_stop)}, torch::kDouble);
        if (collectives.world_size() > 1) collectives.all_reduce_sum(stop);
        if (stop.item<double>() > 0 && !summary.stopped_by_signal) {
          summary.stopped_by_signal = local_stop > 0 ? local_stop : SIGTERM;
          if (batch_i < loader.num_batches()) {  // mid-epoch: save where we are (else finish the epoch)
            meta.epoch_batches_done = skipped_batches + batch_i;
            sync_buffers();
            if (main) save({ckpt_dir + "/last.pt"});
            collectives.barrier();
            log.warn("stopped at epoch " + std::to_string(epoch + 1) + " batch " +
                     std::to_string(meta.epoch_batches_done) + "/" + std::to_string(epoch_batches) +
                     "; saved " + ckpt_dir + "/last.pt (resume with --resume)");
            return summary;
          }
        }
      }
      if (seconds_since(last_print) >= config.train.log_every_seconds || batch_i == loader.num_batches()) {
        const double elapsed = seconds_since(epoch_start);
        const double ips = seen * collectives.world_size() / std::max(elapsed, 1e-9);
        const double eta = elapsed / batch_i * (loader.num_batches() - batch_i);
        log.info("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(config.train.epochs) + " step " +
                 std::to_string(skipped_batches + batch_i) + "/" + std::to_string(epoch_batches) + " loss " +
                 fmt(window_n > 0 ? window_loss.item<double>() / window_n : 0.0) + " lr " + fmt(lr, 6) + " " +
                 fmt(ips, 1) + " img/s eta " + fmt_duration(eta));
        window_loss.zero_();
        window_n = 0.0;
        last_print = Clock::now();
      }
    }
    const double train_seconds = seconds_since(epoch_start);
    torch::Tensor stats =
        torch::tensor({loss_sum.item<double>(), seen, static_cast<double>(skipped)}, torch::kDouble);
    collectives.all_reduce_sum(stats);
    const double train_loss = stats[0].item<double>() / std::max(1.0, stats[1].item<double>());
    const double images_per_sec = stats[1].item<double>() / std::max(train_seconds, 1e-9);

    sync_buffers();
    const InferenceResult val = run_inference(*model, index, split.val, io, collectives);
    const double val_loss = torch::binary_cross_entropy_with_logits(val.logits, val.labels).item<double>();
    const AucReport auc = multilabel_auc(val.logits, val.labels, index.label_names);
    for (const auto& name : auc.undefined)
      log.warn("validation column '" + name + "' has a single class: AUC undefined, left out of the mean");
    const double epoch_seconds = seconds_since(epoch_start);
    const bool improved = !std::isnan(auc.mean) && auc.mean > meta.best_metric;
    if (improved) meta.best_metric = auc.mean;
    epochs_since_best = improved ? 0 : epochs_since_best + 1;
    // Early stopping: rank 0 decides and tells everyone, so no rank waits for the others forever.
    torch::Tensor stop_early = torch::tensor(
        {config.train.early_stop_patience > 0 && epochs_since_best >= config.train.early_stop_patience ? 1.0
                                                                                                       : 0.0},
        torch::kDouble);
    collectives.broadcast(stop_early, 0);
    meta.epoch = epoch + 1;
    meta.epoch_batches_done = 0;
    summary.last_auc = auc.mean;
    summary.best_auc = meta.best_metric;
    summary.epochs = meta.epoch;

    if (main) {
      nlohmann::json j;
      j["epoch"] = epoch + 1;
      j["step"] = meta.step;
      j["train_loss"] = train_loss;
      j["val_loss"] = val_loss;
      j["val_auc_mean"] = std::isnan(auc.mean) ? nlohmann::json() : nlohmann::json(auc.mean);
      nlohmann::json per_class = nlohmann::json::object();
      for (size_t k = 0; k < auc.per_class.size(); ++k)
        per_class[index.label_names[k]] =
            auc.per_class[k] ? nlohmann::json(*auc.per_class[k]) : nlohmann::json();
      j["val_auc"] = per_class;
      j["lr"] = lr;
      j["images_per_sec"] = images_per_sec;
      j["epoch_seconds"] = epoch_seconds;
      j["train_images"] = stats[1].item<int64_t>();
      j["val_images"] = val.rows.size(0);
      j["skipped_images"] = stats[2].item<int64_t>() + val.skipped;
      std::ofstream((out_dir / "metrics.jsonl").string(), std::ios::app) << j.dump() << "\n";
      std::vector<std::string> paths = {ckpt_dir + "/last.pt"};
      if (improved) paths.push_back(ckpt_dir + "/best.pt");
      if (config.output.keep_every > 0 && meta.epoch % config.output.keep_every == 0) {
        std::ostringstream name;
        name << ckpt_dir << "/epoch_" << std::setw(3) << std::setfill('0') << meta.epoch << ".pt";
        paths.push_back(name.str());
      }
      save(paths);
    }
    collectives.barrier();
    log.info("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(config.train.epochs) +
             " train_loss " + fmt(train_loss) + " val_loss " + fmt(val_loss) + " val_auc " + fmt(auc.mean) +
             (improved ? " (best)" : "") + " " + fmt(images_per_sec, 1) + " img/s " + fmt(epoch_seconds, 1) +
             " s");
    if (stats[2].item<int64_t>() + val.skipped > 0)
      log.warn(std::to_string(stats[2].item<int64_t>() + val.skipped) +
               " unreadable images skipped this epoch");
    if (stop_early.item<double>() > 0 && epoch + 1 < config.train.epochs) {
      log.info("early stop: no better val_auc_mean for " + std::to_string(epochs_since_best) + " epochs");
      summary.early_stopped = true;
      break;
    }
    if (summary.stopped_by_signal) {
      log.warn("stopped after epoch " + std::to_string(epoch + 1) + "; saved " + ckpt_dir +
               "/last.pt (resume with --resume)");
      return summary;
    }
  }
  return summary;
}

}  // namespace ranzcr
