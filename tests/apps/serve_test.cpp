// `ranzcr serve` as a real process on a free port, called over HTTP (tests/http_client.h): the numbers equal
// predict's for the same files, also when requests arrive together and run as one batch; the refusals (400,
// 401, 404, 413, 503, 504) are one-line JSON and the server goes on serving; SIGTERM finishes what is in
// flight and exits 0; the web page in a real browser (Chromium through Selenium:
// tests/apps/serve_page_check.py).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>

#include <cmath>
#include <future>
#include <regex>
#include <string>
#include <thread>
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

const std::vector<std::string>& kLabels = ranzcr_label_names();  // what synth writes

std::optional<test::HttpResult> post_file(const test::HttpClient& client, const std::string& path,
                                          const std::string& file, const test::HttpHeaders& headers = {}) {
  return client.Post(path, headers, test::read_file(file), "application/octet-stream");
}

// An upload whose client stops halfway through the body (a raw socket): the server has started on it, so an
// open batch waits for it, until finish() sends the rest or the server's read timeout drops it.
class StalledUpload {
 public:
  StalledUpload(int port, const std::string& file) : body_(test::read_file(file)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    const std::string head =
        "POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
        "Content-Length: " +
        std::to_string(body_.size()) + "\r\n\r\n";
    send_all(head + body_.substr(0, body_.size() / 2));
  }
  ~StalledUpload() { ::close(fd_); }
  void finish() { send_all(body_.substr(body_.size() / 2)); }
  // The status line's code of the answer ("" when the server closed without one).
  std::string status() {
    std::string got;
    char buf[4096];
    for (ssize_t n; got.find("\r\n") == std::string::npos && (n = ::recv(fd_, buf, sizeof buf, 0)) > 0;)
      got.append(buf, static_cast<size_t>(n));
    return got.size() > 12 ? got.substr(9, 3) : "";
  }

