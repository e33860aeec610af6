// ranzcr-dicom-decoder: decodes DICOM files for the loader in a process of its own (data/dicom_sandbox.h).
// Started by ranzcr with its socket as fd 0: bounds its memory, locks itself down, says it is ready, then
// answers one request per image until the socket closes. Not meant to be run by hand.
//
// Test-only faults: with RANZCR_DICOM_DECODER_TEST_FAULTS=1 in its environment, a file whose bytes begin
// with "RANZCR-TEST-FAULT:crash", ":hang", ":alloc" or ":open" makes it crash, hang, allocate without
// bound or try to open a file (which its filter kills). Without the variable such a file is refused as
// any other non-DICOM file.
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <fcntl.h>
#include <unistd.h>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/write_all.h"
#include "dicom/decode.h"
#include "dicom/ipc.h"
#include "dicom/lockdown.h"

// The helper decodes on one thread: it answers "one processor" where a codec asks how many threads to start
// (OpenJPEG does with OPJ_NUM_THREADS=ALL_CPUS in the environment, through sysconf, for which glibc reads
// /sys: an open the filter forbids). Other questions go to glibc's own.
extern "C" long __sysconf(int name);
extern "C" long sysconf(int name) {
  if (name == _SC_NPROCESSORS_ONLN || name == _SC_NPROCESSORS_CONF) return 1;
  return __sysconf(name);
}

