#!/usr/bin/python3
"""Process isolation overhead (docs/availability.md): the tiny model
(y = 2x + 1, float32 [1, 4]) one request at a time over the native unix
socket (`sip bench --concurrency 1`), on a pool with `isolation: thread`
(the baseline, measured in this run) and the same pool with
`isolation: process` (sessions execute in a worker process; inputs and
outputs pass through shared memory). Target: process p50 <= thread p50 +
15 us.
"""
import os

from common import Sipd, ensure_tiny, sip_bench

tiny = ensure_tiny()


def run(isolation):
    pool = {"name": "tiny", "model_path": tiny, "pool_size": 1, "isolation": isolation}
    with Sipd([pool]) as s:
        r = sip_bench(s.endpoint, "tiny", ["x:float32:1,4=ones"], "--concurrency", "1")
        if isolation == "process":
            assert s.status("tiny")["worker"]["pid"] > 0
    return r["latency_ms"]["p50"] * 1000, r["latency_ms"]["p99"] * 1000, r


load0 = os.getloadavg()[0]
t50, t99, tr = run("thread")
p50, p99, pr = run("process")
print("machine load (1 min): %.2f before, %.2f after" % (load0, os.getloadavg()[0]))
print("isolation thread : p50 %7.1f us  p99 %7.1f us  (%.0f req/s, stable=%s)"
      % (t50, t99, tr["throughput_rps"], tr["stable"]))
print("isolation process: p50 %7.1f us  p99 %7.1f us  (%.0f req/s, stable=%s)"
      % (p50, p99, pr["throughput_rps"], pr["stable"]))
print("process - thread p50 = %+.1f us   target <= 15 us: %s"
      % (p50 - t50, "PASS" if p50 - t50 <= 15 else "FAIL"))
print("ratio process/thread p50: %.2f" % (p50 / t50))
