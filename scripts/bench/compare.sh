#!/usr/bin/env bash
# Training throughput of ranzcr against a PyTorch eager reference, on the same config and data.
#
#   scripts/bench/compare.sh --config FILE [--set key=value ...] [--steps N] [--warmup W] [--loader-steps L]
#                            [--out-dir DIR] [--repeats R] [--no-compile] [--no-plain] [--profile]
#                            [--reduced-decode] [--append] [--table-only]
#
# Runs `ranzcr bench` (binary: $RANZCR_BIN, default build/ranzcr) and scripts/bench/pytorch_reference.py
# (python: $PYTHON, default .venv/bin/python if present, else python3) with the same --config/--set/--steps/
# --warmup/--loader-steps, alternating, R times each (default 3): ranzcr, pytorch, pytorch --plain, pytorch
# --compile, ranzcr, pytorch, ... never two at the same time, so none steals another's cores. Two references:
# "pytorch" does ranzcr's own pipeline in Python (decode, resize, rotate/zoom/shift warp, flip, contrast), like
# for like; "pytorch plain" is an ordinary user script (pytorch_reference.py --plain: full-size cv2.imread, one
# INTER_AREA resize, hflip). The reference runs on the
# device ranzcr used and with ranzcr's intra-op thread count ("threads" of its JSON, given as --threads).
# A run that fails is a warning, and the comparison goes on with the runs that did not: each side writes its
# figures' JSON before it profiles, so a run whose profile failed still counts.
# Each run writes its JSON: DIR/ours-K.json, DIR/pytorch-K.json, DIR/pytorch-plain-K.json,
# DIR/pytorch-compile-K.json (DIR defaults to runs/bench); DIR/ours.json, DIR/pytorch.json,
# DIR/pytorch-plain.json and DIR/pytorch-compile.json are the summaries (the first run's settings, each figure
# the median of the runs, "repeats" and "runs" the values). Prints, and writes to DIR/compare.md, a markdown
# table: for the loader, compute and end-to-end figures the median and the spread (min-max) of each side, the
# ratio of the medians to each reference (ranzcr / pytorch, ranzcr / pytorch plain), and a "pytorch compile"
# column for compute (torch.compile, default mode; reported, not a goal); a fourth row, "share of own bound",
# is each run's e2e over the rate its own loader and compute figures allow when they share the machine,
# 1 / (1/loader + 1/compute): how little the two lose to each other (median and spread of the runs). The settings, the reference's
# model source and the torch, cuDNN, cuBLAS and NCCL versions each process loaded are listed below it; a
# difference between the two sides is a bold warning there and on stderr.
#
#   --repeats R       runs of each side (default 3).
#   --no-compile      no torch.compile runs (compiling takes minutes on a CPU, tens of seconds on a GPU).
#   --no-plain        no runs of the plain reference.
#   --profile         the first run of ranzcr and of the eager reference also profiles its compute steps, the
#                     same way on both sides: after all three of its figures are timed and written (so a
#                     profile that fails or is cut short by a time limit costs no figure), on the fixed batch
#                     with the loader stopped, 2 warm-up steps with the profiler prepared, then 5 recorded:
#                     DIR/profile-ranzcr/ and DIR/profile-pytorch/ (trace.json for Perfetto, kernels.json,
#                     kernels.md; each side reads its table from its own trace, annotations such as
#                     ProfilerStep#N and Optimizer.step#... not counted). DIR/profile.md and stdout get the
#                     two top-kernel tables side by side (rank, full name, total ms, share), with each side's
#                     host (cpu_ms_per_step: until queued) and device (device_ms_per_step) milliseconds per
#                     step; DIR/profile-summary.md and .json the top 20 device kernels of each side with the
#                     memory layout (NHWC, NCHW) of the convolution inputs each served, read from the traces
#                     by scripts/bench/kineto_trace.py (the files a short GPU session takes home).
#   --append          keep the runs already in DIR and number the new ones after them (a second pair of runs
#                     into the same table; "the first run" above is this call's first).
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

