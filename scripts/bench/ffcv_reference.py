#!/usr/bin/env python3
"""FFCV's loader over the same pre-resized images, for the image-cache comparison in docs/benchmarks.md.

  ffcv_reference.py write --root PNG_DATASET --out FILE.beton [--limit N] [--workers 2]
  ffcv_reference.py time  --beton FILE.beton [--image-size 512] [--batch-size 32] [--workers 2]
                          [--warmup 5] [--loader-steps 100] [--out FILE.json]

`write` stores the images of PNG_DATASET (scripts/bench/pre_resize.py's copy: grayscale PNGs at the cache size)
in FFCV's format the way FFCV stores raw pixels (RGBImageField, write_mode='raw': FFCV's image fields are
3-channel, so each gray image is stored as three equal channels, 3x the bytes of data.cache), with the 11
labels. `time` reads it with FFCV's Loader (RANDOM order, os_cache=True: the file through the page cache, as
data.cache's memory map), decoding with FFCV's random-resized-crop decoder to IMAGE_SIZE (zoom 0.85-1 of the
area, square: FFCV has no rotation), a random flip and the scaling to floats in [0, 1], batches of
BATCH_SIZE, WORKERS threads; it prints and writes loader_images_per_sec like `ranzcr bench`.
Needs `pip install ffcv` (it builds against Debian's libturbojpeg0-dev and libopencv-dev) with numba and torch.
"""
import argparse
import csv
import json
import os
import sys
import time

import cv2
import numpy as np


def write(a):
    from ffcv.fields import NDArrayField, RGBImageField
    from ffcv.writer import DatasetWriter

    with open(os.path.join(a.root, "train.csv")) as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1 : 1 + a.limit] if a.limit else rows[1:]
    labels = [i for i, name in enumerate(header) if name not in ("StudyInstanceUID", "PatientID")]

    class Images:
        def __len__(self):
            return len(rows)

        def __getitem__(self, i):
            path = os.path.join(a.root, "train", rows[i][0] + ".png")
            gray = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
            if gray is None:
                sys.exit(f"error: cannot read {path}")
            y = np.array([float(rows[i][j]) for j in labels], dtype=np.float32)
            return np.ascontiguousarray(np.repeat(gray[:, :, None], 3, axis=2)), y

    fields = {"image": RGBImageField(write_mode="raw", max_resolution=max(cv2.imread(
                  os.path.join(a.root, "train", rows[0][0] + ".png"), cv2.IMREAD_GRAYSCALE).shape)),
              "label": NDArrayField(shape=(len(labels),), dtype=np.dtype("float32"))}
    t0 = time.perf_counter()
    DatasetWriter(a.out, fields, num_workers=a.workers).from_indexed_dataset(Images())
    print(f"ffcv_reference: wrote {len(rows)} images to {a.out} in {time.perf_counter() - t0:.1f} s "
          f"({os.path.getsize(a.out) / 1e9:.2f} GB)")


def timed(a):
    import torch
    from ffcv.fields.decoders import NDArrayDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, ToTensor, ToTorchImage

    torch.set_num_threads(a.workers)
    image = [RandomResizedCropRGBImageDecoder((a.image_size, a.image_size), scale=(0.85, 1.0), ratio=(1.0, 1.0)),
             RandomHorizontalFlip(),
             NormalizeImage(np.zeros(3), np.full(3, 255.0), np.float32),
             ToTensor(), ToTorchImage()]
    loader = Loader(a.beton, batch_size=a.batch_size, num_workers=a.workers, order=OrderOption.RANDOM,
                    drop_last=True, os_cache=True, pipelines={"image": image, "label": [NDArrayDecoder(), ToTensor()]})
    it = iter(loader)
    for _ in range(a.warmup):
        next(it)
    t0, n = time.perf_counter(), 0
    for _ in range(a.loader_steps):
        x, y = next(it)
        n += x.shape[0]
    ips = n / (time.perf_counter() - t0)
    assert x.dtype == torch.float32 and x.shape[1:] == (3, a.image_size, a.image_size), (x.dtype, x.shape)
    result = {"implementation": "ffcv", "loader_images_per_sec": round(ips, 2), "image_size": a.image_size,
              "batch_size": a.batch_size, "loader_workers": a.workers, "warmup": a.warmup,
              "loader_steps": a.loader_steps, "beton": a.beton}
    print(f"bench (ffcv): {a.image_size} px, batch {a.batch_size}, {a.workers} threads, {a.loader_steps} batches "
          f"after {a.warmup} warm-up\n  loader {ips:12.1f} images/s  (read, crop-resize, flip, scale)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--root", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--limit", type=int, default=0)
    w.add_argument("--workers", type=int, default=2)
    t = sub.add_parser("time")
    t.add_argument("--beton", required=True)
    t.add_argument("--image-size", type=int, default=512)
    t.add_argument("--batch-size", type=int, default=32)
    t.add_argument("--workers", type=int, default=2)
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--loader-steps", type=int, default=100)
    t.add_argument("--out", default="")
    a = p.parse_args()
    write(a) if a.cmd == "write" else timed(a)


if __name__ == "__main__":
    main()
