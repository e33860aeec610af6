#!/usr/bin/env python3
"""PyTorch eager reference for `ranzcr bench`: the same three throughput figures, same config.

What it measures (images per second, like `build/ranzcr bench`):
  loader   the input pipeline alone: read JPEG, decode, resize, augment, collate, over --loader-steps
           (default --steps) batches of the training split (after --warmup batches; epochs are cycled when
           the split is short);
  compute  forward + backward + optimizer step on one fixed batch already on the device, --steps steps
           after --warmup (torch.cuda.synchronize() before the clock is read on CUDA);
  e2e      the real training step fed by a fresh DataLoader epoch, --warmup then --steps steps.

How it matches ranzcr (read from the C++ sources):
  config   the same YAML file and `--set a.b=value` overrides (value parsed as YAML); defaults from
           engine/config/config.h and data/data_config.h; unknown keys are ignored here.
  data     data/dataset_index.cpp: <root>/<train_csv>, label columns = every column but the id and group
           columns unless data.label_columns; images <root>/<image_dir>/<id><image_ext>. The training rows
           are the exact train side of data/split.cpp (group_split / group_kfold, same mt19937_64 draws).
  images   data/image_pipeline.cpp: grayscale decode (full resolution with cv2.imread, or with
           --reduced-decode the same IMREAD_REDUCED_GRAYSCALE_2/4/8 choice as decode_grayscale), prepared:
           resized to the prepared size C (data.cache_size, or image_size * (1 + augment.scale) rounded up
           to 32) with INTER_AREA when shrinking, optional CLAHE(2.0, 8x8); then one warpAffine from C to
           image_size (the resize composed with rotation/scale about the centre + shift; bilinear, black
           border), hflip p=0.5, contrast/brightness, clip to [0, 1]. Images already C x C (PNGs
           pre-resized, the Kaggle practice) skip the first resize.
  loader   torch.utils.data.DataLoader(num_workers=data.num_workers, batch_size=train.batch_size,
           shuffle, drop_last, pin_memory on CUDA, persistent_workers, default prefetch_factor); one
           DataLoader for the loader figure, stopped before the compute figure, a fresh one for e2e.
  model    model.name with in_chans=model.in_channels, num_classes=#labels, dropout=model.dropout:
           timm if it imports, else torchvision (resnet*, efficientnet_b*), else built-in ports of
           models/resnet.cpp (resnet18..152, resnet*d), models/efficientnet.cpp (efficientnet_b0..b7) and
           models/tiny_cnn.cpp; tiny_cnn is always built-in.
  step     BCEWithLogits, AdamW(lr, weight_decay) or SGD(nesterov, momentum), clip_grad_norm_ when
           optim.grad_clip > 0; train.precision auto|fp32|bf16|fp16 (auto: bf16 on CUDA if supported, else
           fp32), train.channels_last auto|true|false (auto: on for CUDA), cudnn.benchmark, non_blocking.

The plain pipeline (--plain): what an ordinary user script does instead of ranzcr's pipeline: cv2.imread
  at full size (grayscale), one cv2.resize to image_size with INTER_AREA, a random hflip (p=0.5), / 255; no
  rotation, shift, zoom, contrast or brightness. The rest (DataLoader, model, step) as above; "implementation"
  is "pytorch-plain", "decode" is "plain".

Options beyond the figures:
  --threads N   torch.set_num_threads(N) (intra-op threads; overrides train.num_threads). compare.sh passes
                ranzcr's "threads" so both sides compute with as many.
  --compile     the compute figure with the model under torch.compile (default mode); the warm-up (at least 2
                steps) includes the compilation, whose time is "compile_seconds". Compute only: the loader
                and e2e figures are null; "implementation" is "pytorch-compile".
  --profile DIR after the figures, profiles 2 warm-up + 5 recorded compute steps on the fixed batch with
                torch.profiler (CPU, plus CUDA on a GPU; record_shapes, so the trace has "Input Dims" and
                "Input Strides"; the device synchronised after each step, as ranzcr's profile does) and writes
                DIR/trace.json (chrome trace: open in https://ui.perfetto.dev), DIR/kernels.json and
                DIR/kernels.md. The table is computed from trace.json by kineto_trace.py (beside this script):
                on CUDA every device activity (kernels, memcpy, memset) by its duration, never the user
                annotations Kineto mirrors on the GPU timeline (ProfilerStep#N, Optimizer.step#...,
                Optimizer.zero_grad#...), so a step's time is not counted twice; on a CPU, where there are no
                kernels, the self time of every cpu_op (its time less that of the cpu_ops nested in it on its
                thread; user scopes are neither rows nor take time off an operator). kernels.json is the schema
                `ranzcr bench --profile` writes too: {"implementation", "device", "steps", "cpu_ms_per_step"
                (host time of a step until it is queued: the CPU side), "wall_ms_per_step" (until the device is
                done), "device_ms_per_step" (all of that time / steps, every row, not only the listed ones),
                "kernel_source" ("cuda kernels" or "cpu operators (self time)"), "kernels": the top 25 by
                total_ms, [{"name", "calls", "total_ms" (all recorded steps), "share" (of all of that kind's
                time)}]}. Also DIR/summary.json and DIR/summary.md (kineto_trace.py summary, label "pytorch"):
                the top 20 with full names and, per kernel, the memory layout (NHWC, NCHW, either, mixed, none)
                of the convolution each call served. A profile that fails leaves the figures standing: one line
                "pytorch reference: profile failed: ..." on stderr, exit status 0.
The JSON also records "threads" and "versions": {"torch", "cudnn" ("9.19.0"), "cublas" ("13.0.2", from the
libcublas this process loaded), "nccl" ("2.28.9")}, null where absent (cublas: null on a CPU run).

Usage: pytorch_reference.py --config FILE [--set k=v ...] [--steps N] [--warmup W] [--loader-steps L] [--out FILE]
                            [--device cpu|cuda] [--reduced-decode | --plain] [--model-source auto|timm|torchvision|builtin]
                            [--threads N] [--compile] [--profile DIR]
Needs torch, numpy, opencv (cv2) and PyYAML: pip install opencv-python-headless numpy pyyaml
"""
import argparse
import contextlib
import csv
import ctypes
import json
import math
import os
import re
import sys
import time

