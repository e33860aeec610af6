#!/usr/bin/env bash
# The GPU checks of one short device session, in the order that gives the most if time runs out: build every
# target on the offline host from the bundle, the CUDA, NCCL and sandbox tests, the DICOM quickstart on the GPU
# (every image through the sandboxed decoder), the whole test suite, then `ranzcr bench` beside the PyTorch
# reference (compare.sh). The whole check keeps to TOTAL_SECONDS (default 540): each step gets its own limit
# or what is left, whichever is less, and writes its log into OUT (default runs/device-check) at once; at most
# eight files, so that all of them come back from the device tool.
#   OUT=/tmp/out scripts/offline/device-check.sh
#   TOTAL_SECONDS=400 BUILD_SECONDS=300 scripts/offline/device-check.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/device-check}
mkdir -p "$OUT"
BUILD_DIR=${BUILD_DIR:-build-gpu}
BIN=$BUILD_DIR/ranzcr
t0=$(date +%s)
deadline=$((t0 + ${TOTAL_SECONDS:-540}))
step() { echo "=== $(date +%T) +$(($(date +%s) - t0)) s: $*" | tee -a "$OUT/summary.txt"; }
# limit N: N seconds, or what is left of the whole check if less (0 when nothing is left).
limit() {
  local left=$((deadline - $(date +%s)))
  ((left < 0)) && left=0
  echo $((left < $1 ? left : $1))
}

step "host"
{ nvidia-smi; nproc; free -g; c++ --version | head -n 1
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'; } \
  >"$OUT/host.txt" 2>&1

t=$(limit "${BUILD_SECONDS:-330}")
step "build every target (limit $t s)"
RANZCR_SKIP_TESTS=1 BUILD_DIR=$BUILD_DIR timeout "$t" scripts/offline/build-on-host.sh >"$OUT/build.log" 2>&1
step "build rc=$?"
[ -x "$BIN" ] || { tail -n 40 "$OUT/build.log"; exit 1; }
{ "$BIN" --version; ldd "$BUILD_DIR/ranzcr-dicom-decoder"; } >>"$OUT/host.txt" 2>&1

gpu_tests='Cuda|Nccl|World\.Gpu|Linking|UntrustedFiles|Dicom'
t=$(limit "${TEST_SECONDS:-100}")
step "CUDA, NCCL, DICOM and sandbox tests (limit $t s)"
timeout "$t" ctest --test-dir "$BUILD_DIR" -j "$(nproc)" --output-on-failure -R "$gpu_tests" >"$OUT/ctest-gpu.log" 2>&1
step "ctest rc=$? ($(grep -E 'tests passed|tests failed' "$OUT/ctest-gpu.log" | tail -n 1))"

t=$(limit "${QUICKSTART_SECONDS:-120}")
step "DICOM quickstart on CUDA, every image through ranzcr-dicom-decoder (limit $t s)"
dcm=(--set synth.format=dcm --set data.image_ext=.dcm --set data.root=datasets/synthetic-quickstart-dcm
  --set synth.root=datasets/synthetic-quickstart-dcm --set data.num_workers=8)
timeout "$t" "$BIN" train --config configs/quickstart.yaml --set train.device=cuda "${dcm[@]}" \
  --set output.dir=runs/device-quickstart-dcm >"$OUT/quickstart.log" 2>&1
step "quickstart rc=$? ($(grep -c . runs/device-quickstart-dcm/metrics.jsonl 2>/dev/null) epochs logged)"
{ echo "--- metrics.jsonl"; cat runs/device-quickstart-dcm/metrics.jsonl; } >>"$OUT/quickstart.log" 2>&1

t=$(limit "${SUITE_SECONDS:-130}")
step "the whole test suite except the above (limit $t s)"
timeout "$t" ctest --test-dir "$BUILD_DIR" -j "$(nproc)" --output-on-failure -E "$gpu_tests" --timeout 140 \
  >"$OUT/ctest-all.log" 2>&1
step "ctest rc=$? ($(grep -E 'tests passed|tests failed' "$OUT/ctest-all.log" | tail -n 1))"

t=$(limit "${BENCH_SECONDS:-150}")
step "bench: ranzcr beside PyTorch, resnet50 512 px batch 64 bf16 (limit $t s)"
RANZCR_BIN=$BIN PYTHON=python3 timeout "$t" scripts/bench/compare.sh --config configs/quickstart.yaml \
  --set model.name=resnet50 --set data.image_size=512 --set train.batch_size=64 --set train.precision=bf16 \
  --set data.num_workers=14 --steps 20 --warmup 5 --out-dir runs/device-bench >"$OUT/bench.log" 2>&1
step "bench rc=$?"
step "done"
