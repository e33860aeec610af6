#!/usr/bin/env bash
# GDCM 3.0.21 built from Debian's source package `gdcm` (the version of Debian 12's libgdcm-dev): static,
# Release (NDEBUG), position-independent, with GDCM's own copies of its codecs and helpers, installed into a
# CMake prefix (the CMake config goes to PREFIX/lib/cmake/gdcm-3.0). Used by scripts/setup.sh (prefix
# third_party/gdcm) and scripts/offline/make-bundle.sh (prefix third_party/bundle); run alone as
#   scripts/gdcm.sh PREFIX [LIBRARY...]     # LIBRARY: .a or .so files whose symbols GDCM's must not clash with
# or source it (it then needs ROOT, say and die from the sourcing script) and call gdcm_install.
#
# Why not Debian's libgdcm-dev: Debian builds GDCM without NDEBUG, so its assertions are live and abort
# the whole process on some malformed or unusual files (pydicom's DICOMDIR-nooffset and rtdose_*1frame.dcm
# abort in gdcm::FileMetaInformation::ReadCompat and gdcmAttribute.h); a Release build reads or rejects them.
#
# Source: `apt-get source --download-only gdcm`, cached in third_party/sources/debian/ (needs a deb-src
# entry: one is added beside debian.sources when missing), unpacked into third_party/src/gdcm-VERSION/.
# Debian's source package keeps GDCM's copies of its codecs in Utilities/ (its debian/rules switches to the
# system libraries with GDCM_USE_SYSTEM_*=ON but strips nothing): IJG libjpeg 6b 8/12/16-bit, OpenJPEG
# 2.3.0, CharLS 2.0.0, zlib 1.2.3, expat 2.0.0, uuid. GDCM mangles the symbol names of its libjpeg
# (gdcmjpeg8_*, ...), OpenJPEG (gdcmopenjp2*), expat and uuid, but not of its zlib: its 72 global symbols
# (deflate, inflate, crc32, _tr_flush_block, ...) are zlib's own, also defined by the system's libz.so.1
# and by the zlib 1.2.12 in the bundle's static OpenCV, so a binary with both would mix two zlib versions.
# So GDCM's zconf.in.h is patched with '#define deflate gdcmzlib_deflate' etc. for all of them, and after
# the build no global symbol of GDCM's static libraries may be defined by the LIBRARY arguments (checked
# with nm; the step fails if one is). Off: JSON (GDCM bundles no json-c; only its DICOM-JSON writer needs
# it), OpenSSL, VTK, wrapping, applications, tests, docs; GDCM's XML resource files (share/gdcm-3.0, read
# only by gdcm::Global::LoadResourcesFiles) are removed after the install.
#
# Finished installs are marked PREFIX/.stamps/gdcm and skipped. Logs: third_party/logs/gdcm-NAME.log
# (NAME: the prefix's folder name; GDCM_LOG overrides). JOBS: compile jobs (default: all cores).
#
# Hidden visibility (-fvisibility=hidden, -fvisibility-inlines-hidden): a program linked with Debian's
# OpenCV also loads Debian's libgdcm*.so.3.0 and libcharls.so.2 (libopencv_imgcodecs.so.406 reads DICOM
# through them), which define the same names as this static GDCM. With default visibility the program
# exports its copy of them (1,600 gdcm:: symbols and JpegLs*) and Debian's libraries bind to it: two
# GDCMs' static objects on the same storage, a heap corruption at exit ("corrupted size vs. prev_size in
# fastbins", seen in data_tests). Hidden, the program exports none of GDCM's symbols and each copy keeps to
# itself. gdcm_check_clashes checks that no symbol the program could still export clashes.

GDCM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GDCM_TP=$GDCM_ROOT/third_party
GDCM_DL=$GDCM_TP/sources/debian # downloaded source packages (cache, kept)

