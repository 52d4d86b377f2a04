#!/usr/bin/python3
"""Sequence batching (docs/sequences.md) against plain pools, on the tiny model.

8 client threads each send sequences of 20 requests one after another (a
request waits for its answer before the next, as a stateful client does);
on a plain pool the same requests carry no sequence. Baselines measured in
the same run:
- 1 session: `seq1` (sequence_batching) vs `plain1`: the cost of the
  sequence bookkeeping itself. Target: seq1 / plain1 >= 0.9.
- 2 sessions: `seq2` vs `plain2`: also what stickiness costs (a sequence
  waits for its own session even when the other one is idle). Reported.
"""
import threading
import time

import numpy as np

from common import Sipd, SessionClient, ensure_tiny

THREADS, LENGTH, SECONDS, ROUNDS = 8, 20, 1.5, 3
X = {"x": np.ones((1, 4), dtype=np.float32)}


def drive(endpoint, pool, sequences):
    done, stop = [0] * THREADS, time.monotonic() + SECONDS

    def worker(t):
        from cann_sip import InferenceRequest
        with SessionClient(endpoint) as c:
            n = 0
            while time.monotonic() < stop:
                if sequences:
                    seq = c.sequence(pool, "t%d-%d" % (t, n))
                    for i in range(LENGTH):
                        seq.infer(X, end=i == LENGTH - 1)
                else:
                    for i in range(LENGTH):
                        c.infer(InferenceRequest(pool, X))
                n += 1
                done[t] += LENGTH

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done) / (time.monotonic() - t0)


tiny = ensure_tiny()
POOLS = ("plain1", "seq1", "plain2", "seq2")
rate = {p: [] for p in POOLS}
with Sipd([{"name": "plain1", "model_path": tiny, "pool_size": 1},
           {"name": "seq1", "model_path": tiny, "pool_size": 1,
            "sequence_batching": {"max_sequences": THREADS}},
           {"name": "plain2", "model_path": tiny, "pool_size": 2},
           {"name": "seq2", "model_path": tiny, "pool_size": 2,
            "sequence_batching": {"max_sequences": THREADS}}]) as s:
    for _ in range(ROUNDS):  # interleaved, so a burst of other load hits both sides
        for pool in POOLS:
            rate[pool].append(drive(s.endpoint, pool, pool.startswith("seq")))
    expired = s.status("seq1")["sequences"]["expired"] + s.status("seq2")["sequences"]["expired"]


def median(v):
    return sorted(v)[len(v) // 2]


for pool in POOLS:
    print("%-6s : %8.1f req/s (median of %d rounds)" % (pool, median(rate[pool]), ROUNDS))
print("(%d threads, %d-request sequences, sequences expired: %d)" % (THREADS, LENGTH, expired))
r1 = median([a / b for a, b in zip(rate["seq1"], rate["plain1"])])
r2 = median([a / b for a, b in zip(rate["seq2"], rate["plain2"])])
print("seq1 / plain1 = %.3f   target >= 0.9: %s" % (r1, "PASS" if r1 >= 0.9 else "FAIL"))
print("seq2 / plain2 = %.3f   (sticky sessions, reported)" % r2)
