#include "engine/io/zip_check.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <time.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace ranzcr {
namespace {

namespace fs = std::filesystem;

const std::string kWhat = "x.pt";
const std::string kPrefix = kWhat + ": not a valid torch archive (";

// ---- archives from LibTorch's own writer ----

/// A torch.save-like archive written by caffe2::serialize::PyTorchStreamWriter ("archive/data.pkl",
/// "archive/data/0", the version record, "archive/.data/serialization_id"), with `code` as a deflated
/// record "archive/code/__torch__.py" as torch.jit.save writes code, if not empty.
std::string torch_archive(uint64_t min_version = 0, const std::string& code = "") {
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  if (min_version > 0) writer.setMinVersion(min_version);
  const std::string pickle("\x80\x02}q\x00.", 6);
  const std::string storage(100, '\x07');
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeRecord("data/0", storage.data(), storage.size());
  if (!code.empty()) writer.writeRecord("code/__torch__.py", code.data(), code.size(), /*compress=*/true);
  writer.writeEndOfFile();
  return bytes;
}

/// Whether LibTorch's reader opens `bytes` (its constructor runs init(): miniz's central directory and
/// the version record).
bool libtorch_opens(const std::string& bytes) {
  std::istringstream in(bytes);
  try {
    caffe2::serialize::PyTorchStreamReader reader(&in);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

// ---- a small zip writer for archives LibTorch's writer will not make ----

uint32_t crc32(const std::string& data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

void put(std::string& out, uint64_t value, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

void patch(std::string& bytes, size_t at, uint64_t value, int n) {
  for (int i = 0; i < n; ++i) bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

struct ZipEntry {
  std::string name;
  std::string data;
  uint16_t method = 0;
  uint16_t flags = 0;
  uint32_t external_attributes = 0;
  bool zip64 = false;                         // sizes and offset as 0xFFFFFFFF plus a zip64 extra field
  std::optional<uint64_t> declared_size;      // a size other than data.size(), in the zip64 field
  std::optional<uint64_t> uncompressed_size;  // when deflated
  std::optional<uint32_t> crc;                // when deflated
};

uint64_t compressed_size(const ZipEntry& e) {
  return e.declared_size.value_or(e.data.size());
}
uint64_t uncompressed_size(const ZipEntry& e) {
  return e.declared_size.value_or(e.uncompressed_size.value_or(e.data.size()));
}
uint32_t crc_of(const ZipEntry& e) {
  return e.crc.value_or(crc32(e.data));
}

ZipEntry stored(const std::string& name, const std::string& data) {
  ZipEntry e;
  e.name = name;
  e.data = data;
  return e;
}

/// `plain` as a deflate stream of one stored block (RFC 1951 3.2.4), method 8.
ZipEntry deflated(const std::string& name, const std::string& plain) {
  std::string stream = "\x01";  // BFINAL, BTYPE 00
  put(stream, plain.size(), 2);
  put(stream, ~plain.size() & 0xFFFF, 2);
  ZipEntry e = stored(name, stream + plain);
  e.method = 8;
  e.uncompressed_size = plain.size();
  e.crc = crc32(plain);
  return e;
}

struct ZipOptions {
  bool zip64_end = false;  // zip64 end record and locator, 32-bit end record fields at their maximum
  std::string comment;
};

std::string zip64_field(const std::vector<uint64_t>& values) {
  std::string field;
  put(field, 0x0001, 2);
  put(field, 8 * values.size(), 2);
  for (uint64_t v : values) put(field, v, 8);
  return field;
}

std::string central_header(const ZipEntry& e, uint64_t local_offset) {
  const uint64_t compressed = compressed_size(e), size = uncompressed_size(e);
  const bool zip64 = e.zip64 || compressed >= 0xFFFFFFFF || size >= 0xFFFFFFFF;
  const std::string extra = zip64 ? zip64_field({size, compressed, local_offset}) : "";
  std::string h;
  put(h, 0x02014b50, 4);
  put(h, 0x031E, 2);  // made by: unix, 3.0
  put(h, 45, 2);
  put(h, e.flags, 2);
  put(h, e.method, 2);
  put(h, 0, 2);
  put(h, 0x21, 2);  // 1980-01-01
  put(h, crc_of(e), 4);
  put(h, zip64 ? 0xFFFFFFFF : compressed, 4);
  put(h, zip64 ? 0xFFFFFFFF : size, 4);
  put(h, e.name.size(), 2);
  put(h, extra.size(), 2);
  put(h, 0, 2);  // comment
  put(h, 0, 2);  // disk
  put(h, 0, 2);  // internal attributes
  put(h, e.external_attributes, 4);
  put(h, zip64 ? 0xFFFFFFFF : local_offset, 4);
  return h + e.name + extra;
}

std::string local_header(const ZipEntry& e) {
  std::string h;
  put(h, 0x04034b50, 4);
  put(h, 45, 2);
  put(h, e.flags, 2);
  put(h, e.method, 2);
  put(h, 0, 2);
  put(h, 0x21, 2);
  put(h, crc_of(e), 4);
  put(h, e.data.size(), 4);
  put(h, uncompressed_size(e) & 0xFFFFFFFF, 4);
  put(h, e.name.size(), 2);
  put(h, 0, 2);
  return h + e.name;
}

std::string end_records(size_t entries, uint64_t directory_offset, uint64_t directory_size,
                        const ZipOptions& options) {
  std::string out;
  const uint64_t zip64_at = directory_offset + directory_size;
  if (options.zip64_end) {
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, entries, 8);
    put(out, entries, 8);
    put(out, directory_size, 8);
    put(out, directory_offset, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, zip64_at, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, options.zip64_end ? 0xFFFF : entries, 2);
  put(out, options.zip64_end ? 0xFFFF : entries, 2);
  put(out, options.zip64_end ? 0xFFFFFFFF : directory_size, 4);
  put(out, options.zip64_end ? 0xFFFFFFFF : directory_offset, 4);
  put(out, options.comment.size(), 2);
  return out + options.comment;
}

std::string make_zip(const std::vector<ZipEntry>& entries, const ZipOptions& options = {}) {
  std::string out, directory;
  for (const ZipEntry& e : entries) {
    directory += central_header(e, out.size());
    out += local_header(e) + e.data;
  }
  const uint64_t directory_offset = out.size();
  return out + directory + end_records(entries.size(), directory_offset, directory.size(), options);
}

std::vector<ZipEntry> minimal_entries(const std::string& version = "3\n") {
  return {stored("archive/data.pkl", std::string("\x80\x02}q\x00.", 6)),
          stored("archive/data/0", std::string(16, '\x01')), stored("archive/version", version)};
}

// minimal_entries() with zip64 extra fields and zip64 end records.
std::string minimal_zip64_archive() {
  auto entries = minimal_entries();
  for (ZipEntry& e : entries) e.zip64 = true;
  ZipOptions zip64_end;
  zip64_end.zip64_end = true;
  return make_zip(entries, zip64_end);
}

// ---- checking errors ----

std::string error_of(const std::string& bytes) {
  try {
    check_torch_zip(bytes, kWhat);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

/// `bytes` are refused with one line "x.pt: not a valid torch archive (...)" holding `fragment`.
void expect_refused(const std::string& bytes, const std::string& fragment) {
  const std::string message = error_of(bytes);
  ASSERT_FALSE(message.empty()) << "accepted; expected a refusal naming: " << fragment;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.rfind(kPrefix, 0), 0u) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
  EXPECT_EQ(message.back(), ')') << message;
}

size_t end_record_at(const std::string& bytes) {
  return bytes.rfind(std::string("PK\x05\x06", 4));
}
size_t first_central_header_at(const std::string& bytes) {
  return bytes.find(std::string("PK\x01\x02", 4));
}

long max_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// ---- accepted archives ----

TEST(ZipCheck, AcceptsWhatPyTorchStreamWriterWritesAndLibTorchOpens) {
  for (uint64_t min_version : {0, 7}) {  // 3 writes "archive/version", 7 "archive/.data/version"
    const std::string bytes = torch_archive(min_version);
    EXPECT_NO_THROW(check_torch_zip(bytes, kWhat)) << error_of(bytes);
    std::istringstream in(bytes);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    EXPECT_TRUE(reader.hasRecord("data.pkl"));
    EXPECT_EQ(std::get<1>(reader.getRecord("data/0")), 100u);
    EXPECT_EQ(reader.version(), min_version == 0 ? 3 : 7);
  }
}

TEST(ZipCheck, AcceptsHandMadeArchivesLibTorchOpens) {
  ZipOptions with_comment;
  with_comment.comment = "a trailing comment";
  auto upper_case = minimal_entries();
  upper_case[2].name = "archive/VERSION";  // miniz finds records ignoring case
  auto with_deflated = minimal_entries();
  with_deflated.push_back(deflated("archive/code/x.py", "def forward(self):\n    return 1\n"));
  for (const std::string& bytes :
       {make_zip(minimal_entries()), make_zip(minimal_entries(), with_comment), make_zip(upper_case),
        make_zip(minimal_entries(" +10 trailing")), make_zip(with_deflated)}) {
    EXPECT_NO_THROW(check_torch_zip(bytes, kWhat)) << error_of(bytes);
    EXPECT_TRUE(libtorch_opens(bytes));
  }
}

TEST(ZipCheck, AcceptsDeflatedCodeAsTorchJitSaveWritesIt) {
  std::string code;
  for (int i = 0; i < 100; ++i) code += "  def forward(self, x):\n    return x\n";
  const std::string bytes = torch_archive(0, code);
  ASSERT_LT(bytes.size(), code.size());  // really deflated
  EXPECT_NO_THROW(check_torch_zip(bytes, kWhat)) << error_of(bytes);
  std::istringstream in(bytes);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  auto [data, size] = reader.getRecord("code/__torch__.py");
  EXPECT_EQ(std::string(static_cast<const char*>(data.get()), size), code);
}

TEST(ZipCheck, AcceptsZip64ArchivesAndLibTorchReadsThem) {
  const std::string bytes = minimal_zip64_archive();
  EXPECT_NO_THROW(check_torch_zip(bytes, kWhat)) << error_of(bytes);
  std::istringstream in(bytes);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  auto [data, size] = reader.getRecord("data/0");
  ASSERT_EQ(size, 16u);
  EXPECT_EQ(std::string(static_cast<const char*>(data.get()), size), std::string(16, '\x01'));
}

TEST(ZipCheck, ChecksFilesAndNamesAMissingOne) {
  const test::TempDir dir;  // a path of this run alone: two runs at once must not share it
  const std::string path = dir / "zip_check_test.pt";
  const std::string bytes = torch_archive();
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_NO_THROW(check_torch_zip_file(path));
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 30);
  try {
    check_torch_zip_file(path);
    ADD_FAILURE() << "a truncated file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": not a valid torch archive (no end of central", 0), 0u)
        << e.what();
  }
  fs::remove(path);
  try {
    check_torch_zip_file(path);
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open " + path);
  }
  EXPECT_THROW(check_torch_zip_file(dir.str()), std::runtime_error);
}

// ---- refused archives ----

TEST(ZipCheck, RefusesEveryTruncation) {
  const std::string bytes = torch_archive();
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string message = error_of(bytes.substr(0, n));
    ASSERT_FALSE(message.empty()) << "accepted the first " << n << " of " << bytes.size() << " bytes";
    ASSERT_EQ(message.rfind(kPrefix, 0), 0u) << message;
    ASSERT_EQ(message.find('\n'), std::string::npos) << message;
  }
  expect_refused(bytes.substr(0, 10), "a file of 10 bytes");
  expect_refused(bytes.substr(0, bytes.size() - 1), "no end of central directory record");
}

TEST(ZipCheck, RefusesAFileWithoutEndRecord) {
  std::string bytes = torch_archive();
  bytes[end_record_at(bytes)] = 'X';
  expect_refused(bytes, "no end of central directory record");
  expect_refused(std::string(5000, '\0'), "no end of central directory record");
  expect_refused("\x80\x02" + std::string(100, 'a'), "legacy torch.save pickle");
  expect_refused("PYTORCH1" + make_zip(minimal_entries()), "PYTORCH1");
}

TEST(ZipCheck, RefusesACentralDirectoryPastTheEnd) {
  std::string bytes = make_zip(minimal_entries());
  patch(bytes, end_record_at(bytes) + 16, bytes.size() + 100, 4);
  expect_refused(bytes, "the central directory (");
  bytes = make_zip(minimal_entries());
  patch(bytes, end_record_at(bytes) + 12, 0x7FFFFFFF, 4);  // its size
  expect_refused(bytes, "runs past its end record");
  bytes = make_zip(minimal_entries());
  patch(bytes, end_record_at(bytes) + 8, 9, 2);  // entries on this disk
  expect_refused(bytes, "declares 3 entries but 9 on this disk");
  bytes = make_zip(minimal_entries());
  patch(bytes, end_record_at(bytes) + 8, 200, 2);
  patch(bytes, end_record_at(bytes) + 10, 200, 2);
  expect_refused(bytes, "200 entries cannot fit a central directory");
  bytes = make_zip(minimal_entries());
  patch(bytes, end_record_at(bytes) + 4, 1, 2);
  expect_refused(bytes, "multi-disk");
  expect_refused(make_zip({}), "it has no entries");
}

TEST(ZipCheck, RefusesALocalHeaderPastTheEndOrMissing) {
  std::string bytes = make_zip(minimal_entries());
  patch(bytes, first_central_header_at(bytes) + 42, bytes.size() + 1000, 4);
  expect_refused(bytes, "the local header of \"archive/data.pkl\" at offset");
  bytes = make_zip(minimal_entries());
  patch(bytes, first_central_header_at(bytes) + 42, 1, 4);
  expect_refused(bytes, "no local header for \"archive/data.pkl\" at offset 1");
}

TEST(ZipCheck, RefusesAHugeDeclaredEntryFastAndWithTinyMemory) {
  auto entries = minimal_entries();
  entries[1].declared_size = uint64_t{1} << 40;
  const std::string bytes = make_zip(entries);
  const long rss_before = max_rss_kib();
  // This thread's CPU time, not the wall clock: a loaded machine must not fail the test.
  const auto cpu_seconds = [] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  const double start = cpu_seconds();
  expect_refused(bytes, "declares 1099511627776 bytes");
  EXPECT_LT(cpu_seconds() - start, 0.1);
  EXPECT_LT(max_rss_kib() - rss_before, 16 * 1024);  // KiB
  std::string small = make_zip(minimal_entries());   // a 32-bit size of 4 GiB - 16
  patch(small, first_central_header_at(small) + 20, 0xFFFFFFF0, 4);
  patch(small, first_central_header_at(small) + 24, 0xFFFFFFF0, 4);
  expect_refused(small, "declares 4294967280 bytes");
}

TEST(ZipCheck, RefusesCompressedEncryptedAndInconsistentEntries) {
  auto entries = minimal_entries();
  entries[1].method = 12;  // bzip2
  expect_refused(make_zip(entries), "\"archive/data/0\" uses compression method 12; LibTorch reads stored");
  entries = minimal_entries();
  entries[1] = deflated("archive/data/0", std::string(100, 'z'));
  entries[1].uncompressed_size = uint64_t{1} << 40;
  expect_refused(make_zip(entries), "declares 1099511627776 bytes from 105, more than deflate's 1032:1");
  entries = minimal_entries();
  entries[2] = deflated("archive/version", "3\n");
  expect_refused(make_zip(entries), "the record \"archive/version\" is compressed (method 8)");
  entries = minimal_entries();
  entries.push_back(deflated("archive/.data/serialization_id", "1234"));
  expect_refused(make_zip(entries), "the record \"archive/.data/serialization_id\" is compressed (method 8)");
  entries = minimal_entries();
  entries[1].flags = 1;
  expect_refused(make_zip(entries), "\"archive/data/0\" is encrypted");
  std::string bytes = make_zip(minimal_entries());
  patch(bytes, first_central_header_at(bytes) + 20, 3, 4);  // compressed size 3, uncompressed 6
  expect_refused(bytes, "the stored entry \"archive/data.pkl\" is 3 bytes in the file but declares 6 bytes");
  bytes = make_zip(minimal_entries());
  patch(bytes, first_central_header_at(bytes) + 30, 0xFFFF, 2);  // extra field length
  expect_refused(bytes, "run past the central directory");
}

TEST(ZipCheck, RefusesMissingOrBadVersionRecords) {
  auto entries = minimal_entries();
  entries.pop_back();
  expect_refused(make_zip(entries), "no version record (\"archive/.data/version\" or \"archive/version\")");
  expect_refused(make_zip(minimal_entries("11\n")),
                 "holds \"11\\x0a\"; LibTorch reads file format versions 1 to 10");
  expect_refused(make_zip(minimal_entries("0")), "versions 1 to 10");
  expect_refused(make_zip(minimal_entries("-3")), "versions 1 to 10");
  expect_refused(make_zip(minimal_entries("")), "holds \"\", not a number");
  expect_refused(make_zip(minimal_entries("three")), "not a number");
  expect_refused(make_zip(minimal_entries("99999999999999999999999")), "too large");
  expect_refused(make_zip(minimal_entries(std::string(5000, '3'))), "is 5000 bytes");
  entries = minimal_entries();
  entries[2].external_attributes = 0x10;
  expect_refused(make_zip(entries), "is a directory entry");
  entries = minimal_entries();
  entries.push_back(stored("archive/.data/version", "12\n"));  // read before "version"
  expect_refused(make_zip(entries), "\"archive/.data/version\" holds \"12\\x0a\"");
  entries = minimal_entries();
  entries.push_back(stored("archive/Version", "42"));  // either may be found
  expect_refused(make_zip(entries), "\"archive/Version\" holds \"42\"");
}

TEST(ZipCheck, VersionParsingAgreesWithLibTorch) {
  const std::vector<std::string> versions = {"1",
                                             "10",
                                             "3\n",
                                             "\t 7",
                                             "+5",
                                             "4abc",
                                             "007",
                                             std::string("3\0junk", 7),  // accepted
                                             "0",
                                             "11",
                                             "-1",
                                             "-0",
                                             "",
                                             " ",
                                             "x3",
                                             "0x3",
                                             "18446744073709551616",
                                             "18446744073709551615",
                                             "9223372036854775809"};
  int accepted = 0;
  for (const std::string& version : versions) {
    const std::string bytes = make_zip(minimal_entries(version));
    const bool ours = error_of(bytes).empty();
    EXPECT_EQ(ours, libtorch_opens(bytes)) << "version record \"" << version << "\"";
    accepted += ours;
  }
  EXPECT_EQ(accepted, 8);
}

TEST(ZipCheck, RefusesNamesOutsideAFolder) {
  auto entries = minimal_entries();
  entries[0].name = "data.pkl";
  expect_refused(make_zip(entries), "the first entry \"data.pkl\" is not inside a folder");
  entries = minimal_entries();
  entries[1].name = "other/data/0";
  expect_refused(make_zip(entries), "the entry \"other/data/0\" is outside the folder \"archive/\"");
  entries = minimal_entries();
  entries[0].name = "bad\nname";  // shown escaped, on one line
  expect_refused(make_zip(entries), "the first entry \"bad\\x0aname\" is not inside a folder");
  entries = minimal_entries();
  entries[1].name = std::string("archive/a\0b", 11);
  expect_refused(make_zip(entries), "holds a NUL byte");
  entries[1].name = "archive/" + std::string(600, 'n');
  expect_refused(make_zip(entries), "has a name of 608 bytes");
}

TEST(ZipCheck, RefusesBrokenZip64Records) {
  const std::string good = minimal_zip64_archive();
  const size_t locator_at = end_record_at(good) - 20;
  std::string bytes = good;
  patch(bytes, locator_at + 8, good.size(), 8);
  expect_refused(bytes, "the zip64 end record offset");
  bytes = good;
  patch(bytes, locator_at + 8, 0, 8);
  expect_refused(bytes, "which holds no zip64 end record");
  bytes = good;
  patch(bytes, locator_at + 16, 2, 4);
  expect_refused(bytes, "counts 2 disks");
  bytes = good;
  const size_t zip64_end_at = locator_at - 56;
  patch(bytes, zip64_end_at + 40, uint64_t{1} << 33, 8);  // directory size
  expect_refused(bytes, "a central directory of 8589934592 bytes");
  bytes = good;
  patch(bytes, first_central_header_at(bytes) + 30, 0, 2);  // drop the first entry's zip64 extra field
  expect_refused(bytes, "no zip64 extra field");
  bytes = good;
  patch(bytes, first_central_header_at(bytes) + 46 + 16 + 2, 16, 2);  // field of 16 bytes: no offset
  expect_refused(bytes, "lacks a 64-bit size or offset");
}

TEST(ZipCheck, RefusesRandomGarbage) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    std::string bytes(rng() % 3000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    if (i % 3 == 0 && bytes.size() >= 22) patch(bytes, bytes.size() - 22, 0x06054b50, 4);  // an end record
    const std::string message = error_of(bytes);
    ASSERT_EQ(message.rfind(kPrefix, 0), 0u) << message;
    ASSERT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// What we accept, LibTorch opens: flip bytes of real archives at random and compare.
TEST(ZipCheck, WhatItAcceptsLibTorchOpens) {
  std::mt19937 rng(42);
  auto with_deflated = minimal_entries();
  with_deflated.push_back(deflated("archive/code/x.py", "def forward(self):\n    return 1\n"));
  const std::vector<std::string> archives = {torch_archive(), torch_archive(7, std::string(2000, 'c')),
                                             minimal_zip64_archive(), make_zip(with_deflated)};
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = archives[i % archives.size()];
    const int flips = 1 + rng() % 3;
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % bytes.size();
      bytes[at] = static_cast<char>(rng() % 4 == 0 ? 0xFF : rng());
    }
    const std::string message = error_of(bytes);
    if (message.empty()) {
      ++accepted;
      ASSERT_TRUE(libtorch_opens(bytes)) << "accepted, but LibTorch refuses, mutation " << i;
    } else {
      ASSERT_EQ(message.rfind(kPrefix, 0), 0u) << message;
      ASSERT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
  EXPECT_GT(accepted, 100);  // flips in data and padding keep archives valid
}

}  // namespace
}  // namespace ranzcr
