#!/usr/bin/env bash
# scripts/bench/compare.sh --table-only on made-up run files: the medians and spreads of alternated runs, the
# ratio of medians to both references (like for like, and the plain one), each side's share of its own
# loader-plus-compute bound, the torch.compile column, the summaries ours.json / pytorch.json, the warnings on unlike
# settings and libraries, the two profile tables side by side, an older folder with ours.json alone, and the
# one-line errors. Runs nothing else (no ranzcr, no torch): python3's standard library only.
# Exit 0: passed; 1: failed (the failing check is printed); 77: skipped (no python3).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
compare=$here/../../scripts/bench/compare.sh
py=${PYTHON:-python3}
command -v "$py" > /dev/null 2>&1 || { echo "skipped: no $py"; exit 77; }
export PYTHON=$py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/checks.sh"

run() {  # run JSON-WRITER-ARGS...: writes DIR/NAME.json files from "name key=value,..." specs
  "$py" - "$@" << 'EOF'
import json, sys
out = sys.argv[1]
base = {"device": "cuda:0", "model": "resnet50", "image_size": 512, "batch_size": 64, "precision": "bf16",
        "channels_last": True, "threads": 16, "loader_workers": 14, "world_size": 1, "steps": 20, "warmup": 5,
        "loader_steps": 20, "torch_version": "2.11.0+cu130",
        "versions": {"torch": "2.11.0+cu130", "cudnn": "9.19.0", "cublas": "13.0.2", "nccl": "2.28.9"}}
for spec in sys.argv[2:]:
    name, _, kv = spec.partition(" ")
    d = json.loads(json.dumps(base))
    for item in filter(None, kv.split(",")):
        k, _, v = item.partition("=")
        if k.startswith("versions."):
            d["versions"][k[9:]] = None if v == "null" else v
        else:
            d[k] = None if v == "null" else json.loads(v) if v[:1].isdigit() or v in ("true", "false") else v
    with open(f"{out}/{name}.json", "w") as f:
        json.dump(d, f)
EOF
}

# 1. Three alternated runs of each side plus three torch.compile runs, profiles of both sides.
d=$tmp/three
mkdir -p "$d/profile-ranzcr" "$d/profile-pytorch"
run "$d" \
  "ours-1 implementation=ranzcr,loader_images_per_sec=1900,compute_images_per_sec=750,e2e_images_per_sec=740" \
  "ours-2 implementation=ranzcr,loader_images_per_sec=2000,compute_images_per_sec=760,e2e_images_per_sec=748" \
  "ours-3 implementation=ranzcr,loader_images_per_sec=1950,compute_images_per_sec=700,e2e_images_per_sec=690" \
  "pytorch-1 implementation=pytorch,loader_images_per_sec=1400,compute_images_per_sec=900,e2e_images_per_sec=800,model_source=timm,decode=full" \
  "pytorch-2 implementation=pytorch,loader_images_per_sec=1500,compute_images_per_sec=880,e2e_images_per_sec=790,model_source=timm,decode=full" \
  "pytorch-3 implementation=pytorch,loader_images_per_sec=1450,compute_images_per_sec=920,e2e_images_per_sec=810,model_source=timm,decode=full" \
  "pytorch-plain-1 implementation=pytorch-plain,loader_images_per_sec=3000,compute_images_per_sec=900,e2e_images_per_sec=600,model_source=timm,decode=plain" \
  "pytorch-plain-2 implementation=pytorch-plain,loader_images_per_sec=3000,compute_images_per_sec=900,e2e_images_per_sec=650,model_source=timm,decode=plain" \
  "pytorch-compile-1 implementation=pytorch-compile,compute_images_per_sec=1000,loader_images_per_sec=null,e2e_images_per_sec=null,warmup=5,loader_steps=null,compile_seconds=60" \
  "pytorch-compile-2 implementation=pytorch-compile,compute_images_per_sec=1100,loader_images_per_sec=null,e2e_images_per_sec=null,warmup=5,loader_steps=null,compile_seconds=20"
cat > "$d/profile-ranzcr/kernels.json" << 'EOF'
{"implementation": "ranzcr", "device": "cuda:0", "steps": 5, "cpu_ms_per_step": 41.5, "device_ms_per_step": 80.25,
 "kernel_source": "cuda kernels", "kernels": [
  {"name": "sm90_xmma_wgrad_implicit_gemm_indexed_wo_smem_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1", "calls": 80, "total_ms": 100.0, "share": 0.25},
  {"name": "void at::native::elementwise_kernel<128, 4>|pipe", "calls": 400, "total_ms": 50.5, "share": 0.126}]}
