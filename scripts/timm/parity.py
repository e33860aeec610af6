#!/usr/bin/env python3
"""Checks that timm (and torchvision, when it imports) gives our models' logits for our weights.

    python3 scripts/timm/parity.py [--timm-dir FOLDER] [--tol 1e-4] FILE.safetensors...
    python3 scripts/timm/parity.py --check [--timm-dir FOLDER]     # exit 0 if torch and timm import, else 77

Each FILE is written by tests/models/timm_parity_test.cpp: a model's state dict under timm's names, the
input "__input__" ([N, in_chans, H, W] float32) and ranzcr's eval-mode logits "__logits__" ([N, classes]
float32), with metadata {"model": timm name, "in_chans": "1", "num_classes": "11"}. For each file,
timm.create_model(model, pretrained=False, in_chans, num_classes) loads the weights (strict: every key),
runs the input in eval mode on the CPU in float32, and one line per model gives the largest absolute
difference of the logits. A resnet18 with 3 input channels is also compared with
torchvision.models.resnet18 when torchvision really imports (skipped, and said so, otherwise).

timm's package imports torchvision, PIL, huggingface_hub and safetensors at import time but needs none of
them to build a model. When a plain `import timm` fails, the missing or broken ones among them are stubbed
(as scripts/timm/state_dict_keys.py does) and timm is imported again, from sys.path (`pip install --no-deps
timm==1.0.31`) or from --timm-dir (an unpacked wheel). Files are read with the safetensors package when it
imports, else by a small parser here (JSON header + raw little-endian bytes).

Exit status: 0 all within --tol, 1 a difference above it (or a failed load), 77 torch or timm cannot be
imported (the test skips), 2 bad arguments or files.
"""
import argparse
import importlib
import json
import os
import struct
import sys

SKIP = 77
try:
    import torch
except Exception as _e:  # no torch in this python: nothing to compare with
    print(f"skip: import torch failed ({type(_e).__name__}: {_e})")
    sys.exit(SKIP)
STUBBABLE = ("torchvision", "huggingface_hub", "safetensors", "PIL")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timm_stubs import StubFinder, StubModule  # noqa: E402


def _forget(prefix):
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        del sys.modules[name]


def _imports(name):
    try:
        importlib.import_module(name)
        return True
    except Exception:  # a missing package, or one built for another torch
        _forget(name)
        return False


def torchvision_resnet18():
    """torchvision.models.resnet18 when torchvision really imports, else None."""
    mod = sys.modules.get("torchvision")
    if mod is None or isinstance(mod, StubModule):
        return None
    try:
        from torchvision.models import resnet18
        return resnet18
    except Exception:
        return None


def import_timm(timm_dir):
    """(timm module or None, how it was imported or why it failed)."""
    if timm_dir:
        sys.path.insert(0, timm_dir)
    try:
        import timm
        return timm, "plain import"
    except Exception as e:
        first = f"{type(e).__name__}: {e}"
    _forget("timm")
    stubbed = [p for p in STUBBABLE if not _imports(p)]
    if not stubbed:
        return None, f"import timm failed ({first}), and no stubbable package is missing"
    sys.meta_path.insert(0, StubFinder(stubbed))
    try:
        import timm
        return timm, "stubbed " + ", ".join(stubbed)
    except Exception as e:
        return None, f"import timm failed ({first}); with {', '.join(stubbed)} stubbed: {type(e).__name__}: {e}"


_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}


def read_safetensors(path):
    """({name: CPU tensor}, {metadata key: value})."""
    try:
        from safetensors import safe_open
    except Exception:
        _forget("safetensors")
        safe_open = None
    if safe_open is not None:
        with safe_open(path, framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: truncated")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        if end > begin:
            t = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype)
        else:
            t = torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"])
    if sys.byteorder != "little":
        raise ValueError("the fallback reader assumes a little-endian machine")
    return tensors, meta


def compare(model, state, x, expected):
    """Loads `state` strictly, runs `x` in eval mode; (max abs diff, max |logit|)."""
    model.load_state_dict(state, strict=True)
    model.eval()
    with torch.no_grad():
        got = model(x)
    if got.shape != expected.shape:
        raise ValueError(f"logits of shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    return (got - expected).abs().max().item(), expected.abs().max().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="safetensors files written by timm_parity_test")
    ap.add_argument("--check", action="store_true",
                    help="only say whether torch and timm import: exit 0 if they do, 77 if not")
    ap.add_argument("--timm-dir", help="folder holding an unpacked timm package (tried before sys.path)")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest allowed absolute logit difference")
    args = ap.parse_args()
    if not args.files and not args.check:
        ap.error("no files")

    cases = []
    for path in args.files:  # read first: the safetensors package may be stubbed for timm below
        try:
            tensors, meta = read_safetensors(path)
            x, expected = tensors.pop("__input__"), tensors.pop("__logits__")
            cases.append((path, meta["model"], int(meta["in_chans"]), int(meta["num_classes"]), tensors, x,
                          expected))
        except Exception as e:
            print(f"error: {path}: {type(e).__name__}: {e}")
            return 2
    have_torchvision = _imports("torchvision")
    timm, how = import_timm(args.timm_dir)
    if timm is None:
        print(f"skip: {how} (pip install --no-deps timm==1.0.31, or --timm-dir)")
        return SKIP
    where = f"timm {timm.__version__} from {os.path.dirname(os.path.dirname(timm.__file__))} ({how})"
    if args.check:
        print(f"{where}, torch {torch.__version__}")
        return 0
    tv_resnet18 = torchvision_resnet18() if have_torchvision else None
    print(f"{where}, torch {torch.__version__}, device cpu, float32, "
          f"torchvision {'imports' if tv_resnet18 else 'does not import: its comparison is skipped'}")
    torch.set_grad_enabled(False)

    failed = False
    for path, name, in_chans, num_classes, state, x, expected in cases:
        x, expected = x.float(), expected.float()
        checks = [("timm", lambda: timm.create_model(name, pretrained=False, in_chans=in_chans,
                                                     num_classes=num_classes))]
        if name == "resnet18" and in_chans == 3 and tv_resnet18 is not None:
            checks.append(("torchvision", lambda: tv_resnet18(num_classes=num_classes)))
        for source, make in checks:
            label = f"{source}.{name} in_chans={in_chans} num_classes={num_classes} input={list(x.shape)}"
            try:
                diff, scale = compare(make(), state, x, expected)
            except Exception as e:
                print(f"{label} FAILED: {type(e).__name__}: {e}")
                failed = True
                continue
            ok = diff <= args.tol
            failed |= not ok
            print(f"{label} max_abs_diff={diff:.3g} max_abs_logit={scale:.3g} {'ok' if ok else 'ABOVE'} "
                  f"{args.tol:g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
