"""Writes the two DICOM files of tests/data/files/ crafted from the public descriptions of two GDCM CVEs
(tests/data/dicom_sandbox_test.cpp): files that crashed an in-process decode with GDCM 3.0.21 and must end
as one error line now that DICOM is decoded in a sandboxed helper.

  CVE-2024-22391 (TALOS-2024-1924): LookupTable::SetLUT writes past its table for a PALETTE COLOR image
    whose LUT Descriptor declares more entries than its Allocate() sized: here the Icon Image Sequence's
    icon, 8 bits allocated (a 256-entry table), declares 65536 entries and holds 2 bytes of LUT data.
  CVE-2025-52582 (TALOS-2025-2211): an overlay (group 6000) kept in the unused high bits of the pixel data
    (no Overlay Data element, Overlay Bits Allocated 16, Overlay Bit Position 12) that declares more rows
    and columns than the image, so extracting it reads far past the pixel data.

Usage: .venv/bin/python scripts/dicom/make_cve_files.py OUT_DIR
"""
import sys
from pathlib import Path

from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.sequence import Sequence
from pydicom.uid import ExplicitVRLittleEndian

DX = "1.2.840.10008.5.1.4.1.1.1.1"


def base(rows, cols, bits_stored):
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = DX
    meta.MediaStorageSOPInstanceUID = "1.2.3.4.5"
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID = DX
    ds.SOPInstanceUID = "1.2.3.4.5"
    ds.Modality = "DX"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = rows, cols
    ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, bits_stored, bits_stored - 1
    ds.PixelRepresentation = 0
    ds.PixelData = bytes(2 * rows * cols)
    return ds


def palette_icon():
    ds = base(8, 8, 16)
    icon = Dataset()
    icon.SamplesPerPixel = 1
    icon.PhotometricInterpretation = "PALETTE COLOR"
    icon.Rows, icon.Columns = 4, 4
    icon.BitsAllocated, icon.BitsStored, icon.HighBit = 8, 8, 7
    icon.PixelRepresentation = 0
    for colour in ("Red", "Green", "Blue"):
        setattr(icon, f"{colour}PaletteColorLookupTableDescriptor", [0, 0, 8])  # 0: 65536 entries
        setattr(icon, f"{colour}PaletteColorLookupTableData", b"\x00\x01")
    icon.PixelData = bytes(16)
    ds.IconImageSequence = Sequence([icon])
    return ds


def overlay_in_pixel_data():
    ds = base(8, 8, 12)
    ds.add_new(0x60000010, "US", 4096)  # Overlay Rows
    ds.add_new(0x60000011, "US", 4096)  # Overlay Columns
    ds.add_new(0x60000040, "CS", "G")  # Overlay Type
    ds.add_new(0x60000050, "SS", [1, 1])  # Overlay Origin
    ds.add_new(0x60000100, "US", 16)  # Overlay Bits Allocated: in the pixel data
    ds.add_new(0x60000102, "US", 12)  # Overlay Bit Position: the unused bits
    return ds


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    palette_icon().save_as(out / "cve-2024-22391-palette-icon-short-lut.dcm", enforce_file_format=True)
    overlay_in_pixel_data().save_as(out / "cve-2025-52582-overlay-larger-than-image.dcm", enforce_file_format=True)


if __name__ == "__main__":
    main()