import cv2
import numpy as np
import torch
import torch.nn as nn
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # kineto_trace.py lies beside this script
import kineto_trace  # noqa: E402

M64 = (1 << 64) - 1


def fail(msg):
    sys.exit(f"error: {msg}")


# ---------------------------------------------------------------- config (engine/config/config.cpp defaults)
DEFAULTS = {
    "seed": 42,
    "data": {"root": "datasets/synthetic", "train_csv": "train.csv", "image_dir": "train", "image_ext": ".jpg",
             "id_column": "StudyInstanceUID", "group_column": "PatientID", "label_columns": [],
             "image_size": 256, "cache_size": 0, "val_fraction": 0.2, "folds": 0, "fold": 0, "num_workers": 2,
             "augment": {"hflip": True, "rotate_deg": 8.0, "shift": 0.05, "scale": 0.08,
                         "brightness": 0.15, "contrast": 0.15, "clahe": False}},
    "model": {"name": "resnet18", "in_channels": 1, "dropout": 0.0},
    "optim": {"name": "adamw", "lr": 1e-3, "weight_decay": 1e-4, "momentum": 0.9, "grad_clip": 0.0},
    "train": {"batch_size": 32, "num_threads": 0, "precision": "auto", "channels_last": "auto"},
}


def merge(base, over):
    out = dict(base)
    for k, v in (over or {}).items():
        out[k] = merge(base[k], v) if isinstance(base.get(k), dict) and isinstance(v, dict) else v
    return out


def load_config(path, sets):
    try:
        with open(path) as f:
            user = yaml.safe_load(f) or {}
    except OSError:
        fail(f"config file not found or unreadable: {path}")
    except yaml.YAMLError as e:
        fail(f"{path}: invalid YAML: {e}")
    for s in sets:
        key, eq, value = s.partition("=")
        if not eq or not key:
            fail(f"--set {s}: expected key=value, for example --set train.batch_size=16")
        node = user
        *parents, leaf = key.split(".")
        for p in parents:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[leaf] = yaml.safe_load(value)
    return merge(DEFAULTS, user)


# ---------------------------------------------------------------- data (csv.cpp, dataset_index.cpp, split.cpp)
class MT19937_64:
    """std::mt19937_64, so the split draws the same numbers as data/split.cpp."""

    def __init__(self, seed):
        self.mt = [seed & M64]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & M64)
        self.i = 312

    def __call__(self):
        mt = self.mt
        if self.i >= 312:
            for k in range(312):
                x = (mt[k] & 0xFFFFFFFF80000000) | (mt[(k + 1) % 312] & 0x7FFFFFFF)
                mt[k] = mt[(k + 156) % 312] ^ (x >> 1) ^ (0xB5026F5AA96619E9 if x & 1 else 0)
            self.i = 0
        y = mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        return (y ^ (y >> 43)) & M64


def train_rows(groups, d, seed):
    """The train side of validation_split(): group_kfold when data.folds > 0, else group_split."""
    gid, ids, n = [], {}, 0
    for g in groups:  # dense ids in order of first appearance; an empty name is its own group
        if g == "" or g not in ids:
            if g != "":
                ids[g] = n
            gid.append(n)
            n += 1
        else:
            gid.append(ids[g])
    rng = MT19937_64(seed & M64)
    order = list(range(n))
    for i in range(n - 1, 0, -1):  # Fisher-Yates with rng() % (i + 1), as split.cpp's shuffled()
        j = rng() % (i + 1)
        order[i], order[j] = order[j], order[i]
    is_val = [False] * n
    if int(d["folds"]) > 0:
        folds, fold = int(d["folds"]), int(d["fold"])
        if n < folds:
            fail(f"cannot make {folds} folds from {n} groups")
        size = [0] * n
        for g in gid:
            size[g] += 1
        order.sort(key=lambda g: -size[g])  # stable, like std::stable_sort
        fold_rows = [0] * folds
        for g in order:
            f = fold_rows.index(min(fold_rows))
            fold_rows[f] += size[g]
            is_val[g] = f == fold
    else:
        if n < 2:
            fail("cannot split a data set with fewer than 2 groups (patients)")
        x = float(d["val_fraction"]) * n
        n_val = min(max(int(math.floor(x + 0.5)), 1), n - 1)  # llround, then clamp to [1, n - 1]
        for g in order[:n_val]:
            is_val[g] = True
    return [r for r, g in enumerate(gid) if not is_val[g]]


