// Every check below names the LibTorch code it pre-empts. Sources read: caffe2/serialize/inline_container.cc
// (PyTorchStreamReader::init, hasRecord, getRecordID, getRecord, getAllRecords) as of PyTorch's main branch
// in 2025, unchanged in these parts through the 2.x releases; the miniz LibTorch builds,
// third_party/miniz-3.0.2/miniz.c (mz_zip_reader_locate_header_sig, mz_zip_reader_read_central_dir,
// mz_zip_file_stat_internal, mz_zip_reader_locate_file_v2, mz_zip_reader_extract_to_mem_no_alloc1); and
// caffe2/serialize/versions.h of LibTorch 2.13. LibTorch builds miniz with
// MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS (cmake/Dependencies.cmake), so no CRC is checked anywhere.
#include "engine/io/zip_check.h"

#include "core/check.h"
#include "core/printable.h"

#include <caffe2/serialize/versions.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string_view>
#include <system_error>
#include <vector>

namespace ranzcr {
namespace {

// Zip records (PKWARE APPNOTE.TXT 4.3): signatures and fixed sizes.
constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kCentralHeaderSize = 46;
constexpr uint64_t kEndSize = 22;
constexpr uint64_t kZip64EndSize = 56;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint64_t kMaxCommentSize = 0xFFFF;
constexpr uint64_t kZip64Marker = 0xFFFFFFFF;  // a 32-bit size or offset whose value is in the zip64 field
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint64_t kStored = 0;
constexpr uint64_t kDeflated = 8;
constexpr uint64_t kMaxDeflateRatio = 1032;  // deflate's limit: 258 bytes from a 2-bit length + distance
constexpr uint16_t kEncryptedFlags = 0x0001 | 0x0040 | 0x2000;  // encrypted, strong encryption, masked header
constexpr uint16_t kPatchDataFlag = 0x0020;
constexpr uint32_t kDosDirectoryAttribute = 0x10;
// getAllRecords copies names into a MZ_ZIP_MAX_ARCHIVE_FILENAME_SIZE (512) buffer: longer ones come back cut.
constexpr size_t kMaxNameSize = 511;
constexpr uint64_t kMaxVersionSize = 4096;  // the version record is a short decimal number ("3\n")

// PyTorchStreamReader::init() refuses versions outside [kMinSupportedFileFormatVersion,
// kMaxSupportedFileFormatVersion] (caffe2/serialize/versions.h), which are 0x1 and 0xA since PyTorch 1.11,
// through the 2.x releases to main. We take the intersection of [1, 10] with the range of the LibTorch we
// are compiled against: a LibTorch that narrows it is followed, one that widens it is not trusted unchecked.
constexpr uint64_t kMinVersion = std::max<uint64_t>(1, caffe2::serialize::kMinSupportedFileFormatVersion);
constexpr uint64_t kMaxVersion = std::min<uint64_t>(10, caffe2::serialize::kMaxSupportedFileFormatVersion);

uint64_t read_le(std::string_view bytes, size_t at, size_t n) {
  uint64_t value = 0;
  for (size_t i = n; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}
uint64_t le16(std::string_view bytes, size_t at) {
  return read_le(bytes, at, 2);
}
uint64_t le32(std::string_view bytes, size_t at) {
  return read_le(bytes, at, 4);
}
uint64_t le64(std::string_view bytes, size_t at) {
  return read_le(bytes, at, 8);
}

/// Whether [offset, offset + n) lies inside a file of `size` bytes (no overflow for any values).
bool fits(uint64_t offset, uint64_t n, uint64_t size) {
  return offset <= size && n <= size - offset;
}

/// Name equality as miniz's mz_zip_reader_locate_file (flags 0) sees it: ASCII case-insensitive.
bool same_name_ignoring_case(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [&](char x, char y) { return lower(x) == lower(y); });
}

/// Random access to the bytes of an archive; read() is only asked for ranges inside [0, size()).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  virtual std::string read(uint64_t offset, uint64_t n) = 0;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(const std::string& bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  std::string read(uint64_t offset, uint64_t n) override { return bytes_.substr(offset, n); }

