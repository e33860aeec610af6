#!/usr/bin/env bash
# The GPU checks of one short device session (15 minutes of device time a task, the machine's start
# included), in the order that gives the most if time runs out: the decisive ratio to PyTorch first.
#
# First call (the default; TOTAL_SECONDS 540; `--plan` prints the steps, their limits and their sum):
#   host         nvidia-smi, the versions of torch, cuDNN, timm, OpenCV
#   build-ranzcr the ranzcr target alone (build-on-host.sh, RANZCR_BUILD_TARGET=ranzcr): 97 of the 200 objects,
#                so a slow build of the tests cannot cost the binary
#   bench-main   scripts/bench/compare.sh, resnet50 at 512 px, bf16, batch 64: ranzcr, PyTorch eager and
#                torch.compile, one run each, no profiler (the figures are in the log when the step ends)
#   bench-pair   a second ranzcr/eager pair into the same table (compare.sh --append), each side profiling
#                after its figures: the top kernels of both sides, and the layout of every convolution's
#                inputs (profiles.md, profiles.json)
#   build-tests  the targets of the GPU tests (models_tests engine_tests distributed_tests apps_tests)
#   tests        ctest -R "$GPU_TESTS": the CUDA, NCCL and channels-last tests (each CUDA test with a ctest
#                timeout of its own, tests/ctest_timeouts.cmake, so a hang cannot take the step)
# Second call (`--second`: SKIP_BUILD=1, on the machine still warm after the first; TOTAL_SECONDS 240):
#   bench-more   efficientnet_b3 and resnet200d, one ranzcr/eager pair each, no compile column,
#                efficientnet_b3 profiled
#   recipe       `ranzcr synth` of 2048-px JPEGs, then `ranzcr bench` of the recipe (configs/ranzcr.yaml:
#                efficientnet_b3 at 512 px, CLAHE) with data.cache on (built at its start) and off (the
#                decode path): e2e against compute, and the GPU's busy share in the e2e phase (nvidia-smi)
#   cpu-bf16     training on the host's CPU (AMX or AVX-512 BF16 where lscpu lists them; one development machine
#                had AVX-512 BF16: docs/benchmarks.md): resnet18 at 256 px, batch 32, train.precision bf16 beside PyTorch's
#                torch.autocast("cpu", torch.bfloat16), then the same pair in fp32 (compare.sh, 1 pair each);
#                last, it gets what the 240 s leave (often nothing: `STEPS=cpu-bf16 ... --second` runs it alone)
#
# Each step gets its own limit or what is left of TOTAL_SECONDS, whichever is less; a step with under 20 s
# left is skipped; each writes into OUT (default runs/device-check) as it runs, so a cut call still returns
# what it measured. At most 8 files in OUT (what the device tool returns): summary.txt, host.txt, build.log,
# bench-main.log, bench-pair.log (bench-more.log, recipe.log, cpu-bf16.log in the second call), profiles.md,
# profiles.json, ctest-gpu.log. The limits are estimates for an H100/H200 host with 16 cores (see each step's
# comment); none was measured in this order yet.
#   scripts/offline/device-check.sh --plan                 # the first call's steps and limits; no run
#   OUT=$OUT scripts/offline/device-check.sh               # the first call
#   OUT=$OUT scripts/offline/device-check.sh --second      # the second call, on the warm machine
# A dry run of the control flow on a CPU machine (tiny sizes; the GPU-only parts say they are skipped):
#   SKIP_BUILD=1 BIN=build/ranzcr BUILD_DIR=build STEPS="bench-main bench-pair tests bench-more recipe cpu-bf16" \
#     PRECISION=fp32 MAIN_MODEL=resnet18 MAIN_SIZE=64 MAIN_BATCH=8 STEPS_PER_FIGURE=3 WARMUP=1 NO_COMPILE=1 \
#     MORE_MODELS=tiny_cnn MORE_BATCH=8 NUM_IMAGES=40 IMAGE_SIZE=256 RECIPE_MODEL=tiny_cnn RECIPE_SIZE=64 \
#     RECIPE_BATCH=8 GPU_TESTS=ChannelsLast.Recorder OUT=/tmp/dc scripts/offline/device-check.sh
# Settings (environment): BUILD_DIR (build-gpu), BIN, PYTHON (python3: torch, timm, cv2 for the reference),
# STEPS (the call's steps), GPU_TESTS (the ctest regex), the limits (HOST_SECONDS, BUILD_SECONDS,
# BENCH_MAIN_SECONDS, BENCH_PAIR_SECONDS, BUILD_TESTS_SECONDS, TEST_SECONDS, BENCH_MORE_SECONDS a model,
# SYNTH_SECONDS, RECIPE_BENCH_SECONDS a bench), MAIN_MODEL/MAIN_SIZE/MAIN_BATCH, MORE_MODELS ("efficientnet_b3
# resnet200d"), MORE_BATCH (32), WORKERS (loader threads/processes: cores - 2), SYNTH_DIR (datasets/synth2048),
# NUM_IMAGES (300), RECIPE_STEPS (20), RECIPE_LOADER_STEPS (40: the loader's first batches come from its
# prefetch queue, so a short loader figure overstates it), BENCH_DATA (data.root of the compare runs; default
# the quickstart's synthetic set, which ranzcr generates on first use).
set -uo pipefail
cd "$(dirname "$0")/../.."

