// Weight files for model.pretrained: .safetensors files and PyTorch state dicts saved with torch.save, read
// by name (models/pretrained.h translates torchvision's names and loads them into a model).
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/pretrained.h"

namespace ranzcr {

/// What a file holds, told by its first bytes: safetensors (an 8-byte header length, then the JSON header's
/// '{'), a zip archive ("PK\3\4": torch.save >= 1.6 and LibTorch archives, our checkpoints among them), the
/// legacy torch.save pickle (protocol opcode 0x80), or something else.
enum class FileFormat { kSafetensors, kZipArchive, kLegacyTorchSave, kOther };

/// The format of `path`; throws std::runtime_error("cannot open PATH") when it cannot be opened.
FileFormat file_format(const std::string& path);

/// The named tensors of a weight file, in file order, on the CPU in the file's dtypes: a .safetensors file,
/// or a PyTorch state dict saved with torch.save (.pth/.bin/.pt, the zip format of torch >= 1.6), told
/// apart by content, not extension. Tensors saved from CUDA are read to the CPU.
/// torch.save'd checkpoints that wrap the state dict are unwrapped: the top-level dict itself when all its
/// values are tensors, else the first of "state_dict", "model", "state_dict_ema", "model_ema" that is a
/// dict of tensors; so the raw weights win over the EMA weights, which are read only when a checkpoint holds
/// nothing else (timm's train.py writes both "state_dict" and "state_dict_ema"; to start from the EMA
/// weights, save that dict alone). Other entries (epoch, optimizer, an argparse.Namespace of arguments,
/// numpy scalars, ...) are skipped unread: the pickle is interpreted, never executed.
/// A prefix "module." (DDP/DataParallel) or "_orig_mod." (torch.compile) on every key is removed.
/// Throws std::runtime_error, one line naming `path` and the problem: cannot open, neither format, the
/// legacy non-zip torch.save format, a pickled object of a class other than a dict of tensors (a whole
/// model saved with torch.save(model), a TorchScript archive), no tensors, a corrupt file.
NamedTensors read_weight_file(const std::string& path);

/// read_weight_file's tensors and, for a .safetensors file, its string metadata ("__metadata__"), from one
/// read of the file.
struct WeightFile {
  NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};
WeightFile read_weights(const std::string& path);

}  // namespace ranzcr
