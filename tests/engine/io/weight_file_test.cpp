// read_weight_file on files written by the real torch.save (tests/engine/io/fixtures/make_torch_saved.py,
// torch 2.13).
#include "engine/io/weight_file.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include "tests/build_paths.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(test::source_dir()) + "/tests/engine/io/fixtures/" + name;
}

std::string error_of(const std::string& path) {
  try {
    read_weight_file(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// make_torch_saved.py's TinyNet state dict: the i-th floating tensor holds offset + i + 0.25 * [0, 1, ...].
void expect_tiny_net(const NamedTensors& t, double offset) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"features.0.weight", {4, 1, 3, 3}},
      {"features.1.weight", {4}},
      {"features.1.bias", {4}},
      {"features.1.running_mean", {4}},
      {"features.1.running_var", {4}},
      {"features.1.num_batches_tracked", {}},
      {"fc.weight", {3, 4}},
      {"fc.bias", {3}}};
  ASSERT_EQ(t.size(), expected.size());
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t[i].first, expected[i].first);
    EXPECT_EQ(t[i].second.sizes().vec(), expected[i].second) << t[i].first;
    if (t[i].first == "features.1.num_batches_tracked") {
      EXPECT_EQ(t[i].second.scalar_type(), torch::kLong);
      EXPECT_EQ(t[i].second.item<int64_t>(), 7);
      continue;
    }
    ASSERT_EQ(t[i].second.scalar_type(), torch::kFloat) << t[i].first;
    const auto want =
        (torch::arange(t[i].second.numel(), torch::kFloat32) * 0.25 + offset + i).reshape(expected[i].second);
    EXPECT_TRUE(torch::equal(t[i].second, want)) << t[i].first;
  }
}

TEST(WeightFile, ReadsAnOrderedDictStateDictAndDropsTheModulePrefix) {
  expect_tiny_net(read_weight_file(fixture("state_dict_module.pth")), 0.0);
}

TEST(WeightFile, UnwrapsACheckpointPreferringStateDictOverEmaAndDropsOrigMod) {
  expect_tiny_net(read_weight_file(fixture("checkpoint_nested.pth")), 0.0);
}

TEST(WeightFile, ReadsEmaWeightsWhenACheckpointHoldsNothingElse) {
  expect_tiny_net(read_weight_file(fixture("checkpoint_ema_only.pth")), 100.0);
}

// timm's train.py checkpoints carry "args": an argparse.Namespace; it is skipped, never executed.
TEST(WeightFile, SkipsANamespaceNextToTheStateDict) {
  expect_tiny_net(read_weight_file(fixture("checkpoint_with_args.pth")), 0.0);
}

TEST(WeightFile, KeepsHalfAndBFloat16AndIntegerDtypes) {
  const NamedTensors t = read_weight_file(fixture("half_precision.pth"));
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].first, "h");
  EXPECT_EQ(t[0].second.scalar_type(), torch::kHalf);
  EXPECT_TRUE(torch::equal(
      t[0].second,
      torch::tensor({0.5, -2.0, 65504.0, 0.00099945068359375}, torch::kFloat64).to(torch::kHalf)));
  EXPECT_EQ(t[1].first, "b");
  EXPECT_EQ(t[1].second.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(t[1].second,
                           torch::tensor({1.0, -0.5, 3.140625, 256.0}).reshape({2, 2}).to(torch::kBFloat16)));
  EXPECT_EQ(t[2].first, "f");
  EXPECT_TRUE(torch::equal(t[2].second, torch::arange(6, torch::kFloat32).reshape({2, 3}) * 0.5 - 1.0));
  EXPECT_EQ(t[3].first, "i");
  EXPECT_EQ(t[3].second.dim(), 0);
  EXPECT_EQ(t[3].second.item<int64_t>(), 12345678901LL);
}

// LibTorch's own torch::pickle_save writes the same archive format (a plain dict, non-contiguous views of
// one storage); the values come back exactly.
TEST(WeightFile, ReadsLibTorchPickleSaveArchives) {
  torch::manual_seed(0);
  const torch::Tensor base = torch::randn({4, 6});
  c10::Dict<std::string, torch::Tensor> dict;
  dict.insert("module.a", base);
  dict.insert("module.b_t", base.t());
  dict.insert("module.c_slice", base.slice(1, 2, 5));
  dict.insert("module.d_bool", torch::tensor({true, false, true}));
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  const std::string path = (fs::temp_directory_path() / "ranzcr_weight_file_pickle_save.pt").string();
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const NamedTensors t = read_weight_file(path);
  fs::remove(path);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].first, "a");
  EXPECT_TRUE(torch::equal(t[0].second, base));
  EXPECT_EQ(t[1].first, "b_t");
  EXPECT_TRUE(torch::equal(t[1].second, base.t()));
  EXPECT_EQ(t[2].first, "c_slice");
  EXPECT_TRUE(torch::equal(t[2].second, base.slice(1, 2, 5)));
  EXPECT_TRUE(torch::equal(t[3].second, torch::tensor({true, false, true})));
}

