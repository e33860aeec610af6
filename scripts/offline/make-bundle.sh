#!/usr/bin/env bash
# Builds the dependency bundle for hosts without network (the offline GPU host): a CMake prefix in
# third_party/bundle/ and a tarball of it, third_party/ranzcr-bundle.tar.xz, to carry there and use with
#   RANZCR_BUNDLE=third_party/bundle scripts/setup.sh     (or scripts/offline/build-on-host.sh)
# Run it on a networked Debian 12 machine (root or sudo only where apt-get must add a deb-src entry or a
# missing build tool). Idempotent: finished steps are skipped; downloads are cached in third_party/sources/.
#   scripts/offline/make-bundle.sh
#   JOBS=4 scripts/offline/make-bundle.sh          # compile jobs (default: all cores)
#   RANZCR_BUNDLE_REBUILD=1 scripts/offline/make-bundle.sh   # rebuild the bundle (downloads are kept)
#
# What the bundle holds (static libraries are position-independent and built without debug info):
#   OpenCV 4.6.0 core, imgproc, imgcodecs, static, with OpenCV's own libpng and zlib built in, and JPEG
#     through the bundle's libjpeg-turbo (below). Source: the sdist of opencv-python-headless 4.6.0.66 on
#     PyPI (the full OpenCV 4.6.0 tree, the version of Debian 12's libopencv-dev; Debian's own source package
#     drops 3rdparty/, so it cannot build the codecs in). Configured so that nothing is downloaded at build
#     time (checked).
#   libjpeg-turbo (libjpeg 6.2 API, static, with its SIMD code: NASM, a Debian package, assembles it), from
#     Debian's source package libjpeg-turbo (the source of Debian 12's libjpeg62-turbo, which Debian's
#     OpenCV decodes with). OpenCV 4.6.0's own copy (3rdparty/libjpeg-turbo) has no SIMD code at all
#     (its CMakeLists.txt: "No SIMD", jsimd_none.c): the bundle's full-size JPEG decode took twice as long as
#     Debian's OpenCV's. The script stops if the SIMD code is not in the library.
#   yaml-cpp (static), from Debian's source package (apt-get source; needs a deb-src entry, added if absent).
#   GoogleTest and GoogleMock (static), from the sources in Debian's googletest package.
#   DCMTK 3.6.7 (ofstd oflog dcmdata dcmimgle dcmimage dcmjpeg dcmjpls, with its IJG libjpeg 8/12/16-bit
#     and CharLS) and OpenJPEG 2.5.0, static, Release, from Debian's source packages dcmtk and openjpeg2 (the
#     sources of Debian 12's libdcmtk-dev and libopenjp2-7-dev, Debian's security patches applied, none of
#     ours), by scripts/dicom-libs.sh; DCMTK's zlib (for the deflated transfer syntax) is the bundle's OpenCV's.
#   libseccomp (headers, Debian's static libseccomp.a), from Debian's libseccomp-dev: the DICOM decoder
#     helper's filter.
#   CLI11, nlohmann-json (headers and CMake configs) and Gloo's headers (LibTorch has the Gloo code, not
#     the headers), from Debian's libcli11-dev, nlohmann-json3-dev and libgloo-dev packages.
#   Boost's headers for serve's HTTP server (Boost.Beast on Asio, header-only), from Debian's
#     libboost1.81-dev: Beast, Asio and the Boost headers they include, not the whole tree (step 5c).
#   MANIFEST (versions, sources, date) and share/licenses/.
set -Eeuo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TP=$ROOT/third_party
DL=$TP/sources   # downloaded archives (cache, kept)
SRC=$TP/src      # unpacked sources
WORK=$TP/build   # build trees
LOGS=$TP/logs
BUNDLE=$TP/bundle
STAMPS=$BUNDLE/.stamps # finished steps (left out of the tarball)
TARBALL=$TP/ranzcr-bundle.tar.xz
JOBS=${JOBS:-$(nproc)}

OPENCV_VERSION=4.6.0
OPENCV_SDIST=opencv-python-headless-4.6.0.66.tar.gz
OPENCV_SDIST_SHA256=d5291d7e10aa2c19cab6fd86f0d61af8617290ecd2d7ffcb051e446868d04cc5
HEADER_DEBS="libcli11-dev nlohmann-json3-dev libgloo-dev libseccomp-dev libboost1.81-dev"
BOOST_DEB=libboost1.81-dev
# The Boost libraries whose headers the bundle carries, with every Boost header they include (step 5c).
BOOST_LIBS=${RANZCR_BUNDLE_BOOST_LIBS:-beast asio}

say() { echo "make-bundle: $*" >&2; }
die() {
  echo "make-bundle: error: $*" >&2
  exit 1
}
trap 'die "command failed at line $LINENO: $BASH_COMMAND"' ERR
# The DICOM libraries' recipe, and the helpers shared with it: logged STEP CMD... (output in
# third_party/logs/STEP.log, the log's tail and one error line on failure), as_root, apt_update,
# ensure_deb_src PKG, fetch_deb_source PKG (into third_party/sources/debian/), newest GLOB.
. "$ROOT/scripts/dicom-libs.sh"

done_step() { [ -f "$STAMPS/$1" ]; }
mark_done() { mkdir -p "$STAMPS" && touch "$STAMPS/$1"; }

if [ "${RANZCR_BUNDLE_REBUILD:-0}" = 1 ]; then
  say "RANZCR_BUNDLE_REBUILD=1: removing third_party/bundle, build trees and tarball (downloads are kept)"
  rm -rf "$BUNDLE" "$WORK" "$TARBALL"
