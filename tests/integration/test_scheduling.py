"""Scheduling behaviour, driven by the builtin test backend (identity with
options: delay_ms, fail_every, dtype, shape; input `input`, output `output`):
deadlines, priorities, backend failures, typed identity."""

import threading
import time

import numpy as np
import pytest

from cann_sip import (DeadlineExceededError, InferenceRequest, InternalError,
                      InvalidArgumentError, SessionClient)
from harness import serve, wait_until

DELAY_MS = 200
PRIO_DELAY_MS = 400  # the blocker of the priority tests: long enough to queue behind it
F = np.float32


def builtin(name, pool_size=1, **opts):
    p = {"name": name, "backend": "builtin", "pool_size": pool_size}
    if opts:
        p["backend_options"] = opts
    return p


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    pools = [
        builtin("deadline", delay_ms=DELAY_MS, shape="-1"),
        builtin("prio", delay_ms=PRIO_DELAY_MS, shape="-1"),
        builtin("flaky", fail_every=3, shape="-1"),
        builtin("typed", dtype="int32", shape="2,3"),
        builtin("batched", shape="-1,4"),
        builtin("plain"),
        builtin("wide", pool_size=4, delay_ms=DELAY_MS, shape="-1"),
        builtin("strings", dtype="string", shape="-1"),
    ]
    # Enough execution slots that the 4 sleeping sessions of "wide" overlap.
    with serve(tmp_path_factory.mktemp("sched"), pools, server={"execution_slots": 16}) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client(timeout_s=30)


def vec(v, n=2):
    return np.full(n, v, dtype=F)


def req(pool, v, **kw):
    return InferenceRequest(pool, {"input": vec(v)}, **kw)


def session_inferences(srv, client, pool):
    return [s["inferences"] for s in srv.pool_status(pool, client)["sessions"]]


def wait_running(srv, client, pool):
    """Waits until the pool's (one) session executes a request."""
    wait_until(lambda: srv.pool_status(pool, client)["sessions"][0]["state"] == "RUNNING",
               what="pool %s to run a request" % pool)


def wait_queued(srv, client, pool, n):
    wait_until(lambda: srv.pool_status(pool, client)["queued_requests"] == n,
               what=lambda: "%d requests queued in pool %s (status: %r)"
               % (n, pool, srv.pool_status(pool, client)["queued_by_priority"]))


# ---------------------------------------------------------------------------
# builtin backend basics

def test_builtin_identity(client):
    r = client.infer(InferenceRequest("batched", {"input": np.arange(12, dtype=F).reshape(3, 4)}))
    np.testing.assert_array_equal(r.outputs["output"], np.arange(12, dtype=F).reshape(3, 4))
    assert list(r.outputs) == ["output"]


def test_builtin_plain_defaults(client):
    """No options: float32 identity."""
    x = np.arange(5, dtype=F)
    r = client.infer(InferenceRequest("plain", {"input": x}))
    np.testing.assert_array_equal(r.outputs["output"], x)


def test_builtin_typed(client):
    x = np.arange(6, dtype=np.int32).reshape(2, 3) - 3
    r = client.infer(InferenceRequest("typed", {"input": x}))
    assert r.outputs["output"].dtype == np.int32
    np.testing.assert_array_equal(r.outputs["output"], x)
    with pytest.raises(InvalidArgumentError) as ei:
        client.infer(InferenceRequest("typed", {"input": x.astype(F)}))
    assert "int32" in ei.value.message and "float32" in ei.value.message
    with pytest.raises(InvalidArgumentError) as ei:
        client.infer(InferenceRequest("typed", {"input": np.zeros((3, 2), np.int32)}))
    assert "input" in ei.value.message


def test_builtin_strings(client):
    x = np.array(["a", "", "ü"], dtype=object)
    r = client.infer(InferenceRequest("strings", {"input": x}))
    assert r.outputs["output"].tolist() == [b"a", b"", "ü".encode()]


