#!/usr/bin/env bash
# DCMTK (parsing; RLE, JPEG and JPEG-LS codecs) and OpenJPEG (JPEG 2000), built from Debian's source packages
# `dcmtk` and `openjpeg2` -- the sources of Debian 12's libdcmtk-dev and libopenjp2-7-dev, with Debian's own
# patches (its security updates among them) and none of ours -- static and position-independent, into a
# CMake prefix. scripts/setup.sh does not use this: it installs Debian's binary packages. Two callers do:
#   scripts/offline/make-bundle.sh  Release, for the offline GPU host, which has no Debian packages
#   scripts/fuzz.sh                 clang with ASan/UBSan and libFuzzer's coverage, so that the dicom fuzz
#                                   target sees inside the decoders (their reads, writes and branches)
# Source it (it needs ROOT, say and die from the caller) and call
#   dicom_libs_install PREFIX NAME [CMAKE_ARGS...]   # NAME: the logs' and build folders' name
# Sources: `apt-get source --download-only`, cached in third_party/sources/debian/ (needs a deb-src entry:
# one is added beside debian.sources when missing), unpacked into third_party/src/. A finished install is
# marked PREFIX/.stamps/dicom-libs with its recipe and skipped; another recipe rebuilds it.
#
# DCMTK: only the modules the decoder needs (ofstd oflog dcmdata dcmimgle dcmimage dcmjpeg dcmjpls), its data
# dictionary built in (no file to read), no applications, and none of its optional dependencies (OpenSSL,
# libpng, libtiff, libxml2, iconv, ICU, sndfile, libwrap, OpenJPEG) but zlib, which DICOM's deflated transfer
# syntax needs: DICOM_LIBS_ZLIB=OFF leaves that out too (the bundle: see make-bundle.sh).

DICOM_LIBS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DICOM_LIBS_TP=$DICOM_LIBS_ROOT/third_party
DICOM_LIBS_DL=$DICOM_LIBS_TP/sources/debian # downloaded source packages (cache, kept)
DICOM_LIBS_RECIPE="recipe 2: hidden visibility, Debian's C++17 STL settings, static, PIC; dcmtk modules ofstd oflog dcmdata dcmimgle dcmimage dcmjpeg dcmjpls, builtin dictionary; openjpeg library only"

