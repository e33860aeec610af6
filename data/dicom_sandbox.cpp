#include "data/dicom_sandbox.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/check.h"
#include "core/pixel_budget.h"
#include "core/printable.h"
#include "dicom/ipc.h"

extern char** environ;

namespace ranzcr {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using dicom_ipc::Reply;
using dicom_ipc::Request;
using dicom_ipc::Status;

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGABRT:
      return "SIGABRT";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return "signal " + std::to_string(sig);
  }
}

std::string seconds_text(double s) {
  std::string t = std::to_string(s);
  t.erase(t.find_last_not_of('0') + 1);
  if (t.back() == '.') t.pop_back();
  return t + " s";
}

// How a helper ended, as the rest of "the DICOM decoder ..." in a message.
std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGSYS)
      return "was killed by its sandbox (SIGSYS: it made a system call its seccomp filter forbids)";
    return "crashed (" + signal_name(sig) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "stopped";
}

// One helper process and the loader's end of its socket.
class Helper {
 public:
  Helper(const std::string& path, const DicomSandboxLimits& limits);
  ~Helper() { stop(); }
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;

  bool usable() const { return pid_ > 0; }
  DicomU8 decode(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window,
                 int target_size);

 private:
  // What went wrong talking to the helper: it ended (its end of the socket closed) or ran out of time.
  enum class Failure { kNone, kEnded, kTimedOut };
  Failure send(const void* data, size_t size, Clock::time_point deadline);
  Failure receive(void* data, size_t size, Clock::time_point deadline);
  int reap(bool kill_first);  // waits for the helper to end (SIGKILL first when asked), returns its status
  void stop();
  [[noreturn]] void fail(Failure failure, const std::string& prefix);
  [[noreturn]] void malformed(const std::string& prefix);

  pid_t pid_ = -1;
  int fd_ = -1;
  DicomSandboxLimits limits_;
};

Helper::Helper(const std::string& path, const DicomSandboxLimits& limits) : limits_(limits) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw DicomSandboxUnavailable("cannot start the DICOM decoder: socketpair failed: " +
                                  std::string(std::strerror(errno)));
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_adddup2(&files, sv[1], 0);  // its socket is its fd 0
  posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&files, 3);  // also what a library opened without O_CLOEXEC
#endif
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);  // the loader's threads may block signals; the helper does not
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string memory = std::to_string(limits.memory_bytes);
  const char* argv[] = {path.c_str(), "--memory-limit", memory.c_str(), nullptr};
  const int rc = ::posix_spawn(&pid_, path.c_str(), &files, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  ::close(sv[1]);
  fd_ = sv[0];
  if (rc != 0) {
    pid_ = -1;
    stop();
    throw DicomSandboxUnavailable("cannot start the DICOM decoder " + path + ": " + std::strerror(rc));
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  Reply hello;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  const Failure f = receive(&hello, sizeof hello, deadline);
  std::string why;
  if (f != Failure::kNone) {
    why = f == Failure::kTimedOut ? "it did not answer within 30 s" : "it " + how_it_ended(reap(false));
  } else if (hello.magic != dicom_ipc::kReplyMagic ||
             (hello.status != Status::kReady && hello.status != Status::kSetupFailed)) {
    why = "it sent something other than its greeting";
  } else if (hello.status == Status::kSetupFailed) {
    std::string message(std::min(hello.message_size, dicom_ipc::kMaxMessage), '\0');
    if (receive(message.data(), message.size(), deadline) != Failure::kNone) message = "(no reason given)";
    why = printable(message, 300);
  }
  if (!why.empty()) {
    stop();
    throw DicomSandboxUnavailable("the DICOM decoder " + path + " could not start: " + why);
  }
}

Helper::Failure Helper::send(const void* data, size_t size, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd_, p, size, MSG_NOSIGNAL);  // a dead helper is EPIPE here, not SIGPIPE
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Failure::kEnded;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Failure::kTimedOut;
    pollfd pfd{fd_, POLLOUT, 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
  }
  return Failure::kNone;
}

Helper::Failure Helper::receive(void* data, size_t size, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd_, p, size, 0);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Failure::kEnded;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Failure::kEnded;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Failure::kTimedOut;
    pollfd pfd{fd_, POLLIN, 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
  }
  return Failure::kNone;
}

int Helper::reap(bool kill_first) {
  if (pid_ <= 0) return 0;
  if (kill_first) ::kill(pid_, SIGKILL);
  int status = 0;
  // Its socket closed, so it is ending: give it a moment, then make sure.
  for (int i = 0; i < 200; ++i) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno != EINTR)) {
      pid_ = -1;
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return status;
}

void Helper::stop() {
  if (fd_ >= 0) ::close(fd_);  // a helper waiting for a request reads end of file and exits
  fd_ = -1;
  if (pid_ > 0) reap(false);
}