call=first plan_only=0
for arg in "$@"; do
  case $arg in
    --plan) plan_only=1 ;;
    --second) call=second ;;
    -h | --help)
      awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
      exit 0
      ;;
    *) echo "device-check.sh: unknown argument '$arg' (--plan, --second, --help)" >&2; exit 2 ;;
  esac
done
if [[ $call == second ]]; then
  SKIP_BUILD=${SKIP_BUILD:-1}
  STEPS=${STEPS:-bench-more recipe cpu-bf16}
  TOTAL_SECONDS=${TOTAL_SECONDS:-240}
else
  STEPS=${STEPS:-build-ranzcr bench-main bench-pair build-tests tests}
  TOTAL_SECONDS=${TOTAL_SECONDS:-540}
fi
MORE_MODELS=${MORE_MODELS:-efficientnet_b3 resnet200d}

# The limit of each step (seconds), with what the estimate rests on.
declare -A LIMIT=(
  [host]=${HOST_SECONDS:-15}                  # nvidia-smi and three python imports
  [build-ranzcr]=${BUILD_SECONDS:-130}        # ~140 s for 160 objects on 16 cores before: 97 objects + configure
  [bench-main]=${BENCH_MAIN_SECONDS:-140}     # ranzcr ~25 s (CUDA start, cuDNN autotuning), eager ~30 s,
                                              # torch.compile ~60-80 s the first time on 16 cores
  [bench-pair]=${BENCH_PAIR_SECONDS:-100}     # the pair again (~55 s) and two profiles (7 steps, trace, ~15 s each)
  [build-tests]=${BUILD_TESTS_SECONDS:-70}    # 40 more objects and four test binaries to link
  [tests]=${TEST_SECONDS:-55}                 # ~40 s in earlier sessions, the CUDA layout test of the zoo added
  [bench-more]=${BENCH_MORE_SECONDS:-65}      # a model: a pair without compile; resnet200d's autotuning is longest
  [recipe-synth]=${SYNTH_SECONDS:-25}         # 300 images of 2048 px (800 took ~20 s on 16 cores)
  [recipe-bench]=${RECIPE_BENCH_SECONDS:-35}  # a bench: cache build or decode path, 20 steps
  [cpu-bf16]=${CPU_BF16_SECONDS:-30}          # a CPU pair, 6 steps a figure: resnet18 at 256 px is ~10 images/s
                                              # a core in fp32 (2 cores: 5); with AMX bf16 several times that
)
# The call's steps in order, one entry per limit taken (bench-more once per model, recipe's bench twice).
plan_steps() {
  local s m
  [[ $call == first ]] && echo host
  for s in $STEPS; do
    case $s in
      bench-more) for m in $MORE_MODELS; do echo "bench-more"; done ;;
      recipe) echo recipe-synth; echo recipe-bench; echo recipe-bench ;;
      cpu-bf16) echo cpu-bf16; echo cpu-bf16 ;;
      *) echo "$s" ;;
    esac
  done
}
print_plan() {
  local total=0 s main_by=""
  echo "device-check.sh: the $call call (TOTAL_SECONDS $TOTAL_SECONDS; a step gets its limit or what is left)"
  while read -r s; do
    total=$((total + ${LIMIT[$s]}))
    printf '  %-13s limit %4d s, done by %4d s\n' "$s" "${LIMIT[$s]}" "$total"
    [[ $s == bench-main ]] && main_by=$total
  done < <(plan_steps)
  [[ -n $main_by ]] && echo "the comparison's figures (bench-main) by: $main_by s"
  ((total > TOTAL_SECONDS)) && echo "warning: the limits add up to more than TOTAL_SECONDS: the last steps get what is left"
  echo "$call call: $total s"
}
if [[ $plan_only == 1 ]]; then
  print_plan
  exit 0
