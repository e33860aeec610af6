#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEG2000Codec.cxx: DecodeByStreamsCommon sized its output from the DICOM header (rows x
# columns x bits allocated x components) but filled it from OpenJPEG's image: each component's own width and
# height, at 1, 2 or 4 bytes by the stream's precision. A codestream declaring a larger image or deeper
# samples than the header wrote past the output (a heap overflow, found by CI's 30 s pass of
# fuzz/targets/dicom.cpp as a corrupted vector freed in data/dicom.cpp; GDCM itself is not instrumented).
# A component that does not fit the output now fails the decode. Applied by scripts/gdcm.sh.
s{(    int hr = int_ceildivpow2\(image->comps\[compno\]\.h, image->comps\[compno\]\.factor\);\n)}{$1    const size_t ranzcr_bytes = comp->prec <= 8 ? 1 : comp->prec <= 16 ? 2 : 4; // ranzcr-cpp: output size
    if( wr <= 0 || hr <= 0 || !comp->data || (size_t)wr * (size_t)hr * (size_t)image->numcomps * ranzcr_bytes > len ) // ranzcr-cpp: output size
      { delete[] raw; if (dinfo) opj_destroy_codec(dinfo); opj_image_destroy(image); return std::make_pair<char*,size_t>(nullptr,0); } // ranzcr-cpp: output size
};
