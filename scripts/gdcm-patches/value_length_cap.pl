#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmByteValue.cxx: ByteValue::SetLength allocates the length an element declares before the
# value is read. ranzcr's DICOM reader (data/dicom.cpp) walks the lengths first (data/dicom_check.cpp), but
# GDCM re-reads a file it cannot parse under other interpretations (VR16 explicit, CP-246, ...), which may
# see other lengths. This caps every value at gdcm::ranzcr_max_value_length (per thread; the reader sets it
# to what the file can hold): a longer one throws, as a corrupt file does. Applied by scripts/gdcm.sh.
s{(namespace gdcm_ns\n\{\n)}{$1\n  // ranzcr-cpp: the longest value a file being read can hold (set by its reader; no limit by default).\n  thread_local unsigned long long ranzcr_max_value_length = ~0ULL;\n};
s{(  void ByteValue::SetLength\(VL vl\) \{\n    VL l\(vl\);\n)}{$1    if( (unsigned long long)(uint32_t)l > ranzcr_max_value_length ) throw Exception( "a value longer than its file" );\n};
