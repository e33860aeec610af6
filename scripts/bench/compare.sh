#!/usr/bin/env bash
# Training throughput of ranzcr against a PyTorch eager reference, on the same config and data.
#
#   scripts/bench/compare.sh --config FILE [--set key=value ...] [--steps N] [--warmup W] [--loader-steps L]
#                            [--out-dir DIR] [--reduced-decode] [--table-only]
#
# Runs `ranzcr bench` (binary: $RANZCR_BIN, default build/ranzcr) and then
# scripts/bench/pytorch_reference.py (python: $PYTHON, default .venv/bin/python if present, else python3)
# with the same --config/--set/--steps/--warmup/--loader-steps, one after the other (never at the same time, so neither
# steals the other's cores), and the reference on the device ranzcr used. Writes DIR/ours.json,
# DIR/pytorch.json and DIR/compare.md (DIR defaults to runs/bench) and prints a markdown table:
# metric | ranzcr | pytorch | ratio (ranzcr / pytorch) for the loader, compute and end-to-end figures.
#
#   --reduced-decode  the reference decodes JPEGs at 1/2, 1/4 or 1/8 scale as ranzcr does (like for like);
#                     without it, it decodes at full resolution as a typical Python pipeline does.
#   --table-only      print the table from DIR/ours.json and DIR/pytorch.json without running anything.
# Paths in the config (data.root) are relative to the current directory, as for ranzcr itself.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

usage() {
  sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}
die() {
  echo "compare.sh: $*" >&2
  exit 1
}

config="" out_dir="runs/bench" reduced=0 table_only=0
common=()  # arguments both implementations get
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help) usage 0 ;;
    --config | --set | --steps | --warmup | --loader-steps | --out-dir)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      opt=$1 val=$2
      shift 2
      ;;
    --config=* | --set=* | --steps=* | --warmup=* | --loader-steps=* | --out-dir=*)
      opt=${1%%=*} val=${1#*=}
      shift
      ;;
    --reduced-decode) reduced=1; shift; continue ;;
    --table-only) table_only=1; shift; continue ;;
    *) echo "compare.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
  case "$opt" in
    --config) config=$val; common+=(--config "$val") ;;
    --out-dir) out_dir=$val ;;
    --steps | --warmup | --loader-steps)
      [[ $val =~ ^[0-9]+$ ]] || die "$opt expects a whole number, got '$val'"
      common+=("$opt" "$val")
      ;;
    --set)
      [[ $val == *=* ]] || die "--set $val: expected key=value, for example --set train.batch_size=16"
      common+=(--set "$val")
      ;;
  esac
done

if [[ -n ${PYTHON:-} ]]; then
  python=$PYTHON
elif [[ -x $repo/.venv/bin/python ]]; then
  python=$repo/.venv/bin/python
else
  python=python3
fi
command -v "$python" > /dev/null 2>&1 || die "python '$python' not found (set PYTHON)"

ours=$out_dir/ours.json ref=$out_dir/pytorch.json

if [[ $table_only == 0 ]]; then
  [[ -n $config ]] || die "--config FILE is required (see --help)"
  [[ -f $config ]] || die "config file not found: $config"
  bin=${RANZCR_BIN:-$repo/build/ranzcr}
  [[ -x $bin ]] || die "ranzcr binary not found or not executable: $bin (build it, or set RANZCR_BIN)"
  commands=$("$bin" --help 2> /dev/null || true)
  grep -qE '^[[:space:]]+bench[[:space:]]' <<< "$commands" ||
    die "$bin has no 'bench' command (rebuild it, or set RANZCR_BIN)"
  if ! missing=$("$python" - 2> /dev/null << 'EOF'
import importlib.util
print(" ".join(m for m in ("torch", "cv2", "numpy", "yaml") if importlib.util.find_spec(m) is None))
EOF
  ); then
    die "cannot run $python"
  fi
  if [[ -n $missing ]]; then
    also=""
    [[ $missing == *torch* ]] && also=", and torch (see pytorch.org for the CUDA build)"
    die "$python lacks: $missing. Install with: $python -m pip install opencv-python-headless numpy pyyaml$also" \
      "(or set PYTHON to a python that has them)"
  fi
  mkdir -p "$out_dir"
  rm -f "$ours" "$ref"

  echo "== ranzcr: $bin bench ${common[*]}"
  "$bin" bench "${common[@]}" --out "$ours" || die "ranzcr bench failed (exit $?)"
  # The reference runs on the device ranzcr used (cpu or cuda), so the two figures are comparable.
  device=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["device"].split(":")[0])' "$ours")
  ref_args=("${common[@]}" --device "$device")
  [[ $reduced == 1 ]] && ref_args+=(--reduced-decode)
  echo
  echo "== pytorch: $python $here/pytorch_reference.py ${ref_args[*]}"
  "$python" "$here/pytorch_reference.py" "${ref_args[@]}" --out "$ref" || die "pytorch reference failed (exit $?)"
  echo
fi

[[ -f $ours ]] || die "no $ours (run without --table-only first)"
[[ -f $ref ]] || die "no $ref (run without --table-only first)"

"$python" - "$ours" "$ref" "$out_dir/compare.md" << 'EOF'
import json, sys

ours, ref = (json.load(open(p)) for p in sys.argv[1:3])
rows = [("loader (read, decode, augment, collate)", "loader_images_per_sec"),
        ("compute (forward, backward, step)", "compute_images_per_sec"),
        ("e2e (training step fed by the loader)", "e2e_images_per_sec")]


def fig(v):
    return "-" if v is None else f"{v:,.1f}"


lines = ["| metric (images/s) | ranzcr | pytorch | ratio (ranzcr / pytorch) |", "|---|---:|---:|---:|"]
for label, key in rows:
    a, b = ours.get(key), ref.get(key)
    ratio = f"{a / b:.2f}x" if a is not None and b else "-"
    lines.append(f"| {label} | {fig(a)} | {fig(b)} | {ratio} |")

def setting(k):
    return ours.get(k, ref.get(k))

cl = ", channels_last" if setting("channels_last") else ""
settings = (f"{setting('model')}, {setting('image_size')} px, batch {setting('batch_size')}, {setting('precision')}{cl}, "
            f"device {setting('device')}, {setting('threads')} threads, {setting('loader_workers')} loader workers, "
            f"{setting('steps')} steps after {setting('warmup')} warm-up; pytorch decode {ref.get('decode', '?')}, "
            f"model from {ref.get('model_source', '?')}; torch {ours.get('torch_version', '?')} (ranzcr) / "
            f"{ref.get('torch_version', '?')} (pytorch)")
lines += ["", "Settings: " + settings]
differ = [k for k in ("device", "model", "image_size", "batch_size", "precision", "channels_last", "threads",
                      "loader_workers", "steps", "warmup", "loader_steps") if k in ours and k in ref and ours[k] != ref[k]]
if differ:
    lines.append("")
    lines.append("**Warning: the runs differ in " + ", ".join(f"{k} ({ours[k]} vs {ref[k]})" for k in differ)
                 + "; the ratios compare unlike settings.**")
text = "\n".join(lines) + "\n"
print(text, end="")
with open(sys.argv[3], "w") as f:
    f.write(text)
EOF
echo
echo "wrote $ours, $ref, $out_dir/compare.md"
