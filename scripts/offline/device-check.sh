#!/usr/bin/env bash
# The GPU checks of one short device session, in the order that gives the most if time runs out: build on
# the offline host from the bundle (the binary and the test suites with CUDA tests only), the CUDA and
# NCCL tests, the quickstart on the GPU, then `ranzcr bench` beside the PyTorch reference (compare.sh).
# Each step has its own time limit and writes its log into OUT (default runs/device-check) at once.
#   OUT=/tmp/out scripts/offline/device-check.sh
#   BUILD_SECONDS=300 QUICKSTART_SECONDS=90 BENCH_SECONDS=150 scripts/offline/device-check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/device-check}
mkdir -p "$OUT"
BIN=build-gpu/ranzcr
step() { echo "=== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }
t0=$(date +%s)

step "host"
{ nvidia-smi; nproc; free -g; python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'; } \
  >"$OUT/host.txt" 2>&1

step "build (limit ${BUILD_SECONDS:-330} s)"
RANZCR_SKIP_TESTS=1 RANZCR_BUILD_TARGET="ranzcr engine_tests distributed_tests" \
  timeout "${BUILD_SECONDS:-330}" scripts/offline/build-on-host.sh >"$OUT/build.log" 2>&1
rc=$?
step "build rc=$rc after $(($(date +%s) - t0)) s"
[ -x "$BIN" ] || { tail -n 40 "$OUT/build.log"; exit 1; }
"$BIN" --version >"$OUT/version.txt" 2>&1

step "CUDA and NCCL tests"
timeout "${TEST_SECONDS:-90}" ctest --test-dir build-gpu -j 4 --output-on-failure -R 'Cuda|Nccl|World\.Gpu' \
  >"$OUT/ctest-gpu.log" 2>&1
step "ctest rc=$? ($(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -n 1))"

step "quickstart on CUDA (limit ${QUICKSTART_SECONDS:-90} s)"
timeout "${QUICKSTART_SECONDS:-90}" "$BIN" train --config configs/quickstart.yaml --set train.device=cuda \
  --set output.dir=runs/device-quickstart >"$OUT/quickstart.log" 2>&1
step "quickstart rc=$?"
cp runs/device-quickstart/metrics.jsonl "$OUT/quickstart-metrics.jsonl" 2>/dev/null

step "bench: ranzcr beside PyTorch, resnet50 512 px batch 64 bf16 (limit ${BENCH_SECONDS:-150} s)"
RANZCR_BIN=$BIN PYTHON=python3 timeout "${BENCH_SECONDS:-150}" scripts/bench/compare.sh --config configs/quickstart.yaml \
  --set model.name=resnet50 --set data.image_size=512 --set train.batch_size=64 --set train.precision=bf16 \
  --set data.num_workers=14 --steps 20 --warmup 5 --out-dir "$OUT/bench-resnet50" >"$OUT/bench-resnet50.log" 2>&1
step "bench rc=$?"
step "done after $(($(date +%s) - t0)) s"
