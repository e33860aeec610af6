#!/usr/bin/env python3
"""The Kaggle practice for large X-rays: resize every image once to PNGs of a fixed side, then train on those.

Writes a copy of a data set (Kaggle layout) whose images are grayscale PNGs of SIDE x SIDE, resized with
OpenCV's INTER_AREA (as ranzcr prepares images): <out>/train.csv (copied), <out>/<image_dir>/<id>.png.
Used as the PyTorch side of the image-cache comparison (docs/benchmarks.md): point
scripts/bench/pytorch_reference.py at <out> with --set data.image_ext=.png.

Usage: pre_resize.py --root DATASET --out DIR --side 576 [--image-dir train] [--image-ext .jpg] [--workers N]
"""
import argparse
import csv
import multiprocessing
import os
import shutil
import sys
import time

import cv2


def resize_one(job):
    src, dst, side = job
    img = cv2.imread(src, cv2.IMREAD_GRAYSCALE)
    if img is None:
        return f"cannot decode {src}"
    interp = cv2.INTER_AREA if img.shape[0] > side or img.shape[1] > side else cv2.INTER_LINEAR
    if not cv2.imwrite(dst, cv2.resize(img, (side, side), interpolation=interp)):
        return f"cannot write {dst}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--side", type=int, required=True)
    ap.add_argument("--image-dir", default="train")
    ap.add_argument("--image-ext", default=".jpg")
    ap.add_argument("--csv", default="train.csv")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    a = ap.parse_args()
    if os.path.exists(a.out):
        sys.exit(f"error: {a.out} exists")
    with open(os.path.join(a.root, a.csv), newline="") as f:
        ids = [row[0] for i, row in enumerate(csv.reader(f)) if i > 0 and row]
    os.makedirs(os.path.join(a.out, a.image_dir))
    shutil.copy(os.path.join(a.root, a.csv), os.path.join(a.out, a.csv))
    jobs = [(os.path.join(a.root, a.image_dir, i + a.image_ext), os.path.join(a.out, a.image_dir, i + ".png"), a.side)
            for i in ids]
    start = time.time()
    with multiprocessing.Pool(a.workers) as pool:
        for n, err in enumerate(pool.imap_unordered(resize_one, jobs, chunksize=16), 1):
            if err:
                sys.exit(f"error: {err}")
            if n % 2000 == 0 or n == len(jobs):
                print(f"pre_resize: {n}/{len(jobs)} images, {n / (time.time() - start):.0f} images/s", flush=True)
    print(f"pre_resize: {len(jobs)} PNGs of {a.side} x {a.side} in {a.out} ({time.time() - start:.1f} s)")


if __name__ == "__main__":
    main()
