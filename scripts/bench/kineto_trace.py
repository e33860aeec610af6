#!/usr/bin/env python3
"""The kernel table of a Kineto chrome trace, and which convolution layout each kernel served.

Reads the JSON that torch.profiler.profile.export_chrome_trace writes (LibTorch's C++ ProfilerResult::save writes
the same format): {"traceEvents": [...]} or a bare list; a path ending in .gz is read through gzip. Only complete
events ("ph": "X") count; times are microseconds, taken to whole nanoseconds (round(us * 1000)) so that sums and
ties are exact.

What is counted:
  cuda   every device activity, "cat" kernel, gpu_memcpy or gpu_memset, by name; its time is its "dur". The
         user annotations that Kineto mirrors on the GPU timeline ("gpu_user_annotation": ProfilerStep#N,
         Optimizer.step#..., Optimizer.zero_grad#...) are spans of other work, never counted.
  cpu    (a CPU run, no kernels) the self time of every "cpu_op" event: its dur less the dur of the cpu_op events
         directly nested inside it on the same (pid, tid); nesting by time interval, events sorted by start, the
         longer first on equal starts (engine/jobs/step_profile.cpp self_times). "user_annotation" events (the CPU
         side of the user scopes) are not operators: neither rows nor children, so they take no time off any
         operator. cuda_runtime / cuda_driver calls are not operators either.
  rows   {"name", "calls", "total_ms", "share"}, the longest first, ties by name (code point order); share is
         total_ms over the sum of every row.

Layouts (summary): a convolution op is a cpu_op whose name contains "conv" and which has a 4-D tensor input; its
layout is that of its 4-D tensor inputs together (see conv_layout). A device activity serves the op whose
"External id" it carries (the innermost op that launched it), or that op's nearest enclosing op on its thread,
whichever is first a convolution; none: "none".

Usage: kineto_trace.py summary TRACE [--top 20] [--cuda|--cpu] [--label NAME] [--out-json F] [--out-md F]
       kineto_trace.py table TRACE [--steps N] [--cuda|--cpu]
--cuda / --cpu: the table kind; default cuda when the trace has any device activity. Stdlib only (Python 3.9+).
"""
import argparse
import gzip
import json
import sys
from collections import Counter

DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
KERNEL_SOURCE = {True: "cuda kernels", False: "cpu operators (self time)"}


