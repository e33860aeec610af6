#!/usr/bin/env bash
# Idempotent set-up: Debian packages (DCMTK and OpenJPEG for DICOM among them), LibTorch (from the torch
# wheel in a project-local venv, or from Torch_DIR), then configure and build with Ninja into build/. Safe to
# run again: it skips what is done.
#   scripts/setup.sh            # everything
#   TORCH_PIP_SPEC=torch==2.11.0 scripts/setup.sh   # another torch wheel
#   Torch_DIR=/opt/libtorch/share/cmake/Torch scripts/setup.sh   # an existing LibTorch
#   BUILD_DIR=build-x scripts/setup.sh                # another build folder
#   RANZCR_BUNDLE=third_party/bundle scripts/setup.sh # the dependencies from the offline bundle
#                                                     # (scripts/offline/make-bundle.sh), not from apt
#   RANZCR_OFFLINE=1 ...                              # never apt-get or pip: stop with an error instead
#   TENSORBOARD_PIP_SPEC=tensorboard==2.21.0 ...      # the tensorboard for the event-file test (into .venv)
#   TIMM_PIP_SPEC=timm==1.0.31 ...                    # the timm for the logits parity test (into .venv, --no-deps)
#   SELENIUM_PIP_SPEC=selenium==4.51.0 ...            # the Selenium for serve's browser test (into .venv)
#   TRITON_PIP_SPEC=tritonclient[http]==2.73.0 ...  # the Open Inference Protocol client for serve's test (into .venv)
#   OPENCV_PIP_SPEC=opencv-python-headless==5.0.0.93 ... # OpenCV for the PyTorch benchmark reference (into .venv)
#   OPENVINO_PIP_SPEC=openvino==2026.4.1 ...          # OpenVINO: its C++ SDK is the CPU inference backend (into .venv)
#   ONNX_PIP_SPECS="onnx==1.23.2 onnxruntime==1.32.0" ... # the ONNX export's references (into .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
say() { echo "setup: $*" >&2; }
die() {
  echo "error: $*" >&2
  exit 1
}
# A reference package that could not be installed: a note, but under CI (CI=true) an error, since the tests
# that compare with it would fail there anyway (tests/test_util.h, RANZCR_SKIP_WITHOUT_REFERENCE).
reference_missing() { # reference_missing WHAT_FAILED WHAT_IS_SKIPPED
  if [ "${CI:-}" = true ]; then die "$1 (CI=true: every reference must be installed)"; fi
  say "$1: $2"
}
apt_install() {
  [ "${RANZCR_OFFLINE:-0}" = 1 ] && die "missing$*, and RANZCR_OFFLINE=1 forbids apt-get: install them first"
  command -v apt-get >/dev/null || die "missing$*, and there is no apt-get to install them"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  say "installing Debian packages:$*"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# 1. Debian packages; with RANZCR_BUNDLE only the build tools (the bundle holds the libraries).
BUNDLE=""
if [ -n "${RANZCR_BUNDLE:-}" ]; then
  BUNDLE=$(cd "$RANZCR_BUNDLE" 2>/dev/null && pwd) || die "RANZCR_BUNDLE=$RANZCR_BUNDLE is not a folder"
  [ -f "$BUNDLE/MANIFEST" ] || die "RANZCR_BUNDLE=$RANZCR_BUNDLE is not a bundle (no MANIFEST; see scripts/offline/make-bundle.sh)"
  missing=""
  command -v c++ >/dev/null || missing="$missing build-essential"
  command -v cmake >/dev/null || missing="$missing cmake"
  command -v ninja >/dev/null || missing="$missing ninja-build"
  [ -z "$missing" ] || apt_install $missing
  # Hub downloads need libcurl's and OpenSSL's headers; a host without them (the offline GPU host) builds a
  # ranzcr that reads the Hugging Face cache only (fill it elsewhere with `ranzcr fetch-weights`).
  if ! echo '#include <curl/curl.h>
#include <openssl/evp.h>' | c++ -E -x c++ - >/dev/null 2>&1; then
    say "no libcurl or OpenSSL headers here: building without Hub downloads (the Hugging Face cache is read only)"
    RANZCR_CMAKE_ARGS="${RANZCR_CMAKE_ARGS:-} -DRANZCR_WITH_CURL=OFF"
  fi
  # `serve` needs Boost.Beast and Asio (header-only), which the bundle carries (make-bundle.sh, from Debian's
  # libboost1.81-dev): a bundle made before it carried them is made again, not built without serve.
  if ! echo '#include <boost/beast/core.hpp>' | c++ -E -x c++ -isystem "$BUNDLE/include" - >/dev/null 2>&1 ||
    [ ! -f "$BUNDLE/include/boost/beast/core.hpp" ]; then
    die "the bundle $BUNDLE has no Boost.Beast headers (include/boost/beast/core.hpp), which serve needs: make it again with scripts/offline/make-bundle.sh"
  fi
else
  # libdcmtk-dev, libopenjp2-7-dev: DICOM (Debian's security updates patch them); libseccomp-dev: the DICOM
  # decoder helper's filter; iproute2: the two-host tests' network namespaces; ccache: step 3;
  # libboost1.81-dev: serve's HTTP server (Boost.Beast on Asio, header-only); chromium + chromium-driver: the
  # page's browser test (with Selenium in .venv, step 2b); wrk: serve's load test (scripts/bench/serve_compare.sh);
  # libonnx-dev, libprotobuf-dev: `ranzcr export --out x.onnx` and the OpenVINO backend's graph (onnx/).
  PKGS="build-essential cmake ninja-build pkg-config python3-venv libopencv-dev libyaml-cpp-dev libgtest-dev libcli11-dev nlohmann-json3-dev libgloo-dev libcurl4-openssl-dev libssl-dev libdcmtk-dev libopenjp2-7-dev libseccomp-dev iproute2 ccache libboost1.81-dev chromium chromium-driver wrk libonnx-dev libprotobuf-dev"
  missing=""
  for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  [ -z "$missing" ] || apt_install $missing
fi

# Step 2's shared venv (link_shared_venv, prune_shared_venvs): in their own file, outside step 2, whose text
# is part of the venv's key, so that a change to them makes no new venv.
source "$ROOT/scripts/shared_venv.sh"
# A .venv that links into the shared venvs follows set-up's key (unless Torch_DIR is set or RANZCR_OFFLINE=1:
# then its venv is only locked and marked used).
shared_venv_at_setup

# 2. LibTorch: Torch_DIR, else the project venv's torch, else a python3 that already has torch, else
#    create .venv and pip-install the wheel (which carries LibTorch: headers, libraries, CMake config).
#    A clone without .venv gets a link to a venv that every clone shares (link_shared_venv).
if [ -z "${Torch_DIR:-}" ]; then
  torch_prefix() { "$1" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null | tail -n 1; }
  PREFIX=""
  [ -x "$ROOT/.venv/bin/python" ] && PREFIX=$(torch_prefix "$ROOT/.venv/bin/python" || true)
  [ -z "$PREFIX" ] && [ "${RANZCR_USE_SYSTEM_TORCH:-1}" = 1 ] && PREFIX=$(torch_prefix python3 || true)
  if [ -z "$PREFIX" ]; then
    [ "${RANZCR_OFFLINE:-0}" = 1 ] && die "no LibTorch (set Torch_DIR, or a python3 with torch), and RANZCR_OFFLINE=1 forbids pip"
    if [ ! -e "$ROOT/.venv" ] && [ "${RANZCR_VENV_CACHE:-}" != 0 ]; then
      link_shared_venv
      PREFIX=$(torch_prefix "$ROOT/.venv/bin/python" || true)
    fi
  fi
  if [ -z "$PREFIX" ]; then
    SPEC=${TORCH_PIP_SPEC:-torch==2.13.0}
    say "installing $SPEC into .venv (LibTorch comes with the wheel)"
    [ -x "$ROOT/.venv/bin/python" ] || python3 -m venv "$ROOT/.venv"
    if ! "$ROOT/.venv/bin/pip" install -q "$SPEC" > "$ROOT/.venv/pip-install.log" 2>&1; then
      cat "$ROOT/.venv/pip-install.log" >&2
      echo "error: pip install $SPEC failed (log above)" >&2
      exit 1
    fi
    PREFIX=$(torch_prefix "$ROOT/.venv/bin/python")
  fi
  export Torch_DIR="$PREFIX/Torch"
fi
[ -f "$Torch_DIR/TorchConfig.cmake" ] || { echo "error: no TorchConfig.cmake in Torch_DIR=$Torch_DIR" >&2; exit 1; }

# 2b. Python packages in the project venv that tests and benchmarks compare with. None pulls a torch: the
#     venv's torch stays as it is. Optional: a failed or forbidden install is a note (an error under CI=true,
#     where every reference must be there), and the tests that need one are skipped without it.
# optional_pip IMPORTS LOG WHAT_IS_SKIPPED SPEC...: pip-installs SPEC (pip's arguments) into .venv unless
# `import IMPORTS` works there already; IMPORTS "find:NAME": unless package NAME is installed (one that cannot
# be imported alone).
optional_pip() {
  local imports=$1 log=$2 skipped=$3 check
  shift 3
  [ -x "$ROOT/.venv/bin/python" ] || return 0
  check="import $imports"
  [[ "$imports" == find:* ]] &&
    check="import importlib.util, sys; sys.exit(importlib.util.find_spec('${imports#find:}') is None)"
  "$ROOT/.venv/bin/python" -c "$check" >/dev/null 2>&1 && return 0
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no ${imports#find:} in .venv (RANZCR_OFFLINE=1 forbids pip): $skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q "$@" > "$ROOT/.venv/$log" 2>&1; then
    reference_missing "pip install $* failed (.venv/$log)" "$skipped"
  fi
}
# TensorBoard: the test that reads the training's event files with TensorBoard's own reader.
optional_pip tensorboard pip-tensorboard.log "the TensorBoard reader test will be skipped" \
  "${TENSORBOARD_PIP_SPEC:-tensorboard}"
# timm's model code (pure Python): the test that compares our logits with timm's
# (tests/models/timm_parity_test.cpp, scripts/timm/parity.py). --no-deps: timm's requirements would pull
# torchvision and another torch; the script stubs the packages timm imports but needs no model from.
optional_pip find:timm pip-timm.log "the timm parity test will be skipped" --no-deps "${TIMM_PIP_SPEC:-timm==1.0.31}"
# OpenCV's Python package: the PyTorch side of the benchmarks (scripts/bench/pytorch_reference.py, which
# decodes like a typical Python pipeline) and its test (tests/scripts/pytorch_reference_test.sh). --no-deps:
# numpy is already there (the tensorboard above brings it).
optional_pip cv2 pip-opencv.log "the PyTorch reference's test will be skipped" \
  --no-deps "${OPENCV_PIP_SPEC:-opencv-python-headless==5.0.0.93}"
# Selenium: the test that drives serve's web page in Chromium (tests/apps/serve_page_check.py; skipped
# without it or without Debian's chromium and chromium-driver). Pure Python.
optional_pip selenium pip-selenium.log "the serve page's browser test will be skipped" \
  "${SELENIUM_PIP_SPEC:-selenium==4.51.0}"
# tritonclient[http], the Open Inference Protocol's client from Triton: the test that calls serve's /v2
# endpoints with it (tests/apps/serve_triton_check.py).
optional_pip tritonclient.http pip-triton.log "the Open Inference Protocol client test will be skipped" \
  "${TRITON_PIP_SPEC:-tritonclient[http]==2.73.0}"
# The real huggingface_hub client and safetensors: the tests that share the Hugging Face cache with Python in
# both directions and serve timm's own save_for_hf output (tests/apps/pretrained_hub_test.cpp).
optional_pip "huggingface_hub, safetensors" pip-hub.log "the Hub cache interop tests will be skipped" \
  ${HUB_PIP_SPECS:-huggingface_hub==2.4.0 safetensors==0.8.0}
# pydicom with its decoder plug-ins, and scikit-learn: the tests that check our DICOM decoding against
# pydicom's (tests/dicom/decode_test.cpp) and our ROC figures against scikit-learn's. They pull numpy/scipy
# wheels.
optional_pip "pydicom, pylibjpeg, openjpeg, libjpeg, rle, sklearn" pip-reference.log "those comparisons will be skipped" \
  ${REFERENCE_PIP_SPECS:-pydicom==3.0.2 pylibjpeg==2.1.0 pylibjpeg-libjpeg==2.5.0 pylibjpeg-openjpeg==2.6.0 pylibjpeg-rle==2.2.0 scikit-learn==1.9.1}
# OpenVINO: the wheel carries its C++ SDK (headers, libopenvino.so, OpenVINOConfig.cmake), which CMake finds
# beside torch in .venv's site-packages; without it LibTorch runs inference on the CPU. ONNX's and ONNX
# Runtime's Python packages: the references the exported graphs are checked against (tests/onnx/).
optional_pip openvino pip-openvino.log "the build runs inference with LibTorch only" \
  "${OPENVINO_PIP_SPEC:-openvino==2026.4.1}"
optional_pip "onnx, onnxruntime" pip-onnx.log "the ONNX export's reference checks will be skipped" \
  ${ONNX_PIP_SPECS:-onnx==1.23.2 onnxruntime==1.32.0}
# MLflow (server and Python client): the tests that log runs to a real tracking server and read them back
# with MLflow's own client, and the UI's charts in Chromium (tests/apps/mlflow_cli_test.cpp,
# tests/tracking/mlflow_test.cpp). It pulls Flask, SQLAlchemy, pandas and pyarrow wheels (3.18.0 lacks its
# mlflow-skinny on PyPI; 3.17.2 is pinned).
optional_pip mlflow pip-mlflow.log "the MLflow tracking tests will be skipped" "${MLFLOW_PIP_SPEC:-mlflow==3.17.2}"
flock -u 9 2>/dev/null || true  # the shared venv's lock (link_shared_venv), if taken

# 3. Configure (once) and build. With Debian's ccache installed (set-up installs it; RANZCR_CCACHE=0: not
#    used), it is the compiler launcher: its cache lives outside the clone (~/.cache/ccache) and is shared by
#    every clone, with paths taken relative to the clone (CCACHE_BASEDIR), and the sloppiness ccache's manual
#    asks for with precompiled headers (CMakeLists.txt adds the matching compiler flag). ccache hashes the
#    compiler, its flags and every header a file includes, so a changed recipe or dependency recompiles. No
#    compile command may name a path of the clone that base_dir does not rewrite (a -D value, a header named
#    by its absolute path): then that file misses in every other clone (CMakeLists.txt's pch, tests/build_paths).
#    ccache runs through scripts/ccache-launch.sh, which removes an old precompiled header before it is
#    rebuilt (else the rebuilt one, and every file built with it, missed the cache).
CCACHE_ARGS=()
launcher=""
if [ "${RANZCR_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  launcher="env;CCACHE_BASEDIR=$ROOT;CCACHE_NOHASHDIR=1;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;$ROOT/scripts/ccache-launch.sh"
  CCACHE_ARGS=(-DCMAKE_C_COMPILER_LAUNCHER="$launcher" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" -DRANZCR_CCACHE=ON)
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  say "configuring $BUILD_DIR (Torch_DIR=$Torch_DIR${BUNDLE:+, bundle $BUNDLE}${CCACHE_ARGS:+, ccache})"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$Torch_DIR" \
    ${BUNDLE:+-DCMAKE_PREFIX_PATH="$BUNDLE"} "${CCACHE_ARGS[@]}" ${RANZCR_CMAKE_ARGS:-} >/dev/null
elif grep -q '^GDCM_DIR:' "$BUILD_DIR/CMakeCache.txt"; then
  # A build folder configured when DICOM went through GDCM: configure it again for DCMTK and OpenJPEG.
  say "reconfiguring $BUILD_DIR (DICOM now goes through DCMTK and OpenJPEG)"
  cmake -U 'GDCM*' "$BUILD_DIR" >/dev/null
elif [ -n "$BUNDLE" ] && grep -q '^RANZCR_WITH_SERVE:BOOL=OFF' "$BUILD_DIR/CMakeCache.txt" &&
  [[ "${RANZCR_CMAKE_ARGS:-}" != *RANZCR_WITH_SERVE* ]]; then
  # A build folder configured without serve when the bundle had no HTTP library: the bundle now carries
  # Boost.Beast, so configure it again with serve (unless RANZCR_CMAKE_ARGS names RANZCR_WITH_SERVE).
  say "reconfiguring $BUILD_DIR with serve (the bundle carries Boost.Beast now)"
  cmake -DRANZCR_WITH_SERVE=ON "$BUILD_DIR" >/dev/null
fi
if [ -n "$launcher" ] && grep -q '^RANZCR_CCACHE:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" &&
  ! grep -qxF "CMAKE_CXX_COMPILER_LAUNCHER:UNINITIALIZED=$launcher" "$BUILD_DIR/CMakeCache.txt"; then
  # A build folder configured with another launcher (ccache called directly, before ccache-launch.sh).
  say "reconfiguring $BUILD_DIR (the compiler launcher is now scripts/ccache-launch.sh)"
  cmake "${CCACHE_ARGS[@]}" "$BUILD_DIR" >/dev/null
fi
if [ -n "$BUNDLE" ]; then
  # Every bundled dependency must come from the bundle, not from a system package beside it.
  for var in OpenCV_DIR yaml-cpp_DIR GTest_DIR DCMTK_DIR OpenJPEG_DIR CLI11_DIR nlohmann_json_DIR RANZCR_GLOO_INCLUDE_DIR RANZCR_SECCOMP_LIBRARY BOOST_BEAST_INCLUDE_DIR; do
    # (serve's Boost headers, unless this build was asked for without serve: RANZCR_WITH_SERVE=OFF)
    if [ "$var" = BOOST_BEAST_INCLUDE_DIR ] && grep -q '^RANZCR_WITH_SERVE:BOOL=OFF' "$BUILD_DIR/CMakeCache.txt"; then
      continue
    fi
    found=$(sed -n "s/^$var:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt")
    case "$found" in
      "$BUNDLE"/*) ;;
      *) die "$BUILD_DIR took $var=${found:-nothing}, not from the bundle $BUNDLE (remove $BUILD_DIR or pick another BUILD_DIR)" ;;
    esac
  done
fi
say "building (first build takes several minutes on 2 cores)"
cmake --build "$BUILD_DIR" ${RANZCR_BUILD_TARGET:+--target $RANZCR_BUILD_TARGET}
