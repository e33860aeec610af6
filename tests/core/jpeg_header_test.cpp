// jpeg_scan_headers: what a JPEG or JPEG-LS stream says before its first scan, on streams built byte by byte
// (T.81 B.2, ISO 14495-1 C.2), including the malformed values the dicom fuzz target found DCMTK trusting.
#include "core/jpeg_header.h"

#include <gtest/gtest.h>

#include <vector>

namespace ranzcr {
namespace {

using Bytes = std::vector<unsigned char>;

// A segment: marker, then its length (2 bytes, counting itself) and payload.
void segment(Bytes& b, unsigned char marker, const Bytes& payload) {
  const size_t n = payload.size() + 2;
  b.insert(b.end(), {0xFF, marker, static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n & 0xFF)});
  b.insert(b.end(), payload.begin(), payload.end());
}

// SOI, a DHT with one table (class/destination `tc_th`, two symbols), a frame header of one component
// (marker `sof`, precision `p`, 64 x 32), a scan header (Ss, Se, Ah/Al), then entropy-coded bytes.
Bytes stream(unsigned char sof, int p, unsigned char tc_th, Bytes symbols, Bytes ss_se_ahal) {
  Bytes b = {0xFF, 0xD8};
  Bytes dht = {tc_th, 0, static_cast<unsigned char>(symbols.size())};
  dht.resize(17, 0);
  dht.insert(dht.end(), symbols.begin(), symbols.end());
  segment(b, 0xC4, dht);
  segment(b, sof, {static_cast<unsigned char>(p), 0, 32, 0, 64, 1, 1, 0x11, 0});
  Bytes sos = {1, 1, 0x00};
  sos.insert(sos.end(), ss_se_ahal.begin(), ss_se_ahal.end());
  segment(b, 0xDA, sos);
  b.insert(b.end(), {0x12, 0x34, 0xFF, 0xD9});
  return b;
}

TEST(JpegScanHeaders, ReadsAWellFormedLosslessStream) {
  const Bytes b = stream(0xC3, 16, 0x00, {0, 16}, {1, 0, 0x00});
  const JpegScanHeaders h = jpeg_scan_headers(b.data(), b.size());
  EXPECT_EQ(h.sof, 0xC3);
  EXPECT_EQ(h.precision, 16);
  EXPECT_EQ(h.width, 64);
  EXPECT_EQ(h.height, 32);
  EXPECT_EQ(h.dc_symbol_over_16, -1);
  EXPECT_EQ(h.bad_table, -1);
  EXPECT_EQ(h.ss, 1);  // the predictor
  EXPECT_EQ(h.se, 0);
  EXPECT_EQ(h.al, 0);
}

TEST(JpegScanHeaders, FindsWhatDcmtksDecodersTakeUnchecked) {
  Bytes b = stream(0xC3, 48, 0x00, {31}, {1, 0, 0x03});  // 48-bit samples, a 31-bit symbol, Al 3
  JpegScanHeaders h = jpeg_scan_headers(b.data(), b.size());
  EXPECT_EQ(h.precision, 48);
  EXPECT_EQ(h.dc_symbol_over_16, 31);
  EXPECT_EQ(h.al, 3);

  b = stream(0xC1, 8, 0x10, {200}, {0, 63, 0x00});  // an AC table: any symbol is fine
  EXPECT_EQ(jpeg_scan_headers(b.data(), b.size()).dc_symbol_over_16, -1);
  b = stream(0xC1, 8, 0xF7, {1}, {0, 63, 0x00});  // class 15, destination 7
  EXPECT_EQ(jpeg_scan_headers(b.data(), b.size()).bad_table, 0xF7);

  b = stream(0xF7, 12, 0x00, {}, {0, 247, 0x00});  // JPEG-LS: NEAR 0, interleave mode 247
  h = jpeg_scan_headers(b.data(), b.size());
  EXPECT_EQ(h.sof, 0xF7);
  EXPECT_EQ(h.se, 247);
}

TEST(JpegScanHeaders, StopsAtTheEndOfEveryTruncation) {
  const Bytes whole = stream(0xC3, 16, 0x00, {0, 16}, {1, 0, 0x00});
  for (size_t n = 0; n < whole.size(); ++n) {
    const Bytes cut(whole.begin(),
                    whole.begin() + n);  // a fresh buffer of exactly n bytes (ASan sees past it)
    const JpegScanHeaders h = jpeg_scan_headers(cut.data(), cut.size());
    if (h.al >= 0) EXPECT_EQ(h.precision, 16) << n;  // a scan header is only reported whole
    if (h.sof >= 0) EXPECT_EQ(h.width, 64) << n;     // and a frame header
  }
}

}  // namespace
}  // namespace ranzcr
