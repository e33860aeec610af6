#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEGCodec.cxx: where a fragment fails to decode and the JPEG stream declares another bit
# depth than the DICOM header, DecodeByStreams swaps in a codec for the stream's depth, which is none (null)
# for a depth without one; Decode then asked that null codec whether it was suspended (a null dereference,
# found by fuzz/targets/dicom.cpp after jpeg_no_codec.pl). No codec now fails the decode. Applied by
# scripts/gdcm.sh.
s{const bool suspended = Internal->IsStateSuspension\(\);}{const bool suspended = !Internal || Internal->IsStateSuspension(); // ranzcr-cpp: codec dropped};
