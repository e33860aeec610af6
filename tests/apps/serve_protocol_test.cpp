// `ranzcr serve` as other tools call it, and as attackers do:
// - tritonclient from PyPI (tests/apps/serve_triton_check.py): the Open Inference Protocol's real client gets
//   predict's probabilities for JPEG and DICOM files, outputs as binary data and as JSON;
// - the connection cap: a connection past --max-connections is closed at once and counted;
// - malformed requests, one test each: a 4xx JSON error in our words, then the next good request is answered.
// (Slow clients: serve_hostile_test.cpp.)
#include <gtest/gtest.h>

#include <poll.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "data/csv.h"
#include "data/synth.h"
#include "tests/apps/serve_server.h"
#include "tests/http_client.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using nlohmann::json;
using test::run_command;

// A tiny_cnn trained 2 epochs, predict's CSV for its test JPEGs and for synthetic DICOM files.
class ServeProtocolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::make_dataset(*dir_ / "ds", 80, 64, 4);
    test::write_config(*dir_ / "cfg.yaml", *dir_ / "ds",
                       {{"train.epochs", "2"}, {"output.dir", *dir_ / "run"}});
    const std::string bin = RANZCR_BINARY;
    auto r = run_command(bin + " train --config " + (*dir_ / "cfg.yaml"));
    ASSERT_EQ(r.status, 0) << r.output;
    r = run_command(bin + " predict --checkpoint " + checkpoint() + " --images " + (*dir_ / "ds/test") +
                    " --out " + (*dir_ / "sub.csv"));
    ASSERT_EQ(r.status, 0) << r.output;
    r = run_command(bin + " synth --out " + (*dir_ / "dcm") +
                    " --num-images 10 --num-test-images 2 --image-size 128 --format dcm --seed 7");
    ASSERT_EQ(r.status, 0) << r.output;
    r = run_command(bin + " predict --checkpoint " + checkpoint() + " --images " + (*dir_ / "dcm/test") +
                    " --set data.image_ext=.dcm --out " + (*dir_ / "dcm.csv"));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string checkpoint() { return *dir_ / "run/checkpoints/best.pt"; }
  static std::string jpeg(int i) {
    return *dir_ / ("ds/test/" + read_csv(*dir_ / "sub.csv").rows.at(i)[0] + ".jpg");
  }

  static inline test::TempDir* dir_ = nullptr;
};

