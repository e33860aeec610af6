#include "dicom/length_check.h"

#include "core/check.h"

#include <cstdint>
#include <cstring>
#include <string_view>

namespace ranzcr {
namespace {

constexpr uint32_t kUndefined = 0xFFFFFFFF;
constexpr int kMaxDepth = 16;  // sequences within sequences (parsers recurse per level)
constexpr uint32_t kItem = 0xFFFEE000, kItemEnd = 0xFFFEE00D, kSequenceEnd = 0xFFFEE0DD;
constexpr uint32_t kPixelData = 0x7FE00010;

// VRs whose length is 4 bytes after 2 reserved ones in explicit VR (PS3.5 7.1.2).
bool long_vr(std::string_view vr) {
  for (const char* v : {"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV"})
    if (vr == v) return true;
  return false;
}

// One of the VRs of PS3.5 6.2: what tells an explicit VR element from an implicit one, element by element,
// as lenient parsers do (files that say explicit VR and hold implicit VR elements exist).
bool valid_vr(const unsigned char* p) {
  static const char* const kVrs[] = {"AE", "AS", "AT", "CS", "DA", "DS", "DT", "FD", "FL", "IS", "LO", "LT",
                                     "OB", "OD", "OF", "OL", "OV", "OW", "PN", "SH", "SL", "SQ", "SS", "ST",
                                     "SV", "TM", "UC", "UI", "UL", "UN", "UR", "US", "UT", "UV"};
  for (const char* vr : kVrs)
    if (p[0] == vr[0] && p[1] == vr[1]) return true;
  return false;
}

class Walker {
 public:
  Walker(const unsigned char* bytes, size_t size, const std::string& name)
      : b_(bytes), size_(size), name_(name) {}

  size_t run() {
    size_t pos = size_ >= 132 && std::memcmp(b_ + 128, "DICM", 4) == 0 ? 132 : 0;
    const bool has_meta = pos + 4 <= size_ && b_[pos] == 0x02 && b_[pos + 1] == 0x00;
    if (has_meta) pos = meta_group(pos);
    if (deflated_) return size_ * 1032;
    if (!has_meta && pos + 4 <= size_)  // big endian when its first group reads small that way only
      big_ = u16(pos, false) > 0xFF && u16(pos, true) <= 0xFF;
    elements(pos, size_, 0, /*until_item_end=*/false);
    return size_;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    RANZCR_FAIL("DICOM file ", name_, ": cannot be read (not DICOM, corrupt or truncated: ", why, ")");
  }

  uint32_t u16(size_t at, bool big) const {
    return big ? (b_[at] << 8) | b_[at + 1] : b_[at] | (b_[at + 1] << 8);
  }
  uint32_t u32(size_t at, bool big) const {
    return big ? (u16(at, true) << 16) | u16(at + 2, true) : u16(at, false) | (u16(at + 2, false) << 16);
  }
  void need(size_t pos, size_t n, size_t end, const char* what) const {
    if (pos > end || n > end - pos)
      fail(std::string(what) + " at byte " + std::to_string(pos) + " runs past " +
           (end == size_ ? "the end of the file" : "its sequence or item"));
  }

  // The file meta group (0002,xxxx): explicit VR little endian. Notes the data set's transfer syntax.
  size_t meta_group(size_t pos) {
    while (pos + 8 <= size_ && u16(pos, false) == 0x0002) {
      const Header h = header(pos, size_, /*is_explicit=*/true, /*big=*/false);
      if (h.length == kUndefined) fail("a file meta element of undefined length");
      need(h.value, h.length, size_, "a file meta element");
      if (h.tag == 0x00020000) group_length(pos, h);
      if (h.tag == 0x00020010)
        syntax(std::string_view(reinterpret_cast<const char*>(b_ + h.value), h.length));
      pos = h.value + h.length;
    }
    return pos;
  }

  void syntax(std::string_view uid) {
    while (!uid.empty() && (uid.back() == '\0' || uid.back() == ' ')) uid.remove_suffix(1);
    explicit_ = uid != "1.2.840.10008.1.2";
    big_ = uid == "1.2.840.10008.1.2.2";
    deflated_ = uid == "1.2.840.10008.1.2.1.99";
  }

  struct Header {
    uint32_t tag = 0, length = 0;
    size_t value = 0;  // where the value starts
    bool sequence = false;
  };