EOF
cat > "$d/profile-pytorch/kernels.json" << 'EOF'
{"implementation": "pytorch", "device": "cuda:0", "steps": 5, "cpu_ms_per_step": 60.0, "device_ms_per_step": 70.0,
 "kernel_source": "cuda kernels", "kernels": [
  {"name": "sm90_xmma_fprop", "calls": 80, "total_ms": 90.0, "share": 0.257},
  {"name": "cudnn::bn_fw", "calls": 200, "total_ms": 40.0, "share": 0.114},
  {"name": "Memcpy HtoD (Pageable -> Device)", "calls": 5, "total_ms": 1.0, "share": 0.003}]}
EOF
"$compare" --table-only --out-dir "$d" > "$tmp/out1" 2> "$tmp/err1"
rc=$?
[[ $rc == 0 ]] || { echo "FAILED: --table-only exit $rc"; cat "$tmp/err1"; failures=$((failures + 1)); }
check "median and spread, ranzcr loader" "$d/compare.md" '^\| loader .*\| 1,950\.0 \(1,900\.0–2,000\.0\) \| 1,450\.0 \(1,400\.0–1,500\.0\) \| 1\.34x \|'
check "compute: ratio of medians 750/900 and the compile column (median of 2 runs)" "$d/compare.md" \
  '^\| compute .*\| 750\.0 \(700\.0–760\.0\) \| 900\.0 \(880\.0–920\.0\) \| 0\.83x \| 900\.0 \(900\.0–900\.0\) \| 0\.83x \| 1,050\.0 \(1,000\.0–1,100\.0\) \|'
check "e2e: the plain reference's median (600, 650) and ratio; no compile figure" "$d/compare.md" \
  '^\| e2e .*\| 0\.93x \| 625\.0 \(600\.0–650\.0\) \| 1\.18x \|  \|$'
check "share of own bound: each run's e2e x (1/loader + 1/compute), median and spread" "$d/compare.md" \
  '^\| share of own bound.* \| 1\.36 \(1\.34–1\.38\) \| 1\.44 \(1\.42–1\.46\) \| \| 0\.90 \(0\.87–0\.94\) \| \| \|$'
check "header counts the runs" "$d/compare.md" 'ranzcr, 3 runs \| pytorch, 3 runs .*\| pytorch plain, 2 runs \| .*\| pytorch compile, 2 runs \|'
check "the plain reference's settings" "$d/compare.md" '^- pytorch plain: resnet50, .*full-size cv2\.imread, INTER_AREA resize, hflip'
check "summary pytorch-plain.json" "$d/pytorch-plain.json" '"e2e_images_per_sec": 625'
check "ranzcr / compile line" "$d/compare.md" 'ranzcr / pytorch compile \(compute, medians\): 0\.71x.*first step \(compilation\) of each run: 60\.0, 20\.0 s'
check "model source" "$d/compare.md" 'model from timm'
check "versions listed" "$d/compare.md" '^- pytorch: torch 2\.11\.0\+cu130, cudnn 9\.19\.0, cublas 13\.0\.2, nccl 2\.28\.9$'
check_not "no warning when all settings and libraries agree" "$d/compare.md" 'Warning'
check "summary ours.json is the medians" "$d/ours.json" '"compute_images_per_sec": 750'
check "summary ours.json keeps the runs" "$d/ours.json" '"repeats": 3'
check "summary pytorch-compile.json" "$d/pytorch-compile.json" '"compute_images_per_sec": 1050'
check "profile.md: host and device ms per step" "$d/profile.md" '^- ranzcr \(ranzcr, cuda:0\): 5 steps, cpu_ms_per_step 41\.50, device_ms_per_step 80\.25'
check "profile.md: side by side, full names (the layout is at the end of a cuDNN kernel's)" "$d/profile.md" '^\| 1 \| `sm90_xmma_wgrad_implicit_gemm_indexed_wo_smem_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1` \| 100\.00 \| 25\.0% \| `sm90_xmma_fprop` \| 90\.00 \| 25\.7% \|$'
check "profile.md: a | in a name does not break the table" "$d/profile.md" '^\| 2 \| `void at::native::elementwise_kernel<128, 4>/pipe` \| 50\.50'
check "profile.md: the longer side goes on alone" "$d/profile.md" '^\| 3 \|  \|  \|  \| `Memcpy HtoD'
check "stdout has both tables" "$tmp/out1" 'rank \| ranzcr kernel'

# 2. Unlike settings and libraries: warned in compare.md and on stderr.
d=$tmp/unlike
mkdir -p "$d"
run "$d" \
  "ours-1 compute_images_per_sec=750,loader_images_per_sec=1,e2e_images_per_sec=1,threads=16,versions.cudnn=9.19.0" \
  "pytorch-1 compute_images_per_sec=900,loader_images_per_sec=1,e2e_images_per_sec=1,threads=1,versions.cudnn=9.10.2,versions.nccl=null"