# logged STEP CMD...: runs CMD with its output appended to ${LOGS:-third_party/logs}/STEP.log; on failure
# shows the log's tail and stops with one error line.
logged() {
  local step=$1 logs=${LOGS:-$GDCM_TP/logs}
  local log=$logs/$1.log
  shift
  mkdir -p "$logs"
  if ! "$@" >>"$log" 2>&1; then
    tail -n 25 "$log" | sed 's/^/    /' >&2
    die "$step failed (full log: ${log#"$GDCM_ROOT"/})"
  fi
}
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  else
    command -v sudo >/dev/null || die "needs root or sudo for: $*"
    sudo "$@"
  fi
}
GDCM_APT_UPDATED=0
apt_update() {
  [ "$GDCM_APT_UPDATED" = 1 ] && return
  say "apt-get update"
  logged apt-update as_root apt-get update -qq
  GDCM_APT_UPDATED=1
}
# ensure_deb_src PKG: makes `apt-get source PKG` work: Debian source packages need deb-src entries; adds
# them beside the deb ones (from debian.sources) if there are none, then runs apt-get update.
ensure_deb_src() {
  apt-get source --print-uris "$1" >/dev/null 2>&1 && return
  if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    [ -f /etc/apt/sources.list.d/debian.sources ] ||
      die "no deb-src entry: add one for Debian (Types: deb deb-src) and run apt-get update"
    say "adding deb-src entries: /etc/apt/sources.list.d/ranzcr-deb-src.sources (from debian.sources)"
    sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
      as_root tee /etc/apt/sources.list.d/ranzcr-deb-src.sources >/dev/null
  fi
  apt_update
  apt-get source --print-uris "$1" >/dev/null 2>&1 || die "apt-get source $1 does not work even with deb-src entries"
}
newest() { ls -1v "$@" 2>/dev/null | tail -n 1; } # newest cached file matching a glob
# fetch_deb_source PKG: downloads Debian's source package PKG into third_party/sources/debian/ (once).
fetch_deb_source() {
  [ -n "$(newest "$GDCM_DL/$1"_*.dsc)" ] && return
  command -v apt-get >/dev/null || die "no apt-get to download Debian's source package $1"
  ensure_deb_src "$1"
  say "downloading Debian source package $1"
  mkdir -p "$GDCM_DL"
  cd "$GDCM_DL"
  logged "download-$1" apt-get source --download-only "$1"
  cd - >/dev/null
}

GDCM_ZLIB_SYMBOLS="_dist_code _length_code _tr_align _tr_flush_block _tr_init _tr_stored_block _tr_tally
  adler32 adler32_combine compress compress2 compressBound crc32 crc32_combine deflate deflateBound deflateCopy
  deflateEnd deflateInit2_ deflateInit_ deflateParams deflatePrime deflateReset deflateSetDictionary
  deflateSetHeader deflateTune deflate_copyright get_crc_table gzclearerr gzclose gzdirect gzdopen gzeof gzerror
  gzflush gzgetc gzgets gzopen gzprintf gzputc gzputs gzread gzrewind gzseek gzsetparams gztell gzungetc gzwrite
  inflate inflateBack inflateBackEnd inflateBackInit_ inflateCopy inflateEnd inflateGetHeader inflateInit2_
  inflateInit_ inflatePrime inflateReset inflateSetDictionary inflateSync inflateSyncPoint inflate_copyright
  inflate_fast inflate_table uncompress zError z_errmsg zcalloc zcfree zlibCompileFlags zlibVersion"
GDCM_OFF="GDCM_BUILD_SHARED_LIBS GDCM_USE_SYSTEM_ZLIB GDCM_USE_SYSTEM_OPENSSL GDCM_USE_SYSTEM_UUID
  GDCM_USE_SYSTEM_EXPAT GDCM_USE_SYSTEM_JSON GDCM_USE_SYSTEM_PAPYRUS3 GDCM_USE_SYSTEM_SOCKETXX
  GDCM_USE_SYSTEM_LJPEG GDCM_USE_SYSTEM_OPENJPEG GDCM_USE_SYSTEM_CHARLS GDCM_USE_SYSTEM_POPPLER
  GDCM_USE_SYSTEM_LIBXML2 GDCM_USE_PVRG GDCM_USE_KAKADU GDCM_USE_VTK GDCM_WRAP_PYTHON
  GDCM_WRAP_JAVA GDCM_WRAP_CSHARP GDCM_WRAP_PHP GDCM_WRAP_PERL VTKGDCM_WRAP_PYTHON VTKGDCM_WRAP_JAVA
  GDCM_BUILD_APPLICATIONS GDCM_BUILD_TESTING GDCM_BUILD_EXAMPLES GDCM_DOCUMENTATION"

