#!/usr/bin/env python3
"""How a training run's costs grow with the data set: one epoch of `ranzcr train` on the first N rows of a
data set, for each N, under scripts/bench/tree_memory.py; a table and a straight-line fit.

  growth.py --source DIR --sizes 3000,10000,30083 --config FILE [--set k=v ...] [--out-dir DIR] [--table-only]

For each N, DIR/<N>/data is a data set with the first N rows of SOURCE's train.csv and SOURCE's image folder
linked in (so each N has its own data.cache file, built by the run); the run goes to DIR/<N>/run. Read back:
  cache_build_s    building data.cache (from the last progress line: images / images per second), if built;
  index_s          reading train.csv and splitting it (the log's "read and split in X s");
  epoch_s          the epoch (training + validation), metrics.jsonl's epoch_seconds;
  train_img_s      training images per second; val_s, auc_s: validation, and its loss + AUC over the
                   gathered predictions (metrics.jsonl);
  peak RSS         of the process tree, split into anonymous memory (the process's own) and mapped files
                   (page cache: the binary, libraries, the cache file), and PSS (tree_memory.py).
The fit is least squares y = a + b * N per column, with R^2, printed under the table (markdown).
Binary: $RANZCR_BIN (default build/ranzcr); python: this interpreter.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def make_subset(source, n, root):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(source, "train.csv")) as f:
        lines = f.readlines()
    if n + 1 > len(lines):
        sys.exit(f"error: {source}/train.csv has {len(lines) - 1} rows, {n} asked for")
    with open(os.path.join(root, "train.csv"), "w") as f:
        f.writelines(lines[: n + 1])
    link = os.path.join(root, "train")
    if not os.path.islink(link):
        os.symlink(os.path.abspath(os.path.join(source, "train")), link)


def run_one(n, a):
    base = os.path.join(a.out_dir, str(n))
    root, run = os.path.join(base, "data"), os.path.join(base, "run")
    make_subset(a.source, n, root)
    binary = os.environ.get("RANZCR_BIN", os.path.join(REPO, "build", "ranzcr"))
    cmd = [binary, "train", "--config", a.config, "--set", f"data.root={root}", "--set", f"output.dir={run}",
           "--set", "train.epochs=1", "--set", "train.resume=never"]
    for s in a.set:
        cmd += ["--set", s]
    mem = os.path.join(base, "memory.json")
    print(f"growth: {n} images: {' '.join(cmd)}", file=sys.stderr, flush=True)
    log_path = os.path.join(base, "stderr.txt")
    with open(log_path, "w") as log:
        rc = subprocess.call([sys.executable, os.path.join(HERE, "tree_memory.py"), "--out", mem, "--"] + cmd,
                             stdout=log, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.exit(f"error: the run for {n} images failed (status {rc}); see {log_path}")
    text = open(log_path).read()
    row = {"images": n}
    built = re.findall(r"cache: (\d+)/(\d+) images \(100%\), (\d+) images/s", text)
    row["cache_build_s"] = round(int(built[-1][0]) / int(built[-1][2]), 1) if built else None
    m = re.search(r"read and split in ([0-9.]+) s", text)
    row["index_s"] = float(m.group(1)) if m else None
    with open(os.path.join(run, "metrics.jsonl")) as f:
        rec = json.loads(f.readlines()[-1])
    row.update(epoch_s=rec["epoch_seconds"], train_img_s=rec["images_per_sec"], val_s=rec["val_seconds"],
               auc_s=rec["auc_seconds"], train_images=rec["train_images"], val_images=rec["val_images"],
               val_auc=rec["val_auc_mean"])
    row.update(json.load(open(mem)))
    return row


def fit(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    return a, b, (1 - ss_res / ss_tot) if ss_tot > 0 else 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--sizes", default="3000,10000,30083")
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--out-dir", default="runs/growth")
    ap.add_argument("--table-only", action="store_true", help="print the table of DIR/growth.json, run nothing")
    a = ap.parse_args()
    out = os.path.join(a.out_dir, "growth.json")
    if a.table_only:
        rows = json.load(open(out))
    else:
        rows = [run_one(int(n), a) for n in a.sizes.split(",")]
        with open(out, "w") as f:
            json.dump(rows, f, indent=1)
    cols = [("cache_build_s", "cache build s"), ("index_s", "read + split s"), ("epoch_s", "epoch s"),
            ("train_img_s", "train img/s"), ("val_s", "validation s"), ("auc_s", "loss + AUC s"),
            ("peak_rss_anon_mib", "peak anon MiB"), ("peak_rss_file_mib", "peak file-backed MiB"),
            ("peak_pss_mib", "peak PSS MiB"), ("peak_rss_mib", "peak RSS MiB")]
    print("| images | " + " | ".join(c[1] for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for r in rows:
        print(f"| {r['images']} | " + " | ".join("-" if r[k] is None else f"{r[k]:.4g}" for k, _ in cols) + " |")
    print()
    xs = [r["images"] for r in rows]
    for k, label in cols:
        ys = [r[k] for r in rows]
        if len(xs) >= 2 and None not in ys:
            a0, b, r2 = fit(xs, ys)
            print(f"- {label}: {a0:.4g} + {b * 1000:.4g} per 1000 images (R^2 {r2:.4f})")


if __name__ == "__main__":
    main()