 private:
  const std::string& bytes_;
};

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : path_(path) {
    std::error_code error;
    RANZCR_CHECK(std::filesystem::is_regular_file(path, error), "cannot open ", path);
    in_.open(path, std::ios::binary);
    in_.seekg(0, std::ios::end);
    const std::streamoff end = in_ ? static_cast<std::streamoff>(in_.tellg()) : -1;
    RANZCR_CHECK(end >= 0, "cannot open ", path);
    size_ = static_cast<uint64_t>(end);
  }
  uint64_t size() const override { return size_; }
  std::string read(uint64_t offset, uint64_t n) override {
    std::string out(n, '\0');
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(out.data(), static_cast<std::streamsize>(n));
    RANZCR_CHECK(in_ && static_cast<uint64_t>(in_.gcount()) == n, "cannot read ", path_, " (", n,
                 " bytes at offset ", offset, ")");
    return out;
  }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

/// What an end of central directory record (or its zip64 version) declares.
struct EndRecord {
  uint64_t this_disk = 0;
  uint64_t directory_disk = 0;
  uint64_t entries_on_disk = 0;
  uint64_t entries = 0;
  uint64_t directory_size = 0;
  uint64_t directory_offset = 0;
  uint64_t at = 0;  // where the record starts: the central directory must end before it
};

/// One central directory entry, its 64-bit values resolved.
struct Entry {
  std::string name;
  uint64_t method = kStored;
  uint64_t compressed = 0;  // bytes in the file
  uint64_t size = 0;        // uncompressed
  uint64_t local_offset = 0;
  uint64_t data_offset = 0;  // after the local header, its name and extra field
  bool is_directory = false;
};

/// The entries init() reads whole, by name (found ignoring case, as miniz does).
struct InitRecords {
  std::vector<Entry> versions;           // "<folder>/version"
  std::vector<Entry> data_versions;      // "<folder>/.data/version", read instead when present
  std::vector<Entry> serialization_ids;  // "<folder>/.data/serialization_id", read when present
};

class ZipChecker {
 public:
  ZipChecker(ByteSource& source, const std::string& what) : source_(source), what_(what) {}

  void run() {
    check_start();
    const EndRecord end = read_end_records();
    check_entries(end);
  }

 private:
  template <typename... Parts>
  [[noreturn]] void fail(const Parts&... parts) const {
    RANZCR_FAIL(what_, ": not a valid torch archive (", parts..., ")");
  }
  template <typename... Parts>
  void check(bool ok, const Parts&... parts) const {
    if (!ok) fail(parts...);
  }

  /// init() asserts the file does not start with "PYTORCH1" (the preview-release format); torch::jit::load's
  /// check_zip_file refuses 0x80 0x02 (a legacy torch.save pickle); miniz needs the 22-byte end record.
  void check_start() {
    const uint64_t size = source_.size();
    check(size >= kEndSize, "a file of ", size, " bytes; a zip archive has at least ", kEndSize);
    const std::string head = source_.read(0, 8);
    check(head.compare(0, 2, "\x80\x02") != 0,
          "it starts like a legacy torch.save pickle, not a zip archive");
    check(head != "PYTORCH1", "it starts with PYTORCH1, the unsupported preview-release torch format");
  }

  /// As mz_zip_reader_locate_header_sig: the last end record signature with a whole record after it,
  /// searched in the last 22 + 65535 bytes (a record and the longest comment), which miniz searches too.
  uint64_t find_end_record() {
    const uint64_t size = source_.size();
    const uint64_t tail_at = size - std::min(size, kEndSize + kMaxCommentSize);
    const std::string tail = source_.read(tail_at, size - tail_at);
    for (size_t i = tail.size() - kEndSize + 1; i-- > 0;) {
      if (le32(tail, i) == kEndSig) return tail_at + i;
    }
    fail("no end of central directory record in its last ", tail.size(), " bytes");
  }

  /// mz_zip_reader_read_central_dir: the end record, replaced by the zip64 end record when a zip64 locator
  /// sits right before it (miniz looks only when there is room for both).
  EndRecord read_end_records() {
    const uint64_t at = find_end_record();
    const std::string record = source_.read(at, kEndSize);
    check(fits(at + kEndSize, le16(record, 20), source_.size()),
          "the end of central directory comment runs past the end of the file");
    EndRecord end{le16(record, 4),
                  le16(record, 6),
                  le16(record, 8),
                  le16(record, 10),
                  le32(record, 12),
                  le32(record, 16),
                  at};
    if (at >= kZip64LocatorSize + kZip64EndSize) {
      const std::string locator = source_.read(at - kZip64LocatorSize, kZip64LocatorSize);
      if (le32(locator, 0) == kZip64LocatorSig) end = read_zip64_end(locator);
    }
    check_end(end);
    return end;
  }

