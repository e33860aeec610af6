#!/usr/bin/env bash
# Builds everything (set-up included) and runs the GoogleTest suite with ctest, in BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "${CTEST_JOBS:-2}" "$@"
