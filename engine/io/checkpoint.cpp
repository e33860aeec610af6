#include "engine/io/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "core/check.h"
#include "core/text.h"
#include "engine/io/torch_pickle.h"
#include "engine/io/zip_check.h"

namespace fs = std::filesystem;

namespace ranzcr {
namespace {

constexpr const char* kFormatVersionKey = "ranzcr_format_version";
constexpr const char* kValuesKey = "values";  // the sub-archive of CheckpointValues

// Required: a checkpoint without it is refused. Optional: added after files were written without it
// (within the same format version); such files read as the field's default, as do ones holding another
// type.
enum class Presence { Required, Optional };

// Calls `f(key, field, presence)` for every meta field but format_version (written first and checked
// before any other: see read_meta). One table drives writing and reading; adding a field is one line
// here, of a type that encode/decode handle. Meta is CheckpointMeta or const CheckpointMeta.
template <typename Meta, typename F>
void visit_meta_fields(Meta& m, F&& f) {
  static_assert(std::is_same_v<std::remove_const_t<Meta>, CheckpointMeta>);
  constexpr Presence R = Presence::Required, O = Presence::Optional;
  f("epoch", m.epoch, R);
  f("step", m.step, R);
  f("best_metric", m.best_metric, R);
  f("config_yaml", m.config_yaml, R);
  f("model_name", m.model_name, R);
  f("label_names", m.label_names, R);
  f("world_size", m.world_size, R);
  f("epoch_batches_done", m.epoch_batches_done, R);
  f("batch_size", m.batch_size, R);
  f("loss_scale", m.loss_scale, O);
  f("loss_scale_growth", m.loss_scale_growth, O);
  f("epochs_since_best", m.epochs_since_best, O);
  f("epoch_metric", m.epoch_metric, O);
  f("rng_states", m.rng_states, O);
  f("rng_device", m.rng_device, O);
  f("tracker_run_ids", m.tracker_run_ids, O);
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

// A field's archive value: int64 as Int, double as Double, strings as String, string lists as one
// newline-joined String. Tensors are not IValues here: see write_field.
c10::IValue encode(int64_t v) {
  return c10::IValue(v);
}
c10::IValue encode(double v) {
  return c10::IValue(v);
}
c10::IValue encode(const std::string& v) {
  return c10::IValue(v);
}
c10::IValue encode(const std::vector<std::string>& v) {
  return c10::IValue(v.empty() ? std::string() : join(v, "\n") + "\n");  // each line ends in a newline
}
// A map of names to values as lines name=value (a name holds no '=', a value no newline).
c10::IValue encode(const std::map<std::string, std::string>& m) {
  std::vector<std::string> lines;
  for (const auto& [name, value] : m) lines.push_back(name + "=" + value);
  return encode(lines);
}

// Sets `field` from `v` when `v` holds the field's archive type and returns true; otherwise returns false
// and leaves it, or, when `strict` (required keys), throws std::runtime_error saying what it holds (read_meta
// adds the file and key). IValue's own toInt() etc. would fail with an internal assertion instead.
bool wrong_type(const c10::IValue& v, bool strict, const char* expected) {
  if (strict) RANZCR_FAIL("holds a ", v.tagKind(), ", expected ", expected);
  return false;
}
bool decode(const c10::IValue& v, int64_t& field, bool strict) {
  if (!v.isInt()) return wrong_type(v, strict, "an integer");
  field = v.toInt();
  return true;
}
bool decode(const c10::IValue& v, double& field, bool strict) {
  if (!v.isDouble()) return wrong_type(v, strict, "a number");
  field = v.toDouble();
  return true;
}
bool decode(const c10::IValue& v, std::string& field, bool strict) {
  if (!v.isString()) return wrong_type(v, strict, "a string");
  field = v.toStringRef();
  return true;
}
bool decode(const c10::IValue& v, std::vector<std::string>& field, bool strict) {
  std::string joined;
  if (!decode(v, joined, strict)) return false;
  field = split_lines(joined);
  return true;
}
bool decode(const c10::IValue& v, std::map<std::string, std::string>& field, bool strict) {
  std::vector<std::string> lines;
  if (!decode(v, lines, strict)) return false;
  for (const auto& line : lines)
    if (const size_t eq = line.find('='); eq != std::string::npos && eq > 0)
      field[line.substr(0, eq)] = line.substr(eq + 1);
  return true;
}

// Whether an optional field has a value to write: an empty string or an undefined tensor is left out of
// the file and so reads back as the field's default (which must then be that empty value).
bool has_value(const std::string& v) {
  return !v.empty();
}
bool has_value(const torch::Tensor& v) {
  return v.defined();
}
bool has_value(const std::map<std::string, std::string>& v) {
  return !v.empty();
}
template <typename T>
bool has_value(const T&) {
  return true;
}

template <typename T>
void write_field(torch::serialize::OutputArchive& archive, const char* key, const T& field) {
  archive.write(key, encode(field));
}
// A tensor is written as a tensor (not an IValue attribute), from the CPU.
void write_field(torch::serialize::OutputArchive& archive, const char* key, const torch::Tensor& field) {
  archive.write(key, field.cpu());
}

// Reads `key` into `field`; false when the archive lacks it (or, unless `strict`, holds another type).
template <typename T>
bool read_field(torch::serialize::InputArchive& archive, const char* key, T& field, bool strict) {
  c10::IValue v;
  return archive.try_read(key, v) && decode(v, field, strict);
}
// Tensors land on the CPU whatever the archive's device.
bool read_field(torch::serialize::InputArchive& archive, const char* key, torch::Tensor& field, bool) {
  torch::Tensor t;
  if (!archive.try_read(key, t)) return false;
  field = t.cpu();
  return true;
}

void write_meta(torch::serialize::OutputArchive& archive, const CheckpointMeta& meta) {
  archive.write(kFormatVersionKey, c10::IValue(meta.format_version));
  visit_meta_fields(meta, [&](const char* key, const auto& field, Presence presence) {
    if (presence == Presence::Optional && !has_value(field)) return;
    write_field(archive, key, field);
  });
}

// Whether `name` is a CheckpointValues name: [a-z][a-z0-9_]* with one '_' at least.
bool valid_value_name(const std::string& name) {
  auto allowed = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; };
  return !name.empty() && name[0] >= 'a' && name[0] <= 'z' && name.find('_') != std::string::npos &&
         std::all_of(name.begin(), name.end(), allowed);
}

// The values as attributes of one sub-archive; none written when there are none.
void write_values(torch::serialize::OutputArchive& archive, const CheckpointValues& values) {
  if (values.empty()) return;
  torch::serialize::OutputArchive sub;
  for (const auto& entry : values) {
    const std::string& name = entry.first;
    TORCH_CHECK(valid_value_name(name), "checkpoint value name '", name,
                "' is not lower-case letters, digits and '_' with a letter first and one '_' at least");
    std::visit([&](auto v) { sub.write(name, encode(v)); }, entry.second);
  }
  archive.write(kValuesKey, sub);
}

// Whether TorchScript source `code` defines a function or method: the word "def" anywhere.
bool defines_code(const std::string& code) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = code.find("def"); at != std::string::npos; at = code.find("def", at + 1))
    if ((at == 0 || !word(code[at - 1])) && (at + 3 == code.size() || !word(code[at + 3]))) return true;
  return false;
}

