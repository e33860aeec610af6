#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEG2000Codec.cxx, after j2k_output_size.pl: DecodeByStreamsCommon allocated its output
# (new char[], not zeroed) from the DICOM header and filled only what OpenJPEG's image covers. A codestream
# declaring a smaller image than the header (64 x 64 in a 128 x 128 header) left the rest of the output as
# whatever the heap held, and that was returned as pixels: an image made of the process's old memory. A
# component whose size differs from the header's rows and columns, or that does not fill the output, now fails
# the decode. (Subsampled colour components also fail; the loader reads greyscale only.) Applied by
# scripts/gdcm.sh.
s{(    if\( wr <= 0 \|\| hr <= 0 .*// ranzcr-cpp: output size\n.*// ranzcr-cpp: output size\n)}{$1    if( (unsigned int)wr != Dimensions[0] || (unsigned int)hr != Dimensions[1] || (size_t)wr * (size_t)hr * (size_t)image->numcomps * ranzcr_bytes != len ) // ranzcr-cpp: stream dims
      { delete[] raw; if (dinfo) opj_destroy_codec(dinfo); opj_image_destroy(image); return std::make_pair<char*,size_t>(nullptr,0); } // ranzcr-cpp: stream dims
};
