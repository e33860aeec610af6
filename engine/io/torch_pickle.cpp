// The unpickler behind torch_pickle.h: read_instruction() reads one opcode (named as PyTorch's
// torch/csrc/jit/serialization/pickler_helper.h names them) and hands it to the handler of its group:
// framing, stack and memo; scalars and strings; collections; globals, calls and persistent ids. A call
// (REDUCE, NEWOBJ) is looked up in an allow-list of dict constructors and torch's tensor rebuild functions;
// anything else becomes an opaque object.
#include "engine/io/torch_pickle.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "core/check.h"

namespace ranzcr::pickle {
namespace {

// The opcodes read. The others (the text-mode FLOAT, INT, LONG, STRING, UNICODE, GET, PUT, PERSID, INST
// and OBJ; EXT1/2/4, LONG4, BINBYTES8, FROZENSET, NEWOBJ_EX, ...) are refused as unsupported: state dicts
// saved by torch.save or pickle_save do not need them.
// clang-format off
enum class PickleOpCode : char {
  // Protocol 0-1
  MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', BININT = 'J', BININT1 = 'K', BININT2 = 'M',
  NONE = 'N', BINPERSID = 'Q', REDUCE = 'R', BINSTRING = 'T', SHORT_BINSTRING = 'U', BINUNICODE = 'X',
  APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd', EMPTY_DICT = '}', APPENDS = 'e', BINGET = 'h',
  LONG_BINGET = 'j', LIST = 'l', EMPTY_LIST = ']', BINPUT = 'q', LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't',
  EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
  // Protocol 2
  PROTO = char('\x80'), NEWOBJ = '\x81', TUPLE1 = '\x85', TUPLE2 = '\x86', TUPLE3 = '\x87', NEWTRUE = '\x88',
  NEWFALSE = '\x89', LONG1 = '\x8a',
  // Protocol 3
  BINBYTES = 'B', SHORT_BINBYTES = 'C',
  // Protocol 4
  SHORT_BINUNICODE = char('\x8c'), BINUNICODE8 = '\x8d', EMPTY_SET = '\x8f', ADDITEMS = '\x90',
  STACK_GLOBAL = '\x93', MEMOIZE = '\x94', FRAME = '\x95'
};
// clang-format on

const char* const kTruncated = "the pickle ends early (truncated)";
// Containers nest at most this deep (a state dict needs 4 or 5 levels; Python's own limit is ~1000).
constexpr int kMaxDepth = 100;
// Memo entries at most (one per object a pickle shares; a state dict has a few per tensor).
constexpr size_t kMaxMemo = 1u << 22;
const char* const kUnderflow = "corrupt pickle (stack underflow)";

Obj make(PyObj::Kind kind) {
  auto o = std::make_shared<PyObj>();
  o->kind = kind;
  return o;
}
Obj make_int(PyObj::Kind kind, int64_t v) {  // kInt, kBool
  auto o = make(kind);
  o->i = v;
  return o;
}
Obj make_str(PyObj::Kind kind, std::string s) {  // kStr, kBytes, kGlobal, kOpaque
  auto o = make(kind);
  o->s = std::move(s);
  return o;
}
void adopt(PyObj& parent, const Obj& child);
Obj make_items(PyObj::Kind kind, std::vector<Obj> items) {  // kTuple, kList
  auto o = make(kind);
  for (const Obj& item : items) adopt(*o, item);
  o->items = std::move(items);
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
  RANZCR_CHECK(it != types.end(), "unsupported tensor storage ", storage_class);
  return it->second;
}

// Makes `child` part of `parent` (an item, key or value): the child is sealed, never to change again, and
// the parent is at least one level deeper. Python's pickler writes every object whole before anything
// holds it, so a state dict never changes what is already held; a pickle that would (a list appended to
// itself, a cycle through the memo) is refused, and the objects stay a tree of bounded depth, freed
// without leaks and walked without unbounded recursion.
void adopt(PyObj& parent, const Obj& child) {
  child->sealed = true;  // first: an object put into itself is then sealed too
  RANZCR_CHECK(!parent.sealed,
               "corrupt pickle (an object changed after it was used: a "
               "recursive structure?)");
  RANZCR_CHECK(child->depth < kMaxDepth, "objects nest more than ", kMaxDepth, " deep");
  parent.depth = std::max(parent.depth, child->depth + 1);
}

// The items of a dict (DICT, SETITEM, SETITEMS): key, value, key, value, ...
void set_items(const Obj& dict, const std::vector<Obj>& kvs) {
  RANZCR_CHECK(kvs.size() % 2 == 0, "corrupt pickle (a key without a value)");
  for (const Obj& o : kvs) adopt(*dict, o);
  if (dict->kind != PyObj::kDict) return;  // items of an opaque object (a dict subclass we do not know)
  for (size_t k = 0; k + 1 < kvs.size(); k += 2) dict->entries.emplace_back(kvs[k], kvs[k + 1]);
}

const Obj& arg(const Obj& args, size_t k, const std::string& fn) {
  RANZCR_CHECK(args->kind == PyObj::kTuple && args->items.size() > k, "unexpected arguments to ", fn);
  return args->items[k];
}

std::vector<int64_t> ints(const Obj& tuple, const std::string& fn) {
  RANZCR_CHECK(tuple->kind == PyObj::kTuple, "unexpected arguments to ", fn);
  std::vector<int64_t> v;
  for (const auto& o : tuple->items) {
    RANZCR_CHECK(o->kind == PyObj::kInt, "unexpected arguments to ", fn);
    v.push_back(o->i);
  }
  return v;
}

// collections.OrderedDict([(key, value), ...]) or dict(...); OrderedDict() with its items set later.
Obj make_dict(const Obj& args) {
  auto d = make(PyObj::kDict);
  if (args->kind == PyObj::kTuple && !args->items.empty() && args->items[0]->kind == PyObj::kList)
    for (const auto& pair : args->items[0]->items)
      if (pair->kind == PyObj::kTuple && pair->items.size() == 2) {
        adopt(*d, pair->items[0]);
        adopt(*d, pair->items[1]);
        d->entries.emplace_back(pair->items[0], pair->items[1]);
      }
  return d;
}

// The last element a view of `size` and `stride` from `offset` reaches, -1 when it is empty; also -1 (and
// `ok` false) for negative values or a reach past 2^63.
int64_t view_end(int64_t offset, const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                 bool* ok) {
  *ok = offset >= 0 && size.size() == stride.size();
  int64_t last = offset;
  for (size_t d = 0; *ok && d < size.size(); ++d) {
    *ok = size[d] >= 0 && stride[d] >= 0;
    if (*ok && size[d] == 0) return -1;
  }
  for (size_t d = 0; *ok && d < size.size(); ++d) {
    int64_t reach = 0;
    *ok = !__builtin_mul_overflow(size[d] - 1, stride[d], &reach) &&
          !__builtin_add_overflow(last, reach, &last);
  }
  return *ok ? last : -1;
}

// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...): a view of the storage, which it
// must not reach past.
Obj rebuild_tensor(const Obj& args, const std::string& fn) {
  const Obj& storage = arg(args, 0, fn);
  const Obj& offset = arg(args, 1, fn);
  RANZCR_CHECK(storage->kind == PyObj::kTensor && offset->kind == PyObj::kInt, "unexpected arguments to ",
               fn);
  const auto size = ints(arg(args, 2, fn), fn), stride = ints(arg(args, 3, fn), fn);
  bool ok = false;
  const int64_t last = view_end(offset->i, size, stride, &ok);
  RANZCR_CHECK(ok && last < storage->tensor.numel(), "a tensor reaches past the end of its storage");
  return make_tensor(storage->tensor.as_strided(size, stride, offset->i));
}

// callable(*args) for the functions and classes torch.save'd state dicts use; anything else becomes an
// opaque object named after its class, an error only if the state dict is to be read from it.
Obj call(const Obj& callable, const Obj& args) {
  const std::string fn = callable->kind == PyObj::kGlobal ? callable->s : "?";
  if (fn == "collections.OrderedDict" || fn == "builtins.dict") return make_dict(args);
  if (fn == "torch._utils._rebuild_tensor_v2" || fn == "torch._utils._rebuild_tensor")
    return rebuild_tensor(args, fn);
  if (fn == "torch.jit._pickle.restore_type_tag" || fn.rfind("torch.jit._pickle.build_", 0) == 0)
    return arg(args, 0, fn);  // LibTorch's pickle_save: a typed dict or list, the value itself
  if (fn == "torch._utils._rebuild_parameter" || fn == "torch._utils._rebuild_parameter_with_state")
    return arg(args, 0, fn);
  if (fn == "torch._tensor._rebuild_from_type_v2")  // (func, type, args, state): func(*args)
    return call(arg(args, 0, fn), arg(args, 2, fn));
  RANZCR_CHECK(fn.rfind("torch._utils._rebuild_", 0) != 0, "a tensor saved by ", fn,
               " (quantized, sparse or other special tensors) is not supported");
  return make_str(PyObj::kOpaque, fn);
}

class Unpickler {
 public:
  // `bytes`: the archive's record `record` (data.pkl, constants.pkl, ...), named in every error.
  Unpickler(const std::string& record, const std::string& bytes,
            caffe2::serialize::PyTorchStreamReader& archive, bool read_storages)
      : record_(record), bytes_(bytes), archive_(archive), read_storages_(read_storages) {}

