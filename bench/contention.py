#!/usr/bin/python3
"""Benchmark 3 (issue 4): three pools contending for 2 cores.

Part 1, priority: pool `hi` (priority high) serves the angle classifier at a
light open-loop rate. Its p99 is measured alone, then again while pool `lo`
(priority low, same model) is saturated at concurrency 16 and pool `mid`
(medium, the tiny model) at concurrency 4. Target: loaded p99 <= 2 x
unloaded p99.

Part 2, compute shares: pools `a` (max_compute_percent 25) and `b` (75),
both saturated; their measured compute time (status compute_ns) should
split 25/75 within +-5 points. Then `a` alone should get all of it.
"""
import time

from common import CLS, Sipd, ensure_tiny, sip_bench

tiny = ensure_tiny()
inp = ["x:float32:1,3,48,192=random"]
pools = [{"name": "hi", "model_path": CLS, "pool_size": 1, "priority": "high"},
         {"name": "lo", "model_path": CLS, "pool_size": 2, "priority": "low"},
         {"name": "mid", "model_path": tiny, "pool_size": 1, "priority": "medium"}]
with Sipd(pools, "  execution_slots: 1\n") as s:
    alone = sip_bench(s.endpoint, "hi", inp, "--rate", "50", "--distribution", "poisson")
    bg = [sip_bench(s.endpoint, "lo", inp, "--concurrency", "16", "--window-ms", "2000",
                    "--max-windows", "12", background=True),
          sip_bench(s.endpoint, "mid", ["x:float32:1,4=ones"], "--concurrency", "4",
                    "--window-ms", "2000", "--max-windows", "12", background=True)]
    time.sleep(2)
    loaded = sip_bench(s.endpoint, "hi", inp, "--rate", "50", "--distribution", "poisson")
    for p in bg:
        p.terminate()
        p.wait()
u, l = alone["latency_ms"]["p99"], loaded["latency_ms"]["p99"]
print("hi alone : p50 %6.2f ms  p99 %6.2f ms" % (alone["latency_ms"]["p50"], u))
print("hi loaded: p50 %6.2f ms  p99 %6.2f ms  (lo at concurrency 16, mid at 4)" %
      (loaded["latency_ms"]["p50"], l))
print("loaded p99 / alone p99 = %.2f   target <= 2: %s" % (l / u, "PASS" if l <= 2 * u else "FAIL"))

shares = [{"name": "a", "model_path": CLS, "pool_size": 2, "resource_quota": {"max_compute_percent": 25}},
          {"name": "b", "model_path": CLS, "pool_size": 2, "resource_quota": {"max_compute_percent": 75}}]
with Sipd(shares) as s:
    a0, b0 = s.status("a")["compute_ns"], s.status("b")["compute_ns"]
    procs = [sip_bench(s.endpoint, n, inp, "--concurrency", "8", "--window-ms", "1000",
                       "--max-windows", "6", background=True) for n in ("a", "b")]
    time.sleep(1.5)
    a1, b1 = s.status("a")["compute_ns"], s.status("b")["compute_ns"]
    time.sleep(3)
    a2, b2 = s.status("a")["compute_ns"], s.status("b")["compute_ns"]
    for p in procs:
        p.wait()
    share_a = (a2 - a1) / max(1, (a2 - a1) + (b2 - b1)) * 100
    lone = sip_bench(s.endpoint, "a", inp, "--concurrency", "8", "--window-ms", "1000",
                     "--max-windows", "3")
print("compute shares a/b: %.1f / %.1f (configured 25 / 75)   target +-5: %s" %
      (share_a, 100 - share_a, "PASS" if abs(share_a - 25) <= 5 else "FAIL"))
print("a alone: %.1f items/s (all the cores it can use)" % lone["throughput_rps"])