fi
mkdir -p "$DL" "$SRC" "$WORK" "$LOGS" "$BUNDLE"

# 1. Tools: Debian's apt, a C/C++ compiler, cmake, ninja, dpkg-source, python3, xz, nasm (libjpeg-turbo's SIMD).
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
  die "this script needs a Debian machine (apt-get, dpkg-deb); run it there and carry the tarball"
missing=""
command -v c++ >/dev/null && command -v cc >/dev/null || missing="$missing build-essential"
command -v cmake >/dev/null || missing="$missing cmake"
command -v ninja >/dev/null || missing="$missing ninja-build"
command -v dpkg-source >/dev/null || missing="$missing dpkg-dev"
command -v python3 >/dev/null || missing="$missing python3"
command -v xz >/dev/null || missing="$missing xz-utils"
command -v nasm >/dev/null || command -v yasm >/dev/null || missing="$missing nasm"
if [ -n "$missing" ]; then
  say "installing build tools:$missing"
  logged apt-install as_root apt-get update -qq
  logged apt-install as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
fi

# 2. Sources, downloaded once into third_party/sources/.
mkdir -p "$DL/debian" "$DL/debs"
fetch_deb_source yaml-cpp
fetch_deb_source dcmtk     # the source of libdcmtk-dev
fetch_deb_source openjpeg2 # the source of libopenjp2-7-dev
fetch_deb_source libjpeg-turbo # the source of libjpeg62-turbo(-dev)
for pkg in googletest $HEADER_DEBS; do
  [ -n "$(newest "$DL/debs/${pkg}"_*.deb)" ] && continue
  apt-cache show "$pkg" >/dev/null 2>&1 || apt_update
  say "downloading Debian package $pkg"
  cd "$DL/debs"
  logged "download-$pkg" apt-get download "$pkg"
  cd "$ROOT"
done
if [ ! -f "$DL/$OPENCV_SDIST" ]; then
  # The sdist is not a wheel: pip cannot fetch it without building it, so read the package's simple index
  # page (pip's configured indexes, then PyPI) and fetch the file it lists, checking its sha256.
  indexes="${PIP_INDEX_URL:-} ${PIP_EXTRA_INDEX_URL:-}"
  if command -v pip3 >/dev/null; then
    indexes="$indexes $(pip3 config get global.index-url 2>/dev/null || true)"
    indexes="$indexes $(pip3 config get global.extra-index-url 2>/dev/null || true)"
  fi
  say "downloading $OPENCV_SDIST (OpenCV $OPENCV_VERSION source) from a Python package index"
  logged download-opencv python3 - "$DL/$OPENCV_SDIST" "$OPENCV_SDIST_SHA256" $indexes https://pypi.org/simple <<'EOF'
import hashlib, os, re, sys, urllib.parse, urllib.request
dest, sha256, indexes = sys.argv[1], sys.argv[2], sys.argv[3:]
name = os.path.basename(dest)
project = "opencv-python-headless"
for index in indexes:
    page = index.rstrip("/") + "/" + project + "/"
    try:
        html = urllib.request.urlopen(page, timeout=60).read().decode("utf-8", "replace")
    except Exception as e:
        print(f"{page}: {e}")
        continue
    for href in re.findall(r'href="([^"]+)"', html):
        url = urllib.parse.urljoin(page, href.split("#")[0])
        if urllib.parse.unquote(url.rsplit("/", 1)[-1]) != name:
            continue
        print(f"fetching {url}")
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=600) as r, open(dest + ".part", "wb") as f:
            for chunk in iter(lambda: r.read(1 << 20), b""):
                digest.update(chunk)
                f.write(chunk)
        if digest.hexdigest() != sha256:
            os.remove(dest + ".part")
            sys.exit(f"{url}: sha256 {digest.hexdigest()}, expected {sha256}")
        os.rename(dest + ".part", dest)
        with open(dest + ".url", "w") as f:
            print(f"{url} sha256 {sha256}", file=f)
        sys.exit(0)
    print(f"{page}: no {name}")
sys.exit(f"{name} not found on any index: {' '.join(indexes)}")
EOF
fi
YAML_DSC=$(newest "$DL"/debian/yaml-cpp_*.dsc)
YAML_VERSION=$(sed -n 's/^Version: //p' "$YAML_DSC")
deb_version() { dpkg-deb -f "$(newest "$DL/debs/$1"_*.deb)" Version; }
GTEST_VERSION=$(deb_version googletest)

# 3. Unpacked sources in third_party/src/ (each unpacked into a temporary folder, then renamed).
unpack() { # unpack DEST CMD... (CMD unpacks into $tmp)
  local dest=$1 tmp=$1.tmp
  shift
  [ -d "$dest" ] && return
  say "unpacking ${dest#"$ROOT"/}"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  logged "unpack-$(basename "$dest")" "$@"
  mv "$tmp" "$dest"
}
OPENCV_SRC=$SRC/opencv-$OPENCV_VERSION
unpack "$OPENCV_SRC" tar -xzf "$DL/$OPENCV_SDIST" -C "$SRC/opencv-$OPENCV_VERSION.tmp" --strip-components=2 \
  "${OPENCV_SDIST%.tar.gz}/opencv"
