#!/usr/bin/env python3
"""Compares ranzcr's logits with timm's for Hub weights: timm loads the weights file the way
create_model(pretrained=True) does (its own adapt_input_conv for in_chans != 3), runs the input in eval mode
in float32 on the CPU, and prints the largest absolute difference from ranzcr's logits.

    python3 tests/hub/timm_logits.py --model resnet18 --weights FILE.safetensors --in-chans 1 --num-classes 1000 \
        --data RANZCR.safetensors [--tol 1e-4]

RANZCR.safetensors holds "__input__" [N, C, H, W] and "__logits__" [N, classes] float32 (written by
tests/apps/pretrained_hub_test.cpp). Exit 0 within --tol, 1 above it, 77 without torch/timm/safetensors.
"""
import argparse
import os
import sys

try:
    import torch
    from safetensors.torch import load_file
except Exception as e:
    print(f"skip: {type(e).__name__}: {e}")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "timm"))
from timm_stubs import StubFinder  # noqa: E402


def import_timm():
    try:
        import timm
        return timm
    except Exception:
        for name in [n for n in sys.modules if n.split(".")[0] in ("timm", "torchvision", "PIL")]:
            del sys.modules[name]
        sys.meta_path.insert(0, StubFinder(("torchvision", "PIL")))
        import timm
        return timm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--in-chans", type=int, required=True)
    ap.add_argument("--num-classes", type=int, required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    try:
        timm = import_timm()
    except Exception as e:
        print(f"skip: import timm failed ({type(e).__name__}: {e})")
        sys.exit(77)
    model = timm.create_model(args.model, pretrained=True, pretrained_cfg_overlay=dict(file=args.weights),
                              in_chans=args.in_chans, num_classes=args.num_classes).eval()
    data = load_file(args.data)
    with torch.no_grad():
        logits = model(data["__input__"].float())
    diff = (logits - data["__logits__"]).abs().max().item()
    print(f"{args.model} in_chans={args.in_chans}: max |logit| {logits.abs().max().item():.4g}, "
          f"max |difference| {diff:.3g} (tolerance {args.tol:g})")
    sys.exit(0 if diff <= args.tol else 1)


if __name__ == "__main__":
    main()
