#!/usr/bin/python3
"""Sequence batching (docs/sequences.md) against plain pools, on the tiny model.

`sip bench --concurrency 8` keeps 8 requests outstanding, each chain sending
its next request when the previous one is answered; with --sequence-length
20 each chain sends sequences of 20 requests (a new id each), as stateful
clients do. Baselines measured in the same run, rounds interleaved:
- 1 session: `seq1` (sequence_batching) vs `plain1`: the cost of the
  sequence bookkeeping itself. Target: seq1 / plain1 >= 0.9.
- 2 sessions: `seq2` vs `plain2`: also what stickiness costs (a sequence
  waits for its own session even when the other one is idle). Reported.
"""
from common import Sipd, ensure_tiny, sip_bench

CONC, LENGTH, ROUNDS = 8, 20, 5
INP = ["x:float32:1,4=1,2,3,4"]
POOLS = ("plain1", "seq1", "plain2", "seq2")

tiny = ensure_tiny()
rate = {p: [] for p in POOLS}
with Sipd([{"name": "plain1", "model_path": tiny, "pool_size": 1},
           {"name": "seq1", "model_path": tiny, "pool_size": 1,
            "sequence_batching": {"max_sequences": CONC}},
           {"name": "plain2", "model_path": tiny, "pool_size": 2},
           {"name": "seq2", "model_path": tiny, "pool_size": 2,
            "sequence_batching": {"max_sequences": CONC}}]) as s:
    for _ in range(ROUNDS):  # interleaved, so a burst of other load hits both sides
        for pool in POOLS:
            extra = ["--sequence-length", str(LENGTH)] if pool.startswith("seq") else []
            r = sip_bench(s.endpoint, pool, INP, "--concurrency", str(CONC), *extra,
                          window_ms=500, max_windows=4)
            assert not r.get("errors"), r
            rate[pool].append(r["throughput_rps"])


def median(v):
    return sorted(v)[len(v) // 2]


for pool in POOLS:
    print("%-6s : %8.1f req/s (median of %d rounds)" % (pool, median(rate[pool]), ROUNDS))
print("(concurrency %d, %d-request sequences)" % (CONC, LENGTH))
r1 = median([a / b for a, b in zip(rate["seq1"], rate["plain1"])])
r2 = median([a / b for a, b in zip(rate["seq2"], rate["plain2"])])
print("seq1 / plain1 = %.3f   target >= 0.9: %s" % (r1, "PASS" if r1 >= 0.9 else "FAIL"))
print("seq2 / plain2 = %.3f   (sticky sessions, reported)" % r2)
