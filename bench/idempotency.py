#!/usr/bin/python3
"""Idempotent requests (docs/idempotency.md): what a key costs and what a
replay saves. One sipd with a builtin pool (identity, 1 KiB input); the
Python client sends N requests one at a time: without a key (baseline), each
with a new key (an execution plus a cache entry), and the same key again
(answered from the kept answer, never executed). Prints each rate and its
ratio to the baseline measured in this run; then the same in process
(bench_idempotency), without the client's and the socket's share."""
import os
import subprocess
import time

import numpy as np

from common import BUILD, Sipd
from cann_sip import InferenceRequest, SessionClient

N = 2000
ROUNDS = 3
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
        plain = fresh = replay = 0.0
        for r in range(ROUNDS):  # interleaved, best of each: the machine is shared
            plain = max(plain, rate(c, lambda i: InferenceRequest("p", {"input": X})))
            fresh = max(fresh, rate(c, lambda i: InferenceRequest(
                "p", {"input": X}, idempotency_key="r%d-%d" % (r, i))))
            replay = max(replay, rate(c, lambda i: InferenceRequest("p", {"input": X},
                                                                      idempotency_key="r0-0")))
        executed = s.status("p")["requests"].get("OK", 0)
print("requests/s, one at a time over the unix socket, N=%d:" % N)
print("  no key (baseline)  : %8.0f" % plain)
print("  new key each       : %8.0f   ratio %.3f" % (fresh, fresh / plain))
print("  same key (replays) : %8.0f   ratio %.3f" % (replay, replay / plain))
print("executions: %d (expected %d: the replays never ran)" % (executed, ROUNDS * (2 * N + 2)))
subprocess.run([os.path.join(BUILD, "bench_idempotency")], check=True)