// Past --max-connections, a new connection is closed at once and counted; the ones open keep working.
TEST_F(ServeProtocolTest, ConnectionsPastTheCapAreClosedAtOnce) {
  test::ServeProcess server(*dir_ / "serve-cap.log",
                            {"--checkpoint", checkpoint(), "--max-connections", "3"});
  ASSERT_GT(server.port(), 0) << server.log();
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) held.push_back(test::connect_local(server.port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int extra = test::connect_local(server.port());
  ASSERT_GE(extra, 0);
  char c;
  pollfd p{extra, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 2000), 1) << "the connection past the cap was not closed";
  EXPECT_EQ(::recv(extra, &c, 1, 0), 0);  // closed, no answer
  ::close(extra);
  ASSERT_TRUE(test::send_all(held[0], "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string rest;
  const auto metrics = test::read_response(held[0], 10, rest);
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("ranzcr_serve_limits_total{kind=\"connections\"} 1"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("ranzcr_serve_connections_open 3"), std::string::npos) << metrics->body;
  for (int fd : held) ::close(fd);
}

// tritonclient[http] (PyPI) calls is_server_live, is_model_ready, get_model_metadata and infer with a JPEG
// and a DICOM file as BYTES inputs, outputs as binary data and as JSON: predict's probabilities within 1e-6.
TEST_F(ServeProtocolTest, TritonClientGetsPredictsNumbers) {
  test::ServeProcess server(*dir_ / "serve-triton.log",
                            {"--checkpoint", checkpoint(), "--model-name", "cxr"});
  ASSERT_GT(server.port(), 0) << server.log();
  json cases = json::array();
  for (const auto& [csv, folder, ext] :
       {std::tuple<std::string, std::string, std::string>{"sub.csv", "ds/test", ".jpg"},
        {"dcm.csv", "dcm/test", ".dcm"}}) {
    const CsvTable t = read_csv(*dir_ / csv);
    for (const auto& row : t.rows) {
      json probs = json::array();
      for (const auto& label : ranzcr_label_names()) probs.push_back(std::stod(row[t.column(label)]));
      cases.push_back({{"file", *dir_ / (folder + "/" + row[0] + ext)}, {"probabilities", probs}});
    }
  }
  test::write_file(*dir_ / "triton_cases.json", cases.dump());
  const auto r =
      run_command(test::python() + " " + RANZCR_SOURCE_DIR +
                  "/tests/apps/serve_triton_check.py --url 127.0.0.1:" + std::to_string(server.port()) +
                  " --model cxr --cases " + (*dir_ / "triton_cases.json"));
  if (r.status == 77) {
    ASSERT_EQ(std::getenv("CI"), nullptr) << "CI=true and no tritonclient in .venv: " << r.output;
    GTEST_SKIP() << r.output;
  }
  ASSERT_EQ(r.status, 0) << r.output << server.log();
  EXPECT_NE(r.output.find("\"files\": 6"), std::string::npos) << r.output;
}

// An upload still arriving --timeout-ms after its header is answered 504 then, not after the body's own
// (longer) deadline; the server goes on.
TEST_F(ServeProtocolTest, ABodyStillArrivingAtTheRequestDeadlineIs504) {
  test::ServeProcess server(*dir_ / "serve-504.log", {"--checkpoint", checkpoint(), "--timeout-ms", "1500"});
  ASSERT_GT(server.port(), 0) << server.log();
  const int fd = test::connect_local(server.port());
  ASSERT_GE(fd, 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      test::send_all(fd, "POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc"));
  std::string rest;
  const auto r = test::read_response(fd, 10, rest);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(fd);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 504) << r->body;
  EXPECT_NE(r->body.find("--timeout-ms (1500 ms)"), std::string::npos) << r->body;
  EXPECT_GT(took, 1.4);
  EXPECT_LT(took, 4.0);  // the body's deadline would be 10 s
  const auto next = server.client().Get("/v2/health/ready");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
}

// ---- malformed requests: each answered with a 4xx JSON error in our words, then the next good request is
// ----

struct Malformed {
  const char* name;
  std::string bytes;
  std::vector<int> statuses;  // acceptable answers (a bare-LF request may be answered as a good one)
};

void PrintTo(const Malformed& m, std::ostream* os) {  // ctest's test names show this
  *os << m.name;
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::vector<Malformed> malformed_cases() {
  const std::string host = "Host: 127.0.0.1\r\n";
  const std::string mib_and_more = repeat("100000\r\n" + std::string(0x100000, 'x') + "\r\n", 2);
  return {
      {"InvalidUtf8InPath", "GET /v2/\xff\xfe HTTP/1.1\r\n" + host + "\r\n", {400}},
      {"InvalidUtf8EscapedInPath", "GET /v2/%ff HTTP/1.1\r\n" + host + "\r\n", {400}},
      {"InvalidUtf8InQuery",
       "POST /v1/cam?labels=%ff HTTP/1.1\r\n" + host + "Content-Length: 1\r\n\r\nx",
       {400}},
      {"InvalidUtf8InHeader", "GET /healthz HTTP/1.1\r\n" + host + "X-Name: caf\xe9\r\n\r\n", {400}},
      {"NulInHeader", "GET /healthz HTTP/1.1\r\n" + host + std::string("X-Name: a\0b\r\n\r\n", 14), {400}},
      {"NulInPath", "GET /v2/a%00b HTTP/1.1\r\n" + host + "\r\n", {400}},
      {"NulInRequestLine", std::string("GET /v2\0 HTTP/1.1\r\n", 19) + host + "\r\n", {400}},
      {"OversizedHeaderLine",
       "GET /healthz HTTP/1.1\r\n" + host + "X-Big: " + std::string(20000, 'a') + "\r\n\r\n",
       {431}},
      {"TooManyHeaders",
       "GET /healthz HTTP/1.1\r\n" + host + repeat("X-Many: abcdefghij\r\n", 1000) + "\r\n",
       {431}},
      {"NegativeContentLength", "POST /v1/predict HTTP/1.1\r\n" + host + "Content-Length: -1\r\n\r\n", {400}},
      {"OverflowingContentLength",
       "POST /v1/predict HTTP/1.1\r\n" + host + "Content-Length: 184467440737095516160\r\n\r\n",
       {400, 413}},
      {"DuplicateContentLength",
       "POST /v1/predict HTTP/1.1\r\n" + host + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
       {400}},
      {"ChunkedOverflowingSize",
       "POST /v1/predict HTTP/1.1\r\n" + host +
           "Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFFFF\r\nx\r\n",
       {400, 413}},
      {"ChunkedPastTheBodyLimit",
       "POST /v1/predict HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n" + mib_and_more +
           "0\r\n\r\n",
       {413}},
      {"Http09", "GET /\r\n\r\n", {400}},
      {"BareLineFeeds", "GET /healthz HTTP/1.1\nHost: 127.0.0.1\n\n", {400, 200}},
      {"NotHttp", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS hello\r\n\r\n", {400}},
  };
}

class ServeMalformedTest : public ::testing::TestWithParam<Malformed> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::make_dataset(*dir_ / "ds", 20, 32, 1);
    test::write_config(*dir_ / "cfg.yaml", *dir_ / "ds",
                       {{"train.epochs", "1"}, {"output.dir", *dir_ / "run"}});
    const auto r = run_command(std::string(RANZCR_BINARY) + " train --config " + (*dir_ / "cfg.yaml"));
    ASSERT_EQ(r.status, 0) << r.output;
    server_ = new test::ServeProcess(
        *dir_ / "serve.log", {"--checkpoint", *dir_ / "run/checkpoints/best.pt", "--max-body-mb", "1"});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static inline test::TempDir* dir_ = nullptr;
  static inline test::ServeProcess* server_ = nullptr;
};

TEST_P(ServeMalformedTest, IsA4xxJsonErrorAndTheServerGoesOn) {
  ASSERT_GT(server_->port(), 0) << server_->log();
  const Malformed& m = GetParam();
  const int fd = test::connect_local(server_->port());
  ASSERT_GE(fd, 0);
  test::send_all(fd, m.bytes);  // the server may refuse before it has read everything
  std::string rest;
  const auto r = test::read_response(fd, 15, rest);
  ::close(fd);
  ASSERT_TRUE(r) << "no answer";
  EXPECT_NE(std::find(m.statuses.begin(), m.statuses.end(), r->status), m.statuses.end())
      << r->status << " " << r->body;
  if (r->status != 200) {
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    const json body = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(body.is_object() && body.contains("error")) << r->body;
    const std::string error = body["error"].get<std::string>();
    for (const char* library :
         {"beast", "boost", "asio", "nlohmann", "json.exception", "what()", "EXCEPTION"})
      EXPECT_EQ(error.find(library), std::string::npos) << error;
    for (const auto& [name, value] : r->headers) EXPECT_EQ(name.find("EXCEPTION"), std::string::npos) << name;
  }
  const auto next = server_->client().Get("/v2/health/ready");
  ASSERT_TRUE(next) << "the server stopped answering";
  EXPECT_EQ(next->status, 200);
}

INSTANTIATE_TEST_SUITE_P(Requests, ServeMalformedTest, ::testing::ValuesIn(malformed_cases()),
                         [](const ::testing::TestParamInfo<Malformed>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ranzcr
