#!/usr/bin/env python3
"""Calls a running `ranzcr serve` with tritonclient[http], the Open Inference Protocol's client from PyPI.

--cases is a JSON list of {"file": image path, "probabilities": predict's numbers for it}. For every file:
infer with the file as a BYTES input in the binary-data extension, the output asked for as binary data, then as
JSON, then with no outputs named (all, binary); all files in one request too; each answer must equal predict's
probabilities within --tolerance. Before: is_server_live, is_server_ready, is_model_ready,
get_model_metadata (the input and outputs named as docs/serving.md says). Exit 77 when tritonclient is not
installed; 1 on a mismatch; prints one JSON line of what was checked.
"""
import argparse
import json
import sys

try:
    import numpy as np
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException
except ImportError as e:
    print(f"tritonclient[http] is not installed ({e}): pip install 'tritonclient[http]'")
    sys.exit(77)


def infer(client, model, files, output_binary):
    """The probabilities [N, labels] for `files` (one request)."""
    data = np.array([open(f, "rb").read() for f in files], dtype=np.object_)
    image = triton.InferInput("image", [len(files)], "BYTES")
    image.set_data_from_numpy(data, binary_data=True)
    outputs = None if output_binary is None else [triton.InferRequestedOutput("probabilities", binary_data=output_binary)]
    result = client.infer(model, [image], outputs=outputs, request_id="check-1")
    assert result.get_response()["id"] == "check-1", result.get_response()
    assert result.get_response()["model_name"] == model, result.get_response()
    return result.as_numpy("probabilities")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="host:port")
    ap.add_argument("--model", default="ranzcr")
    ap.add_argument("--cases", required=True)
    ap.add_argument("--tolerance", type=float, default=1e-6)
    args = ap.parse_args()
    cases = json.load(open(args.cases))
    client = triton.InferenceServerClient(args.url)
    failures = []
    if not client.is_server_live():
        failures.append("is_server_live is false")
    if not client.is_server_ready():
        failures.append("is_server_ready is false")
    if not client.is_model_ready(args.model):
        failures.append("is_model_ready is false")
    if client.is_model_ready("no-such-model"):
        failures.append("is_model_ready is true for an unknown model")
    meta = client.get_model_metadata(args.model)
    labels = len(cases[0]["probabilities"])
    if meta["name"] != args.model or meta["inputs"] != [{"name": "image", "datatype": "BYTES", "shape": [-1]}]:
        failures.append(f"metadata: {meta}")
    if meta["outputs"][0] != {"name": "probabilities", "datatype": "FP64", "shape": [-1, labels]}:
        failures.append(f"metadata outputs: {meta['outputs']}")
    worst = 0.0
    checks = 0
    for case in cases:
        want = np.array(case["probabilities"])
        for output_binary in (True, False, None):
            got = infer(client, args.model, [case["file"]], output_binary)
            if got.shape != (1, labels) or got.dtype != np.float64:
                failures.append(f"{case['file']}: shape {got.shape} dtype {got.dtype}")
                continue
            worst = max(worst, float(np.abs(got[0] - want).max()))
            checks += 1
    batch = infer(client, args.model, [c["file"] for c in cases], True)
    for i, case in enumerate(cases):
        worst = max(worst, float(np.abs(batch[i] - np.array(case["probabilities"])).max()))
    try:
        client.infer(args.model, [triton.InferInput("pixels", [1], "BYTES")])
        failures.append("an unknown input was accepted")
    except InferenceServerException as e:
        if "unknown input 'pixels'" not in str(e):
            failures.append(f"unknown input: {e}")
    except Exception:  # the client itself refusing an input without data is also a refusal
        pass
    if worst > args.tolerance:
        failures.append(f"largest difference from predict {worst:.3g} > {args.tolerance}")
    print(json.dumps({"files": len(cases), "inferences": checks + 1, "largest_difference": worst,
                      "metadata_outputs": [o["name"] for o in meta["outputs"]]}))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
