#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEG2000Codec.cxx and gdcmJPEGLSCodec.cxx: Decode copied the pixel data's fragments into
# a `new char[]` buffer with SequenceOfFragments::GetBuffer, which throws (gdcmAssertAlwaysMacro, a
# std::string) on a fragment without a value; the buffer leaked (found 10 minutes into a 30-minute run of
# fuzz/targets/dicom.cpp: 1 byte). The buffer is now freed when the copy throws. Applied by scripts/gdcm.sh.
s{^(\s*)sf->GetBuffer\(buffer, totalLen\);}{$1try { sf->GetBuffer(buffer, totalLen); } catch (...) { delete[] buffer; throw; } // ranzcr-cpp: fragment assert}mg;