YAML_SRC=$SRC/yaml-cpp-$YAML_VERSION
unpack "$YAML_SRC" sh -c "rm -rf '$YAML_SRC.tmp' && dpkg-source --no-copy -x '$YAML_DSC' '$YAML_SRC.tmp'"
GTEST_DEB_SRC=$SRC/googletest-$GTEST_VERSION
unpack "$GTEST_DEB_SRC" dpkg-deb -x "$(newest "$DL"/debs/googletest_*.deb)" "$GTEST_DEB_SRC.tmp"
JPEG_SRC=$(unpack_deb_source libjpeg-turbo) # Debian's patches applied
JPEG_VERSION=$(deb_source_version libjpeg-turbo)
for pkg in $HEADER_DEBS; do
  unpack "$SRC/$pkg-$(deb_version "$pkg")" dpkg-deb -x "$(newest "$DL/debs/$pkg"_*.deb)" "$SRC/$pkg-$(deb_version "$pkg").tmp"
done

# 4. Static libraries, built with Ninja and installed into the bundle.
COMMON=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$BUNDLE" -DCMAKE_INSTALL_LIBDIR=lib
  -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON)
cmake_install() { # cmake_install NAME SOURCE_DIR ARGS...: configure, build, install into the bundle
  local name=$1 src=$2
  shift 2
  if done_step "$name"; then
    say "$name: already in the bundle, skipped"
    return
  fi
  local build=$WORK/$name
  rm -f "$LOGS/$name".log
  say "$name: configuring (log: ${LOGS#"$ROOT"/}/$name.log)"
  logged "$name" cmake -S "$src" -B "$build" "${COMMON[@]}" "$@"
  say "$name: building with $JOBS jobs"
  logged "$name" cmake --build "$build" -j "$JOBS"
  logged "$name" cmake --install "$build"
  # Everything installed must be in the bundle (a relative install folder taken as relative to the
  # working directory would put it elsewhere).
  if grep -qsv "^$BUNDLE/" "$build/install_manifest.txt"; then
    die "$name installed files outside the bundle: $(grep -v "^$BUNDLE/" "$build/install_manifest.txt" | head -n 3 | paste -sd ' ')"
  fi
  # No executables, pkg-config files, data or debug info in the bundle.
  rm -rf "${BUNDLE:?}/bin" "$BUNDLE/lib/pkgconfig" "$BUNDLE/share/pkgconfig" "$BUNDLE/share/opencv4"
  find "$BUNDLE/lib" -name '*.a' -exec strip --strip-debug {} +
  mark_done "$name"
}

# libjpeg-turbo, static, with SIMD: REQUIRE_SIMD makes its configure fail when the SIMD code cannot be built
# (no NASM/YASM), and the archive must then hold the SIMD routines (AVX2 and SSE2 on x86-64). Its programs
# (cjpeg, djpeg, ...) are left out of the bundle, its documentation too (the licences stay). Its own
# GNUInstallDirs takes an untyped relative CMAKE_INSTALL_*DIR as relative to the working directory, hence
# the typed ones.
jpeg_simd_check() { # the SIMD routines that the decoder dispatches to, in the bundle's libjpeg.a
  local lib=$BUNDLE/lib/libjpeg.a syms
  [ -f "$lib" ] || die "no $lib"
  case $(uname -m) in
    x86_64 | amd64) syms="jsimd_idct_islow_avx2 jsimd_ycc_rgb_convert_avx2 jsimd_h2v2_fancy_upsample_avx2 jsimd_idct_islow_sse2" ;;
    aarch64 | arm64) syms="jsimd_idct_islow_neon" ;;
    *) syms="" ;;
  esac
  [ -n "$syms" ] || die "libjpeg-turbo: no SIMD check for $(uname -m)"
  local defined
  defined=$(nm -g --defined-only "$lib" 2>/dev/null | awk '{print $3}')
  for s in $syms jsimd_can_idct_islow; do
    grep -qx "$s" <<<"$defined" || die "libjpeg-turbo was built without its SIMD code: $lib has no $s"
  done
  if [ -f "$WORK/libjpeg-turbo/CMakeCache.txt" ] && ! grep -qs '^WITH_SIMD:BOOL=ON' "$WORK/libjpeg-turbo/CMakeCache.txt"; then
    die "libjpeg-turbo was configured without SIMD (WITH_SIMD in third_party/build/libjpeg-turbo/CMakeCache.txt)"
  fi
}
c_simd_list() { # the instruction sets of the SIMD routines in the bundle's libjpeg.a
  nm -g --defined-only "$BUNDLE/lib/libjpeg.a" 2>/dev/null | awk '{print $3}' | grep -o '_\(mmx\|sse2\|avx2\|neon\)$' |
    sort -u | tr -d _ | tr a-z A-Z | paste -sd ' '
}
if [ -f "$BUNDLE/lib/opencv4/3rdparty/liblibjpeg-turbo.a" ]; then
  say "the bundle's OpenCV decodes JPEG with its own libjpeg-turbo, which has no SIMD: rebuilding OpenCV on the bundle's libjpeg-turbo"
  rm -rf "$WORK/opencv" "$BUNDLE/lib/opencv4/3rdparty/liblibjpeg-turbo.a" "$BUNDLE/share/licenses/opencv4/libjpeg-turbo"*
  rm -f "$STAMPS/opencv"
fi
cmake_install libjpeg-turbo "$JPEG_SRC" -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_SIMD=ON -DREQUIRE_SIMD=ON \
  -DWITH_TURBOJPEG=OFF -DWITH_JAVA=OFF -DWITH_JPEG7=OFF -DWITH_JPEG8=OFF -DCMAKE_INSTALL_LIBDIR:PATH=lib \
  -DCMAKE_INSTALL_DOCDIR:PATH=share/doc/libjpeg-turbo
