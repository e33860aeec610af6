// torch.save's zip format (torch >= 1.6): a zip archive "<name>/data.pkl" (a pickle, protocol 2 by default)
// whose tensors refer by persistent id ('storage', torch.FloatStorage, "<key>", "cpu", numel) to raw
// little-endian records "<name>/data/<key>". LibTorch's torch::pickle_load reads that archive but turns
// collections.OrderedDict, the type of every nn.Module.state_dict(), into None and fails, so the pickle is
// interpreted here: a small stack machine that knows dicts, lists, tuples, scalars, strings and torch's
// tensor rebuild functions, and keeps any other class as an opaque object it never calls.
#include "engine/io/weight_file.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>

#include "engine/io/safetensors.h"

namespace ranzcr {
namespace {

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// A Python object as far as a state dict needs it.
struct PyObj;
using Obj = std::shared_ptr<PyObj>;
struct PyObj {
  enum Kind { kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kTensor, kGlobal, kOpaque };
  Kind kind = kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;           // kStr, kBytes; kGlobal and kOpaque: "module.name" of the class or function
  std::vector<Obj> items;  // kTuple, kList
  std::vector<std::pair<Obj, Obj>> entries;  // kDict
  torch::Tensor tensor;                      // kTensor
};

Obj make(PyObj::Kind kind) {
  auto o = std::make_shared<PyObj>();
  o->kind = kind;
  return o;
}
Obj make_int(int64_t v) {
  auto o = make(PyObj::kInt);
  o->i = v;
  return o;
}
Obj make_str(PyObj::Kind kind, std::string s) {
  auto o = make(kind);
  o->s = std::move(s);
  return o;
}
Obj make_tensor(torch::Tensor t) {
  auto o = make(PyObj::kTensor);
  o->tensor = std::move(t);
  return o;
}

torch::ScalarType storage_dtype(const std::string& storage_class) {
  static const std::map<std::string, torch::ScalarType> types = {
      {"torch.DoubleStorage", torch::kDouble}, {"torch.FloatStorage", torch::kFloat},
      {"torch.HalfStorage", torch::kHalf},     {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kLong},     {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},   {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},     {"torch.BoolStorage", torch::kBool}};
  auto it = types.find(storage_class);
  if (it == types.end()) throw std::runtime_error("unsupported tensor storage " + storage_class);
  return it->second;
}

class Unpickler {
 public:
  Unpickler(const std::string& bytes, caffe2::serialize::PyTorchStreamReader& reader)
      : bytes_(bytes), reader_(reader) {}