  Obj run() {
    try {
      while (read_instruction() != PickleOpCode::STOP) {
      }
      return pop();
    } catch (const std::runtime_error& e) {
      RANZCR_FAIL(record_, ": ", e.what());
    }
  }

 private:
  // Reads one opcode with its arguments and applies it.
  PickleOpCode read_instruction() {
    const size_t at = pos_;
    const auto op = static_cast<PickleOpCode>(static_cast<char>(u8()));
    if (!(stack_op(op) || scalar_op(op) || collection_op(op) || object_op(op))) unsupported(op, at);
    return op;
  }

  [[noreturn]] static void unsupported(PickleOpCode op, size_t at) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", static_cast<unsigned>(static_cast<uint8_t>(op)));
    RANZCR_FAIL("unsupported pickle opcode ", hex, " at byte ", at);
  }

  // Framing, STOP (run() pops the result), marks, the stack and the memo.
  bool stack_op(PickleOpCode op) {
    switch (op) {
      case PickleOpCode::PROTO:
        u8();
        return true;
      case PickleOpCode::FRAME:
        take(8);
        return true;
      case PickleOpCode::STOP:
        return true;
      case PickleOpCode::MARK:
        marks_.push_back(stack_.size());
        return true;
      case PickleOpCode::POP:
        pop();
        return true;
      case PickleOpCode::POP_MARK:
        pop_mark();
        return true;
      case PickleOpCode::DUP:
        return pushed(top());
      case PickleOpCode::BINPUT:
        return put(1);
      case PickleOpCode::LONG_BINPUT:
        return put(4);
      case PickleOpCode::MEMOIZE:
        return put(0);
      case PickleOpCode::BINGET:
        return pushed(memo(le(1)));
      case PickleOpCode::LONG_BINGET:
        return pushed(memo(le(4)));
      default:
        return false;
    }
  }

