#!/usr/bin/env bash
# Builds everything (set-up included) and runs the GoogleTest suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "${CTEST_JOBS:-2}" "$@"