  Obj run() {
    for (;;) {
      const uint8_t op = u8();
      switch (op) {
        case 0x80:
          u8();
          break;  // PROTO
        case 0x95:
          take(8);
          break;  // FRAME
        case '.':
          return pop();  // STOP
        case '(':
          marks_.push_back(stack_.size());
          break;
        case '0':
          pop();
          break;
        case '1':
          pop_mark();
          break;
        case '2':
          push(top());
          break;
        case 'N':
          push(make(PyObj::kNone));
          break;
        case 0x88:
        case 0x89: {
          auto o = make(PyObj::kBool);
          o->i = op == 0x88;
          push(o);
          break;
        }
        case 'J':
          push(make_int(static_cast<int32_t>(le(4))));
          break;
        case 'K':
          push(make_int(static_cast<int64_t>(le(1))));
          break;
        case 'M':
          push(make_int(static_cast<int64_t>(le(2))));
          break;
        case 0x8a:
          push(make_int(long1(u8())));
          break;
        case 'G': {
          uint64_t bits = 0;
          for (int k = 0; k < 8; ++k) bits = (bits << 8) | u8();  // big-endian
          auto o = make(PyObj::kFloat);
          std::memcpy(&o->f, &bits, 8);
          push(o);
          break;
        }
        case 'X':
          push(make_str(PyObj::kStr, take(le(4))));
          break;
        case 0x8c:
          push(make_str(PyObj::kStr, take(u8())));
          break;
        case 0x8d:
          push(make_str(PyObj::kStr, take(le(8))));
          break;
        case 'T':
          push(make_str(PyObj::kBytes, take(le(4))));
          break;
        case 'U':
          push(make_str(PyObj::kBytes, take(u8())));
          break;
        case 'B':
          push(make_str(PyObj::kBytes, take(le(4))));
          break;
        case 'C':
          push(make_str(PyObj::kBytes, take(u8())));
          break;
        case ')':
          push(make(PyObj::kTuple));
          break;
        case 't': {
          auto o = make(PyObj::kTuple);
          o->items = pop_mark();
          push(o);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {
          auto o = make(PyObj::kTuple);
          const size_t n = op - 0x84;
          need(n);
          o->items.assign(stack_.end() - n, stack_.end());
          stack_.resize(stack_.size() - n);
          push(o);
          break;
        }
        case ']':
        case 0x8f:
          push(make(PyObj::kList));
          break;  // EMPTY_LIST, EMPTY_SET
        case 'l': {
          auto o = make(PyObj::kList);
          o->items = pop_mark();
          push(o);
          break;
        }
        case 'a': {
          Obj v = pop();
          top()->items.push_back(v);
          break;
        }
        case 'e':
        case 0x90: {  // APPENDS, ADDITEMS
          auto vs = pop_mark();
          auto& list = top()->items;
          list.insert(list.end(), vs.begin(), vs.end());
          break;
        }
        case '}':
          push(make(PyObj::kDict));
          break;
        case 'd': {
          auto o = make(PyObj::kDict);
          set_items(o, pop_mark());
          push(o);
          break;
        }
        case 's': {
          Obj v = pop(), k = pop();
          set_items(top(), {k, v});
          break;
        }
        case 'u': {
          auto kvs = pop_mark();
          set_items(top(), kvs);
          break;
        }
        case 'q':
          memo_[le(1)] = top();
          break;
        case 'r':
          memo_[le(4)] = top();
          break;
        case 0x94:
          memo_[memo_.size()] = top();
          break;  // MEMOIZE
        case 'h':
          push(memo(le(1)));
          break;
        case 'j':
          push(memo(le(4)));
          break;
        case 'c': {
          std::string module = line(), name = line();
          push(make_str(PyObj::kGlobal, module + "." + name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Obj name = pop(), module = pop();
          push(make_str(PyObj::kGlobal, module->s + "." + name->s));
          break;
        }
        case 'R': {
          Obj args = pop(), callable = pop();
          push(reduce(callable, args));
          break;
        }
        case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
          Obj args = pop(), cls = pop();
          push(reduce(cls, args));
          break;
        }
        case 'b':
          pop();
          break;  // BUILD: the state of an object (OrderedDict's _metadata, a Namespace's fields)
        case 'Q':
          push(persistent_load(pop()));
          break;
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          throw std::runtime_error(std::string("unsupported pickle opcode ") + hex + " at byte " +
                                   std::to_string(pos_ - 1) + " of data.pkl");
        }
      }
    }
  }

 private:
  uint8_t u8() {
    if (pos_ >= bytes_.size()) throw std::runtime_error("data.pkl ends early (truncated pickle)");
    return static_cast<uint8_t>(bytes_[pos_++]);
  }
  uint64_t le(int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v |= static_cast<uint64_t>(u8()) << (8 * k);
    return v;
  }
  int64_t long1(size_t n) {
    if (n > 8) throw std::runtime_error("an integer of more than 64 bits in data.pkl");
    uint64_t v = le(static_cast<int>(n));
    if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }
  std::string take(uint64_t n) {
    if (n > bytes_.size() - pos_) throw std::runtime_error("data.pkl ends early (truncated pickle)");
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string line() {
    const size_t end = bytes_.find('\n', pos_);
    if (end == std::string::npos) throw std::runtime_error("data.pkl ends early (truncated pickle)");
    std::string s = bytes_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  void need(size_t n) const {
    if (stack_.size() < n) throw std::runtime_error("corrupt pickle in data.pkl (stack underflow)");
  }
  void push(Obj o) { stack_.push_back(std::move(o)); }
  Obj pop() {
    need(1);
    Obj o = stack_.back();
    stack_.pop_back();
    return o;
  }
  const Obj& top() const {
    if (stack_.empty()) throw std::runtime_error("corrupt pickle in data.pkl (stack underflow)");
    return stack_.back();
  }
  std::vector<Obj> pop_mark() {
    if (marks_.empty() || marks_.back() > stack_.size())
      throw std::runtime_error("corrupt pickle in data.pkl (no mark)");
    std::vector<Obj> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Obj memo(uint64_t k) const {
    auto it = memo_.find(k);
    if (it == memo_.end()) throw std::runtime_error("corrupt pickle in data.pkl (unknown memo entry)");
    return it->second;
  }
  static void set_items(const Obj& dict, const std::vector<Obj>& kvs) {
    if (dict->kind != PyObj::kDict) return;  // items of an opaque object (a dict subclass we do not know)
    for (size_t k = 0; k + 1 < kvs.size(); k += 2) dict->entries.emplace_back(kvs[k], kvs[k + 1]);
  }
  static const Obj& arg(const Obj& args, size_t k, const std::string& fn) {
    if (args->kind != PyObj::kTuple || args->items.size() <= k)
      throw std::runtime_error("unexpected arguments to " + fn + " in data.pkl");
    return args->items[k];
  }
  static std::vector<int64_t> ints(const Obj& tuple, const std::string& fn) {
    if (tuple->kind != PyObj::kTuple) throw std::runtime_error("unexpected arguments to " + fn);
    std::vector<int64_t> v;
    for (const auto& o : tuple->items) {
      if (o->kind != PyObj::kInt) throw std::runtime_error("unexpected arguments to " + fn);
      v.push_back(o->i);
    }
    return v;
  }

  // callable(*args) for the functions and classes torch.save'd state dicts use; anything else becomes an
  // opaque object named after its class, an error only if the state dict is to be read from it.
  Obj reduce(const Obj& callable, const Obj& args) {
    const std::string fn = callable->kind == PyObj::kGlobal ? callable->s : "?";
    if (fn == "collections.OrderedDict" || fn == "builtins.dict") {
      auto d = make(PyObj::kDict);
      if (args->kind == PyObj::kTuple && !args->items.empty() && args->items[0]->kind == PyObj::kList)
        for (const auto& pair : args->items[0]->items)
          if (pair->kind == PyObj::kTuple && pair->items.size() == 2)
            d->entries.emplace_back(pair->items[0], pair->items[1]);
      return d;
    }
    if (fn == "torch._utils._rebuild_tensor_v2" || fn == "torch._utils._rebuild_tensor") {
      const Obj& storage = arg(args, 0, fn);
      if (storage->kind != PyObj::kTensor) throw std::runtime_error("unexpected arguments to " + fn);
      const int64_t offset = arg(args, 1, fn)->i;
      const auto size = ints(arg(args, 2, fn), fn), stride = ints(arg(args, 3, fn), fn);
      int64_t last = offset;  // the last element the view reaches
      for (size_t d = 0; d < size.size() && d < stride.size(); ++d)
        if (size[d] == 0) last = -1;
      for (size_t d = 0; last >= 0 && d < size.size() && d < stride.size(); ++d)
        last += (size[d] - 1) * stride[d];
      if (size.size() != stride.size() || offset < 0 || last >= storage->tensor.numel())
        throw std::runtime_error("a tensor reaches past the end of its storage in data.pkl");
      return make_tensor(storage->tensor.as_strided(size, stride, offset));
    }
    if (fn == "torch.jit._pickle.restore_type_tag" || fn.rfind("torch.jit._pickle.build_", 0) == 0)
      return arg(args, 0, fn);  // LibTorch's pickle_save: a typed dict or list, the value itself
    if (fn == "torch._utils._rebuild_parameter" || fn == "torch._utils._rebuild_parameter_with_state")
      return arg(args, 0, fn);
    if (fn == "torch._tensor._rebuild_from_type_v2")  // (func, type, args, state): func(*args)
      return reduce(arg(args, 0, fn), arg(args, 2, fn));
    if (fn.rfind("torch._utils._rebuild_", 0) == 0)
      throw std::runtime_error("a tensor saved by " + fn +
                               " (quantized, sparse or other special tensors) is not supported");
    return make_str(PyObj::kOpaque, fn);
  }

  // ('storage', torch.FloatStorage, key, location, numel): the record data/<key> as a 1-D tensor.
  Obj persistent_load(const Obj& pid) {
    if (pid->kind != PyObj::kTuple || pid->items.size() < 5 || pid->items[0]->s != "storage" ||
        pid->items[1]->kind != PyObj::kGlobal || pid->items[2]->kind != PyObj::kStr)
      throw std::runtime_error("unexpected persistent id in data.pkl (not a torch.save storage)");
    const std::string key = pid->items[2]->s;
    auto it = storages_.find(key);
    if (it != storages_.end()) return it->second;
    const torch::ScalarType dtype = storage_dtype(pid->items[1]->s);
    const int64_t numel = pid->items[4]->i;
    const std::string record = "data/" + key;
    const size_t nbytes = static_cast<size_t>(numel) * torch::elementSize(dtype);
    if (!reader_.hasRecord(record)) throw std::runtime_error("the archive lacks the record " + record);
    if (reader_.getRecordSize(record) < nbytes)
      throw std::runtime_error("the record " + record + " is shorter than its " + std::to_string(numel) +
                               " elements");
    torch::Tensor storage = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
    if (nbytes > 0) reader_.getRecord(record, storage.data_ptr(), nbytes);
    return storages_[key] = make_tensor(storage);
  }

  const std::string& bytes_;
  caffe2::serialize::PyTorchStreamReader& reader_;
  size_t pos_ = 0;
  std::vector<Obj> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Obj> memo_;
  std::map<std::string, Obj> storages_;
};

std::string describe(const Obj& o) {
  switch (o->kind) {
    case PyObj::kNone:
      return "None";
    case PyObj::kBool:
      return "a bool";
    case PyObj::kInt:
      return "an int";
    case PyObj::kFloat:
      return "a float";
    case PyObj::kStr:
      return "a str";
    case PyObj::kBytes:
      return "bytes";
    case PyObj::kTuple:
      return "a tuple";
    case PyObj::kList:
      return "a list";
    case PyObj::kDict:
      return "a dict";
    case PyObj::kTensor:
      return "a tensor";
    case PyObj::kGlobal:
      return "the function or class " + o->s;
    case PyObj::kOpaque:
      return "a pickled " + o->s + " object";
  }
  return "?";
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

NamedTensors read_torch_save(const std::string& path) {
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  std::string pickle;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    if (reader->hasRecord("byteorder")) {
      auto [data, size] = reader->getRecord("byteorder");
      if (std::string(static_cast<const char*>(data.get()), size) != "little")
        throw std::runtime_error(path +
                                 ": a torch.save archive written on a big-endian machine is not supported");
    }
    if (!reader->hasRecord("data.pkl"))
      throw std::runtime_error(path + ": a zip archive without data.pkl, not a torch.save file");
    auto [data, size] = reader->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(data.get()), size);
  } catch (const c10::Error& e) {
    throw std::runtime_error(
        path + ": cannot read the torch.save archive: " + first_line(e.what_without_backtrace()));
  }
  Obj root;
  try {
    root = Unpickler(pickle, *reader).run();
  } catch (const c10::Error& e) {
    throw std::runtime_error(path + ": " + first_line(e.what_without_backtrace()));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(path + ": " + first_line(e.what()));
  }

  NamedTensors tensors = tensors_of(root);
  if (!tensors.empty()) return tensors;
  if (root->kind == PyObj::kOpaque) {
    const bool torchscript = root->s.rfind("__torch__.", 0) == 0;
    throw std::runtime_error(
        path + ": holds " + describe(root) + ", not a state dict" +
        (torchscript ? " (a TorchScript archive written by torch.jit.save); re-save its weights in Python: "
                       "torch.save(torch.jit.load(PATH, map_location='cpu').state_dict(), 'weights.pth')"
                     : " (a whole model saved with torch.save(model)?); re-save its weights in Python: "
                       "torch.save(torch.load(PATH, map_location='cpu', weights_only=False).state_dict(), "
                       "'weights.pth')"));
  }
  if (root->kind != PyObj::kDict)
    throw std::runtime_error(path + ": holds " + describe(root) + ", not a state dict (a dict of tensors)");
  for (const char* wrapper : {"state_dict", "model", "state_dict_ema", "model_ema"})
    for (const auto& [k, v] : root->entries)
      if (k->kind == PyObj::kStr && k->s == wrapper) {
        tensors = tensors_of(v);
        if (!tensors.empty()) return tensors;
      }
  std::string keys, found;
  size_t listed = 0;
  for (const auto& [k, v] : root->entries) {
    if (listed++ == 8) {
      keys += ", ...";
      break;
    }
    keys += (keys.empty() ? "" : ", ") + (k->kind == PyObj::kStr ? k->s : describe(k)) + ": " + describe(v);
  }
  throw std::runtime_error(path +
                           ": no state dict found (a dict whose values are all tensors, at the top level "
                           "or under \"state_dict\", \"model\", \"state_dict_ema\" or \"model_ema\"); the " +
                           "file holds a dict of " + std::to_string(root->entries.size()) + " entries {" +
                           keys + "}" + kConvert);
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
  if (!in) throw std::runtime_error("cannot open " + path);
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
  const FileFormat format = file_format(path);
  NamedTensors tensors;
  if (format == FileFormat::kSafetensors) {
    tensors = load_safetensors(path).tensors;
  } else if (format == FileFormat::kZipArchive) {
    tensors = read_torch_save(path);
  } else if (format == FileFormat::kLegacyTorchSave) {
    throw std::runtime_error(
        path +
        ": the legacy torch.save format (torch < 1.6, or _use_new_zipfile_serialization=False) "
        "is not read; re-save it with torch >= 1.6: torch.save(torch.load(PATH, "
        "map_location='cpu'), 'weights.pth'), or write safetensors");
  } else {
    throw std::runtime_error(path +
                             ": neither a .safetensors file nor a torch.save archive (.pth/.bin, zip)");
  }
  if (tensors.empty()) throw std::runtime_error(path + ": holds no tensors");
  strip_prefixes(tensors);
  return tensors;
}

NamedTensors timm_names_from_torchvision(NamedTensors tensors) {
  bool stem = false, block = false;
  for (const auto& kv : tensors) {
    stem = stem || kv.first == "features.0.0.weight";
    block = block || kv.first.find(".block.") != std::string::npos;
  }
  if (!stem || !block) return tensors;

  // Split "features.S.rest" keys; the last S is the head conv. Within a block "features.S.I.block.J.rest",
  // the squeeze-excitation's J tells the layout: 1 for [depthwise, se, project] (timm's DepthwiseSeparable),
  // 2 for [expand, depthwise, se, project] (timm's InvertedResidual).
  auto split = [](const std::string& key,
                  size_t from) {  // (the number at `from` or -1, where the next part starts)
    const size_t dot = std::min(key.find('.', from), key.size());
    int n = dot > from && dot - from < 6 ? 0 : -1;
    for (size_t c = from; n >= 0 && c < dot; ++c)
      n = std::isdigit(static_cast<unsigned char>(key[c])) ? n * 10 + (key[c] - '0') : -1;
    return std::make_pair(n, std::min(dot + 1, key.size()));
  };
  int last_stage = 0;
  std::map<std::string, int> se_index;  // "S.I" -> J of the squeeze-excitation
  for (const auto& kv : tensors) {
    const std::string& k = kv.first;
    if (k.rfind("features.", 0) != 0) continue;
    auto [s, after_s] = split(k, 9);
    last_stage = std::max(last_stage, s);
    const size_t b = k.find(".block.", after_s - 1);
    if (b != std::string::npos && k.find(".fc1.", b) != std::string::npos) {
      auto [j, after_j] = split(k, b + 7);
      se_index[k.substr(9, b - 9)] = j;
    }
  }
  auto norm_act = [](const std::string& rest, const std::string& conv, const std::string& bn) {
    // Conv2dNormActivation: "0.weight" -> conv, "1.x" -> bn
    return rest.rfind("0.", 0) == 0 ? conv + "." + rest.substr(2) : bn + "." + rest.substr(2);
  };
  for (auto& kv : tensors) {
    std::string& k = kv.first;
    if (k.rfind("classifier.1.", 0) == 0) {
      k = "classifier." + k.substr(13);
      continue;
    }
    if (k.rfind("features.", 0) != 0) continue;
    auto [s, after_s] = split(k, 9);
    if (s < 0) continue;
    const std::string rest = k.substr(after_s);
    if (s == 0) {
      k = norm_act(rest, "conv_stem", "bn1");
      continue;
    }
    if (s == last_stage) {
      k = norm_act(rest, "conv_head", "bn2");
      continue;
    }
    // rest = "I.block.J.tail"
    auto [i, after_i] = split(k, after_s);
    const size_t b = k.find(".block.", after_i - 1);
    if (b == std::string::npos) continue;
    auto [j, after_j] = split(k, b + 7);
    if (i < 0 || j < 0) continue;
    const std::string tail = k.substr(after_j);
    const int se = se_index.count(k.substr(9, b - 9)) ? se_index[k.substr(9, b - 9)] : 2;
    const std::string prefix = "blocks." + std::to_string(s - 1) + "." + std::to_string(i) + ".";
    std::string name;
    if (j == se) {
      name = tail.rfind("fc1.", 0) == 0 ? "se.conv_reduce." + tail.substr(4)
                                        : "se.conv_expand." + tail.substr(4);
    } else if (se == 1) {  // depthwise, se, project
      name = j == 0 ? norm_act(tail, "conv_dw", "bn1") : norm_act(tail, "conv_pw", "bn2");
    } else {  // expand, depthwise, se, project
      name = j == 0   ? norm_act(tail, "conv_pw", "bn1")
             : j == 1 ? norm_act(tail, "conv_dw", "bn2")
                      : norm_act(tail, "conv_pwl", "bn3");
    }
    k = prefix + name;
  }
  return tensors;
}

}  // namespace ranzcr
