// torch.save's zip format (torch >= 1.6): a zip archive "<name>/data.pkl" (a pickle, protocol 2 by default)
// whose tensors refer by persistent id ('storage', torch.FloatStorage, "<key>", "cpu", numel) to raw
// little-endian records "<name>/data/<key>". Here: telling the formats apart, opening the archive, finding
// the state dict in what torch_pickle.h unpickles.
#include "engine/io/weight_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>

#include "core/check.h"
#include "core/text.h"
#include "engine/io/safetensors.h"
#include "engine/io/torch_pickle.h"
#include "engine/io/zip_check.h"

namespace ranzcr {
namespace {

using pickle::Obj;
using pickle::PyObj;

// `o` for an error message: "None", "an int", "a dict", "a pickled module.Class object", ...
std::string describe(const Obj& o) {
  if (o->kind == PyObj::kGlobal) return "the function or class " + o->s;
  if (o->kind == PyObj::kOpaque) return "a pickled " + o->s + " object";
  static const char* const kNames[] = {"None",  "a bool",  "an int", "a float", "a str",
                                       "bytes", "a tuple", "a list", "a dict",  "a tensor"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == PyObj::kTensor + 1, "one name per plain kind");
  return kNames[o->kind];
}

// The entries of a dict of tensors with string keys; empty if `o` is not one.
NamedTensors tensors_of(const Obj& o) {
  NamedTensors t;
  if (o->kind != PyObj::kDict) return t;
  for (const auto& [k, v] : o->entries) {
    if (k->kind != PyObj::kStr || v->kind != PyObj::kTensor) return {};
    t.emplace_back(k->s, v->tensor);
  }
  return t;
}

const char* const kConvert =
    "; convert it in Python: torch.save(torch.load(PATH, map_location='cpu', weights_only=False)"
    "['state_dict'], 'weights.pth') (or model.state_dict()), or safetensors.torch.save_file(state_dict, "
    "'weights.safetensors')";

// A torch.save archive written on a little-endian machine and its data.pkl.
struct TorchSaveArchive {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::string data_pkl;
};

TorchSaveArchive open_torch_save(const std::string& path) {
  TorchSaveArchive archive;
  // LibTorch's reader trusts what an archive declares and leaks on the ones it refuses: ours looks first.
  const std::string problem = torch_zip_problem(path);
  RANZCR_CHECK(problem.empty(), path, ": cannot read the torch.save archive: ", problem);
  try {
    archive.reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    if (archive.reader->hasRecord("byteorder")) {
      auto [data, size] = archive.reader->getRecord("byteorder");
      RANZCR_CHECK(std::string(static_cast<const char*>(data.get()), size) == "little", path,
                   ": a torch.save archive written on a big-endian machine is not supported");
    }
    RANZCR_CHECK(archive.reader->hasRecord("data.pkl"), path,
                 ": a zip archive without data.pkl, not a torch.save file");
    auto [data, size] = archive.reader->getRecord("data.pkl");
    archive.data_pkl.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& e) {
    RANZCR_FAIL(path, ": cannot read the torch.save archive: ", first_line(e.what_without_backtrace()));
  }
  return archive;
}

// What the data.pkl of the torch.save archive at `path` unpickles to; its errors name `path`.
Obj unpickle_torch_save(const std::string& path) {
  TorchSaveArchive archive = open_torch_save(path);
  try {
    return pickle::unpickle(archive.data_pkl, *archive.reader);
  } catch (const c10::Error& e) {
    RANZCR_FAIL(path, ": ", first_line(e.what_without_backtrace()));
  } catch (const std::runtime_error& e) {
    RANZCR_FAIL(path, ": ", first_line(e.what()));
  }
}

// "key: a tensor, key: an int, ..." for the first 8 entries of a dict.
std::string list_entries(const Obj& dict) {
  std::string keys;
  size_t listed = 0;
  for (const auto& [k, v] : dict->entries) {
    if (listed++ == 8) {
      keys += ", ...";
      break;
    }
    keys += (keys.empty() ? "" : ", ") + (k->kind == PyObj::kStr ? k->s : describe(k)) + ": " + describe(v);
  }
  return keys;
}

// The state dict in `root` (unpickled from `path`): `root` itself or the first of its wrapper entries
// that is a dict of tensors.
NamedTensors state_dict_of(const Obj& root, const std::string& path) {
  NamedTensors tensors = tensors_of(root);
  if (!tensors.empty()) return tensors;
  if (root->kind == PyObj::kOpaque) {
    const bool torchscript = root->s.rfind("__torch__.", 0) == 0;
    RANZCR_FAIL(path, ": holds ", describe(root), ", not a state dict",
                torchscript
                    ? " (a TorchScript archive written by torch.jit.save); re-save its weights in "
                      "Python: torch.save(torch.jit.load(PATH, map_location='cpu').state_dict(), "
                      "'weights.pth')"
                    : " (a whole model saved with torch.save(model)?); re-save its weights in Python: "
                      "torch.save(torch.load(PATH, map_location='cpu', weights_only=False)"
                      ".state_dict(), 'weights.pth')");
  }
  RANZCR_CHECK(root->kind == PyObj::kDict, path, ": holds ", describe(root),
               ", not a state dict (a dict of tensors)");
  for (const char* wrapper : {"state_dict", "model", "state_dict_ema", "model_ema"})
    for (const auto& [k, v] : root->entries)
      if (k->kind == PyObj::kStr && k->s == wrapper) {
        tensors = tensors_of(v);
        if (!tensors.empty()) return tensors;
      }
  RANZCR_FAIL(path,
              ": no state dict found (a dict whose values are all tensors, at the top level or under "
              "\"state_dict\", \"model\", \"state_dict_ema\" or \"model_ema\"); the file holds a dict of ",
              root->entries.size(), " entries {", list_entries(root), "}", kConvert);
}

void strip_prefixes(NamedTensors& tensors) {
  for (bool stripped = true; stripped && !tensors.empty();) {
    stripped = false;
    for (const std::string prefix : {"module.", "_orig_mod."}) {
      bool all = true;
      for (const auto& kv : tensors) all = all && kv.first.rfind(prefix, 0) == 0;
      if (!all) continue;
      for (auto& kv : tensors) kv.first = kv.first.substr(prefix.size());
      stripped = true;
    }
  }
}

}  // namespace

FileFormat file_format(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  RANZCR_CHECK(in, "cannot open ", path);
  char head[9] = {};
  in.read(head, 9);
  const auto got = in.gcount();
  if (got == 9 && head[8] == '{') return FileFormat::kSafetensors;
  if (got >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return FileFormat::kZipArchive;
  if (got >= 2 && static_cast<uint8_t>(head[0]) == 0x80 && static_cast<uint8_t>(head[1]) <= 5)
    return FileFormat::kLegacyTorchSave;
  return FileFormat::kOther;
}

NamedTensors read_weight_file(const std::string& path) {
  return read_weights(path).tensors;
}

WeightFile read_weights(const std::string& path) {
  const FileFormat format = file_format(path);
  WeightFile file;
  NamedTensors& tensors = file.tensors;
  if (format == FileFormat::kSafetensors) {
    SafetensorsFile loaded = load_safetensors(path);
    tensors = std::move(loaded.tensors);
    file.metadata = std::move(loaded.metadata);
  } else if (format == FileFormat::kZipArchive) {
    tensors = state_dict_of(unpickle_torch_save(path), path);
  } else if (format == FileFormat::kLegacyTorchSave) {
    RANZCR_FAIL(path,
                ": the legacy torch.save format (torch < 1.6, or _use_new_zipfile_serialization=False) "
                "is not read; re-save it with torch >= 1.6: torch.save(torch.load(PATH, "
                "map_location='cpu'), 'weights.pth'), or write safetensors");
  } else {
    RANZCR_FAIL(path, ": neither a .safetensors file nor a torch.save archive (.pth/.bin, zip)");
  }
  RANZCR_CHECK(!tensors.empty(), path, ": holds no tensors");
  strip_prefixes(tensors);
  return file;
}

}  // namespace ranzcr
