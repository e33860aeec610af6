#!/usr/bin/env bash
# Training throughput of ranzcr against a PyTorch eager reference, on the same config and data.
#
#   scripts/bench/compare.sh --config FILE [--set key=value ...] [--steps N] [--warmup W] [--loader-steps L]
#                            [--out-dir DIR] [--repeats R] [--no-compile] [--profile] [--reduced-decode]
#                            [--table-only]
#
# Runs `ranzcr bench` (binary: $RANZCR_BIN, default build/ranzcr) and scripts/bench/pytorch_reference.py
# (python: $PYTHON, default .venv/bin/python if present, else python3) with the same --config/--set/--steps/
# --warmup/--loader-steps, alternating, R times each (default 3): ranzcr, pytorch, pytorch --compile, ranzcr,
# pytorch, ... never two at the same time, so neither steals the other's cores. The reference runs on the
# device ranzcr used and with ranzcr's intra-op thread count ("threads" of its JSON, given as --threads).
# Each run writes its JSON: DIR/ours-K.json, DIR/pytorch-K.json, DIR/pytorch-compile-K.json (DIR defaults
# to runs/bench); DIR/ours.json, DIR/pytorch.json and DIR/pytorch-compile.json are the summaries (the first
# run's settings, each figure the median of the runs, "repeats" and "runs" the values). Prints, and writes
# to DIR/compare.md, a markdown table: for the loader, compute and end-to-end figures the median and the
# spread (min-max) of each side, the ratio of the medians (ranzcr / pytorch), and a "pytorch compile"
# column for compute (torch.compile, default mode; reported, not a goal). The settings, the reference's
# model source and the torch, cuDNN, cuBLAS and NCCL versions each process loaded are listed below it; a
# difference between the two sides is a bold warning there and on stderr.
#
#   --repeats R       runs of each side (default 3).
#   --no-compile      no torch.compile runs (compiling takes minutes on a CPU, tens of seconds on a GPU).
#   --profile         the first run of ranzcr and of the eager reference also profiles its compute steps (the
#                     reference 2 + 5), after its compute figure is timed (so a run cut short by a time limit
#                     still has them): DIR/profile-ranzcr/ and DIR/profile-pytorch/
#                     (trace.json for Perfetto, kernels.json, kernels.md); DIR/profile.md and stdout get the
#                     two top-kernel tables side by side (rank, name, total ms, share), with each side's host
#                     (cpu_ms_per_step: until queued) and device (device_ms_per_step) milliseconds per step.
#   --reduced-decode  the reference decodes JPEGs at 1/2, 1/4 or 1/8 scale as ranzcr does (like for like);
#                     without it, it decodes at full resolution as a typical Python pipeline does.
#   --table-only      run nothing: the tables from the JSON files already in DIR (every ours-K/pytorch-K/
#                     pytorch-compile-K.json, or ours.json and pytorch.json alone from an older run, and the
#                     profile-*/kernels.json when present).
# Paths in the config (data.root) are relative to the current directory, as for ranzcr itself.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
  exit "${1:-0}"
}
die() {
  echo "compare.sh: $*" >&2
  exit 1
}

