#!/usr/bin/env python3
"""pydicom's decode of DICOM files, taken through the steps dicom/decode.h documents, for
tests/dicom/decode_test.cpp to compare ours with.

    reference.py OUT_DIR [FILE_OR_DIR ...]     (default: every file of pydicom's own test set)
    reference.py --make-lut-files DIR          (writes the LUT test files below into DIR, with pydicom)

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
        return apply_voi(np.rint(arr).astype(np.int64), ds, index=0) / (2.0**bits - 1.0)
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
        stored = ds.pixel_array
    except Exception as e:  # noqa: BLE001 - pydicom's own failure is the fact we record
        return ["pydicom"] + head + [f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"]
    arr = apply_modality_lut(stored, ds).astype(np.float64)  # a LUT indexes with the integer stored values
    out = np.clip(normalised_voi(arr, ds), 0.0, 1.0)
    if pi == "MONOCHROME1":
        out = 1.0 - out
    ref = os.path.join(out_dir, f"{n}.f32")
    out.astype("<f4").tofile(ref)
    lossy = ts is not None and str(ts) in LOSSY_SYNTAXES
    return ["image"] + head + [("lossy " if lossy else "lossless ") + ref]


def make_lut_files(out_dir):
    """Files with what pydicom's test set lacks: VOI LUT and Modality LUT Sequences (defined length, so
    a parser may keep them as bytes in implicit VR), in implicit VR little endian and explicit VR big endian."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRBigEndian, ImplicitVRLittleEndian, generate_uid

    os.makedirs(out_dir, exist_ok=True)
    rows, cols = 16, 20

    def image(signed, bits):
        ds = Dataset()
        ds.file_meta = FileMetaDataset()
        ds.SOPClassUID = "1.2.840.10008.5.1.4.1.1.1.1"
        ds.SOPInstanceUID = generate_uid(entropy_srcs=[str(signed), str(bits)])
        ds.file_meta.MediaStorageSOPClassUID = ds.SOPClassUID
        ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
        ds.Modality = "DX"
        ds.Rows, ds.Columns = rows, cols
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, bits, bits - 1
        ds.PixelRepresentation = 1 if signed else 0
        lo = -(2 ** (bits - 1)) if signed else 0
        values = np.linspace(lo, lo + 2**bits - 1, rows * cols).round().astype("<i2" if signed else "<u2")
        return ds, values.reshape(rows, cols)

    def lut_item(first, bits, data):
        item = Dataset()
        item.add_new(0x00283002, "SS" if first < 0 else "US", [len(data) % 65536, first, bits])  # LUT Descriptor
        item.add_new(0x00283006, "US", [int(v) for v in data])  # LUT Data
        return item

    def save(ds, values, name, syntax):
        ds.file_meta.TransferSyntaxUID = syntax
        big = syntax == ExplicitVRBigEndian
        ds.PixelData = values.astype(values.dtype.newbyteorder(">" if big else "<")).tobytes()
        ds.save_as(os.path.join(out_dir, name), implicit_vr=syntax == ImplicitVRLittleEndian,
                   little_endian=not big, enforce_file_format=True)

    curve = np.sqrt(np.arange(4096) / 4095.0) * 4095  # a 12-bit VOI LUT, not linear
    for name, syntax in (("voi_lut_implicit.dcm", ImplicitVRLittleEndian), ("voi_lut_bigendian.dcm", ExplicitVRBigEndian)):
        ds, values = image(False, 12)
        ds.VOILUTSequence = Sequence([lut_item(0, 12, curve.round())])
        save(ds, values, name, syntax)
    # signed 12-bit stored values through a Modality LUT (first mapped -2048, signed), then a window
    ds, values = image(True, 12)
    ds.ModalityLUTSequence = Sequence([lut_item(-2048, 16, (np.arange(4096) * 16))])
    ds.WindowCenter, ds.WindowWidth = 30000, 40000
    save(ds, values, "modality_lut_window.dcm", ImplicitVRLittleEndian)
    # the same Modality LUT (output 0..65520), then a VOI LUT over 16384..20479. Its first mapped value is
    # below 2^15: with signed pixels a reader takes it as SS (PS3.3 C.11.2.1.1, as pydicom does), so a larger
    # one would be ambiguous in implicit VR.
    ds, values = image(True, 12)
    ds.ModalityLUTSequence = Sequence([lut_item(-2048, 16, (np.arange(4096) * 16))])
    ds.VOILUTSequence = Sequence([lut_item(16384, 12, np.linspace(0, 4095, 4096).round())])
    save(ds, values, "modality_then_voi_lut.dcm", ImplicitVRLittleEndian)
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--make-lut-files":
        return make_lut_files(sys.argv[2])
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
