// The Open Inference Protocol's reading and writing without a server: requests as tritonclient writes them
// (binary-data extension, BYTES elements with 4-byte lengths), plain JSON with base64, every refusal in our
// words; answers whose binary part holds the little-endian values the JSON header sizes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>

#include "engine/serve/inference_protocol.h"

namespace ranzcr {
namespace {

using nlohmann::json;
const std::vector<std::string> kOutputs{"probabilities", "decisions"};

std::string bytes_element(const std::string& s) {
  std::string out(4, '\0');
  const uint32_t n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + s;
}

TEST(InferenceProtocol, BinaryRequestAsTritonclientWritesIt) {
  const std::string blob = bytes_element("JPEG-1") + bytes_element(std::string("\0\xff", 2));
  const std::string head =
      json{{"id", "r1"},
           {"inputs",
            {{{"name", "image"},
              {"shape", {2}},
              {"datatype", "BYTES"},
              {"parameters", {{"binary_data_size", blob.size()}}}}}},
           {"outputs", {{{"name", "probabilities"}, {"parameters", {{"binary_data", true}}}}}}}
          .dump();
  const InferRequest r = parse_infer_request(head + blob, std::to_string(head.size()), kOutputs);
  EXPECT_EQ(r.id, "r1");
  ASSERT_EQ(r.images.size(), 2u);
  EXPECT_EQ(r.images[0], "JPEG-1");
  EXPECT_EQ(r.images[1], std::string("\0\xff", 2));
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(r.outputs[0].binary);
}

TEST(InferenceProtocol, JsonRequestWithBase64AndDefaultOutputs) {
  const std::string body =
      R"({"inputs":[{"name":"image","shape":[1,1],"datatype":"BYTES","parameters":{"content_type":"base64"},)"
      R"("data":[["aGVsbG8="]]}],"parameters":{"binary_data_output":true}})";
  const InferRequest r = parse_infer_request(body, "", kOutputs);
  ASSERT_EQ(r.images.size(), 1u);
  EXPECT_EQ(r.images[0], "hello");
  ASSERT_EQ(r.outputs.size(), 2u);  // every output, binary as the request asks
  EXPECT_TRUE(r.outputs[0].binary && r.outputs[1].binary);
}

TEST(InferenceProtocol, RefusalsNameWhatIsWrong) {
  const auto error = [](const std::string& body, const std::string& length = "") {
    try {
      parse_infer_request(body, length, kOutputs);
    } catch (const ProtocolError& e) {
      EXPECT_EQ(e.status, 400);
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("{not json"), "the inference request is not valid JSON (at byte 3)");
  EXPECT_EQ(error("[]"), "the inference request must be a JSON object");
  EXPECT_NE(error(R"({"inputs":[]})").find("a list of one input"), std::string::npos);
  EXPECT_EQ(error(R"({"inputs":[{"name":"pixels","shape":[1],"datatype":"BYTES","data":["x"]}]})"),
            "unknown input 'pixels': the model's input is 'image'");
  EXPECT_NE(error(R"({"inputs":[{"name":"image","shape":[1],"datatype":"FP32","data":[1]}]})").find("BYTES"),
            std::string::npos);
  EXPECT_EQ(error(R"({"inputs":[{"name":"image","shape":[2],"datatype":"BYTES","data":["x"]}]})"),
            "input 'image' has 1 elements, its shape says 2");
  EXPECT_NE(
      error(R"({"inputs":[{"name":"image","shape":[-1],"datatype":"BYTES","data":["x"]}]})").find("shape"),
      std::string::npos);
  EXPECT_NE(error(R"({"inputs":[{"name":"image","shape":[1],"datatype":"BYTES","data":["*"],)"
                  R"("parameters":{"content_type":"base64"}}]})")
                .find("not base64"),
            std::string::npos);
  EXPECT_NE(error(R"({"inputs":[{"name":"image","shape":[1],"datatype":"BYTES","data":["x"]}],)"
                  R"("outputs":[{"name":"logits"}]})")
                .find("unknown output 'logits'"),
            std::string::npos);
  const std::string head = R"({"inputs":[{"name":"image","shape":[1],"datatype":"BYTES",)"
                           R"("parameters":{"binary_data_size":9}}]})";
  EXPECT_NE(error(head + bytes_element("abc"), std::to_string(head.size())).find("binary_data_size"),
            std::string::npos);  // 7 bytes, not 9
  EXPECT_NE(error(head + std::string(9, '\xff'), std::to_string(head.size())).find("longer"),
            std::string::npos);
  EXPECT_NE(error(head, "99999").find("Inference-Header-Content-Length"), std::string::npos);
  EXPECT_NE(error(head, "-5").find("Inference-Header-Content-Length"), std::string::npos);
  EXPECT_NE(error(head, "184467440737095516160").find("Inference-Header-Content-Length"), std::string::npos);
}

// A client's nesting must not drive our recursion down the stack (100,000 levels: a crash before the bound),
// and a number out of range is a 400 in our words, not the library's exception (a 500 before).
TEST(InferenceProtocol, DeepNestingAndHugeNumbersAreRefused) {
  const std::string deep = R"({"inputs":[{"name":"image","shape":[1],"datatype":"BYTES","data":)" +
                           std::string(100000, '[') + "\"x\"" + std::string(100000, ']') + "}]}";
  try {
    parse_infer_request(deep, "", kOutputs);
    FAIL() << "accepted";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("nested deeper than 8"), std::string::npos) << e.what();
  }
  const std::string huge = R"({"id":"a","x":1e999,"inputs":[]})";
  try {
    parse_infer_request(huge, "", kOutputs);
    FAIL() << "accepted";
  } catch (const ProtocolError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(std::string(e.what()).find("1e999"), std::string::npos) << e.what();  // no library text
  }
}

TEST(InferenceProtocol, AnswerBinaryAndJson) {
  InferRequest request;
  request.id = "7";
  request.outputs = {{"decisions", false}, {"probabilities", true}};
  const std::vector<OutputTensor> tensors{{"probabilities", "FP64", 1, 2, {0.25, 0.125}, {}},
                                          {"decisions", "INT32", 1, 2, {}, {1, -1}}};
  const InferAnswer a = write_infer_answer("cxr", "1", request, tensors);
  ASSERT_GT(a.header_length, 0);
  const json head = json::parse(a.body.substr(0, static_cast<size_t>(a.header_length)));
  EXPECT_EQ(head["model_name"], "cxr");
  EXPECT_EQ(head["id"], "7");
  EXPECT_EQ(head["outputs"][0]["name"], "decisions");  // in the order asked
  EXPECT_EQ(head["outputs"][0]["data"], json({1, -1}));
  EXPECT_EQ(head["outputs"][1]["parameters"]["binary_data_size"], 16);
  EXPECT_EQ(head["outputs"][1]["shape"], json({1, 2}));
  ASSERT_EQ(a.body.size(), static_cast<size_t>(a.header_length) + 16);
  double v[2];
  std::memcpy(v, a.body.data() + a.header_length, 16);
  EXPECT_EQ(v[0], 0.25);
  EXPECT_EQ(v[1], 0.125);

  request.outputs = {{"probabilities", false}};
  const InferAnswer plain = write_infer_answer("cxr", "1", request, tensors);
  EXPECT_EQ(plain.header_length, -1);
  EXPECT_EQ(json::parse(plain.body)["outputs"][0]["data"], json({0.25, 0.125}));
}

TEST(InferenceProtocol, Base64AsRfc4648) {
  std::string out;
  for (const auto& [in, want] : std::vector<std::pair<std::string, std::string>>{{"", ""},
                                                                                 {"Zg==", "f"},
                                                                                 {"Zm8=", "fo"},
                                                                                 {"Zm9v", "foo"},
                                                                                 {"Zm9vYg", "foob"},
                                                                                 {"Zm9vYmFy", "foobar"}}) {
    ASSERT_TRUE(base64_decode(in, out)) << in;
    EXPECT_EQ(out, want) << in;
  }
  EXPECT_FALSE(base64_decode("Zm9v!", out));
  EXPECT_FALSE(base64_decode("Z", out));
  EXPECT_FALSE(base64_decode("Zg=", out));  // padded, not a multiple of 4
  EXPECT_FALSE(base64_decode("Zm9v\n", out));
}

}  // namespace
}  // namespace ranzcr
