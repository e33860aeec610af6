#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmJPEG2000Codec.cxx: parsej2k_imp and parsejp2_imp, which look for the COD marker to tell
# a reversible stream, trusted the lengths they read: a marker segment or JP2 box longer than the rest of the
# stream moved the cursor past it (and wrapped the remaining size), COD's fields were read without checking
# the segment holds them, and a box's 64-bit length below its header wrapped (a SEGV found by
# fuzz/targets/dicom.cpp in CI's short pass). Lengths past the stream now end the parse (the stream is then
# taken as lossy, as for any stream without a COD; OpenJPEG's own decode judges the stream). Applied by
# scripts/gdcm.sh.
s{(  \*lossless = false; // default init\n)(  while\( read16\(&cur, &cur_size, &marker\) \))}{$1  *mct = false; // ranzcr-cpp: bounds\n$2};
s{(      lenmarker = \(size_t\)l - 2;\n)}{$1      if( lenmarker > cur_size ) break; // ranzcr-cpp: bounds\n};
s{(      if\( marker == COD \)\n        \{\n)}{$1        if( lenmarker < 10 ) return false; // ranzcr-cpp: bounds\n};
s{      bool b = read64\(&cur, &cur_size, &len64\);\n      assert\( b \); \(void\)b;\n      len64 -= 8;\n}{      bool b = read64(&cur, &cur_size, &len64);\n      if( !b || len64 < 16 ) break; // ranzcr-cpp: bounds\n      len64 -= 8;\n};
s{(      assert\( len64 >= 8 \);\n)}{      if( len64 < 8 || len64 - 8 > cur_size ) break; // ranzcr-cpp: bounds\n$1};
s{(      const size_t lenmarker = \(size_t\)\(len64 - 8\);\n)(      cur \+= lenmarker;\n)}{      if( len64 < 8 || len64 - 8 > cur_size ) break; // ranzcr-cpp: bounds\n$1$2      cur_size -= lenmarker; // ranzcr-cpp: bounds\n};
s{(  const char \* cur = stream;\n  size_t cur_size = file_size;\n\n  while\( read32)}{  *lossless = false; *mct = false; // ranzcr-cpp: bounds\n$1};
