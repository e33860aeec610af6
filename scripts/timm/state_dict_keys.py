#!/usr/bin/env python3
"""Writes timm's state-dict keys and shapes for our zoo's models, one file per model:
tests/models/timm_keys/<name>.txt, lines "<key> <dtype> <d0,d1,...>" (a scalar has an empty shape).

Uses the real timm model code on the local torch: `pip download timm==1.0.31 --no-deps`, unzip the wheel
into a folder, then
    python3 scripts/timm/state_dict_keys.py --timm-dir FOLDER --out tests/models/timm_keys
timm's package imports torchvision, PIL, huggingface_hub and safetensors at import time (data transforms,
the hub); none of them takes part in building a model, so they are stubbed here (the local torch build
cannot load torchvision's ops). No weights are downloaded: create_model(pretrained=False).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timm_stubs import StubFinder  # noqa: E402

MODELS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "resnet18d", "resnet34d",
          "resnet50d", "resnet101d", "resnet152d", "resnet200d"] + [f"efficientnet_b{i}" for i in range(8)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timm-dir", required=True, help="folder holding the unpacked timm package")
    ap.add_argument("--out", required=True)
    ap.add_argument("--in-chans", type=int, default=1)
    ap.add_argument("--num-classes", type=int, default=11)
    args = ap.parse_args()
    sys.meta_path.insert(0, StubFinder(("torchvision", "huggingface_hub", "safetensors", "PIL")))
    sys.path.insert(0, args.timm_dir)
    import timm

    os.makedirs(args.out, exist_ok=True)
    for name in MODELS:
        model = timm.create_model(name, pretrained=False, in_chans=args.in_chans, num_classes=args.num_classes)
        with open(os.path.join(args.out, name + ".txt"), "w") as f:
            f.write(f"# timm {timm.__version__} create_model('{name}', in_chans={args.in_chans}, "
                    f"num_classes={args.num_classes}).state_dict(); written by scripts/timm/state_dict_keys.py\n")
            for key, t in model.state_dict().items():
                dtype = str(t.dtype).replace("torch.", "")
                f.write(f"{key} {dtype} {','.join(str(d) for d in t.shape)}\n")
        print(name, len(model.state_dict()), sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
