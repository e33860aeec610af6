#!/usr/bin/env python3
"""Checks one ONNX file that ranzcr wrote against what LibTorch computed (tests/onnx/onnx_export_test.cpp).

  check_onnx.py CASE.json

CASE.json: {"model": "x.onnx", "metadata": {key: value, ...} (must read back exactly),
            "cases": [{"input": "in.bin", "shape": [N, C, H, W],
                       "outputs": {"logits": ["out.bin", [N, K]], ...}}, ...], "tolerance": 1e-4}
The .bin files hold float32 values. Runs ONNX's checker with full shape inference, then ONNX Runtime (CPU
provider) and OpenVINO (CPU, f32 inference precision) on each input; each output must equal LibTorch's within
the tolerance relative to the largest magnitude of LibTorch's output. Prints one line per runtime and case.
Exit 0: all agree; 1: a difference or error; 77: onnx, onnxruntime or openvino is missing in this python.
"""
import json
import os
import sys


def relative_difference(got, want):
    import numpy as np

    scale = max(float(np.abs(want).max()), 1e-6)
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale


def main(argv):
    try:
        import numpy as np
        import onnx
        import onnxruntime
        import openvino
    except ImportError as e:
        print(f"skip: {e}")
        sys.exit(77)
    case_file = argv[1]
    folder = os.path.dirname(case_file)
    spec = json.load(open(case_file))
    path = os.path.join(folder, spec["model"])
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    props = {p.key: p.value for p in model.metadata_props}
    for key, value in spec.get("metadata", {}).items():
        if props.get(key) != value:
            sys.exit(f"{path}: metadata {key} is {props.get(key)!r}, expected {value!r}")
    tolerance = spec.get("tolerance", 1e-4)
    ort = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    core = openvino.Core()
    ov = core.compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    worst = 0.0
    for case in spec["cases"]:
        x = np.fromfile(os.path.join(folder, case["input"]), dtype=np.float32).reshape(case["shape"])
        names = list(case["outputs"])
        got = {"onnxruntime": dict(zip(names, ort.run(names, {"images": x})))}
        result = ov(x)
        got["openvino"] = {name: result[ov.output(name)] for name in names}
        for runtime, outputs in got.items():
            for name, (file, shape) in case["outputs"].items():
                want = np.fromfile(os.path.join(folder, file), dtype=np.float32).reshape(shape)
                if outputs[name].shape != want.shape:
                    sys.exit(f"{path}: {runtime} {name} has shape {outputs[name].shape}, LibTorch {want.shape}")
                d = relative_difference(outputs[name], want)
                worst = max(worst, d)
                print(f"{spec['model']} batch {x.shape[0]} {runtime} {name}: {d:.2e} of the largest |value|")
                if d > tolerance:
                    sys.exit(f"{path}: {runtime}'s {name} differs from LibTorch's by {d:.3g} (relative), over {tolerance}")
    print(f"worst {worst:.2e}")


if __name__ == "__main__":
    main(sys.argv)
