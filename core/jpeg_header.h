// A JPEG stream's frame size from its header, read before any decoder allocates for it: the loader's JPEG
// files (data/image_pipeline.cpp) and DICOM's encapsulated JPEG and JPEG-LS frames (dicom/decode.cpp).
#pragma once

#include <algorithm>
#include <cstddef>

namespace ranzcr {

/// Whether `marker` starts a frame header: SOF0-SOF15 less DHT (C4), JPG (C8) and DAC (CC), or JPEG-LS's
/// SOF55.
inline bool is_sof(unsigned char marker) {
  return (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) ||
         marker == 0xF7;
}

/// Width and height from the SOFn marker (JPEG baseline, extended, progressive, lossless, arithmetic) or
/// JPEG-LS's SOF55 of the stream `b` (`size` bytes, starting with SOI), or false when no frame header is
/// found before the markers run out.
inline bool jpeg_frame_size(const unsigned char* b, size_t size, int* width, int* height) {
  size_t i = 2;
  while (i + 9 < size) {
    if (b[i] != 0xFF) return false;
    const unsigned char marker = b[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    const size_t len = (static_cast<size_t>(b[i + 2]) << 8) | b[i + 3];
    if (is_sof(marker)) {
      *height = (b[i + 5] << 8) | b[i + 6];
      *width = (b[i + 7] << 8) | b[i + 8];
      return true;
    }
    i += 2 + len;
  }
  return false;
}

/// What a JPEG or JPEG-LS stream says before its first scan's data, for the checks no decoder of DCMTK 3.6.7
/// makes (dicom/decode.cpp). -1 where the stream has no such value before the markers run out.
struct JpegScanHeaders {
  int sof = -1;                 // the frame header's marker: 0xC0-0xCF (JPEG), 0xF7 (JPEG-LS)
  int precision = -1;           // its sample precision P, in bits
  int width = -1, height = -1;  // its X and Y
  /// The first symbol above 16 of a DC or lossless Huffman table (DHT, class 0). A symbol is a number of bits
  /// (T.81 F.1.2.1, H.1.2.2: at most 16); IJG libjpeg in DCMTK only logs a larger one (its strict check is a
  /// compile-time option Debian does not set) and then indexes its 17-entry tables with it.
  int dc_symbol_over_16 = -1;
  /// The first Huffman table of a class other than 0 or 1 or a destination other than 0..3 (T.81 B.2.4.2):
  /// IJG libjpeg forms a pointer into its four tables with it before it checks (UBSan).
  int bad_table = -1;
  /// The first scan header (SOS), after its components: Ss, Se and Al (JPEG: spectral selection or the
  /// lossless predictor, and the point transform; JPEG-LS: NEAR, ILV and the point transform).
  int ss = -1, se = -1, al = -1;
};

inline void read_dht(const unsigned char* b, size_t from, size_t end, JpegScanHeaders* h) {
  for (size_t t = from; t + 17 <= end;) {  // tables of Tc/Th, 16 counts, then the symbols
    if (((b[t] >> 4) > 1 || (b[t] & 0x0F) > 3) && h->bad_table < 0) h->bad_table = b[t];
    size_t n = 0;
    for (size_t k = 1; k <= 16; ++k) n += b[t + k];
    for (size_t k = t + 17; (b[t] >> 4) == 0 && k < t + 17 + n && k < end; ++k)
      if (b[k] > 16 && h->dc_symbol_over_16 < 0) h->dc_symbol_over_16 = b[k];
    t += 17 + n;
  }
}

/// Reads the stream `b` (`size` bytes, starting with SOI) up to its first scan's data. A frame header after
/// the first scan header is not seen (T.81 B.2.1: the frame header comes first).
inline JpegScanHeaders jpeg_scan_headers(const unsigned char* b, size_t size) {
  JpegScanHeaders h;
  size_t i = 2;
  while (i + 4 <= size && b[i] == 0xFF) {
    const unsigned char marker = b[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xD9) break;  // EOI
    const size_t end = std::min(size, i + 2 + ((static_cast<size_t>(b[i + 2]) << 8) | b[i + 3]));
    if (is_sof(marker) && h.sof < 0 && i + 8 < end) {  // length, P, Y (2 bytes), X (2 bytes)
      h.sof = marker;
      h.precision = b[i + 4];
      h.height = (b[i + 5] << 8) | b[i + 6];
      h.width = (b[i + 7] << 8) | b[i + 8];
    }
    if (marker == 0xC4) read_dht(b, i + 4, end, &h);
    if (marker == 0xDA) {  // SOS: length, Ns, Ns x (Cs, Td/Ta), Ss, Se, Ah/Al
      const size_t at = i + 5 + 2 * static_cast<size_t>(i + 4 < end ? b[i + 4] : 0);
      if (at + 2 < end) {
        h.ss = b[at];
        h.se = b[at + 1];
        h.al = b[at + 2] & 0x0F;
      }
      break;
    }
    i = end;
  }
  return h;
}

}  // namespace ranzcr