// What LibTorch's loader (torch::jit::load) would trust in the archive at `path`, checked first: its pickles
// read by our interpreter with the storages unread (LibTorch's unpickler reserves what a string length or a
// memo key declares), and its TorchScript code free of functions and methods. A ranzcr checkpoint's modules
// hold attributes only; code that defines a __setstate__ would be compiled and run by the loader.
void check_before_jit_load(const std::string& path) {
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    pickle::check_archive_pickles(reader);
    for (const std::string& name : reader.getAllRecords()) {
      if (name.rfind("code/", 0) != 0 || name.size() < 3 || name.compare(name.size() - 3, 3, ".py") != 0)
        continue;
      auto [data, size] = reader.getRecord(name);
      RANZCR_CHECK(!defines_code(std::string(static_cast<const char*>(data.get()), size)),
                   "its TorchScript code (", name,
                   ") defines functions, which loading would compile and could run; ranzcr checkpoints "
                   "hold none");
    }
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    RANZCR_FAIL(path, " is not a ranzcr checkpoint (cannot read it as a LibTorch archive: ",
                what.substr(0, what.find('\n')), ")");
  } catch (const std::runtime_error& e) {
    RANZCR_FAIL(path, " is not a ranzcr checkpoint (", e.what(), ")");
  }
}