  /// The zip64 end record the locator points at, with miniz's checks (offset, record size, one disk).
  EndRecord read_zip64_end(const std::string& locator) {
    const uint64_t at = le64(locator, 8);
    check(fits(at, kZip64EndSize, source_.size()), "the zip64 end record offset ", at,
          " is past the end of the file");
    check(le32(locator, 16) == 1, "the zip64 locator counts ", le32(locator, 16),
          " disks; only single-disk archives are supported");
    const std::string record = source_.read(at, kZip64EndSize);
    check(le32(record, 0) == kZip64EndSig, "the zip64 locator points at offset ", at,
          ", which holds no zip64 end record");
    check(le64(record, 4) >= kZip64EndSize - 12, "a zip64 end record of ", le64(record, 4),
          " bytes; it has at least ", kZip64EndSize - 12);
    return EndRecord{le32(record, 16),
                     le32(record, 20),
                     le64(record, 24),
                     le64(record, 32),
                     le64(record, 40),
                     le64(record, 48),
                     at};
  }

  /// mz_zip_reader_read_central_dir's checks of the end record (one disk, counts, the directory inside the
  /// file and its practical limits), and init()'s "archive does not contain any files".
  void check_end(const EndRecord& end) const {
    check(end.this_disk == 0 && end.directory_disk == 0, "a multi-disk archive (this is disk ", end.this_disk,
          ", the central directory is on disk ", end.directory_disk, ")");
    check(end.entries == end.entries_on_disk, "it declares ", end.entries, " entries but ",
          end.entries_on_disk, " on this disk");
    check(end.entries > 0, "it has no entries");
    check(end.directory_size <= kZip64Marker, "a central directory of ", end.directory_size,
          " bytes; miniz reads at most 4 GiB");
    check(end.entries <= end.directory_size / kCentralHeaderSize, end.entries,
          " entries cannot fit a central directory of ", end.directory_size, " bytes");
    check(fits(end.directory_offset, end.directory_size, end.at), "the central directory (",
          end.directory_size, " bytes at offset ", end.directory_offset,
          ") runs past its end record at offset ", end.at);
  }

  /// Every entry of the central directory, in order; the first names the folder all must be in (init()
  /// needs the first in a folder, getAllRecords all in it). Then the records init() reads.
  void check_entries(const EndRecord& end) {
    const std::string directory = source_.read(end.directory_offset, end.directory_size);
    std::string folder;  // "<folder>/"
    InitRecords records;
    size_t pos = 0;
    for (uint64_t i = 0; i < end.entries; ++i) {
      Entry entry = parse_entry(directory, pos, i);
      check_local_header(entry);
      if (i == 0) folder = folder_of(entry.name);
      check(entry.name.compare(0, folder.size(), folder) == 0, "the entry ", in_quotes(entry.name),
            " is outside the folder ", in_quotes(folder), " of the first entry");
      note_init_record(entry, folder, records);
    }
    check_init_records(records, folder);
  }

  void note_init_record(const Entry& entry, const std::string& folder, InitRecords& records) const {
    if (same_name_ignoring_case(entry.name, folder + "version")) records.versions.push_back(entry);
    if (same_name_ignoring_case(entry.name, folder + ".data/version")) records.data_versions.push_back(entry);
    if (same_name_ignoring_case(entry.name, folder + ".data/serialization_id")) {
      records.serialization_ids.push_back(entry);
    }
  }

  /// init() reads ".data/serialization_id" when present, then ".data/version" or else "version" (with
  /// TORCH_CHECK(hasRecord("version"))), inflating them if compressed: any failure there leaks, so these
  /// must be stored, as LibTorch writes them. With duplicate names miniz may find either: all are checked.
  void check_init_records(const InitRecords& records, const std::string& folder) {
    const std::vector<Entry>& versions =
        records.data_versions.empty() ? records.versions : records.data_versions;
    check(!versions.empty(), "no version record (", in_quotes(folder + ".data/version"), " or ",
          in_quotes(folder + "version"), ")");
    for (const auto* list : {&records.serialization_ids, &versions}) {
      for (const Entry& record : *list) {
        check(record.method == kStored, "the record ", in_quotes(record.name), " is compressed (method ",
              record.method, "); LibTorch reads it on opening and writes it stored");
      }
    }
    for (const Entry& record : versions) check_version(record);
  }