TEST(WeightFile, ReadsSafetensorsToo) {
  const NamedTensors t = read_weight_file(fixture("python_written.safetensors"));
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(t[0].first, "d.i64");  // file order: by data offset
}

void expect_one_line_with(const std::string& e, const std::vector<std::string>& parts) {
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "no '" << p << "' in: " << e;
}

TEST(WeightFile, LegacyFormatIsRefusedWithHowToResave) {
  const std::string path = fixture("legacy_format.pth");
  expect_one_line_with(error_of(path), {path, "legacy torch.save format",
                                        "_use_new_zipfile_serialization=False", "torch.save(torch.load("});
}

TEST(WeightFile, AWholePickledModelIsRefusedNamingItsClass) {
  const std::string path = fixture("whole_model.pth");
  expect_one_line_with(error_of(path), {path, "a pickled __main__.TinyNet object, not a state dict",
                                        "weights_only=False).state_dict(), 'weights.pth')"});
}

TEST(WeightFile, MissingCorruptForeignAndTensorlessFilesAreOneLineErrors) {
  expect_one_line_with(error_of("/nonexistent/w.pth"), {"cannot open /nonexistent/w.pth"});

  const std::string zip = (fs::temp_directory_path() / "ranzcr_weight_file_bad.pth").string();
  std::ofstream(zip, std::ios::binary) << "PK\x03\x04 not really a zip";
  expect_one_line_with(error_of(zip), {zip, "cannot read the torch.save archive"});

  const std::string text = (fs::temp_directory_path() / "ranzcr_weight_file_text.bin").string();
  std::ofstream(text, std::ios::binary) << "hello, not weights";
  expect_one_line_with(error_of(text), {text, "neither a .safetensors file nor a torch.save archive"});

  c10::Dict<std::string, int64_t> no_tensors;
  no_tensors.insert("epoch", 3);
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(no_tensors));
  std::ofstream(zip, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  expect_one_line_with(error_of(zip),
                       {zip, "no state dict found", "epoch: an int", "safetensors.torch.save_file"});
  fs::remove(zip);
  fs::remove(text);
}

// An archive as torch.save writes it, around a hand-made data.pkl, with one storage record data/0 of
// `record_bytes` bytes.
std::string archive_with_pickle(const std::string& name, const std::string& data_pkl,
                                size_t record_bytes = 16) {
  const std::string path = (fs::temp_directory_path() / name).string();
  caffe2::serialize::PyTorchStreamWriter writer(path);
  writer.writeRecord("byteorder", "little", 6);
  writer.writeRecord("data.pkl", data_pkl.data(), data_pkl.size());
  const std::string record(record_bytes, '\0');
  writer.writeRecord("data/0", record.data(), record.size());
  writer.writeEndOfFile();
  return path;
}

// A protocol 2 pickle written opcode by opcode.
class PickleBytes {
 public:
  PickleBytes() : b_("\x80\x02") {}
  PickleBytes& op(char c, size_t times = 1) {
    b_.append(times, c);
    return *this;
  }
  PickleBytes& str(const std::string& s) {  // BINUNICODE
    op('X').le(s.size(), 4);
    b_ += s;
    return *this;
  }
  PickleBytes& global(const std::string& module, const std::string& name) {  // GLOBAL
    b_ += 'c' + module + '\n' + name + '\n';
    return *this;
  }
  PickleBytes& int1(uint8_t v) { return op('K').le(v, 1); }                         // BININT1
  PickleBytes& int4(int32_t v) { return op('J').le(static_cast<uint32_t>(v), 4); }  // BININT
  PickleBytes& long1(uint64_t v) { return op('\x8a').le(8, 1).le(v, 8); }           // LONG1, 8 bytes
  PickleBytes& put(uint8_t k) { return op('q').le(k, 1); }                          // BINPUT
  PickleBytes& get(uint8_t k) { return op('h').le(k, 1); }                          // BINGET
  /// ('storage', torch.FloatStorage, '0', 'cpu', numel) as a persistent id, loaded (BINPERSID).
  PickleBytes& storage(const std::function<void(PickleBytes&)>& numel) {
    op('(').str("storage").global("torch", "FloatStorage").str("0").str("cpu");
    numel(*this);
    return op('t').op('Q');
  }
  std::string done() { return b_ + "."; }

 private:
  PickleBytes& le(uint64_t v, int n) {
    for (int k = 0; k < n; ++k) b_ += static_cast<char>((v >> (8 * k)) & 0xff);
    return *this;
  }
  std::string b_;
};

