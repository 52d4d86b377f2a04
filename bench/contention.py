#!/usr/bin/python3
"""Benchmark 3 (issue 4): three pools contending for 2 cores.

Part 1, priority: pool `hi` (priority high) serves the angle classifier at a
light open-loop rate (50 req/s, Poisson). Each round measures its p99 alone,
then while pool `lo` (priority low, same model) is saturated at concurrency
16 and pool `mid` (medium, the tiny model) at concurrency 4 (measured once
both are being served), the order turning each round. Target: loaded p99 <=
2 x unloaded p99 (median of each round's ratio).

Part 2, compute shares: pools `a` (max_compute_percent 25) and `b` (75),
both saturated; each round reads their compute time (status compute_ns)
over 3 s once both are being served, then measures `a` alone. Target: the
split within +-5 points of 25/75.
"""
import time

from common import CLS, ROUNDS, Sipd, ensure_tiny, interleave, report, sip_bench

tiny = ensure_tiny()
inp = ["x:float32:1,3,48,192=random"]


def served(s, pool):
    return s.status(pool)["requests"].get("OK", 0)


def wait_served(s, pools, n=16, timeout=60):
    """Until each of `pools` has answered n more requests (its load runs)."""
    start = {p: served(s, p) for p in pools}
    deadline = time.monotonic() + timeout
    while any(served(s, p) - start[p] < n for p in pools):
        if time.monotonic() > deadline:
            raise RuntimeError("pools %s served fewer than %d requests in %d s"
                               % (pools, n, timeout))
        time.sleep(0.05)


def background(s, pool, spec, conc):
    return sip_bench(s.endpoint, pool, spec, "--concurrency", str(conc), "--window-ms", "1000",
                     "--max-windows", "60", background=True)


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


pools = [{"name": "hi", "model_path": CLS, "pool_size": 1, "priority": "high"},
         {"name": "lo", "model_path": CLS, "pool_size": 2, "priority": "low"},
         {"name": "mid", "model_path": tiny, "pool_size": 1, "priority": "medium"}]
with Sipd(pools, "  execution_slots: 1\n") as s:
    def hi():
        return sip_bench(s.endpoint, "hi", inp, "--rate", "50", "--distribution", "poisson",
                         window_ms=1000, max_windows=3)["latency_ms"]

    def loaded():
        bg = [background(s, "lo", inp, 16), background(s, "mid", ["x:float32:1,4=ones"], 4)]
        try:
            wait_served(s, ["lo", "mid"])
            return hi()
        finally:
            stop(bg)
    r = interleave(ROUNDS, {"alone": hi, "loaded": loaded})
for k in ("alone", "loaded"):
    print("hi %-6s: p50 %s ms   p99 %s ms" % (k, " ".join("%6.2f" % x["p50"] for x in r[k]),
                                              " ".join("%6.2f" % x["p99"] for x in r[k])))
report("hi p99 loaded / alone (lo at concurrency 16, mid at 4)",
       [a["p99"] / b["p99"] for a, b in zip(r["loaded"], r["alone"])], "<= 2", "%.2f")

shares = [{"name": "a", "model_path": CLS, "pool_size": 2,
           "resource_quota": {"max_compute_percent": 25}},
          {"name": "b", "model_path": CLS, "pool_size": 2,
           "resource_quota": {"max_compute_percent": 75}}]
with Sipd(shares) as s:
    def split():
        procs = [background(s, n, inp, 8) for n in ("a", "b")]
        try:
            wait_served(s, ["a", "b"])
            a1, b1 = s.status("a")["compute_ns"], s.status("b")["compute_ns"]
            time.sleep(3)  # the measuring interval
            a2, b2 = s.status("a")["compute_ns"], s.status("b")["compute_ns"]
        finally:
            stop(procs)
        return (a2 - a1) / max(1, (a2 - a1) + (b2 - b1)) * 100

    def lone():
        return sip_bench(s.endpoint, "a", inp, "--concurrency", "8", window_ms=1000,
                         max_windows=3)["throughput_rps"]
    r = interleave(ROUNDS, {"split": split, "lone": lone})
print("compute share of a: %s %% (configured 25 / 75)" % " ".join("%.1f" % v for v in r["split"]))
print("a alone: %s items/s (all the cores it can use)" % " ".join("%.1f" % v for v in r["lone"]))
report("compute share of a (configured 25%, b 75%)", r["split"], None, "%.1f", "%")
report("compute share of a: distance from 25 points", [abs(v - 25) for v in r["split"]], "<= 5",
       "%.1f", " points", spread_limit=None)