jpeg_simd_check
if [ -d "$BUNDLE/share/doc/libjpeg-turbo" ] || [ -d "$BUNDLE/share/man" ]; then
  mkdir -p "$BUNDLE/share/licenses/libjpeg-turbo"
  cp "$JPEG_SRC/LICENSE.md" "$JPEG_SRC/README.ijg" "$JPEG_SRC/debian/copyright" "$BUNDLE/share/licenses/libjpeg-turbo/"
  rm -rf "$BUNDLE/share/doc/libjpeg-turbo" "$BUNDLE/share/man"
  rmdir "$BUNDLE/share/doc" 2>/dev/null || true
fi

# OpenCV: only core, imgproc, imgcodecs; PNG/zlib from OpenCV's 3rdparty/, JPEG from the bundle's
# libjpeg-turbo (above; OpenCV 4.6.0's own has no SIMD); every other codec, video,
# GUI, accelerator and language binding off, so configure downloads nothing (IPP, ADE, ... stay out).
OPENCV_OFF="WITH_IPP BUILD_IPP_IW WITH_ADE WITH_OPENCL WITH_ITT BUILD_ITT WITH_TIFF BUILD_TIFF WITH_WEBP
  BUILD_WEBP WITH_OPENEXR BUILD_OPENEXR WITH_JASPER BUILD_JASPER WITH_OPENJPEG BUILD_OPENJPEG WITH_IMGCODEC_HDR
  WITH_IMGCODEC_SUNRASTER WITH_IMGCODEC_PXM WITH_IMGCODEC_PFM WITH_GDAL WITH_GDCM WITH_FFMPEG WITH_GSTREAMER
  WITH_V4L WITH_1394 WITH_GTK WITH_QT WITH_OPENGL WITH_VTK WITH_CUDA WITH_VA WITH_VA_INTEL WITH_VULKAN
  WITH_OPENVX WITH_HALIDE WITH_INF_ENGINE WITH_NGRAPH WITH_PROTOBUF BUILD_PROTOBUF WITH_QUIRC WITH_EIGEN
  WITH_LAPACK WITH_TBB WITH_OPENMP WITH_CAROTENE WITH_OBSENSOR WITH_ONNX WITH_TIMVX WITH_CLP WITH_IMGCODEC_GIF
  BUILD_TESTS BUILD_PERF_TESTS BUILD_EXAMPLES BUILD_DOCS BUILD_opencv_apps BUILD_JAVA BUILD_FAT_JAVA_LIB
  BUILD_opencv_python2 BUILD_opencv_python3 BUILD_opencv_js BUILD_opencv_world BUILD_PACKAGE
  INSTALL_C_EXAMPLES INSTALL_PYTHON_EXAMPLES INSTALL_TESTS OPENCV_GENERATE_PKGCONFIG BUILD_WITH_DEBUG_INFO
  ENABLE_CCACHE"
OPENCV_ARGS=("-DBUILD_LIST=core,imgproc,imgcodecs" -DWITH_JPEG=ON -DWITH_PNG=ON -DBUILD_JPEG=OFF -DBUILD_PNG=ON
  -DJPEG_INCLUDE_DIR="$BUNDLE/include" -DJPEG_LIBRARY="$BUNDLE/lib/libjpeg.a"
  -DBUILD_ZLIB=ON -DENABLE_PIC=ON -DOPENCV_PYTHON_SKIP_DETECTION=ON -DOPENCV_DOWNLOAD_PATH="$WORK/opencv-downloads"
  -DOPENCV_LICENSES_INSTALL_PATH=share/licenses/opencv4)
for opt in $OPENCV_OFF; do OPENCV_ARGS+=("-D$opt=OFF"); done
if ! done_step opencv; then rm -rf "$WORK/opencv-downloads"; fi
cmake_install opencv "$OPENCV_SRC" "${OPENCV_ARGS[@]}"
# OpenCV logs every download attempt in CMakeDownloadLog.txt; there must be none.
if grep -qs '^#cmake_download\|^#do_copy\|^#do_unpack' "$WORK/opencv/CMakeDownloadLog.txt" ||
  [ -n "$(find "$WORK/opencv-downloads" -type f ! -name .gitignore 2>/dev/null)" ]; then
  die "OpenCV's configure tried to download something (see third_party/build/opencv/CMakeDownloadLog.txt)"
fi
# OpenCV must decode JPEG with the bundle's libjpeg-turbo, and its exported targets name that archive by its
# path here, which becomes relative to the bundle (as for DCMTK's zlib below).
grep -qs "^JPEG_LIBRARY:[A-Z]*=$BUNDLE/lib/libjpeg.a\$" "$WORK/opencv/CMakeCache.txt" ||
  die "OpenCV was not configured with the bundle's libjpeg-turbo (JPEG_LIBRARY in third_party/build/opencv/CMakeCache.txt)"
