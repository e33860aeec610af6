#!/usr/bin/env bash
# Builds and tests on the offline GPU host, with the dependencies of the bundle that
# scripts/offline/make-bundle.sh made on a networked machine, and LibTorch from the host's torch wheel.
# Never calls apt-get or pip: what is missing is an error.
#   scripts/offline/build-on-host.sh                      # build into build-gpu/, then ctest -j <cores>
#   scripts/offline/build-on-host.sh -R Cuda              # extra arguments go to ctest
#   BUILD_DIR=build-x PYTHON=/opt/torch/.venv/bin/python scripts/offline/build-on-host.sh
#   RANZCR_SKIP_TESTS=1 scripts/offline/build-on-host.sh  # build only
# What it assumes on the host: bash, tar with xz (or a python3 to unpack), a C++ compiler (g++ 12 or newer),
# cmake >= 3.18 and ninja; a python (PYTHON, default python3) with torch; for a CUDA build of torch, the CUDA
# toolkit (nvcc) that Torch's CMake config asks for: CUDAToolkit_ROOT, else CUDA_HOME, else the toolkit of
# the nvcc on PATH, else /usr/local/cuda; for a torch with NCCL, NCCL's nccl.h (CMake looks in NCCL_INCLUDE_DIR,
# NCCL_ROOT, NCCL_HOME, torch's nvidia-nccl wheel, the toolkit and the system; it says which it took).
# Everything else comes from the bundle, `serve`'s HTTP server (Boost.Beast and Asio's headers) included: the
# binary has every command.
# scripts/offline/rehearse-host.sh rehearses this build on a networked machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-build-gpu}
BUNDLE=${RANZCR_BUNDLE:-third_party/bundle}
TARBALL=${RANZCR_BUNDLE_TARBALL:-third_party/ranzcr-bundle.tar.xz}
say() { echo "build-on-host: $*" >&2; }
die() {
  echo "build-on-host: error: $*" >&2
  exit 1
}

# 1. What this host has.
command -v "$PYTHON" >/dev/null || die "no $PYTHON (set PYTHON to a python with torch)"
TORCH_INFO=$("$PYTHON" - 2>/dev/null <<'EOF'
import os, shlex, torch, torch.utils
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
except Exception:
    nccl = "none"
for k, v in dict(TORCH_VERSION=torch.__version__, TORCH_CUDA=torch.version.cuda or "", TORCH_NCCL=nccl,
                 TORCH_GPUS=torch.cuda.device_count() if torch.version.cuda else 0,
                 TORCH_PREFIX=torch.utils.cmake_prefix_path,
                 TORCH_SITE=os.path.dirname(os.path.dirname(torch.__file__))).items():
    print(f"{k}={shlex.quote(str(v))}")
EOF
) || die "$PYTHON cannot import torch (set PYTHON to a python with torch)"
eval "$TORCH_INFO"
say "torch $TORCH_VERSION (CUDA ${TORCH_CUDA:-none}, NCCL $TORCH_NCCL, $TORCH_GPUS GPUs visible) from $PYTHON"
for tool in cmake ninja c++; do
  command -v $tool >/dev/null || die "no $tool on PATH (this script installs nothing)"
done
say "$(c++ --version | head -n 1); cmake $(cmake --version | sed -n 's/cmake version //p'); ninja $(ninja --version)"
if command -v nvidia-smi >/dev/null; then
  say "GPUs: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | paste -sd ';')"
else
  say "no nvidia-smi: no NVIDIA driver here (CUDA tests will skip)"
fi

