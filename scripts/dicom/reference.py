#!/usr/bin/env python3
"""pydicom's decode of DICOM files, taken through the steps data/dicom.h documents, for
tests/data/dicom_test.cpp to compare ours with.

    reference.py OUT_DIR [FILE_OR_DIR ...]     (default: every file of pydicom's own test set)

For each file writes one line of OUT_DIR/manifest.tsv:
    path  kind  rows  cols  transfer_syntax  photometric  bits  detail
kind is
    image    pydicom decodes one greyscale frame: OUT_DIR/<n>.f32 holds rows*cols float32 in [0, 1] =
             stored -> modality LUT or rescale -> the first VOI LUT, else the first window (pydicom's
             apply_windowing, scaled by its output range), else min..max -> MONOCHROME1 inverted;
             detail: "lossless" or "lossy" (the transfer syntax), then the reference file
    refuse   not a single greyscale frame (no pixel data, colour, several frames); detail says what
    pydicom  pydicom itself cannot decode it (detail: its error); ours should refuse it too
    notdicom pydicom cannot read it as DICOM
Exits 77 when pydicom (or numpy) is missing: the test skips.
"""
import os
import sys

try:
    import numpy as np
    import pydicom
    from pydicom.pixels import apply_modality_lut, apply_voi, apply_windowing
except ImportError as e:  # the test skips
    print(f"reference.py: {e}", file=sys.stderr)
    sys.exit(77)


# JPEG baseline/extended, JPEG-LS near-lossless, JPEG 2000 (lossy allowed), HTJ2K
LOSSY_SYNTAXES = {"1.2.840.10008.1.2.4.50", "1.2.840.10008.1.2.4.51", "1.2.840.10008.1.2.4.81",
                  "1.2.840.10008.1.2.4.91", "1.2.840.10008.1.2.4.203"}


def files(args):
    roots = args or [os.path.join(os.path.dirname(pydicom.__file__), "data", "test_files")]
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for dirpath, _, names in sorted(os.walk(root)):
            for name in sorted(names):
                yield os.path.join(dirpath, name)


def normalised_voi(arr, ds):
    """The first VOI LUT or window of the file, to [0, 1]; min..max without either."""
    if "VOILUTSequence" in ds and len(ds.VOILUTSequence):
        bits = int(ds.VOILUTSequence[0].LUTDescriptor[2])
        return apply_voi(arr, ds, index=0) / (2.0**bits - 1.0)
    if "WindowCenter" in ds and "WindowWidth" in ds:
        # apply_windowing maps onto [y_min, y_max], the range of the modality output (its own rule).
        bits = int(ds.BitsStored)
        if ds.get("ModalityLUTSequence"):
            y_min, y_max = 0.0, 2.0 ** int(ds.ModalityLUTSequence[0].LUTDescriptor[2]) - 1
        elif ds.PixelRepresentation == 0:
            y_min, y_max = 0.0, 2.0**bits - 1
        else:
            y_min, y_max = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1
        if ds.get("RescaleSlope") is not None and ds.get("RescaleIntercept") is not None:
            s, b = float(ds.RescaleSlope), float(ds.RescaleIntercept)
            y_min, y_max = y_min * s + b, y_max * s + b
        return (apply_windowing(arr, ds, index=0) - y_min) / (y_max - y_min)
    lo, hi = float(arr.min()), float(arr.max())
    return (arr - lo) / (hi - lo) if hi > lo else np.zeros_like(arr)


def describe(path, out_dir, n):
    try:
        ds = pydicom.dcmread(path)
    except Exception as e:  # noqa: BLE001 - any reader error means "not DICOM" here
        return ["notdicom", "", "", "", "", "", type(e).__name__]
    ts = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    ts_name = ts.name if ts is not None else "none"
    pi = str(ds.get("PhotometricInterpretation", ""))
    head = [str(ds.get("Rows", "")), str(ds.get("Columns", "")), ts_name, pi,
            f"{ds.get('BitsAllocated', '')}/{ds.get('BitsStored', '')}/{ds.get('PixelRepresentation', '')}"]
    if "PixelData" not in ds:
        return ["refuse"] + head + ["no pixel data"]
    if pi not in ("MONOCHROME1", "MONOCHROME2"):
        return ["refuse"] + head + [f"colour ({pi})"]
    try:
        frames = int(ds.get("NumberOfFrames", 1) or 1)
    except (TypeError, ValueError) as e:
        return ["pydicom"] + head + [f"Number of Frames: {e}"]
    if frames > 1:
        return ["refuse"] + head + [f"{frames} frames"]
    try:
        arr = ds.pixel_array.astype(np.float64)
    except Exception as e:  # noqa: BLE001 - pydicom's own failure is the fact we record
        return ["pydicom"] + head + [f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"]
    arr = apply_modality_lut(arr, ds).astype(np.float64)
    out = np.clip(normalised_voi(arr, ds), 0.0, 1.0)
    if pi == "MONOCHROME1":
        out = 1.0 - out
    ref = os.path.join(out_dir, f"{n}.f32")
    out.astype("<f4").tofile(ref)
    lossy = ts is not None and str(ts) in LOSSY_SYNTAXES
    return ["image"] + head + [("lossy " if lossy else "lossless ") + ref]


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "manifest.tsv"), "w") as manifest:
        for n, path in enumerate(files(sys.argv[2:])):
            row = describe(path, out_dir, n)
            manifest.write("\t".join([path] + [c.replace("\t", " ").replace("\n", " ") for c in row]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
