#!/usr/bin/env bash
# Load test of `ranzcr serve` against the usual Python deployment of the same model (serve_reference.py: FastAPI +
# uvicorn + PyTorch, per-request and batched), with wrk, one server at a time, same image, same client counts.
#
# Usage: scripts/bench/serve_compare.sh (--model model.safetensors | --checkpoint best.pt | both) --image FILE
#            [--duration 30] [--clients "1 8 32"] [--warmup 5] [--out FILE.jsonl] [--port 18080]
#            [--servers "ranzcr python-per-request python-batched"] [--ranzcr-args "..."] [--python-args "..."]
#            [--batched-args "..."] [--wrk-timeout 30s] [--ready-timeout 180]
#   --model       the `ranzcr export` .safetensors (the Python servers load it; ranzcr serves it too unless
#                 --checkpoint is given). With --checkpoint alone it is exported first, next to --out.
#   --checkpoint  what `ranzcr serve --checkpoint` loads (best.pt or a .safetensors).
#   --ranzcr-args flags appended to `ranzcr serve` (e.g. "--max-batch 16 --max-wait-ms 5"); its --max-batch,
#                 --max-wait-ms and --max-queue are given to the batched Python server too (--batched-args wins).
#   --python-args flags for both Python servers (e.g. "--threads 2"); --batched-args for the batched one only.
# Env: RANZCR_BIN (default build/ranzcr), PYTHON (default .venv/bin/python, else python3), WRK (default wrk).
#
# Per server: start it, wait for GET /readyz = 200, one POST of the image (the answer is kept: the servers'
# probabilities are compared at the end), warm-up (wrk at the largest client count for --warmup seconds,
# not recorded), then wrk per client count (threads = min(clients, 2), connections = clients, --latency,
# scripts/bench/serve_post.lua), then SIGTERM. RSS = VmRSS of the server process and its children, at start
# (ready, before any request), after each run and at the end; hwm = the main process's VmHWM (peak).
# Output: the command line, a Markdown table; the raw JSON lines (one per server, one per run) go to --out,
# server logs and wrk reports to --out's name + .d/. Note that wrk runs on the same machine: on a small host
# it takes CPU from the server (the same for every server).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "serve_compare: $*" >&2; exit 1; }

CMDLINE="$(printf '%q ' "$0" "$@")"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MODEL="" CHECKPOINT="" IMAGE="" DURATION=30 CLIENTS="1 8 32" WARMUP=5 OUT="" PORT=18080
SERVERS="ranzcr python-per-request python-batched" RANZCR_ARGS="" PY_ARGS="" BATCHED_ARGS=""
WRK_TIMEOUT=30s READY_TIMEOUT=180
abspath() { [[ -z "$1" ]] || realpath -m -- "$1"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$(abspath "$2")"; shift 2 ;;
    --checkpoint) CHECKPOINT="$(abspath "$2")"; shift 2 ;;
    --image) IMAGE="$(abspath "$2")"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --out) OUT="$(abspath "$2")"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --servers) SERVERS="$2"; shift 2 ;;
    --ranzcr-args) RANZCR_ARGS="$2"; shift 2 ;;
    --python-args) PY_ARGS="$2"; shift 2 ;;
    --batched-args) BATCHED_ARGS="$2"; shift 2 ;;
    --wrk-timeout) WRK_TIMEOUT="$2"; shift 2 ;;
    --ready-timeout) READY_TIMEOUT="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "serve_compare: unknown argument $1" >&2; usage 2 ;;
  esac
done
cd "$ROOT"
RANZCR_BIN="$(abspath "${RANZCR_BIN:-build/ranzcr}")"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
WRK="${WRK:-wrk}"
LUA="$ROOT/scripts/bench/serve_post.lua"
[[ -n "$MODEL$CHECKPOINT" ]] || die "give --model model.safetensors and/or --checkpoint best.pt"
[[ -n "$IMAGE" && -f "$IMAGE" ]] || die "--image FILE: missing or not a file (${IMAGE:-none})"
[[ -z "$MODEL" || -f "$MODEL" ]] || die "--model $MODEL: no such file"
[[ -z "$CHECKPOINT" || -f "$CHECKPOINT" ]] || die "--checkpoint $CHECKPOINT: no such file"
[[ "$DURATION" =~ ^[0-9]+$ && "$DURATION" -gt 0 ]] || die "--duration: whole seconds > 0"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "--warmup: whole seconds"
for c in $CLIENTS; do [[ "$c" =~ ^[0-9]+$ && "$c" -gt 0 ]] || die "--clients: positive integers, got '$c'"; done
for s in $SERVERS; do
  case "$s" in ranzcr|python-per-request|python-batched) ;; *) die "--servers: unknown server '$s'" ;; esac
