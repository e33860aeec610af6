#include "engine/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/check.h"
#include "core/digits.h"
#include "core/printable.h"
#include "data/image_pipeline.h"

namespace ranzcr {

std::vector<std::string> detail::split_names(const char* names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  for (std::string name; std::getline(ss, name, '|');) out.push_back(name);
  return out;
}

namespace {

// Calls `v(key, field)` for every data.* field (visit_fields' first part).
template <class Visitor>
void visit_data_fields(DataConfig& d, Visitor&& v) {
  v("data.root", d.root);
  v("data.train_csv", d.train_csv);
  v("data.image_dir", d.image_dir);
  v("data.image_ext", d.image_ext);
  v("data.id_column", d.id_column);
  v("data.group_column", d.group_column);
  v("data.label_columns", d.label_columns);
  v("data.image_size", d.image_size);
  v("data.cache", d.cache);
  v("data.cache_size", d.cache_size);
  v("data.val_fraction", d.val_fraction);
  v("data.folds", d.folds);
  v("data.fold", d.fold);
  v("data.num_workers", d.num_workers);
  v("data.prefetch_batches", d.prefetch_batches);
  v("data.skip_bad_images", d.skip_bad_images);
  v("data.annotations_csv", d.annotations_csv);
  v("data.skip_bad_annotations", d.skip_bad_annotations);
  auto& a = d.augment;
  v("data.augment.hflip", a.hflip);
  v("data.augment.rotate_deg", a.rotate_deg);
  v("data.augment.shift", a.shift);
  v("data.augment.scale", a.scale);
  v("data.augment.brightness", a.brightness);
  v("data.augment.contrast", a.contrast);
  v("data.augment.clahe", a.clahe);
  v("data.dicom.window", d.dicom.window);
  v("data.dicom.timeout_seconds", d.dicom.timeout_seconds);
  v("data.dicom.memory_limit_mb", d.dicom.memory_limit_mb);
}

// Calls `v(key, field)` for every config field. One table drives parsing, key listing and emission.
template <class Visitor>
void visit_fields(Config& c, Visitor&& v) {
  v("seed", c.seed);
  visit_data_fields(c.data, v);
  auto& s = c.synth;
  v("synth.generate_if_missing", s.generate_if_missing);
  v("synth.root", s.root);
  v("synth.num_images", s.num_images);
  v("synth.num_test_images", s.num_test_images);
  v("synth.image_size", s.image_size);
  v("synth.seed", s.seed);
  v("synth.format", s.format);
  v("model.name", c.model.name);
  v("model.in_channels", c.model.in_channels);
  v("model.dropout", c.model.dropout);
  v("model.pretrained", c.model.pretrained);
  v("model.input_mean", c.model.input_mean);
  v("model.input_std", c.model.input_std);
  v("model.aux_seg_weight", c.model.aux_seg_weight);
  auto& o = c.optim;
  v("optim.name", o.name);
  v("optim.lr", o.lr);
  v("optim.weight_decay", o.weight_decay);
  v("optim.momentum", o.momentum);
  v("optim.warmup_epochs", o.warmup_epochs);
  v("optim.min_lr_ratio", o.min_lr_ratio);
  v("optim.grad_clip", o.grad_clip);
  v("optim.fused", o.fused);
  auto& t = c.train;
  v("train.epochs", t.epochs);
  v("train.batch_size", t.batch_size);
  v("train.accum_steps", t.accum_steps);
  v("train.eval_batch_size", t.eval_batch_size);
  v("train.log_every_seconds", t.log_every_seconds);
  v("train.num_threads", t.num_threads);
  v("train.tta_hflip", t.tta_hflip);
  v("train.early_stop_patience", t.early_stop_patience);
  v("train.precision", t.precision);
  v("train.channels_last", t.channels_last);
  v("train.resume", t.resume);
  v("train.ema_decay", t.ema_decay);
  v("train.device", t.device);
  v("distributed.nproc_per_node", c.distributed.nproc_per_node);
  v("distributed.backend", c.distributed.backend);
  v("distributed.init_method", c.distributed.init_method);
  v("distributed.timeout_seconds", c.distributed.timeout_seconds);
  v("distributed.bucket_mb", c.distributed.bucket_mb);
  v("distributed.bn_sync", c.distributed.bn_sync);
  v("distributed.grace_seconds", c.distributed.grace_seconds);
  v("output.dir", c.output.dir);
  v("output.keep_every", c.output.keep_every);
  v("output.keep_best_k", c.output.keep_best_k);
  tracking::visit_tracker_keys(c.output, v);
  v("infer.backend", c.infer.backend);
  v("infer.precision", c.infer.precision);
}

std::vector<std::string> split_dots(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

// A string value with a control character (a carriage return, a tab, ...) is refused: no path or name holds
// one, and the run folder's config file could not write it so that it reads back the same.
void check_printable(const std::string& key, const std::string& value, const std::string& where) {
  const auto bad = std::find_if(value.begin(), value.end(),
                                [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  if (bad == value.end()) return;
  RANZCR_FAIL("config key '", key, "' at ", where, ": holds a control character (",
              printable(std::string(1, *bad)), "), expected printable text");
}

template <class T>
std::string type_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean (true/false)";
  if constexpr (std::is_same_v<T, int>) return "an integer";
  if constexpr (std::is_same_v<T, double>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "a list of strings";
  if constexpr (std::is_same_v<T, std::vector<double>>) return "a list of numbers";
  if constexpr (std::is_enum_v<T>) return setting_choices<T>();
  if constexpr (std::is_same_v<T, DeviceSetting>) return "auto, cpu, cuda or cuda:N";
  if constexpr (std::is_same_v<T, ProcessCount>) return "a positive integer or auto";
  if constexpr (std::is_same_v<T, InitMethod>) return "env://, tcp://host:port or file:///path";
  if constexpr (std::is_same_v<T, hub::PretrainedSource>)
    return "a weights file, timm or hf-hub:ORG/REPO[@REV]";
  return "a value";
}

struct Source {
  std::string origin;                             // file name (or "<text>")
  std::map<std::string, std::string> overridden;  // key -> the --set argument that set it
  std::string where(const std::string& key, const YAML::Node& node) const {
    auto it = overridden.find(key);
    if (it != overridden.end()) return "--set " + it->second;
    return origin + ":" + std::to_string(node.Mark().line + 1);
  }
};

// Walks the user's tree and rejects keys that no field declares.
void check_unknown(const YAML::Node& node, const std::string& prefix, const std::set<std::string>& leaves,
                   const std::set<std::string>& sections, const Source& src) {
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string name = it->first.as<std::string>();
    const std::string key = prefix.empty() ? name : prefix + "." + name;
    if (leaves.count(key)) continue;
    if (sections.count(key)) {
      if (!it->second.IsMap() && !it->second.IsNull())
        RANZCR_FAIL("config key '", key, "' at ", src.where(key, it->second),
                    ": expected a section (a map of keys)");
      if (it->second.IsMap()) check_unknown(it->second, key, leaves, sections, src);
      continue;
    }
    std::string valid;
    for (const auto& l : leaves) {
      const bool same_section = l.rfind(prefix.empty() ? "" : prefix + ".", 0) == 0;
      if (same_section) valid += (valid.empty() ? "" : ", ") + l;
    }
    RANZCR_FAIL("unknown config key '", key, "' at ", src.where(key, it->first), " (valid keys",
                (prefix.empty() ? "" : " under '" + prefix + "'"), ": ", valid, ")");
  }
}

YAML::Node find(const YAML::Node& root, const std::vector<std::string>& parts) {
  std::vector<YAML::Node> chain{root};
  for (const auto& p : parts) {
    const YAML::Node& cur = chain.back();
    if (!cur.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    YAML::Node next = cur[p];
    if (!next.IsDefined()) return next;
    chain.push_back(next);
  }
  return chain.back();
}

void set_path(YAML::Node node, const std::vector<std::string>& parts, size_t i, const YAML::Node& value) {
  if (i + 1 == parts.size()) {
    node[parts[i]] = value;
    return;
  }
  const YAML::Node& cnode = node;
  if (!cnode[parts[i]].IsDefined() || !cnode[parts[i]].IsMap())
    node[parts[i]] = YAML::Node(YAML::NodeType::Map);
  set_path(node[parts[i]], parts, i + 1, value);
}

Config parse_tree(YAML::Node root, Source src, const std::vector<std::string>& overrides) {
  if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);
  RANZCR_CHECK(root.IsMap(), src.origin, ": expected a YAML map of config keys at the top");
  Config config;
  std::set<std::string> leaves, sections;
  visit_fields(config, [&](const std::string& key, auto&) {
    leaves.insert(key);
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
      sections.insert(key.substr(0, dot));
  });
  for (const auto& ov : overrides) {
    const auto eq = ov.find('=');
    RANZCR_CHECK(eq != std::string::npos && eq != 0, "--set ", ov,
                 ": expected key=value, for example --set train.epochs=3");
    const std::string key = ov.substr(0, eq);
    RANZCR_CHECK(leaves.count(key), "--set ", ov, ": unknown config key '", key,
                 "' (run `ranzcr train --help` or see configs/ for the valid keys)");
    YAML::Node value;
    try {
      value = YAML::Load(ov.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      RANZCR_FAIL("--set ", ov, ": value is not valid YAML: ", e.msg);
    }
    set_path(root, split_dots(key), 0, value);
    src.overridden[key] = ov;
  }
  check_unknown(root, "", leaves, sections, src);
  visit_fields(config, [&](const std::string& key, auto& field) {
    using T = std::decay_t<decltype(field)>;
    const YAML::Node node = find(root, split_dots(key));
    if (!node.IsDefined() || node.IsNull()) return;  // keep the default
    try {
      if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<double>>) {
        if (!node.IsSequence()) throw YAML::BadConversion(node.Mark());
      } else {
        if (!node.IsScalar()) throw YAML::BadConversion(node.Mark());
      }
      if constexpr (std::is_enum_v<T> || TextSetting<T>::value) {
        check_printable(key, node.Scalar(), src.where(key, node));
        try {
          if constexpr (std::is_enum_v<T>)
            field = parse_setting<T>(key, node.Scalar());
          else
            field = TextSetting<T>::parse(node.Scalar());
        } catch (const std::runtime_error& e) {
          RANZCR_FAIL("config: ", e.what(), " (", src.where(key, node), ")");
        }
      } else {
        field = node.as<T>();
        if constexpr (std::is_same_v<T, std::string>) check_printable(key, field, src.where(key, node));
        if constexpr (std::is_same_v<T, std::vector<std::string>>)
          for (const std::string& item : field) check_printable(key, item, src.where(key, node));
      }
      config.explicit_keys.insert(key);
    } catch (const YAML::Exception&) {
      std::string got = node.IsScalar()     ? "'" + node.Scalar() + "'"
                        : node.IsSequence() ? std::string("a list")
                                            : std::string("a map");
      RANZCR_FAIL("config key '", key, "' at ", src.where(key, node), ": expected ", type_name<T>(), ", got ",
                  got);
    }
  });
  validate_config(config);
  return config;
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    RANZCR_FAIL(origin, ":", e.mark.line + 1,
                ": invalid YAML: ", printable(e.msg, 400));  // yaml-cpp quotes the bad character
  }
  try {
    return parse_tree(root, Source{origin, {}}, overrides);
  } catch (const std::runtime_error& e) {  // its messages quote keys and values of the file: one line each
    RANZCR_FAIL(e.what());
  }
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  RANZCR_CHECK(in, "config file not found or unreadable: ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, overrides);
}

std::string config_to_yaml(const Config& config) {
  Config copy = config;
  YAML::Node root(YAML::NodeType::Map);
  visit_fields(copy, [&](const std::string& key, auto& field) {
    using T = std::decay_t<decltype(field)>;
    if constexpr (std::is_enum_v<T>)
      set_path(root, split_dots(key), 0, YAML::Node(setting_name(field)));
    else if constexpr (TextSetting<T>::value)
      set_path(root, split_dots(key), 0, YAML::Node(setting_text(field)));
    else
      set_path(root, split_dots(key), 0, YAML::Node(field));
  });
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::string> config_keys() {
  Config c;
  std::vector<std::string> keys;
  visit_fields(c, [&](const std::string& key, auto&) { keys.push_back(key); });
  return keys;
}

DeviceSetting parse_device_setting(const std::string& text) {
  DeviceSetting d;
  if (text == "auto") return d;
  if (text == "cpu" || text == "cuda") {
    d.kind = text == "cpu" ? DeviceSetting::Kind::kCpu : DeviceSetting::Kind::kCuda;
    return d;
  }
  const std::optional<int> index =
      text.rfind("cuda:", 0) == 0 ? parse_digits(std::string_view(text).substr(5), 4) : std::nullopt;
  RANZCR_CHECK(index, "train.device must be auto, cpu, cuda or cuda:N (N a GPU index, 0 or more), got '",
               text, "'");
  d.kind = DeviceSetting::Kind::kCuda;
  d.index = *index;
  return d;
}

std::string setting_text(const DeviceSetting& device) {
  switch (device.kind) {
    case DeviceSetting::Kind::kCpu:
      return "cpu";
    case DeviceSetting::Kind::kCuda:
      return device.index < 0 ? "cuda" : "cuda:" + std::to_string(device.index);
    case DeviceSetting::Kind::kAuto:
      break;
  }
  return "auto";
}

ProcessCount parse_process_count(const std::string& text) {
  ProcessCount n;
  if (text == "auto") {
    n.automatic = true;
    return n;
  }
  const std::optional<int> count = parse_digits(text, 4);
  RANZCR_CHECK(count && *count >= 1, "distributed.nproc_per_node must be a positive integer or auto, got '",
               text, "'");
  n.count = *count;
  return n;
}

std::string setting_text(const ProcessCount& count) {
  return count.automatic ? "auto" : std::to_string(count.count);
}

namespace {

// data.image_size, data.cache and data.cache_size and the augmentation's ranges: what preparing and
// augmenting an image relies on (finite ranges, a positive zoom, a prepared side a cache can hold).
void validate_image_options(const DataConfig& d) {
  auto in = [](double x, double lo, double hi) { return x >= lo && x <= hi; };  // false for NaN
  auto str = [](double x) {
    std::ostringstream o;
    o << x;
    return o.str();
  };
  const AugmentConfig& a = d.augment;
  RANZCR_CHECK(in(a.rotate_deg, 0, 360),
               "config: ", "data.augment.rotate_deg must be 0 to 360 (degrees), got " + str(a.rotate_deg));
  RANZCR_CHECK(in(a.shift, 0, 1),
               "config: ", "data.augment.shift must be 0 to 1 (of the image side), got " + str(a.shift));
  RANZCR_CHECK(in(a.scale, 0, 0.9),
               "config: ", "data.augment.scale must be 0 to 0.9 (zoom range), got " + str(a.scale));
  RANZCR_CHECK(in(a.brightness, 0, 1),
               "config: ", "data.augment.brightness must be 0 to 1, got " + str(a.brightness));
  RANZCR_CHECK(in(a.contrast, 0, 1),
               "config: ", "data.augment.contrast must be 0 to 1, got " + str(a.contrast));
  RANZCR_CHECK(d.image_size >= 16 && d.image_size <= kMaxPreparedSide,
               "config: ", "data.image_size must be 16 to 16384, got " + std::to_string(d.image_size));
  RANZCR_CHECK(!d.cache.empty(), "config: ", "data.cache must be off, on or a folder, got ''");
  RANZCR_CHECK(d.cache_size == 0 || (d.cache_size >= d.image_size && d.cache_size <= kMaxPreparedSide),
               "config: ",
               "data.cache_size must be 0 (automatic) or from data.image_size (" +
                   std::to_string(d.image_size) + ") to 16384, got " + std::to_string(d.cache_size));
  const int side = prepare_options(d).side;
  RANZCR_CHECK(side <= kMaxPreparedSide, "config: ",
               "data.image_size " + std::to_string(d.image_size) +
                   " with its zoom margin (data.augment.scale) prepares images of " + std::to_string(side) +
                   " px, at most 16384: set data.cache_size");
}

}  // namespace

void validate_config(const Config& c) {
  validate_image_options(c.data);
  RANZCR_CHECK(c.data.val_fraction > 0.0 && c.data.val_fraction < 1.0,
               "config: ", "data.val_fraction must be in (0, 1), got " + std::to_string(c.data.val_fraction));
  RANZCR_CHECK(c.data.folds == 0 || c.data.folds >= 2,
               "config: ", "data.folds must be 0 (off) or at least 2");
  RANZCR_CHECK(c.data.folds == 0 || (c.data.fold >= 0 && c.data.fold < c.data.folds),
               "config: ", "data.fold must be in [0, data.folds)");
  RANZCR_CHECK(c.data.num_workers >= 1, "config: ", "data.num_workers must be at least 1");
  RANZCR_CHECK(c.data.prefetch_batches >= 1, "config: ", "data.prefetch_batches must be at least 1");
  RANZCR_CHECK(c.data.dicom.timeout_seconds > 0 && c.data.dicom.timeout_seconds <= 3600, "config: ",
               "data.dicom.timeout_seconds must be above 0 and at most 3600 (seconds per DICOM image)");
  RANZCR_CHECK(c.data.dicom.memory_limit_mb >= 256 && c.data.dicom.memory_limit_mb <= (1 << 20), "config: ",
               "data.dicom.memory_limit_mb must be 256 to 1048576 (the DICOM decoder's memory, MiB)");
  RANZCR_CHECK(c.synth.num_images >= 10, "config: ", "synth.num_images must be at least 10");
  RANZCR_CHECK(c.synth.image_size >= 64, "config: ", "synth.image_size must be at least 64");
  RANZCR_CHECK(c.model.in_channels == 1 || c.model.in_channels == 3,
               "config: ", "model.in_channels must be 1 or 3");
  RANZCR_CHECK(c.model.dropout >= 0.0 && c.model.dropout < 1.0,
               "config: ", "model.dropout must be in [0, 1)");
  RANZCR_CHECK(std::isfinite(c.model.aux_seg_weight) && c.model.aux_seg_weight >= 0.0,
               "config: ", "model.aux_seg_weight must be >= 0 (0 = off)");
  RANZCR_CHECK(c.model.aux_seg_weight == 0.0 || !c.data.annotations_csv.empty(),
               "config: ", "data.annotations_csv must name a file when model.aux_seg_weight > 0");
  for (const auto* key : {"model.input_mean", "model.input_std"}) {
    const auto& values = std::string(key) == "model.input_mean" ? c.model.input_mean : c.model.input_std;
    RANZCR_CHECK(values.size() == 1 || static_cast<int>(values.size()) == c.model.in_channels, "config: ",
                 std::string(key) + " must hold 1 or model.in_channels (" +
                     std::to_string(c.model.in_channels) + ") numbers, got " + std::to_string(values.size()));
    for (double v : values)
      RANZCR_CHECK(std::isfinite(v), "config: ", std::string(key) + " must hold finite numbers");
  }
  for (double v : c.model.input_std) RANZCR_CHECK(v > 0.0, "config: ", "model.input_std must be positive");
  RANZCR_CHECK(c.optim.lr > 0.0, "config: ", "optim.lr must be positive");
  RANZCR_CHECK(c.optim.warmup_epochs >= 0.0, "config: ", "optim.warmup_epochs must be >= 0");
  RANZCR_CHECK(c.optim.grad_clip >= 0.0, "config: ", "optim.grad_clip must be >= 0");
  RANZCR_CHECK(c.train.epochs >= 1, "config: ", "train.epochs must be at least 1");
  RANZCR_CHECK(c.train.batch_size >= 1, "config: ", "train.batch_size must be at least 1");
  RANZCR_CHECK(c.train.accum_steps >= 1, "config: ", "train.accum_steps must be at least 1");
  RANZCR_CHECK(c.train.eval_batch_size >= 1, "config: ", "train.eval_batch_size must be at least 1");
  RANZCR_CHECK(c.train.num_threads >= 0, "config: ", "train.num_threads must be >= 0");
  RANZCR_CHECK(c.train.early_stop_patience >= 0, "config: ", "train.early_stop_patience must be >= 0");
  RANZCR_CHECK(c.train.ema_decay >= 0.0 && c.train.ema_decay < 1.0,
               "config: ", "train.ema_decay must be in [0, 1) (0 = off)");
  RANZCR_CHECK(
      !(c.train.device.kind == DeviceSetting::Kind::kCpu && c.distributed.backend == BackendSetting::kNccl),
      "config: ",
      "distributed.backend nccl needs GPUs, but train.device is cpu (use distributed.backend gloo or auto)");
  RANZCR_CHECK(
      !c.synth.generate_if_missing || !c.synth.root.empty(), "config: ",
      "synth.generate_if_missing needs synth.root (the folder the synthetic data set is generated in)");
  RANZCR_CHECK(c.distributed.timeout_seconds > 0, "config: ", "distributed.timeout_seconds must be positive");
  RANZCR_CHECK(c.distributed.bucket_mb > 0, "config: ", "distributed.bucket_mb must be positive");
  RANZCR_CHECK(c.distributed.grace_seconds >= 0, "config: ", "distributed.grace_seconds must be >= 0");
  RANZCR_CHECK(c.output.keep_every >= 0, "config: ", "output.keep_every must be >= 0");
  RANZCR_CHECK(c.output.keep_best_k >= 0, "config: ", "output.keep_best_k must be >= 0");
  RANZCR_CHECK(!c.output.dir.empty(), "config: ", "output.dir must not be empty");
  tracking::check_tracker_keys(c.output);
}

}  // namespace ranzcr
