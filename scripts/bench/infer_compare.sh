#!/usr/bin/env bash
# Inference throughput of ranzcr (each backend) beside the usual CPU runtimes, on the same network and threads.
#
#   scripts/bench/infer_compare.sh --config FILE [--set key=value ...] [--steps N] [--warmup W] [--repeats R]
#                                  [--out-dir DIR] [--no-compile] [--runtimes "eager onnxruntime ..."]
#
# Alternates, R times (default 3), never two at once: `ranzcr bench --infer` under infer.backend libtorch and
# under the default (OpenVINO, this CPU's own precision; also f32 where the CPU has bf16), then
# scripts/bench/infer_reference.py's runtimes on the same model, input size, channels, batch and threads:
# PyTorch eager fp32, eager bf16 channels_last, torch.compile (freezing, bf16; not with --no-compile), ONNX
# Runtime and OpenVINO (its default precision, and f32) on ranzcr's own ONNX graph (bench --infer --onnx). Each
# run's JSON lands in DIR (default runs/bench-infer); DIR/compare.md gets one table: per runtime the median
# images/s of the model alone with its spread (min-max), ranzcr's end to end (files to logits, as predict) and
# loader figures, and each median's ratio to OpenVINO's own model-only figure. The CPU's model and flags head it.
# --runtimes picks the reference runtimes (default: all of them; OpenVINO's own is always run, the ratios' base).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${RANZCR_BIN:-build/ranzcr}
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
CONFIG="" SETS=() STEPS=10 WARMUP=2 REPEATS=3 DIR=runs/bench-infer COMPILE=1 PICKED=""
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --out-dir) DIR=$2; shift 2 ;;
    --no-compile) COMPILE=0; shift ;;
    --runtimes) PICKED=$2; shift 2 ;;
    *) echo "error: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$CONFIG" ] || { echo "error: --config FILE is required" >&2; exit 2; }
mkdir -p "$DIR"
ours() { # ours NAME [--set ...]: one bench --infer run into DIR/NAME-K.json
  local name=$1 k=$2; shift 2
  "$BIN" bench --infer --config "$CONFIG" "${SETS[@]}" "$@" --steps "$STEPS" --warmup "$WARMUP" \
    --out "$DIR/$name-$k.json" > "$DIR/$name-$k.log" 2>&1 || echo "warning: $name run $k failed ($DIR/$name-$k.log)" >&2
}
"$BIN" bench --infer --config "$CONFIG" "${SETS[@]}" --steps 1 --warmup 0 --onnx "$DIR/model.onnx" \
  --out "$DIR/settings.json" > "$DIR/settings.log" 2>&1 || { cat "$DIR/settings.log" >&2; exit 1; }
read -r MODEL SIZE BATCH THREADS BACKEND CHANNELS < <("$PY" -c "
import json, os; j = json.load(open('$DIR/settings.json'))
print(j['model'], j['image_size'], j['batch_size'], j['threads'] or os.cpu_count(), j['backend'].replace(' ', '_'),
      j['in_channels'])")
RUNTIMES="eager eager-bf16 onnxruntime openvino openvino-f32"
[ "$COMPILE" = 1 ] && RUNTIMES="eager eager-bf16 compile-bf16 onnxruntime openvino openvino-f32"
if [ -n "$PICKED" ]; then
  RUNTIMES="openvino"
  for r in $PICKED; do [ "$r" = openvino ] || RUNTIMES="$RUNTIMES $r"; done
fi
for k in $(seq 1 "$REPEATS"); do
  ours ranzcr-libtorch "$k" --set infer.backend=libtorch
  ours ranzcr-openvino "$k"
  case "$BACKEND" in *bf16*) ours ranzcr-openvino-f32 "$k" --set infer.precision=fp32 ;; esac
  for r in $RUNTIMES; do
    "$PY" scripts/bench/infer_reference.py --runtime "$r" --model "$MODEL" --size "$SIZE" --channels "$CHANNELS" \
      --batch "$BATCH" --threads "$THREADS" --onnx "$DIR/model.onnx" --steps "$STEPS" --warmup "$WARMUP" \
      --out "$DIR/$r-$k.json" > "$DIR/$r-$k.log" 2>&1 || echo "warning: $r run $k failed ($DIR/$r-$k.log)" >&2
  done
done
CPU="$(lscpu | sed -n 's/^Model name: *//p' | head -1); flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16|amx_tile|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
"$PY" - "$DIR" "$REPEATS" "$CPU" <<'PY'
import glob, json, os, statistics, sys
d, repeats, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def runs(name, key):
    vals = []
    for f in sorted(glob.glob(os.path.join(d, f"{name}-[0-9]*.json"))):
        j = json.load(open(f))
        if key in j: vals.append(j[key])
    return vals
def cell(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-"
s = json.load(open(os.path.join(d, "settings.json")))
rows = [("ranzcr, libtorch", "ranzcr-libtorch", True), (f"ranzcr, default ({s['backend']})", "ranzcr-openvino", True),
        ("ranzcr, openvino f32", "ranzcr-openvino-f32", True), ("PyTorch eager fp32", "eager", False),
        ("PyTorch eager bf16 channels_last", "eager-bf16", False), ("torch.compile bf16 (freezing)", "compile-bf16", False),
        ("ONNX Runtime (ranzcr's graph)", "onnxruntime", False), ("OpenVINO, its default (ranzcr's graph)", "openvino", False),
        ("OpenVINO f32 (ranzcr's graph)", "openvino-f32", False)]
ov = runs("openvino", "images_per_sec")
base = statistics.median(ov) if ov else None
out = [f"{s['model']} at {s['image_size']} px, batch {s['batch_size']}, {s['threads'] or os.cpu_count()} threads, "
       f"{repeats} alternated runs; CPU: {cpu}", "",
       "| runtime | model alone, images/s (min-max) | ratio to OpenVINO's own | e2e files to logits | loader |",
       "|---|---:|---:|---:|---:|"]
for label, name, ours in rows:
    m = runs(name, "compute_images_per_sec" if ours else "images_per_sec")
    if not m: continue
    e2e = runs(name, "e2e_images_per_sec") if ours else []
    ratio = f"{statistics.median(m) / base:.2f}x" if base else "-"
    if ours and base and e2e: ratio += f" (e2e {statistics.median(e2e) / base:.2f}x)"
    out.append(f"| {label} | {cell(m)} | {ratio} | {cell(e2e)} | {cell(runs(name, 'loader_images_per_sec')) if ours else '-'} |")
text = "\n".join(out) + "\n"
open(os.path.join(d, "compare.md"), "w").write(text)
print(text)
PY
