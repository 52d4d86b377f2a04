"""Session availability of a real sipd (docs/availability.md): the watchdog
fails a hung session and replaces it, failover retries a request whose
session failed on the pool and then on the fallback pool, injected faults
(only with server.allow_fault_injection), and draining one session."""

import json
import subprocess
import threading
import time

import numpy as np
import pytest

import harness
from harness import wait_until
import kserve as K
from cann_sip import (InferenceRequest, InternalError, InvalidArgumentError,
                      PermissionDeniedError, UnavailableError)

F = np.float32
FAULTS = {"allow_fault_injection": True}


def pool(name, size=1, **kw):
    p = {"name": name, "backend": "builtin", "pool_size": size,
         "backend_options": {"shape": "-1"}}
    p.update(kw)
    return p


def req(pool_name, v=1.0):
    return InferenceRequest(pool_name, {"input": np.full(3, v, F)})


def status_of(c, name):
    return next(p for p in c.status()["pools"] if p["name"] == name)


def counts(st):
    return {k: st["failover"][k] for k in ("retries", "fallbacks", "session_failures")}


def sip_cli(srv, *args):
    return subprocess.run([str(harness.require_sipd().parent / "sip"), "-e", srv.endpoint]
                          + list(args), capture_output=True, text=True, timeout=30)


def test_hang_answered_within_timeout_and_session_replaced(start_sipd):
    srv = start_sipd([pool("p", 2, hang_timeout_ms=400)], server=FAULTS)
    c = srv.client()
    assert c.infer(req("p", 2.0))["output"].tolist() == [2.0] * 3
    c.admin("fault", "p", kind="hang", count=1)
    t0 = time.monotonic()
    with pytest.raises(UnavailableError) as ei:
        c.infer(req("p"))
    took_ms = (time.monotonic() - t0) * 1000
    assert "session p/" in str(ei.value) and "hung for" in str(ei.value)
    assert 400 <= took_ms <= 500, took_ms
    st = status_of(c, "p")
    assert st["active_sessions"] == 2
    assert sorted(s["failures"] for s in st["sessions"]) == [0, 1]
    assert all(s["state"] == "READY" for s in st["sessions"])
    assert st["failover"]["session_failures"] == 1
    # Both sessions serve: four requests at once, each 100 ms, take ~200 ms.
    futs = [c.infer_async(req("p", float(i))) for i in range(4)]
    assert [f.result(timeout=10)["output"][0] for f in futs] == [0.0, 1.0, 2.0, 3.0]
    assert status_of(c, "p")["requests"]["UNAVAILABLE"] == 1


def test_hang_with_retry_is_answered_by_another_session(start_sipd):
    srv = start_sipd([pool("p", 2, hang_timeout_ms=300,
                           failover={"strategy": "immediate_retry", "max_retries": 1})],
                     server=FAULTS)
    c = srv.client()
    c.admin("fault", "p", kind="hang", count=1)
    r = c.infer(req("p", 5.0))
    assert r["output"].tolist() == [5.0] * 3
    assert r.retries == 1 and r.served_by.startswith("p/")
    assert status_of(c, "p")["failover"]["retries"] == 1


