#!/usr/bin/python3
"""Autoscaling under a traffic ramp (docs/elastic.md, "Autoscaling").

A builtin pool whose executions take DELAY_MS (a sleep, with an execution
slot per session: the machine's cores are not the limit, the sessions are),
autoscale 1..MAX_SESSIONS. Open-loop
arrivals at the scheduled rate, whatever the answers do: LOW req/s for
STEADY_S, a ramp up to HIGH req/s over RAMP_S, HIGH for HOLD_S, a ramp down
to LOW over RAMP_S, LOW for STEADY_S; then no traffic until the pool is back
at min_sessions. A request's latency runs from its scheduled time to its
answer (a late send counts against the server, not for it).

Each round runs a fresh sipd once reactive (utilisation only) and once
predictive (autoscale.predictive: Holt's forecast of the arrival rate), the
order turning each round. Figures: the p99 of the requests sent during the
ramp (up, hold, down) against the p99 of the first steady phase (target <=
3x), predictive and reactive side by side; the sessions the pool went
through; and, after the ramp, the sessions and the memory the pool holds
(measured) once idle sessions are released. Every sipd it starts is
stopped (common.Sipd). About 4 minutes with the defaults (3 rounds).

Environment: SIP_BENCH_ROUNDS (3), RAMP_LOW (10), RAMP_HIGH (200),
RAMP_S (12), RAMP_HOLD_S (6), RAMP_STEADY_S (5), RAMP_DELAY_MS (20)."""
import os
import threading
import time

import numpy as np

from common import ROUNDS, Sipd, interleave, load, median, ratios, report
from cann_sip import InferenceRequest, SessionClient

LOW = float(os.environ.get("RAMP_LOW", "10"))
HIGH = float(os.environ.get("RAMP_HIGH", "200"))
RAMP_S = float(os.environ.get("RAMP_S", "12"))
HOLD_S = float(os.environ.get("RAMP_HOLD_S", "6"))
STEADY_S = float(os.environ.get("RAMP_STEADY_S", "5"))
DELAY_MS = int(os.environ.get("RAMP_DELAY_MS", "20"))
MAX_SESSIONS = 12
SESSION_MB = 4
COOLDOWN_S = 5


def rate_at(t):
    """The scheduled arrival rate t seconds into the run."""
    edges = [STEADY_S, STEADY_S + RAMP_S, STEADY_S + RAMP_S + HOLD_S,
             STEADY_S + 2 * RAMP_S + HOLD_S]
    if t < edges[0]:
        return LOW
    if t < edges[1]:
        return LOW + (HIGH - LOW) * (t - edges[0]) / RAMP_S
    if t < edges[2]:
        return HIGH
    if t < edges[3]:
        return HIGH - (HIGH - LOW) * (t - edges[2]) / RAMP_S
    return LOW


TOTAL_S = 2 * STEADY_S + 2 * RAMP_S + HOLD_S
RAMP_FROM, RAMP_TO = STEADY_S, STEADY_S + 2 * RAMP_S + HOLD_S


def schedule():
    """Send times from 0 to TOTAL_S, at rate_at."""
    t, out = 0.0, []
    while t < TOTAL_S:
        out.append(t)
        t += 1.0 / rate_at(t)
    return out


def server(predictive):
    # A horizon of 3 s over 20 s of history: seed 001's 10 s ahead over
    # 60 s would forecast past the end of a 12 s ramp.
    autoscale = {"min_sessions": 1, "max_sessions": MAX_SESSIONS, "window_s": 2,
                 "cooldown_s": COOLDOWN_S, "predictive": predictive,
                 "history_window_s": 20, "prediction_horizon_s": 3}
    pool = {"name": "p", "backend": "builtin", "pool_size": 1, "autoscale": autoscale,
            "backend_options": {"shape": "-1", "delay_ms": DELAY_MS,
                                "session_memory_mb": SESSION_MB}}
    # Executions sleep: a slot per session, so the sessions are the limit
    # (server.execution_slots defaults to the cores).
    return Sipd([pool], server_extra="  execution_slots: %d\n" % (MAX_SESSIONS + 4))


