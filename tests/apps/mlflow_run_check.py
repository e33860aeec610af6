#!/usr/bin/env python3
"""Reads back what `ranzcr` logged to an MLflow tracking server with MLflow's own Python client.

Subcommands (the server: MLFLOW_TRACKING_URI):
  run  --run-dir DIR --status S [--artifacts a,b] [--tags a,b]
       the run of DIR's mlflow_run.json: its status; every key of DIR/config.yaml as a parameter with the same
       value; every number of DIR/metrics.jsonl (per-label AUCs as val_auc/<label>) as a metric whose history
       holds exactly one entry per epoch, at step = epoch, equal to the file's value, and no other steps; the
       tags; the artifacts (config.yaml byte-equal to the file).
  cv   --run-dir ROOT --folds K
       the cv run of ROOT: FINISHED, K child runs (mlflow.parentRunId) which are the fold folders' runs, each
       checked as `run`; oof_auc_mean equal to ROOT/cv.json's auc_mean.
  eval --run-id ID --json FILE
       evaluate's figures on run ID: eval_auc_mean, eval_loss, eval_auc/<label> equal to FILE's; its files as
       artifacts under evaluate/.
  runs --experiment NAME
       prints the number of runs in the experiment.
  param-artifact --run-id ID --key KEY
       prints the parameter KEY (null when absent), the length of the artifact params/KEY.txt, and
       data.image_size's parameter.

Prints one JSON summary line; exit status 0 when every check holds, 1 (a line starting "FAIL: ") otherwise.
"""
import argparse
import json
import math
import os
import sys
import tempfile

import yaml
from mlflow.tracking import MlflowClient

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)


def flatten_yaml(node, prefix, out):
    for key, value in node.items():
        if isinstance(value, dict):
            flatten_yaml(value, prefix + str(key) + ".", out)
        else:
            out[prefix + str(key)] = value


def norm(value):
    return "" if value is None else value


def metrics_of_line(line):
    out = {}
    for key, value in json.loads(line).items():
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[key] = float(value)
        elif isinstance(value, dict):
            for label, v in value.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    out[key + "/" + label] = float(v)
    return out


def artifact_paths(client, run_id, path=None):
    out = []
    for f in client.list_artifacts(run_id, path):
        if f.is_dir:
            out += artifact_paths(client, run_id, f.path)
        else:
            out.append(f.path)
    return out


def check_params(run, run_dir):
    with open(os.path.join(run_dir, "config.yaml")) as f:
        config = {}
        flatten_yaml(yaml.safe_load(f), "", config)
    params = run.data.params
    check(len(params) == len(config), f"{len(params)} parameters, config.yaml has {len(config)} keys")
    for key, value in config.items():
        if key not in params:
            check(False, f"parameter {key} missing")
            continue
        check(norm(yaml.safe_load(params[key])) == norm(value),
              f"parameter {key} is {params[key]!r}, config.yaml has {value!r}")
    return len(params)