config="" out_dir="runs/bench" reduced=0 table_only=0 repeats=3 compile=1 profile=0
common=()  # arguments both implementations get
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h | --help) usage 0 ;;
    --config | --set | --steps | --warmup | --loader-steps | --out-dir | --repeats)
      [[ $# -ge 2 ]] || die "$1 needs a value"
      opt=$1 val=$2
      shift 2
      ;;
    --config=* | --set=* | --steps=* | --warmup=* | --loader-steps=* | --out-dir=* | --repeats=*)
      opt=${1%%=*} val=${1#*=}
      shift
      ;;
    --reduced-decode) reduced=1; shift; continue ;;
    --table-only) table_only=1; shift; continue ;;
    --no-compile) compile=0; shift; continue ;;
    --profile) profile=1; shift; continue ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  case "$opt" in
    --config) config=$val; common+=(--config "$val") ;;
    --out-dir) out_dir=$val ;;
    --repeats)
      [[ $val =~ ^[1-9][0-9]*$ ]] || die "--repeats expects a whole number >= 1, got '$val'"
      repeats=$val
      ;;
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
  ours_profile=0
  if [[ $profile == 1 ]]; then
    if "$bin" bench --help 2> /dev/null | grep -q -- '--profile'; then
      ours_profile=1
    else
      echo "compare.sh: warning: $bin bench has no --profile: only the reference is profiled" >&2
    fi
  fi
  mkdir -p "$out_dir"
  rm -rf "$out_dir"/ours*.json "$out_dir"/pytorch*.json "$out_dir/compare.md" "$out_dir/profile.md" \
    "$out_dir/profile-ranzcr" "$out_dir/profile-pytorch"

  json_field() { "$python" -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$1" "$2"; }
  ref_args=()
  for ((k = 1; k <= repeats; k++)); do
    ours_args=("${common[@]}" --out "$out_dir/ours-$k.json")
    [[ $k == 1 && $ours_profile == 1 ]] && ours_args+=(--profile "$out_dir/profile-ranzcr")
    echo "== [$k/$repeats] ranzcr: $bin bench ${ours_args[*]}"
    "$bin" bench "${ours_args[@]}" || die "ranzcr bench failed (exit $?)"
    if [[ $k == 1 ]]; then
      # The reference runs on the device ranzcr used (cpu or cuda) and with as many intra-op threads.
      device=$(json_field "$out_dir/ours-1.json" device)
      threads=$(json_field "$out_dir/ours-1.json" threads)
      ref_args=("${common[@]}" --device "${device%%:*}")
      [[ $threads =~ ^[1-9][0-9]*$ ]] && ref_args+=(--threads "$threads")
      [[ $reduced == 1 ]] && ref_args+=(--reduced-decode)
    fi
    args=("${ref_args[@]}" --out "$out_dir/pytorch-$k.json")
    [[ $k == 1 && $profile == 1 ]] && args+=(--profile "$out_dir/profile-pytorch")
    echo
    echo "== [$k/$repeats] pytorch: $python $here/pytorch_reference.py ${args[*]}"
    "$python" "$here/pytorch_reference.py" "${args[@]}" || die "pytorch reference failed (exit $?)"
    if [[ $compile == 1 ]]; then
      args=("${ref_args[@]}" --compile --out "$out_dir/pytorch-compile-$k.json")
      echo
      echo "== [$k/$repeats] pytorch, torch.compile: $python $here/pytorch_reference.py ${args[*]}"
      if ! "$python" "$here/pytorch_reference.py" "${args[@]}"; then
        echo "compare.sh: warning: the torch.compile reference failed; no compile column from here on" >&2
        compile=0
      fi
    fi
    echo
  done
fi

[[ -d $out_dir ]] || die "no folder $out_dir (run without --table-only first)"
"$python" - "$out_dir" << 'EOF'
import glob, json, os, re, statistics, sys

out = sys.argv[1]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"compare.sh: cannot read {path}: {e}")


def runs_of(prefix):
    """The per-run files DIR/<prefix>-K.json in K order, else DIR/<prefix>.json alone (an older run)."""
    pattern = re.compile(re.escape(prefix) + r"-(\d+)\.json")
    numbered = [(pattern.fullmatch(os.path.basename(p)), p) for p in glob.glob(os.path.join(out, prefix + "-*.json"))]
    files = sorted((p for m, p in numbered if m), key=lambda p: int(pattern.fullmatch(os.path.basename(p)).group(1)))
    if files:
        return [load(p) for p in files], True
    single = os.path.join(out, prefix + ".json")
    return ([load(single)] if os.path.isfile(single) else []), False


FIGS = [("loader (read, decode, augment, collate)", "loader_images_per_sec"),
        ("compute (forward, backward, step)", "compute_images_per_sec"),
        ("e2e (training step fed by the loader)", "e2e_images_per_sec")]
sides = {name: runs_of(name) for name in ("ours", "pytorch", "pytorch-compile")}
ours, ref, comp = (sides[n][0] for n in ("ours", "pytorch", "pytorch-compile"))
if not ours or not ref:
    missing = [f"{out}/{n}-K.json" for n, r in (("ours", ours), ("pytorch", ref)) if not r]
    sys.exit(f"compare.sh: no {' or '.join(missing)} (run without --table-only first)")


def values(runs, key):
    return [r[key] for r in runs if r.get(key) is not None]