def load(path):
    """The events of the Kineto chrome trace at `path`: its "traceEvents", or the file itself when it is a bare
    list. Only dict entries are kept. Raises ValueError with a one-line reason when the file cannot be read or is
    not a trace."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{path}: not a Kineto chrome trace (no \"traceEvents\" list)")
    return [e for e in events if isinstance(e, dict)]


def _is(event, *cats):
    return event.get("ph") == "X" and event.get("cat") in cats


def _span_ns(event):
    """(start, end) in whole nanoseconds."""
    start = round(float(event.get("ts", 0)) * 1000)
    return start, start + round(float(event.get("dur", 0)) * 1000)


def _thread(event):
    # str(): pids and tids are numbers, but Kineto also writes names ("Spans"); they must sort together.
    return str(event.get("pid")), str(event.get("tid"))


def _nesting(events):
    """The cpu_op events sorted by (thread, start, longer first), with each one's self time in ns and the index
    of the op directly enclosing it on its thread (None at the top). Only cpu_op events take part: a user
    annotation between two ops neither encloses nor is enclosed (the rule of step_profile.cpp self_times)."""
    ops = [e for e in events if _is(e, "cpu_op")]
    spans = [_span_ns(e) for e in ops]
    order = sorted(range(len(ops)), key=lambda i: (_thread(ops[i]), spans[i][0], -spans[i][1]))
    ops = [ops[i] for i in order]
    spans = [spans[i] for i in order]
    inner = [0] * len(ops)
    parent = [None] * len(ops)
    chain = []  # the enclosing ops of the current one, innermost last
    for i, (start, end) in enumerate(spans):
        while chain and (_thread(ops[chain[-1]]) != _thread(ops[i]) or spans[chain[-1]][1] <= start):
            chain.pop()
        if chain:
            parent[i] = chain[-1]
            inner[chain[-1]] += end - start
        chain.append(i)
    self_ns = [max(0, end - start - inner[i]) for i, (start, end) in enumerate(spans)]
    return ops, self_ns, parent


def _ranked(by_name):
    """Rows from {name: [calls, ns]}: the longest first, ties by name; share of the sum of all rows."""
    total = sum(ns for _, ns in by_name.values())
    rows = sorted(by_name.items(), key=lambda kv: (-kv[1][1], kv[0]))
    return [{"name": name, "calls": calls, "total_ms": ns / 1e6, "share": ns / total if total else 0.0}
            for name, (calls, ns) in rows]


def kernel_table(events, cuda):
    """The kernel table of a trace's events: rows {"name", "calls", "total_ms", "share"} sorted by total_ms,
    descending (ties: by name). cuda=True: the device activities (kernel, gpu_memcpy, gpu_memset) by their dur,
    never the gpu_user_annotation spans. cuda=False: the self time of every cpu_op (see _nesting)."""
    by_name = {}

    def add(name, ns):
        row = by_name.setdefault(name, [0, 0])
        row[0] += 1
        row[1] += ns

    if cuda:
        for e in events:
            if _is(e, *DEVICE_CATS):
                start, end = _span_ns(e)
                add(e.get("name", ""), end - start)
    else:
        ops, self_ns, _ = _nesting(events)
        for op, ns in zip(ops, self_ns):
            add(op.get("name", ""), ns)
    return _ranked(by_name)


def _is_4d(dims):
    return isinstance(dims, list) and len(dims) == 4 and all(isinstance(d, int) for d in dims)


def layout_of(dims, strides):
    """The memory layout of a 4-D tensor from its sizes and strides: "NCHW" when the strides are the contiguous
    ones, "NHWC" when they are channels_last's (stride C = 1, W = C, H = W*C, N = H*W*C), "either" when both
    hold (C == 1, or H == W == 1, ...), "other" when neither does (expanded, sliced, permuted otherwise).
    Dimensions of size 1 are left out of the comparison, since their stride is arbitrary. None when the
    tensor is not 4-D or its strides were not recorded."""
    if not _is_4d(dims) or not _is_4d(strides):
        return None
    n, c, h, w = (max(d, 1) for d in dims)  # a size 0 counts as 1 in the products, as in c10's strides
    contiguous = (c * h * w, h * w, w, 1)
    channels_last = (h * w * c, 1, w * c, c)

    def matches(expected):
        return all(s == x for d, s, x in zip(dims, strides, expected) if d != 1)

    nchw, nhwc = matches(contiguous), matches(channels_last)
    return "either" if nchw and nhwc else "NCHW" if nchw else "NHWC" if nhwc else "other"


def conv_layout(op_event):
    """The layout of a convolution op: that of all its 4-D tensor inputs ("Input Dims" entries of four integers,
    with the "Input Strides" entry at the same position) taken together. Forward ops (aten::conv2d,
    aten::convolution, aten::_convolution, aten::cudnn_convolution, aten::mkldnn_convolution, ...) have the
    activation and the weight (and the z of cudnn_convolution_add_relu); aten::convolution_backward has
    grad_output, input and weight. Rule: "either" tensors are left out; if the rest are all "NHWC" or all
    "NCHW", that; "either" when every one was; "mixed" otherwise (disagreeing layouts, or any "other" tensor:
    an expanded grad_output of a sum, say). "unknown" when no 4-D input has its strides recorded; None when the
    op has no 4-D tensor input (not a convolution)."""
    args = op_event.get("args") or {}
    dims = args.get("Input Dims") or []
    strides = args.get("Input Strides") or []
    four_d = [i for i, d in enumerate(dims) if _is_4d(d)]
    if not four_d:
        return None
    known = [layout_of(dims[i], strides[i] if i < len(strides) else None) for i in four_d]
    known = [x for x in known if x is not None]
    if not known:
        return "unknown"
    decided = {x for x in known if x != "either"}
    if not decided:
        return "either"
    only = decided.pop() if len(decided) == 1 else None
    return only if only in ("NHWC", "NCHW") else "mixed"


def _is_conv(op_event):
    return "conv" in op_event.get("name", "") and conv_layout(op_event) is not None


def steps(events):
    """The number of distinct ProfilerStep#N user annotations (their CPU side); 0 if none."""
    return len({e.get("name") for e in events
                if _is(e, "user_annotation") and str(e.get("name", "")).startswith("ProfilerStep#")})


def _served(ops, parent):
    """For each op index, the index of the op itself or its nearest enclosing op that is a convolution, or None."""
    conv = [None] * len(ops)
    for i, op in enumerate(ops):  # parents come before their children in this order
        conv[i] = i if _is_conv(op) else conv[parent[i]] if parent[i] is not None else None
    return conv


