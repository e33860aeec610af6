#!/usr/bin/env bash
# Loader throughput with data.cache against today's decode path and a PyTorch DataLoader over PNGs
# pre-resized to the cache size (the Kaggle practice), same config, workers and machine, one after the other.
#
#   scripts/bench/cache_compare.sh --config FILE --png-root DIR [--set key=value ...] [--loader-steps L]
#                                  [--warmup W] [--rounds R] [--out-dir DIR]
#
# FILE's data.root holds the source images; DIR is scripts/bench/pre_resize.py's copy of it at the cache
# size. Each round runs, in this order:
#   decode   ranzcr bench, data.cache off (every image read and decoded, today's path)
#   cache    ranzcr bench, data.cache on (the prepared images read through the memory map)
#   pytorch  scripts/bench/pytorch_reference.py on DIR (--set data.root=DIR data.image_ext=.png)
# each timing L loader batches after W warm-up ones (ranzcr bench's --steps and the reference's compute
# figure are 1 step: only the loader figure is compared). The same training rows are read in every run
# (same seed), so from the second round on every run reads its files from the page cache, as later epochs
# do; the first round is the warm-up (and, when data.cache has no file yet, builds it: its lines say how long
# that took). Writes DIR/<round>-<run>.json and prints a markdown table: round | decode | cache | pytorch
# (images per second) | cache / decode | cache / pytorch.
# Binary: $RANZCR_BIN (default build/ranzcr); python: $PYTHON (default .venv/bin/python, else python3).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
die() {
  echo "cache_compare.sh: $*" >&2
  exit 1
}

config="" png_root="" loader_steps=150 warmup=5 rounds=2 out_dir="runs/cache-compare"
sets=()
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || die "$1 needs a value"
  case "$1" in
    --config) config=$2 ;;
    --png-root) png_root=$2 ;;
    --set) sets+=(--set "$2") ;;
    --loader-steps) loader_steps=$2 ;;
    --warmup) warmup=$2 ;;
    --rounds) rounds=$2 ;;
    --out-dir) out_dir=$2 ;;
    *) die "unknown argument '$1' (see the top of this file)" ;;
  esac
  shift 2
done
[[ -n $config && -n $png_root ]] || die "--config and --png-root are required"
[[ -f $png_root/train.csv ]] || die "$png_root/train.csv not found (make it with scripts/bench/pre_resize.py)"
for n in "$loader_steps" "$warmup" "$rounds"; do [[ $n =~ ^[0-9]+$ ]] || die "expected a whole number, got '$n'"; done
((loader_steps >= 1 && rounds >= 1)) || die "--loader-steps and --rounds must be at least 1"
bin=${RANZCR_BIN:-$repo/build/ranzcr}
python=${PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x $repo/.venv/bin/python ]]; then python=$repo/.venv/bin/python; else python=python3; fi
fi
mkdir -p "$out_dir"
common=(--config "$config" ${sets[@]+"${sets[@]}"} --steps 1 --warmup "$warmup" --loader-steps "$loader_steps")

loader_of() { "$python" -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["loader_images_per_sec"], 1))' "$1"; }

rows=()
for ((r = 1; r <= rounds; r++)); do
  echo "cache_compare: round $r/$rounds: decode" >&2
  "$bin" bench "${common[@]}" --set data.cache=off --out "$out_dir/$r-decode.json" >&2
  echo "cache_compare: round $r/$rounds: cache" >&2
  "$bin" bench "${common[@]}" --set data.cache=on --out "$out_dir/$r-cache.json" >&2
  echo "cache_compare: round $r/$rounds: pytorch over $png_root" >&2
  "$python" "$here/pytorch_reference.py" "${common[@]}" --set "data.root=$png_root" --set data.image_ext=.png \
    --out "$out_dir/$r-pytorch.json" >&2
  d=$(loader_of "$out_dir/$r-decode.json") c=$(loader_of "$out_dir/$r-cache.json")
  p=$(loader_of "$out_dir/$r-pytorch.json")
  rows+=("| $r | $d | $c | $p | $("$python" -c "print(f'{$c / $d:.2f}x | {$c / $p:.2f}x')") |")
done
{
  echo "| round | decode (img/s) | cache (img/s) | pytorch over PNGs (img/s) | cache / decode | cache / pytorch |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out_dir/compare.md"
