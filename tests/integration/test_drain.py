"""Graceful drain of a real sipd: SIGTERM turns readiness false at once on
every front-end, refuses new requests with UNAVAILABLE (503 over HTTP), lets
the requests already admitted finish within server.drain_timeout_ms, answers
what is still queued after it UNAVAILABLE, and exits 0, within
drain_timeout_ms and a second or two whatever its clients do."""

import re
import shutil
import signal
import threading
import time

import numpy as np

import harness
import kserve as K
from cann_sip import InferenceRequest, SipError, UnavailableError
from cann_sip import protocol as P
from harness import wait_until

F = np.float32


def slow_pool(delay_ms, pool_size):
    return {"name": "slow", "backend": "builtin", "pool_size": pool_size,
            "backend_options": {"delay_ms": delay_ms, "shape": "-1"}}


def http_ready_status(base):
    return K.get(base + "/v2/health/ready", timeout=5).status


def wait_admitted(srv, client, n, running=1, pool="slow"):
    """Waits until n requests sent to the pool are admitted: queued,
    answered, or running (at most `running` at once)."""
    def admitted():
        p = srv.pool_status(pool, client)
        busy = sum(1 for x in p["sessions"] if x["state"] == "RUNNING")
        return p["queued_requests"] + sum(p["requests"].values()) + min(busy, running) >= n
    wait_until(admitted, what="%d requests admitted to pool %s" % (n, pool))


def test_sigterm_under_load(start_sipd):
    srv = start_sipd([slow_pool(100, 2)],
                     server={"http": "127.0.0.1:0", "drain_timeout_ms": 20000})
    base = K.http_base(srv)
    assert http_ready_status(base) == 200
    clients = [srv.client(timeout_s=30) for _ in range(3)]
    # Native: every client has requests queued when the signal comes.
    futs = []
    for ci, c in enumerate(clients):
        for k in range(5):
            v = ci * 100 + k
            futs.append((v, c.infer_async(InferenceRequest("slow", {"input": np.full(3, v, F)}))))
    # HTTP: two threads each with one request in flight at the signal.
    http_results = []
    started = threading.Barrier(3)

    def http_one(v):
        started.wait()
        r = K.infer(base, "slow", {"input": np.full(3, v, F)})
        http_results.append((v, r))

    threads = [threading.Thread(target=http_one, args=(1000 + i,)) for i in range(2)]
    for t in threads:
        t.start()
    started.wait()
    # Wait until all 17 are admitted: queued, answered, or running (<= 2).
    deadline = time.monotonic() + 10
    while True:
        p = clients[2].status()["pools"][0]
        if p["queued_requests"] + p["requests"].get("OK", 0) + 2 >= 17:
            break
        assert time.monotonic() < deadline, p
        time.sleep(0.005)
    t0 = time.monotonic()
    srv.send_signal(signal.SIGTERM)
    # Readiness false at once on HTTP and on the native protocol.
    deadline = t0 + 1.0
    while http_ready_status(base) != 503:
        assert time.monotonic() < deadline, "ready still 200 1 s after SIGTERM"
        time.sleep(0.01)
    assert not clients[0].ready()
    # New requests are refused with UNAVAILABLE / 503 while the drain lasts.
    try:
        clients[1].infer(InferenceRequest("slow", {"input": np.ones(3, F)}))
        raise AssertionError("a request after SIGTERM was accepted")
    except UnavailableError:
        pass
    r = K.infer(base, "slow", {"input": np.ones(3, F)})
    assert r.status == 503, r
    # Every request admitted before the signal is served.
    for v, f in futs:
        np.testing.assert_array_equal(f.result(timeout=30).outputs["output"], np.full(3, v, F))
    for t in threads:
        t.join(30)
    assert len(http_results) == 2
    for v, r in http_results:
        assert r.status == 200, r
        _, outs = K.decode_outputs(r)
        np.testing.assert_array_equal(outs["output"], np.full(3, v, F))
    assert srv.wait(20) == 0, srv.log_tail()
    assert time.monotonic() - t0 < 20
    assert "answered_unavailable=0" in srv.log(), srv.log_tail()


