#!/usr/bin/env bash
# What MLflow tracking costs a training run: the same `ranzcr train` with output.mlflow off and on, alternating,
# never two at the same time, against a real tracking server (mlflow from .venv, SQLite store, started here on
# a free port); then one run whose server is stopped once the first epoch's figures are in (the rest goes to
# the spool) and `ranzcr mlflow-sync` afterwards.
#
#   scripts/bench/mlflow_overhead.sh [--config FILE] [--repeats R] [--out-dir DIR] [--set key=value ...]
#
# Defaults: configs/quickstart.yaml, R = 3 pairs, DIR = runs/bench-mlflow. A first run with tracking off warms
# the machine up (page cache, CPU clocks) and is not counted; then the pairs in the order off on, on off, off on,
# ... (each side as often first as second, so that a drift of the machine cancels). Per run: the wall time of
# the process and the training throughput (metrics.jsonl's images_per_sec, the mean over epochs 2..N: epoch 1
# warms up). Prints, and writes to DIR/mlflow_overhead.md, a table of each run, the ratio (on / off) of each
# pair and of the medians. Binary: $RANZCR_BIN (default build/ranzcr); python: .venv/bin/python.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONFIG=configs/quickstart.yaml
REPEATS=3
OUT=runs/bench-mlflow
SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) CONFIG=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --out-dir) OUT=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    *) echo "error: unknown argument $1" >&2; exit 2 ;;
  esac
done
BIN=${RANZCR_BIN:-build/ranzcr}
PY=.venv/bin/python
"$PY" -c 'import mlflow' 2>/dev/null || { echo "error: no mlflow in .venv (scripts/setup.sh installs it)" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT/server"
OUT=$(cd "$OUT" && pwd)
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URI=http://127.0.0.1:$PORT
SERVER_PID=
start_server() {
  # No job runner (its 7 worker processes would take CPU from the runs measured; tests/mlflow_server.h too).
  MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$PY" -m mlflow server --host 127.0.0.1 --port "$PORT" --workers 1 \
    --backend-store-uri "sqlite:///$OUT/server/mlflow.db" --artifacts-destination "$OUT/server/artifacts" \
    >> "$OUT/server/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 120); do curl -sf "$URI/health" >/dev/null && return 0; sleep 0.5; done
  echo "error: the MLflow server did not start ($OUT/server/server.log)" >&2; exit 1
}
stop_server() { [ -n "$SERVER_PID" ] && kill -TERM -- "-$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=; }
trap stop_server EXIT
start_server

# The server's processes' CPU seconds so far (its process group).
server_cpu() {
  local ticks=0 p
  for p in $(pgrep -g "$SERVER_PID" 2>/dev/null); do
    ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$ticks $(getconf CLK_TCK)" | awk '{printf "%.2f", $1 / $2}'
}

# run NAME MLFLOW_URI: trains into $OUT/NAME; prints "NAME wall_s images_per_sec server_cpu_s".
run() {
  local name=$1 uri=$2 t0 t1 c0
  c0=$(server_cpu)
  t0=$(date +%s.%N)
  "$BIN" train --config "$CONFIG" "${SETS[@]}" --set output.dir="$OUT/$name" --set "output.mlflow=\"$uri\"" \
    > "$OUT/$name.log" 2>&1
  t1=$(date +%s.%N)
  "$PY" - "$OUT/$name" "$name" "$t0" "$t1" "$c0" "$(server_cpu)" <<'EOF'
import json, sys
run, name, t0, t1, c0, c1 = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:7])
rows = [json.loads(l) for l in open(run + "/metrics.jsonl") if l.strip()]
later = [r["images_per_sec"] for r in rows[1:]] or [rows[0]["images_per_sec"]]
print(f"{name} {t1 - t0:.1f} {sum(later) / len(later):.1f} {max(0.0, c1 - c0):.2f}")
EOF
}

RESULTS=$OUT/results.txt
: > "$RESULTS"
run warmup "" > /dev/null
for k in $(seq "$REPEATS"); do
  if [ $((k % 2)) = 1 ]; then
    run "off-$k" "" | tee -a "$RESULTS"
    run "on-$k" "$URI" | tee -a "$RESULTS"
  else
    run "on-$k" "$URI" | tee -a "$RESULTS"
    run "off-$k" "" | tee -a "$RESULTS"
  fi
done

# The server stopped once epoch 1's figures are in: training goes on, the rest is spooled, mlflow-sync sends it.
(
  while ! grep -q '"epoch":1' "$OUT/offline/metrics.jsonl" 2>/dev/null; do sleep 0.2; done
  sleep 1
  kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
) &
WATCH=$!
run offline "$URI" | tee -a "$RESULTS"
wait "$WATCH" || true
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=
start_server
"$BIN" mlflow-sync "$OUT/offline" > "$OUT/offline-sync.log" 2>&1
MLFLOW_TRACKING_URI=$URI "$PY" -W ignore tests/apps/mlflow_run_check.py run --run-dir "$OUT/offline" \
  --status FINISHED > "$OUT/offline-check.log" 2>&1 && echo "offline: record complete after mlflow-sync" |
  tee -a "$RESULTS" || echo "offline: record NOT complete ($OUT/offline-check.log)" | tee -a "$RESULTS"

"$PY" - "$RESULTS" "$OUT/mlflow_overhead.md" "$CONFIG" "$REPEATS" <<'EOF'
import statistics, sys
import os, re
lines = [l.split() for l in open(sys.argv[1])]
rows = {l[0]: tuple(map(float, l[1:4])) for l in lines if len(l) == 4 and l[0].split("-")[0] in ("off", "on", "offline")}
# What the run's own log says tracking took: set-up (blocking, at start), the logger thread's CPU, the wait
# for delivery at the end.
def costs(name):
    text = open(os.path.join(os.path.dirname(sys.argv[2]), name + ".log"), errors="replace").read()
    setup = re.search(r"mlflow: logging to run \S+ of experiment .*\(([0-9.]+) s\)", text)
    end = re.search(r"mlflow: (\d+) requests sent \(([0-9.]+) s of the logger thread's CPU; ([0-9.]+) s waited", text)
    if not setup or not end:
        return ""
    return f"{setup.group(1)} s set-up, {end.group(1)} requests, {end.group(2)} s logger CPU, {end.group(3)} s end wait"
def med(prefix, i):
    return statistics.median(v[i] for k, v in rows.items() if k.startswith(prefix + "-"))
out = [f"`scripts/bench/mlflow_overhead.sh --config {sys.argv[3]} --repeats {sys.argv[4]}`", "",
       "| run | wall s | images/s (epochs 2..N) | server CPU s | tracking's own figures (the run's log) |",
       "|---|---|---|---|---|"]
out += [f"| {k} | {w:.1f} | {i:.1f} | {c:.2f} | {costs(k)} |" for k, (w, i, c) in rows.items()]
pairs = sorted({k.split("-")[1] for k in rows if k.startswith("on-")})
out += ["", "per pair on/off, images/s: " + ", ".join(
    f"{rows['on-' + p][1] / rows['off-' + p][1]:.3f}x" for p in pairs if "off-" + p in rows)]
out += [f"median on/off: wall {med('on', 0) / med('off', 0):.3f}x, images/s {med('on', 1) / med('off', 1):.3f}x"]
if "offline" in rows:
    out.append(f"server stopped after epoch 1: wall {rows['offline'][0] / med('off', 0):.3f}x, "
               f"images/s {rows['offline'][1] / med('off', 1):.3f}x of tracking off")
text = "\n".join(out)
print(text)
open(sys.argv[2], "w").write(text + "\n")
EOF