def summary(runs):
    """The first run's settings, each figure the median of the runs, plus "repeats" and "runs"."""
    s = dict(runs[0])
    s["repeats"] = len(runs)
    s["runs"] = {key: [r.get(key) for r in runs] for _, key in FIGS}
    for _, key in FIGS:
        v = values(runs, key)
        s[key] = round(statistics.median(v), 2) if v else None
    return s


for name, (runs, per_run) in sides.items():
    if runs and per_run:  # the summaries existing readers of ours.json / pytorch.json find
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(summary(runs), f, indent=2)
            f.write("\n")


def cell(runs, key):
    v = values(runs, key)
    if not v:
        return "-"
    m = statistics.median(v)
    return f"{m:,.1f}" + (f" ({min(v):,.1f}–{max(v):,.1f})" if len(v) > 1 else "")


def median(runs, key):
    v = values(runs, key)
    return statistics.median(v) if v else None


n = lambda runs: f"{len(runs)} run" + ("s" if len(runs) != 1 else "")
lines = [f"| metric (images/s): median (min–max) | ranzcr, {n(ours)} | pytorch, {n(ref)} | ratio of medians (ranzcr / pytorch) "
         f"| pytorch compile, {n(comp)} |", "|---|---:|---:|---:|---:|"]
for label, key in FIGS:
    a, b = median(ours, key), median(ref, key)
    ratio = f"{a / b:.2f}x" if a is not None and b else "-"
    lines.append(f"| {label} | {cell(ours, key)} | {cell(ref, key)} | {ratio} | "
                 f"{cell(comp, key) if key == 'compute_images_per_sec' else ''} |")
ca, cc = median(ours, "compute_images_per_sec"), median(comp, "compute_images_per_sec")
if ca is not None and cc:
    secs = values(comp, "compile_seconds")
    lines += ["", f"ranzcr / pytorch compile (compute, medians): {ca / cc:.2f}x (torch.compile, default mode: "
              "reported, not a goal)" + (f"; first step (compilation) of each run: {', '.join(f'{x:.1f}' for x in secs)} s"
                                         " (later runs hit Inductor's cache)" if secs else "")]
elif not comp:
    lines += ["", "pytorch compile: not run (--no-compile, or it failed)"]

o, r = ours[0], ref[0]


def setting(d, k):
    return d.get(k, "?")


def versions(d):
    v = dict(d.get("versions") or {})
    v.setdefault("torch", d.get("torch_version"))
    return v


def settings_line(d):
    cl = ", channels_last" if d.get("channels_last") else ""
    return (f"{setting(d, 'model')}, {setting(d, 'image_size')} px, batch {setting(d, 'batch_size')}, "
            f"{setting(d, 'precision')}{cl}, device {setting(d, 'device')}, {setting(d, 'threads')} threads, "
            f"{setting(d, 'loader_workers')} loader workers, {setting(d, 'steps')} steps after {setting(d, 'warmup')} warm-up")


def versions_line(d):
    v = versions(d)
    return ", ".join(f"{k} {v.get(k) or '-'}" for k in ("torch", "cudnn", "cublas", "nccl"))


lines += ["", "Settings:", f"- ranzcr: {settings_line(o)}", f"- pytorch: {settings_line(r)}; decode "
          f"{r.get('decode', '?')}, model from {r.get('model_source', '?')}"]
if comp:
    lines.append(f"- pytorch compile: {settings_line(comp[0])}; model from {comp[0].get('model_source', '?')}")
lines += ["", "Libraries loaded:", f"- ranzcr: {versions_line(o)}", f"- pytorch: {versions_line(r)}"]

warnings = []
keys = ("device", "model", "image_size", "batch_size", "precision", "channels_last", "threads", "loader_workers",
        "steps", "warmup", "loader_steps")
for other, what in ((r, "pytorch"), (comp[0] if comp else None, "pytorch compile")):
    if other is None:
        continue
    skip = ("loader_steps", "warmup") if what == "pytorch compile" else ()  # compute only; warm-up >= 2 there
    differ = [k for k in keys if k not in skip and k in o and k in other and o[k] != other[k]]
    if differ:
        warnings.append(f"ranzcr and {what} differ in " + ", ".join(f"{k} ({o[k]} vs {other[k]})" for k in differ)
                        + "; the ratios compare unlike settings")
