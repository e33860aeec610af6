#!/usr/bin/env python3
"""Runs a test script's main(argv) again and again in one process, so that what it imports (MLflow's client:
2-3 s) is imported once per test suite rather than once per check (tests/python_worker.h drives it).

  python_worker.py SCRIPT

Reads one JSON object per line on stdin, {"args": [...], "env": {"K": "V"}}: sets the environment, calls
SCRIPT's main([SCRIPT] + args) with its stdout and stderr captured, and writes one JSON line to stdout,
{"status": exit status, "output": what it printed}. sys.exit(N) is status N, sys.exit("text") prints the
text and is status 1, an exception prints its traceback and is status 1. Ends at the end of stdin.
"""
import contextlib
import importlib.util
import io
import json
import os
import sys
import traceback


def load(path):
    spec = importlib.util.spec_from_file_location("worker_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(module, script, request):
    os.environ.update(request.get("env", {}))
    captured, status = io.StringIO(), 0
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        try:
            module.main([script] + request["args"])
        except SystemExit as e:
            if isinstance(e.code, int) or e.code is None:
                status = e.code or 0
            else:
                print(e.code)
                status = 1
        except Exception:  # the check's own failure: its traceback is the output
            traceback.print_exc()
            status = 1
    return {"status": status, "output": captured.getvalue()}


def main():
    script = sys.argv[1]
    module = load(script)
    answers = sys.stdout
    for line in sys.stdin:
        if line.strip():
            answers.write(json.dumps(call(module, script, json.loads(line))) + "\n")
            answers.flush()


if __name__ == "__main__":
    main()
