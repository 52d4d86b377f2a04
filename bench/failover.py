#!/usr/bin/python3
"""Failover recovery time (docs/availability.md): from the moment a session's
failure is seen to the first answer of the session that replaces it.

One ONNX pool (the PP-OCR angle classifier) with 2 sessions and
immediate_retry, session 1 drained so that the retry of the crashed request
runs on the replaced session 0. An injected crash, CRASHES times a round:
the pool's status reports last_recovery_us. Baseline, in this run: the same
pool without hot standby (the replacement creates a new ONNX Runtime
session); both servers run at once and every round crashes each in turn
(the order turning each round). Target: with hot_standby, recovery <= 5 ms
(the median of each round's median).
"""
import time

import numpy as np

from common import CLS, ROUNDS, Sipd, interleave, median, ratios, report
from cann_sip import InferenceRequest, SessionClient

CRASHES = 5


def server(standby):
    pool = {"name": "m", "model_path": CLS, "pool_size": 2,
            "failover": {"strategy": "immediate_retry", "max_retries": 2}}
    if standby:
        pool["hot_standby"] = {"enabled": True, "standby_count": 1}
    return Sipd([pool], server_extra="  allow_fault_injection: true\n")


X = np.random.rand(1, 3, 48, 192).astype(np.float32)


def crashes(s, c, standby):
    """CRASHES injected crashes; the median recovery in ms."""
    def run():
        times = []
        for _ in range(CRASHES):
            deadline = time.time() + 30
            while standby and s.status("m")["failover"]["standby_sessions"] < 1:
                assert time.time() < deadline, "no standby made"
                time.sleep(0.01)
            c.admin("fault", "m", kind="crash", count=1)
            r = c.infer(InferenceRequest("m", {"x": X}))
            assert r.retries == 1 and r.served_by == "m/0", (r.retries, r.served_by)
            times.append(s.status("m")["failover"]["last_recovery_us"] / 1000.0)
        return median(times)
    return run


with server(False) as sb, server(True) as sh, SessionClient(sb.endpoint) as cb, \
        SessionClient(sh.endpoint) as ch:
    for s, c in ((sb, cb), (sh, ch)):
        c.admin("drain", "m", session=1)
        c.infer(InferenceRequest("m", {"x": X}))
    r = interleave(ROUNDS, {"new session": crashes(sb, cb, False),
                            "hot standby": crashes(sh, ch, True)})
    promoted = sh.status("m")["failover"]["promotions"]
for k in r:
    print("recovery, %-11s: %s ms (median of %d crashes per round)"
          % (k, " ".join("%.2f" % v for v in r[k]), CRASHES))
print("standby promotions: %d of %d crashes" % (promoted, CRASHES * len(r["hot standby"])))
report("recovery with a hot standby", r["hot standby"], "<= 5", "%.2f", " ms")
report("recovery: hot standby / new session", ratios(r["hot standby"], r["new session"]), None,
       "%.3f")