def load_table(d, seed):
    csv_path = os.path.join(d["root"], d["train_csv"])
    image_dir = os.path.join(d["root"], d["image_dir"])
    if not os.path.isfile(csv_path):
        fail(f"train CSV not found: {csv_path} (data.root / data.train_csv; run `ranzcr synth` or fix the config)")
    if not os.path.isdir(image_dir):
        fail(f"image folder not found: {image_dir} (data.root / data.image_dir)")
    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        fail(f"{csv_path}: no data rows")
    header, rows = rows[0], [r for r in rows[1:] if r]
    idc, grp = d["id_column"], d["group_column"] or ""
    names = list(d["label_columns"] or []) or [h for h in header if h not in (idc, grp)]
    missing = [c for c in [idc] + names if c not in header]
    if missing:
        fail(f"{csv_path}: required columns missing: {', '.join(missing)} (header has: {', '.join(header)})")
    ci, cl = header.index(idc), [header.index(c) for c in names]
    cg = header.index(grp) if grp in header else -1
    paths = [os.path.join(image_dir, r[ci] + d["image_ext"]) for r in rows]
    absent = [os.path.basename(p) for p in paths if not os.path.exists(p)]
    if absent:
        fail(f"{csv_path}: {len(absent)} images missing from {image_dir}: {', '.join(absent[:5])}"
             + (", ..." if len(absent) > 5 else ""))
    try:
        labels = np.array([[float(r[c]) for c in cl] for r in rows], dtype=np.float32)
    except ValueError as e:
        fail(f"{csv_path}: label value is not 0/1: {e}")
    keep = train_rows([r[cg] if cg >= 0 else "" for r in rows], d, seed)
    return [paths[i] for i in keep], labels[keep], names


# ---------------------------------------------------------------- images (data/image_pipeline.cpp)
def jpeg_size(b):
    """(width, height) from the SOFn marker, or None (jpeg_size in image_pipeline.cpp)."""
    i = 2
    while i + 9 < len(b):
        if b[i] != 0xFF:
            return None
        m = b[i + 1]
        if m == 0xFF:
            i += 1
            continue
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):
            return (b[i + 7] << 8) | b[i + 8], (b[i + 5] << 8) | b[i + 6]
        i += 2 + ((b[i + 2] << 8) | b[i + 3])
    return None


def decode_reduced(path, target):
    """decode_grayscale(): reduced-resolution JPEG decode, largest factor keeping the short side >= target."""
    with open(path, "rb") as f:
        b = f.read()
    flags = cv2.IMREAD_GRAYSCALE
    if len(b) > 4 and b[0] == 0xFF and b[1] == 0xD8:
        wh, end = jpeg_size(b), len(b.rstrip(b"\0"))
        if wh is None or end < 4 or b[end - 2:end] != b"\xff\xd9":
            raise RuntimeError(f"corrupt or truncated JPEG {path}")
        side = min(wh)
        for k, flag in ((8, cv2.IMREAD_REDUCED_GRAYSCALE_8), (4, cv2.IMREAD_REDUCED_GRAYSCALE_4),
                        (2, cv2.IMREAD_REDUCED_GRAYSCALE_2)):
            if side >= k * target:
                flags = flag
                break
    return cv2.imdecode(np.frombuffer(b, np.uint8), flags)


def prepared_size(d):
    """prepared_size() in image_pipeline.cpp: data.cache_size, else image_size * (1 + scale) up to 32."""
    if int(d.get("cache_size", 0)) > 0:
        return int(d["cache_size"])
    need = math.ceil(int(d["image_size"]) * (1.0 + max(0.0, float(d["augment"]["scale"]))) - 1e-9)
    return (need + 31) // 32 * 32


class TrainDataset(torch.utils.data.Dataset):
    def __init__(self, paths, labels, d, reduced):
        self.paths, self.labels, self.aug, self.reduced = paths, torch.from_numpy(labels), d["augment"], reduced
        self.size, self.prepared, self.rng, self.pid = int(d["image_size"]), prepared_size(d), None, None

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        s, c, a, path = self.size, self.prepared, self.aug, self.paths[i]
        img = decode_reduced(path, c) if self.reduced else cv2.imread(path, cv2.IMREAD_GRAYSCALE)
        if img is None:
            raise RuntimeError(f"cannot decode image {path} (corrupt or not an image)")
        if img.shape != (c, c):  # prepare_decoded()
            interp = cv2.INTER_AREA if img.shape[0] > c or img.shape[1] > c else cv2.INTER_LINEAR
            img = cv2.resize(img, (c, c), interpolation=interp)
        if a["clahe"]:
            img = cv2.createCLAHE(clipLimit=2.0, tileGridSize=(8, 8)).apply(img)
        if self.pid != os.getpid():  # one stream per worker process, seeded by the DataLoader's worker seed
            self.pid, self.rng = os.getpid(), np.random.default_rng(torch.initial_seed())
        rng = self.rng
        u = rng.random(6)
        angle = (2 * u[0] - 1) * a["rotate_deg"]
        scale = 1 + (2 * u[1] - 1) * a["scale"]
        tx, ty = (2 * u[2] - 1) * a["shift"] * s, (2 * u[3] - 1) * a["shift"] * s
        brightness = (2 * u[4] - 1) * a["brightness"]
        contrast = 1 + (2 * u[5] - 1) * a["contrast"]
        g = np.vstack([cv2.getRotationMatrix2D((0.5 * (s - 1), 0.5 * (s - 1)), angle, scale), [0, 0, 1]])
        g[0, 2] += tx
        g[1, 2] += ty
        f = s / c  # the resize C -> s as a map (pixel centres kept), then the geometry: one warp
        r = np.array([[f, 0, 0.5 * f - 0.5], [0, f, 0.5 * f - 0.5], [0, 0, 1]])
        img = cv2.warpAffine(img, (g @ r)[:2], (s, s), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                             borderValue=0)
        if a["hflip"] and rng.random() < 0.5:
            img = cv2.flip(img, 1)
        out = img.astype(np.float32)  # (x - 0.5) * contrast + 0.5 + brightness, clipped to [0, 1]
        out *= contrast / 255.0
        out += 0.5 - 0.5 * contrast + brightness
        np.clip(out, 0.0, 1.0, out=out)
        return torch.from_numpy(out)[None], self.labels[i]