[ ! -e "$BUNDLE/lib/opencv4/3rdparty/liblibjpeg-turbo.a" ] || die "OpenCV built its own libjpeg-turbo (no SIMD) into the bundle"
# (files rewritten only when they need it, so that an unchanged bundle keeps its tarball)
rewrite_path() { # rewrite_path FROM TO FILE...
  local from=$1 to=$2
  shift 2
  for f in "$@"; do
    if grep -qsF "$from" "$f"; then sed -i "s|$from|$to|g" "$f"; fi
  done
}
rewrite_path "$BUNDLE/lib/libjpeg.a" '${_IMPORT_PREFIX}/lib/libjpeg.a' "$BUNDLE"/lib/cmake/opencv4/OpenCVModules*.cmake
grep -qs '${_IMPORT_PREFIX}/lib/libjpeg.a' "$BUNDLE"/lib/cmake/opencv4/OpenCVModules.cmake ||
  die "OpenCV's exported targets do not link the bundle's libjpeg.a (lib/cmake/opencv4/OpenCVModules.cmake)"
if grep -qs "$BUNDLE" "$BUNDLE"/lib/cmake/opencv4/OpenCVModules*.cmake; then
  die "OpenCV's exported targets name this machine's bundle path (they would not work elsewhere)"
fi

cmake_install yaml-cpp "$YAML_SRC" -DYAML_BUILD_SHARED_LIBS=OFF -DYAML_CPP_BUILD_TESTS=OFF \
  -DYAML_CPP_BUILD_TOOLS=OFF -DYAML_CPP_BUILD_CONTRIB=ON -DYAML_CPP_INSTALL=ON
cmake_install googletest "$GTEST_DEB_SRC/usr/src/googletest" -DBUILD_GMOCK=ON -DINSTALL_GTEST=ON \
  -Dgtest_build_tests=OFF -Dgmock_build_tests=OFF

# A bundle made when DICOM went through GDCM: its GDCM goes.
if [ -d "$BUNDLE/lib/cmake/gdcm-3.0" ] || [ -f "$STAMPS/gdcm" ]; then
  say "removing GDCM from the bundle (DICOM now goes through DCMTK and OpenJPEG)"
  rm -rf "$BUNDLE"/lib/cmake/gdcm-3.0 "$BUNDLE"/lib/libgdcm*.a "$BUNDLE"/lib/libsocketxx.a "$BUNDLE"/include/gdcm-3.0 \
    "$BUNDLE"/share/licenses/gdcm "$BUNDLE"/.stamps/gdcm
fi
# DCMTK and OpenJPEG (scripts/dicom-libs.sh): static, Release. DCMTK's zlib (deflated DICOM) is the one
# OpenCV built into the bundle (its 3rdparty/zlib), so the binary holds one zlib; DCMTK's exported targets
# name that archive by its path in this bundle, which becomes relative to the bundle wherever it is unpacked.
OPENCV_ZLIB=$BUNDLE/lib/opencv4/3rdparty/libzlib.a
[ -f "$OPENCV_ZLIB" ] || die "no $OPENCV_ZLIB: OpenCV's step must build its zlib (BUILD_ZLIB=ON)"
# System libraries that the bundle's exported targets may name: glibc's, which every host has. DCMTK links
# libnsl and libsocket where it finds them (for Solaris), and Debian has libnsl: the GPU host (Ubuntu 24.04)
# has none, and its link stopped at `cannot find -lnsl`. glibc has what DCMTK takes from them.
system_libs_outside_glibc() {
  sed -n 's/.*INTERFACE_LINK_LIBRARIES "\(.*\)"/\1/p' "$BUNDLE"/lib/cmake/dcmtk/DCMTKTargets.cmake \
    "$BUNDLE"/lib/openjpeg-*/OpenJPEGTargets.cmake 2>/dev/null | tr ';' '\n' |
    { grep -v -E '^(DCMTK::.*|openjp2|\$\{_IMPORT_PREFIX\}/.*|-?l?(c|m|dl|pthread|rt)|)$' || true; } | sort -u | paste -sd ' '
}
# A bundle built without zlib, or linking such a library: built again.
if [ -f "$STAMPS/dicom-libs-zlib-off" ] || grep -qs "zlib OFF" "$BUNDLE/.stamps/dicom-libs" ||
  [ -n "$(system_libs_outside_glibc)" ]; then
  rm -f "$BUNDLE/.stamps/dicom-libs" "$STAMPS/dicom-libs-zlib-off"
fi
LOGS=$LOGS DICOM_LIBS_BUILD_DIR=$WORK/dicom-libs JOBS=$JOBS dicom_libs_install "$BUNDLE" dicom-libs \
  -DZLIB_INCLUDE_DIR="$OPENCV_SRC/3rdparty/zlib" -DZLIB_LIBRARY="$OPENCV_ZLIB" \
  -DHAVE_LIBNSL_MAIN=OFF -DHAVE_LIBNSL=OFF -DHAVE_LIBSOCKET_MAIN=OFF -DHAVE_LIBSOCKET=OFF
rewrite_path "$BUNDLE/lib/opencv4/3rdparty/libzlib.a" '${_IMPORT_PREFIX}/lib/opencv4/3rdparty/libzlib.a' "$BUNDLE"/lib/cmake/dcmtk/*.cmake
# (Their Config files also hold this machine's paths, but only to compute relative ones, or unused.)
if grep -qs "$BUNDLE" "$BUNDLE"/lib/cmake/dcmtk/DCMTKTargets*.cmake "$BUNDLE"/lib/openjpeg-*/OpenJPEGTargets*.cmake; then
  die "DCMTK's or OpenJPEG's exported targets name this machine's bundle path (they would not work elsewhere)"
