#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEG2000Codec.cxx: free OpenJPEG's decoder, stream and image on every early return of
# GetHeaderInfo, and the image where DecodeByStreamsCommon fails to decode (scripts/gdcm.sh applies it).
my $free = "{ if (cio) opj_stream_destroy(cio); if (dinfo) opj_destroy_codec(dinfo); "
         . "if (image) opj_image_destroy(image); return false; }";
s{(bool JPEG2000Codec::GetHeaderInfo\(const char \* dummy_buffer.*?opj_create_decompress\(CODEC_JP2\);)(.*?)(\n  opj_image_destroy\(image\);\s*return true;)}{
  my ($head, $body, $tail) = ($1, $2, $3);
  $body =~ s/opj_stream_destroy\(cio\);\n(\s*)return false;/$1return false;/;
  $body =~ s/return false;/$free/g;
  "$head$body$tail"
}se;
s{(opj_destroy_codec\(dinfo\);\n\s*opj_stream_destroy\(cio\);\n\s*gdcmErrorMacro\( "opj_decode failed" \);\n)}{$1    if (image) opj_image_destroy(image);\n}g;
