"""A live version switch of a repository model (server.model_repository)
under steady load: no request fails, every answer comes from version 1 or
2 (y = x + V) and, after the switch, from 2 only; the old version's memory is
released, and unloading frees the rest. test_repository.py has the other
repository tests and the helpers used here."""

import os
import threading
import time

import numpy as np
import pytest

import harness
from cann_sip import InferenceRequest
from test_repository import X, add_version, infer, served, start


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def settle_rss(pid, seconds=1.0):
    """RSS once it stopped moving (the smallest of a few samples)."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append(rss_kib(pid))
        time.sleep(0.1)  # not a wait: samples spread over the measuring window
    return min(samples)


@pytest.fixture
def no_asan_quarantine(monkeypatch):
    # Under AddressSanitizer freed memory waits in a quarantine before it goes
    # back to the system; this test measures what the server gives back.
    if "ASAN_OPTIONS" in os.environ:
        monkeypatch.setenv("ASAN_OPTIONS", os.environ["ASAN_OPTIONS"] + ":quarantine_size_mb=0")


def test_live_switch_under_load(start_sipd, tmp_path, no_asan_quarantine):
    repo = tmp_path / "repo"
    big = 64
    add_version(repo, "live", 1, weights_mib=big)
    (repo / "live" / "config.yaml").write_text(
        "pool_size: 2\nbackend_options: {graph_optimization_level: disable}\n")
    srv = start(start_sipd, repo)
    pid = srv.proc.pid
    c = srv.client()
    np.testing.assert_array_equal(infer(c, "live"), X + 1)
    before = settle_rss(pid)

    stop = threading.Event()
    switched_at = [None]
    errors, results = [], []  # results: (sent_at, k)
    lock = threading.Lock()

    def worker(i):
        cl = srv.client()
        n = 0
        while not stop.is_set():
            x = np.full((1, 4), i * 1000 + n, np.float32)
            sent = time.monotonic()
            try:
                y = cl.infer(InferenceRequest("live", {"x": x}, timeout_ms=10000)).outputs["y"]
            except Exception as e:  # noqa: BLE001 - every failure counts
                with lock:
                    errors.append(repr(e))
                continue
            k = float(y[0, 0] - x[0, 0])
            with lock:
                results.append((sent, k))
                if k not in (1.0, 2.0) or not np.array_equal(y, x + k):
                    errors.append("unexpected output %r for %r" % (y, x))
            n += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        harness.wait_until(lambda: len(results) >= 60 or errors, 30,
                           "60 answers from version 1 under load")
        add_version(repo, "live", 2, weights_mib=big)
        c.load_model("live")  # returns once 2 serves and 1 is freed
        switched_at[0] = time.monotonic()
        harness.wait_until(lambda: len([1 for sent, _ in list(results)
                                        if sent > switched_at[0]]) >= 60 or errors, 30,
                           "60 answers to requests sent after the switch")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:5]
    assert len(results) > 100, len(results)
    old = [k for sent, k in results if sent < switched_at[0]]
    new = [k for sent, k in results if sent > switched_at[0]]
    assert 1.0 in old and new and set(new) == {2.0}, (set(old), set(new))
    idx = served(c.repository_index(), "live")
    assert set(idx) == {"2"}
    assert not [p for p in c.status()["pools"] if p["name"] == "live" and p["version"] == "1"]

    # The old version's memory is released: RSS returns to within 10% of
    # its level before version 2 was loaded.
    harness.wait_until(lambda: rss_kib(pid) <= before * 1.10, 20,
                       lambda: "RSS back within 10%% of %d KiB after the switch (now %d KiB)"
                       % (before, rss_kib(pid)))
    # ... and it had really grown by the weights while both were loaded.
    st = [p for p in c.status()["pools"] if p["name"] == "live"][0]
    assert st["model_bytes"] > big << 20

    # Unload frees it too.
    c.unload_model("live")
    harness.wait_until(lambda: rss_kib(pid) < before - (big << 10) * 0.8, 20,
                       lambda: "RSS below %d KiB after the unload (now %d KiB)"
                       % (before - (big << 10) * 0.8, rss_kib(pid)))
    srv.assert_alive()