fi
foreign=$(system_libs_outside_glibc)
[ -z "$foreign" ] || die "DCMTK's or OpenJPEG's exported targets link $foreign, which the host may not have"
# (those packed into the tarball already were stripped before: only newer ones, so that an unchanged bundle
# keeps its tarball)
newer=()
[ -f "$TARBALL" ] && newer=(-newer "$TARBALL")
find "$BUNDLE/lib" \( -name 'libdcm*.a' -o -name 'libof*.a' -o -name 'libijg*.a' -o -name 'libopenjp2.a' \) "${newer[@]}" -print0 |
  xargs -0 -r strip --strip-debug

# 5. Header-only dependencies, copied out of the Debian packages (their CMake configs find the prefix
#    relative to their own location, so they work from the bundle); the licences of everything bundled.
if ! done_step headers; then
  say "headers: CLI11, nlohmann-json, Gloo; licences"
  cli=$SRC/libcli11-dev-$(deb_version libcli11-dev)
  json=$SRC/nlohmann-json3-dev-$(deb_version nlohmann-json3-dev)
  gloo=$SRC/libgloo-dev-$(deb_version libgloo-dev)
  mkdir -p "$BUNDLE/include" "$BUNDLE/share/cmake"
  rm -rf "$BUNDLE/include/CLI" "$BUNDLE/include/nlohmann" "$BUNDLE/include/gloo"
  cp -a "$cli/usr/include/CLI" "$json/usr/include/nlohmann" "$gloo/usr/include/gloo" "$BUNDLE/include/"
  cp -a "$cli/usr/share/cmake/CLI11" "$json/usr/share/cmake/nlohmann_json" "$BUNDLE/share/cmake/"
  for pkg in $HEADER_DEBS; do
    mkdir -p "$BUNDLE/share/licenses/$pkg"
    cp "$SRC/$pkg-$(deb_version "$pkg")/usr/share/doc/$pkg/copyright" "$BUNDLE/share/licenses/$pkg/"
  done
  mkdir -p "$BUNDLE/share/licenses/yaml-cpp" "$BUNDLE/share/licenses/googletest"
  cp "$YAML_SRC/LICENSE" "$BUNDLE/share/licenses/yaml-cpp/"
  cp "$GTEST_DEB_SRC/usr/share/doc/googletest/copyright" "$BUNDLE/share/licenses/googletest/"
  mark_done headers
fi