namespace {

using namespace ranzcr;
using dicom_ipc::Reply;
using dicom_ipc::Request;
using dicom_ipc::Status;

constexpr int kSocket = 0;
bool g_out_of_memory = false;  // set by the new-handler: the next refusal is the memory limit's

void on_out_of_memory() {
  g_out_of_memory = true;
  std::set_new_handler(nullptr);  // the next failure throws std::bad_alloc
  throw std::bad_alloc();
}

bool send_message(Status status, const std::string& text) {
  Reply reply;
  reply.status = status;
  const std::string cut = text.substr(0, dicom_ipc::kMaxMessage);
  reply.message_size = static_cast<uint32_t>(cut.size());
  return write_all(kSocket, &reply, sizeof reply) && write_all(kSocket, cut.data(), cut.size());
}

bool send_image(const DicomU8& decoded) {
  Reply reply;
  reply.status = Status::kImage;
  reply.original_cols = decoded.original_size.width;
  reply.original_rows = decoded.original_size.height;
  reply.cols = decoded.image.cols;
  reply.rows = decoded.image.rows;
  const cv::Mat image = decoded.image.isContinuous() ? decoded.image : decoded.image.clone();
  return write_all(kSocket, &reply, sizeof reply) && write_all(kSocket, image.data, image.total());
}

// What a test-only fault file asks for ("" for none).
std::string test_fault(const std::vector<unsigned char>& bytes) {
  static const bool enabled = [] {
    const char* v = std::getenv("RANZCR_DICOM_DECODER_TEST_FAULTS");
    return v && std::strcmp(v, "1") == 0;
  }();
  static const std::string kPrefix = "RANZCR-TEST-FAULT:";
  if (!enabled || bytes.size() < kPrefix.size() || !std::equal(kPrefix.begin(), kPrefix.end(), bytes.begin()))
    return {};
  std::string word(bytes.begin() + kPrefix.size(), bytes.end());
  return word.substr(0, word.find_first_of("\r\n "));
}

void run_test_fault(const std::string& fault) {
  if (fault == "crash") *static_cast<volatile int*>(nullptr) = 1;
  if (fault == "hang")
    for (volatile uint64_t i = 0;; ++i) {
    }
  if (fault == "alloc") {
    std::vector<std::unique_ptr<char[]>> hoard;
    for (;;) {
      hoard.emplace_back(new char[64 << 20]);
      std::memset(hoard.back().get(), 1, 64 << 20);
    }
  }
  if (fault == "open") ::open("/etc/hostname", O_RDONLY);  // killed by the filter before it returns
}

// Things the first decode would do lazily that need system calls the filter forbids.
void warm_up() {
  init_dicom_library();         // DCMTK's dictionary is a file
  cv::setNumThreads(0);         // OpenCV's parallel loops would start threads (clone)
  (void)cv::getNumberOfCPUs();  // read from /sys once, then cached
  cv::Mat f(1024, 1024, CV_32FC1, cv::Scalar(0.5)), small, u8;  // large enough for the parallel paths
  cv::resize(f, small, cv::Size(341, 341), 0, 0, cv::INTER_AREA);
  small.convertTo(u8, CV_8U, 255.0);
  double lo = 0, hi = 0;
  cv::minMaxLoc(f, &lo, &hi);
}

// One request: false when the socket closed (the loader is done) or broke.
bool serve_one(int64_t memory_bytes) {
  Request request;
  if (!dicom_ipc::read_exactly(kSocket, &request, sizeof request)) return false;
  if (request.magic != dicom_ipc::kRequestMagic || request.name_size > dicom_ipc::kMaxName ||
      request.window > static_cast<uint32_t>(DicomWindow::kPercentile))
    return false;
  std::string name(request.name_size, '\0');
  if (!dicom_ipc::read_exactly(kSocket, name.data(), name.size())) return false;
  std::vector<unsigned char> bytes;
  g_out_of_memory = false;
  std::set_new_handler(on_out_of_memory);
  try {
    bytes.resize(request.file_size);
    if (!dicom_ipc::read_exactly(kSocket, bytes.data(), bytes.size())) return false;
    run_test_fault(test_fault(bytes));
    return send_image(
        decode_dicom_u8(bytes, name, static_cast<DicomWindow>(request.window), request.target_size));
  } catch (const std::exception& e) {
    if (!g_out_of_memory) return send_message(Status::kRefused, e.what());
    const std::string limit = memory_bytes % (int64_t{1} << 30) == 0
                                  ? std::to_string(memory_bytes >> 30) + " GiB"
                                  : std::to_string(memory_bytes >> 20) + " MiB";
    return send_message(Status::kRefused, "DICOM file " + name + ": the DICOM decoder exceeded " + limit +
                                              " of memory and gave up on it");
  } catch (...) {
    return send_message(Status::kRefused, "DICOM file " + name + ": the DICOM decoder failed on it");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::strcmp(argv[1], "--memory-limit") != 0) {
    std::fprintf(stderr, "error: ranzcr-dicom-decoder is started by ranzcr (usage: --memory-limit BYTES)\n");
    return 2;
  }
  char* end = nullptr;
  const long long memory_bytes = std::strtoll(argv[2], &end, 10);
  if (*end != '\0' || memory_bytes < (64 << 20)) {
    std::fprintf(stderr, "error: --memory-limit %s: expected bytes, at least 64 MiB\n", argv[2]);
    return 2;
  }
  // A Ctrl-C or a job manager's SIGTERM reaches the whole process group: ranzcr stops gracefully and must
  // not find its helpers dead mid-image. The helper ends when its socket closes, or by ranzcr's SIGKILL.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGHUP, SIG_IGN);
  warm_up();
  // The codecs print to stderr in places (a codec's warning): from here on that is
  // /dev/null, the one other descriptor the filter lets it write to.
  const int null = ::open("/dev/null", O_WRONLY);
  if (null < 0 || ::dup2(null, 2) < 0) {
    send_message(Status::kSetupFailed, "cannot open /dev/null for its stderr");
    return 1;
  }
  ::close(null);
  std::string problem = limit_decoder_memory(memory_bytes);
  if (problem.empty()) problem = lock_down_decoder(kSocket, 2);
  if (!problem.empty()) {
    send_message(Status::kSetupFailed, problem);
    return 1;
  }
  if (!send_message(Status::kReady, "")) return 1;
  while (serve_one(memory_bytes)) {
  }
  return 0;
}