def check_metrics(client, run_id, run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    expected = {}  # key -> {epoch: value}
    for line in lines:
        epoch = json.loads(line)["epoch"]
        for key, value in metrics_of_line(line).items():
            expected.setdefault(key, {})[epoch] = value
    logged = client.get_run(run_id).data.metrics
    check(set(logged) == set(expected),
          f"metric keys differ: only logged {sorted(set(logged) - set(expected))[:5]}, "
          f"only in metrics.jsonl {sorted(set(expected) - set(logged))[:5]}")
    points = 0
    for key, by_epoch in expected.items():
        history = client.get_metric_history(run_id, key)
        steps = sorted(m.step for m in history)
        check(steps == sorted(by_epoch), f"{key}: steps {steps}, metrics.jsonl has epochs {sorted(by_epoch)}")
        for m in history:
            want = by_epoch.get(m.step)
            check(want is not None and (m.value == want or (math.isnan(m.value) and math.isnan(want))),
                  f"{key} at step {m.step}: {m.value!r}, metrics.jsonl has {want!r}")
        points += len(history)
    return {"epochs": len(lines), "metric_keys": len(expected), "points": points}


def check_run(client, run_dir, status, artifacts, tags):
    with open(os.path.join(run_dir, "mlflow_run.json")) as f:
        record = json.load(f)
    run = client.get_run(record["run_id"])
    check(run.info.status == status, f"status {run.info.status}, expected {status}")
    summary = {"run_id": run.info.run_id, "status": run.info.status, "params": check_params(run, run_dir)}
    summary.update(check_metrics(client, run.info.run_id, run_dir))
    for tag in tags:
        check(bool(run.data.tags.get(tag)), f"tag {tag} missing")
    summary["tags"] = {k: v for k, v in run.data.tags.items() if k.startswith(("ranzcr.", "mlflow.source"))}
    paths = artifact_paths(client, run.info.run_id)
    for a in artifacts:
        check(a in paths, f"artifact {a} missing (has {paths})")
    if "config.yaml" in paths:
        with tempfile.TemporaryDirectory() as tmp:
            local = client.download_artifacts(run.info.run_id, "config.yaml", tmp)
            with open(local, "rb") as a, open(os.path.join(run_dir, "config.yaml"), "rb") as b:
                check(a.read() == b.read(), "artifact config.yaml differs from the run folder's")
    summary["artifacts"] = paths
    return run, summary


def main(argv):
    failures.clear()  # tests/python_worker.py calls main again in the same process
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["run", "cv", "eval", "runs", "param-artifact"])
    ap.add_argument("--run-dir")
    ap.add_argument("--status", default="FINISHED")
    ap.add_argument("--artifacts", default="")
    ap.add_argument("--tags", default="")
    ap.add_argument("--folds", type=int, default=0)
    ap.add_argument("--run-id")
    ap.add_argument("--json")
    ap.add_argument("--experiment")
    ap.add_argument("--key")
    args = ap.parse_args(argv[1:])
    client = MlflowClient()
    listed = lambda s: [x for x in s.split(",") if x]
    summary = {}
    if args.command == "run":
        _, summary = check_run(client, args.run_dir, args.status, listed(args.artifacts), listed(args.tags))
    elif args.command == "cv":
        with open(os.path.join(args.run_dir, "mlflow_run.json")) as f:
            parent = client.get_run(json.load(f)["run_id"])
        check(parent.info.status == "FINISHED", f"cv run status {parent.info.status}")
        children = client.search_runs([parent.info.experiment_id],
                                      f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        folds = []
        for k in range(args.folds):
            run, s = check_run(client, os.path.join(args.run_dir, f"fold_{k}"), "FINISHED", [], [])
            folds.append(run.info.run_id)
        check(sorted(r.info.run_id for r in children) == sorted(folds),
              f"children {[r.info.run_id for r in children]}, fold runs {folds}")
        with open(os.path.join(args.run_dir, "cv.json")) as f:
            cv = json.load(f)
        check(parent.data.metrics.get("oof_auc_mean") == cv["auc_mean"],
              f"oof_auc_mean {parent.data.metrics.get('oof_auc_mean')}, cv.json {cv['auc_mean']}")
        summary = {"parent": parent.info.run_id, "children": len(children),
                   "oof_auc_mean": parent.data.metrics.get("oof_auc_mean"),
                   "artifacts": artifact_paths(client, parent.info.run_id)}
    elif args.command == "eval":
        run = client.get_run(args.run_id)
        with open(args.json) as f:
            figures = json.load(f)
        m = run.data.metrics
        check(m.get("eval_auc_mean") == figures["auc_mean"], f"eval_auc_mean {m.get('eval_auc_mean')}")
        check(m.get("eval_loss") == figures["loss"], f"eval_loss {m.get('eval_loss')}")
        for label, value in figures["auc"].items():
            if value is not None:
                check(m.get("eval_auc/" + label) == value, f"eval_auc/{label} {m.get('eval_auc/' + label)}")
        paths = artifact_paths(client, args.run_id, "evaluate")
        name = os.path.basename(args.json)
        for a in (name, "roc.png", "pr.png", "operating_points.csv"):
            check("evaluate/" + a in paths, f"artifact evaluate/{a} missing (has {paths})")
        summary = {"eval_auc_mean": m.get("eval_auc_mean"), "artifacts": paths}
    elif args.command == "param-artifact":
        run = client.get_run(args.run_id)
        with tempfile.TemporaryDirectory() as tmp:
            with open(client.download_artifacts(args.run_id, f"params/{args.key}.txt", tmp)) as f:
                length = len(f.read())
        summary = {"param": run.data.params.get(args.key), "length": length,
                   "data.image_size": run.data.params.get("data.image_size")}
    else:
        experiment = client.get_experiment_by_name(args.experiment)
        runs = client.search_runs([experiment.experiment_id]) if experiment else []
        summary = {"runs": len(runs)}
    print(json.dumps(summary))
    if failures:
        print("FAIL: " + "; ".join(failures[:20]))
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv)
