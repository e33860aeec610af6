#!/usr/bin/env bash
# Builds the fuzz targets of fuzz/ (clang-14, libFuzzer, AddressSanitizer + UndefinedBehaviorSanitizer) into
# build-fuzz/ and runs each for a while from its checked-in seed corpus. Fails when any target crashes,
# leaks, takes over 10 s for one input, needs over 2 GiB, or breaks the one-line-error promise (see
# fuzz/fuzz_util.h); the input that did it is kept under build-fuzz/run/<target>/artifacts/.
#   scripts/fuzz.sh                       # every target, 60 s each, as many at once as there are cores
#   scripts/fuzz.sh --seconds 30          # CI's short pass
#   scripts/fuzz.sh --seconds 1800 --targets torch_pickle,csv --jobs 2
#   scripts/fuzz.sh --build-only          # build, run nothing
#   scripts/fuzz.sh --replay FILE|DIR...  # run the targets' programs once over inputs (no fuzzing)
#   scripts/fuzz.sh --replay-checked-in   # each target once over its fuzz/corpus/ and fuzz/regressions/
#                                         # under the sanitizers: CI's gate (no random seed, no time box)
#   scripts/fuzz.sh --seconds 1800 --targets dicom --keep-going   # libFuzzer's fork mode: goes on past each
#                                         # finding for the whole time, keeps every input in artifacts/, fails at the end
#   --seed N: libFuzzer's seed for every target (default: a new one each run, named when a target fails; the
#             same seed does not promise the same path: a seed-1 pass found on one clone what it missed on another)
# The inputs found while fuzzing stay in build-fuzz/run/<target>/corpus (seeds of the next run there); the
# checked-in corpus (fuzz/corpus/) is never written. Needs what scripts/setup.sh sets up (it runs it), plus
# Debian's clang-14 and libclang-rt-14-dev (installed when missing, like setup.sh's packages).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=$ROOT/build-fuzz
# Every target of fuzz/targets/ (fuzz/CMakeLists.txt lists the same names for the build).
ALL_TARGETS=$(cd fuzz/targets && ls *.cpp | sed "s/\.cpp$//" | tr "\n" " ")
SECS=60
JOBS=$(nproc)
TARGETS=$ALL_TARGETS
BUILD_ONLY=0
SEED=0
REPLAY=()
REPLAY_CHECKED_IN=0
KEEP_GOING=()
die() {
  echo "error: $*" >&2
  exit 1
}
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECS=${2:?--seconds needs a number}; shift 2 ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift 2 ;;
    --targets) TARGETS=${2//,/ }; shift 2 ;;
    --seed) SEED=${2:?--seed needs a number}; shift 2 ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --replay) shift; REPLAY=("$@"); break ;;
    --replay-checked-in) REPLAY_CHECKED_IN=1; shift ;;
    --keep-going) KEEP_GOING=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1); shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see scripts/fuzz.sh --help)" ;;
  esac
done
[[ "$SECS" =~ ^[0-9]+$ && "$SECS" -gt 0 ]] || die "--seconds must be a whole number of seconds > 0, got '$SECS'"
[[ "$JOBS" =~ ^[0-9]+$ && "$JOBS" -gt 0 ]] || die "--jobs must be a whole number > 0, got '$JOBS'"
[[ "$SEED" =~ ^[0-9]+$ && "$SEED" -lt 4294967296 ]] || die "--seed must be a whole number below 2^32, got '$SEED'"
for t in $TARGETS; do
  [[ " $ALL_TARGETS " == *" $t "* ]] || die "unknown target '$t' (targets: $ALL_TARGETS)"
done

# 1. clang with libFuzzer and the sanitizer runtimes.
if ! command -v clang++-14 >/dev/null || ! command -v dpkg-source >/dev/null ||
  ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  [ "${RANZCR_OFFLINE:-0}" = 1 ] && die "no clang-14/libclang-rt-14-dev, and RANZCR_OFFLINE=1 forbids apt-get"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "fuzz: installing Debian packages: clang-14 libclang-rt-14-dev dpkg-dev" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-14 libclang-rt-14-dev dpkg-dev >/dev/null
