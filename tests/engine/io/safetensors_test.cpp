#include "engine/io/safetensors.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include "tests/build_paths.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;

const torch::Tensor& find(const SafetensorsFile& f, const std::string& name) {
  for (const auto& kv : f.tensors)
    if (kv.first == name) return kv.second;
  throw std::runtime_error("no tensor " + name);
}

std::string error_of(const std::string& bytes) {
  try {
    parse_safetensors(bytes, "x.safetensors");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripKeepsNamesDtypesShapesValuesAndMetadata) {
  torch::manual_seed(0);
  const std::vector<std::pair<std::string, torch::Tensor>> tensors = {
      {"conv.weight", torch::randn({4, 1, 3, 3})},
      {"bn.num_batches_tracked", torch::tensor(int64_t{7})},
      {"half", torch::randn({3, 5}).to(torch::kFloat16)},
      {"bf", torch::randn({2, 7}).to(torch::kBFloat16)},
      {"strided", torch::arange(12, torch::kFloat64).reshape({3, 4}).t()},  // non-contiguous input
      {"empty", torch::zeros({0, 2})},
      {"mask", torch::tensor({true, false, true})},
  };
  const std::string path = (fs::temp_directory_path() / "ranzcr_safetensors_roundtrip.safetensors").string();
  save_safetensors(path, tensors, {{"model", "resnet18"}, {"format", "pt"}});
  const SafetensorsFile back = load_safetensors(path);
  fs::remove(path);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first);  // file order = written order
    const auto& got = back.tensors[i].second;
    EXPECT_EQ(got.scalar_type(), tensors[i].second.scalar_type()) << tensors[i].first;
    EXPECT_EQ(got.sizes(), tensors[i].second.sizes()) << tensors[i].first;
    EXPECT_TRUE(torch::equal(got, tensors[i].second)) << tensors[i].first;
  }
  EXPECT_EQ(back.metadata, (std::map<std::string, std::string>{{"model", "resnet18"}, {"format", "pt"}}));
}

TEST(Safetensors, HeaderIsPaddedTo8BytesAndLittleEndian) {
  const std::string bytes = serialize_safetensors({{"x", torch::tensor({1.0f})}});
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 4);
  EXPECT_EQ(bytes[8], '{');
  const float one = 1.0f;
  EXPECT_EQ(bytes.substr(8 + n), std::string(reinterpret_cast<const char*>(&one), 4));
}

// Written by the real `safetensors` package (0.8.0, safetensors.torch.save_file) with
// tests/engine/io/fixtures/make_python_written.py.
TEST(Safetensors, ReadsAFileWrittenByThePythonPackage) {
  const SafetensorsFile f = load_safetensors(std::string(test::source_dir()) +
                                             "/tests/engine/io/fixtures/python_written.safetensors");
  EXPECT_EQ(f.tensors.size(), 5u);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("writer").rfind("safetensors ", 0), 0u);

  const auto& a = find(f, "a.f32");
  EXPECT_EQ(a.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(a, torch::arange(6, torch::kFloat32).reshape({2, 3}) * 0.5 - 1.0));

  const auto& b = find(f, "b.f16");
  EXPECT_EQ(b.scalar_type(), torch::kFloat16);
  EXPECT_TRUE(
      torch::equal(b.to(torch::kFloat32), torch::tensor({0.5f, -2.0f, 65504.0f, 0.00099945068359375f})));

  const auto& c = find(f, "c.bf16");
  EXPECT_EQ(c.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(
      torch::equal(c.to(torch::kFloat32), torch::tensor({1.0f, -0.5f, 3.140625f, 256.0f}).reshape({2, 2})));

  const auto& d = find(f, "d.i64");
  EXPECT_EQ(d.scalar_type(), torch::kInt64);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_EQ(d.item<int64_t>(), 12345678901);

  const auto& e = find(f, "e.empty");
  EXPECT_EQ(e.sizes(), (std::vector<int64_t>{0, 3}));
}

TEST(Safetensors, TruncatedOrCorruptFilesGiveOneLineErrors) {
  const std::string good =
      serialize_safetensors({{"w", torch::ones({4, 4})}, {"n", torch::tensor(int64_t{3})}});
  auto one_line = [](const std::string& msg) { return msg.find('\n') == std::string::npos; };

  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, good.size() - 1}) {
    const std::string msg = error_of(good.substr(0, cut));
    EXPECT_NE(msg.find("x.safetensors: not a valid safetensors file"), std::string::npos)
        << cut << ": " << msg;
    EXPECT_TRUE(one_line(msg)) << msg;
  }
  EXPECT_NE(error_of(good.substr(0, good.size() - 1)).find("truncated"), std::string::npos);

  std::string huge = good;
  huge[7] = '\x7f';  // header length ~ 2^62
  EXPECT_NE(error_of(huge).find("implausible"), std::string::npos);

  std::string not_json = good;
  not_json[8] = '[';
  EXPECT_NE(error_of(not_json).find("not a JSON object"), std::string::npos);

  EXPECT_NE(error_of(good + "junk").find("bytes after the last tensor"), std::string::npos);

  auto with_header = [](const std::string& json, size_t data_bytes) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
    return out + json + std::string(data_bytes, '\0');
  };
  EXPECT_NE(error_of(with_header(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2))
                .find("unsupported dtype"),
            std::string::npos);
  EXPECT_NE(error_of(with_header(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8))
                .find("8 bytes for a F32 tensor of 3 elements"),
            std::string::npos);
  EXPECT_NE(error_of(with_header(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                 12))
                .find("overlapping or gapped"),
            std::string::npos);
  EXPECT_NE(error_of(with_header(R"({"w":{"dtype":"F32","shape":[2]}})", 8)).find("needs dtype, shape"),
            std::string::npos);
  // A file of about 100 bytes claiming a tensor of 2^62 elements (2^64 bytes: the product used to wrap to
  // 0 and pass the size check, then torch::empty failed with LibTorch's multi-line error): one line,
  // nothing allocated.
  for (const char* shape : {"[4611686018427387904]", "[2147483648,2147483648]", "[1099511627776]"}) {
    const std::string file =
        with_header(std::string(R"({"w":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,0]}})", 0);
    EXPECT_LT(file.size(), 200u);
    const std::string msg = error_of(file);
    EXPECT_NE(msg.find(" elements"), std::string::npos) << shape << ": " << msg;
    EXPECT_TRUE(one_line(msg)) << msg;
  }
  EXPECT_NE(error_of(with_header(R"({"__metadata__":{"k":1}})", 0)).find("not a string"), std::string::npos);

  try {
    load_safetensors("/nonexistent/dir/w.safetensors");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open /nonexistent/dir/w.safetensors"), std::string::npos);
  }
}

TEST(Safetensors, RejectsRepeatedNames) {
  EXPECT_THROW(serialize_safetensors({{"w", torch::ones({1})}, {"w", torch::ones({1})}}), std::runtime_error);
}

}  // namespace
}  // namespace ranzcr