# 2. The CUDA toolkit, which Torch's CMake config needs when torch is a CUDA build.
CUDA_ARGS=""
if [ -n "$TORCH_CUDA" ]; then
  cuda_root=${CUDAToolkit_ROOT:-${CUDA_HOME:-}}
  if [ -z "$cuda_root" ] && command -v nvcc >/dev/null; then
    # nvcc may be a symbolic link or a wrapper script: ask nvcc where its toolkit is.
    cuda_root=$(nvcc -v --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n 1)
    [ -n "$cuda_root" ] && cuda_root=$(cd "$cuda_root" && pwd)
  fi
  [ -z "$cuda_root" ] && [ -x /usr/local/cuda/bin/nvcc ] && cuda_root=/usr/local/cuda
  [ -n "$cuda_root" ] && [ -x "$cuda_root/bin/nvcc" ] ||
    die "torch $TORCH_VERSION is a CUDA build and its CMake config needs the CUDA toolkit: no nvcc found (set CUDAToolkit_ROOT)"
  say "CUDA toolkit $cuda_root: $("$cuda_root/bin/nvcc" --version | sed -n 's/^Cuda compilation tools, //p')"
  export PATH="$cuda_root/bin:$PATH"
  # CUDAToolkit_ROOT for find_package(CUDAToolkit), CUDA_TOOLKIT_ROOT_DIR for the older find_package(CUDA)
  # that Torch's config also calls (it would otherwise start from the first nvcc on PATH).
  CUDA_ARGS="-DCUDAToolkit_ROOT=$cuda_root -DCUDA_TOOLKIT_ROOT_DIR=$cuda_root -DCMAKE_CUDA_COMPILER=$cuda_root/bin/nvcc"
  # A minimal toolkit (nvcc and the runtime only) has no libnvrtc, which Torch's config links: take the one
  # torch itself loads, from the nvidia-cuda-nvrtc wheel beside it.
  if [ -z "$(find "$cuda_root/lib64/" "$cuda_root/lib/" "$cuda_root"/targets/*/lib/ -maxdepth 1 -name 'libnvrtc.so*' 2>/dev/null | head -n 1)" ]; then
    nvrtc=$(find "$TORCH_SITE/nvidia" -name 'libnvrtc.so*' 2>/dev/null | sort | head -n 1)
    [ -n "$nvrtc" ] || die "no libnvrtc in the CUDA toolkit $cuda_root nor in torch's nvidia wheels"
    say "no libnvrtc in $cuda_root: using torch's $nvrtc"
    CUDA_ARGS="$CUDA_ARGS -DCUDA_nvrtc_LIBRARY=$nvrtc"
  fi
  # Nor the headers of the CUDA libraries (cuBLAS, cuSPARSE, ...) that ATen's CUDA headers include: add
  # those of torch's nvidia wheels, after every other include folder.
  if [ -z "$(find "$cuda_root/include/" "$cuda_root"/targets/*/include/ -maxdepth 1 -name cusparse.h 2>/dev/null | head -n 1)" ]; then
    incs=$(find "$TORCH_SITE/nvidia" -mindepth 2 -maxdepth 2 -type d -name include 2>/dev/null | sort | paste -sd ';')
    [ -n "$incs" ] || die "no cusparse.h in the CUDA toolkit $cuda_root nor in torch's nvidia wheels"
    say "no CUDA library headers in $cuda_root: using those of torch's nvidia wheels"
    CUDA_ARGS="$CUDA_ARGS -DCMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES=$incs"
  fi
fi

# 3. The bundle: unpack the tarball once.
if [ ! -f "$BUNDLE/MANIFEST" ]; then
  [ -f "$TARBALL" ] || die "no bundle: neither $BUNDLE/MANIFEST nor $TARBALL (make it with scripts/offline/make-bundle.sh on a networked machine)"
  say "unpacking $TARBALL into $(dirname "$BUNDLE")/"
  mkdir -p "$(dirname "$BUNDLE")"
  if command -v xz >/dev/null; then
    tar -C "$(dirname "$BUNDLE")" -xJf "$TARBALL"
  else
    "$PYTHON" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$TARBALL" "$(dirname "$BUNDLE")"
  fi
  [ -f "$BUNDLE/MANIFEST" ] || die "$TARBALL did not unpack into $BUNDLE"
fi
say "bundle: $(sed -n 's/^created: //p' "$BUNDLE/MANIFEST")"

# 4. Build with every core, then test.
JOBS=$(nproc)
say "building into $BUILD_DIR"
RANZCR_OFFLINE=1 RANZCR_BUNDLE="$BUNDLE" BUILD_DIR="$BUILD_DIR" Torch_DIR="$TORCH_PREFIX/Torch" \
  RANZCR_CMAKE_ARGS="$CUDA_ARGS ${RANZCR_CMAKE_ARGS:-}" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS scripts/setup.sh
nccl_dir=$(sed -n 's/^RANZCR_NCCL_INCLUDE_DIR:PATH=//p' "$BUILD_DIR/CMakeCache.txt")
[ -n "$nccl_dir" ] && say "nccl.h from $nccl_dir"
# serve (its HTTP server is Boost.Beast on Asio, header-only, from the bundle)
serve=$(sed -n 's/^RANZCR_WITH_SERVE:BOOL=//p' "$BUILD_DIR/CMakeCache.txt")
beast=$(sed -n 's/^BOOST_BEAST_INCLUDE_DIR:PATH=//p' "$BUILD_DIR/CMakeCache.txt")
say "serve: ${serve:-?}${beast:+ (Boost.Beast from $beast)}"
[ "${RANZCR_SKIP_TESTS:-0}" = 1 ] && exit 0
say "ctest -j $JOBS $*"
ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure "$@"
