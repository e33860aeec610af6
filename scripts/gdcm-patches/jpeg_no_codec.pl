#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEGCodec.cxx: for a bit depth over 16 there is no JPEG codec (Internal is null), yet
# GetHeaderInfo, Decode, DecodeByStreams and EncodeBuffer called through it (a null dereference while a
# DICOM file is read, found by fuzz/targets/dicom.cpp). They now return false. Applied by scripts/gdcm.sh.
s{\n  assert\( Internal \);\n}{\n  if( !Internal ) return false; // ranzcr-cpp: no codec\n}g;
s{(bool JPEGCodec::DecodeByStreams\(std::istream &is, std::ostream &os\)\n\{\n)}{$1  if( !Internal ) return false; // ranzcr-cpp: no codec\n};
