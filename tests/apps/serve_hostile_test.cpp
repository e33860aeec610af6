// `ranzcr serve` against clients that do not play by the rules, and against a client it did not write:
// - slow clients (tests/apps/serve_slow_clients.py, real sockets in another process): 1,000 connections
// trickle
//   a header (or a body) a byte a second and 1,000 more sit idle, while a good client's probe and inference
//   are each answered within 1 s for 20 s; the trickling sockets are closed within a few seconds of their
//   deadline; the server's RSS is reported;
// - malformed requests, one test each: a 4xx JSON error in our words, then the next good request is answered;
// - tritonclient from PyPI (tests/apps/serve_triton_check.py): the Open Inference Protocol's real client gets
//   predict's probabilities for a JPEG and a DICOM file, outputs as binary data and as JSON.
// These run alone (RUN_SERIAL): the latency bound is about the server, not about a machine busy with other
// tests.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "data/csv.h"
#include "tests/apps/serve_server.h"
#include "tests/build_paths.h"
#include "tests/http_client.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using nlohmann::json;
using test::run_command;

// A tiny_cnn trained 2 epochs and predict's CSV for its test JPEGs.
class ServeSlowClientsTest : public test::TinyModelSuite<80, 64, 4, 2> {
 protected:
  // The slow-clients script against a server with default limits: its figures (one JSON line) and status.
  static void slow_clients(const std::string& mode) {
    test::ServeProcess server(*dir_ / ("serve-" + mode + ".log"), {"--checkpoint", checkpoint()});
    ASSERT_GT(server.port(), 0) << server.log();
    const auto r =
        run_command(test::python() + " " + test::source_dir() + "/tests/apps/serve_slow_clients.py --port " +
                    std::to_string(server.port()) + " --pid " + std::to_string(server.pid()) + " --image " +
                    jpeg(0) + " --mode " + mode + " --seconds 20 --deadline 10");
    std::cout << r.output;  // the figures: latencies, sockets closed, RSS before, at its peak, after
    ASSERT_EQ(r.status, 0) << r.output << server.log();
    const json figures = json::parse(r.output.substr(0, r.output.find('\n')));
    EXPECT_GE(figures["good_requests"].get<int>(), 20);
    EXPECT_GE(figures["trickling_due"].get<int>(), 1000);
    // Bounded memory: 2,000 hostile connections at a time cost at most 64 MiB over the idle server.
    EXPECT_LT(figures["rss_kib_peak"].get<long>() - figures["rss_kib_before"].get<long>(), 64 << 10)
        << r.output;
    const auto metrics = server.client().Get("/metrics");
    ASSERT_TRUE(metrics);
    const std::string kind = mode == "header" ? "header_timeout" : "body_timeout";
    EXPECT_NE(metrics->body.find("ranzcr_serve_limits_total{kind=\"" + kind + "\"}"), std::string::npos)
        << metrics->body;
    EXPECT_NE(metrics->body.find("ranzcr_serve_limits_total{kind=\"idle_timeout\"}"), std::string::npos);
  }
};

TEST_F(ServeSlowClientsTest, TricklingHeadersAndIdleSocketsCannotStarveIt) {
  slow_clients("header");
}

TEST_F(ServeSlowClientsTest, TricklingBodiesAndIdleSocketsCannotStarveIt) {
  slow_clients("body");
}

}  // namespace
}  // namespace ranzcr
