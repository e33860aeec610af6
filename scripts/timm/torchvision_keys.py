#!/usr/bin/env python3
"""Writes torchvision's state-dict keys and shapes for the zoo's EfficientNets and ResNets, one file per
model: tests/models/torchvision_keys/<name>.txt, lines "<key> <dtype> <d0,d1,...>" (a scalar has an empty
shape), the format of tests/models/timm_keys/. tests/models/timm_names_test.cpp checks that
timm_names_from_torchvision turns each list into our model's keys and shapes.

Uses the real torchvision model code on the local torch: `pip download torchvision==0.28.0 --no-deps`
(the release paired with torch 2.13), unzip the wheel into a folder, then
    python3 scripts/timm/torchvision_keys.py --torchvision-dir FOLDER --out tests/models/torchvision_keys
The local torch build cannot load torchvision's compiled ops (torchvision::nms ...), so the two modules
that register fake/autograd kernels for them at import time are stubbed; the model definitions are pure
Python and run unchanged. No weights are downloaded (weights=None). torchvision models take 3 input
channels; only the stem conv's shape depends on it.
"""
import argparse
import os
import sys
import types

MODELS = [f"efficientnet_b{i}" for i in range(8)] + ["resnet18", "resnet34", "resnet50", "resnet101",
                                                      "resnet152"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torchvision-dir", required=True, help="folder holding the unpacked torchvision package")
    ap.add_argument("--out", required=True)
    ap.add_argument("--num-classes", type=int, default=11)
    args = ap.parse_args()
    for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
        sys.modules[name] = types.ModuleType(name)
    sys.path.insert(0, args.torchvision_dir)
    import torchvision
    import torchvision.models as models

    os.makedirs(args.out, exist_ok=True)
    for name in MODELS:
        model = getattr(models, name)(weights=None, num_classes=args.num_classes)
        state = model.state_dict()
        with open(os.path.join(args.out, name + ".txt"), "w") as f:
            f.write(f"# torchvision {torchvision.__version__} models.{name}(weights=None, "
                    f"num_classes={args.num_classes}).state_dict(); written by scripts/timm/torchvision_keys.py\n")
            for key, t in state.items():
                dtype = str(t.dtype).replace("torch.", "")
                f.write(f"{key} {dtype} {','.join(str(d) for d in t.shape)}\n")
        print(name, len(state), sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
