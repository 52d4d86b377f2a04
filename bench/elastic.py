#!/usr/bin/python3
"""More models than memory (issue 19, docs/elastic.md "Residency"): 40
generated ONNX models of about 20 MiB each in a model repository, served by
one sipd under `server.memory_budget_mb: 200`, so that fewer than a quarter
of them fit at once. Repository models are on_demand under a budget: each
loads at its first request and idle ones are evicted least recently used
first to make room.

Traffic: 4 client threads, each with its own connection over the unix
socket, one request at a time for 60 s (SIP_BENCH_ELASTIC_S), the model of
each request drawn from a Zipf distribution over the 40 (rank k with
probability proportional to k^-1.1). Every answer is compared with the
model's reference output (numpy, computed when the model was made).

Meanwhile sipd's resident set (VmRSS of /proc/PID/status) is sampled every
0.5 s. The idle process is sipd's resident set once it is ready, before the
first request (every model is still UNLOADED).

Figures, one per round (SIP_BENCH_ROUNDS, at least 3, a fresh sipd each):
  failed requests          target == 0 (every error counts, whatever its kind)
  peak RSS / (budget + idle process), target <= 1.1
  hit rate                 requests that found their model loaded
                           (sip_residency_hits_total over hits + cold starts)
  cold start p50 / p99     of sip_residency_cold_start_seconds (the wait of a
                           request whose model loaded for it), interpolated
                           within the histogram's buckets as Prometheus's
                           histogram_quantile does
  requests per second      of the 4 clients together
The models are made once and kept under ~/.cache/sip/bench-elastic/ (the
same seeds give the same files); sipd and its temporary directory go on the
way out, on an error or SIGTERM too."""
import os
import shutil
import socket
import threading
import time
import urllib.request

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from prometheus_client.parser import text_string_to_metric_families

from common import ROUNDS, Sipd, interleave, median, report
from cann_sip import InferenceRequest, SessionClient

N_MODELS = 40
IN, OUT = 1024, 5120  # x [1, IN] @ w [IN, OUT]: 20 MiB of float32 weights
BUDGET_MB = 200
CLIENTS = 4
ZIPF_S = 1.1
DURATION_S = float(os.environ.get("SIP_BENCH_ELASTIC_S", "60"))
SAMPLE_S = 0.5
HOME = os.path.join(os.path.expanduser("~"), ".cache", "sip", "bench-elastic-%dx%d" % (IN, OUT))
X = np.linspace(-1.0, 1.0, IN, dtype=np.float32).reshape(1, IN)


def make_models():
    """The repository (HOME/repo/mNN/1/model.onnx) and each model's reference
    output for X, made once; returns (repo, {name: reference})."""
    repo = os.path.join(HOME, "repo")
    refs_path = os.path.join(HOME, "refs.npz")
    if os.path.exists(refs_path):
        with np.load(refs_path) as z:
            return repo, {k: z[k] for k in z.files}
    shutil.rmtree(HOME, ignore_errors=True)
    refs = {}
    for i in range(N_MODELS):
        name = "m%02d" % i
        w = np.random.default_rng(1000 + i).standard_normal((IN, OUT), dtype=np.float32)
        g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", IN])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", OUT])],
            [numpy_helper.from_array(w, "w")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        d = os.path.join(repo, name, "1")
        os.makedirs(d)
        onnx.save(m, os.path.join(d, "model.onnx"))
        refs[name] = (X.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)
    np.savez(refs_path + ".tmp.npz", **refs)
    os.rename(refs_path + ".tmp.npz", refs_path)
    return repo, refs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS for pid %d" % pid)


def metrics(port):
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30).read()
    return list(text_string_to_metric_families(body.decode()))


def sample(fams, name):
    for fam in fams:
        for s in fam.samples:
            if s.name == name and "pool" not in s.labels:
                return s.value
    raise RuntimeError("/metrics has no %s" % name)


def quantile(fams, name, q):
    """histogram_quantile(q) of histogram `name` (linear within a bucket)."""
    buckets = sorted((float(s.labels["le"]), s.value) for fam in fams for s in fam.samples
                     if s.name == name + "_bucket")
    total = buckets[-1][1]
    if not total:
        return float("nan")
    rank, prev_le, prev_n = q * total, 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_n) / max(n - prev_n, 1e-12)
        prev_le, prev_n = le, n
    return prev_le


def zipf_p():
    p = np.arange(1, N_MODELS + 1, dtype=np.float64) ** -ZIPF_S
    return p / p.sum()


