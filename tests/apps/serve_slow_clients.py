#!/usr/bin/env python3
"""Hostile clients against a running `ranzcr serve`, with the standard library's sockets only.

While --trickle connections send their request header (--mode header) or their body (--mode body) one byte
per second, and --idle more connections sit without sending a byte, a well-behaved client asks for
/v2/health/ready and runs a real inference (POST /v2/models/NAME/infer with --image) on a new connection,
again and again for --seconds. Closed hostile connections are opened again, so the pressure holds.

It fails (exit 1) when a good request is not answered 200 within --max-latency seconds, or when fewer than
--min-closed of the trickling connections whose deadline (--deadline seconds, the server's header or body
deadline) passed --grace seconds ago were closed by the server. It prints one JSON line of figures: good
requests and their latencies, sockets opened and closed, the server's RSS (--pid) before, at its peak and
after.
"""
import argparse
import base64
import json
import resource
import selectors
import socket
import sys
import threading
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Hostile:
    """One hostile connection: trickling (a byte per second of its header or body) or idle."""

    def __init__(self, port, kind, mode, now):
        self.kind, self.mode, self.opened, self.closed_at, self.sent = kind, mode, now, None, 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setblocking(False)
        if kind == "trickle" and mode == "body":
            # A whole header, then a body that never finishes at a byte a second.
            head = (b"POST /v2/models/ranzcr/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
            self.sock.sendall(head)
        self.pending = (b"POST /v1/predict HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100000
                        if mode == "header" else b"{" + b" " * 1000000)

    def trickle(self):
        if self.closed_at is not None or self.kind != "trickle":
            return
        try:
            self.sock.send(self.pending[self.sent:self.sent + 1])
            self.sent += 1
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self.closed_at = time.monotonic()


def good_request(port, method, path, body=b"", headers=()):
    """One request on a new connection: (status, seconds)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for k, v in headers:
            head += f"{k}: {v}\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n"
        s.sendall(head.encode() + body)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    status = int(got[9:12]) if got.startswith(b"HTTP/1.1 ") else 0
    return status, time.monotonic() - start


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id (its RSS is read)")
    ap.add_argument("--image", required=True, help="an image file for the good client's inference")
    ap.add_argument("--model", default="ranzcr")
    ap.add_argument("--mode", choices=["header", "body"], default="header")
    ap.add_argument("--trickle", type=int, default=1000)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--deadline", type=float, default=10, help="the server's header or body deadline, s")
    ap.add_argument("--grace", type=float, default=3,
                    help="how long after the deadline the server may take to answer (408) or close a socket")
    ap.add_argument("--min-closed", type=float, default=0.99)
    ap.add_argument("--max-latency", type=float, default=1.0)
    args = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    need = args.trickle + args.idle + 64
    if hard < need:
        print(f"the file limit ({hard}) is below the {need} sockets this needs", file=sys.stderr)
        return 2

    image = open(args.image, "rb").read()
    infer_body = json.dumps({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1],
                                         "parameters": {"content_type": "base64"},
                                         "data": [base64.b64encode(image).decode()]}]}).encode()
    rss_before = rss_kib(args.pid)
    sel = selectors.DefaultSelector()
    live = []
    all_hostile = []

    def open_one(kind):
        h = Hostile(args.port, kind, args.mode, time.monotonic())
        sel.register(h.sock, selectors.EVENT_READ, h)
        live.append(h)
        all_hostile.append(h)

    start = time.monotonic()
    for _ in range(args.trickle):
        open_one("trickle")
    for _ in range(args.idle):
        open_one("idle")
    opened_in = time.monotonic() - start

    good, failures, slow = [], [], []
    stop = threading.Event()

    def good_client():  # on its own thread, so that the hostile loop below never delays it
        while not stop.is_set():
            for method, path, body, headers in (
                    ("GET", "/v2/health/ready", b"", ()),
                    ("POST", f"/v2/models/{args.model}/infer", infer_body,
                     (("Content-Type", "application/json"),))):
                try:
                    status, took = good_request(args.port, method, path, body, headers)
                except OSError as e:  # refused, reset or no answer within the client's 5 s
                    failures.append(f"{path}: {e}")
                    slow.append((round(time.monotonic() - start, 2), path, str(e)))
                    continue
                good.append((path, status, took))
                if took > 0.25:
                    slow.append((round(time.monotonic() - start, 2), path, round(took, 3)))
                if status != 200 or took > args.max_latency:
                    failures.append(f"{path}: status {status} after {took:.3f} s")
            stop.wait(0.2)

    rss_peak = rss_before
    good_thread = threading.Thread(target=good_client)
    good_thread.start()
    next_trickle = next_rss = time.monotonic()
    while time.monotonic() - start < args.seconds:
        # The server closing a hostile socket: readable, then EOF (an error answer may come first).
        for key, _ in sel.select(timeout=0.05):
            h = key.data
            try:
                data = h.sock.recv(65536)
            except OSError:
                data = b""
            if data:  # the server's answer (408): it has ended this request; the EOF follows
                h.closed_at = h.closed_at or time.monotonic()
                continue
            if not data:
                h.closed_at = h.closed_at or time.monotonic()
                sel.unregister(h.sock)
                h.sock.close()
                live.remove(h)
                open_one(h.kind)  # keep the pressure: another takes its place
        now = time.monotonic()
        if now >= next_trickle:
            for h in live:
                h.trickle()
            next_trickle = now + 1
        if now >= next_rss:
            rss_peak = max(rss_peak, rss_kib(args.pid))
            next_rss = now + 0.5
    stop.set()
    good_thread.join()

    end = time.monotonic()
    due = [h for h in all_hostile if h.kind == "trickle" and h.opened + args.deadline + args.grace <= end]
    closed_in_time = [h for h in due if h.closed_at is not None and h.closed_at <= h.opened + args.deadline + args.grace]
    idle_due = [h for h in all_hostile if h.kind == "idle" and h.opened + args.deadline + args.grace <= end]
    idle_closed = [h for h in idle_due if h.closed_at is not None]
    for h in live:
        h.sock.close()
    time.sleep(1)
    latencies = sorted(t for _, s, t in good)
    figures = {
        "mode": args.mode, "trickle": args.trickle, "idle": args.idle, "seconds": args.seconds,
        "opened_hostile_in_s": round(opened_in, 3),
        "good_requests": len(good) + sum(1 for f in failures if "status" not in f),
        "good_failures": len(failures),
        "good_latency_max_s": round(latencies[-1], 4) if latencies else None,
        "good_latency_p50_s": round(latencies[len(latencies) // 2], 4) if latencies else None,
        "hostile_opened": len(all_hostile),
        "trickling_due": len(due), "trickling_closed_in_time": len(closed_in_time),
        "idle_due": len(idle_due), "idle_closed": len(idle_closed),
        "slow_good_requests": slow[:10],
        "rss_kib_before": rss_before, "rss_kib_peak": rss_peak, "rss_kib_after": rss_kib(args.pid),
    }
    print(json.dumps(figures))
    ok = True
    if failures:
        print("good requests failed:", *failures[:10], sep="\n  ", file=sys.stderr)
        ok = False
    if not due:
        print("no trickling connection reached its deadline: run longer than --deadline + --grace",
              file=sys.stderr)
        ok = False
    elif len(closed_in_time) < args.min_closed * len(due):
        print(f"only {len(closed_in_time)} of {len(due)} trickling connections were closed within "
              f"{args.deadline + args.grace} s", file=sys.stderr)
        ok = False
    if idle_due and len(idle_closed) < args.min_closed * len(idle_due):
        print(f"only {len(idle_closed)} of {len(idle_due)} idle connections were closed", file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
