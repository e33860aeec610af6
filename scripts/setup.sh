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

# 2. LibTorch: Torch_DIR, else the project venv's torch, else a python3 that already has torch, else
#    create .venv and pip-install the wheel (which carries LibTorch: headers, libraries, CMake config).
if [ -z "${Torch_DIR:-}" ]; then
  torch_prefix() { "$1" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null | tail -n 1; }
  PREFIX=""
  [ -x "$ROOT/.venv/bin/python" ] && PREFIX=$(torch_prefix "$ROOT/.venv/bin/python" || true)
  [ -z "$PREFIX" ] && [ "${RANZCR_USE_SYSTEM_TORCH:-1}" = 1 ] && PREFIX=$(torch_prefix python3 || true)
  if [ -z "$PREFIX" ]; then
    SPEC=${TORCH_PIP_SPEC:-torch==2.13.0}
    [ "${RANZCR_OFFLINE:-0}" = 1 ] && die "no LibTorch (set Torch_DIR, or a python3 with torch), and RANZCR_OFFLINE=1 forbids pip"
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

# 2b. TensorBoard and timm in the project venv, for the test that reads the training's event files with
#     TensorBoard's own reader and the one that compares our logits with timm's (each skipped without it).
#     Neither pulls a torch: the venv's torch stays as it is. Optional: a failed or forbidden install is a
#     note, not an error.
if [ -x "$ROOT/.venv/bin/python" ] && ! "$ROOT/.venv/bin/python" -c 'import tensorboard' >/dev/null 2>&1; then
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no tensorboard in .venv (RANZCR_OFFLINE=1 forbids pip): the TensorBoard reader test will be skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q "${TENSORBOARD_PIP_SPEC:-tensorboard}" > "$ROOT/.venv/pip-tensorboard.log" 2>&1; then
    reference_missing "pip install tensorboard failed (.venv/pip-tensorboard.log)" "the TensorBoard reader test will be skipped"
  fi
fi
# timm's model code (pure Python), for the test that compares our logits with timm's
# (tests/models/timm_parity_test.cpp, scripts/timm/parity.py). --no-deps: timm's requirements would pull
# torchvision and another torch; the script stubs the packages timm imports but needs no model from.
if [ -x "$ROOT/.venv/bin/python" ] &&
  ! "$ROOT/.venv/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("timm") is None)' >/dev/null 2>&1; then
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no timm in .venv (RANZCR_OFFLINE=1 forbids pip): the timm parity test will be skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q --no-deps "${TIMM_PIP_SPEC:-timm==1.0.31}" > "$ROOT/.venv/pip-timm.log" 2>&1; then
    reference_missing "pip install timm failed (.venv/pip-timm.log)" "the timm parity test will be skipped"
  fi
fi

# OpenCV's Python package, for the PyTorch side of the benchmarks (scripts/bench/pytorch_reference.py, which
# decodes like a typical Python pipeline) and its test (tests/scripts/pytorch_reference_test.sh). --no-deps:
# numpy is already there (the tensorboard above brings it).
if [ -x "$ROOT/.venv/bin/python" ] && ! "$ROOT/.venv/bin/python" -c 'import cv2' >/dev/null 2>&1; then
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no cv2 in .venv (RANZCR_OFFLINE=1 forbids pip): the PyTorch reference's test will be skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q --no-deps "${OPENCV_PIP_SPEC:-opencv-python-headless==5.0.0.93}" > "$ROOT/.venv/pip-opencv.log" 2>&1; then
    reference_missing "pip install opencv-python-headless failed (.venv/pip-opencv.log)" "the PyTorch reference's test will be skipped"
  fi
fi

# Selenium, for the test that drives serve's web page in Chromium (tests/apps/serve_page_check.py; skipped
# without it or without Debian's chromium and chromium-driver). Pure Python, no torch.
if [ -x "$ROOT/.venv/bin/python" ] && ! "$ROOT/.venv/bin/python" -c 'import selenium' >/dev/null 2>&1; then
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no selenium in .venv (RANZCR_OFFLINE=1 forbids pip): the serve page's browser test will be skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q "${SELENIUM_PIP_SPEC:-selenium==4.51.0}" > "$ROOT/.venv/pip-selenium.log" 2>&1; then
    reference_missing "pip install selenium failed (.venv/pip-selenium.log)" "the serve page's browser test will be skipped"
  fi
fi

# tritonclient[http], the Open Inference Protocol's client from Triton, for the test that calls serve's /v2
# endpoints with it (tests/apps/serve_triton_check.py; skipped without, a failure under CI=true). No torch.
if [ -x "$ROOT/.venv/bin/python" ] && ! "$ROOT/.venv/bin/python" -c 'import tritonclient.http' >/dev/null 2>&1; then
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no tritonclient in .venv (RANZCR_OFFLINE=1 forbids pip): the Open Inference Protocol client test will be skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q "${TRITON_PIP_SPEC:-tritonclient[http]==2.73.0}" > "$ROOT/.venv/pip-triton.log" 2>&1; then
    reference_missing "pip install tritonclient[http] failed (.venv/pip-triton.log)" "the Open Inference Protocol client test will be skipped"
  fi
fi

