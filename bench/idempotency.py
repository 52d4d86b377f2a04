#!/usr/bin/python3
"""Idempotent requests (docs/idempotency.md): what a key costs and what a
replay saves. One sipd with a builtin pool (identity, 1 KiB input); the
Python client sends N requests one at a time: without a key (baseline), each
with a new key (an execution plus a cache entry), and the same key again
(answered from the kept answer, never executed), every round all three in
turn (the order turning each round). Prints each rate and the medians of
each round's ratio to the baseline; then the same in process
(bench_idempotency), without the client's and the socket's share."""
import os
import subprocess
import time

import numpy as np

from common import BUILD, ROUNDS, Sipd, interleave, ratios, report
from cann_sip import InferenceRequest, SessionClient

N = 2000
X = np.arange(256, dtype=np.float32)


def rate(client, make):
    client.infer(make(-1))  # warm
    t0 = time.perf_counter()
    for i in range(N):
        client.infer(make(i))
    return N / (time.perf_counter() - t0)


with Sipd([{"name": "p", "backend": "builtin", "pool_size": 1,
            "backend_options": {"shape": "-1"}}]) as s:
    with SessionClient(s.endpoint, timeout_s=30) as c:
        rnd = [0]

        def fresh():
            rnd[0] += 1
            return rate(c, lambda i: InferenceRequest("p", {"input": X},
                                                      idempotency_key="r%d-%d" % (rnd[0], i)))
        rate(c, lambda i: InferenceRequest("p", {"input": X}, idempotency_key="replayed"))
        r = interleave(ROUNDS, {
            "plain": lambda: rate(c, lambda i: InferenceRequest("p", {"input": X})),
            "fresh": fresh,
            "replay": lambda: rate(c, lambda i: InferenceRequest("p", {"input": X},
                                                                  idempotency_key="replayed"))})
        executed = s.status("p")["requests"].get("OK", 0)
rounds = len(r["plain"])
print("requests/s, one at a time over the unix socket, N=%d:" % N)
for k, label in (("plain", "no key (baseline)"), ("fresh", "new key each"),
                 ("replay", "same key (replays)")):
    print("  %-19s: %s" % (label, " ".join("%8.0f" % v for v in r[k])))
report("requests/s, a new idempotency key each / no key", ratios(r["fresh"], r["plain"]), None,
       "%.3f")
report("requests/s, the same key replayed / no key", ratios(r["replay"], r["plain"]), None,
       "%.3f")
# rate() sends N + 1 (one to warm); the replays and their warm-up never ran,
# but the very first request with the replayed key did.
print("executions: %d (expected %d: the replays never ran)" % (executed, rounds * 2 * (N + 1) + 1))
subprocess.run([os.path.join(BUILD, "bench_idempotency")], check=True)
