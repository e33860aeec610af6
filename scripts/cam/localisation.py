#!/usr/bin/env python3
"""How often a Grad-CAM peak falls on the annotated device, against chance.

    localisation.py DATA_DIR CAM_PEAKS_CSV [--tolerance 0.1] [--json OUT]

DATA_DIR holds train.csv and train_annotations.csv (Kaggle's format: StudyInstanceUID,label,data with
data = [[x, y], ...] in image pixels) and the images (train/<id>.jpg or .dcm, for their size).
CAM_PEAKS_CSV is `predict --cam`'s cam_peaks.csv over those images. For every (image, label) that is
positive and annotated, the peak is a hit when it lies within `tolerance` x the image's longer side of
the label's polylines. Chance: the share of the image's pixels within that distance of them (where a
peak drawn uniformly at random would hit). Prints both, per label and over all, as JSON with --json.
Exits 77 without numpy, or without Pillow for JPEG and PNG images (the test skips).
"""
import argparse
import ast
import csv
import glob
import json
import os
import sys

try:
    import numpy as np
except ImportError as e:  # the test skips
    print(f"localisation.py: {e}", file=sys.stderr)
    sys.exit(77)


def image_size(data_dir, study):
    for path in glob.glob(os.path.join(data_dir, "train", study + ".*")):
        if path.endswith(".dcm"):
            import pydicom
            ds = pydicom.dcmread(path, stop_before_pixels=True)
            return int(ds.Columns), int(ds.Rows)
        try:
            from PIL import Image
        except ImportError as e:  # the test skips, as without numpy
            print(f"localisation.py: {e} (Pillow reads the JPEG and PNG images' sizes)", file=sys.stderr)
            sys.exit(77)
        with Image.open(path) as im:
            return im.size
    raise SystemExit(f"localisation.py: no image for {study} in {data_dir}/train")


def distance_to_polylines(xs, ys, lines):
    """Distance of each point (xs, ys) to the nearest segment of `lines`."""
    best = np.full(np.broadcast(xs, ys).shape, np.inf)
    for line in lines:
        p = np.asarray(line, dtype=np.float64)
        if len(p) == 1:
            p = np.vstack([p, p])
        for a, b in zip(p[:-1], p[1:]):
            d = b - a
            t = ((xs - a[0]) * d[0] + (ys - a[1]) * d[1]) / max(d @ d, 1e-12)
            t = np.clip(t, 0.0, 1.0)
            best = np.minimum(best, np.hypot(xs - (a[0] + t * d[0]), ys - (a[1] + t * d[1])))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("peaks")
    ap.add_argument("--tolerance", type=float, default=0.1)
    ap.add_argument("--json")
    args = ap.parse_args()
    labels = {r["StudyInstanceUID"]: r for r in csv.DictReader(open(os.path.join(args.data_dir, "train.csv")))}
    lines = {}
    for r in csv.DictReader(open(os.path.join(args.data_dir, "train_annotations.csv"))):
        lines.setdefault((r["StudyInstanceUID"], r["label"]), []).append(ast.literal_eval(r["data"]))
    per_label = {}
    sizes = {}
    for r in csv.DictReader(open(args.peaks)):
        key = (r["id"], r["label"])
        if key not in lines or r["id"] not in labels or labels[r["id"]].get(r["label"]) != "1" or not r["peak_x"]:
            continue
        w, h = sizes.setdefault(r["id"], image_size(args.data_dir, r["id"]))
        radius = args.tolerance * max(w, h)
        x, y = float(r["peak_x"]) * w, float(r["peak_y"]) * h
        hit = distance_to_polylines(np.array(x), np.array(y), lines[key]) <= radius
        gy, gx = np.mgrid[0:h, 0:w] + 0.5
        chance = float((distance_to_polylines(gx, gy, lines[key]) <= radius).mean())
        s = per_label.setdefault(r["label"], {"n": 0, "hits": 0, "chance": 0.0})
        s["n"] += 1
        s["hits"] += int(hit)
        s["chance"] += chance
    if not per_label:
        print("localisation.py: no positive annotated image in the peaks file", file=sys.stderr)
        return 1
    total = {"n": 0, "hits": 0, "chance": 0.0}
    out = {"tolerance": args.tolerance, "labels": {}}
    print(f"{'label':30s} {'n':>5s} {'hit rate':>9s} {'chance':>8s}")
    for name, s in sorted(per_label.items()):
        for k in total:
            total[k] += s[k]
        out["labels"][name] = {"n": s["n"], "hit_rate": s["hits"] / s["n"], "chance": s["chance"] / s["n"]}
        print(f"{name:30s} {s['n']:5d} {s['hits'] / s['n']:9.3f} {s['chance'] / s['n']:8.3f}")
    out["all"] = {"n": total["n"], "hit_rate": total["hits"] / total["n"], "chance": total["chance"] / total["n"]}
    print(f"{'all':30s} {total['n']:5d} {out['all']['hit_rate']:9.3f} {out['all']['chance']:8.3f}")
    if args.json:
        json.dump(out, open(args.json, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
