#!/usr/bin/python3
"""Chaos (docs/availability.md, issue 11): a constant-rate load at half of
the pool's capacity on a process-isolated pool with a standby worker and
`failover: immediate_retry`, while the serving worker is killed (SIGKILL)
every second. Baseline, in this run: the same load without kills (steady).
Every round runs a steady phase and a chaos phase (the order turning each
round). Prints the failed requests and p99 during chaos against steady p99.
Targets: 0 failed in every round; chaos p99 <= 3 x steady p99 (median of
each round's ratio).

usage: chaos.py [BUILD_DIR] [SECONDS]   (default 5 s each phase; 60 for the
issue's figure; or SIP_CHAOS_SECONDS)
"""
import os
import signal
import sys
import threading
import time

from common import ROUNDS, Sipd, interleave, report, sip_bench

SECONDS = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ.get("SIP_CHAOS_SECONDS", 5))
POOL = {"name": "p", "backend": "builtin", "pool_size": 2, "isolation": "process",
        "backend_options": {"shape": "-1", "delay_ms": 1},
        "hot_standby": {"enabled": True, "standby_count": 1},
        "failover": {"strategy": "immediate_retry", "max_retries": 3}}
INPUT = ["input:float32:16=ones"]


def phase(s, rate, seconds):
    """`seconds` of constant-rate load, as 3 windows."""
    return sip_bench(s.endpoint, "p", INPUT, "--rate", str(rate), "--distribution", "constant",
                     "--timeout-ms", "10000", window_ms=seconds * 1000 // 3, max_windows=3)


def wait_standby(s, timeout=30):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if s.status("p")["worker"]["standby_pid"]:
            return
        time.sleep(0.05)
    raise RuntimeError("no standby worker within %d s" % timeout)


kills = []
with Sipd([POOL]) as s:
    wait_standby(s)
    cap = sip_bench(s.endpoint, "p", INPUT, "--concurrency", "8", window_ms=1000, max_windows=4)
    rate = max(1, int(cap["throughput_rps"] / 2))

    def steady():
        wait_standby(s)
        return phase(s, rate, SECONDS)

    def chaos():
        wait_standby(s)
        stop = threading.Event()

        def killer():
            while not stop.wait(1.0):
                pid = s.status("p")["worker"]["pid"]
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    kills.append(pid)
        t = threading.Thread(target=killer)
        t.start()
        try:
            return phase(s, rate, SECONDS)
        finally:
            stop.set()
            t.join()
    r = interleave(ROUNDS, {"steady": steady, "chaos": chaos})
    st = s.status("p")
print("capacity (closed loop, 8 outstanding): %.0f req/s; load at %d req/s for %d s per phase"
      % (cap["throughput_rps"], rate, SECONDS))
for k in ("steady", "chaos"):
    print("%-6s: requests %s  failed %s  p50 %s ms  p99 %s ms"
          % (k, " ".join("%d" % x["requests"] for x in r[k]),
             " ".join("%d" % x["errors"] for x in r[k]),
             " ".join("%.3f" % x["latency_ms"]["p50"] for x in r[k]),
             " ".join("%.3f" % x["latency_ms"]["p99"] for x in r[k])))
print("%d workers killed, %d restarts, %d retries" % (len(kills), st["worker"]["restarts"],
                                                      st["failover"]["retries"]))
report("requests failed during chaos", [x["errors"] for x in r["chaos"]], "<= 0", "%d",
       spread_limit=None)
report("chaos p99 / steady p99", [a["latency_ms"]["p99"] / b["latency_ms"]["p99"]
                                  for a, b in zip(r["chaos"], r["steady"])], "<= 3", "%.2f")
