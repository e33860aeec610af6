// Self-describing checkpoints: format version, resolved config, label names, epoch/step, best metric,
// model parameters and buffers, optimizer state, and what training features keep (modules and plain
// values). Written atomically (temporary file, fsync, rename).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/types.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/durable_file.h"

namespace ranzcr {

// 2: ResNet and EfficientNet parameters carry timm's names (version 1 held torchvision-style names).
constexpr int64_t kCheckpointFormatVersion = 2;

struct CheckpointMeta {
  int64_t format_version = kCheckpointFormatVersion;
  int64_t epoch = 0;        // completed epochs
  int64_t step = 0;         // optimizer steps taken (drives the LR schedule)
  double best_metric = -1;  // best validation mean AUC so far (-1 = none)
  std::string config_yaml;  // resolved config of the run
  std::string model_name;
  std::vector<std::string> label_names;
  int64_t world_size = 1;          // processes of the run that wrote it
  int64_t epoch_batches_done = 0;  // batches of epoch `epoch` done (per rank) when stopped mid-epoch
  int64_t batch_size = 0;          // per process
  double loss_scale = 0.0;         // fp16 loss scaler's scale (0 = no scaler)
  int64_t loss_scale_growth = 0;   // fp16 loss scaler's clean steps since its last change
  // Epochs without a better best_metric: early stopping's count (early_stop_feature.cpp), kept here for
  // readers of the meta alone (checkpoints written before feature values hold it only here).
  int64_t epochs_since_best = 0;
  double epoch_metric = -1;  // the validation metric of the epoch that wrote it (-1 = mid-epoch)
  /// Mid-epoch saves: every rank's random generator state (uint8 [world_size, state bytes]), so that
  /// dropout and other random ops continue exactly where they were. Undefined at epoch ends.
  torch::Tensor rng_states;
  /// The device type whose generator those states are ("cpu", "cuda"): a state fits only a generator of
  /// its type. "" in checkpoints written before it was recorded.
  std::string rng_device;
  /// The run each experiment tracker logs to, by the tracker's name (tracking/tracker.h), continued on
  /// resume. Checkpoints written before the map kept a tracker's id as the key <name>_run_id: read into it.
  std::map<std::string, std::string> tracker_run_ids;
};

/// Modules saved beside the model, each as a sub-archive of its name: the EMA weights ("ema", which
/// inference prefers), the training-only auxiliary head ("aux_head"). Inference reads the model alone.
using CheckpointParts = std::vector<std::pair<std::string, torch::nn::Module*>>;

/// A plain value saved beside the modules: a count or a number.
using CheckpointValue = std::variant<int64_t, double>;
/// Plain values by name, saved in the sub-archive "values": what training features keep beside their
/// modules (early stopping's count). A name is the feature's and the value's joined by '_'
/// ("early_stop_epochs_since_best"): lower-case letters, digits and '_', a letter first, one '_' at least
/// (so that no name is a TorchScript keyword or a module's own attribute). Readers that know no values
/// ignore them.
using CheckpointValues = std::map<std::string, CheckpointValue>;

/// The checkpoint file's bytes: meta, model, optimizer (may be null), `parts` and `values` (a value's name
/// not of the form above is a programming error: c10::Error).
std::string serialize_checkpoint(const CheckpointMeta& meta, torch::nn::Module& model,
                                 torch::optim::Optimizer* optimizer, const CheckpointParts& parts = {},
                                 const CheckpointValues& values = {});

/// Writes model, optimizer (may be null) and meta to `path` atomically.
void save_checkpoint(const std::string& path, const CheckpointMeta& meta, torch::nn::Module& model,
                     torch::optim::Optimizer* optimizer);

/// Reads a checkpoint file once: its meta is available before any weights are restored, so callers can
/// check it (model name, labels) or build the model it needs. Throws std::runtime_error naming the file
/// when it is missing, not a ranzcr checkpoint, or of an unsupported format version.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path, const torch::Device& device = torch::kCPU);
  const CheckpointMeta& meta() const { return meta_; }
  const std::string& path() const { return path_; }
  /// Restores model (and optimizer when non-null) state; tensors land on the reader's device.
  void restore(torch::nn::Module& model, torch::optim::Optimizer* optimizer);
  /// Restores the optimizer's state alone (after the model's, and those of modules trained beside it).
  void restore_optimizer(torch::optim::Optimizer& optimizer);
  /// Whether the checkpoint holds the part `name` (see CheckpointParts).
  bool has_part(const std::string& name);
  /// Restores part `name` into `module`; `what` names it in errors ("EMA weights").
  void restore_part(const std::string& name, const std::string& what, torch::nn::Module& module);
  /// Whether the checkpoint holds EMA weights (train.ema_decay > 0), which inference prefers.
  bool has_ema() { return has_part("ema"); }
  /// Restores the EMA weights into `module` (a model of the checkpoint's architecture).
  void restore_ema(torch::nn::Module& module) { restore_part("ema", "EMA weights", module); }
  /// The plain value `name` (see CheckpointValues); nullopt when the checkpoint lacks it (one written
  /// before it was saved). Throws std::runtime_error naming the file when it holds another type.
  std::optional<int64_t> int_value(const std::string& name);
  std::optional<double> double_value(const std::string& name);

 private:
  template <typename Load>
  void load_or_explain(Load&& load);
  template <typename T>
  std::optional<T> read_value(const std::string& name);

  std::string path_;
  torch::serialize::InputArchive archive_;
  CheckpointMeta meta_;
};

/// Reads only the meta of a checkpoint. Throws std::runtime_error naming the file when it is missing,
/// not a ranzcr checkpoint, or of an unsupported format version.
CheckpointMeta read_checkpoint_meta(const std::string& path);

/// Restores model (and optimizer when non-null) state from `path`, its tensors loaded onto `device`
/// (the model's device); returns its meta.
CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model,
                               torch::optim::Optimizer* optimizer, const torch::Device& device = torch::kCPU);

}  // namespace ranzcr