# logged STEP CMD...: runs CMD with its output appended to ${LOGS:-third_party/logs}/STEP.log; on failure
# shows the log's tail and stops with one error line.
logged() {
  local step=$1 logs=${LOGS:-$DICOM_LIBS_TP/logs}
  local log=$logs/$1.log
  shift
  mkdir -p "$logs"
  if ! "$@" >>"$log" 2>&1; then
    tail -n 25 "$log" | sed 's/^/    /' >&2
    die "$step failed (full log: ${log#"$DICOM_LIBS_ROOT"/})"
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
DICOM_LIBS_APT_UPDATED=0
apt_update() {
  [ "$DICOM_LIBS_APT_UPDATED" = 1 ] && return
  say "apt-get update"
  logged apt-update as_root apt-get update -qq
  DICOM_LIBS_APT_UPDATED=1
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
  [ -n "$(newest "$DICOM_LIBS_DL/$1"_*.dsc)" ] && return
  command -v apt-get >/dev/null || die "no apt-get to download Debian's source package $1"
  ensure_deb_src "$1"
  say "downloading Debian source package $1"
  mkdir -p "$DICOM_LIBS_DL"
  (cd "$DICOM_LIBS_DL" && logged "download-$1" apt-get source --download-only "$1")
}
deb_source_version() { sed -n 's/^Version: //p' "$(newest "$DICOM_LIBS_DL/$1"_*.dsc)"; }
# unpack_deb_source PKG: third_party/src/PKG-VERSION/ (Debian's patches applied), once; prints the folder.
unpack_deb_source() {
  local src tmp
  src=$DICOM_LIBS_TP/src/$1-$(deb_source_version "$1")
  tmp=$src.tmp
  if [ ! -d "$src" ]; then
    command -v dpkg-source >/dev/null || die "no dpkg-source to unpack Debian's source package $1 (install dpkg-dev)"
    say "unpacking ${src#"$DICOM_LIBS_ROOT"/}"
    mkdir -p "$DICOM_LIBS_TP/src"
    rm -rf "$tmp"
    logged "unpack-$(basename "$src")" dpkg-source --no-copy -x "$(newest "$DICOM_LIBS_DL/$1"_*.dsc)" "$tmp"
    mv "$tmp" "$src"
  fi
  echo "$src"
}

dicom_libs_done() { # dicom_libs_done PREFIX: a finished install of this recipe
  grep -qsF "$DICOM_LIBS_RECIPE zlib ${DICOM_LIBS_ZLIB:-ON} flags '${DICOM_LIBS_FLAGS:-}'" "$1/.stamps/dicom-libs"
}

dicom_libs_install() {
  local prefix=$1 name=$2 tool dcmtk openjpeg build
  shift 2
  mkdir -p "$prefix"
  prefix=$(cd "$prefix" && pwd)
  if dicom_libs_done "$prefix"; then
    say "dcmtk, openjpeg: already in ${prefix#"$DICOM_LIBS_ROOT"/}, skipped"
    return
  fi
  rm -f "$prefix/.stamps/dicom-libs"
  for tool in cmake ninja dpkg-source; do
    command -v "$tool" >/dev/null || die "building DCMTK and OpenJPEG needs $tool (Debian: cmake ninja-build dpkg-dev)"
  done
  fetch_deb_source dcmtk
  fetch_deb_source openjpeg2
  dcmtk=$(unpack_deb_source dcmtk)
  openjpeg=$(unpack_deb_source openjpeg2)
  build=${DICOM_LIBS_BUILD_DIR:-$DICOM_LIBS_TP/build/dicom-libs-$name}
  # DICOM_LIBS_FLAGS: extra compiler flags for both (the fuzz build's sanitizers).
  local flags="-fvisibility=hidden ${DICOM_LIBS_FLAGS:-}"
  local common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_C_FLAGS="$flags" "$@")
  rm -f "${LOGS:-$DICOM_LIBS_TP/logs}/$name-openjpeg.log" "${LOGS:-$DICOM_LIBS_TP/logs}/$name-dcmtk.log"
  local off
  # As Debian's debian/rules has them: C++17, DCMTK's STL, JPEG-LS's interleave default, the dictionaries'
  # install folder (a Debian patch makes it a setting).
  local dcmtk_args=(-DCMAKE_CXX_FLAGS="$flags -DENABLE_DCMJPLS_INTERLEAVE_NONE" -DCMAKE_CXX_STANDARD=17
    -DDCMTK_ENABLE_STL=ON -DCMAKE_INSTALL_DATADIC=share/dcmtk -DUSE_COMPILER_HIDDEN_VISIBILITY=ON
    -DDCMTK_MODULES="ofstd;oflog;dcmdata;dcmimgle;dcmimage;dcmjpeg;dcmjpls" -DBUILD_APPS=OFF
    -DDCMTK_DEFAULT_DICT=builtin -DDCMTK_ENABLE_PRIVATE_TAGS=OFF -DDCMTK_WITH_ZLIB="${DICOM_LIBS_ZLIB:-ON}"
    -DDCMTK_ENABLE_MANPAGES=OFF)
  for off in OPENSSL PNG TIFF XML ICONV ICU SNDFILE WRAP OPENJPEG DOXYGEN; do dcmtk_args+=("-DDCMTK_WITH_$off=OFF"); done
  # DCMTK's configure is some 500 checks, one at a time (about a minute, longer under the sanitizers): it runs
  # beside OpenJPEG's configure and build, which leave a core idle for much of that time.
  say "dcmtk $(deb_source_version dcmtk): configuring (log: third_party/logs/$name-dcmtk.log)"
  logged "$name-dcmtk" cmake -S "$dcmtk" -B "$build/dcmtk" "${common[@]}" "${dcmtk_args[@]}" &
  local dcmtk_configure=$!
  say "openjpeg $(deb_source_version openjpeg2): configuring and building (log: third_party/logs/$name-openjpeg.log)"
  if ! (logged "$name-openjpeg" cmake -S "$openjpeg" -B "$build/openjpeg" "${common[@]}" -DCMAKE_CXX_FLAGS="$flags" \
    -DBUILD_STATIC_LIBS=ON -DBUILD_CODEC=OFF -DBUILD_THIRDPARTY=OFF -DBUILD_TESTING=OFF -DBUILD_JPIP=OFF -DBUILD_DOC=OFF &&
    logged "$name-openjpeg" cmake --build "$build/openjpeg" -j "${JOBS:-$(nproc)}" &&
    logged "$name-openjpeg" cmake --install "$build/openjpeg"); then
    wait "$dcmtk_configure" || true
    exit 1
  fi
  wait "$dcmtk_configure" || exit 1 # logged has said why
  say "dcmtk $(deb_source_version dcmtk): building"
  logged "$name-dcmtk" cmake --build "$build/dcmtk" -j "${JOBS:-$(nproc)}"
  logged "$name-dcmtk" cmake --install "$build/dcmtk"
  rm -rf "$prefix/bin" "$prefix/share/doc" "$prefix/share/man" "$prefix/etc" "$prefix/lib/pkgconfig"
  mkdir -p "$prefix/share/licenses/dcmtk" "$prefix/share/licenses/openjpeg" "$prefix/.stamps"
  cp "$dcmtk/COPYRIGHT" "$prefix/share/licenses/dcmtk/"
  cp "$openjpeg/LICENSE" "$prefix/share/licenses/openjpeg/"
  echo "dcmtk $(deb_source_version dcmtk), openjpeg2 $(deb_source_version openjpeg2) from Debian's source packages (scripts/dicom-libs.sh), $DICOM_LIBS_RECIPE zlib ${DICOM_LIBS_ZLIB:-ON} flags '${DICOM_LIBS_FLAGS:-}'" >"$prefix/.stamps/dicom-libs"
}
