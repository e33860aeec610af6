#!/usr/bin/perl -0pi
# GDCM 3.0.21's gdcmFileMetaInformation.cxx: ReadExplicitDataElement and ReadImplicitDataElement hold the value
# of a file meta element in a raw `new ByteValue` that leaks when the read fails (a short stream, or a length
# over value_length_cap.pl's cap, which throws): 48 bytes a file, found by fuzz/targets/dicom.cpp. A
# SmartPointer frees it on every return. Applied by scripts/gdcm.sh.
s{ByteValue \*bv = nullptr;}{SmartPointer<ByteValue> bv; // ranzcr-cpp: freed on every return}g;
