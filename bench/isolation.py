#!/usr/bin/python3
"""Process isolation overhead (docs/availability.md): the tiny model
(y = 2x + 1, float32 [1, 4]) one request at a time over the native unix
socket (`sip bench --concurrency 1`), on a pool with `isolation: thread`
(the baseline, measured in this run) and the same pool with
`isolation: process` (sessions execute in a worker process; inputs and
outputs pass through shared memory). The two alternate ROUNDS times and the
medians are compared, so that a change in the machine's load hits both.
Target: process p50 <= thread p50 + 15 us.
"""
import os
import statistics

from common import Sipd, ensure_tiny, sip_bench

ROUNDS = 3
tiny = ensure_tiny()


def run(isolation):
    pool = {"name": "tiny", "model_path": tiny, "pool_size": 1, "isolation": isolation}
    with Sipd([pool]) as s:
        r = sip_bench(s.endpoint, "tiny", ["x:float32:1,4=ones"], "--concurrency", "1")
        if isolation == "process":
            assert s.status("tiny")["worker"]["pid"] > 0
    return r["latency_ms"]["p50"] * 1000, r["latency_ms"]["p99"] * 1000


load0 = os.getloadavg()[0]
res = {"thread": [], "process": []}
for _ in range(ROUNDS):
    for iso in res:
        res[iso].append(run(iso))
print("machine load (1 min): %.2f before, %.2f after" % (load0, os.getloadavg()[0]))
p50 = {}
for iso, rs in res.items():
    p50[iso] = statistics.median(r[0] for r in rs)
    print("isolation %-7s: p50 %6.1f us  p99 %7.1f us  (median of %d runs; p50s %s)"
          % (iso, p50[iso], statistics.median(r[1] for r in rs), ROUNDS,
             " ".join("%.0f" % r[0] for r in rs)))
d = p50["process"] - p50["thread"]
print("process - thread p50 = %+.1f us   target <= 15 us: %s" % (d, "PASS" if d <= 15 else "FAIL"))
print("ratio process/thread p50: %.2f" % (p50["process"] / p50["thread"]))
