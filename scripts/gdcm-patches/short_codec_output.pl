#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmBitmap.cxx: each Try*Codec copied the image's length out of the codec's output, asserting
# (compiled out in Release) that the output was that long; a JPEG-LS stream smaller than the image decoded to
# less, and the copy read past it (a heap-buffer-overflow found by fuzz/targets/dicom.cpp). Output shorter
# than the image now fails the read. Applied by scripts/gdcm.sh.
s{^(\s*)((?:if\(buffer\) )?memcpy\(buffer, outbv->GetPointer\(\), len /\*outbv->GetLength\(\)\*/ \);)}{$1if( buffer && (!outbv || outbv->GetLength() < len) ) return false; // ranzcr-cpp: short output\n$1$2}mg;