void Helper::fail(Failure failure, const std::string& prefix) {
  std::string what;
  if (failure == Failure::kTimedOut) {
    reap(true);
    what = "the DICOM decoder exceeded " + seconds_text(limits_.seconds_per_image) + " and was stopped";
  } else {
    const int status = reap(false);
    what = "the DICOM decoder " + how_it_ended(status);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      what += " (killed from outside, or out of memory)";
  }
  stop();
  RANZCR_FAIL(prefix, what);
}

void Helper::malformed(const std::string& prefix) {
  reap(true);
  stop();
  RANZCR_FAIL(prefix, "the DICOM decoder sent a malformed reply and was stopped");
}

DicomU8 Helper::decode(const std::vector<unsigned char>& bytes, const std::string& name, DicomWindow window,
                       int target_size) {
  const std::string prefix = "DICOM file " + printable(name, 1000) + ": ";
  Request request;
  request.window = static_cast<uint32_t>(window);
  request.target_size = target_size;
  request.name_size = static_cast<uint32_t>(std::min<size_t>(name.size(), dicom_ipc::kMaxName));
  request.file_size = bytes.size();
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(limits_.seconds_per_image * 1000));
  Failure f = send(&request, sizeof request, deadline);
  if (f == Failure::kNone) f = send(name.data(), request.name_size, deadline);
  if (f == Failure::kNone) f = send(bytes.data(), bytes.size(), deadline);
  Reply reply;
  if (f == Failure::kNone) f = receive(&reply, sizeof reply, deadline);
  if (f != Failure::kNone) fail(f, prefix);
  if (reply.magic != dicom_ipc::kReplyMagic) malformed(prefix);
  if (reply.status == Status::kRefused) {
    if (reply.message_size > dicom_ipc::kMaxMessage) malformed(prefix);
    std::string message(reply.message_size, '\0');
    f = receive(message.data(), message.size(), deadline);
    if (f != Failure::kNone) fail(f, prefix);
    RANZCR_FAIL(printable(message, 1200));
  }
  const auto sane = [](int64_t cols, int64_t rows) {
    return cols > 0 && rows > 0 && cols <= kMaxImagePixels / rows;
  };
  if (reply.status != Status::kImage || !sane(reply.cols, reply.rows) ||
      !sane(reply.original_cols, reply.original_rows))
    malformed(prefix);
  DicomU8 out;
  out.image.create(reply.rows, reply.cols, CV_8UC1);
  out.original_size = cv::Size(reply.original_cols, reply.original_rows);
  f = receive(out.image.data, out.image.total(), deadline);
  if (f != Failure::kNone) fail(f, prefix);
  return out;
}

// Idle helpers, shared by every thread of the process. Never destroyed: at exit each helper reads end of
// file on its socket and ends by itself.
class Pool {
 public:
  std::unique_ptr<Helper> take(const DicomSandboxLimits& limits) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        std::unique_ptr<Helper> h = std::move(idle_.back());
        idle_.pop_back();
        return h;
      }
    }
    return std::make_unique<Helper>(dicom_decoder_path(), limits);
  }
  void give_back(std::unique_ptr<Helper> helper) {
    if (!helper->usable()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(helper));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Helper>> idle_;
};

Pool& pool(const DicomSandboxLimits& limits) {
  // One pool per limit setting (tests use short ones); helpers never move between them.
  static std::mutex mutex;
  static auto* pools = new std::vector<std::pair<std::pair<double, int64_t>, Pool*>>();
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(limits.seconds_per_image, limits.memory_bytes);
  for (auto& [k, p] : *pools)
    if (k == key) return *p;
  pools->emplace_back(key, new Pool());
  return *pools->back().second;
}

}  // namespace

std::string dicom_decoder_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path beside = self.parent_path() / "ranzcr-dicom-decoder";
  if (!ec && ::access(beside.c_str(), X_OK) == 0) return beside.string();
#ifdef RANZCR_DICOM_DECODER_BUILD_PATH
  if (::access(RANZCR_DICOM_DECODER_BUILD_PATH, X_OK) == 0) return RANZCR_DICOM_DECODER_BUILD_PATH;
  const std::string built = std::string(" nor at ") + RANZCR_DICOM_DECODER_BUILD_PATH;
#else
  const std::string built;
#endif
  throw DicomSandboxUnavailable(
      "the DICOM decoder helper is missing: no executable ranzcr-dicom-decoder beside " + self.string() +
      built + " (reinstall ranzcr with it; DICOM files are decoded there)");
}

DicomU8 decode_dicom_sandboxed(const std::vector<unsigned char>& bytes, const std::string& name,
                               DicomWindow window, int target_size, const DicomSandboxLimits& limits) {
  Pool& helpers = pool(limits);
  std::unique_ptr<Helper> helper = helpers.take(limits);
  struct GiveBack {  // a refused file leaves the helper usable; one that ended is dropped
    Pool& pool;
    std::unique_ptr<Helper>& helper;
    ~GiveBack() { pool.give_back(std::move(helper)); }
  } give_back{helpers, helper};
  return helper->decode(bytes, name, window, target_size);
}

}  // namespace ranzcr