class PlainDataset(torch.utils.data.Dataset):
    """--plain: what a plain user script does, not what ranzcr does: the full-size cv2.imread, one INTER_AREA
    resize to image_size, a random hflip, scaled to [0, 1]; no other augmentation."""

    def __init__(self, paths, labels, d):
        self.paths, self.labels, self.size = paths, torch.from_numpy(labels), int(d["image_size"])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        img = cv2.imread(self.paths[i], cv2.IMREAD_GRAYSCALE)
        if img is None:
            raise RuntimeError(f"cannot decode image {self.paths[i]} (corrupt or not an image)")
        img = cv2.resize(img, (self.size, self.size), interpolation=cv2.INTER_AREA)
        if np.random.random() < 0.5:  # numpy's stream: the DataLoader seeds each worker's
            img = cv2.flip(img, 1)
        return torch.from_numpy(img.astype(np.float32) / 255.0)[None], self.labels[i]


# ---------------------------------------------------------------- models (models/*.cpp)
def conv(i, o, k, stride=1):
    return nn.Conv2d(i, o, k, stride, k // 2, bias=False)


class Block(nn.Module):  # models/resnet.cpp Block: BasicBlock / Bottleneck, optional avg-pool shortcut
    def __init__(self, cin, planes, stride, bottleneck, avg_down):
        super().__init__()
        out, self.bottleneck = planes * (4 if bottleneck else 1), bottleneck
        if bottleneck:
            self.conv1, self.conv2, self.conv3 = conv(cin, planes, 1), conv(planes, planes, 3, stride), conv(planes, out, 1)
            self.bn3 = nn.BatchNorm2d(out)
        else:
            self.conv1, self.conv2 = conv(cin, planes, 3, stride), conv(planes, planes, 3)
        self.bn1, self.bn2 = nn.BatchNorm2d(planes), nn.BatchNorm2d(planes)
        down = []
        if stride != 1 or cin != out:
            if avg_down and stride != 1:
                down.append(nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False))
            down += [conv(cin, out, 1, 1 if avg_down else stride), nn.BatchNorm2d(out)]
        self.downsample = nn.Sequential(*down)

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        if self.bottleneck:
            y = self.bn3(self.conv3(torch.relu(y)))
        return torch.relu(y + (self.downsample(x) if len(self.downsample) else x))


class ResNet(nn.Module):  # models/resnet.cpp: torchvision layout; *d = deep stem + avg-pool downsampling
    LAYERS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3],
              200: [3, 24, 36, 3]}

    def __init__(self, depth, variant_d, in_ch, num_classes, dropout):
        super().__init__()
        bottleneck = depth >= 50
        stem = ([conv(in_ch, 32, 3, 2), nn.BatchNorm2d(32), nn.ReLU(True), conv(32, 32, 3), nn.BatchNorm2d(32),
                 nn.ReLU(True), conv(32, 64, 3)] if variant_d else [conv(in_ch, 64, 7, 2)])
        self.stem = nn.Sequential(*stem, nn.BatchNorm2d(64), nn.ReLU(True), nn.MaxPool2d(3, 2, 1))
        cin, stages = 64, []
        for i, n in enumerate(self.LAYERS[depth]):
            blocks = []
            for b in range(n):
                blocks.append(Block(cin, 64 << i, 2 if b == 0 and i > 0 else 1, bottleneck, variant_d))
                cin = (64 << i) * (4 if bottleneck else 1)
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.dropout, self.fc = nn.Dropout(dropout), nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(self.stages(self.stem(x)), 1), 1)
        return self.fc(self.dropout(x))


def make_divisible(v, divisor=8):  # models/efficientnet.cpp make_divisible
    n = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return n + divisor if n < 0.9 * v else n


class SqueezeExcite(nn.Module):  # models/efficientnet.cpp: conv_reduce and conv_expand 1x1 with bias
    def __init__(self, channels, reduced):
        super().__init__()
        self.conv_reduce, self.conv_expand = nn.Conv2d(channels, reduced, 1), nn.Conv2d(reduced, channels, 1)

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.conv_expand(nn.functional.silu(self.conv_reduce(s))))


