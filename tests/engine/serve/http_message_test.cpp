// serve's request checks without a server: UTF-8 validation (against Python's decoder's verdicts on the same
// bytes), percent-decoding and the target split, and error bodies that stay JSON whatever the message holds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/serve/http_message.h"

namespace ranzcr {
namespace {

TEST(HttpMessage, Utf8AsPythonDecodesIt) {
  // Each verdict is what bytes.decode("utf-8") says of the same bytes.
  EXPECT_TRUE(valid_utf8(""));
  EXPECT_TRUE(valid_utf8("plain ascii"));
  EXPECT_TRUE(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
  EXPECT_FALSE(valid_utf8("\xff"));
  EXPECT_FALSE(valid_utf8("caf\xe9"));           // Latin-1
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(valid_utf8("\xe0\x80\xaf"));      // overlong, 3 bytes
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(valid_utf8("\xe2\x82"));          // cut short
  EXPECT_FALSE(valid_utf8("\x80"));              // a continuation byte first
  EXPECT_TRUE(valid_utf8("\xf4\x8f\xbf\xbf"));   // U+10FFFF
}

TEST(HttpMessage, TargetSplitsAndDecodes) {
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  split_target("/v1/cam?labels=CVC%20-%20Normal&labels=all&x&y=a+b", path, query);
  EXPECT_EQ(path, "/v1/cam");
  ASSERT_EQ(query.size(), 4u);
  EXPECT_EQ(query[0], (std::pair<std::string, std::string>{"labels", "CVC - Normal"}));
  EXPECT_EQ(query[1].second, "all");
  EXPECT_EQ(query[2], (std::pair<std::string, std::string>{"x", ""}));
  EXPECT_EQ(query[3].second, "a b");
  split_target("/v2/models/a%2Bb", path, query);
  EXPECT_EQ(path, "/v2/models/a+b");  // '+' is a space only in a query
  EXPECT_TRUE(query.empty());
}

TEST(HttpMessage, BadTargetsAreOneLineErrors) {
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;
  const auto error = [&](const std::string& target) {
    try {
      split_target(target, path, query);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("/v1/cam?labels=%ff"), "the query is not valid UTF-8");
  EXPECT_EQ(error("/v1/%ff"), "the path is not valid UTF-8");
  EXPECT_EQ(error("/v1/\xff"), "the request target is not valid UTF-8");
  EXPECT_EQ(error("/v1/a%00"), "the path holds a NUL byte");
  EXPECT_EQ(error("/v1/a%2"), "bad percent escape in the path");
  EXPECT_EQ(error("/v1?x=%zz"), "bad percent escape in the query");
}

TEST(HttpMessage, ErrorBodiesStayJsonWhateverTheMessageHolds) {
  const std::string body = json_error("no label '\xff\xfe' here");
  EXPECT_EQ(body.back(), '\n');
  const auto parsed = nlohmann::json::parse(body);
  EXPECT_EQ(parsed["error"].get<std::string>(), "no label '\xef\xbf\xbd\xef\xbf\xbd' here");  // U+FFFD twice
  const HttpResponse r = error_response(413, "too large");
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, "{\"error\":\"too large\"}\n");
}

}  // namespace
}  // namespace ranzcr
