#!/usr/bin/env bash
# scripts/bench/kineto_trace.py against the hand-written trace tests/engine/jobs/kineto_trace/trace.json and the
# tables computed on paper in expected.json there: the CUDA kernel table (device activities only, never the
# gpu_user_annotation spans), the CPU self-time table (cpu_ops only: user annotations neither rows nor children),
# steps, device ms per step, the conv layout each kernel served; layout_of / conv_layout on their edge cases; the
# CLI (summary JSON + markdown with full names; a missing or garbage trace: non-zero, one line). With torch
# importable, also real CPU traces of a conv forward/backward: channels_last is found NHWC, contiguous NCHW.
# Needs any python3 (stdlib only; $PYTHON, default .venv/bin/python, else python3).
# Exit 0: passed; 1: failed; 77: skipped (no python). A few seconds (torch part included).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
py=${PYTHON:-}
[[ -z $py && -x $repo/.venv/bin/python ]] && py=$repo/.venv/bin/python
py=${py:-python3}
command -v "$py" > /dev/null 2>&1 || { echo "skipped: no $py"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" - "$repo" "$tmp" << 'EOF'
import json, os, subprocess, sys
repo, tmp = sys.argv[1], sys.argv[2]
tool = os.path.join(repo, "scripts/bench/kineto_trace.py")
fixture = os.path.join(repo, "tests/engine/jobs/kineto_trace")
sys.path.insert(0, os.path.dirname(tool))
import kineto_trace as kt

fails = []
def check(what, ok):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        fails.append(what)

def close(a, b):
    return a is not None and b is not None and abs(a - b) <= 1e-9

def same_rows(got, want, keys):
    return len(got) == len(want) and all(
        all(close(g[k], w[k]) if isinstance(w[k], float) else g[k] == w[k] for k in keys) for g, w in zip(got, want))

trace = os.path.join(fixture, "trace.json")
exp = json.load(open(os.path.join(fixture, "expected.json")))
ev = kt.load(trace)

# --- the fixture's tables, against the numbers worked out by hand
check("steps(): 2 ProfilerStep# annotations", kt.steps(ev) == exp["steps"])
for cuda, key in ((True, "cuda"), (False, "cpu")):
    rows = kt.kernel_table(ev, cuda)
    check(f"kernel_table(cuda={cuda}): names, calls, total_ms, share and order as in expected.json",
          same_rows(rows, exp[key]["kernels"], ("name", "calls", "total_ms", "share")))
    check(f"kernel_table(cuda={cuda}): device ms per step {exp[key]['device_ms_per_step']}",
          close(sum(r["total_ms"] for r in rows) / kt.steps(ev), exp[key]["device_ms_per_step"]))
    check(f"kernel_table(cuda={cuda}): no ProfilerStep / Optimizer / other annotation rows",
          not any(r["name"].startswith(("ProfilerStep", "Optimizer.", "fused_adamw.")) for r in rows))
check("the CPU table: the annotation inside aten::_fused_adamw_ takes nothing off its self time (0.34 ms)",
      any(r["name"] == "aten::_fused_adamw_" and close(r["total_ms"], 0.34) for r in kt.kernel_table(ev, False)))
for cuda, key in ((True, "summary"), (False, "cpu_summary")):
    s = kt.summary(ev, cuda)
    check(f"summary(cuda={cuda}): conv_layouts and ops per row as in expected.json",
          same_rows(s, exp[key], ("name", "conv_layouts", "ops")))
    check(f"summary(cuda={cuda}): the kernel_table columns too",
          same_rows(s, kt.kernel_table(ev, cuda), ("name", "calls", "total_ms", "share")))
check("summary(top=3): the first 3 rows", [r["name"] for r in kt.summary(ev, True, top=3)] ==
      [r["name"] for r in exp["summary"][:3]])

# --- layouts
check("layout_of: channels_last NHWC", kt.layout_of([8, 16, 32, 32], [16384, 1, 512, 16]) == "NHWC")
check("layout_of: contiguous NCHW", kt.layout_of([8, 16, 32, 32], [16384, 1024, 32, 1]) == "NCHW")
check("layout_of: C == 1 is either", kt.layout_of([8, 1, 32, 32], [1024, 1024, 32, 1]) == "either")
check("layout_of: H == W == 1 is either", kt.layout_of([8, 16, 1, 1], [16, 1, 16, 16]) == "either")
check("layout_of: N == 1, its stride ignored", kt.layout_of([1, 16, 4, 4], [7, 1, 64, 16]) == "NHWC")
check("layout_of: expanded (stride 0) is other", kt.layout_of([2, 8, 14, 14], [0, 0, 0, 0]) == "other")
check("layout_of: not 4-D is None", kt.layout_of([32], [1]) is None and kt.layout_of([8, 16, 32], [512, 32, 1]) is None)
def op(name, dims, strides):
    return {"ph": "X", "cat": "cpu_op", "name": name, "args": {"Input Dims": dims, "Input Strides": strides}}
nhwc, nchw = ([8, 16, 32, 32], [16384, 1, 512, 16]), ([8, 16, 32, 32], [16384, 1024, 32, 1])
w1x1 = ([32, 16, 1, 1], [16, 1, 1, 1])  # either
check("conv_layout: NHWC activation + either weight: NHWC",
      kt.conv_layout(op("aten::convolution", [nhwc[0], w1x1[0], [32]], [nhwc[1], w1x1[1], [1]])) == "NHWC")
check("conv_layout: NHWC + NCHW: mixed",
      kt.conv_layout(op("aten::convolution", [nhwc[0], nchw[0]], [nhwc[1], nchw[1]])) == "mixed")
check("conv_layout: an expanded grad_output: mixed", kt.conv_layout(op(
    "aten::convolution_backward", [[8, 32, 32, 32], nchw[0], [32, 16, 3, 3]],
    [[0, 0, 0, 0], nchw[1], [144, 9, 3, 1]])) == "mixed")
check("conv_layout: all either: either", kt.conv_layout(op("aten::convolution", [w1x1[0]], [w1x1[1]])) == "either")
check("conv_layout: no strides recorded: unknown", kt.conv_layout(op("aten::convolution", [nhwc[0]], [])) == "unknown")
check("conv_layout: no 4-D input: None", kt.conv_layout(op("aten::conv1d", [[8, 16, 32]], [[512, 32, 1]])) is None)

# --- load
bare = os.path.join(tmp, "bare.json")
json.dump(json.load(open(trace))["traceEvents"], open(bare, "w"))
check("load: a bare list of events is a trace too", len(kt.load(bare)) == len(ev))
for text in ("{not json", '{"a": 1}', '"a string"'):
    garbage = os.path.join(tmp, "garbage.json")
    open(garbage, "w").write(text)
    try:
        kt.load(garbage)
        check(f"load({text!r}) raises ValueError", False)
    except ValueError as e:
        check(f"load({text!r}) raises ValueError, one line: {e}", "\n" not in str(e))

# --- the CLI
def cli(*args):
    return subprocess.run([sys.executable, tool, *args], capture_output=True, text=True)
out_json, out_md = os.path.join(tmp, "s.json"), os.path.join(tmp, "s.md")
r = cli("summary", trace, "--label", "fixture", "--out-json", out_json, "--out-md", out_md)
check("CLI summary exits 0", r.returncode == 0)
s = json.load(open(out_json))
check("CLI summary JSON keys", sorted(s) == sorted(
    ["label", "trace", "kernel_source", "steps", "device_ms_per_step", "kernels"]))
check("CLI summary: cuda by default (the trace has kernels), label, 2 steps, 0.88 ms per step",
      s["kernel_source"] == "cuda kernels" and s["label"] == "fixture" and s["steps"] == 2
      and close(s["device_ms_per_step"], 0.88))
check("CLI summary: the rows, full names, total_ms, conv layouts",
      same_rows(s["kernels"], exp["summary"], ("name", "conv_layouts", "ops"))
      and same_rows(s["kernels"], exp["cuda"]["kernels"], ("name", "calls", "total_ms")))
md = open(out_md).read()
check("CLI summary: the markdown printed is the one written", r.stdout == md)
table = [l for l in md.splitlines() if l.startswith("| ")]
check("CLI summary markdown: header + 7 rows", len(table) == 8 and table[0].startswith("| # | kernel | calls"))
check("CLI summary markdown: full names in backticks", all(f"`{k['name']}`" in md for k in exp["cuda"]["kernels"]))
check("CLI summary markdown: the layouts cell", "| NHWC 1, NCHW 1 |" in md and "| none 2 |" in md)
r = cli("summary", trace, "--cpu", "--top", "5", "--out-json", out_json)
s = json.load(open(out_json))
check("CLI summary --cpu --top 5: cpu operators, 0.6 ms per step, 5 rows",
      r.returncode == 0 and s["kernel_source"] == "cpu operators (self time)" and close(s["device_ms_per_step"], 0.6)
      and len(s["kernels"]) == 5)
r = cli("table", trace, "--steps", "2")
t = json.loads(r.stdout) if r.returncode == 0 else {}
check("CLI table --steps 2: the whole CUDA table as JSON",
      same_rows(t.get("kernels", []), exp["cuda"]["kernels"], ("name", "calls", "total_ms", "share"))
      and close(t.get("device_ms_per_step"), 0.88))
garbage = os.path.join(tmp, "garbage.bin")
open(garbage, "wb").write(b"\x89PNG\r\n\x1a\n\x00\x00 not a trace")
for what, path in (("a missing trace", os.path.join(tmp, "missing.json")), ("a garbage trace", garbage)):
    r = cli("summary", path)
    lines = r.stderr.strip().splitlines()
    check(f"CLI on {what}: non-zero, one line 'kineto_trace.py: ...' ({r.stderr.strip()})",
          r.returncode != 0 and len(lines) == 1 and lines[0].startswith("kineto_trace.py: "))

# --- real traces, when torch is here
try:
    import torch
except ImportError:
    torch = None
    print("skipped: the real-trace checks (no torch in this python)")
if torch is not None:
    from torch.profiler import ProfilerActivity, profile, schedule
    torch.set_num_threads(1)
    for fmt, want in ((torch.channels_last, "NHWC"), (torch.contiguous_format, "NCHW")):
        torch.manual_seed(0)
        m = torch.nn.Conv2d(4, 8, 3, padding=1).to(memory_format=fmt)
        opt = torch.optim.AdamW(m.parameters())
        x = torch.randn(2, 4, 12, 12).to(memory_format=fmt)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                     schedule=schedule(wait=0, warmup=1, active=2, repeat=1)) as prof:
            for _ in range(3):
                opt.zero_grad()
                y = m(x)
                y.backward(torch.ones_like(y) * 0.5)  # a real gradient, not the expanded one of y.sum()
                opt.step()
                prof.step()
        path = os.path.join(tmp, f"real_{want}.json")
        prof.export_chrome_trace(path)
        evs = kt.load(path)
        rows = kt.summary(evs, kt.has_device_activity(evs), top=100)
        convs = {r["name"]: r["conv_layouts"] for r in rows
                 if r["name"] in ("aten::convolution", "aten::convolution_backward")}
        check(f"real CPU trace, {want}: 2 steps, no annotation rows", kt.steps(evs) == 2 and not any(
            r["name"].startswith(("ProfilerStep", "Optimizer.")) for r in rows))
        check(f"real CPU trace, {want}: convolution and convolution_backward found {want} ({convs})",
              len(convs) == 2 and all(c == {want: 2} for c in convs.values()))
sys.exit(1 if fails else 0)
EOF
rc=$?
((rc == 0)) && echo "all checks passed"
exit $rc