 private:
  void send_all(const std::string& data) {
    for (size_t at = 0; at < data.size();) {
      const ssize_t n = ::send(fd_, data.data() + at, data.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  std::string body_;
  int fd_ = -1;
};

class ServeTest : public ::testing::Test {
 protected:
  // A tiny_cnn trained 2 epochs; its operating points (evaluate) and predict's CSV for the test images.
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::make_dataset(*dir_ / "ds", 80, 64, 10);
    test::write_config(*dir_ / "cfg.yaml", *dir_ / "ds",
                       {{"train.epochs", "2"}, {"output.dir", *dir_ / "run"}});
    const std::string bin = test::ranzcr_binary();
    auto r = run_command(bin + " train --config " + (*dir_ / "cfg.yaml"));
    ASSERT_EQ(r.status, 0) << r.output;
    r = run_command(bin + " evaluate --checkpoint " + checkpoint() + " --out " + (*dir_ / "run/eval.json") +
                    " --bootstrap 0");
    ASSERT_EQ(r.status, 0) << r.output;
    r = run_command(bin + " predict --checkpoint " + checkpoint() + " --images " + (*dir_ / "ds/test") +
                    " --thresholds " + thresholds() + " --at youden --out " + (*dir_ / "sub.csv"));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string checkpoint() { return *dir_ / "run/checkpoints/best.pt"; }
  static std::string thresholds() { return *dir_ / "run/operating_points.csv"; }
  static std::string test_image(int i) {
    const CsvTable sub = read_csv(*dir_ / "sub.csv");
    return *dir_ / ("ds/test/" + sub.rows.at(i)[0] + ".jpg");
  }
  static inline test::TempDir* dir_ = nullptr;
};

// Every test image, posted 8 at a time (so that batches of several images run), answers predict's CSV row:
// the probabilities to the CSV's 6 decimals, the youden decisions exactly.
TEST_F(ServeTest, PredictAnswersPredictsNumbersAlsoInBatches) {
  test::ServeProcess server(*dir_ / "serve.log",
                            {"--checkpoint", checkpoint(), "--thresholds", thresholds(), "--at", "youden",
                             "--max-batch", "8", "--max-wait-ms", "200"});
  ASSERT_GT(server.port(), 0) << server.log();
  const CsvTable sub = read_csv(*dir_ / "sub.csv");
  ASSERT_EQ(sub.rows.size(), 10u);
  std::vector<std::future<std::pair<int, std::string>>> answers;
  for (size_t i = 0; i < sub.rows.size(); ++i)
    answers.push_back(std::async(std::launch::async, [&, i] {
      const auto r = post_file(server.client(), "/v1/predict", test_image(static_cast<int>(i)));
      return r ? std::make_pair(r->status, r->body) : std::make_pair(-1, std::string());
    }));
  int batched = 0;
  for (size_t i = 0; i < sub.rows.size(); ++i) {
    const auto [status, body] = answers[i].get();
    ASSERT_EQ(status, 200) << body;
    const json j = json::parse(body);
    EXPECT_EQ(j["labels"].get<std::vector<std::string>>(), kLabels);
    EXPECT_EQ(j["operating_point"], "youden");
    EXPECT_EQ(j["image"]["format"], "jpeg");
    EXPECT_EQ(j["models"][0]["epoch"], 2);
    batched += j["batch_size"].get<int>() > 1;
    for (const auto& label : kLabels) {
      const double p = std::stod(sub.rows[i][sub.column(label)]);
      EXPECT_NEAR(j["probabilities"][label].get<double>(), p, 1e-6) << label << " of image " << i;
      const std::string decided = sub.rows[i][sub.column(label + ":youden")];
      if (decided.empty())
        EXPECT_TRUE(j["decisions"][label].is_null()) << label;
      else
        EXPECT_EQ(j["decisions"][label].get<int>(), std::stoi(decided)) << label;
    }
  }
  EXPECT_GT(batched, 0) << "no request ran in a batch of several";
  const auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ranzcr_serve_requests_total{endpoint=\"/v1/predict\",status=\"200\"} 10"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("ranzcr_serve_images_decoded_total{format=\"jpeg\"} 10"), std::string::npos);
  EXPECT_NE(metrics->body.find("ranzcr_serve_batch_size_count"), std::string::npos);
}

// DICOM uploads (synth --format dcm: 12/16-bit, MONOCHROME1/2, compressed) decode in the sandboxed helper and
// answer predict's numbers for the same files.
TEST_F(ServeTest, DicomUploadsAnswerPredictsNumbers) {
  const std::string bin = test::ranzcr_binary(), dcm = *dir_ / "dcm";
  auto r = run_command(bin + " synth --out " + dcm +
                       " --num-images 10 --num-test-images 4 --image-size 128 --format dcm --seed 5");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(bin + " predict --checkpoint " + checkpoint() + " --images " + dcm +
                  "/test --set data.image_ext=.dcm --out " + (*dir_ / "dcm.csv"));
  ASSERT_EQ(r.status, 0) << r.output;
  test::ServeProcess server(*dir_ / "serve.log", {"--checkpoint", checkpoint()});
  ASSERT_GT(server.port(), 0) << server.log();
  const CsvTable sub = read_csv(*dir_ / "dcm.csv");
  ASSERT_EQ(sub.rows.size(), 4u);
  for (const auto& row : sub.rows) {
    const auto a = post_file(server.client(), "/v1/predict", dcm + "/test/" + row[0] + ".dcm");
    ASSERT_TRUE(a);
    ASSERT_EQ(a->status, 200) << a->body;
    const json j = json::parse(a->body);
    EXPECT_EQ(j["image"]["format"], "dicom");
    for (const auto& label : kLabels)
      EXPECT_NEAR(j["probabilities"][label].get<double>(), std::stod(row[sub.column(label)]), 1e-6) << label;
  }
}

// A PNG of the same pixels answers the JPEG's numbers; /v1/input shows what the model saw; /v1/cam draws
// predict --cam's overlay (a 320-px panel per label under a 28-px title bar).
TEST_F(ServeTest, PngInputAndGradCam) {
  test::ServeProcess server(*dir_ / "serve.log", {"--checkpoint", checkpoint()});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string jpg = test_image(0), png = *dir_ / "same.png";
  ASSERT_TRUE(cv::imwrite(png, cv::imread(jpg, cv::IMREAD_GRAYSCALE)));
  const auto a = post_file(server.client(), "/v1/predict", jpg),
             b = post_file(server.client(), "/v1/predict", png);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(b->status, 200) << b->body;
  EXPECT_EQ(json::parse(b->body)["image"]["format"], "png");
  for (const auto& label : kLabels)
    EXPECT_DOUBLE_EQ(json::parse(a->body)["probabilities"][label].get<double>(),
                     json::parse(b->body)["probabilities"][label].get<double>());

  const auto input = post_file(server.client(), "/v1/input", jpg);
  ASSERT_TRUE(input);
  ASSERT_EQ(input->status, 200) << input->body;
  EXPECT_EQ(input->get_header_value("Content-Type"), "image/png");
  const cv::Mat seen =
      cv::imdecode(std::vector<uchar>(input->body.begin(), input->body.end()), cv::IMREAD_UNCHANGED);
  EXPECT_EQ(seen.cols, 256);  // data.image_size's default
  EXPECT_EQ(seen.channels(), 1);

  const auto decode = [](const std::optional<test::HttpResult>& r) {
    return cv::imdecode(std::vector<uchar>(r->body.begin(), r->body.end()), cv::IMREAD_COLOR);
  };
  const auto all = post_file(server.client(), "/v1/cam?labels=all", jpg);
  ASSERT_TRUE(all);
  ASSERT_EQ(all->status, 200) << all->body;
  EXPECT_EQ(decode(all).cols, 11 * 320);
  EXPECT_EQ(decode(all).rows, 320 + 28);
  const auto one = post_file(server.client(), "/v1/cam?labels=CVC%20-%20Normal", jpg);
  ASSERT_TRUE(one);
  ASSERT_EQ(one->status, 200) << one->body;
  EXPECT_EQ(decode(one).cols, 320);
  const auto unknown = post_file(server.client(), "/v1/cam?labels=Nope", jpg);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 400);
  EXPECT_NE(json::parse(unknown->body)["error"].get<std::string>().find("no label 'Nope'"),
            std::string::npos);
}

// Not an image, a truncated JPEG, two hostile DICOM files, an empty body, a body over --max-body-mb, an
// unknown path: each a one-line JSON error with its status, counted by kind; then a good image still answers.
TEST_F(ServeTest, BadRequestsAreRefusedAndTheServerKeepsServing) {
  test::ServeProcess server(*dir_ / "serve.log", {"--checkpoint", checkpoint(), "--max-body-mb", "1"});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string good = test_image(1), truncated = *dir_ / "truncated.jpg", big = *dir_ / "big.bin";
  test::write_file(truncated, test::read_file(good).substr(0, 600));
  test::write_file(big, std::string((1 << 20) + 1, 'x'));
  test::write_file(*dir_ / "text.txt", "hello, this is not an image\n");
  test::write_file(*dir_ / "empty.bin", "");
  const std::string files = std::string(test::source_dir()) + "/tests/data/files/";
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {*dir_ / "text.txt", 400, "not a JPEG, PNG or DICOM file"},
      {truncated, 400, "corrupt or truncated JPEG"},
      {files + "cve-2024-22391-palette-icon-short-lut.dcm", 400, "palette colour LUT"},
      {files + "cve-2025-52582-overlay-larger-than-image.dcm", 400, "overlay"},
      {*dir_ / "empty.bin", 400, "no body"},
      {big, 413, "larger than --max-body-mb (1 MiB)"}};
  for (const auto& [file, status, text] : cases) {
    const auto r = post_file(server.client(), "/v1/predict", file);
    ASSERT_TRUE(r) << file;
    EXPECT_EQ(r->status, status) << file << ": " << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(std::count(r->body.begin(), r->body.end(), '\n'), 1) << r->body;  // one line
    EXPECT_NE(json::parse(r->body)["error"].get<std::string>().find(text), std::string::npos) << r->body;
  }
  const auto missing = server.client().Get("/v2/predict");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("no such endpoint"), std::string::npos);
  const auto ok = post_file(server.client(), "/v1/predict", good);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  const std::string metrics = server.client().Get("/metrics")->body;
  for (const auto& kind :
       {"not_an_image\"} 1", "bad_jpeg\"} 1", "bad_dicom\"} 2", "empty_body\"} 1", "too_large\"} 1"})
    EXPECT_NE(metrics.find(std::string("ranzcr_serve_errors_total{kind=\"") + kind), std::string::npos)
        << kind << "\n"
        << metrics;
  EXPECT_EQ(::kill(server.pid(), 0), 0) << "the server died";
}

