#!/usr/bin/env python3
"""Puts a model repository into the folder tests/hub/fake_hub.py serves.

    python3 tests/hub/make_repo.py --root DIR --repo ORG/NAME --file NAME=SOURCE... [--gated] [--salt S]
    python3 tests/hub/make_repo.py --root DIR --repo timm/resnet18.a1_in1k --timm-model resnet18 [--seed 0]

The files land in DIR/ORG/NAME/revisions/<commit>/ and refs/main names the commit, a SHA-1 of the files'
names and SHA-256s (and --salt): a repository given other bytes gets a new commit, and main moves to it.
--timm-model writes real timm weights: timm.create_model(MODEL, pretrained=False) with torch's seed, saved
by timm's own save_for_hf (model.safetensors and the config.json timm writes, whose pretrained_cfg carries
the weights' mean and std). It needs torch, timm, safetensors and huggingface_hub (exit 77 without them).
Prints the commit.
"""
import argparse
import hashlib
import os
import shutil
import sys
import tempfile


def timm_files(model_name, seed, out):
    try:
        import torch
        import safetensors  # noqa: F401  (save_for_hf writes with it)
        import huggingface_hub  # noqa: F401  (timm's hub module asserts it)
    except Exception as e:
        print(f"skip: {type(e).__name__}: {e}")
        sys.exit(77)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "timm"))
    from timm_stubs import StubFinder
    try:
        import timm  # noqa: F401
    except Exception:
        for name in [n for n in sys.modules if n.split(".")[0] in ("timm", "torchvision", "PIL")]:
            del sys.modules[name]
        sys.meta_path.insert(0, StubFinder(("torchvision", "PIL")))
        import timm
    from timm.models import save_for_hf
    torch.manual_seed(seed)
    model = timm.create_model(model_name, pretrained=False)
    # BatchNorm statistics and affine terms other than timm's init (running 0/1, the residual branches' last
    # scale 0), as trained weights have: every block then shapes the logits.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.2, 0.6)
                m.bias.normal_(0.0, 0.1)
    save_for_hf(model, out, safe_serialization=True)
    return {name: os.path.join(out, name) for name in os.listdir(out)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--file", action="append", default=[], help="NAME=SOURCE")
    ap.add_argument("--timm-model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gated", action="store_true")
    ap.add_argument("--salt", default="")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    try:
        files = dict(f.split("=", 1) for f in args.file)
        if args.timm_model:
            files.update(timm_files(args.timm_model, args.seed, tmp))
        digest = hashlib.sha1(args.salt.encode())
        for name in sorted(files):
            digest.update(name.encode() + hashlib.sha256(open(files[name], "rb").read()).digest())
        commit = digest.hexdigest()
        repo_dir = os.path.join(args.root, *args.repo.split("/"))
        rev_dir = os.path.join(repo_dir, "revisions", commit)
        os.makedirs(rev_dir, exist_ok=True)
        for name, src in files.items():
            dst = os.path.join(rev_dir, name)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(src, dst)
        os.makedirs(os.path.join(repo_dir, "refs"), exist_ok=True)
        with open(os.path.join(repo_dir, "refs", "main"), "w") as f:
            f.write(commit)
        if args.gated:
            open(os.path.join(repo_dir, "gated"), "w").close()
        print(commit)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
