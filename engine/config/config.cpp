#include "engine/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "data/image_pipeline.h"
#include "data/printable.h"

namespace ranzcr {

std::vector<std::string> detail::split_names(const char* names) {
  std::vector<std::string> out;
  std::stringstream ss(names);
  for (std::string name; std::getline(ss, name, '|');) out.push_back(name);
  return out;
}

namespace {

// Calls `v(key, field)` for every config field. One table drives parsing, key listing and emission.
template <class Visitor>
void visit_fields(Config& c, Visitor&& v) {
  v("seed", c.seed);
  auto& d = c.data;
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
}

std::vector<std::string> split_dots(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, '.')) parts.push_back(part);
  return parts;
}

// A string value with a control character (a carriage return, a tab, ...) is refused: no path or name holds
// one, and the run folder's config.yaml could not write it so that it reads back the same.
void check_printable(const std::string& key, const std::string& value, const std::string& where) {
  const auto bad = std::find_if(value.begin(), value.end(),
                                [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
  if (bad == value.end()) return;
  throw std::runtime_error("config key '" + key + "' at " + where + ": holds a control character (" +
                           printable(std::string(1, *bad)) + "), expected printable text");
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
        throw std::runtime_error("config key '" + key + "' at " + src.where(key, it->second) +
                                 ": expected a section (a map of keys)");
      if (it->second.IsMap()) check_unknown(it->second, key, leaves, sections, src);
      continue;
    }
    std::string valid;
    for (const auto& l : leaves) {
      const bool same_section = l.rfind(prefix.empty() ? "" : prefix + ".", 0) == 0;
      if (same_section) valid += (valid.empty() ? "" : ", ") + l;
    }
    throw std::runtime_error("unknown config key '" + key + "' at " + src.where(key, it->first) +
                             " (valid keys" + (prefix.empty() ? "" : " under '" + prefix + "'") + ": " +
                             valid + ")");
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
  if (!root.IsMap()) throw std::runtime_error(src.origin + ": expected a YAML map of config keys at the top");
  Config config;
  std::set<std::string> leaves, sections;
  visit_fields(config, [&](const std::string& key, auto&) {
    leaves.insert(key);
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
      sections.insert(key.substr(0, dot));
  });
  for (const auto& ov : overrides) {
    const auto eq = ov.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::runtime_error("--set " + ov + ": expected key=value, for example --set train.epochs=3");
    const std::string key = ov.substr(0, eq);
    if (!leaves.count(key)) {
      throw std::runtime_error("--set " + ov + ": unknown config key '" + key +
                               "' (run `ranzcr train --help` or see configs/ for the valid keys)");
    }
    YAML::Node value;
    try {
      value = YAML::Load(ov.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw std::runtime_error("--set " + ov + ": value is not valid YAML: " + e.msg);
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
      if constexpr (std::is_enum_v<T>) {
        try {
          field = parse_setting<T>(key, node.Scalar());
        } catch (const std::runtime_error& e) {
          throw std::runtime_error("config: " + std::string(e.what()) + " (" + src.where(key, node) + ")");
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
      throw std::runtime_error("config key '" + key + "' at " + src.where(key, node) + ": expected " +
                               type_name<T>() + ", got " + got);
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
    throw std::runtime_error(origin + ":" + std::to_string(e.mark.line + 1) + ": invalid YAML: " +
                             printable(e.msg, 400));  // yaml-cpp quotes the bad character
  }
  try {
    return parse_tree(root, Source{origin, {}}, overrides);
  } catch (const std::runtime_error& e) {  // its messages quote keys and values of the file: one line each
    throw std::runtime_error(printable(e.what(), 4000));
  }
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("config file not found or unreadable: " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, overrides);
}

std::string config_to_yaml(const Config& config) {
  Config copy = config;
  YAML::Node root(YAML::NodeType::Map);
  visit_fields(copy, [&](const std::string& key, auto& field) {
    if constexpr (std::is_enum_v<std::decay_t<decltype(field)>>)
      set_path(root, split_dots(key), 0, YAML::Node(setting_name(field)));
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

DeviceSetting parse_device_setting(const std::string& value) {
  DeviceSetting d;
  if (value == "auto" || value == "cpu" || value == "cuda") {
    d.type = value;
    return d;
  }
  const std::string digits = value.rfind("cuda:", 0) == 0 ? value.substr(5) : "";
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos)
    throw std::runtime_error(
        "config: train.device must be auto, cpu, cuda or cuda:N (N a GPU index, 0 or more), got '" + value +
        "'");
  d.type = "cuda";
  d.index = std::stoi(digits);
  return d;
}

namespace {

// A user error in the config when `ok` is false: "config: <what>".
void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("config: " + what);
}

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
  require(in(a.rotate_deg, 0, 360),
          "data.augment.rotate_deg must be 0 to 360 (degrees), got " + str(a.rotate_deg));
  require(in(a.shift, 0, 1), "data.augment.shift must be 0 to 1 (of the image side), got " + str(a.shift));
  require(in(a.scale, 0, 0.9), "data.augment.scale must be 0 to 0.9 (zoom range), got " + str(a.scale));
  require(in(a.brightness, 0, 1), "data.augment.brightness must be 0 to 1, got " + str(a.brightness));
  require(in(a.contrast, 0, 1), "data.augment.contrast must be 0 to 1, got " + str(a.contrast));
  require(d.image_size >= 16 && d.image_size <= kMaxPreparedSide,
          "data.image_size must be 16 to 16384, got " + std::to_string(d.image_size));
  require(!d.cache.empty(), "data.cache must be off, on or a folder, got ''");
  require(d.cache_size == 0 || (d.cache_size >= d.image_size && d.cache_size <= kMaxPreparedSide),
          "data.cache_size must be 0 (automatic) or from data.image_size (" + std::to_string(d.image_size) +
              ") to 16384, got " + std::to_string(d.cache_size));
  const int side = prepare_options(d).side;
  require(side <= kMaxPreparedSide, "data.image_size " + std::to_string(d.image_size) +
                                        " with its zoom margin (data.augment.scale) prepares images of " +
                                        std::to_string(side) + " px, at most 16384: set data.cache_size");
}

}  // namespace

void validate_config(const Config& c) {
  validate_image_options(c.data);
  require(c.data.val_fraction > 0.0 && c.data.val_fraction < 1.0,
          "data.val_fraction must be in (0, 1), got " + std::to_string(c.data.val_fraction));
  require(c.data.folds == 0 || c.data.folds >= 2, "data.folds must be 0 (off) or at least 2");
  require(c.data.folds == 0 || (c.data.fold >= 0 && c.data.fold < c.data.folds),
          "data.fold must be in [0, data.folds)");
  require(c.data.num_workers >= 1, "data.num_workers must be at least 1");
  require(c.data.prefetch_batches >= 1, "data.prefetch_batches must be at least 1");
  require(c.data.dicom.timeout_seconds > 0 && c.data.dicom.timeout_seconds <= 3600,
          "data.dicom.timeout_seconds must be above 0 and at most 3600 (seconds per DICOM image)");
  require(c.data.dicom.memory_limit_mb >= 256 && c.data.dicom.memory_limit_mb <= (1 << 20),
          "data.dicom.memory_limit_mb must be 256 to 1048576 (the DICOM decoder's memory, MiB)");
  require(c.synth.num_images >= 10, "synth.num_images must be at least 10");
  require(c.synth.image_size >= 64, "synth.image_size must be at least 64");
  require(c.model.in_channels == 1 || c.model.in_channels == 3, "model.in_channels must be 1 or 3");
  require(c.model.dropout >= 0.0 && c.model.dropout < 1.0, "model.dropout must be in [0, 1)");
  require(std::isfinite(c.model.aux_seg_weight) && c.model.aux_seg_weight >= 0.0,
          "model.aux_seg_weight must be >= 0 (0 = off)");
  require(c.model.aux_seg_weight == 0.0 || !c.data.annotations_csv.empty(),
          "data.annotations_csv must name a file when model.aux_seg_weight > 0");
  for (const auto* key : {"model.input_mean", "model.input_std"}) {
    const auto& values = std::string(key) == "model.input_mean" ? c.model.input_mean : c.model.input_std;
    require(values.size() == 1 || static_cast<int>(values.size()) == c.model.in_channels,
            std::string(key) + " must hold 1 or model.in_channels (" + std::to_string(c.model.in_channels) +
                ") numbers, got " + std::to_string(values.size()));
    for (double v : values) require(std::isfinite(v), std::string(key) + " must hold finite numbers");
  }
  for (double v : c.model.input_std) require(v > 0.0, "model.input_std must be positive");
  require(c.optim.lr > 0.0, "optim.lr must be positive");
  require(c.optim.warmup_epochs >= 0.0, "optim.warmup_epochs must be >= 0");
  require(c.optim.grad_clip >= 0.0, "optim.grad_clip must be >= 0");
  require(c.train.epochs >= 1, "train.epochs must be at least 1");
  require(c.train.batch_size >= 1, "train.batch_size must be at least 1");
  require(c.train.accum_steps >= 1, "train.accum_steps must be at least 1");
  require(c.train.eval_batch_size >= 1, "train.eval_batch_size must be at least 1");
  require(c.train.num_threads >= 0, "train.num_threads must be >= 0");
  require(c.train.early_stop_patience >= 0, "train.early_stop_patience must be >= 0");
  require(c.train.ema_decay >= 0.0 && c.train.ema_decay < 1.0, "train.ema_decay must be in [0, 1) (0 = off)");
  const DeviceSetting device = parse_device_setting(c.train.device);
  require(
      !(device.type == "cpu" && c.distributed.backend == BackendSetting::kNccl),
      "distributed.backend nccl needs GPUs, but train.device is cpu (use distributed.backend gloo or auto)");
  require(!c.synth.generate_if_missing || !c.synth.root.empty(),
          "synth.generate_if_missing needs synth.root (the folder the synthetic data set is generated in)");
  const auto& n = c.distributed.nproc_per_node;
  require(n == "auto" || (!n.empty() && n.size() < 5 &&
                          n.find_first_not_of("0123456789") == std::string::npos && std::stoi(n) >= 1),
          "distributed.nproc_per_node must be a positive integer or auto, got '" + n + "'");
  require(c.distributed.timeout_seconds > 0, "distributed.timeout_seconds must be positive");
  require(c.distributed.bucket_mb > 0, "distributed.bucket_mb must be positive");
  require(c.distributed.grace_seconds >= 0, "distributed.grace_seconds must be >= 0");
  require(c.output.keep_every >= 0, "output.keep_every must be >= 0");
  require(c.output.keep_best_k >= 0, "output.keep_best_k must be >= 0");
  require(!c.output.dir.empty(), "output.dir must not be empty");
}

}  // namespace ranzcr
