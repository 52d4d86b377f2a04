#!/usr/bin/python3
"""Memory benchmark: sessions of one pool share the model's weights.

Generates a model with large weights (a MatMul against a WEIGHTS_MB float32
initializer) and, in every round, starts sipd three times (the order turning
each round), reading its resident memory after every session has run at
least once:
  A: one pool of 1 session        (the baseline)
  B: one pool of 8 sessions       (weights shared: should be close to A)
  C: 8 pools of 1 session each    (separate copies: the cost sip avoids)
Prints (B - A) / weights, the target being <= 0.25, and (C - A) / weights,
medians over the rounds of each round's figure.
Usage: bench/memory_sharing.py [BUILD_DIR] [WEIGHTS_MB]
"""
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from common import BUILD, ROUNDS, interleave, report
from cann_sip import InferenceRequest, SessionClient  # noqa: E402 (common sets the path)

WEIGHTS_MB = int(sys.argv[2]) if len(sys.argv) > 2 else 256
K = 1024
N_OUT = WEIGHTS_MB * 1024 * 1024 // (4 * K)


def make_model(path):
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((K, N_OUT), dtype=np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", K])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", N_OUT])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "big", [x], [y], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def measure(tmp, pools):
    sock = os.path.join(tmp, "bench.sock")
    cfg = os.path.join(tmp, "bench.yaml")
    with open(cfg, "w") as f:
        f.write(f"server:\n  endpoints: ['ipc://{sock}']\n  log_level: warn\nsession_pools:\n")
        for name, size in pools:
            f.write(f"  - {{name: {name}, model_path: {tmp}/big.onnx, pool_size: {size}}}\n")
    proc = subprocess.Popen([os.path.join(BUILD, "sipd"), "--config", cfg],
                            stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        client = None
        while time.time() < deadline:
            try:
                client = client or SessionClient(endpoint=f"ipc://{sock}")
                if client.ready():
                    break
            except Exception:
                client = None
            time.sleep(0.2)
        x = np.ones((1, K), np.float32)
        # Enough concurrent requests that every session runs at least once.
        for name, size in pools:
            for _ in range(3):
                ts = [threading.Thread(target=lambda n=name: client.infer(
                    InferenceRequest(session_pool=n, inputs={"x": x}))) for _ in range(size * 2)]
                [t.start() for t in ts]
                [t.join() for t in ts]
        st = client.status()
        runs = [s["inferences"] for p in st["pools"] for s in p["sessions"]]
        time.sleep(0.5)
        rss = rss_mb(proc.pid)
        client.close()
        return rss, runs
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        make_model(os.path.join(tmp, "big.onnx"))
        r = interleave(ROUNDS, {"A": lambda: measure(tmp, [("p", 1)]),
                                "B": lambda: measure(tmp, [("p", 8)]),
                                "C": lambda: measure(tmp, [(f"p{i}", 1) for i in range(8)])})
    print(f"weights: {WEIGHTS_MB} MiB")
    for k, label in (("A", "1 pool x 1 session "), ("B", "1 pool x 8 sessions"),
                     ("C", "8 pools x 1 session")):
        print(f"{k}  {label}: RSS " + " ".join(f"{rss:8.1f}" for rss, _ in r[k]) +
              f" MiB  (runs per session, last round: {r[k][-1][1]})")
    a = [rss for rss, _ in r["A"]]
    report("(B - A) / weights: 8 sessions sharing one model",
           [(b - x) / WEIGHTS_MB for (b, _), x in zip(r["B"], a)], "<= 0.25", "%.3f",
           spread_limit=None)
    report("(C - A) / weights: 8 separate copies",
           [(c - x) / WEIGHTS_MB for (c, _), x in zip(r["C"], a)], None, "%.3f")


if __name__ == "__main__":
    main()
