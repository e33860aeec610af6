#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from real files: the test fixtures
# (tests/engine/io/fixtures: torch.save and safetensors files written by the real libraries), state dicts
# written here by torch.save (the .venv's torch), a checkpoint and an export by our own writers, the
# synthetic data set as JPEG and as DICOM (five transfer syntaxes), pydicom's LUT files
# (scripts/dicom/reference.py) and the configs. Run once by hand after scripts/setup.sh; the result is
# checked in (about 1 MB) so that fuzzing and the ctest replay need none of these tools.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
PY=$ROOT/.venv/bin/python
RANZCR=$ROOT/build/ranzcr
[ -x "$RANZCR" ] || { echo "error: build first (scripts/setup.sh): no $RANZCR" >&2; exit 1; }
C=$ROOT/fuzz/corpus
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rm -rf "$C"
mkdir -p "$C"/{safetensors,torch_pickle,weight_file,trained_model,checkpoint_resume,csv,annotations,config,image,dicom,image_cache}
FIX=tests/engine/io/fixtures

# Weight files: the fixtures, and small state dicts torch.save writes (protocols 2 and 4, views, fp16, a
# wrapped checkpoint with non-tensor entries), each tensor small enough for torch_pickle's 512-byte records.
cp $FIX/*.pth $FIX/python_written.safetensors "$C/weight_file/"
cp $FIX/python_written.safetensors "$C/safetensors/"
"$PY" - "$TMP/saved" <<'PYEOF'
import argparse, collections, os, sys, torch
out = sys.argv[1]; os.makedirs(out)
torch.manual_seed(0)
conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.Linear(4, 3))
sd = conv.state_dict()
base = torch.arange(24, dtype=torch.float32)
cases = {
    "state_dict_p2": (sd, 2),
    "state_dict_p4": (sd, 4),
    "views_fp16": ({"a": base[2:8].view(2, 3), "b": base.view(4, 6).t(), "c": base.half()[:5]}, 2),
    "wrapped": ({"epoch": 3, "state_dict": sd, "args": argparse.Namespace(lr=0.1, model="x"),
                 "best": 0.5, "names": ["a", "b"], "flags": (True, None)}, 2),
    "module_prefix": (collections.OrderedDict(("module." + k, v) for k, v in sd.items()), 2),
    "parameter": ({"w": torch.nn.Parameter(torch.ones(3))}, 2),
}
for name, (obj, proto) in cases.items():
    torch.save(obj, os.path.join(out, name + ".pth"), pickle_protocol=proto)
PYEOF
cp "$TMP"/saved/*.pth "$C/weight_file/"
for f in "$C"/weight_file/*.pth; do  # torch_pickle's input: the sizes of data/0 ... data/15, then data.pkl
  "$PY" -c 'import struct, sys, zipfile
try:
    z = zipfile.ZipFile(sys.argv[1])
except zipfile.BadZipFile:
    sys.exit(0)
prefix = [n for n in z.namelist() if n.endswith("/data.pkl")][0][:-len("data.pkl")]
sizes = [z.getinfo(prefix + "data/%d" % k).file_size if prefix + "data/%d" % k in z.namelist() else 0
         for k in range(16)]
if any(n.startswith(prefix + "data/") and n[len(prefix) + 5:] not in [str(k) for k in range(16)] for n in z.namelist()):
    sys.exit(0)
open(sys.argv[2], "wb").write(struct.pack("<16H", *sizes) + z.read(prefix + "data.pkl"))' \
    "$f" "$C/torch_pickle/$(basename "$f" .pth).bin"
done

# Our own files: a small checkpoint and export from our writers, two image caches of tiny images (fuzz/write_seeds.cpp: a tiny_cnn one is 9 MB,
# too large to fuzz), and a data set to take CSVs and images from.
ninja -C build fuzz_write_seeds >/dev/null
build/fuzz/fuzz_write_seeds "$TMP/seeds" >/dev/null
"$RANZCR" synth --out "$TMP/data" --num-images 48 --num-test-images 4 --image-size 64 --seed 3 >/dev/null
cp "$TMP/seeds/checkpoint.pt" "$C/checkpoint_resume/last.pt"
cp "$TMP/seeds/"*.rzc "$C/image_cache/"
cp "$TMP/seeds/checkpoint.pt" "$C/trained_model/checkpoint.pt"
for t in trained_model safetensors weight_file; do cp "$TMP/seeds/export.safetensors" "$C/$t/export.safetensors"; done

# CSVs: the synthetic train.csv (header and 6 rows), ids only, and quoting, CRLF and a byte order mark.
sed -n '1,7p' "$TMP/data/train.csv" > "$C/csv/train.csv"
cut -d, -f1 "$TMP/data/train.csv" | sed -n '1,5p' > "$C/csv/ids.csv"
printf '\xef\xbb\xbfStudyInstanceUID,"ETT, odd",PatientID\r\n"1.2",1,p1\r\n3,0,"p ""2"""\r\n' > "$C/csv/quoted.csv"
# Annotations with the ids the annotations target's index holds.
{
  echo "StudyInstanceUID,label,data"
  sed -n '2,4p' "$TMP/data/train_annotations.csv" | cut -d, -f2- |
    sed -e '1s/^/1.2.826.0.1.3680043.8.498.1,/' -e '2s/^/a,/' -e '3s/^/b,/'
} > "$C/annotations/train_annotations.csv"
printf 'StudyInstanceUID,label,data\nb,CVC - Normal,"[[1e3, 2.5], [ -3 , 4e2 ]]"\nzzz,x,"[[1,2]]"\n' > "$C/annotations/edge.csv"

# Configs: the two recipes, and one with --set overrides after a NUL byte.
cp configs/quickstart.yaml configs/ranzcr.yaml "$C/config/"
printf 'model:\n  name: resnet18\ntrain:\n  epochs: 2\n\0train.precision=bf16\ndata.dicom.window=percentile\noptim.lr=1e-3' \
  > "$C/config/overrides.yaml"

# Images: synthetic JPEGs, and PNGs of 8 and 16 bits written here.
ls "$TMP/data/train" | sed -n '1,3p' | while read -r f; do cp "$TMP/data/train/$f" "$C/image/$f"; done
"$PY" - "$C/image" <<'PYEOF'
import struct, sys, zlib
def png(path, w, h, depth, colour):
    ch = {0: 1, 2: 3}[colour]; bpp = ch * depth // 8
    rows = b"".join(b"\x00" + bytes(((x * 7 + y * 3) & 0xff) for x in range(w * bpp)) for y in range(h))
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 0))
    open(path, "wb").write(data + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
png(sys.argv[1] + "/grey8.png", 48, 40, 8, 0)
png(sys.argv[1] + "/grey16.png", 40, 48, 16, 0)
png(sys.argv[1] + "/rgb8.png", 20, 20, 8, 2)
PYEOF

# DICOM: the synthetic set in its five kinds of file, and pydicom's LUT files.
"$RANZCR" synth --out "$TMP/dcm" --num-images 10 --num-test-images 0 --image-size 64 --seed 3 --format dcm >/dev/null
ls "$TMP"/dcm/train/*.dcm | sed -n '1,5p' | xargs -I{} cp {} "$C/dicom/"
"$PY" scripts/dicom/reference.py --make-lut-files "$TMP/lut" >/dev/null
cp "$TMP"/lut/*.dcm "$C/dicom/"
du -sh "$C"; for d in "$C"/*; do echo "$(basename "$d"): $(ls "$d" | wc -l) files"; done
