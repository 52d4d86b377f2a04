"""Process isolation's idle policy (docs/availability.md): after work, the
executor waiting for the worker's answer and the worker waiting for the next
execution poll for at most the pool's idle_spin_us, then sleep. An idle
process pool, however long its window, takes next to no CPU in the worker or
in sipd once the window has passed; idle_spin_us: 0 (never poll) serves the
same answers; a window out of range is refused with what was expected."""

import glob
import subprocess
import threading
import time

import numpy as np

import harness
from cann_sip import InferenceRequest

F = np.float32
IDLE_S = 1.0             # the idle interval the CPU is counted over
IDLE_CPU_MAX_MS = 20.0   # 2% of it: a thread polling through it would take ~1000 ms
REQUESTS = 300


def pool(name, spin=None, size=2):
    p = {"name": name, "backend": "builtin", "pool_size": size, "isolation": "process",
         "backend_options": {"shape": "-1"}}
    if spin is not None:
        p["idle_spin_us"] = spin
    return p


def cpu_ms(pid):
    """CPU time every thread of `pid` has run so far, in ms (schedstat: ns)."""
    ns = 0
    for f in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            with open(f) as fh:
                ns += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return ns / 1e6


def serve_requests(c, name, n):
    for k in range(n):
        x = np.arange(4, dtype=F) + F(k)
        assert c.infer(InferenceRequest(name, {"input": x}))["output"].tolist() == x.tolist()


def test_idle_process_pool_takes_no_cpu_after_its_window(start_sipd):
    # The longest window there is (1 ms) on both sessions.
    srv = start_sipd([pool("p", spin=1000)])
    c = srv.client()
    st = next(p for p in c.status()["pools"] if p["name"] == "p")
    worker = st["worker"]["pid"]
    assert worker > 0

    # The count works: under a steady load the worker does run.
    stop = threading.Event()
    errors = []

    def load():
        try:
            while not stop.is_set():
                serve_requests(c, "p", 10)
        except Exception as e:  # noqa: BLE001 - asserted below
            errors.append(repr(e))

    t = threading.Thread(target=load)
    before = cpu_ms(worker)
    t.start()
    try:
        time.sleep(IDLE_S)  # the interval counted: requests run through all of it
    finally:
        stop.set()
        t.join(timeout=60)
    busy = cpu_ms(worker) - before
    assert not errors, errors[:3]
    assert busy > IDLE_CPU_MAX_MS, "the worker ran only %.1f ms under load" % busy

    # Idle: the last answer is in, so every window has begun; the status
    # round trip below takes longer than one (1 ms).
    serve_requests(c, "p", REQUESTS)
    c.status()
    w0, s0 = cpu_ms(worker), cpu_ms(srv.proc.pid)
    time.sleep(IDLE_S)  # the interval counted: no request in it
    w1, s1 = cpu_ms(worker), cpu_ms(srv.proc.pid)
    assert w1 - w0 < IDLE_CPU_MAX_MS, "idle worker took %.1f ms of CPU in %.0f s" % (
        w1 - w0, IDLE_S)
    assert s1 - s0 < IDLE_CPU_MAX_MS, "idle sipd took %.1f ms of CPU in %.0f s" % (s1 - s0, IDLE_S)
    # Still serving after the sleep.
    serve_requests(c, "p", 3)


def test_no_polling_serves_the_same_answers(start_sipd):
    srv = start_sipd([pool("still", spin=0), pool("default")])
    c = srv.client()
    for name in ("still", "default"):
        serve_requests(c, name, 50)


def test_window_out_of_range_is_refused(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("session_pools:\n  - {name: p, backend: builtin, isolation: process, "
                   "idle_spin_us: 1001}\n")
    r = subprocess.run([str(harness.require_sipd()), "--check-config", str(cfg)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert "idle_spin_us" in r.stderr and "0..1000" in r.stderr, r.stderr
