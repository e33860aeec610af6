#!/usr/bin/env bash
# Samples, every 0.5 s while ranzcr's self-launched workers run ("/proc/self/exe train --config ..."), each
# worker's mapping of the .rzc image cache (Rss and Pss, kB, from /proc/PID/smaps) and the whole process's
# (smaps_rollup), into FILE.   scripts/bench/cache_pss.sh FILE   (start it right after the train command)
out=${1:?usage: cache_pss.sh FILE}
: > "$out"
for _ in $(seq 60); do pgrep -f 'self/exe train --config' >/dev/null && break; sleep 0.5; done  # workers start
while pgrep -f 'self/exe train --config' >/dev/null; do
  for pid in $(pgrep -f 'self/exe train --config'); do
    awk -v pid=$pid '
      /^[0-9a-f]+-[0-9a-f]+ / { inmap = ($0 ~ /\.rzc$/) }
      inmap && /^Rss:/ { rss += $2 } inmap && /^Pss:/ { pss += $2 }
      END { printf "%s cache_rss_kb=%d cache_pss_kb=%d", pid, rss, pss }' /proc/$pid/smaps 2>/dev/null || continue
    awk '/^Rss:/ { r = $2 } /^Pss:/ { p = $2 } END { printf " total_rss_kb=%d total_pss_kb=%d\n", r, p }' /proc/$pid/smaps_rollup 2>/dev/null
  done >> "$out"
  sleep 0.5
done
