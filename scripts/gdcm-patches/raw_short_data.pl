#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmRAWCodec.cxx: RAWCodec::DecodeBytes copied as many bytes as the image needs from pixel
# data that may hold fewer (a heap read past the buffer, found by fuzz/targets/dicom.cpp; GDCM 3.0.24 fixed
# the same, CVE-2024-25569), or returned the short data as if whole, leaving the rest of the image
# unwritten. Short pixel data now fails the decode. Applied by scripts/gdcm.sh.
s{(gdcmWarningMacro\( "Requesting too much data. Truncating result" \);\n)(\s*)memcpy\(outBytes, inBytes, inBufferLength\);}{$1$2return false; // ranzcr-cpp: short data};
s{(\n)(\s*)(memcpy\(outBytes, copy, len\);)}{$1$2if( len != inOutBufferLength ) { delete[] copy; return false; } // ranzcr-cpp: short data\n$2$3};
s{(\n)(\s*)(memcpy\(outBytes, str\.c_str\(\), inOutBufferLength\);)}{$1$2if( str.size() < inOutBufferLength ) return false; // ranzcr-cpp: short data\n$2$3};
