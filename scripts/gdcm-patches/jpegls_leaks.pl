#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEGLSCodec.cxx: free the copy of the stream before returning on a header or stream
# CharLS refuses (GetHeaderInfo; Decode's 2-D and 3-D paths). Applied by scripts/gdcm.sh.
s{(if \(JpegLsReadHeader\(dummy_buffer, buf_size, &metadata, nullptr\) != ApiResult::OK\)\n\s*\{\n)(\s*)return false;}{$1$2delete[] dummy_buffer;\n$2return false;};
s{(bool b = DecodeByStreamsCommon\(buffer, totalLen, rgbyteOut\);\n)(\s*)if\( !b \) return false;\n\s*delete\[\] buffer;}{$1$2delete[] buffer;\n$2if( !b ) return false;};
s{(gdcmDebugMacro\( "Could not parse JPEG-LS header" \);\n)(\s*)return false;(\n\s*\}\n\n\s*// allowedlossyerror)}{$1$2delete[] mybuffer;\n$2return false;$3};