# The build recipe: a finished install whose stamp names another one is rebuilt.
GDCM_RECIPE="recipe 17: Release, static, PIC, hidden visibility, bundled codecs, zlib renamed gdcmzlib_*, patches jpegls_leaks j2k_leaks value_length_cap raw_short_data jpeg_no_codec rle_segments meta_value_leak jpegls_stream_size jpeg_decompressor_leak jpeg_codec_dropped short_codec_output j2k_parse_bounds j2k_output_size j2k_output_dims fragment_assert_leak"
gdcm_done() { # gdcm_done PREFIX: a finished install of this recipe
  [ -f "$1/lib/cmake/gdcm-3.0/GDCMConfig.cmake" ] && grep -qsF "$GDCM_RECIPE" "$1/.stamps/gdcm"
}
gdcm_dsc() { newest "$GDCM_DL"/gdcm_*.dsc; }
gdcm_version() { sed -n 's/^Version: //p' "$(gdcm_dsc)"; } # e.g. 3.0.21-1 (after gdcm_fetch)
gdcm_src_dir() { echo "$GDCM_TP/src/gdcm-$(gdcm_version)"; }
gdcm_fetch() { fetch_deb_source gdcm; }

# gdcm_unpack: third_party/src/gdcm-VERSION/, unpacked once, with GDCM's zlib renamed (gdcmzlib_*).
gdcm_unpack() {
  local src tmp zconf sym
  src=$(gdcm_src_dir)
  tmp=$src.tmp
  if [ ! -d "$src" ]; then
    command -v dpkg-source >/dev/null || die "no dpkg-source to unpack Debian's source package gdcm (install dpkg-dev)"
    say "unpacking ${src#"$GDCM_ROOT"/}"
    mkdir -p "$GDCM_TP/src"
    rm -rf "$tmp"
    logged "unpack-$(basename "$src")" dpkg-source --no-copy -x "$(gdcm_dsc)" "$tmp"
    mv "$tmp" "$src"
  fi
  # The list is every global symbol of GDCM's libgdcmzlib.a; the nm check after the build catches any that
  # would be missing.
  zconf=$src/Utilities/gdcmzlib/zconf.in.h
  if ! grep -q 'gdcmzlib_deflate' "$zconf"; then
    say "gdcm: renaming the symbols of GDCM's zlib (gdcmzlib_*) in ${zconf#"$GDCM_ROOT"/}"
    {
      echo "/* Added by ranzcr-cpp's scripts/gdcm.sh: GDCM's zlib under its own names, apart from any other zlib. */"
      for sym in $GDCM_ZLIB_SYMBOLS; do echo "#define $sym gdcmzlib_$sym"; done
    } >"$zconf.mangle"
    sed -i "/^#define ZCONF_H/r $zconf.mangle" "$zconf"
    rm "$zconf.mangle"
    grep -q 'gdcmzlib_deflate' "$zconf" || die "could not patch $zconf"
  fi
  gdcm_patch "$src"
}