fi

OUT=${OUT:-runs/device-check}
mkdir -p "$OUT"
BUILD_DIR=${BUILD_DIR:-build-gpu}
BIN=${BIN:-$BUILD_DIR/ranzcr}
PY=${PYTHON:-python3}
cores=$(nproc)
WORKERS=${WORKERS:-$((cores > 4 ? cores - 2 : 2))}
PRECISION=${PRECISION:-bf16}
STEPS_PER_FIGURE=${STEPS_PER_FIGURE:-15}
WARMUP=${WARMUP:-5}
t0=$(date +%s)
deadline=$((t0 + TOTAL_SECONDS))
step() { echo "=== $(date +%T) +$(($(date +%s) - t0)) s: $*" | tee -a "$OUT/summary.txt"; }
note() { echo "    $*" | tee -a "$OUT/summary.txt"; }
# limit NAME: the step's limit, or what is left of the whole call if less (0 when nothing is left).
limit() {
  local left=$((deadline - $(date +%s)))
  ((left < 0)) && left=0
  echo $((left < ${LIMIT[$1]} ? left : ${LIMIT[$1]}))
}
wanted() { [[ " $STEPS " == *" $1 "* ]]; }
# enough WHAT T: false (and a line saying so) when T, the step's limit, is under 20 s.
enough() {
  (($2 >= 20)) && return 0
  step "$1 skipped: $2 s left of TOTAL_SECONDS"
  return 1
}

print_plan | tee -a "$OUT/summary.txt"
step "host ($cores cores; steps: $STEPS)"
{ nvidia-smi; nproc; free -g; c++ --version | head -n 1
  timeout "${LIMIT[host]}" "$PY" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
  timeout "${LIMIT[host]}" "$PY" -c 'import timm, cv2; print("timm", timm.__version__, "opencv", cv2.__version__)'; } >"$OUT/host.txt" 2>&1

# build TARGETS...: build-on-host.sh of those targets alone (configure on the first), into build.log.
build() {
  local name=$1 t
  shift
  t=$(limit "$name")
  enough "$name" "$t" || return 1
  step "$name: $* (limit $t s)"
  echo "=== $name: $*" >>"$OUT/build.log"
  RANZCR_SKIP_TESTS=1 RANZCR_BUILD_TARGET="$*" BUILD_DIR=$BUILD_DIR timeout "$t" scripts/offline/build-on-host.sh \
    >>"$OUT/build.log" 2>&1
  step "$name rc=$?"
}
if [[ ${SKIP_BUILD:-0} == 1 ]]; then
  step "build skipped (SKIP_BUILD=1), binary $BIN"
elif wanted build-ranzcr; then
  build build-ranzcr ranzcr
fi
[ -x "$BIN" ] || { step "no binary $BIN: stopping"; tail -n 40 "$OUT/build.log" 2>/dev/null; exit 1; }
"$BIN" --version >>"$OUT/host.txt" 2>&1