  // None, bools, ints, floats, str and bytes.
  bool scalar_op(PickleOpCode op) {
    switch (op) {
      case PickleOpCode::NONE:
        return pushed(make(PyObj::kNone));
      case PickleOpCode::NEWTRUE:
      case PickleOpCode::NEWFALSE:
        return pushed(make_int(PyObj::kBool, op == PickleOpCode::NEWTRUE));
      case PickleOpCode::BININT:
        return pushed(make_int(PyObj::kInt, static_cast<int32_t>(le(4))));
      case PickleOpCode::BININT1:
        return pushed(make_int(PyObj::kInt, static_cast<int64_t>(le(1))));
      case PickleOpCode::BININT2:
        return pushed(make_int(PyObj::kInt, static_cast<int64_t>(le(2))));
      case PickleOpCode::LONG1:
        return pushed(make_int(PyObj::kInt, long1(u8())));
      case PickleOpCode::BINFLOAT:
        return pushed(binfloat());
      case PickleOpCode::BINUNICODE:
        return pushed(make_str(PyObj::kStr, take(le(4))));
      case PickleOpCode::SHORT_BINUNICODE:
        return pushed(make_str(PyObj::kStr, take(u8())));
      case PickleOpCode::BINUNICODE8:
        return pushed(make_str(PyObj::kStr, take(le(8))));
      case PickleOpCode::BINSTRING:
      case PickleOpCode::BINBYTES:
        return pushed(make_str(PyObj::kBytes, take(le(4))));
      case PickleOpCode::SHORT_BINSTRING:
      case PickleOpCode::SHORT_BINBYTES:
        return pushed(make_str(PyObj::kBytes, take(u8())));
      default:
        return false;
    }
  }

