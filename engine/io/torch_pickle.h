// The pickle inside a torch.save zip archive (data.pkl), interpreted, never executed: a small stack
// machine for the opcodes torch.save and LibTorch's pickle_save write, which builds dicts, lists, tuples,
// scalars and strings, rebuilds tensors from the archive's data/<key> records through an allow-list of
// torch's rebuild functions, and keeps any other class or function as an opaque object named after it,
// never imported or called. LibTorch's own torch::pickle_load cannot stand in: it turns
// collections.OrderedDict, the type of every nn.Module.state_dict(), into None.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace caffe2::serialize {
class PyTorchStreamReader;
}  // namespace caffe2::serialize

namespace ranzcr::pickle {

struct PyObj;
using Obj = std::shared_ptr<PyObj>;

/// A Python object as far as a state dict needs it.
struct PyObj {
  enum Kind { kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kTensor, kGlobal, kOpaque };
  Kind kind = kNone;
  int64_t i = 0;           // kBool (0 or 1), kInt
  double f = 0;            // kFloat
  std::string s;           // kStr, kBytes; kGlobal and kOpaque: "module.name" of the class or function
  std::vector<Obj> items;  // kTuple, kList
  std::vector<std::pair<Obj, Obj>> entries;  // kDict, in insertion order
  torch::Tensor tensor;                      // kTensor
  int depth = 0;                             // levels of objects inside it (0: holds none)
  bool sealed = false;                       // held by another object, so never changed again
};

/// The object that `data_pkl`, the bytes of `archive`'s data.pkl, unpickles to; its tensors are read from
/// the archive's data/<key> records onto the CPU, views of one storage sharing it. Throws
/// std::runtime_error with a one-line message that does not name the file (the caller adds that) for a
/// truncated or corrupt pickle, an opcode it does not know, a quantized, sparse or other special tensor,
/// or a missing or short record; c10::Error from the archive reader or torch passes through.
Obj unpickle(const std::string& data_pkl, caffe2::serialize::PyTorchStreamReader& archive);

/// Reads every pickle of `archive` (data.pkl, constants.pkl, code/*.debug_pkl, ...) with the interpreter
/// above without reading the storages, and throws its one-line error (naming the record) if any is malformed,
/// has a string or storage longer than its bytes, a memo key out of sequence, or a tensor reaching past its
/// storage. For archives LibTorch's own unpickler then reads (checkpoints: torch::jit::load), which trusts
/// such values (it reserves what a length or memo key says before reading it).
void check_archive_pickles(caffe2::serialize::PyTorchStreamReader& archive);

}  // namespace ranzcr::pickle
