// `ranzcr serve` as other tools call it, and as attackers do:
// - tritonclient from PyPI (tests/apps/serve_triton_check.py): the Open Inference Protocol's real client gets
//   predict's probabilities for JPEG and DICOM files, outputs as binary data and as JSON;
// - the connection cap: a connection past --max-connections is closed at once and counted;
// - an upload still arriving at --timeout-ms: 504 then.
// (Slow clients: serve_hostile_test.cpp; malformed requests: serve_malformed_test.cpp.)
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
#include "tests/build_paths.h"
#include "tests/http_client.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace ranzcr {
namespace {

using nlohmann::json;
using test::run_command;

// A tiny_cnn trained 1 epoch and predict's CSV for its test JPEGs (the tritonclient test adds DICOM files).
class ServeProtocolTest : public test::TinyModelSuite<40, 64, 4, 1> {};

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
  const std::string bin = test::ranzcr_binary();
  auto made = run_command(bin + " synth --out " + (*dir_ / "dcm") +
                          " --num-images 10 --num-test-images 2 --image-size 128 --format dcm --seed 7");
  ASSERT_EQ(made.status, 0) << made.output;
  made = run_command(bin + " predict --checkpoint " + checkpoint() + " --images " + (*dir_ / "dcm/test") +
                     " --set data.image_ext=.dcm --out " + (*dir_ / "dcm.csv"));
  ASSERT_EQ(made.status, 0) << made.output;
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
      run_command(test::python() + " " + test::source_dir() +
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

}  // namespace
}  // namespace ranzcr