def p99(v):
    return float(np.percentile(np.array(v), 99)) if v else float("nan")


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class Run:
    """One ramp against a fresh sipd: latencies by phase, the sessions seen,
    then the release once idle."""

    def __init__(self, predictive):
        self.predictive = predictive
        self.steady, self.ramp, self.failed, self.sessions = [], [], 0, []
        self.peak_mem = self.idle_mem = self.peak_rss = self.idle_rss = 0.0
        self.release_s = float("nan")
        self.lock = threading.Lock()

    def __call__(self):
        with server(self.predictive) as s, SessionClient(s.endpoint, timeout_s=60) as c:
            x = {"input": np.ones(4, np.float32)}
            c.infer(InferenceRequest("p", x))  # connected
            stop = threading.Event()
            watcher = threading.Thread(target=self.watch, args=(s, stop), daemon=True)
            futs, t0 = [], time.monotonic()
            watcher.start()
            for at in schedule():
                now = time.monotonic() - t0
                if at > now:
                    time.sleep(at - now)
                f = c.infer_async(InferenceRequest("p", x))
                f.add_done_callback(lambda fut, at=at: self.done(fut, at, t0))
                futs.append(f)
            for f in futs:
                try:
                    f.result(timeout=60)
                except Exception:
                    pass
            stop.set()
            watcher.join()
            # After the ramp: no traffic until the pool is back at min_sessions.
            t_idle = time.monotonic()
            while len(s.status("p")["sessions"]) > 1 and time.monotonic() - t_idle < 60:
                time.sleep(0.2)
            back = [t for t, n in self.sessions if t >= RAMP_TO and n == 1]
            self.release_s = (back[0] if back else time.monotonic() - t0) - RAMP_TO
            st = s.status("p")
            self.idle_sessions = len(st["sessions"])
            self.idle_mem = st["memory_bytes"] / 1048576.0
            self.idle_rss = rss_mib(s.proc.pid)
            self.scaled = (st["autoscale"]["scaled_up"], st["autoscale"]["scaled_down"])
            self.forecast_error = st["autoscale"]["forecast_error"]
        return self

    def done(self, fut, at, t0):
        lat = (time.monotonic() - t0 - at) * 1000.0
        with self.lock:
            if fut.exception() is not None:
                self.failed += 1
            elif at < RAMP_FROM:
                if at >= 1.0:  # the first second warms up
                    self.steady.append(lat)
            elif at < RAMP_TO:
                self.ramp.append(lat)

    def watch(self, s, stop):
        t0 = time.monotonic()
        while not stop.wait(0.5):
            st = s.status("p")
            n = len(st["sessions"])
            self.sessions.append((time.monotonic() - t0, n))
            mem = st["memory_bytes"] / 1048576.0
            if mem > self.peak_mem:
                self.peak_mem, self.peak_rss = mem, rss_mib(s.proc.pid)


print("ramp: %g -> %g -> %g req/s (steady %gs, ramp %gs, hold %gs), builtin delay %d ms, "
      "sessions 1..%d, %d MiB each; %s" % (LOW, HIGH, LOW, STEADY_S, RAMP_S, HOLD_S, DELAY_MS,
                                           MAX_SESSIONS, SESSION_MB, load()))
runs = interleave(ROUNDS, {"reactive": lambda: Run(False)(), "predictive": lambda: Run(True)()})
print("%-10s %5s %12s %10s %8s %9s %10s %12s %14s" % (
    "round", "mode", "steady p99", "ramp p99", "failed", "sessions", "up/down",
    "fc error", "after ramp"))
for i in range(len(runs["reactive"])):
    for mode in ("reactive", "predictive"):
        r = runs[mode][i]
        print("%-10d %5s %10.1fms %8.1fms %8d %6d..%-2d %5d/%-4d %10.2f/s  %d sess %.0f MiB" % (
            i + 1, mode[:5], p99(r.steady), p99(r.ramp), r.failed, min(n for _, n in r.sessions),
            max(n for _, n in r.sessions), r.scaled[0], r.scaled[1], r.forecast_error, r.idle_sessions,
            r.idle_mem))
for mode in ("reactive", "predictive"):
    rs = runs[mode]
    assert all(r.failed == 0 for r in rs), "%s: requests failed" % mode
    report("%s: ramp p99 / steady p99" % mode, [p99(r.ramp) / p99(r.steady) for r in rs],
           target="<= 3", fmt="%.2f", unit="x")
    report("%s: ramp p99" % mode, [p99(r.ramp) for r in rs], fmt="%.1f", unit=" ms")
    report("%s: most sessions during the ramp" % mode, [max(n for _, n in r.sessions) for r in rs], fmt="%d")
    report("%s: pool memory at the peak (measured)" % mode, [r.peak_mem for r in rs],
           fmt="%.1f", unit=" MiB")
    report("%s: pool memory once idle sessions were released" % mode, [r.idle_mem for r in rs],
           fmt="%.1f", unit=" MiB")
    report("%s: sipd resident memory at the peak -> once released" % mode,
           [r.peak_rss - r.idle_rss for r in rs], fmt="%.1f", unit=" MiB less", spread_limit=None)
    report("%s: seconds from the end of the ramp down to min_sessions" % mode,
           [r.release_s for r in rs], fmt="%.1f", unit=" s", spread_limit=None)
report("predictive / reactive ramp p99",
       ratios([p99(r.ramp) for r in runs["predictive"]], [p99(r.ramp) for r in runs["reactive"]]),
       fmt="%.2f", unit="x")
report("predictive: forecast error (mean absolute)",
       [r.forecast_error for r in runs["predictive"]], fmt="%.1f", unit=" req/s",
       spread_limit=None)