# gdcm_patch SRC: fixes to GDCM 3.0.21 found by fuzzing (fuzz/targets/dicom.cpp), from scripts/gdcm-patches/:
#   jpegls_leaks.pl      the JPEG-LS codec returned before freeing its copy of the stream (GetHeaderInfo,
#                        Decode's 2-D and 3-D paths) on a stream CharLS refuses
#   j2k_leaks.pl         the JPEG 2000 codec leaked OpenJPEG's decoder, stream and image on five returns of
#                        GetHeaderInfo and the image where decoding fails
#   value_length_cap.pl  ByteValue::SetLength allocated any length an element declares (GDCM re-reads a file
#                        it cannot parse under other interpretations, past data/dicom_check.cpp's walk):
#                        capped at gdcm::ranzcr_max_value_length, which data/dicom.cpp sets per file
#   raw_short_data.pl    RAWCodec::DecodeBytes read past pixel data shorter than the image (CVE-2024-25569,
#                        fixed in GDCM 3.0.24) or returned it as if whole: the decode fails instead
#   jpeg_no_codec.pl     JPEGCodec called its 8/12/16-bit codec without one for deeper pixels (a null
#                        dereference while reading the file): it returns false instead
#   rle_segments.pl      RLECodec indexed its 15 segment offsets with the header's segment count unchecked
#                        (a read far past them): more than 15 segments fails the read
#   meta_value_leak.pl   the file meta reader leaked its element's value where reading it failed (a short
#                        stream, or value_length_cap.pl's cap): held by a SmartPointer instead
#   jpegls_stream_size.pl the JPEG-LS codec sized its output from the stream's header in int (overflowing)
#                        and leaked its copy of the stream when that threw: checked against the image
#   jpeg_decompressor_leak.pl the IJG codecs returned false without destroying their decompressor (its
#                        memory pools leaked): the destructor and each new read destroy it
#   jpeg_codec_dropped.pl JPEGCodec::Decode asked a codec it had just dropped (null, for a stream's bit depth
#                        without one) whether it was suspended: no codec fails the decode
#   short_codec_output.pl Bitmap's Try*Codec copied the image's length out of a codec output that may be
#                        shorter (a read past it): shorter output fails the read
#   j2k_parse_bounds.pl  the JPEG 2000 codec's COD scan (parsej2k_imp, parsejp2_imp) moved past the stream on
#                        a marker or box longer than what is left (a SEGV): such lengths end the scan
#   j2k_output_size.pl   the JPEG 2000 codec filled an output sized from the DICOM header with OpenJPEG's
#                        image, as large and as deep as the stream says (a heap overflow): must fit
#   j2k_output_dims.pl   ... and left the part of that output a smaller stream did not cover as the heap's old
#                        contents (returned as pixels): the stream must fill it exactly
#   fragment_assert_leak.pl the JPEG 2000 and JPEG-LS codecs leaked their copy of the fragments when copying
#                        them threw (GDCM's assert on a fragment without a value): freed, then rethrown
# Each patch marks the file it changed (a "ranzcr-cpp:" line); the count of its changes is checked.
gdcm_patch_one() { # gdcm_patch_one FILE PATCH MARK EXPECTED: apply PATCH once; EXPECTED lines hold MARK after
  local f=$1 pl=$GDCM_ROOT/scripts/gdcm-patches/$2
  grep -q "ranzcr-cpp:.*$2" "$f" && return 0
  say "gdcm: applying $2 to ${f#"$GDCM_ROOT"/}"
  perl -0pi "$pl" "$f"
  perl -0pi -e "s{\\A}{// ranzcr-cpp: patched by scripts/gdcm-patches/$2\\n}" "$f"
  [ "$(grep -c -- "$3" "$f")" = "$4" ] || die "could not apply $2 to $f (GDCM's source is not the one it was written for)"
}
gdcm_patch() {
  local s=$1/Source
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEGLSCodec.cxx" jpegls_leaks.pl 'delete\[\] \(dummy_buffer\|buffer\|mybuffer\);' 6
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEG2000Codec.cxx" j2k_leaks.pl 'if (image) opj_image_destroy(image)' 9
  gdcm_patch_one "$s/DataStructureAndEncodingDefinition/gdcmByteValue.cxx" value_length_cap.pl 'ranzcr_max_value_length' 2
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmRAWCodec.cxx" raw_short_data.pl 'ranzcr-cpp: short data' 3
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEGCodec.cxx" jpeg_no_codec.pl 'ranzcr-cpp: no codec' 4
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmRLECodec.cxx" rle_segments.pl 'ranzcr-cpp: segment count' 1
  gdcm_patch_one "$s/DataStructureAndEncodingDefinition/gdcmFileMetaInformation.cxx" meta_value_leak.pl 'ranzcr-cpp: freed on every return' 2
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEGLSCodec.cxx" jpegls_stream_size.pl 'ranzcr-cpp: stream size' 4
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEGBITSCodec.hxx" jpeg_decompressor_leak.pl 'ranzcr-cpp: a decompressor left' 3
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEGCodec.cxx" jpeg_codec_dropped.pl 'ranzcr-cpp: codec dropped' 1
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmBitmap.cxx" short_codec_output.pl 'ranzcr-cpp: short output' 6
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEG2000Codec.cxx" j2k_parse_bounds.pl 'ranzcr-cpp: bounds' 8
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEG2000Codec.cxx" j2k_output_size.pl 'ranzcr-cpp: output size' 3
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEG2000Codec.cxx" j2k_output_dims.pl 'ranzcr-cpp: stream dims' 2
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEG2000Codec.cxx" fragment_assert_leak.pl 'ranzcr-cpp: fragment assert' 1
  gdcm_patch_one "$s/MediaStorageAndFileFormat/gdcmJPEGLSCodec.cxx" fragment_assert_leak.pl 'ranzcr-cpp: fragment assert' 1
}