  // Tuples, lists (and sets, read as lists) and dicts: built empty, from a mark, or added to.
  bool collection_op(PickleOpCode op) {
    switch (op) {
      case PickleOpCode::TUPLE1:
      case PickleOpCode::TUPLE2:
      case PickleOpCode::TUPLE3:
        return push_tuple(op == PickleOpCode::TUPLE1 ? 1 : op == PickleOpCode::TUPLE2 ? 2 : 3);
      case PickleOpCode::TUPLE:
        return pushed(make_items(PyObj::kTuple, pop_mark()));
      case PickleOpCode::EMPTY_TUPLE:
        return pushed(make(PyObj::kTuple));
      case PickleOpCode::EMPTY_LIST:
      case PickleOpCode::EMPTY_SET:
        return pushed(make(PyObj::kList));
      case PickleOpCode::LIST:
        return pushed(make_items(PyObj::kList, pop_mark()));
      case PickleOpCode::APPEND:
      case PickleOpCode::APPENDS:
      case PickleOpCode::ADDITEMS:
        return append(op == PickleOpCode::APPEND);
      case PickleOpCode::EMPTY_DICT:
        return pushed(make(PyObj::kDict));
      case PickleOpCode::DICT:
      case PickleOpCode::SETITEM:
      case PickleOpCode::SETITEMS:
        return dict_op(op);
      default:
        return false;
    }
  }

  // Classes and functions (by name only), calls, object state and tensor storages.
  bool object_op(PickleOpCode op) {
    switch (op) {
      case PickleOpCode::GLOBAL: {
        const std::string module = line();
        const std::string name = line();
        return pushed(make_str(PyObj::kGlobal, module + "." + name));
      }
      case PickleOpCode::STACK_GLOBAL: {
        const Obj name = pop();
        const Obj module = pop();
        return pushed(make_str(PyObj::kGlobal, module->s + "." + name->s));
      }
      case PickleOpCode::REDUCE:    // callable(*args)
      case PickleOpCode::NEWOBJ: {  // cls.__new__(cls, *args)
        const Obj args = pop();
        const Obj callable = pop();
        return pushed(call(callable, args));
      }
      case PickleOpCode::BUILD:  // the state of an object (OrderedDict's _metadata, a Namespace's fields)
        pop();
        return true;
      case PickleOpCode::BINPERSID:
        return pushed(persistent_load(pop()));
      default:
        return false;
    }
  }

  // BINPUT, LONG_BINPUT (a key of `key_bytes` bytes) and MEMOIZE (key_bytes 0: the next free key).
  bool put(int key_bytes) {
    const Obj value = top();
    const uint64_t key = key_bytes > 0 ? le(key_bytes) : memo_.size();
    // Picklers number memo entries 0, 1, 2, ...; a key further on is refused (LibTorch's own unpickler
    // reserves room up to twice the key).
    RANZCR_CHECK(key <= memo_.size(), "corrupt pickle (memo key ", key, " out of sequence)");
    RANZCR_CHECK(memo_.size() < kMaxMemo || memo_.count(key), "the pickle memoizes more than ", kMaxMemo,
                 " objects");
    memo_[key] = value;
    return true;
  }

  bool push_tuple(size_t n) {  // TUPLE1, TUPLE2, TUPLE3
    need(n);
    auto o = make_items(PyObj::kTuple,
                        std::vector<Obj>(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end()));
    stack_.resize(stack_.size() - n);
    return pushed(o);
  }

  bool append(bool one) {  // APPEND one value; APPENDS, ADDITEMS those since the mark
    std::vector<Obj> vs;
    if (one)
      vs.push_back(pop());
    else
      vs = pop_mark();
    const Obj& list = top();
    RANZCR_CHECK(list->kind == PyObj::kList || list->kind == PyObj::kOpaque,
                 "corrupt pickle (items appended to something that is not a list)");
    for (const Obj& v : vs) adopt(*list, v);
    if (list->kind == PyObj::kList) list->items.insert(list->items.end(), vs.begin(), vs.end());
    return true;
  }

  bool dict_op(PickleOpCode op) {  // DICT, SETITEM, SETITEMS
    if (op == PickleOpCode::DICT) {
      auto o = make(PyObj::kDict);
      set_items(o, pop_mark());
      push(o);
    } else if (op == PickleOpCode::SETITEM) {
      Obj v = pop();
      Obj k = pop();
      set_items(top(), {k, v});
    } else {
      auto kvs = pop_mark();
      set_items(top(), kvs);
    }
    return true;
  }