fi

# 2. The DICOM libraries instrumented as our code is (scripts/dicom-libs.sh: DCMTK and OpenJPEG from Debian's
#    source packages, once), so that the dicom target sees inside the decoders.
say() { echo "fuzz: $*" >&2; }
. scripts/dicom-libs.sh
# Outside the clone (every clone's fuzz build shares it; its stamp names the recipe, another one rebuilds).
DEPS=${RANZCR_FUZZ_DEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/ranzcr/fuzz-dicom-libs}
# UBSan recoverable here (halt_on_error=1 below stops at the first report all the same): DCMTK's configure
# runs test programs built with these flags that divide by zero on purpose.
SAN_FLAGS="-fsanitize=address,undefined,fuzzer-no-link -fno-omit-frame-pointer -gline-tables-only"
UBSAN_OPTIONS=halt_on_error=0 ASAN_OPTIONS=detect_leaks=0 \
  CC=clang-14 CXX=clang++-14 DICOM_LIBS_FLAGS=$SAN_FLAGS DICOM_LIBS_BUILD_DIR=$BUILD/dicom-libs-build \
  dicom_libs_install "$DEPS" fuzz-deps \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1
DEPS_ARGS="-DDCMTK_DIR=$DEPS/lib/cmake/dcmtk -DOpenJPEG_DIR=$(dirname "$(ls "$DEPS"/lib/openjpeg-*/OpenJPEGConfig.cmake)")"
# A build folder configured before (or with Debian's DCMTK): point it at the instrumented ones.
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "^DCMTK_DIR:[A-Z]*=$DEPS/" "$BUILD/CMakeCache.txt"; then
  cmake $DEPS_ARGS "$BUILD" >/dev/null
fi

# 3. The fuzz build: setup.sh's dependencies and configure step, with clang and the sanitizers. No precompiled
#    header: clang writes the absolute path of every header it holds (the clone's .venv, its source tree) into
#    the .pch, ccache hashes the .pch into every key, and so a clone in another folder (CI's) missed ccache for
#    every file (6 minutes of this step on 2 cores, against well under one with the hits).
CC=clang-14 CXX=clang++-14 CXXFLAGS="-gline-tables-only" BUILD_DIR=$BUILD RANZCR_BUILD_TARGET=fuzz_targets \
  RANZCR_CMAKE_ARGS="-DRANZCR_FUZZ=ON -DRANZCR_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON $DEPS_ARGS" \
  scripts/setup.sh
grep -q "^DCMTK_DIR:[A-Z]*=$DEPS/" "$BUILD/CMakeCache.txt" || die "$BUILD did not take the instrumented DCMTK in $DEPS"
[ "$BUILD_ONLY" = 1 ] && exit 0

# The largest input a target is given: above its largest seed (a checkpoint of tiny_cnn is ~100 KB).
max_len() {
  case "$1" in
    trained_model|checkpoint_resume) echo 262144 ;;
    dicom|image) echo 131072 ;;
    weight_file) echo 65536 ;;
    *) echo 16384 ;;
  esac
}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
# fuzz/ubsan.supp: what UBSan may report in the instrumented DICOM libraries without stopping (with why).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$ROOT/fuzz/ubsan.supp}