def test_injected_crash_with_immediate_retry_loses_no_request(start_sipd):
    srv = start_sipd([pool("p", 2, backend_options={"shape": "-1", "delay_ms": 1},
                           failover={"strategy": "immediate_retry", "max_retries": 8})],
                     server=FAULTS)
    clients = [srv.client(), srv.client()]
    clients[0].admin("fault", "p", kind="crash", rate=0.1)
    results, errors = [], []

    def load(c, base):
        futs = [c.infer_async(req("p", float(base + i))) for i in range(150)]
        for i, f in enumerate(futs):
            try:
                r = f.result(timeout=30)
                results.append((base + i, float(r["output"][0]), r.retries))
            except Exception as e:  # noqa: BLE001 - counted, asserted below
                errors.append(e)

    threads = [threading.Thread(target=load, args=(c, k * 1000)) for k, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 300 and all(v == out for v, out, _ in results)
    retried = sum(1 for _, _, n in results if n)
    st = status_of(clients[0], "p")
    assert st["failover"]["session_failures"] > 5
    assert st["failover"]["retries"] >= retried > 0
    assert st["requests"] == {"OK": 300}
    assert st["active_sessions"] == 2


def test_fallback_pool_after_retries_native_and_http(start_sipd):
    srv = start_sipd([pool("p", 1, failover={"strategy": "immediate_retry", "max_retries": 2,
                                             "fallback_pool": "b"}),
                      pool("b", 1)],
                     server=dict(FAULTS, http="127.0.0.1:0"))
    c = srv.client()
    c.admin("fault", "p", kind="crash", count=3)
    r = c.infer(req("p", 7.0))
    assert r["output"].tolist() == [7.0] * 3
    assert (r.retries, r.served_by) == (3, "b/0")
    st = status_of(c, "p")
    assert counts(st) == {"retries": 2, "fallbacks": 1, "session_failures": 3}
    assert status_of(c, "b")["requests"] == {"OK": 1}
    base = K.http_base(srv)
    c.admin("fault", "p", kind="crash", count=3)
    reply = K.infer(base, "p", {"input": np.full(2, 4.0, F)})
    assert reply.status == 200, reply.body
    body = json.loads(reply.body)
    assert body["parameters"] == {"retries": 3, "served_by": "b/0"}
    metrics = K.get(base + "/metrics").body.decode()
    assert 'sip_failover_fallbacks_total{pool="p",version=""} 2' in metrics
    assert 'sip_failover_retries_total{pool="p",version=""} 4' in metrics
    # Strategy fallback skips the retries.
    plain = c.infer(req("p", 1.0))
    assert plain.retries == 0 and plain.served_by is None


def test_bad_input_and_execution_errors_are_not_retried(start_sipd):
    srv = start_sipd([pool("p", 2, failover={"strategy": "immediate_retry", "max_retries": 3,
                                             "fallback_pool": "b"}),
                      pool("b", 1),
                      pool("flaky", 1, backend_options={"shape": "-1", "fail_every": 1},
                           failover={"strategy": "immediate_retry", "max_retries": 3})],
                     server=FAULTS)
    c = srv.client()
    with pytest.raises(InvalidArgumentError):
        c.infer(InferenceRequest("p", {"input": np.zeros(3, np.int32)}))
    c.admin("fault", "p", kind="error", count=1)
    with pytest.raises(InternalError, match="injected error"):
        c.infer(req("p"))
    with pytest.raises(InternalError):
        c.infer(req("flaky"))
    for name in ("p", "flaky"):
        assert counts(status_of(c, name)) == {"retries": 0, "fallbacks": 0,
                                              "session_failures": 0}
    assert status_of(c, "b")["requests"] == {}


def test_slow_fault_adds_delay_to_one_session(start_sipd):
    srv = start_sipd([pool("p", 2)], server=FAULTS)
    c = srv.client()
    c.admin("fault", "p", kind="slow", count=1, delay_ms=300, session=1)
    c.admin("drain", "p", session=0)  # every request runs on session 1
    t0 = time.monotonic()
    c.infer(req("p"))
    assert time.monotonic() - t0 >= 0.3
    # The next one is not delayed (by sipd's own clock: this client's wall
    # time would count a loaded machine's scheduling too).
    r = c.infer(req("p"))
    assert r.timings["total_us"] < 200000, r.timings


def test_fault_injection_refused_unless_allowed(start_sipd):
    srv = start_sipd([pool("p", 1)], server={"http": "127.0.0.1:0"})
    c = srv.client()
    with pytest.raises(PermissionDeniedError, match="allow_fault_injection"):
        c.admin("fault", "p", kind="crash", count=1)
    r = sip_cli(srv, "fault", "p", "--kind", "crash", "--count", "1")
    assert r.returncode != 0 and "PERMISSION_DENIED" in r.stderr
    reply = K.request("POST", K.http_base(srv) + "/v2/admin",
                      body=json.dumps({"action": "fault", "pool": "p", "kind": "hang",
                                       "count": 1}).encode())
    assert reply.status == 403, reply
    assert c.infer(req("p", 3.0))["output"].tolist() == [3.0] * 3
    assert status_of(c, "p")["failover"]["session_failures"] == 0


def test_admin_request_errors(start_sipd):
    srv = start_sipd([pool("p", 2)], server=FAULTS)
    c = srv.client()
    with pytest.raises(InvalidArgumentError, match="count.*rate"):
        c.admin("fault", "p", kind="crash")
    with pytest.raises(InvalidArgumentError, match="sessions 0..1; got session 5"):
        c.admin("drain", "p", session=5)
    with pytest.raises(InvalidArgumentError, match="kind"):
        c.admin("fault", "p", kind="explode", count=1)
    with pytest.raises(Exception, match="unknown|NOT_FOUND|not found"):
        c.admin("drain", "nope", session=0)
    srv.assert_alive()


def test_session_drain_and_resume(start_sipd):
    srv = start_sipd([pool("p", 2, backend_options={"shape": "-1", "delay_ms": 20})],
                     server={"http": "127.0.0.1:0"})
    c = srv.client()
    r = sip_cli(srv, "session", "drain", "p/0")
    assert r.returncode == 0, r.stderr
    # the idle session moves to SUSPENDED when it wakes
    wait_until(lambda: status_of(c, "p")["sessions"][0]["state"] == "SUSPENDED",
               what="p/0 to be SUSPENDED")
    st = status_of(c, "p")
    assert [(s["state"], s["drained"]) for s in st["sessions"]] == [("SUSPENDED", True),
                                                                    ("READY", False)]
    assert st["active_sessions"] == 1
    futs = [c.infer_async(req("p", float(i))) for i in range(6)]
    assert [f.result(timeout=10)["output"][0] for f in futs] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert [s["inferences"] for s in status_of(c, "p")["sessions"]] == [0, 6]
    reply = K.request("POST", K.http_base(srv) + "/v2/admin",
                      body=json.dumps({"action": "resume", "pool": "p", "session": 0}).encode())
    assert reply.status == 200 and json.loads(reply.body)["drained"] is False
    wait_until(lambda: status_of(c, "p")["sessions"][0]["state"] == "READY",
               what="p/0 to be READY again")
    futs = [c.infer_async(req("p", float(i))) for i in range(8)]
    for f in futs:
        f.result(timeout=10)
    assert status_of(c, "p")["sessions"][0]["inferences"] > 0


def test_seed_yaml_accepted_and_fallback_checked(sipd_bin, tmp_path):
    seed = """session_pools:
  - name: critical_inference
    model_path: models/mission_critical.onnx
    pool_size: 2
    hot_standby: {enabled: true, standby_count: 1, health_check_interval_ms: 5000}
    failover: {strategy: immediate_retry, max_retries: 3, fallback_pool: critical_inference_backup}
"""
    backup = """  - name: critical_inference_backup
    model_path: models/mission_critical.onnx
"""
    cfg = tmp_path / "seed.yaml"
    cfg.write_text(seed + backup)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mission_critical.onnx").write_bytes(b"")  # --check-config reads it
    r = subprocess.run([str(sipd_bin), "--check-config", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    cfg.write_text(seed)
    r = subprocess.run([str(sipd_bin), "--check-config", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1
    assert "session_pools[0].failover.fallback_pool" in r.stderr
    assert "not a pool of this file" in r.stderr


def test_fallback_pool_with_other_inputs_fails_the_pool(start_sipd):
    srv = start_sipd([pool("p", 1, failover={"strategy": "fallback", "fallback_pool": "b"}),
                      pool("b", 1, backend_options={"shape": "-1", "dtype": "int32"})])
    c = srv.client()
    st = status_of(c, "p")
    assert st["state"] == "FAILED"
    assert "fallback_pool 'b'" in st["error"] and "other inputs" in st["error"]
    with pytest.raises(UnavailableError):
        c.infer(req("p"))
    assert c.infer(InferenceRequest("b", {"input": np.arange(3, dtype=np.int32)}))[
        "output"].tolist() == [0, 1, 2]


def test_backend_hang_abandoned_thread_ends_safely(start_sipd):
    # The backend itself blocks (1.5 s per execution): the watchdog abandons
    # each execution, the retry hangs too, and the request is answered after
    # two timeouts; the server then stops cleanly while both abandoned
    # threads are still inside the backend.
    srv = start_sipd([pool("p", 2, hang_timeout_ms=250,
                           backend_options={"shape": "-1", "delay_ms": 1500},
                           failover={"strategy": "immediate_retry", "max_retries": 1})])
    c = srv.client()
    t0 = time.monotonic()
    with pytest.raises(UnavailableError, match="hung for"):
        c.infer(req("p"))
    took = time.monotonic() - t0
    assert 0.5 <= took <= 0.75, took
    st = status_of(c, "p")
    assert counts(st) == {"retries": 1, "fallbacks": 0, "session_failures": 2}
    assert st["active_sessions"] == 2
    assert srv.stop() == 0
    assert "hung executions still running" not in srv.log()


def test_hot_standby_promoted_on_failure(start_sipd, model_dir):
    # An ONNX pool with one warm standby: a crashed session takes it over
    # (no new context on the failure path) and a new standby is made.
    srv = start_sipd([{"name": "m", "model_path": str(model_dir["addmul"]), "pool_size": 2,
                       "hot_standby": {"enabled": True, "standby_count": 1},
                       "failover": {"strategy": "immediate_retry", "max_retries": 2}}],
                     server=FAULTS)
    c = srv.client()

    def standby_ready():
        wait_until(lambda: status_of(c, "m")["failover"]["standby_sessions"] == 1,
                   what="one standby session")

    standby_ready()
    a = np.arange(4, dtype=F).reshape(1, 4)
    b = np.full((1, 4), 2.0, F)
    inputs = {"lhs": a, "rhs": b}
    ref = c.infer(InferenceRequest("m", inputs))
    c.admin("drain", "m", session=1)  # the retry runs on the promoted session 0
    c.admin("fault", "m", kind="crash", count=1)
    r = c.infer(InferenceRequest("m", inputs))
    assert (r.retries, r.served_by) == (1, "m/0")
    for k in ref.outputs:
        np.testing.assert_array_equal(r[k], ref[k])
    st = status_of(c, "m")
    assert st["failover"]["promotions"] == 1
    assert 0 < st["failover"]["last_recovery_us"] < 1000000
    standby_ready()  # made again in the background


def test_sequence_requests_are_not_failed_over(start_sipd, tmp_path):
    # A sequence's state is its session's: a crash answers the request (no
    # retry), and the sequence goes on on the replaced session.
    import onnx
    from onnx import TensorProto
    from test_sequence import CONTROLS, seq_model
    path = tmp_path / "seq.onnx"
    onnx.save(seq_model(TensorProto.UINT64), str(path))
    srv = start_sipd([{"name": "s", "model_path": str(path), "pool_size": 1,
                       "hang_timeout_ms": 1000,
                       "failover": {"strategy": "immediate_retry", "max_retries": 3},
                       "sequence_batching": {"idle_timeout_us": 10_000_000,
                                             "control_inputs": CONTROLS}}], server=FAULTS)
    c = srv.client()

    def one(v, **kw):
        return c.infer(InferenceRequest("s", {"x": np.array([v], F)}, sequence_id=9, **kw))

    assert float(one(1.0, sequence_start=True)["out"][0]) == 1011.0
    c.admin("fault", "s", kind="crash", count=1)
    with pytest.raises(UnavailableError, match="injected crash"):
        one(2.0)
    assert float(one(3.0, sequence_end=True)["out"][0]) == 113.0
    assert counts(status_of(c, "s")) == {"retries": 0, "fallbacks": 0, "session_failures": 1}