// --token-file: the API and /metrics need the bearer token (401 and WWW-Authenticate otherwise); the page
// and the probes do not.
TEST_F(ServeTest, BearerTokenGuardsTheApi) {
  test::write_file(*dir_ / "token", "s3cret-token\n");
  test::ServeProcess server(*dir_ / "serve.log",
                            {"--checkpoint", checkpoint(), "--token-file", *dir_ / "token"});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string image = test_image(2);
  const auto none = post_file(server.client(), "/v1/predict", image);
  const auto wrong =
      post_file(server.client(), "/v1/predict", image, {{"Authorization", "Bearer s3cret-tokeX"}});
  const auto right =
      post_file(server.client(), "/v1/predict", image, {{"Authorization", "Bearer s3cret-token"}});
  ASSERT_TRUE(none && wrong && right);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(wrong->status, 401);
  EXPECT_EQ(right->status, 200) << right->body;
  EXPECT_EQ(server.client().Get("/metrics")->status, 401);
  // The page's flow on one keep-alive connection: refused, then the token; the refused upload's body was
  // read to its end, so the next request on the connection is read from its start.
  test::HttpClient keep = server.client();
  keep.set_keep_alive(true);
  const std::string bytes = test::read_file(image);
  const auto refused = keep.Post("/v1/predict", bytes, "application/octet-stream");
  const auto accepted =
      keep.Post("/v1/predict", {{"Authorization", "Bearer s3cret-token"}}, bytes, "application/octet-stream");
  ASSERT_TRUE(refused && accepted);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(accepted->status, 200) << accepted->body;
  EXPECT_EQ(server.client().Get("/healthz")->status, 200);
  EXPECT_EQ(server.client().Get("/readyz")->status, 200);
  EXPECT_EQ(server.client().Get("/")->status, 200);
}

