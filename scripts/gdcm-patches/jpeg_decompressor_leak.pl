#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEGBITSCodec.hxx (the 8-, 12- and 16-bit IJG codecs): GetHeaderInfo and DecodeByStreams
# return false on several paths (an unsupported process or colour space, too many warnings) without destroying
# the decompressor they created, and the codec's destructor does not either: its memory pools leaked (730 KB
# for one 16-bit file, found by fuzz/targets/dicom.cpp). The destructor now destroys it, and so does each
# read before it creates a new one (jpeg_destroy_decompress is a no-op on a destroyed or zeroed one).
# Applied by scripts/gdcm.sh.
s{(JPEGBITSCodec::~JPEGBITSCodec\(\)\n\{\n)}{$1  jpeg_destroy_decompress(&Internals->cinfo); // ranzcr-cpp: a decompressor left by a failed read\n};
s{^(\s*)(jpeg_create_decompress\(&cinfo\);)}{$1jpeg_destroy_decompress(&cinfo); // ranzcr-cpp: a decompressor left by a failed read\n$1$2}mg;