  // The element header at `pos`: tag, VR (explicit) and length.
  Header header(size_t pos, size_t end, bool is_explicit, bool big) const {
    need(pos, 8, end, "an element header");
    Header h;
    h.tag = (u16(pos, big) << 16) | u16(pos + 2, big);
    // Items, delimiters and implicit VR elements: a 4-byte length.
    if ((h.tag >> 16) == 0xFFFE || !is_explicit || !valid_vr(b_ + pos + 4)) {
      h.length = u32(pos + 4, big);
      h.value = pos + 8;
      return h;
    }
    const std::string_view vr(reinterpret_cast<const char*>(b_ + pos + 4), 2);
    h.sequence = vr == "SQ";
    if (long_vr(vr)) {
      need(pos, 12, end, "an element header");
      h.length = u32(pos + 8, big);
      h.value = pos + 12;
    } else {
      h.length = u16(pos + 6, big);
      h.value = pos + 8;
    }
    return h;
  }

  // (0002,0000), the meta group's length, is one UL (PS3.10 7.1). DCMTK 3.6.7 casts it to its UL class
  // whatever its VR says (dcmetinf.cc, readGroupLength): with another VR that is a call through the wrong
  // type, which UBSan reports.
  void group_length(size_t pos, const Header& h) const {
    const std::string_view vr(reinterpret_cast<const char*>(b_ + pos + 4), 2);
    if (valid_vr(b_ + pos + 4) && vr != "UL")
      fail("the file meta group length (0002,0000) has VR " + std::string(vr) + ", not UL");
    if (h.length != 4)
      fail("the file meta group length (0002,0000) is " + std::to_string(h.length) + " bytes, not 4");
  }

  // The elements in [pos, end), or up to an item delimiter (an item of undefined length). Returns where the
  // walk stopped (after the delimiter).
  size_t elements(size_t pos, size_t end, int depth, bool until_item_end) {
    while (pos < end) {
      const Header h = header(pos, end, explicit_, big_);
      if (h.tag == kItemEnd) {
        if (!until_item_end) fail("an item delimiter outside an item");
        return h.value;
      }
      if ((h.tag >> 16) == 0xFFFE) fail("an item or sequence delimiter where an element belongs");
      pos = value(h, end, depth);
    }
    if (until_item_end) fail("an item without its delimiter");
    return pos;
  }

  // Skips or walks an element's value; returns where the next element starts.
  size_t value(const Header& h, size_t end, int depth) {
    if (h.length != kUndefined) {
      need(h.value, h.length, end, "an element's value");
      // A sequence (or, in implicit VR, any value that starts with an item) is walked: a parser reads its
      // items.
      if (h.sequence || (h.length >= 8 && h.tag != kPixelData && u32(h.value, big_) == kItem))
        items(h.value, h.value + h.length, depth + 1, /*fragments=*/false, /*until_end=*/false);
      return h.value + h.length;
    }
    // Undefined length: a sequence, or encapsulated pixel data (fragments), up to the sequence delimiter.
    return items(h.value, end, depth + 1, /*fragments=*/h.tag == kPixelData, /*until_end=*/true);
  }

  size_t items(size_t pos, size_t end, int depth, bool fragments, bool until_end) {
    if (depth > kMaxDepth) fail("sequences nested more than " + std::to_string(kMaxDepth) + " deep");
    while (pos < end) {
      need(pos, 8, end, "an item header");
      const uint32_t tag = (u16(pos, big_) << 16) | u16(pos + 2, big_), length = u32(pos + 4, big_);
      pos += 8;
      if (tag == kSequenceEnd) {
        if (!until_end) fail("a sequence delimiter in a sequence of defined length");
        return pos;
      }
      if (tag != kItem) fail("a sequence holding something other than items");
      if (length == kUndefined) {
        if (fragments) fail("a pixel data fragment of undefined length");
        pos = elements(pos, end, depth, /*until_item_end=*/true);
        continue;
      }
      need(pos, length, end, "an item");
      if (!fragments) elements(pos, pos + length, depth, /*until_item_end=*/false);
      pos += length;
    }
    if (until_end) fail("a sequence without its delimiter");
    return pos;
  }

  const unsigned char* b_;
  size_t size_;
  const std::string& name_;
  bool explicit_ = true, big_ = false, deflated_ = false;
};

}  // namespace

size_t check_dicom_lengths(const unsigned char* bytes, size_t size, const std::string& name) {
  return Walker(bytes, size, name).run();
}

}  // namespace ranzcr