# compare LOG LIMIT DIR COMPARE-ARGS...: compare.sh --out-dir DIR into LOG (appended); when it is cut or fails,
# the table of the runs it finished (--table-only); the compute row, warnings and profile lines to the
# summary, the profile summary (the top kernels and layouts of both sides) to OUT/profiles.md and .json.
compare() {
  local log=$1 t=$2 dir=$3
  shift 3
  # --no-plain: the plain reference's runs would cost device minutes the limits above do not hold
  RANZCR_BIN=$BIN PYTHON=$PY timeout "$t" scripts/bench/compare.sh "$@" --no-plain --out-dir "$dir" >>"$log" 2>&1
  local rc=$?
  if [[ $rc != 0 ]]; then
    echo "=== compare.sh rc=$rc (124: cut at $t s); the table of the runs it finished:" >>"$log"
    PYTHON=$PY timeout 30 scripts/bench/compare.sh --table-only --out-dir "$dir" >>"$log" 2>&1
  fi
  note "$(grep -E '^\| compute' "$dir/compare.md" 2>/dev/null || echo "no compute row")"
  grep -hE '^\*\*Warning|^- (ranzcr|pytorch) \(|^Convolution inputs|^## ' "$dir/compare.md" "$dir/profile.md" \
    "$dir/profile-summary.md" 2>/dev/null | while read -r w; do note "$w"; done
  if [[ -f $dir/profile-summary.md ]]; then
    { echo "# $dir"; echo; cat "$dir/profile-summary.md"; echo; cat "$dir/profile.md" 2>/dev/null; echo; } >>"$OUT/profiles.md"
    "$PY" - "$OUT/profiles.json" "$dir" <<'EOF'
import json, os, sys
path, folder = sys.argv[1], sys.argv[2]
merged = json.load(open(path)) if os.path.isfile(path) else {}
merged[folder] = json.load(open(os.path.join(folder, "profile-summary.json")))
json.dump(merged, open(path, "w"), indent=1)
EOF
  fi
  return $rc
}
bench_sets() {  # bench_sets MODEL SIZE BATCH: the --set arguments of a compare run
  echo --config configs/quickstart.yaml --set model.name="$1" --set data.image_size="$2" --set train.batch_size="$3" \
    --set train.precision="$PRECISION" --set data.num_workers="$WORKERS" ${BENCH_DATA:+--set data.root=$BENCH_DATA}
}
compile_flag=() compile_what="torch.compile column"
[[ ${NO_COMPILE:-0} == 1 ]] && compile_flag=(--no-compile) compile_what="no compile (NO_COMPILE=1)"
main_model=${MAIN_MODEL:-resnet50} main_size=${MAIN_SIZE:-512} main_batch=${MAIN_BATCH:-64}

# bench-main: the decisive ratio, no profiler in these runs.
if wanted bench-main; then
  t=$(limit bench-main)
  if enough bench-main "$t"; then
    step "bench-main: compare.sh $main_model $main_size px batch $main_batch $PRECISION, 1 run each, $compile_what (limit $t s)"
    # shellcheck disable=SC2046
    compare "$OUT/bench-main.log" "$t" runs/device-bench-main $(bench_sets "$main_model" "$main_size" "$main_batch") \
      --steps "$STEPS_PER_FIGURE" --warmup "$WARMUP" --repeats 1 "${compile_flag[@]}"
    step "bench-main rc=$?"
  fi
fi

# bench-pair: a second pair into the same table, each side profiling after its figures.
if wanted bench-pair; then
  t=$(limit bench-pair)
  if enough bench-pair "$t"; then
    step "bench-pair: compare.sh --append, a second ranzcr/eager pair, both profiled after their figures (limit $t s)"
    # shellcheck disable=SC2046
    compare "$OUT/bench-pair.log" "$t" runs/device-bench-main $(bench_sets "$main_model" "$main_size" "$main_batch") \
      --steps "$STEPS_PER_FIGURE" --warmup "$WARMUP" --repeats 1 --no-compile --profile --append
    step "bench-pair rc=$?"
  fi
fi

# build-tests, tests: the CUDA, NCCL and layout tests.
GPU_TESTS=${GPU_TESTS:-'Cuda|Nccl|World\.Gpu|ChannelsLast|Linking'}
if [[ ${SKIP_BUILD:-0} != 1 ]] && wanted build-tests; then
  build build-tests models_tests engine_tests distributed_tests apps_tests
