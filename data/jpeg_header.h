// A JPEG stream's frame size from its header, read before any decoder allocates for it: the loader's JPEG
// files (data/image_pipeline.cpp) and DICOM's encapsulated JPEG and JPEG-LS frames (data/dicom.cpp).
#pragma once

#include <cstddef>

namespace ranzcr {

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
    const bool sof =
        (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) ||
        marker == 0xF7;
    if (sof) {
      *height = (b[i + 5] << 8) | b[i + 6];
      *width = (b[i + 7] << 8) | b[i + 8];
      return true;
    }
    i += 2 + len;
  }
  return false;
}

/// The first symbol above 16 in a DC or lossless Huffman table (DHT, table class 0) before the first scan of
/// the stream `b` (`size` bytes, starting with SOI), or -1 when there is none. Such a symbol is a number of
/// bits (T.81 F.1.2.1, H.1.2.2: at most 16); IJG libjpeg in DCMTK 3.6.7 only logs it (its strict check is a
/// compile-time option Debian does not set) and then indexes its 17-entry tables with it.
inline int jpeg_dc_symbol_over_16(const unsigned char* b, size_t size) {
  size_t i = 2;
  while (i + 4 <= size) {
    if (b[i] != 0xFF) return -1;
    const unsigned char marker = b[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return -1;  // SOS, EOI
    const size_t end = i + 2 + ((static_cast<size_t>(b[i + 2]) << 8) | b[i + 3]);
    if (marker == 0xC4)  // DHT: tables of Tc/Th, 16 counts, then the symbols
      for (size_t t = i + 4; t + 17 <= end && t + 17 <= size;) {
        size_t n = 0;
        for (size_t k = 1; k <= 16; ++k) n += b[t + k];
        const bool dc = (b[t] >> 4) == 0;
        for (size_t k = t + 17; dc && k < t + 17 + n && k < end && k < size; ++k)
          if (b[k] > 16) return b[k];
        t += 17 + n;
      }
    i = end;
  }
  return -1;
}

/// JPEG-LS: the interleave mode (ILV) of the first scan header (SOS) of the stream `b` (`size` bytes,
/// starting with SOI), or -1 when no whole scan header is found before the markers run out. PS3.5 A.4.5
/// allows 0 (none), 1 (line) and 2 (sample); CharLS stores the byte into its enum unchecked.
inline int jpeg_ls_interleave_mode(const unsigned char* b, size_t size) {
  size_t i = 2;
  while (i + 4 < size) {
    if (b[i] != 0xFF) return -1;
    const unsigned char marker = b[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xDA) {  // SOS: length, Ns, Ns x (Ci, Tmi), NEAR, ILV
      const size_t ilv = i + 4 + 1 + 2 * static_cast<size_t>(b[i + 4]) + 1;
      return ilv < size ? b[ilv] : -1;
    }
    i += 2 + ((static_cast<size_t>(b[i + 2]) << 8) | b[i + 3]);
  }
  return -1;
}

}  // namespace ranzcr
