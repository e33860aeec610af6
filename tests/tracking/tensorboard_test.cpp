#include "tracking/tensorboard/event_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "tests/test_util.h"

namespace ranzcr::tracking {
namespace {

// A tiny reader of what the writer writes: TFRecord frames and the Event fields used.
uint64_t read_le(const std::string& s, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(s.at(pos + i))) << (8 * i);
  return v;
}

uint64_t read_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = static_cast<unsigned char>(s.at(pos++));
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
}

/// The records of a TFRecord file, checking both masked CRCs.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> records;
  for (size_t pos = 0; pos < file.size();) {
    const uint64_t n = read_le(file, pos, 8);
    EXPECT_EQ(read_le(file, pos + 8, 4), tensorboard::masked_crc32c(file.substr(pos, 8)));
    records.push_back(file.substr(pos + 12, n));
    EXPECT_EQ(read_le(file, pos + 12 + n, 4), tensorboard::masked_crc32c(records.back()));
    pos += 12 + n + 4;
  }
  return records;
}

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<tensorboard::Scalar> scalars;
};

// Calls f(field, wire_type, pos) for each field of a protobuf message; f advances pos past the value.
template <typename F>
void for_each_field(const std::string& msg, F f) {
  for (size_t pos = 0; pos < msg.size();) {
    const uint64_t tag = read_varint(msg, pos);
    f(static_cast<int>(tag >> 3), static_cast<int>(tag & 7), pos);
  }
}

std::string read_bytes(const std::string& msg, size_t& pos) {
  const uint64_t n = read_varint(msg, pos);
  pos += n;
  return msg.substr(pos - n, n);
}

tensorboard::Scalar decode_value(const std::string& msg) {
  tensorboard::Scalar s;
  for_each_field(msg, [&](int field, int wire, size_t& pos) {
    ASSERT_TRUE((field == 1 && wire == 2) || (field == 2 && wire == 5)) << field;
    if (field == 1) s.tag = read_bytes(msg, pos);
    if (field == 2) {
      const auto bits = static_cast<uint32_t>(read_le(msg, pos, 4));
      std::memcpy(&s.value, &bits, 4);
      pos += 4;
    }
  });
  return s;
}

DecodedEvent decode_event(const std::string& msg) {
  DecodedEvent e;
  for_each_field(msg, [&](int field, int wire, size_t& pos) {
    if (field == 1 && wire == 1) {
      const uint64_t bits = read_le(msg, pos, 8);
      std::memcpy(&e.wall_time, &bits, 8);
      pos += 8;
    } else if (field == 2 && wire == 0) {
      e.step = static_cast<int64_t>(read_varint(msg, pos));
    } else if (field == 3 && wire == 2) {
      e.file_version = read_bytes(msg, pos);
    } else if (field == 5 && wire == 2) {
      const std::string summary = read_bytes(msg, pos);
      for_each_field(summary, [&](int f, int w, size_t& p) {
        ASSERT_TRUE(f == 1 && w == 2);
        e.scalars.push_back(decode_value(read_bytes(summary, p)));
      });
    } else {
      FAIL() << "unexpected field " << field << " wire type " << wire;
    }
  });
  return e;
}

std::string hex(const std::string& bytes) {
  std::string out;
  char buf[3];
  for (unsigned char b : bytes) std::snprintf(buf, sizeof buf, "%02x", b), out += buf;
  return out;
}

TEST(TensorBoardTest, Crc32cKnownVectors) {
  EXPECT_EQ(tensorboard::crc32c(""), 0u);
  EXPECT_EQ(tensorboard::crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(tensorboard::crc32c(std::string(32, '\0')), 0x8a9136aau);    // RFC 3720 B.4
  EXPECT_EQ(tensorboard::crc32c(std::string(32, '\xff')), 0x62a8ab43u);  // RFC 3720 B.4
  const uint32_t c = 0xe3069283u;
  EXPECT_EQ(tensorboard::masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

// The bytes equal those of tensorboard's own protobuf classes (event_pb2.Event(...).SerializeToString()).
TEST(TensorBoardTest, EventBytesEqualProtobufs) {
  EXPECT_EQ(hex(tensorboard::encode_scalars_event(1.5, 7, {{"a/b", 0.25f}})),
            "09000000000000f83f10072a0c0a0a0a03612f62150000803e");
  EXPECT_EQ(hex(tensorboard::encode_session_start_event(1.5, 7)), "09000000000000f83f10073a020801");
  EXPECT_EQ(hex(tensorboard::encode_file_version_event(1.5)),
            "09000000000000f83f1a0d627261696e2e4576656e743a32");
}

TEST(TensorBoardTest, EventRoundTrip) {
  const std::string event = tensorboard::encode_scalars_event(
      1700000000.25, 123456789012, {{"train/loss", 0.6931f}, {"val/auc/ETT - Normal", 0.5f}});
  const auto records = read_records(tensorboard::frame_record(event));
  ASSERT_EQ(records.size(), 1u);
  const DecodedEvent e = decode_event(records[0]);
  EXPECT_EQ(e.wall_time, 1700000000.25);
  EXPECT_EQ(e.step, 123456789012);
  ASSERT_EQ(e.scalars.size(), 2u);
  EXPECT_EQ(e.scalars[0].tag, "train/loss");
  EXPECT_EQ(e.scalars[0].value, 0.6931f);
  EXPECT_EQ(e.scalars[1].tag, "val/auc/ETT - Normal");
  EXPECT_EQ(e.scalars[1].value, 0.5f);
}

TEST(TensorBoardTest, WriterFilesStartWithTheVersionAndNeverOverwrite) {
  test::TempDir dir;
  const std::string tb = dir / "tensorboard";
  std::string first;
  {
    TensorBoardTracker w;
    RunStart start;
    start.run_dir = dir.str();
    ASSERT_TRUE(w.open(start));
    EXPECT_TRUE(std::filesystem::is_empty(tb));  // no file before the first record
    w.log_step(10, {{"train/loss", 0.5}, {"train/lr", 1e-3}, {"train/images_per_sec", 100}});
    first = w.path();
    EXPECT_EQ(std::filesystem::path(first).filename().string().rfind("events.out.tfevents.", 0), 0u);
    // Flushed: readable while the writer is still open.
    const auto records = read_records(test::read_file(first));
    ASSERT_EQ(records.size(), 2u);
    EXPECT_EQ(decode_event(records[0]).file_version, "brain.Event:2");
    const DecodedEvent e = decode_event(records[1]);
    EXPECT_EQ(e.step, 10);
    ASSERT_EQ(e.scalars.size(), 3u);
    EXPECT_EQ(e.scalars[1].tag, "train/lr");
    EXPECT_EQ(e.scalars[1].value, 1e-3f);
  }
  tensorboard::EventFile again(tb, /*resumed_step=*/8);  // a resumed run: a second file beside the first
  again.write_scalars(9, {{"train/loss", 0.25f}});
  EXPECT_NE(again.path(), first);
  EXPECT_EQ(read_records(test::read_file(first)).size(), 2u);
  const auto records = read_records(test::read_file(again.path()));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(decode_event(records[2]).scalars.at(0).value, 0.25f);
  EXPECT_EQ(hex(records[1]).substr(18), "10093a020801");  // after wall_time: step 9, session_log START
}

}  // namespace
}  // namespace ranzcr::tracking