def test_builtin_described(client):
    pools = {p["name"]: p for p in client.pools()}
    assert pools["typed"]["backend"] == "builtin"
    assert pools["typed"]["inputs"] == [{"name": "input", "dtype": "int32", "shape": [2, 3]}]
    assert pools["typed"]["outputs"] == [{"name": "output", "dtype": "int32", "shape": [2, 3]}]
    assert pools["batched"]["inputs"][0]["shape"] == [-1, 4]
    assert pools["plain"]["inputs"][0]["dtype"] == "float32"


def test_delay_is_applied(client):
    r = client.infer(req("deadline", 1))
    assert r.timings["compute_us"] >= DELAY_MS * 1000 * 0.9
    assert r.latency_ms >= DELAY_MS * 0.9


# ---------------------------------------------------------------------------
# deadlines

def test_deadline_exceeded_in_queue(srv, client):
    before = sum(session_inferences(srv, client, "deadline"))
    first = client.infer_async(req("deadline", 1))
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        client.infer(req("deadline", 2, timeout_ms=50))
    waited = time.monotonic() - t0
    r = first.result(timeout=10)
    np.testing.assert_array_equal(r.outputs["output"], vec(1))
    # answered when the deadline passed (a timer), not only when the request
    # reached the front of the queue after the 200 ms one ended
    assert waited < DELAY_MS / 1000.0, waited
    # the expired request was never executed: one more (one session, first
    # come first served) runs after it would have
    client.infer(req("deadline", 3))
    after = sum(session_inferences(srv, client, "deadline"))
    assert after - before == 2
    st = srv.pool_status("deadline", client)
    assert st["requests"].get("DEADLINE_EXCEEDED", 0) >= 1


def test_generous_deadline_is_met(client):
    first = client.infer_async(req("deadline", 1))
    r = client.infer(req("deadline", 2, timeout_ms=5000))
    np.testing.assert_array_equal(r.outputs["output"], vec(2))
    assert r.timings["queue_us"] >= DELAY_MS * 1000 * 0.5
    first.result(timeout=10)


def test_many_expire_together(srv, client):
    before = sum(session_inferences(srv, client, "deadline"))
    first = client.infer_async(req("deadline", 0))
    futs = [client.infer_async(req("deadline", i, timeout_ms=30)) for i in range(10)]
    for f in futs:
        with pytest.raises(DeadlineExceededError):
            f.result(timeout=10)
    first.result(timeout=10)
    client.infer(req("deadline", 11))  # runs after any wrongly kept one would have
    assert sum(session_inferences(srv, client, "deadline")) - before == 2


# ---------------------------------------------------------------------------
# priorities

def test_priority_order(srv, client):
    order = []
    lock = threading.Lock()

    def track(name):
        def cb(_f):
            with lock:
                order.append(name)
        return cb

    blocker = client.infer_async(req("prio", 0, priority="high"))
    wait_running(srv, client, "prio")  # the blocker is running; the next three queue behind it
    futs = {}
    for name in ("low", "medium", "high"):
        futs[name] = client.infer_async(req("prio", {"low": 3, "medium": 2, "high": 1}[name],
                                            priority=name))
        futs[name].add_done_callback(track(name))
    wait_queued(srv, client, "prio", 3)
    blocker.result(timeout=10)
    for name, f in futs.items():
        r = f.result(timeout=10)
        np.testing.assert_array_equal(r.outputs["output"],
                                      vec({"low": 3, "medium": 2, "high": 1}[name]))
    assert order == ["high", "medium", "low"]


def test_priority_numeric_and_default(srv, client):
    """1/2/3 on the wire mean high/medium/low; 0 (the pool default, medium)
    ranks with medium, FIFO among equals."""
    order = []
    lock = threading.Lock()
    blocker = client.infer_async(req("prio", 0, priority=1))
    wait_running(srv, client, "prio")
    plan = [("low", 3), ("default", 0), ("medium", 2), ("high", 1)]
    futs = []
    for name, p in plan:
        f = client.infer_async(req("prio", 1, priority=p))
        f.add_done_callback(lambda _f, name=name: (lock.acquire(), order.append(name),
                                                   lock.release()))
        futs.append(f)
    wait_queued(srv, client, "prio", 4)
    blocker.result(timeout=10)
    for f in futs:
        f.result(timeout=10)
    assert order == ["high", "default", "medium", "low"]


