"""What MLflow's own Python client sees on the tracking server of tests/tracking/mlflow_test.cpp (at
MLFLOW_TRACKING_URI), printed as one JSON line; and a tiny HTTP server that records the headers it gets.

  mlflow_check.py run RUN_ID [KEY ...]      the run: status, times, params, tags, latest metrics, and the
                                            whole history of each KEY (values: numbers, or "NaN",
                                            "Infinity", "-Infinity")
  mlflow_check.py artifact RUN_ID PATH DIR  downloads the artifact PATH into DIR: {"path": local path}
  mlflow_check.py artifacts RUN_ID [PATH]   the artifact paths under PATH
  mlflow_check.py header-server PORT_FILE LOG_FILE
                                            answers every request 200 "{}" (401 for a path with /deny) and
                                            appends its method, path and
                                            headers to LOG_FILE as a JSON line; writes its port to PORT_FILE
"""

import http.server
import json
import math
import sys


def number(v):
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def client():
    import mlflow.tracking

    return mlflow.tracking.MlflowClient()


def run(run_id, keys):
    c = client()
    r = c.get_run(run_id)
    out = {
        "status": r.info.status,
        "start_time": r.info.start_time,
        "end_time": r.info.end_time,
        "experiment_id": r.info.experiment_id,
        "artifact_uri": r.info.artifact_uri,
        "params": r.data.params,
        "tags": {k: v for k, v in r.data.tags.items()},
        "metrics": {k: number(v) for k, v in r.data.metrics.items()},
        "history": {},
    }
    for key in keys:
        history = c.get_metric_history(run_id, key)
        out["history"][key] = [
            {"value": number(m.value), "timestamp": m.timestamp, "step": m.step} for m in history
        ]
    return out


def header_server(port_file, log_file):
    class Handler(http.server.BaseHTTPRequestHandler):
        def record(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
            with open(log_file, "a") as f:
                f.write(
                    json.dumps(
                        {
                            "method": self.command,
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": body,
                        }
                    )
                    + "\n"
                )
            answer, status = b"{}", 200
            if "/deny" in self.path:  # what MLflow's basic-auth app answers without valid credentials
                answer, status = b'{"error_code": "UNAUTHENTICATED", "message": "You are not authenticated."}', 401
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_PUT = record

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os

    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "run":
        print(json.dumps(run(args[0], args[1:])))
    elif command == "artifact":
        print(json.dumps({"path": client().download_artifacts(args[0], args[1], args[2])}))
    elif command == "artifacts":
        files = client().list_artifacts(args[0], args[1] if len(args) > 1 else None)
        print(json.dumps([f.path for f in files]))
    elif command == "header-server":
        header_server(args[0], args[1])
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
