#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEGLSCodec.cxx: DecodeByStreamsCommon and Decode's 3-D path sized the decoded frame from
# the JPEG-LS stream's own header (height x width x bytes x components, in int: 65535 x 65344 x 32 overflows)
# and resized a vector to it before CharLS looked at the stream. The exception that threw leaked Decode's copy
# of the stream (5 KB a file, found by fuzz/targets/dicom.cpp); a stream could also ask for gigabytes. The
# size is now computed without overflow, and a stream larger than the image GDCM reads fails the decode.
# Applied by scripts/gdcm.sh.
sub check {
  my ($indent, $free) = @_;
  return "${indent}size_t ranzcr_len = 0; // ranzcr-cpp: stream size\n"
    . "${indent}if( params.height <= 0 || params.width <= 0 || params.components <= 0 || params.bitsPerSample <= 0\n"
    . "${indent}  || params.bitsPerSample > 16 || params.components > 4\n"
    . "${indent}  || __builtin_mul_overflow((size_t)params.height, (size_t)params.width, &ranzcr_len)\n"
    . "${indent}  || __builtin_mul_overflow(ranzcr_len, (size_t)((params.bitsPerSample + 7) / 8) * (size_t)params.components, &ranzcr_len)\n"
    . "${indent}  || ranzcr_len > (size_t)Dimensions[0] * Dimensions[1] * PF.GetPixelSize() ) // ranzcr-cpp: stream size\n"
    . "${indent}  {\n"
    . ($free ? "${indent}  delete[] mybuffer;\n" : "")
    . "${indent}  return false;\n"
    . "${indent}  }\n"
    . "${indent}rgbyteOut.resize(ranzcr_len);";
}
s{^(  )rgbyteOut\.resize\(params\.height \*params\.width \* \(\(params\.bitsPerSample \+ 7\) / 8\) \* params\.components\);}{check($1, 0)}me;
s{^(      )rgbyteOut\.resize\(params\.height \*params\.width \* \(\(params\.bitsPerSample \+ 7\) / 8\) \* params\.components\);}{check($1, 1)}me;