  /// The central directory entry at `pos` of `directory` (`pos` then moves past it), with
  /// mz_zip_reader_read_central_dir's and mz_zip_file_stat_internal's checks, and ours.
  Entry parse_entry(std::string_view directory, size_t& pos, uint64_t index) const {
    check(directory.size() - pos >= kCentralHeaderSize && le32(directory, pos) == kCentralHeaderSig,
          "no central directory header for entry ", index, " at offset ", pos, " of the central directory");
    const std::string_view header = directory.substr(pos);
    const size_t name_size = le16(header, 28), extra_size = le16(header, 30);
    const size_t header_size = kCentralHeaderSize + name_size + extra_size + le16(header, 32);
    check(header_size <= header.size(), "the name, extra field and comment of entry ", index,
          " run past the central directory");
    Entry entry;
    entry.name = std::string(header.substr(kCentralHeaderSize, name_size));
    check_name(entry.name, index);
    check_method_and_flags(header, entry.name);
    entry.method = le16(header, 10);
    entry.compressed = le32(header, 20);
    entry.size = le32(header, 24);
    entry.local_offset = le32(header, 42);
    read_zip64_values(header.substr(kCentralHeaderSize + name_size, extra_size), entry);
    check_sizes(entry);
    entry.is_directory =
        (!entry.name.empty() && entry.name.back() == '/') || (le32(header, 38) & kDosDirectoryAttribute) != 0;
    pos += header_size;
    return entry;
  }

  /// Names that getAllRecords returns whole, and that hasRecord/getRecord (C strings) can find.
  void check_name(const std::string& name, uint64_t index) const {
    check(name.size() <= kMaxNameSize, "entry ", index, " has a name of ", name.size(),
          " bytes; LibTorch reads names of at most ", kMaxNameSize);
    check(name.find('\0') == std::string::npos, "the name of entry ", index, ", ", in_quotes(name),
          ", holds a NUL byte");
  }

  /// The methods miniz extracts (mz_zip_reader_extract_to_mem: stored or deflate; LibTorch stores tensor
  /// data and deflates TorchScript code), the flags mz_zip_reader_read_central_dir and
  /// mz_zip_reader_extract_to_mem refuse, and one disk.
  void check_method_and_flags(std::string_view header, const std::string& name) const {
    const uint64_t method = le16(header, 10), flags = le16(header, 8), disk = le16(header, 34);
    check(method == kStored || method == kDeflated, "the entry ", in_quotes(name),
          " uses compression method ", method, "; LibTorch reads stored (0) and deflate (8) entries");
    check((flags & kEncryptedFlags) == 0, "the entry ", in_quotes(name), " is encrypted");
    check((flags & kPatchDataFlag) == 0, "the entry ", in_quotes(name), " is compressed patch data");
    check(disk == 0, "the entry ", in_quotes(name), " starts on disk ", disk,
          "; only single-disk archives are supported");
  }

  /// As mz_zip_file_stat_internal: each of the uncompressed size, compressed size and local header offset
  /// that is 0xFFFFFFFF is the next 64-bit value of the entry's zip64 extra field (id 1), in that order. A
  /// missing field or value is refused (miniz would go on with 0xFFFFFFFF, unchecked against the file).
  void read_zip64_values(std::string_view extra, Entry& entry) const {
    const bool needs_zip64 =
        entry.size == kZip64Marker || entry.compressed == kZip64Marker || entry.local_offset == kZip64Marker;
    if (!needs_zip64) return;
    const std::string_view field = find_zip64_field(extra, entry.name);
    size_t at = 0;
    for (uint64_t* value : {&entry.size, &entry.compressed, &entry.local_offset}) {
      if (*value != kZip64Marker) continue;
      check(field.size() - at >= 8, "the zip64 extra field of ", in_quotes(entry.name),
            " lacks a 64-bit size or offset");
      *value = le64(field, at);
      at += 8;
    }
  }

  /// Sizes miniz accepts (mz_zip_reader_read_central_dir: stored entries are as long uncompressed, and only
  /// an empty entry has no compressed bytes), and a deflated size no deflate stream exceeds (1032:1), so
  /// getRecord never allocates more than that for the bytes in the file (checked with the local header).
  void check_sizes(const Entry& entry) const {
    if (entry.method == kStored) {
      check(entry.compressed == entry.size, "the stored entry ", in_quotes(entry.name), " is ",
            entry.compressed, " bytes in the file but declares ", entry.size, " bytes");
      return;
    }
    const uint64_t least_compressed = entry.size / kMaxDeflateRatio + (entry.size % kMaxDeflateRatio != 0);
    check(entry.compressed >= least_compressed, "the deflated entry ", in_quotes(entry.name), " declares ",
          entry.size, " bytes from ", entry.compressed, ", more than deflate's 1032:1");
  }