  // ('storage', torch.FloatStorage, key, location, numel): the record data/<key> as a 1-D tensor.
  Obj persistent_load(const Obj& pid) {
    RANZCR_CHECK(pid->kind == PyObj::kTuple && pid->items.size() >= 5 && pid->items[0]->s == "storage" &&
                     pid->items[1]->kind == PyObj::kGlobal && pid->items[2]->kind == PyObj::kStr,
                 "unexpected persistent id (not a torch.save storage)");
    const std::string key = pid->items[2]->s;
    auto it = storages_.find(key);
    if (it != storages_.end()) return it->second;
    const torch::ScalarType dtype = storage_dtype(pid->items[1]->s);
    RANZCR_CHECK(pid->items[4]->kind == PyObj::kInt && pid->items[4]->i >= 0,
                 "unexpected persistent id (a storage size that is not a count)");
    const int64_t numel = pid->items[4]->i;
    const std::string record = "data/" + key;
    RANZCR_CHECK(archive_.hasRecord(record), "the archive lacks the record ", record);
    const size_t element = torch::elementSize(dtype);
    const size_t record_bytes = archive_.getRecordSize(record);
    RANZCR_CHECK(static_cast<uint64_t>(numel) <= record_bytes / element, "the record ", record,
                 " is shorter than its ", numel, " elements");
    const size_t nbytes = static_cast<size_t>(numel) * element;
    RANZCR_CHECK(nbytes == record_bytes, "the record ", record, " holds ", record_bytes, " bytes, not the ",
                 nbytes, " of its ", numel, " elements");  // as torch.load requires
    if (!read_storages_)  // checking only: a storage of the right size that holds nothing (nothing allocated)
      return storages_[key] =
                 make_tensor(torch::empty({numel}, torch::TensorOptions().dtype(dtype).device(torch::kMeta)));
    torch::Tensor storage = torch::empty({numel}, torch::TensorOptions().dtype(dtype));
    if (nbytes > 0) archive_.getRecord(record, storage.data_ptr(), nbytes);
    return storages_[key] = make_tensor(storage);
  }

  // Reading the bytes.
  uint8_t u8() {
    RANZCR_CHECK(pos_ < bytes_.size(), kTruncated);
    return static_cast<uint8_t>(bytes_[pos_++]);
  }
  uint64_t le(int n) {  // little-endian, n bytes
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v |= static_cast<uint64_t>(u8()) << (8 * k);
    return v;
  }
  int64_t long1(size_t n) {  // LONG1's two's complement integer of n bytes
    RANZCR_CHECK(n <= 8, "an integer of more than 64 bits");
    uint64_t v = le(static_cast<int>(n));
    if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<int64_t>(v);
  }
  Obj binfloat() {  // BINFLOAT's big-endian double
    uint64_t bits = 0;
    for (int k = 0; k < 8; ++k) bits = (bits << 8) | u8();
    auto o = make(PyObj::kFloat);
    std::memcpy(&o->f, &bits, 8);
    return o;
  }
  std::string take(uint64_t n) {
    RANZCR_CHECK(n <= bytes_.size() - pos_, kTruncated);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string line() {
    const size_t end = bytes_.find('\n', pos_);
    RANZCR_CHECK(end != std::string::npos, kTruncated);
    std::string s = bytes_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }

  // The stack, its marks and the memo.
  void need(size_t n) const { RANZCR_CHECK(stack_.size() >= n, kUnderflow); }
  void push(Obj o) { stack_.push_back(std::move(o)); }
  bool pushed(Obj o) {  // for the handlers: push, and say the opcode was handled
    push(std::move(o));
    return true;
  }
  Obj pop() {
    need(1);
    Obj o = stack_.back();
    stack_.pop_back();
    return o;
  }
  const Obj& top() const {
    need(1);
    return stack_.back();
  }
  std::vector<Obj> pop_mark() {
    RANZCR_CHECK(!marks_.empty() && marks_.back() <= stack_.size(), "corrupt pickle (no mark)");
    std::vector<Obj> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Obj memo(uint64_t k) const {
    auto it = memo_.find(k);
    RANZCR_CHECK(it != memo_.end(), "corrupt pickle (unknown memo entry)");
    return it->second;
  }

  const std::string record_;
  const std::string& bytes_;
  caffe2::serialize::PyTorchStreamReader& archive_;
  const bool read_storages_;
  size_t pos_ = 0;
  std::vector<Obj> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Obj> memo_;
  std::map<std::string, Obj> storages_;
};

}  // namespace

Obj unpickle(const std::string& data_pkl, caffe2::serialize::PyTorchStreamReader& archive) {
  return Unpickler("data.pkl", data_pkl, archive, /*read_storages=*/true).run();
}

void check_archive_pickles(caffe2::serialize::PyTorchStreamReader& archive) {
  for (const std::string& name : archive.getAllRecords()) {
    if (name.size() < 3 || name.compare(name.size() - 3, 3, "pkl") != 0) continue;  // .pkl, .debug_pkl
    auto [data, size] = archive.getRecord(name);
    const std::string bytes(static_cast<const char*>(data.get()), size);
    Unpickler(name, bytes, archive, /*read_storages=*/false).run();
  }
}

}  // namespace ranzcr::pickle
