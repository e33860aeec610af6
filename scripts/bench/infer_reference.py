#!/usr/bin/env python3
"""Model-only inference throughput of the usual CPU runtimes, for scripts/bench/infer_compare.sh.

  infer_reference.py --runtime R --model NAME --size S --channels C --batch B --threads T
                     [--onnx FILE] [--steps N] [--warmup W] [--out FILE.json]

R is one of:
  eager          PyTorch eager, fp32, NCHW (timm's network of the same name, random weights)
  eager-bf16     PyTorch eager, channels_last, torch.autocast("cpu", torch.bfloat16)
  compile-bf16   torch.compile (inductor, freezing on), channels_last, bf16 autocast
  onnxruntime    ONNX Runtime's CPU provider on FILE (ranzcr's own graph: `ranzcr bench --infer --onnx FILE`)
  openvino       OpenVINO's Python API on FILE, its default precision for this CPU
  openvino-f32   the same, inference precision f32
Each times N batches of B random images after W untimed ones, on T threads, and prints and writes
{"runtime", "images_per_sec", "batch", "threads", "model", "size", "precision", versions}. The OpenVINO runs
compile a static batch (as benchmark_app does), one stream, T inference threads: OpenVINO's own model-only
figure, the one `ranzcr predict` is held against. Exit 77: the runtime's package is missing here.
"""
import argparse
import json
import os
import sys
import time

SKIP = 77


def need(*names):
    """The modules `names`, imported; exit 77 (skip) when one is missing in this python."""
    import importlib

    try:
        return [importlib.import_module(n) for n in names]
    except ImportError as e:
        print(f"skip: {e}")
        sys.exit(SKIP)


def timed(run, steps, warmup, batch):
    for _ in range(warmup):
        run()
    t = time.perf_counter()
    for _ in range(steps):
        run()
    return steps * batch / (time.perf_counter() - t)


def torch_model(args):
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "timm"))
    if args.model == "tiny_cnn":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from pytorch_reference import TinyCnn

        return TinyCnn(args.channels, 11, 0.0).eval()
    from parity import import_timm

    timm, how = import_timm(None)
    if timm is None:
        print(f"skip: {how}")
        sys.exit(SKIP)
    torch.manual_seed(0)
    return timm.create_model(args.model, pretrained=False, in_chans=args.channels, num_classes=11).eval()


def run_torch(args):
    (torch,) = need("torch")
    torch.set_num_threads(args.threads)
    model = torch_model(args)
    x = torch.randn(args.batch, args.channels, args.size, args.size)
    precision = "fp32"
    if args.runtime != "eager":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
        precision = "bf16"
    if args.runtime == "compile-bf16":
        import torch._inductor.config as inductor

        inductor.freezing = True
        model = torch.compile(model)

    def run():
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=precision == "bf16"):
            model(x)

    return timed(run, args.steps, args.warmup, args.batch), precision, {"torch": torch.__version__}


def run_onnxruntime(args):
    np, ort = need("numpy", "onnxruntime")
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(args.onnx, so, providers=["CPUExecutionProvider"])
    x = np.random.randn(args.batch, args.channels, args.size, args.size).astype(np.float32)
    return timed(lambda: s.run(["logits"], {"images": x}), args.steps, args.warmup, args.batch), "fp32", {
        "onnxruntime": ort.__version__}


def run_openvino(args):
    np, ov = need("numpy", "openvino")
    core = ov.Core()
    model = core.read_model(args.onnx)
    model.reshape({"images": [args.batch, args.channels, args.size, args.size]})
    config = {"INFERENCE_NUM_THREADS": args.threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    if args.runtime == "openvino-f32":
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = core.compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    x = np.random.randn(args.batch, args.channels, args.size, args.size).astype(np.float32)
    precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    return timed(lambda: request.infer({"images": x}), args.steps, args.warmup, args.batch), precision, {
        "openvino": ov.__version__}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtime", required=True,
                   choices=["eager", "eager-bf16", "compile-bf16", "onnxruntime", "openvino", "openvino-f32"])
    p.add_argument("--model", required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--channels", type=int, default=1)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--onnx", default="")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", default="")
    args = p.parse_args()
    if args.runtime in ("onnxruntime", "openvino", "openvino-f32") and not args.onnx:
        sys.exit(f"--runtime {args.runtime} needs --onnx FILE (ranzcr bench --infer --onnx FILE writes it)")
    run = {"onnxruntime": run_onnxruntime, "openvino": run_openvino, "openvino-f32": run_openvino}.get(
        args.runtime, run_torch)
    ips, precision, versions = run(args)
    result = {"runtime": args.runtime, "images_per_sec": ips, "precision": precision, "batch": args.batch,
              "threads": args.threads, "model": args.model, "size": args.size, "versions": versions}
    print(f"{args.runtime}: {args.model} {args.size} px, batch {args.batch}, {args.threads} threads, "
          f"{precision}: {ips:.2f} images/s")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
