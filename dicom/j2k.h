// JPEG 2000 in DICOM (transfer syntaxes 1.2.840.10008.1.2.4.90 and .91) through OpenJPEG (Debian's
// libopenjp2): DCMTK's free modules have no JPEG 2000 codec. Private to dicom/*.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ranzcr::detail {

/// Decodes one greyscale JPEG 2000 codestream (J2K, or a JP2 file) of exactly `cols` x `rows` pixels into
/// little-endian samples of `bits_allocated` (8 or 16) bits, as uncompressed pixel data would hold them
/// (negative samples in two's complement). The stream's size is checked against the header's before its
/// image is allocated. Returns "" and fills `out`, or says what is wrong (one line).
std::string decode_j2k(const unsigned char* stream, size_t size, int cols, int rows, int bits_allocated,
                       std::vector<unsigned char>* out);

/// Encodes 16-bit samples (`is_signed`: int16) losslessly as a J2K codestream of `bits_stored` bits.
/// Throws std::runtime_error when OpenJPEG fails.
std::vector<unsigned char> encode_j2k_lossless(const uint16_t* samples, int cols, int rows, int bits_stored,
                                               bool is_signed);

}  // namespace ranzcr::detail
