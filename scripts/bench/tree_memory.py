#!/usr/bin/env python3
"""Run a command and report the peak memory of its whole process tree (it and every descendant).

  tree_memory.py [--interval S] [--out FILE] -- COMMAND [ARGS...]

Every --interval seconds (default 0.2) the tree is found again from /proc (so workers a launcher starts and
stops are counted while they live) and, summed over its processes, read from /proc/PID/status and
/proc/PID/smaps_rollup:
  rss        VmRSS: every page mapped, a file's pages from the page cache included (counted again in each
             process that maps them);
  rss_anon   RssAnon: the process's own memory (heap, stacks, tensors), what grows when a program keeps
             per-image data;
  rss_file   RssFile: pages of mapped files (the binary, its libraries, data.cache's file): the page
             cache, shared with every other process mapping them and given back by the kernel under pressure;
  pss        Pss: each shared page divided among the processes that map it (the tree's fair share).
Prints one JSON object (peaks in MiB, the largest process count, the wall time, the command's exit status)
on stdout, or writes it to --out; the command's own output passes through. Exits with the command's status.
Linux only; needs nothing beyond the standard library.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def children_map():
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (comm) state"
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(root):
    kids, out, todo = children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def kib_fields(path, names):
    found = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in names:
                    found[key] = int(rest.split()[0])
    except OSError:
        pass
    return found


def sample(root):
    total = {"rss": 0, "rss_anon": 0, "rss_file": 0, "pss": 0}
    pids = tree(root)
    for pid in pids:
        st = kib_fields(f"/proc/{pid}/status", {"VmRSS", "RssAnon", "RssFile", "RssShmem"})
        total["rss"] += st.get("VmRSS", 0)
        total["rss_anon"] += st.get("RssAnon", 0)
        total["rss_file"] += st.get("RssFile", 0) + st.get("RssShmem", 0)
        total["pss"] += kib_fields(f"/proc/{pid}/smaps_rollup", {"Pss"}).get("Pss", 0)
    return total, len(pids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--out", default="")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("give the command after --")
    start = time.monotonic()
    proc = subprocess.Popen(cmd)
    peak = {"rss": 0, "rss_anon": 0, "rss_file": 0, "pss": 0}
    most = 0
    while proc.poll() is None:
        now, n = sample(proc.pid)
        most = max(most, n)
        for k, v in now.items():
            peak[k] = max(peak[k], v)
        time.sleep(a.interval)
    report = {f"peak_{k}_mib": round(v / 1024, 1) for k, v in peak.items()}
    report.update(processes=most, wall_seconds=round(time.monotonic() - start, 2), exit_status=proc.returncode,
                  command=cmd)
    text = json.dumps(report)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