def test_queue_visible_in_status(srv, client):
    blocker = client.infer_async(req("prio", 0, priority="high"))
    wait_running(srv, client, "prio")
    futs = [client.infer_async(req("prio", 1, priority=p)) for p in ("low", "low", "high")]
    wait_queued(srv, client, "prio", 3)
    st = srv.pool_status("prio", client)
    assert st["queued_by_priority"] == {"high": 1, "medium": 0, "low": 2, "delayed": 0}
    blocker.result(timeout=10)
    for f in futs:
        f.result(timeout=10)
    assert srv.pool_status("prio", client)["queued_requests"] == 0


def test_sessions_run_in_parallel(srv, client):
    """pool_size 4 with a 200 ms backend: 8 requests take ~2 rounds, not 8."""
    t0 = time.monotonic()
    futs = [client.infer_async(req("wide", i)) for i in range(8)]
    for i, f in enumerate(futs):
        np.testing.assert_array_equal(f.result(timeout=10).outputs["output"], vec(i))
    elapsed = time.monotonic() - t0
    assert elapsed < 8 * DELAY_MS / 1000.0 * 0.75, elapsed
    per_session = session_inferences(srv, client, "wide")
    assert len(per_session) == 4 and sum(per_session) >= 8
    assert sum(1 for n in per_session if n > 0) >= 2


# ---------------------------------------------------------------------------
# backend failures

def test_fail_every(srv, client):
    before = srv.pool_status("flaky", client)
    results = []
    for i in range(9):
        try:
            r = client.infer(req("flaky", i))
            np.testing.assert_array_equal(r.outputs["output"], vec(i))
            results.append("ok")
        except InternalError as e:
            assert e.message
            results.append("fail")
    assert results == ["ok", "ok", "fail"] * 3
    after = srv.pool_status("flaky", client)
    assert after["requests"].get("INTERNAL", 0) - before["requests"].get("INTERNAL", 0) == 3
    assert after["requests"].get("OK", 0) - before["requests"].get("OK", 0) == 6
    assert sum(s["errors"] for s in after["sessions"]) - \
        sum(s["errors"] for s in before["sessions"]) == 3
    # a failing execute does not take the pool down
    assert after["state"] == "READY"


def test_fail_every_concurrent(client):
    """Failures are answered to the right request among pipelined ones."""
    futs = [client.infer_async(req("flaky", i)) for i in range(30)]
    ok = fail = 0
    for i, f in enumerate(futs):
        try:
            np.testing.assert_array_equal(f.result(timeout=10).outputs["output"], vec(i))
            ok += 1
        except InternalError:
            fail += 1
    assert fail == 10 and ok == 20


def test_separate_clients_share_queue(srv):
    """Priorities apply across connections too."""
    order = []
    lock = threading.Lock()
    with SessionClient(srv.endpoint, timeout_s=30) as c1, \
            SessionClient(srv.tcp_endpoint, timeout_s=30) as c2:
        blocker = c1.infer_async(req("prio", 0, priority="high"))
        wait_running(srv, c1, "prio")
        lo = c1.infer_async(req("prio", 3, priority="low"))
        lo.add_done_callback(lambda _f: (lock.acquire(), order.append("low"), lock.release()))
        wait_queued(srv, c1, "prio", 1)  # the low one first: the high one overtakes it
        hi = c2.infer_async(req("prio", 1, priority="high"))
        hi.add_done_callback(lambda _f: (lock.acquire(), order.append("high"), lock.release()))
        for f in (blocker, lo, hi):
            f.result(timeout=10)
    assert order == ["high", "low"]