def test_drain_timeout_answers_the_rest_unavailable(start_sipd):
    srv = start_sipd([slow_pool(200, 1)], server={"drain_timeout_ms": 300})
    c = srv.client(timeout_s=30)
    futs = [c.infer_async(InferenceRequest("slow", {"input": np.full(2, i, F)}))
            for i in range(20)]  # 4 s of work for one session
    wait_admitted(srv, srv.client(), 20)
    t0 = time.monotonic()
    srv.send_signal(signal.SIGTERM)
    served = refused = 0
    for i, f in enumerate(futs):
        try:
            np.testing.assert_array_equal(f.result(timeout=10).outputs["output"],
                                          np.full(2, i, F))
            served += 1
        except UnavailableError as e:
            assert "drain_timeout_ms" in str(e), e
            refused += 1
        except SipError as e:  # anything else is a lost request
            raise AssertionError("request %d: %r" % (i, e))
    assert srv.wait(10) == 0, srv.log_tail()
    elapsed = time.monotonic() - t0
    # 300 ms of drain plus the one execution running at the deadline.
    assert elapsed < 2.0, elapsed
    assert 1 <= served <= 4, served
    assert served + refused == 20
    m = re.search(r"answered_unavailable=(\d+)", srv.log())
    assert m and int(m.group(1)) == refused, srv.log_tail()


def test_drain_timeout_zero_refuses_queued_at_once(start_sipd):
    srv = start_sipd([slow_pool(300, 1)], server={"drain_timeout_ms": 0})
    c = srv.client(timeout_s=30)
    futs = [c.infer_async(InferenceRequest("slow", {"input": np.full(2, i, F)}))
            for i in range(5)]
    # The first runs, four are queued.
    sc = srv.client()
    wait_until(lambda: srv.pool_status("slow", sc)["queued_requests"] == 4,
               what="four requests queued behind the first")
    srv.send_signal(signal.SIGTERM)
    np.testing.assert_array_equal(futs[0].result(timeout=10).outputs["output"], np.zeros(2, F))
    for f in futs[1:]:
        try:
            f.result(timeout=10)
            raise AssertionError("a queued request ran with drain_timeout_ms 0")
        except UnavailableError:
            pass
    assert srv.wait(10) == 0, srv.log_tail()


def test_sigterm_with_clients_that_stopped_reading(start_sipd):
    """20 clients each have 6 MB of answers they do not read queued in
    sipd, and another has 4 s of work queued: SIGTERM drains for
    drain_timeout_ms (1 s), gives every connection together a second to
    take its last answers, and exits (before: a second per connection that
    stopped reading, 21 s here, growing with their number)."""
    srv = start_sipd([slow_pool(200, 1), {"name": "echo", "backend": "builtin",
                                          "backend_options": {"shape": "-1"}}],
                     server={"drain_timeout_ms": 1000})
    sc = srv.client()
    frame = P.encode_frame(P.INFER_REQUEST, 1, P.encode_infer_request(
        "echo", {"input": np.ones(25600, F)}))  # a 100 KB answer each
    stalled = []
    try:
        for _ in range(20):
            s = harness.raw_connect(srv.unix_endpoint)
            s.sendall(frame * 60)
            stalled.append(s)
        wait_until(lambda: srv.pool_status("echo", sc)["requests"].get("OK", 0) == 1200,
                   what="the 1200 requests of the clients that do not read answered")
        futs = [srv.client(timeout_s=30).infer_async(
            InferenceRequest("slow", {"input": np.full(2, i, F)})) for i in range(20)]
        wait_admitted(srv, sc, 20)
        t0 = time.monotonic()
        srv.send_signal(signal.SIGTERM)
        assert srv.wait(30) == 0, srv.log_tail()
        elapsed = time.monotonic() - t0
        assert elapsed < 1.0 + 3.0, "SIGTERM to exit took %.1f s" % elapsed
        for f in futs:  # each answered: served, or UNAVAILABLE at the drain deadline
            try:
                f.result(timeout=10)
            except UnavailableError:
                pass
        for s in stalled:  # their connections closed: what they did take, then the end
            s.settimeout(10)
            try:
                while s.recv(1 << 20):
                    pass
            except ConnectionResetError:
                pass
    finally:
        for s in stalled:
            s.close()


