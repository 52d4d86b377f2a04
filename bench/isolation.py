#!/usr/bin/python3
"""Process isolation overhead (docs/availability.md): the tiny model
(y = 2x + 1, float32 [1, 4]) one request at a time over the native unix
socket (`sip bench --concurrency 1`), on a pool with `isolation: thread`
(the baseline) and the same pool with `isolation: process` (sessions run in
a worker process; tensors pass through shared memory), both with the idle
policy as shipped: after work a thread pool's session polls its queue for
idle_spin_us (50 us) and then sleeps; a process pool's executor polls as
long for the worker's answer and the worker as long for the next
execution, each giving its core to a thread queued behind it between
polls. A third
configuration, the process pool with idle_spin_us: 0 (every end sleeps at
once), shows what the polling saves or costs.

Each is measured with the other core idle and with it busy (a bounded
busy-loop process this bench starts and stops), the configurations taking
turns over ROUNDS rounds (common.interleave: A B C, B C A, ...). Reported
(common.report): process p50 - thread p50 of each round, target <= +15 us,
for the idle and the busy neighbour; the same without polling (no target:
the comparison); and the CPU the worker and sipd take while idle, the spin
window long past, in ms of CPU per second (from /proc/PID/task/*/schedstat:
the time every thread of the process ran, in ns).
"""
import glob
import multiprocessing
import time

from common import ROUNDS, Sipd, ensure_tiny, interleave, report, sip_bench

TARGET_US = 15
IDLE_S = 2.0  # the idle window the CPU is measured over
BUSY_MAX_S = 1800  # the busy neighbour ends by itself at the latest after this
tiny = ensure_tiny()
CONFIGS = {"thread": ("thread", None), "process": ("process", None),
           "process, no polling": ("process", 0)}
idle_cpu = {"worker": [], "sipd, process pool": [], "sipd, thread pool": []}


def busy(stop):
    deadline = time.monotonic() + BUSY_MAX_S
    while not stop.is_set() and time.monotonic() < deadline:
        pass


def cpu_ms(pid):
    """CPU time every thread of `pid` has run, in ms."""
    ns = 0
    for f in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            with open(f) as fh:
                ns += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return ns / 1e6


def idle_cost(pids):
    """ms of CPU per s each of `pids` took over IDLE_S with no request."""
    before = [cpu_ms(p) for p in pids]
    time.sleep(IDLE_S)  # the measurement window itself: no request in it
    return [(cpu_ms(p) - b) / IDLE_S for p, b in zip(pids, before)]


def run(isolation, spin, measure_idle):
    """p50 in us; with measure_idle, the idle CPU of sipd (and its worker)."""
    pool = {"name": "tiny", "model_path": tiny, "pool_size": 1, "isolation": isolation}
    if spin is not None:
        pool["idle_spin_us"] = spin
    with Sipd([pool]) as s:
        r = sip_bench(s.endpoint, "tiny", ["x:float32:1,4=ones"], "--concurrency", "1")
        if measure_idle and spin is None:
            if isolation == "process":
                w, d = idle_cost([s.status("tiny")["worker"]["pid"], s.proc.pid])
                idle_cpu["worker"].append(w)
                idle_cpu["sipd, process pool"].append(d)
            else:
                idle_cpu["sipd, thread pool"].extend(idle_cost([s.proc.pid]))
    return r["latency_ms"]["p50"] * 1000


def measure(neighbour):
    stop = multiprocessing.Event()
    hog = multiprocessing.Process(target=busy, args=(stop,)) if neighbour == "busy" else None
    if hog:
        hog.start()
    try:
        res = interleave(ROUNDS, {n: (lambda iso=iso, spin=spin: run(iso, spin, hog is None))
                                  for n, (iso, spin) in CONFIGS.items()})
    finally:
        if hog:
            stop.set()
            hog.join(timeout=10)
            if hog.is_alive():
                hog.kill()
                hog.join()
    for name in ("process", "process, no polling"):
        diffs = [p - t for p, t in zip(res[name], res["thread"])]
        report("%s - thread p50, neighbour core %s" % (name, neighbour), diffs,
               target="<= %d" % TARGET_US if name == "process" else None, fmt="%+.1f",
               unit=" us", spread_limit=None)
    report("thread p50, neighbour core %s" % neighbour, res["thread"], fmt="%.1f", unit=" us")


measure("idle")
measure("busy")
for who, v in idle_cpu.items():
    report("idle CPU, %s (%.0f s after the last request)" % (who, IDLE_S), v, fmt="%.2f",
           unit=" ms/s", spread_limit=None)