def summary(events, cuda, top=20):
    """The first `top` rows of kernel_table, each with "conv_layouts" {layout: calls} and "ops" {op name: calls}:
    per call, the convolution op it served (the launching op, found by "External id" on CUDA, or the op itself
    on a CPU table; else its nearest enclosing op on the same thread whose name has "conv") and that op's
    conv_layout; with no such op the call counts under "none" and under the launching op's name ("none" when
    no op launched it)."""
    rows = kernel_table(events, cuda)[:top]
    ops, _, parent = _nesting(events)
    conv = _served(ops, parent)
    if cuda:
        by_ext = {}
        for i, op in enumerate(ops):
            ext = (op.get("args") or {}).get("External id")
            if ext is not None:  # a device activity without one was launched by no op
                by_ext.setdefault(ext, i)
        calls = [(e.get("name", ""), by_ext.get((e.get("args") or {}).get("External id")))
                 for e in events if _is(e, *DEVICE_CATS)]
    else:
        calls = [(op.get("name", ""), i) for i, op in enumerate(ops)]
    layouts, served_ops = {}, {}
    for name, i in calls:
        c = conv[i] if i is not None else None
        layout = conv_layout(ops[c]) if c is not None else "none"
        op_name = ops[c if c is not None else i].get("name", "") if i is not None else "none"
        layouts.setdefault(name, Counter())[layout] += 1
        served_ops.setdefault(name, Counter())[op_name] += 1
    for row in rows:
        row["conv_layouts"] = dict(layouts[row["name"]].most_common())
        row["ops"] = dict(served_ops[row["name"]].most_common())
    return rows


def has_device_activity(events):
    """Whether the trace has any kernel, memcpy or memset (a CUDA profile)."""
    return any(_is(e, *DEVICE_CATS) for e in events)


def report(events, cuda, trace, label=None, top=20):
    """The summary JSON object: label, trace, kernel_source, steps, device_ms_per_step (all rows / steps, None
    without steps) and the top rows (full names; total_ms to 3 decimals, share to 4)."""
    n = steps(events)
    total = sum(r["total_ms"] for r in kernel_table(events, cuda))
    rows = summary(events, cuda, top)
    for r in rows:
        r["total_ms"], r["share"] = round(r["total_ms"], 3), round(r["share"], 4)
    return {"label": label, "trace": str(trace), "kernel_source": KERNEL_SOURCE[cuda], "steps": n,
            "device_ms_per_step": round(total / n, 3) if n else None, "kernels": rows}


def _cell(counts):
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def markdown(rep):
    """The report as a markdown table: rank, full kernel name, calls, total ms, share, conv input layouts."""
    per_step = rep["device_ms_per_step"]
    lines = [f"Kernels of {rep['label'] or rep['trace']}: {rep['steps']} steps, "
             + (f"{per_step:.3f} ms" if per_step is not None else "? ms")
             + f" of {rep['kernel_source']} per step (top {len(rep['kernels'])})", "",
             "| # | kernel | calls | total ms | share | conv input layouts |", "|---:|---|---:|---:|---:|---|"]
    for rank, r in enumerate(rep["kernels"], 1):
        name = r["name"].replace("|", "\\|")  # a | would end the cell, even inside backticks
        lines.append(f"| {rank} | `{name}` | {r['calls']} | {r['total_ms']:.3f} | {100 * r['share']:.1f}% "
                     f"| {_cell(r['conv_layouts'])} |")
    return "\n".join(lines) + "\n"


def write_summary(events, cuda, trace, label, out_json=None, out_md=None, top=20):
    """Writes report() to out_json and markdown() to out_md (each when given); returns (report, markdown)."""
    rep = report(events, cuda, trace, label, top)
    md = markdown(rep)
    if out_json:
        with open(out_json, "w", encoding="utf-8") as f:
            json.dump(rep, f, indent=2)
            f.write("\n")
    if out_md:
        with open(out_md, "w", encoding="utf-8") as f:
            f.write(md)
    return rep, md


def main(argv=None):
    p = argparse.ArgumentParser(prog="kineto_trace.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summary", help="the top kernels with their convolution layouts (JSON and markdown)")
    t = sub.add_parser("table", help="the whole kernel table as JSON (debugging)")
    for q in (s, t):
        q.add_argument("trace")
        kind = q.add_mutually_exclusive_group()
        kind.add_argument("--cuda", dest="cuda", action="store_true", default=None)
        kind.add_argument("--cpu", dest="cuda", action="store_false")
    s.add_argument("--top", type=int, default=20)
    s.add_argument("--label")
    s.add_argument("--out-json")
    s.add_argument("--out-md")
    t.add_argument("--steps", type=int, help="default: the ProfilerStep# annotations in the trace")
    args = p.parse_args(argv)
    try:
        events = load(args.trace)
    except ValueError as e:
        sys.exit(f"kineto_trace.py: {e}")
    cuda = has_device_activity(events) if args.cuda is None else args.cuda
    if args.command == "summary":
        try:
            _, md = write_summary(events, cuda, args.trace, args.label, args.out_json, args.out_md, args.top)
        except OSError as e:
            sys.exit(f"kineto_trace.py: cannot write: {e}")
        print(md, end="")
        return
    n = args.steps if args.steps is not None else steps(events)
    rows = kernel_table(events, cuda)
    total = sum(r["total_ms"] for r in rows)
    json.dump({"kernel_source": KERNEL_SOURCE[cuda], "steps": n, "device_ms_per_step": total / n if n else None,
               "kernels": rows}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
