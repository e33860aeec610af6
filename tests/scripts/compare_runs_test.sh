#!/usr/bin/env bash
# scripts/bench/compare.sh's run loop with stand-ins for both sides (a fake `ranzcr` and a fake reference
# behind a python wrapper; python3's standard library only): a side whose profile fails after its figures
# still counts and the comparison goes on; a side that fails outright is a warning, not the end; --append
# numbers a second pair after the first, and the table counts both; the profile summary is made from the
# traces (the hand-written one of tests/engine/jobs/kineto_trace/) with full kernel names and layouts; the plain
# reference (pytorch_reference.py --plain) runs after the like-for-like one, on ranzcr's device and threads.
# Exit 0: passed; 1: failed; 77: skipped (no python3).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
command -v python3 > /dev/null 2>&1 || { echo "skipped: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$here/checks.sh"
trace=$repo/tests/engine/jobs/kineto_trace/trace.json

# The fake ranzcr: `--help` lists bench, `bench --help` has --profile; a bench writes --out, then with
# --profile copies the trace and exits $FAKE_RANZCR_PROFILE_RC (a profile that crashed after the figures);
# $FAKE_RANZCR_RC (not 0) fails before any figure.
cat > "$tmp/ranzcr" << EOF
#!/usr/bin/env bash
[[ \$1 == --help ]] && { echo "  bench    Images per second"; exit 0; }
[[ \$2 == --help ]] && { echo "  --profile TEXT"; exit 0; }
[[ \${FAKE_RANZCR_RC:-0} != 0 ]] && { echo "fake ranzcr: failing" >&2; exit \$FAKE_RANZCR_RC; }
out="" prof=""
while [[ \$# -gt 0 ]]; do
  case \$1 in --out) out=\$2; shift ;; --profile) prof=\$2; shift ;; esac
  shift
done
echo '{"implementation": "ranzcr", "device": "cuda:0", "threads": 16, "model": "resnet50", "loader_images_per_sec": 100,
 "compute_images_per_sec": '\${FAKE_COMPUTE:-80}', "e2e_images_per_sec": 70, "versions": {"torch": "2.11.0"}}' > "\$out"
if [[ -n \$prof ]]; then
  mkdir -p "\$prof" && cp "$trace" "\$prof/trace.json"
  exit \${FAKE_RANZCR_PROFILE_RC:-0}
fi
EOF
# The fake python: pytorch_reference.py writes its figures (and a trace with --profile); compare.sh's module
# check finds everything; anything else is python3's.
cat > "$tmp/python" << EOF
#!/usr/bin/env bash
if [[ \${1:-} == */pytorch_reference.py ]]; then
  shift
  echo "fake reference \$*" >> "$tmp/reference-calls"
  out="" prof="" compile=0
  while [[ \$# -gt 0 ]]; do
    case \$1 in --out) out=\$2; shift ;; --profile) prof=\$2; shift ;; --compile) compile=1 ;; esac
    shift
  done
  echo '{"implementation": "pytorch", "device": "cuda:0", "threads": 16, "model": "resnet50", "loader_images_per_sec": 90,
   "compute_images_per_sec": 100, "e2e_images_per_sec": 75, "versions": {"torch": "2.11.0+cu130"}}' > "\$out"
  [[ -n \$prof ]] && mkdir -p "\$prof" && cp "$trace" "\$prof/trace.json"
  exit 0
fi
if [[ \${1:-} == - ]]; then
  script=\$(cat)
  [[ \$script == *find_spec* ]] && { echo ""; exit 0; }
  exec python3 - "\${@:2}" <<< "\$script"
fi
exec python3 "\$@"
EOF
chmod +x "$tmp/ranzcr" "$tmp/python"
cfg=$tmp/config.yaml
echo "seed: 1" > "$cfg"
export RANZCR_BIN=$tmp/ranzcr PYTHON=$tmp/python
compare=$repo/scripts/bench/compare.sh
d=$tmp/runs

# 1. ranzcr's profile fails after its figures (exit 3): its figures count, the reference runs and profiles.
FAKE_RANZCR_PROFILE_RC=3 "$compare" --config "$cfg" --out-dir "$d" --repeats 1 --no-compile --profile \
  > "$tmp/out1" 2> "$tmp/err1"
rc=$?
[[ $rc == 0 ]] && echo "ok: a failed profile does not fail the comparison" ||
  { echo "FAILED: exit $rc"; cat "$tmp/err1"; failures=$((failures + 1)); }
check "the failure is a warning" "$tmp/err1" '^compare\.sh: warning: ranzcr bench exited 3 after writing its figures'
check "the reference ran on ranzcr's device with its threads" "$tmp/reference-calls" '--device cuda --threads 16 .*--profile'
check "one run of each side in the table" "$d/compare.md" 'ranzcr, 1 run \| pytorch, 1 run'
check "the plain reference ran after it, on the same device and threads" "$tmp/reference-calls" \
  '--device cuda --threads 16 --plain --out .*/pytorch-plain-1\.json$'
check "the plain reference in the table" "$d/compare.md" 'pytorch plain, 1 run'
check "compute ratio 80/100" "$d/compare.md" '^\| compute .*\| 80\.0 \| 100\.0 \| 0\.80x \|'
check "the summary of both sides" "$d/profile-summary.md" '^## pytorch: 2 steps'
check "the summary: full kernel names, layouts" "$d/profile-summary.md" '^\| 1 \| `[^`]{100,}` \| [0-9]+ \| .*NHWC'
check "the summary says whether every convolution read NHWC" "$d/profile-summary.md" '^Convolution inputs, kernel calls over the whole trace: .*NCHW'
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert set(d) == {"ranzcr", "pytorch"}, d.keys(); assert len(d["ranzcr"]["kernels"]) >= 1' \
  "$d/profile-summary.json" && echo "ok: profile-summary.json has both sides" ||
  { echo "FAILED: profile-summary.json"; failures=$((failures + 1)); }

# 2. --append: a second pair numbered after the first; ranzcr fails outright this time (a warning), the
#    reference still runs, and the table counts ranzcr's one run and the reference's two.
FAKE_RANZCR_RC=2 "$compare" --config "$cfg" --out-dir "$d" --repeats 1 --no-compile --append \
  > "$tmp/out2" 2> "$tmp/err2"
rc=$?
[[ $rc == 0 ]] && echo "ok: a failed ranzcr run does not end the comparison" ||
  { echo "FAILED: exit $rc"; cat "$tmp/err2"; failures=$((failures + 1)); }
check "the failed run is a warning" "$tmp/err2" '^compare\.sh: warning: ranzcr bench failed \(exit 2\): no figures from this run'
[[ -f $d/pytorch-2.json && ! -f $d/ours-2.json && -f $d/ours-1.json ]] && echo "ok: run 2 numbered after run 1, run 1 kept" ||
  { echo "FAILED: the files of --append: $(ls "$d")"; failures=$((failures + 1)); }
check "the table counts both calls' runs" "$d/compare.md" 'ranzcr, 1 run \| pytorch, 2 runs'
check "the profiles of the first call are kept" "$d/profile-summary.md" '^## ranzcr'

# 3. A third pair with both sides fine: the ranzcr figures now have 2 runs, the median of 80 and 60.
FAKE_COMPUTE=60 "$compare" --config "$cfg" --out-dir "$d" --repeats 1 --no-compile --append > "$tmp/out3" 2> "$tmp/err3"
check "three calls, one table" "$d/compare.md" '^\| compute .*\| 70\.0 \(60\.0–80\.0\) \| 100\.0 \(100\.0–100\.0\) \| 0\.70x \|'

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