// A lone request runs at once; while another upload is still arriving, an open batch waits for it (up to
// --max-wait-ms). Here one client stalls halfway through its upload: the next two requests wait in the queue
// (--max-queue 2), a third finds it full (503, Retry-After), and the two are answered after --max-wait-ms.
TEST_F(ServeTest, FullQueueIs503) {
  test::ServeProcess server(*dir_ / "serve.log", {"--checkpoint", checkpoint(), "--max-batch", "8",
                                                  "--max-wait-ms", "1500", "--max-queue", "2"});
  ASSERT_GT(server.port(), 0) << server.log();
  const std::string image = test_image(3);
  const auto lone = post_file(server.client(), "/v1/predict", image);
  ASSERT_TRUE(lone);
  EXPECT_LT(json::parse(lone->body)["seconds"]["queue"].get<double>(), 0.5)
      << "a lone request waited for company";
  StalledUpload stalled(server.port(), image);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto first = std::async(std::launch::async,
                          [&] { return post_file(server.client(), "/v1/predict", image)->status; });
  auto second = std::async(std::launch::async,
                           [&] { return post_file(server.client(), "/v1/predict", image)->status; });
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const auto third = post_file(server.client(), "/v1/predict", image);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 503) << third->body;
  EXPECT_EQ(third->get_header_value("Retry-After"), "1");
  EXPECT_EQ(first.get(), 200);
  EXPECT_EQ(second.get(), 200);
  stalled.finish();
  EXPECT_EQ(stalled.status(), "200");
}

// A client whose body stops gets a 408 at --body-timeout-s and is dropped; a batch waits for that upload (up
// to
// --max-wait-ms 3000) only until then, so the request queued behind it is answered, and the server goes on.
// With --timeout-ms 1 every answer comes too late: 504 "timed out", sent by the request's deadline.
TEST_F(ServeTest, LateAnswerIs504AndASilentClientIsDropped) {
  {
    test::ServeProcess server(*dir_ / "serve.log", {"--checkpoint", checkpoint(), "--max-wait-ms", "3000",
                                                    "--timeout-ms", "5000", "--body-timeout-s", "1"});
    ASSERT_GT(server.port(), 0) << server.log();
    const std::string image = test_image(3);
    const auto start = test::Clock::now();
    StalledUpload stalled(server.port(), image);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto r = post_file(server.client(), "/v1/predict", image);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    const double queued = json::parse(r->body)["seconds"]["queue"].get<double>();
    EXPECT_GT(queued, 0.4) << "the batch did not wait for the upload on its way";
    EXPECT_LT(queued, 1.5) << "the batch waited past the stalled upload's body deadline";
    EXPECT_EQ(stalled.status(), "408");  // the body's deadline: 1 s plus its size at 64 KiB/s
    EXPECT_LT(test::Clock::now() - start, std::chrono::seconds(3));
  }
  test::ServeProcess server(*dir_ / "serve.log", {"--checkpoint", checkpoint(), "--timeout-ms", "1"});
  ASSERT_GT(server.port(), 0) << server.log();
  const auto late = post_file(server.client(), "/v1/predict", test_image(3));
  ASSERT_TRUE(late);
  EXPECT_EQ(late->status, 504) << late->body;
  EXPECT_NE(late->body.find("timed out"), std::string::npos) << late->body;
  const auto metrics = server.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("ranzcr_serve_errors_total{kind=\"deadline\"} 1\n"), std::string::npos)
      << metrics->body;  // counted once
  EXPECT_EQ(server.client().Get("/healthz")->status, 200);
}