done
command -v "$WRK" >/dev/null || die "wrk not found (apt-get install wrk)"
command -v curl >/dev/null || die "curl not found"
if [[ " $SERVERS " == *" ranzcr "* ]]; then
  [[ -x "$RANZCR_BIN" ]] || die "RANZCR_BIN=$RANZCR_BIN: not an executable"
  "$RANZCR_BIN" serve --help >/dev/null 2>&1 || die "$RANZCR_BIN has no 'serve' subcommand (rebuild it)"
fi
[[ -n "$OUT" ]] || OUT="$ROOT/runs/serve-bench/serve_compare-$(date +%Y%m%d-%H%M%S).jsonl"
LOGDIR="$OUT.d"
mkdir -p "$(dirname "$OUT")" "$LOGDIR"
: > "$OUT"
BASE="http://127.0.0.1:$PORT"

if [[ -z "$MODEL" && "$CHECKPOINT" == *.safetensors ]]; then
  MODEL="$CHECKPOINT"
elif [[ -z "$MODEL" && " $SERVERS " == *" python"* ]]; then
  MODEL="$LOGDIR/model.safetensors"
  "$RANZCR_BIN" export --checkpoint "$CHECKPOINT" --out "$MODEL" >"$LOGDIR/export.log" 2>&1 ||
    die "ranzcr export failed: see $LOGDIR/export.log"
fi
RANZCR_MODEL="${CHECKPOINT:-$MODEL}"