torch::serialize::InputArchive open_archive(const std::string& path,
                                            const torch::Device& device = torch::kCPU) {
  RANZCR_CHECK(fs::is_regular_file(path), "checkpoint not found: ", path);
  // LibTorch's reader trusts what an archive declares and leaks on the ones it refuses: ours looks first.
  const std::string problem = torch_zip_problem(path);
  RANZCR_CHECK(problem.empty(), path,
               " is not a ranzcr checkpoint (cannot read it as a LibTorch archive: ", problem, ")");
  check_before_jit_load(path);
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path, device);
  } catch (const std::exception&) {
    RANZCR_FAIL(path, " is not a ranzcr checkpoint (cannot read it as a LibTorch archive)");
  }
  return archive;
}

int64_t read_format_version(torch::serialize::InputArchive& archive, const std::string& path) {
  c10::IValue v;
  RANZCR_CHECK(archive.try_read(kFormatVersionKey, v) && v.isInt(), path,
               " is not a ranzcr checkpoint (no ranzcr_format_version)");
  const int64_t version = v.toInt();
  RANZCR_CHECK(version == kCheckpointFormatVersion, path, ": checkpoint format version ", version,
               " is not supported (expected ", kCheckpointFormatVersion, ")",
               version == 1 ? "; version 1 predates the models' timm parameter names: retrain" : "");
  return version;
}

// Values the trainer counts with or indexes by: refused when a file holds what no run writes.
void check_meta_values(const CheckpointMeta& m, const std::string& path) {
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"epoch", m.epoch},
                                   {"step", m.step},
                                   {"epoch_batches_done", m.epoch_batches_done},
                                   {"batch_size", m.batch_size},
                                   {"loss_scale_growth", m.loss_scale_growth},
                                   {"epochs_since_best", m.epochs_since_best}})
    RANZCR_CHECK(value >= 0, path, ": checkpoint key '", key, "' is ", value, ", expected a count >= 0");
  RANZCR_CHECK(m.world_size >= 1, path, ": checkpoint key 'world_size' is ", m.world_size,
               ", expected a number of processes >= 1");
  const torch::Tensor& r = m.rng_states;
  RANZCR_CHECK(!r.defined() || (r.dim() == 2 && r.scalar_type() == torch::kUInt8), path,
               ": checkpoint key 'rng_states' holds a ", r.defined() ? r.scalar_type() : torch::kUInt8,
               " tensor of shape ", r.defined() ? r.sizes() : c10::IntArrayRef{},
               ", expected Byte (uint8) [ranks, state bytes]");
}

// Checkpoints written before tracker_run_ids kept a tracker's run id as the string key <name>_run_id.
void read_older_run_ids(torch::serialize::InputArchive& archive, std::map<std::string, std::string>& ids) {
  const std::string suffix = "_run_id";
  for (const std::string& key : archive.keys()) {
    if (key.size() == suffix.size() || !ends_with(key, suffix)) continue;
    const std::string name = key.substr(0, key.size() - suffix.size());
    std::string id;
    if (!ids.count(name) && read_field(archive, key.c_str(), id, /*strict=*/false) && !id.empty())
      ids[name] = id;
  }
}

CheckpointMeta read_meta(torch::serialize::InputArchive& archive, const std::string& path) {
  CheckpointMeta meta;
  meta.format_version = read_format_version(archive, path);
  visit_meta_fields(meta, [&](const char* key, auto& field, Presence presence) {
    const bool required = presence == Presence::Required;
    bool found = false;
    try {
      found = read_field(archive, key, field, required);
    } catch (const std::runtime_error& e) {
      RANZCR_FAIL(path, ": checkpoint key '", key, "' ", e.what());
    }
    RANZCR_CHECK(found || !required, path, ": checkpoint lacks '", key, "'");
  });
  read_older_run_ids(archive, meta.tracker_run_ids);
  check_meta_values(meta, path);
  return meta;
}

}  // namespace

