// `ranzcr serve` against malformed requests, one gtest test each (17): a 4xx JSON error in our words (no
// library text in the body or a header), then the next good request on a new connection is answered. One
// process runs them all against one server (ctest: ServeMalformed.Requests), so the model is trained once.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "tests/apps/serve_server.h"
#include "tests/http_client.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using nlohmann::json;

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

class ServeMalformedTest
    : public test::TinyModelSuite<20, 32, 1, 1, /*kPredict=*/false, ::testing::TestWithParam<Malformed>> {
 protected:
  static void SetUpTestSuite() {
    ASSERT_NO_FATAL_FAILURE(TinyModelSuite::SetUpTestSuite());
    server_ =
        new test::ServeProcess(*dir_ / "serve.log", {"--checkpoint", checkpoint(), "--max-body-mb", "1"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    TinyModelSuite::TearDownTestSuite();
  }
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