def one_round(repo, refs):
    port = free_port()
    config = ("server:\n  endpoints:\n    - x\n  log_level: warn\n  http: 127.0.0.1:%d\n"
              "  memory_budget_mb: %d\n  model_repository: %s\n" % (port, BUDGET_MB, repo))
    names = sorted(refs)
    p = zipf_p()
    with Sipd([], config=config) as srv:
        pid = srv.proc.pid
        idle = rss_bytes(pid)
        peak = [idle]
        done = threading.Event()
        counts = {"ok": 0, "wrong": 0, "failed": 0}
        errors = {}
        lock = threading.Lock()

        def sampler():
            while not done.wait(SAMPLE_S):
                peak[0] = max(peak[0], rss_bytes(pid))

        def client(seed):
            rng = np.random.default_rng(seed)
            ok = wrong = failed = 0
            with SessionClient(srv.endpoint, timeout_s=120) as c:
                end = time.monotonic() + DURATION_S
                while time.monotonic() < end:
                    name = names[rng.choice(N_MODELS, p=p)]
                    try:
                        y = c.infer(InferenceRequest(name, {"x": X})).outputs["y"]
                    except Exception as e:  # every failure counts
                        failed += 1
                        with lock:
                            errors[type(e).__name__ + ": " + str(e)[:200]] = 1
                        continue
                    if np.allclose(y, refs[name], rtol=1e-4, atol=1e-3):
                        ok += 1
                    else:
                        wrong += 1
            with lock:
                counts["ok"] += ok
                counts["wrong"] += wrong
                counts["failed"] += failed

        threads = [threading.Thread(target=sampler)] + [
            threading.Thread(target=client, args=(7 + k,)) for k in range(CLIENTS)]
        t0 = time.monotonic()
        for t in threads[1:]:
            t.start()
        threads[0].start()
        for t in threads[1:]:
            t.join()
        wall = time.monotonic() - t0
        done.set()
        threads[0].join()
        peak[0] = max(peak[0], rss_bytes(pid))
        fams = metrics(port)
        hits = sample(fams, "sip_residency_hits_total")
        cold = sample(fams, "sip_residency_cold_starts_total")
        evictions = sample(fams, "sip_residency_evictions_total")
        r = {
            "failed": counts["failed"] + counts["wrong"],
            "peak_ratio": peak[0] / (BUDGET_MB * (1 << 20) + idle),
            "hit_rate": hits / max(hits + cold, 1),
            "cold_p50_ms": 1000 * quantile(fams, "sip_residency_cold_start_seconds", 0.5),
            "cold_p99_ms": 1000 * quantile(fams, "sip_residency_cold_start_seconds", 0.99),
            "rps": (counts["ok"] + counts["wrong"] + counts["failed"]) / wall,
        }
        print("round: %d answers (%d wrong, %d failed), %d cold starts, %d evictions; idle %.1f "
              "MiB, peak RSS %.1f MiB (budget %d MiB)" % (
                  counts["ok"] + counts["wrong"], counts["wrong"], counts["failed"], cold,
                  evictions, idle / 2**20, peak[0] / 2**20, BUDGET_MB), flush=True)
        for e in list(errors)[:5]:
            print("  error: %s" % e, flush=True)
        return r


def main():
    repo, refs = make_models()
    print("%d models of %.1f MiB in %s; budget %d MiB; %d clients, Zipf s=%.1f, %.0f s a round" % (
        N_MODELS, IN * OUT * 4 / 2**20, repo, BUDGET_MB, CLIENTS, ZIPF_S, DURATION_S), flush=True)
    rounds = interleave(ROUNDS, {"elastic": lambda: one_round(repo, refs)})["elastic"]
    col = {k: [r[k] for r in rounds] for k in rounds[0]}
    report("failed requests", col["failed"], "<= 0", fmt="%d",
           spread_limit=None)
    report("peak RSS / (budget + idle process)", col["peak_ratio"], "<= 1.1")
    report("hit rate", col["hit_rate"], fmt="%.3f")
    report("cold start p50", col["cold_p50_ms"], fmt="%.1f", unit=" ms", spread_limit=None)
    report("cold start p99", col["cold_p99_ms"], fmt="%.1f", unit=" ms", spread_limit=None)
    report("requests per second", col["rps"], fmt="%.1f")
    print("median over %d rounds: hit rate %.3f, cold start p50 %.1f ms p99 %.1f ms" % (
        len(rounds), median(col["hit_rate"]), median(col["cold_p50_ms"]),
        median(col["cold_p99_ms"])))


if __name__ == "__main__":
    main()