"$compare" --table-only --out-dir "$d" > "$tmp/out2" 2> "$tmp/err2"
check "threads differ: bold warning" "$d/compare.md" '^\*\*Warning: ranzcr and pytorch differ in threads \(16 vs 1\)'
check "libraries differ: bold warning" "$d/compare.md" '^\*\*Warning: the two processes loaded different libraries: cudnn 9\.19\.0 \(ranzcr\) vs 9\.10\.2 \(pytorch\), nccl 2\.28\.9 \(ranzcr\) vs none \(pytorch\)'
check "warnings on stderr" "$tmp/err2" '^compare\.sh: warning: ranzcr and pytorch differ in threads'
check "single runs: no spread shown" "$d/compare.md" '^\| compute .*\| 750\.0 \| 900\.0 \| 0\.83x \| - \| - \| - \|'
check "no compile runs: said so" "$d/compare.md" 'pytorch compile: not run'
check "no plain runs: said so" "$d/compare.md" 'pytorch plain: not run'
check_not "no profile table without profiles" "$tmp/out2" 'rank \| ranzcr kernel'

# 3. An older folder: ours.json and pytorch.json alone (no versions, no per-run files); on a CPU the CUDA
#    libraries are not compared, torch is.
d=$tmp/old
mkdir -p "$d"
run "$d" \
  "ours device=cpu,compute_images_per_sec=5.2,loader_images_per_sec=77.9,e2e_images_per_sec=4.9,versions.cudnn=null,versions.cublas=null,versions.nccl=null" \
  "pytorch device=cpu,compute_images_per_sec=4.1,loader_images_per_sec=46.7,e2e_images_per_sec=3.9,versions.cudnn=9.19.0,versions.cublas=null,versions.nccl=null"
"$compare" --table-only --out-dir "$d" > "$tmp/out3" 2> "$tmp/err3"
check "older folder: the single figures" "$d/compare.md" '^\| compute .*\| 5\.2 \| 4\.1 \| 1\.27x \|'
check_not "CPU run: cuDNN of a CUDA build not warned" "$d/compare.md" 'different libraries'
cmp -s <(python3 -c 'import json,sys; print(sorted(json.load(open(sys.argv[1]))))' "$d/ours.json") \
  <(echo "['batch_size', 'channels_last', 'compute_images_per_sec', 'device', 'e2e_images_per_sec', 'image_size', 'loader_images_per_sec', 'loader_steps', 'loader_workers', 'model', 'precision', 'steps', 'threads', 'torch_version', 'versions', 'warmup', 'world_size']") &&
  echo "ok: an older ours.json is left as it is" || { echo "FAILED: ours.json was rewritten"; failures=$((failures + 1)); }

# 4. One-line errors.
"$compare" --table-only --out-dir "$tmp/none" > /dev/null 2> "$tmp/err4"
[[ $? != 0 && $(wc -l < "$tmp/err4") == 1 ]] && check "missing folder: one line" "$tmp/err4" '^compare\.sh: no folder' ||
  { echo "FAILED: missing folder"; cat "$tmp/err4"; failures=$((failures + 1)); }
mkdir -p "$tmp/empty"
"$compare" --table-only --out-dir "$tmp/empty" > /dev/null 2> "$tmp/err5"
[[ $? != 0 && $(wc -l < "$tmp/err5") == 1 ]] && check "empty folder: one line" "$tmp/err5" '^compare\.sh: no .*ours-K\.json or .*pytorch-K\.json' ||
  { echo "FAILED: empty folder"; cat "$tmp/err5"; failures=$((failures + 1)); }
"$compare" --repeats 0 > /dev/null 2> "$tmp/err6"
[[ $? != 0 && $(wc -l < "$tmp/err6") == 1 ]] && check "--repeats 0: one line" "$tmp/err6" '^compare\.sh: --repeats expects a whole number >= 1' ||
  { echo "FAILED: --repeats 0"; cat "$tmp/err6"; failures=$((failures + 1)); }
"$compare" --bogus > /dev/null 2> "$tmp/err7"
[[ $? != 0 && $(wc -l < "$tmp/err7") == 1 ]] && check "unknown argument: one line" "$tmp/err7" "^compare\.sh: unknown argument '--bogus'" ||
  { echo "FAILED: unknown argument"; cat "$tmp/err7"; failures=$((failures + 1)); }
"$compare" --help > "$tmp/help"
check "--help names the new options" "$tmp/help" '--repeats R.*--no-compile.*--no-plain.*--profile'

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