# gdcm_check_clashes PREFIX LIBRARY...: GDCM's static libraries in PREFIX against the libraries a program
# has beside them. A static LIBRARY (.a) is linked into the same binary: no global symbol may be defined by
# both, or one library's calls would bind into the other's code. A shared LIBRARY is loaded into the same
# process: none of GDCM's symbols that the binary could export (global, default visibility) may be one the
# LIBRARY exports, or the LIBRARY's calls would bind into GDCM's copy (GDCM's own symbols are hidden, see
# gdcm_install: Debian's OpenCV loads Debian's libgdcm*.so.3.0 and libcharls.so.2, which define the same
# names). Weak symbols (inline C++ functions, template instances, std:: ones included) are left out: those
# are the same code and meant to merge.
gdcm_globals() { nm -g --defined-only "$@" 2>/dev/null | awk 'NF == 3 && $2 ~ /^[TDBRGSCIu]$/ { print $3 }' | sort -u; }
gdcm_visible() { # defined global (not weak) symbols of default visibility in .a files
  readelf -sW "$@" 2>/dev/null | awk '$5 == "GLOBAL" && $6 == "DEFAULT" && $7 != "UND" && NF >= 8 { print $8 }' | sort -u
}
gdcm_check_clashes() {
  local prefix=$1 f clash="" static=() shared=()
  shift
  for f in "$@"; do
    case "$f" in
      *.a) static+=("$f") ;;
      *) shared+=("$f") ;;
    esac
  done
  local mine=("$prefix"/lib/libgdcm*.a "$prefix"/lib/libsocketxx.a)
  if [ ${#static[@]} -gt 0 ]; then
    clash=$(comm -12 <(gdcm_globals "${mine[@]}") <(gdcm_globals "${static[@]}"))
  fi
  if [ ${#shared[@]} -gt 0 ]; then
    clash="$clash $(comm -12 <(gdcm_visible "${mine[@]}") <(for f in "${shared[@]}"; do
      nm -D --defined-only "$f" 2>/dev/null | awk 'NF == 3 { sub(/@.*/, "", $3); print $3 }'; done | sort -u))"
  fi
  clash=$(echo $clash)
  [ -z "$clash" ] || die "GDCM's static libraries in ${prefix#"$GDCM_ROOT"/} clash with the libraries linked beside them on: $(echo "$clash" | cut -c 1-300)"
}
# gdcm_system_libs: the shared libraries a program linked with Debian's OpenCV and yaml-cpp loads (for
# gdcm_check_clashes); Debian's libopencv_imgcodecs.so.406 brings in Debian's own GDCM and CharLS.
gdcm_system_libs() {
  local libs="" l
  for l in libopencv_core.so libopencv_imgproc.so libopencv_imgcodecs.so libyaml-cpp.so libz.so; do
    l=$(c++ -print-file-name="$l")
    [ -f "$l" ] && libs="$libs $(readlink -f "$l")"
  done
  [ -n "$libs" ] || return 0
  { echo $libs | tr ' ' '\n'; ldd $libs 2>/dev/null | awk '$3 ~ /^\// { print $3 }'; } | sort -u
}

# gdcm_install PREFIX [LIBRARY...]: fetch, unpack, patch, build and install into PREFIX, then the clash check.
gdcm_install() {
  local prefix=$1 name build log logdir opt lic u src tool
  shift
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  name=$(basename "$prefix")
  if gdcm_done "$prefix"; then
    say "gdcm: already in ${prefix#"$GDCM_ROOT"/}, skipped"
  else
    rm -f "$prefix/.stamps/gdcm"
    for tool in c++ cc cmake ninja dpkg-source nm; do
      command -v "$tool" >/dev/null || die "building GDCM needs $tool (Debian: build-essential cmake ninja-build dpkg-dev)"
    done
    gdcm_fetch
    gdcm_unpack
    src=$(gdcm_src_dir)
    build=${GDCM_BUILD_DIR:-$GDCM_TP/build/gdcm-$name}
    log=${GDCM_LOG:-gdcm-$name}
    rm -f "${LOGS:-$GDCM_TP/logs}/$log.log"
    local args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib
      -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON
      -DCMAKE_C_FLAGS="-fvisibility=hidden" -DCMAKE_CXX_FLAGS="-fvisibility=hidden -fvisibility-inlines-hidden"
      -DGDCM_USE_JPEGLS=ON -DGDCM_USE_PIC_FOR_STATIC_LIBS=ON -DGDCM_INSTALL_PACKAGE_DIR=lib/cmake/gdcm-3.0)
    for opt in $GDCM_OFF; do args+=("-D$opt=OFF"); done
    logdir=${LOGS:-$GDCM_TP/logs}
    say "gdcm: configuring (log: ${logdir#"$GDCM_ROOT"/}/$log.log)"
    logged "$log" cmake -S "$src" -B "$build" "${args[@]}"
    say "gdcm: building with ${JOBS:-$(nproc)} jobs"
    logged "$log" cmake --build "$build" -j "${JOBS:-$(nproc)}"
    logged "$log" cmake --install "$build"
    # No data, OpenJPEG CMake/pkg-config files or debug info; the licences of GDCM and of what is built in.
    rm -rf "$prefix/share/gdcm-3.0" "$prefix/lib/gdcmopenjpeg-2.3" "$prefix/lib/pkgconfig/libopenjp2.pc"
    rmdir "$prefix/lib/pkgconfig" 2>/dev/null || true
    strip --strip-debug "$prefix"/lib/libgdcm*.a "$prefix"/lib/libsocketxx.a
    lic=$prefix/share/licenses/gdcm
    rm -rf "$lic"
    mkdir -p "$lic"
    cp "$src/Copyright.txt" "$lic/"
    u=$src/Utilities
    cp "$u/gdcmjpeg/COPYRIGHT.dcmtk" "$lic/ijg-libjpeg.COPYRIGHT.dcmtk"
    cp "$u/gdcmopenjpeg/LICENSE" "$lic/openjpeg.LICENSE"
    cp "$u/gdcmcharls/License.txt" "$lic/charls.License.txt"
    cp "$u/gdcmzlib/COPYING" "$lic/zlib.COPYING"
    cp "$u/gdcmexpat/COPYING" "$lic/expat.COPYING"
    cp "$u/gdcmuuid/COPYING" "$lic/uuid.COPYING"
    cp "$u/socketxx/COPYING" "$lic/socketxx.COPYING"
    gdcm_check_clashes "$prefix" "$@"
    mkdir -p "$prefix/.stamps"
    echo "gdcm $(gdcm_version) from Debian's source package (scripts/gdcm.sh), $GDCM_RECIPE" >"$prefix/.stamps/gdcm"
    return
  fi
  gdcm_check_clashes "$prefix" "$@"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -Eeuo pipefail
  say() { echo "gdcm.sh: $*" >&2; }
  die() {
    echo "gdcm.sh: error: $*" >&2
    exit 1
  }
  [ $# -ge 1 ] || die "usage: scripts/gdcm.sh PREFIX [LIBRARY...]"
  gdcm_install "$@"
fi
