#!/usr/bin/python3
"""Sequence batching (docs/sequences.md) against plain pools, on the tiny model.

`sip bench --concurrency 8` keeps 8 requests outstanding, each chain sending
its next request when the previous one is answered; with --sequence-length
20 each chain sends sequences of 20 requests (a new id each), as stateful
clients do. Baselines measured in the same run, every round driving the four
pools in turn (the order turning each round):
- 1 session: `seq1` (sequence_batching) vs `plain1`: the cost of the
  sequence bookkeeping itself. Target: seq1 / plain1 >= 0.9.
- 2 sessions: `seq2` vs `plain2`: also what stickiness costs (a sequence
  waits for its own session even when the other one is idle). Reported.
Figures are medians of each round's ratio.
"""
from common import ROUNDS, Sipd, ensure_tiny, interleave, ratios, report, sip_bench

CONC, LENGTH = 8, 20
INP = ["x:float32:1,4=1,2,3,4"]
POOLS = ("plain1", "seq1", "plain2", "seq2")

tiny = ensure_tiny()


def rate(s, pool):
    def run():
        extra = ["--sequence-length", str(LENGTH)] if pool.startswith("seq") else []
        r = sip_bench(s.endpoint, pool, INP, "--concurrency", str(CONC), *extra,
                      window_ms=500, max_windows=4)
        assert not r.get("errors"), r
        return r["throughput_rps"]
    return run


with Sipd([{"name": "plain1", "model_path": tiny, "pool_size": 1},
           {"name": "seq1", "model_path": tiny, "pool_size": 1,
            "sequence_batching": {"max_sequences": CONC}},
           {"name": "plain2", "model_path": tiny, "pool_size": 2},
           {"name": "seq2", "model_path": tiny, "pool_size": 2,
            "sequence_batching": {"max_sequences": CONC}}]) as s:
    r = interleave(max(ROUNDS, 5), {p: rate(s, p) for p in POOLS})

for pool in POOLS:
    print("%-6s : %s req/s" % (pool, " ".join("%8.1f" % v for v in r[pool])))
print("(concurrency %d, %d-request sequences)" % (CONC, LENGTH))
report("seq1 / plain1 throughput (1 session)", ratios(r["seq1"], r["plain1"]), ">= 0.9", "%.3f")
report("seq2 / plain2 throughput (2 sessions, sticky)", ratios(r["seq2"], r["plain2"]), None,
       "%.3f")
