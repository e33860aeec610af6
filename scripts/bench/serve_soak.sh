#!/usr/bin/env bash
# Soak test of `ranzcr serve`: N concurrent clients (wrk, scripts/bench/serve_post.lua) posting one image for
# a long time, the server's RSS sampled every few seconds, its /metrics read at the end.
#
# Usage: scripts/bench/serve_soak.sh --checkpoint FILE --image FILE [--clients 32] [--duration 600]
#            [--every 15] [--port 18081] [--out DIR] [--ranzcr-args "..."] [--slow-clients header|body]
# --slow-clients: tests/apps/serve_slow_clients.py runs beside wrk for the whole soak (1,000 trickling headers
# or bodies and 1,000 idle sockets, reopened as the server closes them; its own good client must be answered
# within 1 s every time); its figures go to DIR/slow_clients.json.
# Writes DIR/rss.csv (seconds since ready, VmRSS MiB), DIR/wrk.txt, DIR/metrics.txt, DIR/server.log and prints
# a summary: requests, requests/s, p50/p99, non-2xx and socket errors, the server's error counters, RSS at
# ready, after the first minute, at the end and its maximum. Env: RANZCR_BIN (default build/ranzcr), WRK.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHECKPOINT="" IMAGE="" CLIENTS=32 DURATION=600 EVERY=15 PORT=18081 OUT="" RANZCR_ARGS="" SLOW=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --checkpoint) CHECKPOINT="$(realpath -m -- "$2")"; shift 2 ;;
    --image) IMAGE="$(realpath -m -- "$2")"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --every) EVERY="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --out) OUT="$(realpath -m -- "$2")"; shift 2 ;;
    --ranzcr-args) RANZCR_ARGS="$2"; shift 2 ;;
    --slow-clients) SLOW="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "serve_soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -f "$CHECKPOINT" && -f "$IMAGE" ]] || { echo "serve_soak: --checkpoint and --image must be files" >&2; exit 2; }
OUT=${OUT:-$ROOT/runs/serve-soak}
mkdir -p "$OUT"
BIN="${RANZCR_BIN:-$ROOT/build/ranzcr}"
WRK="${WRK:-wrk}"
URL="http://127.0.0.1:$PORT"
rss() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

# shellcheck disable=SC2086
"$BIN" serve --checkpoint "$CHECKPOINT" --port "$PORT" $RANZCR_ARGS > "$OUT/server.log" 2>&1 &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -sf "$URL/readyz" > /dev/null 2>&1 && break
  kill -0 $PID 2>/dev/null || { cat "$OUT/server.log" >&2; exit 1; }
  sleep 0.2
done
echo "seconds,rss_mib" > "$OUT/rss.csv"
START=$(date +%s)
echo "0,$(rss $PID)" >> "$OUT/rss.csv"
IMAGE="$IMAGE" "$WRK" -t2 -c"$CLIENTS" -d"${DURATION}s" --latency --timeout 30s -s "$ROOT/scripts/bench/serve_post.lua" \
  "$URL/v1/predict" > "$OUT/wrk.txt" 2>&1 &
WRK_PID=$!
SLOW_PID=""
if [[ -n "$SLOW" ]]; then
  PY="${PYTHON:-$ROOT/.venv/bin/python}"; [[ -x "$PY" ]] || PY=python3
  "$PY" "$ROOT/tests/apps/serve_slow_clients.py" --port "$PORT" --pid $PID --image "$IMAGE" --mode "$SLOW" \
    --seconds "$DURATION" > "$OUT/slow_clients.json" 2> "$OUT/slow_clients.err" &
  SLOW_PID=$!
fi
while kill -0 $WRK_PID 2>/dev/null; do
  sleep "$EVERY"
  echo "$(( $(date +%s) - START )),$(rss $PID)" >> "$OUT/rss.csv"
done
wait $WRK_PID
SLOW_STATUS=""
if [[ -n "$SLOW_PID" ]]; then wait $SLOW_PID && SLOW_STATUS=0 || SLOW_STATUS=$?; fi
curl -s "$URL/metrics" > "$OUT/metrics.txt"
kill -TERM $PID
wait $PID && STOPPED=0 || STOPPED=$?
trap - EXIT

echo "command: $0 --checkpoint $CHECKPOINT --image $IMAGE --clients $CLIENTS --duration $DURATION ${SLOW:+--slow-clients $SLOW }$RANZCR_ARGS"
grep '^JSON ' "$OUT/wrk.txt" | sed 's/^JSON /wrk: /'
echo "server errors: $(grep '^ranzcr_serve_errors_total' "$OUT/metrics.txt" | tr '\n' ' ')"
echo "server answers: $(grep '^ranzcr_serve_requests_total' "$OUT/metrics.txt" | tr '\n' ' ')"
awk -F, 'NR == 2 {ready = $2} NR > 2 && $1 >= 60 && !minute {minute = $2} NR > 1 {last = $2; if ($2 > max) max = $2}
         END {printf "RSS MiB: at ready %s, after the first minute %s, at the end %s, max %s\n", ready, minute, last, max}' \
  "$OUT/rss.csv"
echo "exit status after SIGTERM: $STOPPED"
if [[ -n "$SLOW" ]]; then
  echo "slow clients (exit $SLOW_STATUS): $(cat "$OUT/slow_clients.json")"
  [[ -s "$OUT/slow_clients.err" ]] && sed 's/^/slow clients: /' "$OUT/slow_clients.err"
  echo "server limits: $(grep '^ranzcr_serve_limits_total' "$OUT/metrics.txt" | tr '\n' ' ')"
fi