# 5b. libseccomp (the DICOM decoder helper's filter): Debian's own static archive and headers, from
#     libseccomp-dev (Debian ships libseccomp.a; nothing to build).
if ! done_step seccomp; then
  say "libseccomp: static archive and headers from Debian's libseccomp-dev"
  sc=$SRC/libseccomp-dev-$(deb_version libseccomp-dev)
  mkdir -p "$BUNDLE/include" "$BUNDLE/lib" "$BUNDLE/share/licenses/libseccomp-dev"
  cp "$sc"/usr/include/seccomp*.h "$BUNDLE/include/"
  cp "$sc"/usr/lib/*/libseccomp.a "$BUNDLE/lib/"
  cp "$sc/usr/share/doc/libseccomp-dev/copyright" "$BUNDLE/share/licenses/libseccomp-dev/"
  mark_done seccomp
fi

# 5c. Boost's headers for serve's HTTP server (Boost.Beast on Asio, header-only: nothing to build), from
#     Debian's libboost1.81-dev. Not its whole tree (180 MB, 9.6 MB packed) but the libraries of BOOST_LIBS
#     (beast asio) and what they include (about 15 MB, 1.3 MB packed):
#     - every Boost header that the public headers of those libraries (all of them, not only those serve
#       includes today) pull in, as the preprocessor lists them (c++ -M), with each compiler here (c++, and
#       a clang++ when there is one), in C++17 and C++20 (the CUDA build's), with and without serve's macros
#       (BOOST_ASIO_NO_DEPRECATED, BOOST_BEAST_USE_STD_STRING_VIEW);
#     - whole: the folders of BOOST_LIBS and of every other library so reached that is under 1 MiB (config,
#       predef, system, core, mp11, ...: a branch another compiler or platform takes is there too); the
#       larger ones (mpl, preprocessor, numeric, regex, intrusive) keep only the files listed.
#     Checked: the same headers, preprocessed against the bundle alone, take every Boost header from the
#     bundle, and a translation unit that makes an io_context and an HTTP request parser compiles with it.
#     A finished step is marked .stamps/boost with its recipe; another recipe (BOOST_LIBS) redoes it.
boost_closure() { # boost_closure INCLUDE_DIR TU OUT: what TU includes (-M), one per line, in every configuration
  local inc=$1 tu=$2 out=$3 cxx std defs
  : >"$out"
  for cxx in $BOOST_CXXS; do
    for std in 17 20; do
      for defs in "" "-DBOOST_ASIO_NO_DEPRECATED -DBOOST_BEAST_USE_STD_STRING_VIEW"; do
        # -MG: a header missing here (OpenSSL's, for asio/ssl) is listed, not an error
        logged boost-headers "$cxx" -std=c++$std $defs -M -MG -MF "$out.d" -isystem "$inc" "$tu"
        tr ' \\' '\n\n' <"$out.d" | grep -v -e '^$' -e ':$' -e "^$tu\$" >>"$out" || true
      done
    done
  done
  rm -f "$out.d"
  sort -u "$out" -o "$out"
}
BOOST_RECIPE="recipe 1: $BOOST_LIBS, their public headers' includes (c++ -M, C++17 and C++20, with and without BOOST_ASIO_NO_DEPRECATED BOOST_BEAST_USE_STD_STRING_VIEW), whole folders under 1 MiB"
if ! done_step boost || [ "$(head -n 1 "$STAMPS/boost")" != "$BOOST_RECIPE" ]; then
  say "boost: the headers of $BOOST_LIBS and the Boost headers they include, from Debian's $BOOST_DEB"
  boost_pkg=$SRC/$BOOST_DEB-$(deb_version $BOOST_DEB)
  boost_inc=$boost_pkg/usr/include
  bw=$WORK/boost-headers
  rm -rf "$bw" "$LOGS/boost-headers.log"
  mkdir -p "$bw"
  BOOST_CXXS=c++
  for c in clang++ clang++-{20..14}; do
    if command -v "$c" >/dev/null; then
      BOOST_CXXS="$BOOST_CXXS $c"
      break
    fi
  done
  # Every public header of BOOST_LIBS (the detail/ and impl/ ones come through them; src.hpp, the separate
  # compilation's source, refuses the header-only mode).
  for lib in $BOOST_LIBS; do
    [ -d "$boost_inc/boost/$lib" ] || die "$BOOST_DEB has no boost/$lib/ (RANZCR_BUNDLE_BOOST_LIBS=$BOOST_LIBS)"
    (cd "$boost_inc" && {
      [ ! -f "boost/$lib.hpp" ] || echo "boost/$lib.hpp"
      find "boost/$lib" -name '*.hpp' ! -name src.hpp ! -path '*/detail/*' ! -path '*/impl/*'
    })
  done | sort -u | sed 's/.*/#include <&>/' >"$bw/all.cpp"
  boost_closure "$boost_inc" "$bw/all.cpp" "$bw/deps"
  if grep -q '^boost/' "$bw/deps"; then
    die "Boost headers that $BOOST_DEB does not have: $(grep '^boost/' "$bw/deps" | head -n 3 | paste -sd ' ')"
  fi
  # (the paths the preprocessor wrote, made relative to the package's include folder)
  grep "^$boost_inc/boost/" "$bw/deps" | xargs realpath -e --relative-to="$boost_inc" >"$bw/files"
  for lib in $(sed -n 's|^boost/\([^/]*\)/.*|\1|p' "$bw/files" | sort -u); do
    if [[ " $BOOST_LIBS " == *" $lib "* ]] || [ "$(du -sb "$boost_inc/boost/$lib" | cut -f1)" -lt 1048576 ]; then
      (cd "$boost_inc" && find "boost/$lib" -type f) >>"$bw/files"
    fi
  done
  sort -u "$bw/files" -o "$bw/files"
  rm -rf "$BUNDLE/include/boost"
  mkdir -p "$BUNDLE/include"
  tar -C "$boost_inc" -cf - -T "$bw/files" | tar -C "$BUNDLE/include" -xf -
  # The checks: every Boost header from the bundle, and a translation unit like serve's compiles against it.
  boost_closure "$BUNDLE/include" "$bw/all.cpp" "$bw/deps-bundle"
  outside=$(grep -v "^$BUNDLE/include/boost/" "$bw/deps-bundle" | grep 'boost/' | head -n 3 | paste -sd ' ' || true)
  [ -z "$outside" ] || die "Boost headers missing from the bundle (found elsewhere or nowhere): $outside"
  printf '%s\n' '#include <boost/asio.hpp>' '#include <boost/beast/core.hpp>' '#include <boost/beast/http.hpp>' \
    '#include <boost/beast/version.hpp>' 'int main() {' '  boost::asio::io_context ioc;' \
    '  boost::asio::ip::tcp::acceptor acceptor(ioc);' \
    '  boost::beast::http::request_parser<boost::beast::http::string_body> parser;' \
    '  parser.body_limit(1 << 20);' '  boost::beast::flat_buffer buffer;' \
    '  return BOOST_BEAST_VERSION > 0 && !parser.is_done() && buffer.size() == 0 && !acceptor.is_open() ? 0 : 1;' \
    '}' >"$bw/check.cpp"
  # (-H: every header it opens, on stderr)
  if ! c++ -std=c++17 -H -isystem "$BUNDLE/include" -c "$bw/check.cpp" -o "$bw/check.o" 2>"$bw/check.H"; then
    grep -v '^\.' "$bw/check.H" | tail -n 25 | sed 's/^/    /' >&2
    die "a translation unit with Beast's HTTP parser and an Asio io_context does not compile against the bundle ($bw/check.cpp)"
  fi
  outside=$(grep -v "$BUNDLE/include/boost/" "$bw/check.H" | grep '/boost/' | head -n 3 | paste -sd ' ' || true)
  [ -z "$outside" ] || die "the Beast check took Boost headers from outside the bundle: $outside"
  grep -q "$BUNDLE/include/boost/beast/http.hpp" "$bw/check.H" || die "the Beast check did not include the bundle's boost/beast/http.hpp"
  # The licence: Debian's copyright file, and the Boost Software License's own text from it.
  mkdir -p "$BUNDLE/share/licenses/$BOOST_DEB"
  cp "$boost_pkg/usr/share/doc/$BOOST_DEB/copyright" "$BUNDLE/share/licenses/$BOOST_DEB/"
  awk '/^License: BSL-1.0$/ { inside = 1; text = ""; next }
       inside && /^ / { line = substr($0, 2); text = text (line == "." ? "" : line) "\n"; next }
       inside { if (text ~ /Boost Software License/) { printf "%s", text; exit } inside = 0 }' \
    "$boost_pkg/usr/share/doc/$BOOST_DEB/copyright" >"$BUNDLE/share/licenses/$BOOST_DEB/LICENSE_1_0.txt"
  grep -q '^Boost Software License - Version 1.0' "$BUNDLE/share/licenses/$BOOST_DEB/LICENSE_1_0.txt" ||
    die "no Boost Software License text in $BOOST_DEB's copyright file"
  mkdir -p "$STAMPS"
  {
    echo "$BOOST_RECIPE"
    echo "compilers: $(for c in $BOOST_CXXS; do "$c" --version | head -n 1; done | paste -sd ';' | sed 's/;/; /g')"
    echo "files: $(wc -l <"$bw/files")"
    echo "libraries: $(sed -n 's|^boost/\([^/]*\)/.*|\1|p' "$bw/files" | sort -u | paste -sd ' ')"
  } >"$STAMPS/boost"
  say "boost: $(wc -l <"$bw/files") files ($(du -sh "$BUNDLE/include/boost" | cut -f1)) in include/boost/"
