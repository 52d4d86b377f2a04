#!/usr/bin/python3
"""Process isolation overhead (docs/availability.md): the tiny model
(y = 2x + 1, float32 [1, 4]) one request at a time over the native unix
socket (`sip bench --concurrency 1`), on a pool with `isolation: thread`
(the baseline) and the same pool with `isolation: process` (sessions run in
a worker process; tensors pass through shared memory): as shipped, where
the worker's channel sleeps at once, and with the executors' idle policy
(SIP_WORKER_SPIN_US=50: poll 50 us, then sleep), which measured far slower
on 2 cores (both ends poll while the model runs) and so is not the default.

Each is measured with the other core idle and with it busy (a spinning
process), the three configurations interleaved over ROUNDS rounds
(common.interleave). Reported (common.report): process p50 - thread p50 of
each round, target <= +15 us, idle neighbour and busy; the same with
polling (no target: the comparison); and the worker's CPU time while sipd
is idle.
"""
import multiprocessing
import os
import time

from common import Sipd, ensure_tiny, interleave, report, sip_bench

ROUNDS = 3
tiny = ensure_tiny()
CONFIGS = {"thread": ("thread", {}), "process": ("process", {}),
           "process, polling": ("process", {"SIP_WORKER_SPIN_US": "50"})}
idle_cpu = []


def spin(stop):
    while not stop.is_set():
        pass


def cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def run(isolation, env):
    """p50 in us; for the default process pool, the idle worker's CPU too."""
    pool = {"name": "tiny", "model_path": tiny, "pool_size": 1, "isolation": isolation}
    with Sipd([pool], env=env) as s:
        r = sip_bench(s.endpoint, "tiny", ["x:float32:1,4=ones"], "--concurrency", "1")
        if isolation == "process" and not env:
            pid = s.status("tiny")["worker"]["pid"]
            a = cpu_ms(pid)
            time.sleep(2.0)  # the measurement window itself: no request in it
            idle_cpu.append((cpu_ms(pid) - a) / 2.0)
    return r["latency_ms"]["p50"] * 1000


def measure(neighbour):
    stop = multiprocessing.Event()
    hog = multiprocessing.Process(target=spin, args=(stop,)) if neighbour == "busy" else None
    if hog:
        hog.start()
    try:
        res = interleave(ROUNDS, {n: (lambda iso=iso, env=env: run(iso, env))
                                  for n, (iso, env) in CONFIGS.items()})
    finally:
        if hog:
            stop.set()
            hog.join()
    for name in ("process", "process, polling"):
        diffs = [p - t for p, t in zip(res[name], res["thread"])]
        report("%s - thread p50, neighbour core %s" % (name, neighbour), diffs,
               target="<= 15" if name == "process" else None, fmt="%+.1f", unit=" us",
               spread_limit=None)
    report("thread p50, neighbour core %s" % neighbour, res["thread"], fmt="%.1f", unit=" us")


measure("idle")
measure("busy")
report("idle worker CPU", idle_cpu, fmt="%.2f", unit=" ms/s", spread_limit=None)