# The real huggingface_hub client and safetensors, for the tests that share the Hugging Face cache with
# Python in both directions and serve timm's own save_for_hf output (tests/apps/pretrained_hub_test.cpp);
# skipped without. Neither pulls a torch.
if [ -x "$ROOT/.venv/bin/python" ] && ! "$ROOT/.venv/bin/python" -c 'import huggingface_hub, safetensors' >/dev/null 2>&1; then
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no huggingface_hub/safetensors in .venv (RANZCR_OFFLINE=1 forbids pip): the Hub cache interop tests will be skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q ${HUB_PIP_SPECS:-huggingface_hub==2.4.0 safetensors==0.8.0} \
    > "$ROOT/.venv/pip-hub.log" 2>&1; then
    reference_missing "pip install huggingface_hub/safetensors failed (.venv/pip-hub.log)" "the Hub cache interop tests will be skipped"
  fi
fi

# pydicom with its decoder plug-ins and scikit-learn, for the tests that check our DICOM decoding against
# pydicom's (tests/dicom/decode_test.cpp) and our ROC figures against scikit-learn's
# (tests/engine/report/roc_test.cpp); each skipped without. They pull numpy/scipy wheels, not a torch.
if [ -x "$ROOT/.venv/bin/python" ] &&
  ! "$ROOT/.venv/bin/python" -c 'import pydicom, pylibjpeg, openjpeg, libjpeg, rle, sklearn' >/dev/null 2>&1; then
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no pydicom/scikit-learn in .venv (RANZCR_OFFLINE=1 forbids pip): the pydicom and scikit-learn comparisons will be skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q ${REFERENCE_PIP_SPECS:-pydicom==3.0.2 pylibjpeg==2.1.0 pylibjpeg-libjpeg==2.5.0 pylibjpeg-openjpeg==2.6.0 pylibjpeg-rle==2.2.0 scikit-learn==1.9.1} \
    > "$ROOT/.venv/pip-reference.log" 2>&1; then
    reference_missing "pip install pydicom/scikit-learn failed (.venv/pip-reference.log)" "those comparisons will be skipped"
  fi
fi

# optional_pip IMPORTS LOG WHAT_IS_SKIPPED SPEC...: pip-installs SPEC into .venv unless `import IMPORTS` works
# there already; a failed or forbidden install is a note (an error under CI=true: reference_missing).
optional_pip() {
  local imports=$1 log=$2 skipped=$3
  shift 3
  [ -x "$ROOT/.venv/bin/python" ] || return 0
  "$ROOT/.venv/bin/python" -c "import $imports" >/dev/null 2>&1 && return 0
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no $imports in .venv (RANZCR_OFFLINE=1 forbids pip): $skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q "$@" > "$ROOT/.venv/$log" 2>&1; then
    reference_missing "pip install $* failed (.venv/$log)" "$skipped"
  fi
}
# OpenVINO: the wheel carries its C++ SDK (headers, libopenvino.so, OpenVINOConfig.cmake), which CMake finds
# beside torch in .venv's site-packages; without it LibTorch runs inference on the CPU. ONNX's and ONNX
# Runtime's Python packages: the references the exported graphs are checked against (tests/onnx/).
optional_pip openvino pip-openvino.log "the build runs inference with LibTorch only" \
  "${OPENVINO_PIP_SPEC:-openvino==2026.4.1}"
optional_pip "onnx, onnxruntime" pip-onnx.log "the ONNX export's reference checks will be skipped" \
  ${ONNX_PIP_SPECS:-onnx==1.23.2 onnxruntime==1.32.0}

# MLflow (server and Python client), for the tests that log runs to a real tracking server and read them back
# with MLflow's own client, and the UI's charts in Chromium (tests/apps/mlflow_cli_test.cpp,
# tests/tracking/mlflow_test.cpp); skipped without, a failure under CI=true. It pulls Flask, SQLAlchemy,
# pandas and pyarrow wheels, not a torch (3.18.0 lacks its mlflow-skinny on PyPI; 3.17.2 is pinned).
if [ -x "$ROOT/.venv/bin/python" ] && ! "$ROOT/.venv/bin/python" -c 'import mlflow' >/dev/null 2>&1; then
  if [ "${RANZCR_OFFLINE:-0}" = 1 ]; then
    say "no mlflow in .venv (RANZCR_OFFLINE=1 forbids pip): the MLflow tracking tests will be skipped"
  elif ! "$ROOT/.venv/bin/pip" install -q "${MLFLOW_PIP_SPEC:-mlflow==3.17.2}" > "$ROOT/.venv/pip-mlflow.log" 2>&1; then
    reference_missing "pip install mlflow failed (.venv/pip-mlflow.log)" "the MLflow tracking tests will be skipped"
  fi
fi

# 3. Configure (once) and build. With Debian's ccache installed (set-up installs it; RANZCR_CCACHE=0: not
#    used), it is the compiler launcher: its cache lives outside the clone (~/.cache/ccache) and is shared by
#    every clone, with paths taken relative to the clone (CCACHE_BASEDIR), and the sloppiness ccache's manual
#    asks for with precompiled headers (CMakeLists.txt adds the matching compiler flag). ccache hashes the
#    compiler, its flags and every header a file includes, so a changed recipe or dependency recompiles.
CCACHE_ARGS=()
if [ "${RANZCR_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  launcher="env;CCACHE_BASEDIR=$ROOT;CCACHE_NOHASHDIR=1;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;ccache"
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
