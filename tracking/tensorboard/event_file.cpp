#include "tracking/tensorboard/event_file.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace fs = std::filesystem;

namespace ranzcr::tracking {
namespace tensorboard {
namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf wire format: varint, fixed 32/64-bit little endian, length-delimited fields.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_fixed(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (field << 3) | wire_type);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event fields 1 (wall_time, double) and 2 (step, int64).
std::string event_header(double wall_time, int64_t step) {
  std::string e;
  uint64_t bits;
  std::memcpy(&bits, &wall_time, sizeof bits);
  put_tag(e, 1, 1);
  put_fixed(e, bits, 8);
  if (step != 0) {
    put_tag(e, 2, 0);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

}  // namespace

uint32_t crc32c(const std::string& bytes) {
  const auto& table = crc_table();
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const std::string& bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string frame_record(const std::string& data) {
  std::string length;
  put_fixed(length, data.size(), 8);
  std::string out = length;
  put_fixed(out, masked_crc32c(length), 4);
  out += data;
  put_fixed(out, masked_crc32c(data), 4);
  return out;
}

std::string encode_file_version_event(double wall_time, const std::string& version) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, version);
  return e;
}

std::string encode_session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_tag(session_log, 1, 0);
  put_varint(session_log, 1);  // SessionLog.START
  std::string e = event_header(wall_time, step);
  put_bytes(e, 7, session_log);
  return e;
}

std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const auto& s : scalars) {
    std::string value;
    put_bytes(value, 1, s.tag);
    uint32_t bits;
    std::memcpy(&bits, &s.value, sizeof bits);
    put_tag(value, 2, 5);
    put_fixed(value, bits, 4);
    put_bytes(summary, 1, value);
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

namespace {

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

// events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>, n the first that names no file yet (a run
// resumed in the same second by the same process gets a file of its own).
std::string new_event_file(const std::string& dir) {
  const std::string prefix = dir + "/events.out.tfevents." +
                             std::to_string(static_cast<int64_t>(wall_time_now())) + "." + host_name() + "." +
                             std::to_string(getpid()) + ".";
  for (int n = 0;; ++n)
    if (!fs::exists(prefix + std::to_string(n))) return prefix + std::to_string(n);
}

}  // namespace

EventFile::EventFile(const std::string& dir, int64_t resumed_step) : dir_(dir), resumed_step_(resumed_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  RANZCR_CHECK(fs::is_directory(dir), "cannot create the TensorBoard folder ", dir);
}

void EventFile::open_file() {
  path_ = new_event_file(dir_);
  out_.open(path_, std::ios::binary | std::ios::app);
  RANZCR_CHECK(out_, "cannot write TensorBoard event file ", path_);
  write_record(encode_file_version_event(wall_time_now()));
  if (resumed_step_ > 0) write_record(encode_session_start_event(wall_time_now(), resumed_step_ + 1));
}

void EventFile::write_scalars(int64_t step, const std::vector<Scalar>& scalars) {
  if (!out_.is_open()) open_file();
  write_record(encode_scalars_event(wall_time_now(), step, scalars));
}

void EventFile::write_record(const std::string& event) {
  out_ << frame_record(event);
  out_.flush();
  RANZCR_CHECK(out_, "cannot write TensorBoard event file ", path_);
}

}  // namespace tensorboard

std::string TensorBoardTracker::folder(const std::string& run_dir) {
  return (fs::path(run_dir) / "tensorboard").string();
}

bool TensorBoardTracker::open(const RunStart& start) {
  file_ = std::make_unique<tensorboard::EventFile>(folder(start.run_dir), start.resumed_step);
  return true;
}

void TensorBoardTracker::write(int64_t step, const std::vector<Figure>& figures) {
  std::vector<tensorboard::Scalar> scalars;
  for (const auto& f : figures)
    if (!std::isnan(f.value)) scalars.push_back({f.key, static_cast<float>(f.value)});
  if (file_ && !scalars.empty()) file_->write_scalars(step, scalars);
}

void TensorBoardTracker::log_step(int64_t step, const std::vector<Figure>& figures) {
  write(step, figures);
}

void TensorBoardTracker::log_epoch(const EpochFigures& figures) {
  write(figures.step, figures.curves);
}

void TensorBoardTracker::clear(const std::string& run_dir) {
  std::error_code ec;
  fs::remove_all(folder(run_dir), ec);
}

}  // namespace ranzcr::tracking
