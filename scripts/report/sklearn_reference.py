#!/usr/bin/env python3
"""scikit-learn's figures for the scores and labels in a JSON file, for tests/engine/report/roc_test.cpp.

    sklearn_reference.py IN.json OUT.json

IN:  {"cases": [{"scores": [...], "labels": [0/1 ...]}, ...]}
OUT: {"cases": [{"auc", "ap", "roc": {fpr, tpr, thresholds}, "roc_dropped": {...}, "pr": {precision,
     recall, thresholds}, "points": {name: threshold}}, ...]}; +inf thresholds as the string "inf".
The operating points come from roc_curve(drop_intermediate=False) by the rules of engine/report/roc_curves.h.
Exits 77 without scikit-learn (the test skips).
"""
import json
import sys

try:
    import numpy as np
    from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve
except ImportError as e:
    print(f"sklearn_reference.py: {e}", file=sys.stderr)
    sys.exit(77)


def listed(a):
    return ["inf" if np.isinf(v) else float(v) for v in a]


def points(fpr, tpr, thr):
    fpr, tpr, thr = fpr[1:], tpr[1:], thr[1:]  # without the +inf start
    out = {"youden": float(thr[int(np.argmax(tpr - fpr))])}
    for t in (90, 95):
        out[f"sens{t}"] = float(thr[int(np.argmax(tpr >= t / 100))])
        ok = np.where(1 - fpr >= t / 100)[0]
        out[f"spec{t}"] = float(thr[ok[-1]]) if len(ok) else "inf"
    return out


def main():
    cases = json.load(open(sys.argv[1]))["cases"]
    out = []
    for c in cases:
        y, s = np.asarray(c["labels"], dtype=int), np.asarray(c["scores"], dtype=np.float64)
        fpr, tpr, thr = roc_curve(y, s, drop_intermediate=False)
        dfpr, dtpr, dthr = roc_curve(y, s, drop_intermediate=True)
        p, r, pthr = precision_recall_curve(y, s)
        out.append({
            "auc": float(roc_auc_score(y, s)),
            "ap": float(average_precision_score(y, s)),
            "roc": {"fpr": listed(fpr), "tpr": listed(tpr), "thresholds": listed(thr)},
            "roc_dropped": {"fpr": listed(dfpr), "tpr": listed(dtpr), "thresholds": listed(dthr)},
            "pr": {"precision": listed(p), "recall": listed(r), "thresholds": listed(pthr)},
            "points": points(fpr, tpr, thr),
        })
    json.dump({"cases": out}, open(sys.argv[2], "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