def test_sigterm_lets_pipeline_requests_in_flight_finish(sipd_bin, tmp_path):
    """A pipeline request in flight at SIGTERM still reaches its later
    stages: the pools keep admitting its stages while the drain waits."""
    pools = [slow_pool(150, 1), dict(slow_pool(150, 1), name="slow2")]
    srv = harness.SipServer(tmp_path, pools, server={"drain_timeout_ms": 20000})
    cfg = srv.config()
    cfg["pipeline_sessions"] = [{"name": "two", "stages": [
        {"name": "a", "pool": "slow", "input_mapping": {"input": "pipeline.input"}},
        {"name": "b", "pool": "slow2", "input_mapping": {"input": "a.output"}}]}]
    srv.config = lambda: cfg
    srv.start()
    try:
        c = srv.client(timeout_s=30)
        futs = [c.infer_async(InferenceRequest("two", {"input": np.full(2, i, F)}))
                for i in range(4)]
        # The first is in stage a, the others queued for it.
        wait_admitted(srv, srv.client(), 4)
        srv.send_signal(signal.SIGTERM)
        for i, f in enumerate(futs):
            np.testing.assert_array_equal(f.result(timeout=30).outputs["output"],
                                          np.full(2, i, F))
        assert srv.wait(20) == 0, srv.log_tail()
    finally:
        srv.kill()


# ---------------------------------------------------------------------------
# SIGHUP: the config file's pools reloaded while serving

def builtin(name, pool_size=1, delay_ms=0):
    return {"name": name, "backend": "builtin", "pool_size": pool_size,
            "backend_options": {"delay_ms": delay_ms, "shape": "-1"}}


def sighup(srv, marker):
    """Sends SIGHUP and waits for the reload's outcome line ("config
    reloaded" or "config reload refused"); returns that line."""
    before = srv.log().count(marker)
    srv.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    while srv.log().count(marker) == before:
        assert time.monotonic() < deadline, srv.log_tail()
        srv.assert_alive()
        time.sleep(0.02)
    return [ln for ln in srv.log().splitlines() if marker in ln][-1]


def pool_status(srv, name):
    for p in srv.client().status()["pools"]:
        if p["name"] == name:
            return p
    return None


def pool_size(srv, name):
    return [p for p in srv.client().pools() if p["name"] == name][0]["pool_size"]


def ok_count(srv, name):
    return pool_status(srv, name)["requests"].get("OK", 0)


def infer(c, name, v):
    r = c.infer(InferenceRequest(name, {"input": np.full(2, v, F)}))
    np.testing.assert_array_equal(r.outputs["output"], np.full(2, v, F))


def test_sighup_applies_changed_pools_only(start_sipd):
    srv = start_sipd([builtin("a"), builtin("b"), builtin("gone")])
    c = srv.client()
    for v in range(3):
        infer(c, "a", v)
        infer(c, "b", v)
    srv.pools = [builtin("a", pool_size=3), builtin("b"), builtin("added")]
    srv.write_config()
    line = sighup(srv, "config reloaded")
    assert ("pools_added=1 pools_changed=1 pools_removed=1 pools_unchanged=1" in line), line
    # The changed pool is a new one with the new size; the unchanged one is
    # the same pool (its counters went on), the removed one is gone.
    assert pool_size(srv, "a") == 3
    assert len(pool_status(srv, "a")["sessions"]) == 3
    assert ok_count(srv, "a") == 0
    assert ok_count(srv, "b") == 3
    assert pool_status(srv, "gone") is None
    infer(c, "a", 7)
    infer(c, "b", 7)
    infer(c, "added", 7)
    assert ok_count(srv, "b") == 4
    try:
        infer(c, "gone", 1)
        raise AssertionError("a removed pool still answered")
    except SipError as e:
        assert "not found" in str(e), e


def test_sighup_broken_config_refused(start_sipd):
    srv = start_sipd([builtin("a"), builtin("b")])
    c = srv.client()
    infer(c, "a", 1)
    good = srv.config_path.read_text()
    for broken in ("session_pools: [ {name: a, backend: builtin\n",  # not YAML
                   good.replace("pool_size: 1", "pool_size: 0", 1),  # out of range
                   good.replace('"builtin"', '"nosuchbackend"', 1)):  # unknown backend
        srv.config_path.write_text(broken)
        line = sighup(srv, "config reload refused")
        assert "reason=" in line, line
        srv.assert_alive()
        infer(c, "a", 2)
        infer(c, "b", 2)
    assert ok_count(srv, "a") == 4  # the same pool all along
    assert c.ready()


