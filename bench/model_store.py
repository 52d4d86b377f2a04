#!/usr/bin/python3
"""Model store benchmark: a pool and a pipeline stage on the same model file
cost about one pool (docs/elastic.md "One model store").

Generates a model with large weights (memory_sharing.py's MatMul against a
WEIGHTS_MB float32 initializer, which graph optimization cannot fold) and,
in every round, starts sipd three times (the order turning each round),
reading its resident memory (VmRSS) once it is ready and has answered:
  Z: a builtin pool only               (the process without the model)
  A: one pool on the model              (one pool)
  B: that pool and a pipeline stage whose own pool names the same file
  C: as B, the stage naming a copy of the file (another path: loaded again,
     what B would cost without the store)
Prints (B - Z) / (A - Z), the target being <= 1.1, the same for C (about
2), and sipd's own figure, memory.models_bytes of B over A's.
Usage: bench/model_store.py [BUILD_DIR] [WEIGHTS_MB]
"""
import os
import shutil
import sys
import tempfile

import numpy as np

from common import ROUNDS, Sipd, interleave, report
from cann_sip import InferenceRequest, SessionClient  # noqa: E402 (common sets the path)
from memory_sharing import WEIGHTS_MB, K, make_model, rss_mb


def measure(model, kind, copy=None):
    pools = [{"name": "z", "backend": "builtin"}]
    pipelines = ""
    if kind != "Z":
        pools.append({"name": "p", "model_path": model})
    if kind in "BC":
        pipelines = ("pipeline_sessions:\n  - name: staged\n    stages:\n"
                     "      - {name: s, model_path: %s}\n" % (copy if kind == "C" else model))
    with Sipd(pools, pipelines=pipelines) as s, SessionClient(s.endpoint) as c:
        x = np.ones((1, K), np.float32)
        for name in {"Z": [], "A": ["p"], "B": ["p", "staged"], "C": ["p", "staged"]}[kind]:
            c.infer(InferenceRequest(name, {"x": x}))
        return rss_mb(s.proc.pid), c.status()["memory"]["models_bytes"] / 1048576.0


def main():
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        model = os.path.join(tmp, "big.onnx")
        make_model(model)
        copy = os.path.join(tmp, "copy.onnx")
        shutil.copyfile(model, copy)
        r = interleave(ROUNDS, {k: (lambda k=k: measure(model, k, copy)) for k in "ZABC"})
    print(f"weights: {WEIGHTS_MB} MiB")
    for k, label in (("Z", "no model          "), ("A", "one pool          "),
                     ("B", "pool + stage pool "), ("C", "pool + stage, copy")):
        print(f"{k}  {label}: RSS " + " ".join(f"{rss:8.1f}" for rss, _ in r[k]) +
              " MiB; models_bytes " + " ".join(f"{m:8.1f}" for _, m in r[k]) + " MiB")
    z = [rss for rss, _ in r["Z"]]
    report("(B - Z) / (A - Z): a pool and a stage on one model, over one pool (RSS)",
           [(b - o) / (a - o) for (b, _), (a, _), o in zip(r["B"], r["A"], z)], "<= 1.1", "%.3f")
    report("(C - Z) / (A - Z): the stage on a copy of the file (loaded twice)",
           [(c - o) / (a - o) for (c, _), (a, _), o in zip(r["C"], r["A"], z)], None, "%.3f")
    report("models_bytes B / A (sipd's own figure)",
           [b / a for (_, b), (_, a) in zip(r["B"], r["A"])], "<= 1.1", "%.3f")


if __name__ == "__main__":
    sys.exit(main())