  /// The data of the zip64 extra field in `extra`, walking the fields as miniz does (each a 2-byte id, a
  /// 2-byte size and that many bytes, all inside the extra field).
  std::string_view find_zip64_field(std::string_view extra, const std::string& name) const {
    while (!extra.empty()) {
      check(extra.size() >= 4 && 4 + le16(extra, 2) <= extra.size(), "the entry ", in_quotes(name),
            " has a malformed extra field");
      const size_t size = le16(extra, 2);
      if (le16(extra, 0) == kZip64ExtraId) return extra.substr(4, size);
      extra.remove_prefix(4 + size);
    }
    fail("the entry ", in_quotes(name), " has a size or offset of 0xFFFFFFFF but no zip64 extra field");
  }

  /// As mz_zip_reader_read_central_dir and mz_zip_reader_extract_to_mem: the local header at the entry's
  /// offset (its signature; miniz reads only its name and extra lengths), then the data, inside the file.
  void check_local_header(Entry& entry) {
    const uint64_t size = source_.size();
    check(fits(entry.local_offset, kLocalHeaderSize, size), "the local header of ", in_quotes(entry.name),
          " at offset ", entry.local_offset, " is past the end of the file (", size, " bytes)");
    const std::string header = source_.read(entry.local_offset, kLocalHeaderSize);
    check(le32(header, 0) == kLocalHeaderSig, "no local header for ", in_quotes(entry.name), " at offset ",
          entry.local_offset);
    entry.data_offset = entry.local_offset + kLocalHeaderSize + le16(header, 26) + le16(header, 28);
    check(fits(entry.data_offset, entry.compressed, size), "the entry ", in_quotes(entry.name), " declares ",
          entry.compressed, " bytes at offset ", entry.data_offset, ", past the end of the file (", size,
          " bytes)");
  }

  /// init(): "file in archive is not in a subdirectory" unless the first name has a '/'.
  std::string folder_of(const std::string& first_name) const {
    const size_t slash = first_name.find('/');
    check(slash != std::string::npos, "the first entry ", in_quotes(first_name),
          " is not inside a folder, as in archive/data.pkl");
    return first_name.substr(0, slash + 1);
  }

  /// init() reads the version record whole (getRecord allocates its declared size; a directory entry is
  /// not read at all) and parses it with std::stoull, which throws invalid_argument (init reports it) or
  /// out_of_range (init lets it through); then it refuses versions outside the supported range.
  void check_version(const Entry& record) {
    check(!record.is_directory, "the version record ", in_quotes(record.name), " is a directory entry");
    check(record.size <= kMaxVersionSize, "the version record ", in_quotes(record.name), " is ", record.size,
          " bytes; it is a short decimal number");
    const std::string text = source_.read(record.data_offset, record.size);
    bool has_digits = false, too_large = false;
    const uint64_t version = parse_like_stoull(text, has_digits, too_large);
    const std::string holds = " holds " + in_quotes(text);
    check(has_digits, "the version record ", in_quotes(record.name), holds, ", not a number");
    check(!too_large, "the version record ", in_quotes(record.name), holds, ", too large");
    check(version >= kMinVersion && version <= kMaxVersion, "the version record ", in_quotes(record.name),
          holds, "; LibTorch reads file format versions ", kMinVersion, " to ", kMaxVersion);
  }

  /// std::stoull(text) (base 10, strtoull's rules): leading whitespace, an optional sign ('-' negates modulo
  /// 2^64), then digits up to the first other byte (a NUL ends the C string stoull sees).
  static uint64_t parse_like_stoull(std::string_view text, bool& has_digits, bool& too_large) {
    size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const bool negative = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    uint64_t value = 0;
    has_digits = false;
    too_large = false;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
      too_large = too_large || value > (UINT64_MAX - digit) / 10;
      value = value * 10 + digit;
      has_digits = true;
    }
    return negative ? 0 - value : value;
  }

  ByteSource& source_;
  const std::string& what_;
};

}  // namespace

void check_torch_zip(const std::string& bytes, const std::string& what) {
  MemorySource source(bytes);
  ZipChecker(source, what).run();
}

void check_torch_zip_file(const std::string& path) {
  FileSource source(path);
  ZipChecker(source, path).run();
}

std::string torch_zip_problem(const std::string& path) {
  try {
    check_torch_zip_file(path);
  } catch (const std::runtime_error& e) {
    const std::string message = e.what(), prefix = path + ": ";
    return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
  }
  return "";
}

}  // namespace ranzcr
