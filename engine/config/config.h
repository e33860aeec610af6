// Typed configuration, filled once from YAML at the edge (apps/), then passed by value to the libraries.
// Every field has a default; configs/quickstart.yaml and configs/ranzcr.yaml document each key.
#pragma once

#include "core/check.h"
#include "data/data_config.h"
#include "distributed/init_method.h"
#include "hub/weights_source.h"
#include "tracking/tracker_keys.h"

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace YAML {
class Node;
}

namespace ranzcr {

// Settings with a fixed set of values are enums, each with one line of YAML names (kSettingNames):
// parsed once when the config is read, the error naming the key, the valid values and what was given;
// written back under the same names.
enum class OptimizerName { kAdamW, kSgd };
enum class OnOffAuto { kAuto, kTrue, kFalse };  // auto: on for CUDA devices, off on CPUs
enum class PrecisionSetting { kAuto, kFp32, kBf16, kFp16 };
enum class ResumeSetting { kAuto, kNever };
enum class BackendSetting { kAuto, kGloo, kNccl };
enum class BnSync { kBroadcast, kAverage, kSync };
enum class InferBackendSetting { kAuto, kLibTorch, kOpenVino };
enum class InferPrecisionSetting { kAuto, kFp32, kBf16 };

/// The YAML names of E's values, '|'-separated in declaration order.
template <class E>
inline constexpr const char* kSettingNames = nullptr;
// clang-format off
template <> inline constexpr const char* kSettingNames<OptimizerName> = "adamw|sgd";
template <> inline constexpr const char* kSettingNames<OnOffAuto> = "auto|true|false";
template <> inline constexpr const char* kSettingNames<PrecisionSetting> = "auto|fp32|bf16|fp16";
template <> inline constexpr const char* kSettingNames<InferBackendSetting> = "auto|libtorch|openvino";
template <> inline constexpr const char* kSettingNames<InferPrecisionSetting> = "auto|fp32|bf16";
template <> inline constexpr const char* kSettingNames<ResumeSetting> = "auto|never";
template <> inline constexpr const char* kSettingNames<BackendSetting> = "auto|gloo|nccl";
template <> inline constexpr const char* kSettingNames<BnSync> = "broadcast|average|sync";
template <> inline constexpr const char* kSettingNames<DicomWindow> = "file|minmax|percentile";
template <> inline constexpr const char* kSettingNames<SynthFormat> = "jpg|dcm";
// clang-format on

namespace detail {
std::vector<std::string> split_names(const char* names);  // "a|b" -> {"a", "b"}
}  // namespace detail

/// The YAML names of E's values, indexed by value.
template <class E>
const std::vector<std::string>& setting_names() {
  static_assert(kSettingNames<E> != nullptr, "a setting enum needs its kSettingNames line");
  static const std::vector<std::string> names = detail::split_names(kSettingNames<E>);
  return names;
}

/// The YAML name of `value`.
template <class E>
const std::string& setting_name(E value) {
  return setting_names<E>().at(static_cast<size_t>(value));
}

/// "a, b or c": the valid names of E, for messages.
template <class E>
std::string setting_choices() {
  const auto& names = setting_names<E>();
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

/// The value of E named `text`. Throws std::runtime_error "<key> must be a, b or c, got '<text>'".
template <class E>
E parse_setting(const std::string& key, const std::string& text) {
  const auto& names = setting_names<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  RANZCR_FAIL(key, " must be ", setting_choices<E>(), ", got '", text, "'");
}

/// train.device: auto (this rank's GPU when one is visible, else the CPU) | cpu | cuda (this rank's GPU) |
/// cuda:N. Parsed once, by parse_device_setting, when the config is read; engine/runtime/placement.h
/// turns it into this process's device.
struct DeviceSetting {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int index = -1;  // N of cuda:N; -1 otherwise
  bool operator==(const DeviceSetting& o) const { return kind == o.kind && index == o.index; }
};
/// The one parser of train.device. Throws std::runtime_error "train.device must be auto, cpu, cuda or
/// cuda:N (...), got '<text>'".
DeviceSetting parse_device_setting(const std::string& text);
/// "auto", "cpu", "cuda" or "cuda:N".
std::string setting_text(const DeviceSetting& device);

/// distributed.nproc_per_node: a count of worker processes on this node, or auto (one per visible GPU).
struct ProcessCount {
  bool automatic = false;
  int count = 1;  // when not automatic: 1 or more
  bool operator==(const ProcessCount& o) const { return automatic == o.automatic && count == o.count; }
};
/// The one parser of distributed.nproc_per_node: "auto" or a positive integer (at most 9999).
ProcessCount parse_process_count(const std::string& text);
/// "auto" or the count.
std::string setting_text(const ProcessCount& count);

/// Settings written as one YAML scalar with their own parser (the field table reads and writes them).
template <class T>
struct TextSetting : std::false_type {};
template <>
struct TextSetting<DeviceSetting> : std::true_type {
  static DeviceSetting parse(const std::string& text) { return parse_device_setting(text); }
};
template <>
struct TextSetting<ProcessCount> : std::true_type {
  static ProcessCount parse(const std::string& text) { return parse_process_count(text); }
};
template <>
struct TextSetting<InitMethod> : std::true_type {
  static InitMethod parse(const std::string& text) { return parse_init_method(text); }
};
template <>
struct TextSetting<hub::PretrainedSource> : std::true_type {
  static hub::PretrainedSource parse(const std::string& text) { return hub::parse_pretrained_source(text); }
};

struct ModelConfig {
  std::string name = "resnet18";     // registry name (see `ranzcr models`)
  int in_channels = 1;               // 1 = grayscale input
  double dropout = 0.0;              // dropout before the classifier
  hub::PretrainedSource pretrained;  // start from: a weights file, timm, hf-hub:ORG/REPO[@REV] ("" = scratch)
  std::vector<double> input_mean{
      0.0};  // per channel (or one for all): input = (pixel in [0, 1] - mean) / std
  std::vector<double> input_std{
      1.0};                     // ImageNet weights: mean [0.485, 0.456, 0.406], std [0.229, 0.224, 0.225]
  double aux_seg_weight = 0.0;  // training only: weight of the device-mask segmentation loss (0 = off)
};

struct OptimConfig {
  OptimizerName name = OptimizerName::kAdamW;  // adamw | sgd
  double lr = 1e-3;                            // peak learning rate (after warmup)
  double weight_decay = 1e-4;                  // decoupled (adamw) or L2 (sgd)
  double momentum = 0.9;                       // sgd only (Nesterov)
  double warmup_epochs = 0.5;                  // linear warmup length, epochs (fractional allowed)
  double min_lr_ratio = 0.01;                  // cosine floor as a fraction of lr
  double grad_clip = 0.0;                      // max global gradient norm (0 = off)
  OnOffAuto fused =
      OnOffAuto::kAuto;  // auto | true | false: PyTorch's fused AdamW/SGD kernels (auto: on CUDA)
};

struct TrainConfig {
  int epochs = 10;                 // training epochs
  int batch_size = 32;             // per process
  int accum_steps = 1;             // micro-batches per optimizer step
  int eval_batch_size = 64;        // per process, validation/predict
  double log_every_seconds = 5.0;  // progress line period
  int num_threads = 0;             // LibTorch intra-op threads (0 = all cores)
  bool tta_hflip = false;          // validation/evaluate/predict: average with the hflipped image
  int early_stop_patience = 0;     // stop after this many epochs without a better val AUC (0 = off)
  PrecisionSetting precision =
      PrecisionSetting::kAuto;  // auto | fp32 | bf16 | fp16 (auto: bf16 on GPUs with it, else fp32)
  OnOffAuto channels_last = OnOffAuto::kAuto;   // auto | true | false: NHWC conv layout (auto: on for CUDA)
  ResumeSetting resume = ResumeSetting::kAuto;  // auto: continue output.dir's last checkpoint | never
  double ema_decay = 0.0;                       // EMA of the weights (timm ModelEmaV3 with warm-up); 0 = off
  DeviceSetting device;                         // auto | cpu | cuda | cuda:N
};

struct DistributedConfig {
  ProcessCount nproc_per_node;                     // worker processes on this node: N or auto
  BackendSetting backend = BackendSetting::kAuto;  // auto | gloo | nccl
  InitMethod init_method;               // env:// (MASTER_ADDR/PORT) | tcp://host:port | file:///path
  double timeout_seconds = 300.0;       // rendezvous and collective timeout
  double bucket_mb = 25.0;              // gradient all-reduce bucket size, MiB
  BnSync bn_sync = BnSync::kBroadcast;  // BatchNorm: per-rank statistics, buffers broadcast (from
                                        // rank 0) | average; or sync (statistics over all ranks)
  double grace_seconds = 120.0;         // launcher: SIGTERM to SIGKILL when stopping workers
};

/// output.*: the run folder and what is kept in it, and the trackers' keys (tracking/tracker_keys.h).
struct OutputConfig : tracking::TrackerKeys {
  std::string dir = "runs/default";  // run folder
  int keep_every = 0;   // also keep a numbered checkpoint (run_folder.h) every N epochs (0 = off)
  int keep_best_k = 0;  // also keep the k best epochs as numbered checkpoints (run_folder.h) (0 = off)
};

/// How predict, evaluate, serve and cv's out-of-fold pass run a trained model (training's validation always
/// runs LibTorch, on the model being trained).
struct InferConfig {
  InferBackendSetting backend =
      InferBackendSetting::kAuto;  // auto | libtorch | openvino (auto: predict and serve
                                   // OpenVINO on a CPU where the build has it; LibTorch
                                   // on CUDA, and for evaluate and cv: the logged AUC)
  InferPrecisionSetting precision =
      InferPrecisionSetting::kAuto;  // auto | fp32 | bf16 (OpenVINO's; auto: fp32
                                     // for evaluate and cv, the CPU's own for
                                     // predict and serve; LibTorch: train.precision)
};

struct Config {
  int seed = 42;  // seeds model init, split, sampler and augmentation
  DataConfig data;
  SynthConfig synth;
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
  DistributedConfig distributed;
  OutputConfig output;
  InferConfig infer;
  std::set<std::string> explicit_keys;  // not a config key: the keys the file or --set gave a value
};

/// Reads a YAML config file, applies `--set key=value` overrides (value parsed as YAML), validates
/// every key and type, and returns the typed config. Throws std::runtime_error naming the key and the
/// file line for unknown keys and wrong types.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// Same, from YAML text; `origin` names the source in error messages.
Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});

/// The resolved config as YAML text (every key, nested like the input).
std::string config_to_yaml(const Config& config);

/// Every valid dotted key, in declaration order.
std::vector<std::string> config_keys();

/// Semantic checks that span several fields (positive sizes, known optimizer, ...).
void validate_config(const Config& config);

}  // namespace ranzcr
