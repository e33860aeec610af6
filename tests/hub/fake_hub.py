#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub's file endpoints, for the tests (standard library only).

    python3 tests/hub/fake_hub.py --root DIR [--port 0] [--port-file FILE] [--token TOKEN]

It answers as https://huggingface.co documents and as huggingface_hub's client expects:
  HEAD/GET /{org}/{name}/resolve/{revision}/{file}
    - LFS files (*.safetensors, *.bin, *.pth, or over 10 kB): 302 to http://localhost:PORT/cdn/{sha256} (a
      second path, under another host name, standing in for the CDN) with X-Repo-Commit, ETag (the git blob id), X-Linked-Etag (the SHA-256), X-Linked-Size;
    - other files: 200 with X-Repo-Commit, ETag (the git blob id), Content-Length, the bytes on GET;
    - errors with X-Error-Code: 401 RepoNotFound (no such repository), 401/403 GatedRepo (a repository with a
      `gated` file, without/with a wrong `Authorization: Bearer` token), 404 RevisionNotFound, 404 EntryNotFound.
  GET /cdn/{sha256}: the bytes, with Range requests (206, Content-Range; 416 past the end).
Repositories: DIR/{org}/{name}/refs/{branch} holds a commit id; DIR/{org}/{name}/revisions/{commit}/ the files.
Test controls (JSON): POST /_control {"cut_after": BYTES, "cuts": N, "corrupt": N, "rate": BYTES_PER_S,
"fail_5xx": N} makes the next N CDN answers stop after BYTES bytes (the connection closed), or carry one byte
flipped, or throttles them; the next fail_5xx resolve answers are 503. GET /_stats: counts of requests
({"head": .., "resolve_get": .., "cdn_get": .., "cdn_ranges": [start offsets of Range requests], "auth": [..]}).
"""
import argparse
import hashlib
import json
import os
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"cut_after": 0, "cuts": 0, "corrupt": 0, "rate": 0, "fail_5xx": 0}
STATS = {"head": 0, "resolve_get": 0, "cdn_get": 0, "cdn_ranges": [], "auth": []}
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(name, size):
    return name.endswith((".safetensors", ".bin", ".pth")) or size > 10_000


class Hub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root = "."
    token = ""
    blobs = {}  # sha256 -> path, filled as files are announced

    def log_message(self, fmt, *args):
        if os.environ.get("FAKE_HUB_VERBOSE"):
            super().log_message(fmt, *args)

    # --- helpers ---
    def _send(self, status, headers=None, body=b"", head=False):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _error(self, status, code, message, head):
        body = json.dumps({"error": message}).encode()
        self._send(status, {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"},
                   body, head)

    def _authorized(self, repo_dir):
        gated = os.path.exists(os.path.join(repo_dir, "gated"))
        auth = self.headers.get("Authorization", "")
        with LOCK:
            STATS["auth"].append(auth)
        if not gated:
            return None
        if not auth:
            return (401, "GatedRepo", "Access to this repository is restricted: you must be authenticated")
        if auth != "Bearer " + self.token:
            return (403, "GatedRepo", "Access to this repository is restricted and your token has no access")
        return None

    def _resolve(self, head):
        m = re.match(r"^/([^/]+)/([^/]+)/resolve/([^/]+)/(.+)$", self.path.split("?")[0])
        if not m:
            return self._error(404, "EntryNotFound", "not a resolve path", head)
        org, name, revision, filename = m.groups()
        from urllib.parse import unquote
        revision, filename = unquote(revision), unquote(filename)
        with LOCK:
            STATS["head" if head else "resolve_get"] += 1
            fail = STATE["fail_5xx"] > 0
            if fail:
                STATE["fail_5xx"] -= 1
        if fail:
            return self._send(503, {"Retry-After": "0"}, b"busy", head)
        repo_dir = os.path.join(self.root, org, name)
        if not os.path.isdir(repo_dir):
            return self._error(401, "RepoNotFound", f"Repository Not Found for url: {self.path}.", head)
        denied = self._authorized(repo_dir)
        if denied:
            return self._error(denied[0], denied[1], denied[2], head)
        commit = revision
        if not COMMIT_RE.match(revision):
            ref = os.path.join(repo_dir, "refs", revision)
            if not os.path.isfile(ref):
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
            commit = open(ref).read().strip()
        path = os.path.join(repo_dir, "revisions", commit, filename)
        if not os.path.isdir(os.path.join(repo_dir, "revisions", commit)):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        if not os.path.isfile(path):
            return self._error(404, "EntryNotFound", f"{filename} does not exist at revision {revision}", head)
        data = open(path, "rb").read()
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_id(data)}"', "Accept-Ranges": "bytes"}
        if is_lfs(filename, len(data)):
            sha = hashlib.sha256(data).hexdigest()
            Hub.blobs[sha] = path
            # Another host name than the endpoint's (as the Hub's CDN is), so that clients do not follow
            # the redirect on HEAD: the file's metadata is on this answer.
            host = f"localhost:{self.server.server_address[1]}"
            headers.update({"Location": f"http://{host}/cdn/{sha}?filename={filename}",
                            "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": len(data)})
            return self._send(302, headers, b"", head)
        if head:
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            return
        return self._send(200, headers, data)

    def _cdn(self, head):
        sha = self.path.split("?")[0][len("/cdn/"):]
        path = Hub.blobs.get(sha)
        if not path:
            return self._send(404, {}, b"no such object", head)
        data = open(path, "rb").read()
        start = 0
        rng = self.headers.get("Range")
        with LOCK:
            if not head:
                STATS["cdn_get"] += 1
            if rng and not head:
                STATS["cdn_ranges"].append(int(re.match(r"bytes=(\d+)-", rng).group(1)))
            cut = STATE["cut_after"] if STATE["cuts"] > 0 else 0
            if cut and not head:
                STATE["cuts"] -= 1
            corrupt = STATE["corrupt"] > 0 and not head
            if corrupt:
                STATE["corrupt"] -= 1
            rate = STATE["rate"]
        status, headers = 200, {"ETag": f'"{sha}"', "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if rng:
            m = re.match(r"bytes=(\d+)-(\d*)$", rng)
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else len(data) - 1
            if start >= len(data):
                return self._send(416, {"Content-Range": f"bytes */{len(data)}"}, b"", head)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data = data[start:end + 1]
        if corrupt and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if head:
            return
        limit = min(cut, len(data)) if cut else len(data)
        chunk = 16384
        try:
            for i in range(0, limit, chunk):
                self.wfile.write(data[i:min(i + chunk, limit)])
                if rate:
                    time.sleep(min(chunk, limit - i) / rate)
            if cut:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- verbs ---
    def do_HEAD(self):
        if self.path.startswith("/cdn/"):
            return self._cdn(True)
        return self._resolve(True)

    def do_GET(self):
        if self.path == "/_stats":
            with LOCK:
                return self._send(200, {"Content-Type": "application/json"}, json.dumps(STATS).encode())
        if self.path.startswith("/cdn/"):
            return self._cdn(False)
        return self._resolve(False)

    def do_POST(self):
        if self.path != "/_control":
            return self._send(404, {}, b"")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        with LOCK:
            STATE.update({k: int(v) for k, v in body.items() if k in STATE})
        return self._send(200, {}, b"ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--token", default="")
    args = ap.parse_args()
    Hub.root, Hub.token = args.root, args.token
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Hub)
    server.daemon_threads = True
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(server.server_address[1]))
        os.replace(tmp, args.port_file)
    print(f"fake hub on 127.0.0.1:{server.server_address[1]} serving {args.root}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