class MBConv(nn.Module):
    """models/efficientnet.cpp MBConv, timm's names: InvertedResidual (conv_pw, bn1, conv_dw, bn2, se, conv_pwl,
    bn3) or, without expansion, DepthwiseSeparableConv (conv_dw, bn1, se, conv_pw, bn2). SE width: input // 4."""

    def __init__(self, cin, out, expand_ratio, k, stride, drop_path):
        super().__init__()
        mid = make_divisible(cin * expand_ratio)
        self.expand, self.residual, self.drop_path = mid != cin, stride == 1 and cin == out, drop_path
        dw = nn.Conv2d(mid, mid, k, stride, (k - 1) // 2, groups=mid, bias=False)
        se, project = SqueezeExcite(mid, max(1, cin // 4)), conv(mid, out, 1)
        bn_dw, bn_project = nn.BatchNorm2d(mid), nn.BatchNorm2d(out)
        if self.expand:
            self.conv_pw, self.bn1 = conv(cin, mid, 1), nn.BatchNorm2d(mid)
            self.conv_dw, self.bn2, self.se, self.conv_pwl, self.bn3 = dw, bn_dw, se, project, bn_project
        else:
            self.conv_dw, self.bn1, self.se, self.conv_pw, self.bn2 = dw, bn_dw, se, project, bn_project

    def forward(self, x):
        silu = nn.functional.silu
        if self.expand:
            y = self.bn3(self.conv_pwl(self.se(silu(self.bn2(self.conv_dw(silu(self.bn1(self.conv_pw(x)))))))))
        else:
            y = self.bn2(self.conv_pw(self.se(silu(self.bn1(self.conv_dw(x))))))
        if not self.residual:
            return y
        if self.training and self.drop_path > 0:  # stochastic depth, per sample
            keep = 1 - self.drop_path
            y = y * torch.empty(y.shape[0], 1, 1, 1, dtype=y.dtype, device=y.device).bernoulli_(keep).div_(keep)
        return y + x


class EfficientNet(nn.Module):  # models/efficientnet.cpp: B0 stages scaled by (width, depth); timm's names
    SCALE = [(1.0, 1.0), (1.0, 1.1), (1.1, 1.2), (1.2, 1.4), (1.4, 1.8), (1.6, 2.2), (1.8, 2.6), (2.0, 3.1)]
    B0 = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
          (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]  # (expand, kernel, stride, out, layers)

    def __init__(self, b, in_ch, num_classes, dropout):
        super().__init__()
        width, depth = self.SCALE[b]
        ch, reps = (lambda c: make_divisible(c * width)), (lambda n: int(math.ceil(n * depth)))
        total, block_id, cin = sum(reps(s[4]) for s in self.B0), 0, ch(32)
        self.conv_stem, self.bn1 = conv(in_ch, cin, 3, 2), nn.BatchNorm2d(cin)
        stages = []
        for expand, k, stride, out, layers in self.B0:
            blocks = []
            for i in range(reps(layers)):
                blocks.append(MBConv(cin, ch(out), expand, k, stride if i == 0 else 1, 0.2 * block_id / total))
                block_id, cin = block_id + 1, ch(out)
            stages.append(nn.Sequential(*blocks))
        self.blocks = nn.Sequential(*stages)
        features = ch(1280)
        self.conv_head, self.bn2 = conv(cin, features, 1), nn.BatchNorm2d(features)
        self.dropout, self.classifier = nn.Dropout(dropout), nn.Linear(features, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        r = 1 / math.sqrt(num_classes)
        nn.init.uniform_(self.classifier.weight, -r, r)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, x):
        x = nn.functional.silu(self.bn1(self.conv_stem(x)))
        x = nn.functional.silu(self.bn2(self.conv_head(self.blocks(x))))
        return self.classifier(self.dropout(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1)))


class TinyCnn(nn.Module):  # models/tiny_cnn.cpp
    def __init__(self, in_ch, num_classes, dropout):
        super().__init__()
        layers, cin = [], in_ch
        for w in (16, 32, 64, 128, 128):
            for stride in (2, 1):
                layers += [nn.Conv2d(cin, w, 3, stride, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(True)]
                cin = w
        self.features, self.dropout, self.fc = nn.Sequential(*layers), nn.Dropout(dropout), nn.Linear(cin, num_classes)

    def forward(self, x):
        x = torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1)
        return self.fc(self.dropout(x))


def create_model(name, in_ch, num_classes, dropout, source):
    """(model, source): timm, else torchvision, else the built-in ports (source forces one)."""
    if name == "tiny_cnn":
        return TinyCnn(in_ch, num_classes, dropout), "builtin"
    if source in ("auto", "timm"):
        try:
            import timm
            return timm.create_model(name, pretrained=False, in_chans=in_ch, num_classes=num_classes,
                                     drop_rate=dropout), "timm"
        except ImportError:
            if source == "timm":
                fail("--model-source timm: timm does not import (pip install timm)")
    if source in ("auto", "torchvision") and not name.endswith("d"):
        try:
            import torchvision.models as tvm
            m = getattr(tvm, name)(weights=None)
            if name.startswith("resnet"):
                m.conv1 = nn.Conv2d(in_ch, 64, 7, 2, 3, bias=False)
                m.fc = nn.Sequential(nn.Dropout(dropout), nn.Linear(m.fc.in_features, num_classes))
            else:  # efficientnet_b*: features[0][0] is the stem conv, classifier = (Dropout, Linear)
                c = m.features[0][0]
                m.features[0][0] = nn.Conv2d(in_ch, c.out_channels, c.kernel_size, c.stride, c.padding, bias=False)
                m.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(m.classifier[1].in_features, num_classes))
            return m, "torchvision"
        except (ImportError, AttributeError, RuntimeError):
            if source == "torchvision":
                fail(f"--model-source torchvision: torchvision does not import or has no {name}")
    depth = name[6:-1] if name.endswith("d") else name[6:]
    if name.startswith("resnet") and depth.isdigit() and int(depth) in ResNet.LAYERS:
        return ResNet(int(depth), name.endswith("d"), in_ch, num_classes, dropout), "builtin"
    if re.fullmatch(r"efficientnet_b[0-7]", name):
        return EfficientNet(int(name[-1]), in_ch, num_classes, dropout), "builtin"
    fail(f"model '{name}' needs timm (pip install timm); built in: tiny_cnn, resnet18..152, resnet*d, "
         "efficientnet_b0..b7")


# ---------------------------------------------------------------- benchmark
def cycle(loader):
    """Batches of successive epochs, without end (the split may hold fewer than warmup + steps batches)."""
    while True:
        got = False
        for batch in loader:
            got = True
            yield batch
        if not got:
            fail("the training split has fewer images than one batch (lower train.batch_size)")


def close_loader(loader):
    """Stops a DataLoader's workers now: persistent workers would otherwise finish their prefetched batches
    (prefetch_factor x num_workers) while the next figure is being timed."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    loader._iterator = None


def resolve_channels_last(value, cuda):
    v = str(value).lower()  # YAML true/false arrive as booleans, auto as a string
    if v not in ("auto", "true", "false"):
        fail(f"train.channels_last '{value}': expected auto, true or false")
    return cuda if v == "auto" else v == "true"


# ---------------------------------------------------------------- versions, profile
def dotted_cudnn(v):
    """torch.backends.cudnn.version() (91900, or 8907 before cuDNN 9) as "9.19.0" / "8.9.7"."""
    if not v:
        return None
    major, rest = (v // 10000, v % 10000) if v >= 90000 else (v // 1000, v % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def cublas_version():
    """The version of the libcublas this process loaded ("13.0.2"), from cublasGetProperty; None when none is
    loaded (a CPU run). The soname's number when the call is not there."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if re.search(r"/libcublas\.so[.\d]*$", line.strip())})
    except OSError:
        return None
    for path in paths:
        try:
            get = ctypes.CDLL(path).cublasGetProperty
            get.argtypes, get.restype = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)], ctypes.c_int
            parts = []
            for prop in (0, 1, 2):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                v = ctypes.c_int()
                if get(prop, ctypes.byref(v)) != 0:
                    raise OSError("cublasGetProperty failed")
                parts.append(str(v.value))
            return ".".join(parts)
        except (OSError, AttributeError):
            m = re.search(r"libcublas\.so\.([\d.]+)$", path)
            if m:
                return m.group(1)
    return None