if [ "$REPLAY_CHECKED_IN" = 1 ]; then
  # Every checked-in input of each target, once, under ASan/UBSan (a leak or a wild read fails here, where the
  # normal build's replay tests see only crashes and wrong answers).
  for t in $TARGETS; do
    mapfile -t files < <(find "fuzz/corpus/$t" "fuzz/regressions/$t" -type f 2>/dev/null | sort)
    [ ${#files[@]} -gt 0 ] || die "no checked-in inputs for target $t"
    echo "fuzz: replaying $t over ${#files[@]} checked-in inputs under the sanitizers" >&2
    "$BUILD/fuzz/fuzz_$t" -rss_limit_mb=2048 -timeout=10 "${files[@]}" > "$BUILD/replay-$t.log" 2>&1 ||
      { tail -40 "$BUILD/replay-$t.log" >&2; die "target $t failed on a checked-in input (log: $BUILD/replay-$t.log)"; }
  done
  echo "fuzz: every checked-in input of $(echo $TARGETS | wc -w) targets passed under ASan/UBSan" >&2
  exit 0
fi

if [ ${#REPLAY[@]} -gt 0 ]; then
  # Files only: given a folder, libFuzzer would fuzz with it as its corpus (and write into it).
  mapfile -t files < <(find "${REPLAY[@]}" -type f | sort)
  [ ${#files[@]} -gt 0 ] || die "no input files in ${REPLAY[*]}"
  for t in $TARGETS; do
    echo "fuzz: $t over ${#files[@]} inputs" >&2
    "$BUILD/fuzz/fuzz_$t" -rss_limit_mb=2048 -timeout=10 "${files[@]}"
  done
  exit 0
fi

# 4. Fuzz: each target in its own folder, JOBS at a time.
run_target() {
  local t=$1 work=$BUILD/run/$1
  rm -rf "$work/artifacts"  # this run's findings only
  mkdir -p "$work/corpus" "$work/artifacts"
  local dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  local TIMEFORMAT='%U %S'  # the CPU seconds it took, user and system, into cpu.txt
  { time "$BUILD/fuzz/fuzz_$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$(max_len "$t")" -artifact_prefix="$work/artifacts/" -print_final_stats=1 -seed="$SEED" "${dict[@]}" \
    "${KEEP_GOING[@]}" "$work/corpus" "fuzz/corpus/$t" > "$work/log.txt" 2>&1; } 2> "$work/cpu.txt"
  local rc=$?
  # In fork mode libFuzzer goes on after a finding: an input it kept fails the target all the same.
  [ "$rc" = 0 ] && [ -z "$(ls -A "$work/artifacts")" ]
}
summary() {  # one line of a target's figures from its log
  local t=$1 rc=$2 log=$BUILD/run/$1/log.txt
  local execs cov ft corp rss cpu
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\): cov.*/\1/p' "$log" | tail -1)  # fork mode
  cpu=$(awk 'NF == 2 { printf "%.0f", $1 + $2 }' "$BUILD/run/$1/cpu.txt" 2>/dev/null)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-18s %-8s %12s %8s %8s %8s %8s %8s\n' "$t" "$([ "$rc" = 0 ] && echo ok || echo FAILED)" \
    "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "${rss:-?}" "${cpu:-?}"
}
echo "fuzz: $(echo $TARGETS | wc -w) targets, ${SECS} s each, $JOBS at a time (logs: build-fuzz/run/<target>/log.txt)" >&2
declare -A RC
pending=($TARGETS)
running=()
while [ ${#pending[@]} -gt 0 ] || [ ${#running[@]} -gt 0 ]; do
  while [ ${#pending[@]} -gt 0 ] && [ ${#running[@]} -lt "$JOBS" ]; do
    t=${pending[0]}; pending=("${pending[@]:1}")
    run_target "$t" &
    running+=("$!:$t")
  done
  wait -n || true
  still=()
  for entry in "${running[@]}"; do
    pid=${entry%%:*}; t=${entry#*:}
    if kill -0 "$pid" 2>/dev/null; then still+=("$entry"); continue; fi
    rc=0; wait "$pid" || rc=$?
    RC[$t]=$rc
  done
  running=("${still[@]}")
done

printf '%-18s %-8s %12s %8s %8s %8s %8s %8s\n' target result executions cov ft corpus rss_mb cpu_s
failed=0
for t in $TARGETS; do
  summary "$t" "${RC[$t]}"
  [ "${RC[$t]}" = 0 ] || failed=1
done
if [ "$failed" = 1 ]; then
  for t in $TARGETS; do
    [ "${RC[$t]}" = 0 ] && continue
    seed=$(sed -n 's/^INFO: Seed: //p' "$BUILD/run/$t/log.txt" | head -1)
    echo "---- $t: the end of build-fuzz/run/$t/log.txt (inputs kept in build-fuzz/run/$t/artifacts/;" \
      "seed ${seed:-?}) ----" >&2
    tail -n 40 "$BUILD/run/$t/log.txt" >&2
  done
  die "fuzzing found a problem (above)"
fi
