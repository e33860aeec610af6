#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmRLECodec.cxx: an RLE header's segment count was used unchecked to index its 15 segment
# offsets (a read far past them, SEGV, found by fuzz/targets/dicom.cpp). More than 15 segments (PS3.5
# G.3.1) now fails the read. Applied by scripts/gdcm.sh.
s{(    uint32_t numSegments = Header.NumSegments;\n)}{$1    if( numSegments > 15 ) return false; // ranzcr-cpp: segment count\n};
