#!/bin/bash
# Preemption check on a real (local, one-node) Slurm cluster: submits the app's sbatch patterns, cancels
# each job mid-epoch with `scancel` and reports whether the run saved a mid-epoch checkpoint. Run as root
# from anywhere (jobs run in the repository root, so configs/ and datasets/ resolve):
#
#   scripts/slurm/preemption-check.sh [--patterns env,A,B,C] [--no-resume] [--down]
#
#   env  records `env | grep ^SLURM` in the batch script and in each srun task (--ntasks=2), side by side
#   A    task per process: sbatch --ntasks=2, `srun ranzcr train ...` (each task is one worker)
#   B    task per node:    sbatch --ntasks=1 --cpus-per-task=2, `srun ranzcr train --nproc-per-node 2 ...`
#   C    no srun:          sbatch --ntasks=2, `ranzcr train ...` straight from the batch script (reported only)
#   T    pattern A with `#SBATCH --time=1` and no scancel: stopped by the time limit (not in the default list;
#        reported only, never fails the check; Slurm sends the step tasks SIGTERM twice at the time limit)
#
# A and B: waits for a training progress line ("epoch E/N step S/T") in the job's output, runs `scancel`,
# waits for the job to end, then reports the output tail, checkpoints/last.pt, the "stopped at epoch N batch
# M" line and the job's final state; then (unless --no-resume) runs the same training outside Slurm with
# `--resume .../last.pt --nproc-per-node 2` into another folder until it logs "resumed from ...", and stops
# it. Exit status: 0 when A and B both saved mid-epoch, 1 otherwise (C never fails the check).
# It brings the cluster up first with scripts/slurm/local-slurm.sh up (idempotent); --down takes it down
# at the end.
#
# Environment:
#   RANZCR_BIN         the binary (default build/ranzcr, relative to the repository root)
#   RANZCR_CONFIG      the config (default configs/quickstart.yaml; a relative path is the repository's)
#   RANZCR_EPOCHS      train.epochs (default 3)
#   RANZCR_EPOCHS_T    train.epochs for pattern T (default 50: still training at the 1 minute limit)
#   RANZCR_EXTRA_SET   more `--set` arguments for every run, space separated (e.g. "train.batch_size=16")
#   CHECK_DIR          where job scripts, outputs and run folders go (default: a new /tmp/ranzcr-preempt.*)
#   PROGRESS_TIMEOUT   seconds to wait for the first progress line (default 600: the first use generates data)
#   END_TIMEOUT        seconds to wait for a job to end after scancel (default 180; KillWait is 30)
#   C_TIMEOUT          seconds pattern C may run before it is cancelled (default 180)
#   SCANCEL_ARGS       extra scancel arguments for A and B, e.g. "--signal=TERM" (default: none, plain scancel)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BIN=${RANZCR_BIN:-build/ranzcr}
[[ $BIN == /* ]] || BIN=$REPO/$BIN
CONFIG=${RANZCR_CONFIG:-configs/quickstart.yaml}
[[ $CONFIG == /* ]] || CONFIG=$REPO/$CONFIG
EPOCHS=${RANZCR_EPOCHS:-3}
PROGRESS_TIMEOUT=${PROGRESS_TIMEOUT:-600}
END_TIMEOUT=${END_TIMEOUT:-180}
C_TIMEOUT=${C_TIMEOUT:-180}
PROGRESS_RE='epoch [0-9]+/[0-9]+ step [0-9]+/[0-9]+'
PATTERNS=env,A,B,C
RESUME=1
DOWN=0

while [[ $# -gt 0 ]]; do
  case $1 in
    --patterns) PATTERNS=$2; shift 2 ;;
    --patterns=*) PATTERNS=${1#*=}; shift ;;
    --no-resume) RESUME=0; shift ;;
    --down) DOWN=1; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "error: $*" >&2; exit 2; }
say() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*"; }
[[ -x $BIN ]] || die "no executable binary at $BIN (set RANZCR_BIN)"
[[ -f $CONFIG ]] || die "no config at $CONFIG (set RANZCR_CONFIG)"
CHECK_DIR=${CHECK_DIR:-$(mktemp -d /tmp/ranzcr-preempt.XXXXXX)}
mkdir -p "$CHECK_DIR"
STATE=${LOCAL_SLURM_STATE:-/var/spool/slurm-local}

"$HERE/local-slurm.sh" up >/dev/null || die "could not bring the local Slurm cluster up"

EXTRA=()
for kv in ${RANZCR_EXTRA_SET:-}; do EXTRA+=(--set "$kv"); done
# Progress lines every 2 s so that the first one comes early in epoch 1.
COMMON=(train --config "$CONFIG" --set "train.epochs=$EPOCHS" --set train.log_every_seconds=2 "${EXTRA[@]}")

# Quotes its arguments for a shell script line.
q() { printf '%q ' "$@"; }

# The final state of job $1, from sacct when accounting works, else scontrol and the jobcomp log.
job_state() {
  local id=$1 s
  if s=$(sacct -n -X -P -j "$id" -o JobID,State,ExitCode,Elapsed 2>/dev/null) && [[ -n $s ]]; then
    echo "sacct: $s"
    return
  fi
  s=$(scontrol show job "$id" 2>/dev/null | grep -oE '(^|[[:space:]])(JobState|Reason|ExitCode|RunTime)=[^[:space:]]*' | sed 's/^[[:space:]]*//' | tr '\n' ' ')
  echo "scontrol: ${s:-job record gone} (sacct: no accounting storage)"
  if [[ -f $STATE/jobcomp.log ]]; then
    s=$(grep -E "^JobId=$id " "$STATE/jobcomp.log" | tail -n1 | grep -oE '(^|[[:space:]])(JobState|ExitCode|StartTime|EndTime)=[^[:space:]]*' | sed 's/^[[:space:]]*//' | tr '\n' ' ')
    [[ -n $s ]] && echo "jobcomp.log: $s"
  fi
}

# Waits until job $1 has left squeue (completing included) or $2 seconds; status 1 on timeout.
wait_gone() {
  local id=$1 limit=$2 t0=$SECONDS
  while ((SECONDS - t0 < limit)); do
    [[ -z $(squeue -h -j "$id" -o %i 2>/dev/null) ]] && return 0
    sleep 0.5
  done
  return 1
}

submit() { # NAME SCRIPT -> job id
  local id
  id=$(sbatch --parsable "$2") || return 1
  echo "${id%%;*}"
}

write_job() { # FILE SBATCH-OPTION-LINES BODY
  {
    echo '#!/bin/bash'
    printf '%s\n' "$2"
    cat <<'EOF'
echo "batch script: host $(hostname -s), job $SLURM_JOB_ID, start $(date +%T)"
EOF
    printf '%s\n' "$3"
    cat <<'EOF'
rc=$?
echo "batch script: command exited with status $rc at $(date +%T)"
exit $rc
EOF
  } >"$1"
}

declare -A RESULT

run_env_probe() {
  local d=$CHECK_DIR/env id
  mkdir -p "$d"
  write_job "$d/job.sbatch" "#SBATCH --job-name=ranzcr-env
#SBATCH --ntasks=2
#SBATCH --output=$d/slurm-%j.out
#SBATCH --chdir=$REPO" "env | grep '^SLURM' | sort > $d/batch.env
srun bash -c 'env | grep ^SLURM | sort > $d/task-\$SLURM_PROCID.env'"
  id=$(submit env "$d/job.sbatch") || { RESULT[env]="FAIL (sbatch)"; return; }
  wait_gone "$id" 60 || scancel "$id"
  say "env: SLURM variables in the batch script vs srun task 0 / task 1 (job $id, sbatch --ntasks=2)"
  local vars v
  vars=$(cat "$d"/*.env 2>/dev/null | cut -d= -f1 | sort -u)
  printf '  %-36s %-22s %-22s %s\n' VARIABLE BATCH-SCRIPT SRUN-TASK-0 SRUN-TASK-1
  for v in $vars; do
    printf '  %-36s %-22s %-22s %s\n' "$v" \
      "$(grep "^$v=" "$d/batch.env" 2>/dev/null | cut -d= -f2- || true)" \
      "$(grep "^$v=" "$d/task-0.env" 2>/dev/null | cut -d= -f2- || true)" \
      "$(grep "^$v=" "$d/task-1.env" 2>/dev/null | cut -d= -f2- || true)"
  done | sed 's/ *$//'
  RESULT[env]="recorded in $d"
}

# Runs the training outside Slurm from CKPT into DIR until it logs "resumed from", then stops it.
resume_check() { # NAME CKPT DIR
  local name=$1 ckpt=$2 dir=$3 log=$3.log pid line t0
  mkdir -p "$dir"
  local unset_slurm=()
  for v in $(compgen -e | grep '^SLURM' || true); do unset_slurm+=(-u "$v"); done
  (cd "$REPO" && exec setsid env "${unset_slurm[@]}" "$BIN" "${COMMON[@]}" --nproc-per-node 2 \
    --set "output.dir=$dir" --resume "$ckpt") >"$log" 2>&1 &
  pid=$!
  t0=$SECONDS
  line=""
  while ((SECONDS - t0 < 180)) && kill -0 "$pid" 2>/dev/null; do
    line=$(grep -m1 'resumed from' "$log" 2>/dev/null || true)
    [[ -n $line ]] && break
    sleep 0.5
  done
  sleep 1
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [[ -n $line ]]; then
    say "$name: resume outside Slurm (--nproc-per-node 2): $line"
    RESUMED_LINE=$line
  else
    say "$name: resume outside Slurm did not log 'resumed from' (tail of $log):"
    tail -n 8 "$log" | sed 's/^/    /'
    RESUMED_LINE=""
  fi
}

run_pattern() { # A|B
  local p=$1 d=$CHECK_DIR/$1 run=$CHECK_DIR/$1/run opts body id out t0 tc cancel_at=""
  rm -rf "$d"
  mkdir -p "$d"
  case $p in
    A)
      opts="#SBATCH --ntasks=2"
      body="srun --kill-on-bad-exit=1 $(q "$BIN" "${COMMON[@]}" --set distributed.nproc_per_node=1 --set "output.dir=$run")"
      ;;
    B)
      opts="#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2"
      body="srun --kill-on-bad-exit=1 $(q "$BIN" "${COMMON[@]}" --nproc-per-node 2 --set "output.dir=$run")"
      ;;
    T) # pattern A stopped by the time limit instead of scancel; epochs enough to outlast it
      opts="#SBATCH --ntasks=2
#SBATCH --time=1"
      body="srun --kill-on-bad-exit=1 $(q "$BIN" "${COMMON[@]}" --set distributed.nproc_per_node=1 \
        --set "train.epochs=${RANZCR_EPOCHS_T:-50}" --set "output.dir=$run")"
      ;;
  esac
  write_job "$d/job.sbatch" "#SBATCH --job-name=ranzcr-$p
$opts
#SBATCH --output=$d/slurm-%j.out
#SBATCH --chdir=$REPO" "$body"
  say "$p: submitting $d/job.sbatch:"
  grep -v '^#!' "$d/job.sbatch" | sed 's/^/    /'
  id=$(submit "$p" "$d/job.sbatch") || { RESULT[$p]="FAIL (sbatch failed)"; return; }
  out=$d/slurm-$id.out
  say "$p: job $id; waiting for a progress line in $out"
  t0=$SECONDS
  local progressed=0
  while ((SECONDS - t0 < PROGRESS_TIMEOUT)); do
    if grep -qE "$PROGRESS_RE" "$out" 2>/dev/null; then progressed=1; break; fi
    [[ -z $(squeue -h -j "$id" -o %i 2>/dev/null) ]] && break
    sleep 0.5
  done
  if [[ $progressed == 0 ]]; then
    say "$p: no progress line (job ended or timed out); output tail:"
    tail -n 25 "$out" 2>/dev/null | sed 's/^/    /'
    scancel "$id" 2>/dev/null
    wait_gone "$id" "$END_TIMEOUT"
    job_state "$id" | sed 's/^/    /'
    RESULT[$p]="FAIL (never reached training)"
    return
  fi
  say "$p: $(grep -E "$PROGRESS_RE" "$out" | tail -n1)"
  local what=scancel
  if [[ $p == T ]]; then
    what="time limit"
    say "$p: waiting for the time limit (--time=1)"
    while [[ $(squeue -h -j "$id" -o %T 2>/dev/null) == RUNNING ]]; do sleep 0.2; done
  else
    say "$p: scancel ${SCANCEL_ARGS:-}${SCANCEL_ARGS:+ }$id ($((SECONDS - t0)) s after submission)"
    # shellcheck disable=SC2086 # word splitting wanted
    scancel ${SCANCEL_ARGS:-} "$id"
  fi
  cancel_at=$(date +%s.%N)
  tc=$SECONDS
  if wait_gone "$id" "$END_TIMEOUT"; then
    say "$p: job $id ended $((SECONDS - tc)) s after $what"
  else
    say "$p: job $id still there $END_TIMEOUT s after $what"
  fi
  say "$p: output tail ($out):"
  tail -n 25 "$out" | sed 's/^/    /'
  say "$p: final state:"
  job_state "$id" | sed 's/^/    /'
  local ckpt=$run/checkpoints/last.pt stopped saved_after=""
  stopped=$(cat "$out" "$run/log.txt" 2>/dev/null | grep -oE 'stopped (at|after) epoch [0-9]+( batch [0-9]+/[0-9]+)?' | head -n1)
  if [[ -f $ckpt ]]; then
    saved_after=$(awk -v a="$(stat -c %.3Y "$ckpt")" -v b="$cancel_at" 'BEGIN { printf "%+.1f", a - b }')
    say "$p: $ckpt exists ($(stat -c %s "$ckpt") bytes, written ${saved_after} s after $what)"
  else
    say "$p: no $ckpt"
  fi
  say "$p: stop line: ${stopped:-none}"
  if [[ -f $ckpt && $stopped == "stopped at epoch"* ]]; then
    RESULT[$p]="PASS (mid-epoch save: $stopped)"
  elif [[ -f $ckpt && $stopped == "stopped after epoch"* ]]; then
    RESULT[$p]="FAIL (inconclusive: stopped at an epoch boundary, not mid-epoch: $stopped)"
  else
    RESULT[$p]="FAIL (no mid-epoch save: last.pt $([[ -f $ckpt ]] && echo exists || echo missing), stop line ${stopped:-none})"
  fi
  if [[ $p == T ]]; then RESULT[$p]="INFO (not a pass/fail check): ${RESULT[$p]#* }"; fi
  if [[ $RESUME == 1 && -f $ckpt ]]; then
    RESUMED_LINE=""
    resume_check "$p" "$ckpt" "$d/resume-run"
    [[ -n $RESUMED_LINE ]] && RESULT[$p]+="; resumed: ${RESUMED_LINE##*resumed from }"
  fi
}

run_pattern_c() {
  local d=$CHECK_DIR/C run=$CHECK_DIR/C/run id out t0
  rm -rf "$d"
  mkdir -p "$d"
  write_job "$d/job.sbatch" "#SBATCH --job-name=ranzcr-C
#SBATCH --ntasks=2
#SBATCH --output=$d/slurm-%j.out
#SBATCH --chdir=$REPO" "$(q "$BIN" "${COMMON[@]}" --set distributed.nproc_per_node=1 \
    --set distributed.timeout_seconds=20 --set "output.dir=$run")"
  say "C: submitting $d/job.sbatch (no srun):"
  grep -v '^#!' "$d/job.sbatch" | sed 's/^/    /'
  id=$(submit C "$d/job.sbatch") || { RESULT[C]="sbatch failed"; return; }
  out=$d/slurm-$id.out
  t0=$SECONDS
  if wait_gone "$id" "$C_TIMEOUT"; then
    say "C: job $id ended by itself after $((SECONDS - t0)) s"
  else
    say "C: job $id still running after $C_TIMEOUT s: scancel"
    scancel "$id"
    wait_gone "$id" "$END_TIMEOUT"
  fi
  say "C: output tail ($out):"
  tail -n 25 "$out" | sed 's/^/    /'
  say "C: final state:"
  job_state "$id" | sed 's/^/    /'
  local last
  last=$(grep -vE '^batch script:' "$out" | grep -v '^\s*$' | tail -n1)
  RESULT[C]="INFO (not a pass/fail check): ended after $((SECONDS - t0)) s; $(job_state "$id" | head -n1); last line: ${last:-none}"
}

say "binary $BIN; config $CONFIG; epochs $EPOCHS; check folder $CHECK_DIR"
say "slurm: $(sinfo --version 2>/dev/null)"
IFS=, read -r -a WANT <<<"$PATTERNS"
for p in "${WANT[@]}"; do
  case $p in
    env) run_env_probe ;;
    A | B | T) run_pattern "$p" ;;
    C) run_pattern_c ;;
    *) die "unknown pattern $p (env, A, B, C, T)" ;;
  esac
done

status=0
echo
echo "summary:"
for p in "${WANT[@]}"; do
  echo "  $p: ${RESULT[$p]:-not run}"
  if [[ $p == A || $p == B ]] && [[ ${RESULT[$p]:-} != PASS* ]]; then status=1; fi
done
if [[ $DOWN == 1 ]]; then "$HERE/local-slurm.sh" down; fi
exit "$status"
