// A walk over a DICOM file's elements before DCMTK parses it. A parser allocates each element's value for the
// length the file declares before it reads it, and recurses into nested sequences, so a few hundred bytes
// could make it ask for gigabytes or overflow the stack. This walk reads only tags and lengths. (DCMTK
// itself is also given a stream it can reopen, so it skips long values instead: dicom/decode.cpp.)
#pragma once

#include <cstddef>
#include <string>

namespace ranzcr {

/// Checks the data elements of the DICOM file `bytes` (`name` in errors): every defined length fits in
/// the bytes left around it (in its item, its sequence, the file), items and delimiters are where
/// sequences and undefined lengths need them, and sequences nest at most 16 deep. The file meta group is
/// read as explicit VR little endian, the data set in the transfer syntax's byte order (without a file
/// meta group: big endian when its first group number reads small only that way), each element as
/// explicit VR when a valid VR follows its tag and as implicit VR otherwise (the more lenient reading). A
/// deflated data set is not walked (its lengths lie in the compressed stream). Throws std::runtime_error
/// with one line "DICOM file NAME: cannot be read (not DICOM, corrupt or truncated: <what>)". Returns the
/// longest value the file can hold: its size, or 1032 times it for a deflated data set (deflate's bound).
size_t check_dicom_lengths(const unsigned char* bytes, size_t size, const std::string& name);

}  // namespace ranzcr