vo, vr = versions(o), versions(r)
cuda = str(o.get("device", "")).startswith("cuda")


def same(k):  # torch: LibTorch's version has no local part ("2.13.0"), the wheel's has ("2.13.0+cpu")
    a, b = vo.get(k), vr.get(k)
    return a == b or (k == "torch" and a and b and a.split("+")[0] == b.split("+")[0])


vdiff = [k for k in ("torch", "cudnn", "cublas", "nccl")
         if not same(k) and (cuda or k == "torch" or (vo.get(k) and vr.get(k)))]
if vdiff:
    warnings.append("the two processes loaded different libraries: " + ", ".join(
        f"{k} {vo.get(k) or 'none'} (ranzcr) vs {vr.get(k) or 'none'} (pytorch)" for k in vdiff))
if "versions" not in o:
    warnings.append("ranzcr's JSON has no \"versions\" (an older ranzcr bench): the libraries it loaded are unknown")
for side, runs in (("ranzcr", ours), ("pytorch", ref), ("pytorch compile", comp)):
    varying = [k for k in keys if len({json.dumps(x.get(k)) for x in runs}) > 1]
    if varying:
        warnings.append(f"the {side} runs differ among themselves in {', '.join(varying)}")
for w in warnings:
    lines += ["", f"**Warning: {w}.**"]
    print(f"compare.sh: warning: {w}", file=sys.stderr)

text = "\n".join(lines) + "\n"
print(text, end="")
with open(os.path.join(out, "compare.md"), "w") as f:
    f.write(text)

# ---- the profiles, side by side
profiles = {side: os.path.join(out, f"profile-{side}", "kernels.json") for side in ("ranzcr", "pytorch")}
have = {side: load(p) for side, p in profiles.items() if os.path.isfile(p)}
if have:
    def short(name, width=60):
        name = name.replace("|", "/").replace("`", "'")
        return name if len(name) <= width else name[:width - 1] + "…"

    plines = ["", "Top kernels (the first run of each side, profiled after its compute figure was timed):", ""]
    for side in ("ranzcr", "pytorch"):
        p = have.get(side)
        if p is None:
            plines.append(f"- {side}: no profile ({profiles[side]} absent)")
        else:
            wall = f", wall_ms_per_step {p['wall_ms_per_step']:.2f}" if p.get("wall_ms_per_step") is not None else ""
            plines.append(f"- {side} ({p.get('implementation')}, {p.get('device')}): {p.get('steps')} steps, "
                          f"cpu_ms_per_step {p.get('cpu_ms_per_step', 0):.2f}{wall}, device_ms_per_step "
                          f"{p.get('device_ms_per_step', 0):.2f} ({p.get('kernel_source')})")
    if len({p.get("kernel_source") for p in have.values()}) > 1 or len({p.get("steps") for p in have.values()}) > 1:
        plines += ["", "**Warning: the profiles count different things (kernel source or steps differ): compare the "
                   "shares, not the milliseconds.**"]
    plines += ["", "| rank | ranzcr kernel | total ms | share | pytorch kernel | total ms | share |",
               "|---:|---|---:|---:|---|---:|---:|"]
    ka, kb = (have.get(s, {}).get("kernels", []) for s in ("ranzcr", "pytorch"))
    for i in range(max(len(ka), len(kb))):
        row = [str(i + 1)]
        for ks in (ka, kb):
            if i < len(ks):
                k = ks[i]
                row += [f"`{short(k['name'])}`", f"{k['total_ms']:.2f}", f"{100 * k['share']:.1f}%"]
            else:
                row += ["", "", ""]
        plines.append("| " + " | ".join(row) + " |")
    ptext = "\n".join(plines) + "\n"
    print(ptext, end="")
    with open(os.path.join(out, "profile.md"), "w") as f:
        f.write(ptext.lstrip("\n"))
EOF
written="$out_dir/compare.md"
[[ -f $out_dir/profile.md ]] && written+=", $out_dir/profile.md"
echo
echo "wrote $written (the runs: $out_dir/ours-K.json, pytorch-K.json, pytorch-compile-K.json; summaries: ours.json, pytorch.json)"