fi
if wanted tests; then
  t=$(limit tests)
  if enough tests "$t"; then
    step "CUDA, NCCL and channels-last tests: ctest -R '$GPU_TESTS' (limit $t s)"
    timeout "$t" ctest --test-dir "$BUILD_DIR" -j "$cores" --output-on-failure -R "$GPU_TESTS" >"$OUT/ctest-gpu.log" 2>&1
    step "ctest rc=$? ($(grep -E 'tests passed|tests failed|No tests were found' "$OUT/ctest-gpu.log" | tail -n 1))"
    grep -E '(Passed|Failed|Not Run|Timeout|\*\*\*Skipped).*sec$' "$OUT/ctest-gpu.log" | grep -E 'Cuda|Nccl|Gpu' |
      while read -r l; do note "$l"; done
  fi
fi

# bench-more: efficientnet_b3 and resnet200d, one pair each, no compile column; the first one profiled.
if wanted bench-more; then
  first=1
  for m in $MORE_MODELS; do
    t=$(limit bench-more)
    enough "bench-more $m" "$t" || continue
    prof=()
    [[ $first == 1 ]] && prof=(--profile)
    first=0
    step "bench-more: compare.sh $m $main_size px batch ${MORE_BATCH:-32} $PRECISION, 1 pair, no compile${prof:+, profile} (limit $t s)"
    echo "=== $m" >>"$OUT/bench-more.log"
    # shellcheck disable=SC2046
    compare "$OUT/bench-more.log" "$t" "runs/device-bench-$m" $(bench_sets "$m" "$main_size" "${MORE_BATCH:-32}") \
      --steps "$((STEPS_PER_FIGURE * 2 / 3))" --warmup "$WARMUP" --repeats 1 --no-compile "${prof[@]}"
    step "bench-more $m rc=$?"
  done
fi