TEST(WeightFile, ADeeplyNestedPickleIsOneLineNotAStackOverflow) {
  // 100000 empty lists, each appended to the one below it: a list nested 100000 deep (a recursive
  // reader or destructor would overflow the stack; Python's own pickle module stops at its recursion limit).
  const int n = 100000;
  const std::string path =
      archive_with_pickle("ranzcr_nested.pth", PickleBytes().op(']', n).op('a', n - 1).done());
  expect_one_line_with(error_of(path), {path, "data.pkl: objects nest more than 100 deep"});
  fs::remove(path);
}

TEST(WeightFile, ARecursivePickleIsRefused) {
  // l = []; l.append(l): a list that holds itself.
  const std::string path =
      archive_with_pickle("ranzcr_recursive.pth", PickleBytes().op(']').put(0).get(0).op('a').done());
  expect_one_line_with(error_of(path), {path, "(an object changed after it was used"});
  // A tuple made to hold itself as the arguments of torch._tensor._rebuild_from_type_v2, whose reader would
  // otherwise recurse forever: items are appended to lists only.
  const std::string tuple_path =
      archive_with_pickle("ranzcr_recursive_tuple.pth", PickleBytes()
                                                            .op(')')
                                                            .put(0)
                                                            .global("torch._tensor", "_rebuild_from_type_v2")
                                                            .put(1)
                                                            .op('a')
                                                            .op('N')
                                                            .op('a')
                                                            .get(0)
                                                            .op('a')
                                                            .get(1)
                                                            .get(0)
                                                            .op('R')
                                                            .done());
  expect_one_line_with(error_of(tuple_path), {tuple_path, "appended to something that is not a list"});
  fs::remove(path);
  fs::remove(tuple_path);
}

TEST(WeightFile, AStorageLargerThanItsRecordIsRefusedBeforeAllocating) {
  // {'w': ('storage', torch.FloatStorage, '0', 'cpu', N)} over a record of 16 bytes: 2^40 floats (4 TiB)
  // are never asked for, nor 2^62 (whose byte count wraps 64 bits), nor -1.
  const std::vector<std::pair<std::function<void(PickleBytes&)>, std::string>> cases = {
      {[](PickleBytes& p) { p.long1(uint64_t{1} << 40); }, "shorter than its 1099511627776 elements"},
      {[](PickleBytes& p) { p.long1(uint64_t{1} << 62); }, "shorter than its 4611686018427387904 elements"},
      {[](PickleBytes& p) { p.int4(-1); }, "a storage size that is not a count"}};
  for (const auto& [numel, shown] : cases) {
    const std::string path = archive_with_pickle(
        "ranzcr_huge_storage.pth", PickleBytes().op('}').str("w").storage(numel).op('s').done());
    expect_one_line_with(error_of(path), {path, shown});
    fs::remove(path);
  }
}

TEST(WeightFile, ATensorViewPastItsStorageOrWithOverflowingStridesIsRefused) {
  // {'w': _rebuild_tensor_v2(storage of 4 floats, 0, size, stride, False, OrderedDict())}: (2, 2) with
  // stride (2, 1) fits; (3, 2) does not; (2^62, 2) with stride (2^62, 1) wraps 64 bits when its reach is
  // computed.
  using Dims = std::function<void(PickleBytes&)>;
  auto pickle = [](const Dims& size, const Dims& stride) {
    PickleBytes p;
    p.op('}').str("w").global("torch._utils", "_rebuild_tensor_v2").op('(');
    p.storage([](PickleBytes& q) { q.int1(4); }).int1(0);
    size(p);
    stride(p);
    return p.op('\x89').global("collections", "OrderedDict").op(')').op('R').op('t').op('R').op('s').done();
  };
  auto two = [](uint64_t a, uint64_t b) {
    return [a, b](PickleBytes& p) { p.long1(a).long1(b).op('\x86'); };
  };
  const std::string fits = archive_with_pickle("ranzcr_view.pth", pickle(two(2, 2), two(2, 1)));
  const NamedTensors t = read_weight_file(fits);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].second.sizes().vec(), (std::vector<int64_t>{2, 2}));
  fs::remove(fits);
  const uint64_t big = uint64_t{1} << 62;
  for (const auto& [size, stride] :
       std::vector<std::pair<Dims, Dims>>{{two(3, 2), two(2, 1)}, {two(big, 2), two(big, 1)}}) {
    const std::string path = archive_with_pickle("ranzcr_view_past.pth", pickle(size, stride));
    expect_one_line_with(error_of(path), {path, "a tensor reaches past the end of its storage"});
    fs::remove(path);
  }
}

}  // namespace
}  // namespace ranzcr