config="" out_dir="runs/bench" reduced=0 table_only=0 repeats=3 compile=1 plain=1 profile=0 append=0
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
    --append) append=1; shift; continue ;;
    --table-only) table_only=1; shift; continue ;;
    --no-compile) compile=0; shift; continue ;;
    --no-plain) plain=0; shift; continue ;;
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
  first=1  # the number of this call's first run
  if [[ $append == 1 ]]; then
    for f in "$out_dir"/ours-*.json "$out_dir"/pytorch-*.json; do
      k=${f##*-}
      k=${k%.json}
      [[ $k =~ ^[0-9]+$ ]] && ((k >= first)) && first=$((k + 1))
    done
  fi
  if [[ $append == 0 || $profile == 1 ]]; then
    rm -rf "$out_dir/profile.md" "$out_dir/profile-summary.md" "$out_dir/profile-summary.json" \
      "$out_dir/profile-ranzcr" "$out_dir/profile-pytorch"
  fi
  [[ $append == 1 ]] || rm -rf "$out_dir"/ours*.json "$out_dir"/pytorch*.json "$out_dir/compare.md"
  warn() { echo "compare.sh: warning: $*" >&2; }

  json_field() { "$python" -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' "$1" "$2" 2> /dev/null; }
  # The reference runs on the device ranzcr used and with as many intra-op threads: from ranzcr's first
  # figures of this folder (a failed ranzcr run leaves it to the reference's own choice, with a warning).
  ref_args_from() {
    ref_args=("${common[@]}")
    local device="" threads="" f
    for f in "$out_dir"/ours-*.json; do
      [[ -f $f ]] || continue
      device=$(json_field "$f" device)
      threads=$(json_field "$f" threads)
      break
    done
    if [[ -n $device ]]; then
      ref_args+=(--device "${device%%:*}")
    else
      warn "no ranzcr figures yet: the reference picks its own device and threads"
    fi
    [[ $threads =~ ^[1-9][0-9]*$ ]] && ref_args+=(--threads "$threads")
    return 0
  }
  # run_side NAME JSON COMMAND...: runs one side; a failure is a warning. A JSON written before the failure
  # (the figures come before the profile) still counts.
  run_side() {
    local name=$1 json=$2 rc=0
    shift 2
    "$@" || rc=$?
    if [[ $rc != 0 ]]; then
      if [[ -f $json ]]; then
        warn "$name exited $rc after writing its figures ($json): they count; its profile may be missing"
      else
        warn "$name failed (exit $rc): no figures from this run"
      fi
    fi
    return 0
  }
  for ((k = first; k < first + repeats; k++)); do
    ours_args=("${common[@]}" --out "$out_dir/ours-$k.json")
    [[ $k == "$first" && $ours_profile == 1 ]] && ours_args+=(--profile "$out_dir/profile-ranzcr")
    echo "== [$k/$((first + repeats - 1))] ranzcr: $bin bench ${ours_args[*]}"
    run_side "ranzcr bench" "$out_dir/ours-$k.json" "$bin" bench "${ours_args[@]}"
    ref_args_from
    args=("${ref_args[@]}" --out "$out_dir/pytorch-$k.json")
    [[ $reduced == 1 ]] && args+=(--reduced-decode)
    [[ $k == "$first" && $profile == 1 ]] && args+=(--profile "$out_dir/profile-pytorch")
    echo
    echo "== [$k/$((first + repeats - 1))] pytorch: $python $here/pytorch_reference.py ${args[*]}"
    run_side "the pytorch reference" "$out_dir/pytorch-$k.json" "$python" "$here/pytorch_reference.py" "${args[@]}"
    if [[ $plain == 1 ]]; then
      args=("${ref_args[@]}" --plain --out "$out_dir/pytorch-plain-$k.json")
      echo
      echo "== [$k/$((first + repeats - 1))] pytorch, plain: $python $here/pytorch_reference.py ${args[*]}"
      run_side "the plain pytorch reference" "$out_dir/pytorch-plain-$k.json" "$python" \
        "$here/pytorch_reference.py" "${args[@]}"
    fi
    if [[ $compile == 1 ]]; then
      args=("${ref_args[@]}" --compile --out "$out_dir/pytorch-compile-$k.json")
      [[ $reduced == 1 ]] && args+=(--reduced-decode)
      echo
      echo "== [$k/$((first + repeats - 1))] pytorch, torch.compile: $python $here/pytorch_reference.py ${args[*]}"
      if ! "$python" "$here/pytorch_reference.py" "${args[@]}"; then
        warn "the torch.compile reference failed; no compile column from here on"
        compile=0
      fi
    fi
    echo
  done
fi

[[ -d $out_dir ]] || die "no folder $out_dir (run without --table-only first)"
"$python" - "$out_dir" "$here" << 'EOF'
import glob, json, os, re, statistics, sys

out = sys.argv[1]
sys.path.insert(0, sys.argv[2])
import kineto_trace  # noqa: E402  (scripts/bench/kineto_trace.py: the trace reader of both sides)


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
sides = {name: runs_of(name) for name in ("ours", "pytorch", "pytorch-plain", "pytorch-compile")}
ours, ref, plain, comp = (sides[n][0] for n in ("ours", "pytorch", "pytorch-plain", "pytorch-compile"))
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


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"


def bound_shares(runs):
    """Each run's e2e over 1 / (1/loader + 1/compute), the rate its own two figures allow on shared cores."""
    out = []
    for r in runs:
        l, c, e = (r.get(k) for k in ("loader_images_per_sec", "compute_images_per_sec", "e2e_images_per_sec"))
        if l and c and e is not None:
            out.append({"share": e * (1.0 / l + 1.0 / c)})
    return out


def share_cell(runs):
    v = values(runs, "share")
    if not v:
        return "-"
    return f"{statistics.median(v):.2f}" + (f" ({min(v):.2f}–{max(v):.2f})" if len(v) > 1 else "")


n = lambda runs: f"{len(runs)} run" + ("s" if len(runs) != 1 else "")
lines = [f"| metric (images/s): median (min–max) | ranzcr, {n(ours)} | pytorch, {n(ref)} | ratio of medians (ranzcr / pytorch) "
         f"| pytorch plain, {n(plain)} | ranzcr / pytorch plain | pytorch compile, {n(comp)} |",
         "|---|---:|---:|---:|---:|---:|---:|"]
for label, key in FIGS:
    a = median(ours, key)
    lines.append(f"| {label} | {cell(ours, key)} | {cell(ref, key)} | {ratio(a, median(ref, key))} | "
                 f"{cell(plain, key)} | {ratio(a, median(plain, key))} | "
                 f"{cell(comp, key) if key == 'compute_images_per_sec' else ''} |")
sa, sr, sp = (bound_shares(x) for x in (ours, ref, plain))
lines.append(f"| share of own bound, e2e × (1/loader + 1/compute) | {share_cell(sa)} | {share_cell(sr)} | | "
             f"{share_cell(sp)} | | |")
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
if plain:
    lines.append(f"- pytorch plain: {settings_line(plain[0])}; full-size cv2.imread, INTER_AREA resize, hflip; "
                 f"model from {plain[0].get('model_source', '?')}")
if comp:
    lines.append(f"- pytorch compile: {settings_line(comp[0])}; model from {comp[0].get('model_source', '?')}")
if not plain:
    lines += ["", "pytorch plain: not run (--no-plain, or it failed)"]
lines += ["", "Libraries loaded:", f"- ranzcr: {versions_line(o)}", f"- pytorch: {versions_line(r)}"]

warnings = []
keys = ("device", "model", "image_size", "batch_size", "precision", "channels_last", "threads", "loader_workers",
        "steps", "warmup", "loader_steps")
for other, what in ((r, "pytorch"), (plain[0] if plain else None, "pytorch plain"),
                    (comp[0] if comp else None, "pytorch compile")):
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
for side, runs in (("ranzcr", ours), ("pytorch", ref), ("pytorch plain", plain), ("pytorch compile", comp)):
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
    def short(name):  # full names: the end of a cuDNN kernel's name says its layout (..._nhwc)
        return name.replace("|", "/").replace("`", "'")

    plines = ["", "Top kernels (the first profiled run of each side, profiled after its figures were timed and written; 2 warm-up steps, then the recorded ones):", ""]
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


# ---- the summaries: each side's top 20 device kernels, full names, and the layout of the convolution inputs
#      each served, read from its own trace by the same reader
def side_summary(side):
    trace = os.path.join(out, f"profile-{side}", "trace.json")
    if not os.path.isfile(trace):
        return None
    try:
        events = kineto_trace.load(trace)
        cuda = any(e.get("cat") == "kernel" for e in events if isinstance(e, dict))
        rows = kineto_trace.summary(events, cuda, top=10**9)
    except Exception as e:  # a trace cut short by a time limit: a warning, the other side goes on
        print(f"compare.sh: warning: cannot summarise {trace}: {e}", file=sys.stderr)
        return None
    steps = kineto_trace.steps(events)
    total = sum(r["total_ms"] for r in rows)
    conv = {}
    for r in rows:
        for layout, calls in r.get("conv_layouts", {}).items():
            if layout != "none":
                conv[layout] = conv.get(layout, 0) + calls
    return {"trace": trace, "kernel_source": "cuda kernels" if cuda else "cpu operators (self time)",
            "steps": steps, "device_ms_per_step": round(total / steps, 3) if steps else None,
            "conv_inputs": conv, "kernels": rows[:20]}


summaries = {side: s for side in ("ranzcr", "pytorch") if (s := side_summary(side)) is not None}
if summaries:
    md = ["Top 20 device kernels of each side, with the memory layout of the convolution inputs each served "
          "(read from the traces by scripts/bench/kineto_trace.py; a kernel launched inside no convolution: none)."]
    for side, sm in summaries.items():
        conv = sm["conv_inputs"]
        others = sum(n for layout, n in conv.items() if layout not in ("NHWC", "either"))
        verdict = ("every convolution read NHWC" if conv and not others
                   else f"{others} convolution kernel calls read other layouts" if others else "no convolution found")
        per_step = f"{sm['device_ms_per_step']:.2f} ms" if sm["device_ms_per_step"] is not None else "? ms"
        md += ["", f"## {side}: {sm['steps']} steps, {per_step} of {sm['kernel_source']} per step",
               "", "Convolution inputs, kernel calls over the whole trace: "
               + (", ".join(f"{k} {v}" for k, v in sorted(conv.items())) or "none") + f" ({verdict}).", "",
               "| rank | kernel | calls | total ms | share | convolution inputs |", "|---:|---|---:|---:|---:|---|"]
        for i, r in enumerate(sm["kernels"], 1):
            layouts = ", ".join(f"{k} {v}" for k, v in sorted(r.get("conv_layouts", {}).items()))
            name = r["name"].replace("|", "/").replace("`", "'")
            md.append(f"| {i} | `{name}` | {r['calls']} | {r['total_ms']:.2f} | {100 * r['share']:.1f}% | {layouts} |")
    with open(os.path.join(out, "profile-summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(out, "profile-summary.json"), "w") as f:
        json.dump(summaries, f, indent=2)
        f.write("\n")
    print("\n" + "\n".join(md))
EOF
written="$out_dir/compare.md"
[[ -f $out_dir/profile.md ]] && written+=", $out_dir/profile.md"
[[ -f $out_dir/profile-summary.md ]] && written+=", $out_dir/profile-summary.md and .json"
echo
echo "wrote $written (the runs: $out_dir/ours-K.json, pytorch-K.json, pytorch-plain-K.json, pytorch-compile-K.json;" \
  "summaries: ours.json, pytorch.json, pytorch-plain.json)"