std::string serialize_checkpoint(const CheckpointMeta& meta, torch::nn::Module& model,
                                 torch::optim::Optimizer* optimizer, const CheckpointParts& parts,
                                 const CheckpointValues& values) {
  torch::serialize::OutputArchive archive;
  write_meta(archive, meta);
  auto write_part = [&](const char* key, const auto* part) {  // a module or the optimizer, when there is one
    if (!part) return;
    torch::serialize::OutputArchive part_archive;
    part->save(part_archive);
    archive.write(key, part_archive);
  };
  write_part("model", &model);
  write_part("optimizer", optimizer);
  for (const auto& [name, module] : parts) write_part(name.c_str(), module);
  write_values(archive, values);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void save_checkpoint(const std::string& path, const CheckpointMeta& meta, torch::nn::Module& model,
                     torch::optim::Optimizer* optimizer) {
  write_file_atomic(path, serialize_checkpoint(meta, model, optimizer));
}

CheckpointReader::CheckpointReader(const std::string& path, const torch::Device& device)
    : path_(path), archive_(open_archive(path, device)), meta_(read_meta(archive_, path)) {}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  return CheckpointReader(path).meta();
}

CheckpointMeta load_checkpoint(const std::string& path, torch::nn::Module& model,
                               torch::optim::Optimizer* optimizer, const torch::Device& device) {
  CheckpointReader reader(path, device);
  reader.restore(model, optimizer);
  return reader.meta();
}

// Throws one line naming the file: a state of another model (c10::Error from LibTorch), or a part
// missing or unreadable.
template <typename Load>
void CheckpointReader::load_or_explain(Load&& load) {
  try {
    load();
  } catch (const c10::Error& e) {
    RANZCR_FAIL(path_, ": checkpoint does not match the model '", meta_.model_name,
                "': ", e.what_without_backtrace());
  } catch (const std::runtime_error& e) {
    RANZCR_FAIL(path_, ": cannot restore the checkpoint: ", e.what());
  }
}

void CheckpointReader::restore(torch::nn::Module& model, torch::optim::Optimizer* optimizer) {
  load_or_explain([&] {
    torch::serialize::InputArchive part;
    archive_.read("model", part);
    model.load(part);
  });
  if (optimizer) restore_optimizer(*optimizer);
}

void CheckpointReader::restore_optimizer(torch::optim::Optimizer& optimizer) {
  load_or_explain([&] {
    torch::serialize::InputArchive part;
    RANZCR_CHECK(archive_.try_read("optimizer", part), "it holds no optimizer state");
    optimizer.load(part);
  });
}

bool CheckpointReader::has_part(const std::string& name) {
  torch::serialize::InputArchive part;
  return archive_.try_read(name, part);
}

void CheckpointReader::restore_part(const std::string& name, const std::string& what,
                                    torch::nn::Module& module) {
  torch::serialize::InputArchive part;
  RANZCR_CHECK(archive_.try_read(name, part), path_, ": the checkpoint holds no ", what);
  try {
    module.load(part);
  } catch (const c10::Error& e) {
    RANZCR_FAIL(path_, ": the checkpoint's ", what, " do not match the model '", meta_.model_name,
                "': ", e.what_without_backtrace());
  }
}

template <typename T>
std::optional<T> CheckpointReader::read_value(const std::string& name) {
  torch::serialize::InputArchive values;
  c10::IValue v;
  if (!archive_.try_read(kValuesKey, values) || !values.try_read(name, v)) return std::nullopt;
  T value{};
  try {
    decode(v, value, /*strict=*/true);
  } catch (const std::runtime_error& e) {
    RANZCR_FAIL(path_, ": checkpoint value '", name, "' ", e.what());
  }
  return value;
}

std::optional<int64_t> CheckpointReader::int_value(const std::string& name) {
  return read_value<int64_t>(name);
}

std::optional<double> CheckpointReader::double_value(const std::string& name) {
  return read_value<double>(name);
}

}  // namespace ranzcr
