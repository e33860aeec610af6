#!/usr/bin/env bash
# scripts/bench/pytorch_reference.py on a tiny made-up data set (48 JPEGs of 96 px, tiny_cnn at 32 px, 2 steps):
# --threads is applied and recorded, the JSON has "versions" with the four keys, and --profile writes
# trace.json (with "Input Dims"), kernels.json in the schema ranzcr bench --profile writes (no ProfilerStep# or
# Optimizer.* rows), kernels.md, summary.json and summary.md (kineto_trace.py). A profile that cannot be written
# (DIR under a file) costs nothing: exit 0, the figures written, one line on stderr. --plain (the plain user
# pipeline) names itself in the JSON, and refuses --reduced-decode in one line.
# Needs a python ($PYTHON, default .venv/bin/python, else python3) with torch, numpy, cv2 and yaml.
# Exit 0: passed; 1: failed; 77: skipped (no such python). About 20 s on 2 cores.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
py=${PYTHON:-}
[[ -z $py && -x $repo/.venv/bin/python ]] && py=$repo/.venv/bin/python
py=${py:-python3}
"$py" -c 'import torch, cv2, numpy, yaml' > /dev/null 2>&1 ||
  { echo "skipped: $py lacks torch, cv2, numpy or yaml (pip install opencv-python-headless)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" - "$tmp/ds" << 'EOF' || exit 1
import csv, os, sys
import cv2, numpy as np
root = sys.argv[1]
os.makedirs(f"{root}/train")
rng = np.random.default_rng(0)
with open(f"{root}/train.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["StudyInstanceUID"] + [f"L{i}" for i in range(11)] + ["PatientID"])
    for i in range(48):
        cv2.imwrite(f"{root}/train/s{i}.jpg", (rng.random((96, 96)) * 255).astype(np.uint8))
        w.writerow([f"s{i}"] + list(rng.integers(0, 2, 11)) + [f"p{i // 2}"])
EOF
cd "$repo" || exit 1
tiny=(--config configs/quickstart.yaml --set data.root="$tmp/ds" --set model.name=tiny_cnn --set data.image_size=32
      --set train.batch_size=8 --set data.num_workers=0 --threads 1)
if ! "$py" scripts/bench/pytorch_reference.py "${tiny[@]}" --steps 2 --warmup 1 --out "$tmp/ref.json" \
  --profile "$tmp/prof" > "$tmp/log" 2>&1; then
  echo "FAILED: pytorch_reference.py exited non-zero:"
  cat "$tmp/log"
  exit 1
fi
# A profile directory that cannot be made (under a file): the figures stand, exit 0, one line on stderr.
"$py" scripts/bench/pytorch_reference.py "${tiny[@]}" --steps 1 --warmup 1 --out "$tmp/ref2.json" \
  --profile "$tmp/ref.json/prof" > "$tmp/log2" 2> "$tmp/err2"
echo $? > "$tmp/rc2"
# The plain pipeline (--plain): its own implementation and decode names; with --reduced-decode, one error line.
"$py" scripts/bench/pytorch_reference.py "${tiny[@]}" --steps 1 --warmup 1 --plain --out "$tmp/plain.json" > "$tmp/log3" 2>&1
echo $? > "$tmp/rc3"
"$py" scripts/bench/pytorch_reference.py "${tiny[@]}" --steps 1 --plain --reduced-decode > /dev/null 2> "$tmp/err4"
echo $? > "$tmp/rc4"
"$py" - "$tmp" << 'EOF'
import json, sys
tmp = sys.argv[1]
fails = []
def check(what, ok):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        fails.append(what)
r = json.load(open(f"{tmp}/ref.json"))
check("threads recorded as given (--threads 1)", r.get("threads") == 1)
check("versions has torch, cudnn, cublas, nccl", sorted(r.get("versions", {})) == ["cublas", "cudnn", "nccl", "torch"])
check("versions.torch is torch's", r["versions"]["torch"] == r["torch_version"])
check("cublas is null on a CPU run", r["device"] != "cpu" or r["versions"]["cublas"] is None)
check("model_source recorded", r.get("model_source") == "builtin")
check("implementation pytorch, the three figures", r["implementation"] == "pytorch" and all(
    isinstance(r[k], float) and r[k] > 0 for k in ("loader_images_per_sec", "compute_images_per_sec", "e2e_images_per_sec")))
k = json.load(open(f"{tmp}/prof/kernels.json"))
check("kernels.json keys", sorted(k) == sorted(["implementation", "device", "steps", "cpu_ms_per_step", "wall_ms_per_step",
                                               "device_ms_per_step", "kernel_source", "kernels"]))
check("kernels.json: 5 steps, pytorch, this device", k["steps"] == 5 and k["implementation"] == "pytorch" and k["device"] == r["device"])
check("kernel source on a CPU", r["device"] != "cpu" or k["kernel_source"] == "cpu operators (self time)")
ks = k["kernels"]
check("at most 25 kernels, each with name, calls, total_ms, share", 0 < len(ks) <= 25 and all(
    sorted(x) == ["calls", "name", "share", "total_ms"] for x in ks))
check("sorted by total_ms, descending", all(a["total_ms"] >= b["total_ms"] for a, b in zip(ks, ks[1:])))
check("shares in 0..1, summing to <= 1", all(0 <= x["share"] <= 1 for x in ks) and sum(x["share"] for x in ks) <= 1.0001)
check("share = total_ms / (device_ms_per_step * steps)",
      abs(ks[0]["share"] - ks[0]["total_ms"] / (k["device_ms_per_step"] * k["steps"])) < 0.01)
check("cpu_ms_per_step > 0", k["cpu_ms_per_step"] > 0 and k["wall_ms_per_step"] >= k["cpu_ms_per_step"] * 0.999)
check("no user scopes (ProfilerStep#, Optimizer.*) among the rows",
      not any(x["name"].startswith(("ProfilerStep", "Optimizer.")) for x in ks))
s = json.load(open(f"{tmp}/prof/summary.json"))
check("summary.json keys", sorted(s) == sorted(["label", "trace", "kernel_source", "steps", "device_ms_per_step",
                                                 "kernels"]))
check("summary.json: label pytorch, 5 steps, the kernels.json kernel source",
      s["label"] == "pytorch" and s["steps"] == 5 and s["kernel_source"] == k["kernel_source"])
check("summary.json: device_ms_per_step that of kernels.json", abs(s["device_ms_per_step"] - k["device_ms_per_step"]) < 0.002)
check("summary.json: at most 20 rows, those of kernels.json, with conv_layouts and ops",
      0 < len(s["kernels"]) <= 20 and [x["name"] for x in s["kernels"]] == [x["name"] for x in ks[:len(s["kernels"])]]
      and all(sum(x["conv_layouts"].values()) == x["calls"] == sum(x["ops"].values()) for x in s["kernels"]))
check("summary.md: a row per kernel", len([l for l in open(f"{tmp}/prof/summary.md") if l.startswith("| ")])
      == len(s["kernels"]) + 1)
trace = open(f"{tmp}/prof/trace.json").read()
check("trace.json carries Input Dims and Input Strides", '"Input Dims"' in trace and '"Input Strides"' in trace)
md = open(f"{tmp}/prof/kernels.md").read().splitlines()
check("kernels.md: the table", "| kernel | calls | total ms | share |" in md and len([l for l in md if l.startswith("| ")]) == len(ks) + 1)
err = open(f"{tmp}/err2").read().strip().splitlines()
check("a failed profile: exit 0, the figures written, one line on stderr (" + " / ".join(err) + ")",
      open(f"{tmp}/rc2").read().strip() == "0" and json.load(open(f"{tmp}/ref2.json"))["compute_images_per_sec"] > 0
      and len(err) == 1 and err[0].startswith("pytorch reference: profile failed: ") and err[0].endswith(" stand)"))
p = json.load(open(f"{tmp}/plain.json")) if open(f"{tmp}/rc3").read().strip() == "0" else {}
check("--plain: implementation pytorch-plain, decode plain, the three figures",
      p.get("implementation") == "pytorch-plain" and p.get("decode") == "plain" and all(
          (p.get(k) or 0) > 0 for k in ("loader_images_per_sec", "compute_images_per_sec", "e2e_images_per_sec")))
err4 = open(f"{tmp}/err4").read().strip().splitlines()
check("--plain with --reduced-decode: one error line", open(f"{tmp}/rc4").read().strip() != "0" and len(err4) == 1
      and "--plain" in err4[0])
sys.exit(1 if fails else 0)
EOF
rc=$?
((rc == 0)) && echo "all checks passed" || { echo "--- the reference's output:"; cat "$tmp/log"; }
exit $rc