# recipe: the real recipe's data path, 2048-px JPEGs, data.cache on (built at the bench's start) and off.
gpu_mean() {  # gpu_mean SAMPLES JSON STEPS: mean utilization.gpu over the samples of the e2e phase
  "$PY" - "$@" <<'EOF'
import datetime, json, os, sys
samples, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    r = json.load(open(out))
    end = os.path.getmtime(out)  # bench writes its JSON right after the e2e phase, its last figure
except (OSError, ValueError):
    sys.exit(print("gpu busy: no bench JSON"))
span = steps * r["batch_size"] / r["e2e_images_per_sec"]  # the timed e2e steps, in seconds
rows = []
for line in open(samples):  # "2026/11/28 13:45:01.123, 97": nvidia-smi's local time, as getmtime's
    t, _, u = line.partition(",")
    try:
        rows.append((datetime.datetime.strptime(t.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(u)))
    except ValueError:
        pass
inside = [u for t, u in rows if end - span <= t <= end]
if not inside:
    sys.exit(print(f"gpu busy: no samples in the e2e phase ({len(rows)} samples in all)"))
print(f"gpu busy during e2e: {sum(inside) / len(inside):.0f}% (mean of {len(inside)} nvidia-smi utilization.gpu "
      f"samples, every 200 ms, in the last {span:.1f} s before the JSON was written; over the whole run: "
      f"{sum(u for _, u in rows) / max(len(rows), 1):.0f}%); e2e {r['e2e_images_per_sec']:.1f} vs compute "
      f"{r['compute_images_per_sec']:.1f} images/s = {r['e2e_images_per_sec'] / r['compute_images_per_sec']:.2f}")
EOF
}
# recipe_bench NAME CACHE: one ranzcr bench of the recipe with data.cache=CACHE, GPU utilization sampled.
recipe_bench() {
  local name=$1 cache=$2 t json=runs/device-recipe/$1.json samples=runs/device-recipe/$1.gpu
  t=$(limit recipe-bench)
  enough "recipe $name" "$t" || return 1
  step "recipe: bench $name (data.cache=$cache, limit $t s)"
  local sampler=""
  if command -v nvidia-smi >/dev/null 2>&1; then
    # utilization.gpu: the share of the last sample period in which a kernel ran; with its timestamp, for the
    # e2e window in gpu_mean
    nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 200 >"$samples" 2>&1 &
    sampler=$!
  fi
  echo "=== bench $name: data.cache=$cache" >>"$OUT/recipe.log"
  local s0
  s0=$(date +%s%N)
  timeout "$t" "$BIN" bench --config configs/ranzcr.yaml "${recipe_sets[@]}" --set data.cache="$cache" \
    --steps "${RECIPE_STEPS:-20}" --warmup "$WARMUP" --loader-steps "${RECIPE_LOADER_STEPS:-40}" --out "$json" \
    >>"$OUT/recipe.log" 2>&1
  local rc=$?
  note "$name: the whole bench took $((($(date +%s%N) - s0) / 1000000)) ms, rc=$rc"
  if [[ -n $sampler ]]; then
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    note "$(gpu_mean "$samples" "$json" "${RECIPE_STEPS:-20}" 2>&1 | tee -a "$OUT/recipe.log")"
  else
    note "no nvidia-smi: GPU utilization not sampled" | tee -a "$OUT/recipe.log" >/dev/null
  fi
  grep -E '^cache: built' "$OUT/recipe.log" | tail -n 1 | while read -r l; do note "$l"; done
  grep -E '^  (loader|compute|e2e) ' "$OUT/recipe.log" | tail -n 3 | while read -r l; do note "$name: $l"; done
  step "recipe $name rc=$rc"
}
if wanted recipe; then
  synth_dir=${SYNTH_DIR:-datasets/synth2048}
  n=${NUM_IMAGES:-300}
  rm -rf runs/device-recipe && mkdir -p runs/device-recipe
  if [[ -f $synth_dir/train.csv ]]; then
    step "recipe: $synth_dir exists, kept"
  else
    t=$(limit recipe-synth)
    if enough "recipe synth" "$t"; then
      step "recipe: ranzcr synth --num-images $n --image-size ${IMAGE_SIZE:-2048}, $cores threads (limit $t s)"
      rm -rf "$synth_dir"
      { time timeout "$t" "$BIN" synth --out "$synth_dir" --num-images "$n" --num-test-images 0 \
          --image-size "${IMAGE_SIZE:-2048}" --threads 0; } >>"$OUT/recipe.log" 2>&1
      step "synth rc=$? ($(du -sh "$synth_dir" 2>/dev/null | cut -f1))"
    fi
  fi
  if [[ -f $synth_dir/train.csv ]]; then
    recipe_sets=(--set data.root="$synth_dir" --set model.name="${RECIPE_MODEL:-efficientnet_b3}"
      --set model.pretrained= --set data.image_size="${RECIPE_SIZE:-512}" --set train.batch_size="${RECIPE_BATCH:-32}"
      --set train.precision="$PRECISION" --set data.num_workers="$WORKERS")
    recipe_bench cache-on on && recipe_bench cache-off off
  fi
fi
# cpu-bf16: the CPU's bf16 training beside PyTorch's CPU autocast, then fp32 for the ratio between them.
if wanted cpu-bf16; then
  flags=$(grep -m 1 '^flags' /proc/cpuinfo | grep -o -w -e amx_bf16 -e avx512_bf16 | tr '\n' ' ')
  for p in bf16 fp32; do
    t=$(limit cpu-bf16)
    enough "cpu-bf16 $p" "$t" || continue
    step "cpu-bf16: compare.sh on the CPU (${flags:-no AMX nor AVX-512 BF16}), resnet18 256 px batch 32 $p, 1 pair (limit $t s)"
    echo "=== cpu $p (${flags:-no native bf16})" >>"$OUT/cpu-bf16.log"
    compare "$OUT/cpu-bf16.log" "$t" "runs/device-cpu-$p" --config configs/quickstart.yaml --set train.device=cpu \
      --set model.name=resnet18 --set data.image_size=256 --set train.batch_size=32 --set train.precision="$p" \
      --set data.num_workers=2 ${BENCH_DATA:+--set data.root=$BENCH_DATA} --steps 6 --warmup 2 --repeats 1 --no-compile
    step "cpu-bf16 $p rc=$?"
    grep -E '^\| e2e' "runs/device-cpu-$p/compare.md" 2>/dev/null | while read -r l; do note "$p: $l"; done
  done
fi
step "done"