def test_sighup_under_a_request_stream(start_sipd):
    srv = start_sipd([builtin("a", delay_ms=2), builtin("b", delay_ms=2)])
    stop = threading.Event()
    errors, done = [], [0]

    def stream(name, base):
        c = srv.client()
        v = base
        while not stop.is_set():
            try:
                infer(c, name, v)
                done[0] += 1
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                errors.append(repr(e))
            v += 1

    threads = [threading.Thread(target=stream, args=(n, 1000 * i))
               for i, n in enumerate(("a", "b", "a"))]
    for t in threads:
        t.start()

    def streaming(more):  # `more` requests answered since now, or a failure
        target = done[0] + more
        wait_until(lambda: done[0] >= target or errors,
                   what=lambda: "%d more requests answered (%d)" % (more, done[0]))

    try:
        streaming(30)
        for size in (2, 3, 1):
            srv.pools = [builtin("a", pool_size=size, delay_ms=2), builtin("b", delay_ms=2)]
            srv.write_config()
            sighup(srv, "config reloaded")
            streaming(15)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:5]
    assert done[0] > 50
    assert pool_size(srv, "a") == 1


def test_sighup_retries_a_failed_unchanged_pool(start_sipd, model_dir, tmp_path):
    late = tmp_path / "late.onnx"  # missing at start: the pool is FAILED
    srv = start_sipd([builtin("a"), {"name": "late", "model_path": str(late)}])
    assert [p for p in srv.client().pools() if p["name"] == "late"][0]["state"] == "FAILED"
    # Still missing: the retry fails, the pool stays FAILED, the reload goes on.
    line = sighup(srv, "config reloaded")
    assert "pools_unchanged=2" in line, line
    shutil.copy(model_dir["addmul"], late)
    line = sighup(srv, "config reloaded")
    assert "pools_changed=1" in line and "pools_unchanged=1" in line, line
    x = np.arange(8, dtype=F).reshape(2, 4)
    r = srv.client().infer(InferenceRequest("late", {"lhs": x, "rhs": x}))
    np.testing.assert_allclose(r.outputs["y"], x * x + x)
    infer(srv.client(), "a", 1)


def test_sighup_refuses_a_pool_named_like_a_loaded_repository_model(start_sipd, tmp_path):
    from test_repository import add_version
    repo = tmp_path / "repo"
    add_version(repo, "m", 1)
    srv = start_sipd([builtin("a")], server={"model_repository": str(repo)})
    srv.pools = [builtin("a"), builtin("m")]
    srv.write_config()
    line = sighup(srv, "config reload refused")
    assert "session_pools entry 'm' has the name of a repository model" in line, line
    # Nothing changed: the repository model serves (y = x + 1), pool a too.
    x = np.ones((1, 4), F)
    np.testing.assert_array_equal(
        srv.client().infer(InferenceRequest("m", {"x": x})).outputs["y"], x + 1)
    infer(srv.client(), "a", 3)
    # Once the model is unloaded the name is free for the config file.
    srv.client().unload_model("m")
    line = sighup(srv, "config reloaded")
    assert "pools_added=1" in line, line
    infer(srv.client(), "m", 4)


def test_sighup_refuses_a_fallback_of_another_signature(start_sipd):
    """A reload whose fallback pool would take other inputs than the pool
    failing over to it is refused with the reason; everything keeps
    serving as before. A compatible change goes through."""
    main = dict(builtin("main"), failover={"strategy": "fallback", "fallback_pool": "backup"})
    srv = start_sipd([main, builtin("backup")])
    c = srv.client()
    infer(c, "main", 1)
    int_backup = builtin("backup")
    int_backup["backend_options"]["dtype"] = "int32"
    srv.pools = [main, int_backup]
    srv.write_config()
    line = sighup(srv, "config reload refused")
    assert "failover.fallback_pool 'backup' of pool 'main' would take other inputs" in line, line
    infer(c, "backup", 2)  # still the float32 one
    srv.pools = [main, builtin("backup", pool_size=2)]
    srv.write_config()
    assert "pools_changed=1" in sighup(srv, "config reloaded")
    assert pool_size(srv, "backup") == 2