def library_versions(cuda):
    try:
        cudnn = dotted_cudnn(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None
    except Exception:  # a CUDA build without a loadable cuDNN
        cudnn = None
    nccl = None
    try:
        if torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
    except Exception:  # no NCCL in this build
        nccl = None
    return {"torch": torch.__version__, "cudnn": cudnn, "cublas": cublas_version() if cuda else None, "nccl": nccl}


def profile_steps(step, x, y, sync, cuda, out_dir, meta, warmup=2, active=5, top=25):
    """Profiles warmup + active compute steps with torch.profiler and writes out_dir/trace.json, kernels.json and
    kernels.md (the schema `ranzcr bench --profile` writes), plus summary.json and summary.md (kineto_trace.py
    summary: the top 20 with the conv layouts they served). The table is read back from trace.json by
    kineto_trace.py, the rules `ranzcr bench` follows: device activities on CUDA (not the user annotations Kineto
    mirrors on the GPU timeline), cpu_op self time on a CPU. Returns the kernels.json object."""
    from torch.profiler import ProfilerActivity, profile, schedule

    os.makedirs(out_dir, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    host_ms, wall_ms = [], []
    sync()
    with profile(activities=activities, schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1),
                 record_shapes=True) as prof:
        for _ in range(warmup + active):
            t0 = time.perf_counter()
            step(x, y)
            t1 = time.perf_counter()
            sync()  # each step starts with the device idle, as in ranzcr's profile (engine/jobs/step_profile.cpp)
            host_ms.append(1e3 * (t1 - t0))
            wall_ms.append(1e3 * (time.perf_counter() - t0))
            prof.step()
    trace = os.path.join(out_dir, "trace.json")
    prof.export_chrome_trace(trace)
    events = kineto_trace.load(trace)
    rows = kineto_trace.kernel_table(events, cuda)
    result = dict(meta)
    result.update({
        "steps": active,
        "cpu_ms_per_step": round(sum(host_ms[warmup:]) / active, 3),
        "wall_ms_per_step": round(sum(wall_ms[warmup:]) / active, 3),
        "device_ms_per_step": round(sum(r["total_ms"] for r in rows) / active, 3),
        "kernel_source": kineto_trace.KERNEL_SOURCE[cuda],
        "kernels": [{"name": r["name"], "calls": r["calls"], "total_ms": round(r["total_ms"], 3),
                     "share": round(r["share"], 4)} for r in rows[:top]],
    })
    with open(os.path.join(out_dir, "kernels.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    write_kernels_md(result, os.path.join(out_dir, "kernels.md"))
    kineto_trace.write_summary(events, cuda, trace, "pytorch", os.path.join(out_dir, "summary.json"),
                               os.path.join(out_dir, "summary.md"), top=20)
    return result


def write_kernels_md(result, path):
    """kernels.md: the kernels.json table, names cut at 100 characters (summary.md has them whole)."""
    lines = [f"Profile of {result['steps']} steps of {result['implementation']} on {result['device']}: "
             f"{result['cpu_ms_per_step']:.2f} ms per step on the host (until queued), {result['wall_ms_per_step']:.2f} "
             f"ms with the device done, {result['device_ms_per_step']:.2f} ms of {result['kernel_source']}", "",
             "| kernel | calls | total ms | share |", "|---|---:|---:|---:|"]
    for k in result["kernels"]:
        name = (k["name"] if len(k["name"]) <= 100 else k["name"][:97] + "...").replace("|", "/")
        lines.append(f"| {name} | {k['calls']} | {k['total_ms']:.3f} | {100 * k['share']:.1f}% |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--loader-steps", type=int, default=0, help="timed batches of the loader figure (0: --steps)")
    p.add_argument("--out")
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--reduced-decode", action="store_true", help="decode JPEGs at 1/2, 1/4, 1/8 like ranzcr")
    p.add_argument("--plain", action="store_true",
                   help="a plain user script's pipeline: full-size cv2.imread, INTER_AREA resize, hflip only")
    p.add_argument("--model-source", choices=["auto", "timm", "torchvision", "builtin"], default="auto")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (torch.set_num_threads); 0: train.num_threads")
    p.add_argument("--compile", action="store_true", help="compute figure only, the model under torch.compile")
    p.add_argument("--profile", metavar="DIR",
                   help="also profile 2 + 5 compute steps: DIR/trace.json, kernels.json, kernels.md, summary.json, summary.md")
    args = p.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.loader_steps < 0:
        fail("--steps must be >= 1, --warmup and --loader-steps >= 0")
    if args.threads < 0:
        fail(f"--threads must be >= 0, got {args.threads}")
    cfg = load_config(args.config, args.set)
    d, t, o, mc = cfg["data"], cfg["train"], cfg["optim"], cfg["model"]
    seed = int(cfg["seed"])
    if args.device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: no CUDA device visible to this torch build")
    device = torch.device("cuda:0" if (args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda" else "cpu")
    cuda = device.type == "cuda"
    threads = args.threads or int(t["num_threads"])
    if threads > 0:
        torch.set_num_threads(threads)
    precision = str(t.get("precision", "auto")).lower()
    if precision == "auto":
        precision = "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
    if precision not in ("fp32", "bf16", "fp16"):
        fail(f"train.precision must be auto, fp32, bf16 or fp16, got '{precision}'")
    if precision == "bf16" and cuda and not torch.cuda.is_bf16_supported():
        fail(f"train.precision bf16: GPU {device} has no bf16 support (compute capability < 8.0); use fp16 or auto")
    channels_last = resolve_channels_last(t.get("channels_last", "auto"), cuda)
    if cuda:
        torch.backends.cudnn.benchmark = True

    paths, labels, names = load_table(d, seed)
    bs, workers, size = int(t["batch_size"]), int(d["num_workers"]), int(d["image_size"])
    if args.plain and (args.reduced_decode or args.compile):
        fail("--plain is a pipeline of its own: not with --reduced-decode or --compile")
    dataset = PlainDataset(paths, labels, d) if args.plain else TrainDataset(paths, labels, d, args.reduced_decode)

    def make_loader(epoch):
        return torch.utils.data.DataLoader(
            dataset, batch_size=bs, shuffle=True, drop_last=True, num_workers=workers, pin_memory=cuda,
            persistent_workers=workers > 0, generator=torch.Generator().manual_seed(seed + epoch))

    torch.manual_seed(seed)
    model, source = create_model(mc["name"], int(mc["in_channels"]), len(names), float(mc["dropout"]), args.model_source)
    model = model.to(device, memory_format=torch.channels_last if channels_last else torch.contiguous_format).train()
    params = list(model.parameters())
    if args.compile:
        model = torch.compile(model)  # default mode; compiles on the first step (in the warm-up)
    if o["name"] == "sgd":
        opt = torch.optim.SGD(params, lr=float(o["lr"]), momentum=float(o["momentum"]), nesterov=True,
                              weight_decay=float(o["weight_decay"]))
    else:
        opt = torch.optim.AdamW(params, lr=float(o["lr"]), weight_decay=float(o["weight_decay"]))
    loss_fn = nn.BCEWithLogitsLoss()
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    in_ch, clip = int(mc["in_channels"]), float(o["grad_clip"])

    def to_device(images, targets):
        x = images.to(device, non_blocking=True)
        if in_ch != 1:
            x = x.expand(-1, in_ch, -1, -1)
        x = x.contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
        return x, targets.to(device, non_blocking=True)

    def step(x, y):
        with torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext():
            loss = loss_fn(model(x).float(), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
        else:
            loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    impl = "pytorch-compile" if args.compile else "pytorch-plain" if args.plain else "pytorch"
    decode = "plain" if args.plain else "reduced" if args.reduced_decode else "full"
    print(f"pytorch reference: {len(paths)} training images, {len(names)} labels, {mc['name']} ({source}"
          f"{', torch.compile' if args.compile else ''}), {device}, {precision}, "
          f"decode {decode}", flush=True)
    loader_steps = args.loader_steps or args.steps
    loader_ips = e2e_ips = compile_seconds = None
    warmup = max(args.warmup, 2) if args.compile else args.warmup
    if args.compile:  # compute only: one batch for it, no loader figure
        fixed = next(iter(torch.utils.data.DataLoader(dataset, batch_size=bs, shuffle=True, drop_last=True,
                                                      num_workers=0, generator=torch.Generator().manual_seed(seed))),
                     None)
        if fixed is None:
            fail("the training split has fewer images than one batch (lower train.batch_size)")
    else:  # loader alone (worker start-up falls in the warm-up batches)
        loader = make_loader(0)
        it = cycle(loader)
        fixed = None
        for _ in range(args.warmup):
            fixed = next(it)
        t0, n = time.perf_counter(), 0
        for _ in range(loader_steps):
            batch = next(it)
            n += batch[0].shape[0]
        loader_ips = n / (time.perf_counter() - t0)
        if fixed is None:
            fixed = batch
        it.close()
        close_loader(loader)
    # compute on one fixed batch, with the loader stopped
    x, y = to_device(*fixed)
    for i in range(warmup):
        t0 = time.perf_counter()
        step(x, y)
        if i == 0 and args.compile:
            sync()
            compile_seconds = time.perf_counter() - t0
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step(x, y)
    sync()
    compute_ips = args.steps * x.shape[0] / (time.perf_counter() - t0)
    if not args.compile:  # end to end: a fresh DataLoader feeding the real step
        loader = make_loader(1)
        it = cycle(loader)
        for _ in range(args.warmup):
            step(*to_device(*next(it)))
        sync()
        t0, n = time.perf_counter(), 0
        for _ in range(args.steps):
            images, targets = next(it)
            n += images.shape[0]
            step(*to_device(images, targets))
        sync()
        e2e_ips = n / (time.perf_counter() - t0)
        it.close()
        close_loader(loader)

    def rounded(v):
        return None if v is None else round(v, 2)

    result = {
        "implementation": impl, "device": str(device), "model": mc["name"], "image_size": size,
        "batch_size": bs, "precision": precision, "channels_last": channels_last, "threads": torch.get_num_threads(),
        "loader_workers": workers, "world_size": 1, "steps": args.steps, "warmup": warmup,
        "loader_steps": None if args.compile else loader_steps, "torch_version": torch.__version__,
        "loader_images_per_sec": rounded(loader_ips), "compute_images_per_sec": rounded(compute_ips),
        "e2e_images_per_sec": rounded(e2e_ips), "decode": decode,
        "model_source": source, "compile": args.compile, "compile_seconds": rounded(compile_seconds),
        "opencv_version": cv2.__version__, "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "versions": library_versions(cuda),
    }
    # The table of `ranzcr bench` (engine/jobs/bench.cpp bench_table), plus the reference's own settings.
    print(f"bench (pytorch reference{', torch.compile' if args.compile else ', plain' if args.plain else ''}): {mc['name']} {size} px, batch {bs} x 1 rank(s), {precision}"
          f"{', channels_last' if channels_last else ''}, device {device}, {result['threads']} threads, {workers} "
          f"loader workers, {args.steps} steps after {warmup} warm-up; decode {result['decode']}, model from "
          f"{source}, torch {torch.__version__}")
    v = result["versions"]
    print(f"  versions: cuDNN {v['cudnn'] or '-'}, cuBLAS {v['cublas'] or '-'}, NCCL {v['nccl'] or '-'}"
          + (f"; compiled in {compile_seconds:.1f} s (first step)" if compile_seconds is not None else ""))
    for key, what in (("loader", "read, decode, augment, collate"), ("compute", "forward, backward, step; batch on device"),
                      ("e2e", "training step fed by the loader")):
        value = result[key + "_images_per_sec"]
        shown = f"{value:>10.1f}" if value is not None else f"{'-':>10}"
        print(f"  {key:<8} {shown} images/s  ({what}{'; not measured with --compile' if value is None else ''})")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        print(f"wrote {args.out}")
    if args.profile:
        try:
            prof = profile_steps(step, x, y, sync, cuda, args.profile, {"implementation": impl, "device": str(device)})
        except Exception as e:  # the figures are out already; a failed profile must not cost them
            reason = " ".join(str(e).split()) or type(e).__name__
            print(f"pytorch reference: profile failed: {reason} (the figures in {args.out or 'the table above'} "
                  f"stand)", file=sys.stderr)
            sys.exit(0)
        print(f"profile: {prof['steps']} steps, {prof['cpu_ms_per_step']:.2f} ms host time and "
              f"{prof['device_ms_per_step']:.2f} ms of {prof['kernel_source']} per step; wrote "
              f"{os.path.join(args.profile, 'trace.json')}, kernels.json, kernels.md, summary.json, summary.md")


if __name__ == "__main__":
    main()