// SIGTERM while one request waits in a batch and another is still uploading: both are answered, new
// connections are refused, the exit status is 0.
TEST_F(ServeTest, SigtermFinishesTheRequestsInFlightAndExitsZero) {
  test::ServeProcess server(*dir_ / "serve.log", {"--checkpoint", checkpoint(), "--max-wait-ms", "1500"});
  ASSERT_GT(server.port(), 0) << server.log();
  StalledUpload stalled(server.port(), test_image(4));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto in_flight = std::async(
      std::launch::async, [&] { return post_file(server.client(), "/v1/predict", test_image(4))->status; });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  ::kill(server.pid(), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(server.client().Get("/healthz")) << "still accepting after SIGTERM";
  stalled.finish();
  EXPECT_EQ(stalled.status(), "200");
  EXPECT_EQ(in_flight.get(), 200);
  EXPECT_EQ(server.stop_and_wait(30), 0) << server.log();
  EXPECT_NE(server.log().find("finishing the requests in flight"), std::string::npos) << server.log();
}

// A port already taken: one error line, a non-zero exit, at once.
TEST_F(ServeTest, PortInUseIsOneErrorLine) {
  test::ServeProcess server(*dir_ / "serve.log", {"--checkpoint", checkpoint()});
  ASSERT_GT(server.port(), 0) << server.log();
  const auto r =
      run_command("timeout -s KILL 60 " + std::string(test::ranzcr_binary()) + " serve --checkpoint " +
                  checkpoint() + " --port " + std::to_string(server.port()));
  EXPECT_NE(r.status, 0);
  const auto errors = test::error_lines(r.output);
  ASSERT_EQ(errors.size(), 1u) << r.output;
  EXPECT_NE(errors[0].find("cannot listen on 127.0.0.1:" + std::to_string(server.port())), std::string::npos);
}

// The page in headless Chromium: upload a synthetic image, the bars equal the JSON endpoint's numbers, the
// input and the Grad-CAM overlay load, a label's toggle swaps the overlay; the screenshot is kept when
// RANZCR_SCREENSHOT_DIR names a folder.
TEST_F(ServeTest, PageInARealBrowserShowsTheEndpointsNumbers) {
  test::ServeProcess server(*dir_ / "serve.log",
                            {"--checkpoint", checkpoint(), "--thresholds", thresholds(), "--at", "youden"});
  ASSERT_GT(server.port(), 0) << server.log();
  const char* keep = std::getenv("RANZCR_SCREENSHOT_DIR");
  const std::string shot = keep ? std::string(keep) + "/serve_page.png" : *dir_ / "page.png";
  const auto r = run_command(
      test::python() + " " + test::source_dir() +
      "/tests/apps/serve_page_check.py --url http://127.0.0.1:" + std::to_string(server.port()) +
      "/ --image " + test_image(5) + " --screenshot " + shot + " --json " + (*dir_ / "page.json"));
  if (r.status == 77) RANZCR_SKIP_WITHOUT_REFERENCE("no browser for the page test: " << r.output);
  ASSERT_EQ(r.status, 0) << r.output << server.log();
  const json page = json::parse(test::read_file(*dir_ / "page.json"));
  EXPECT_EQ(page["bars"].size(), 11u);
  EXPECT_EQ(page["input_width"], 256);
  EXPECT_EQ(page["cam_width"], 320);
  EXPECT_TRUE(page["cam_toggle_ok"].get<bool>());
  EXPECT_GT(cv::imread(shot).cols, 0);
}

}  // namespace
}  // namespace ranzcr