# ranzcr's batching flags, mirrored on the batched Python server unless --batched-args sets them
mirror=""
read -r -a rargs <<<"$RANZCR_ARGS"
for ((i = 0; i < ${#rargs[@]}; i++)); do
  case "${rargs[i]}" in
    --max-batch|--max-wait-ms|--max-queue)
      [[ " $BATCHED_ARGS " == *" ${rargs[i]} "* ]] || mirror+=" ${rargs[i]} ${rargs[i + 1]:-}"; i=$((i + 1)) ;;
    --max-batch=*|--max-wait-ms=*|--max-queue=*)
      [[ " $BATCHED_ARGS " == *" ${rargs[i]%%=*}"* ]] || mirror+=" ${rargs[i]}" ;;
  esac
done
BATCHED_ARGS="$mirror $BATCHED_ARGS"

# ---------------------------------------------------------------- helpers
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tree_pids() {  # the pid and its descendants
  local p=$1 c
  echo "$p"
  for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do tree_pids "$c"; done
}
rss_mb() {  # VmRSS of the process tree, MiB
  local kb=0 p v
  for p in $(tree_pids "$1"); do
    v=$(awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null || true)
    kb=$((kb + ${v:-0}))
  done
  awk -v kb="$kb" 'BEGIN {printf "%.1f", kb / 1024}'
}
hwm_mb() { awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' /proc/"$1"/status 2>/dev/null || echo null; }

# json_merge JSON KEY=VALUE...: add fields (VALUE is JSON) to a JSON object, one line
json_merge() {
  "$PYTHON" - "$@" <<'EOF'
import json, sys
obj = json.loads(sys.argv[1])
for kv in sys.argv[2:]:
    k, _, v = kv.partition("=")
    obj[k] = json.loads(v)
print(json.dumps(obj))
EOF
}
jstr() { "$PYTHON" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

max_clients=1
for c in $CLIENTS; do if ((c > max_clients)); then max_clients=$c; fi; done
n_clients=$(wc -w <<<"$CLIENTS")
n_servers=$(wc -w <<<"$SERVERS")

echo "# serve_compare"
echo
echo '```'
echo "$CMDLINE"
echo '```'
echo
echo "image: $IMAGE ($(stat -c %s "$IMAGE") bytes); ranzcr: $RANZCR_BIN serve --checkpoint $RANZCR_MODEL $RANZCR_ARGS"
echo "python: $PYTHON scripts/bench/serve_reference.py --model ${MODEL:-} $PY_ARGS (batched:$BATCHED_ARGS)"
echo "host: $(nproc) cores, $(uname -sr); wrk threads = min(clients, 2), --timeout $WRK_TIMEOUT; raw JSON: $OUT"
echo "about $(( n_servers * (WARMUP + n_clients * DURATION + 10) )) s: $n_servers servers x ($WARMUP s warm-up + $n_clients x $DURATION s)"
echo

run_server() {  # NAME COMMAND...
  local name=$1; shift
  local log="$LOGDIR/server-$name.log"
  if curl -s -o /dev/null "$BASE/readyz"; then die "something already answers on $BASE: stop it or pass --port"; fi
  echo "[$(date +%T)] $name: starting: $*" >&2
  local t0=$SECONDS
  "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  local ready=0
  for _ in $(seq $((READY_TIMEOUT * 5))); do
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$log" >&2; die "$name exited before it was ready (log: $log)"; }
    if [[ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/readyz" 2>/dev/null)" == 200 ]]; then ready=1; break; fi
    sleep 0.2
  done
  ((ready)) || { tail -20 "$log" >&2; die "$name not ready after $READY_TIMEOUT s (log: $log)"; }
  local ready_s=$((SECONDS - t0))
  local rss_start; rss_start=$(rss_mb "$SERVER_PID")
  local code
  code=$(curl -s -o "$LOGDIR/answer-$name.json" -w '%{http_code}' -H 'Content-Type: application/octet-stream' \
    --data-binary @"$IMAGE" "$BASE/v1/predict") || true
  [[ "$code" == 200 ]] || { cat "$LOGDIR/answer-$name.json" >&2 || true; die "$name: POST /v1/predict answered $code"; }
  local threads
  if ((WARMUP > 0)); then
    threads=$((max_clients < 2 ? max_clients : 2))
    IMAGE="$IMAGE" "$WRK" -t"$threads" -c"$max_clients" -d"${WARMUP}s" --timeout "$WRK_TIMEOUT" -s "$LUA" \
      "$BASE/v1/predict" >"$LOGDIR/wrk-$name-warmup.txt" 2>&1 || die "$name: wrk warm-up failed"
  fi
  for c in $CLIENTS; do
    threads=$((c < 2 ? c : 2))
    echo "[$(date +%T)] $name: $c clients, $DURATION s" >&2
    local txt="$LOGDIR/wrk-$name-c$c.txt"
    IMAGE="$IMAGE" WRK_TAG="{\"server\":\"$name\",\"clients\":$c,\"wrk_threads\":$threads}" \
      "$WRK" -t"$threads" -c"$c" -d"${DURATION}s" --latency --timeout "$WRK_TIMEOUT" -s "$LUA" \
      "$BASE/v1/predict" >"$txt" 2>&1 || die "$name: wrk failed (see $txt)"
    local line; line=$(sed -n 's/^JSON //p' "$txt" | tail -1)
    [[ -n "$line" ]] || die "$name: no JSON line in $txt"
    kill -0 "$SERVER_PID" 2>/dev/null || die "$name died during the run (log: $log)"
    json_merge "$line" "kind=\"run\"" "rss_after_mb=$(rss_mb "$SERVER_PID")" >>"$OUT"
  done
  local rss_end hwm; rss_end=$(rss_mb "$SERVER_PID"); hwm=$(hwm_mb "$SERVER_PID")
  cleanup
  json_merge "{}" "kind=\"server\"" "server=$(jstr "$name")" "command=$(jstr "$*")" "ready_s=$ready_s" \
    "rss_start_mb=$rss_start" "rss_end_mb=$rss_end" "hwm_mb=$hwm" \
    "answer=$(cat "$LOGDIR/answer-$name.json")" >>"$OUT"
  echo "[$(date +%T)] $name: done (RSS $rss_start -> $rss_end MiB)" >&2
}

for s in $SERVERS; do
  case "$s" in
    ranzcr)
      # shellcheck disable=SC2086
      run_server ranzcr "$RANZCR_BIN" serve --checkpoint "$RANZCR_MODEL" --host 127.0.0.1 --port "$PORT" $RANZCR_ARGS ;;
    python-per-request)
      # shellcheck disable=SC2086
      run_server python-per-request "$PYTHON" scripts/bench/serve_reference.py --model "$MODEL" --host 127.0.0.1 \
        --port "$PORT" --mode per-request $PY_ARGS ;;
    python-batched)
      # shellcheck disable=SC2086
      run_server python-batched "$PYTHON" scripts/bench/serve_reference.py --model "$MODEL" --host 127.0.0.1 \
        --port "$PORT" --mode batched $PY_ARGS $BATCHED_ARGS ;;
  esac
done

"$PYTHON" - "$OUT" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
servers = {r["server"]: r for r in rows if r.get("kind") == "server"}
print("| server | clients | requests/s | 2xx/s | p50 ms | p90 ms | p99 ms | errors | non-2xx | RSS after MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    if r.get("kind") != "run":
        continue
    print(f"| {r['server']} | {r['clients']} | {r['rps']:.1f} | {r['ok_rps']:.1f} | {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | "
          f"{r['p99_ms']:.1f} | {r['errors']} | {r['non2xx']} | {r['rss_after_mb']:.0f} |")
print()
print("| server | ready s | RSS start MiB | RSS end MiB | peak (VmHWM) MiB | max abs prob diff vs first |")
print("|---|---:|---:|---:|---:|---:|")
first = None
for name, s in servers.items():
    p = s["answer"].get("probabilities", {})
    if first is None:
        first, diff = p, 0.0
    else:
        diff = max((abs(p[k] - first[k]) for k in first if k in p), default=float("nan"))
    print(f"| {name} | {s['ready_s']} | {s['rss_start_mb']:.0f} | {s['rss_end_mb']:.0f} | {s['hwm_mb']} | {diff:.2e} |")
EOF