fi

# 6. Manifest, then the tarball (remade only when the bundle changed).
MANIFEST=$BUNDLE/MANIFEST
if [ ! -f "$MANIFEST" ] || [ -n "$(find "$STAMPS" -newer "$MANIFEST" -print -quit)" ]; then
  say "writing ${MANIFEST#"$ROOT"/}"
  ver() { sed -n "s/.*define $2 *\"\{0,1\}\([^\" ]*\).*/\1/p" "$OPENCV_SRC/3rdparty/$1" | head -n 1; }
  {
    echo "ranzcr-cpp offline dependency bundle (scripts/offline/make-bundle.sh)"
    echo "created: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME") $(uname -m)"
    echo "compiler: $(c++ --version | head -n 1); cmake $(cmake --version | sed -n 's/cmake version //p')"
    echo "use: RANZCR_BUNDLE=<this folder> scripts/setup.sh (CMAKE_PREFIX_PATH=<this folder>)"
    echo
    echo "opencv $OPENCV_VERSION: core imgproc imgcodecs, static; built in: libpng $(ver libpng/png.h PNG_LIBPNG_VER_STRING), zlib $(ver zlib/zlib.h ZLIB_VERSION); JPEG: the bundle's libjpeg-turbo"
    echo "  source: $(cat "$DL/$OPENCV_SDIST.url" 2>/dev/null || echo "$OPENCV_SDIST sha256 $OPENCV_SDIST_SHA256")"
    echo "libjpeg-turbo $JPEG_VERSION: libjpeg (6.2 API), static, SIMD: yes ($(c_simd_list))"
    echo "  source: Debian source package libjpeg-turbo $JPEG_VERSION (apt-get source)"
    echo "yaml-cpp $YAML_VERSION: static"
    echo "  source: Debian source package yaml-cpp $YAML_VERSION (apt-get source)"
    echo "googletest $GTEST_VERSION: gtest, gtest_main, gmock, gmock_main, static"
    echo "  source: Debian package googletest $GTEST_VERSION (/usr/src/googletest)"
    echo "dcmtk $(deb_source_version dcmtk): ofstd oflog dcmdata dcmimgle dcmimage dcmjpeg dcmjpls (IJG libjpeg 8/12/16-bit, CharLS built in), static, builtin dictionary, with OpenCV's zlib"
    echo "  source: Debian source package dcmtk $(deb_source_version dcmtk) (apt-get source)"
    echo "openjpeg $(deb_source_version openjpeg2): libopenjp2, static"
    echo "  source: Debian source package openjpeg2 $(deb_source_version openjpeg2) (apt-get source)"
    for pkg in $HEADER_DEBS; do
      case "$pkg" in
        libgloo-dev) what="headers only (the Gloo code is in LibTorch)" ;;
        libseccomp-dev) what="headers and Debian's static libseccomp.a" ;;
        "$BOOST_DEB") what="headers only: $BOOST_LIBS and the Boost headers they include, $(sed -n 's/^files: //p' "$STAMPS/boost") files (libraries: $(sed -n 's/^libraries: //p' "$STAMPS/boost")); closure taken with $(sed -n 's/^compilers: //p' "$STAMPS/boost")" ;;
        *) what="headers and CMake config" ;;
      esac
      echo "$pkg $(deb_version "$pkg"): $what"
      echo "  source: Debian package $pkg $(deb_version "$pkg")"
    done
  } >"$MANIFEST"
fi
if [ -f "$TARBALL" ] && [ -z "$(find "$BUNDLE" -newer "$TARBALL" -print -quit)" ]; then
  say "tarball up to date: ${TARBALL#"$ROOT"/} ($(du -h "$TARBALL" | cut -f1))"
else
  say "packing ${TARBALL#"$ROOT"/} (xz)"
  tar -C "$TP" --sort=name --owner=0 --group=0 --numeric-owner --exclude=bundle/.stamps -cf - bundle |
    xz -T0 -9 >"$TARBALL.tmp"
  mv "$TARBALL.tmp" "$TARBALL"
  size=$(stat -c %s "$TARBALL")
  say "wrote ${TARBALL#"$ROOT"/}: $((size / 1024 / 1024)) MiB ($size bytes); bundle $(du -sh --exclude=.stamps "$BUNDLE" | cut -f1)"
  [ "$size" -lt $((30 * 1024 * 1024)) ] || say "warning: the tarball is over 30 MiB; the GPU transfer carries 64 MiB in all"
fi
say "done: RANZCR_BUNDLE=third_party/bundle scripts/setup.sh builds against it"
