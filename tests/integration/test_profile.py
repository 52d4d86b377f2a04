"""Operator profiling (sip profile, docs/profiling.md): one session of a
serving ONNX pool runs under ONNX Runtime's profiler for a while; the answer
sums up time per operator and per node, and its trace is Chrome-trace JSON
naming the model's operators. The pool serves throughout and the session
goes back to what it was."""

import json
import subprocess
import threading

import numpy as np
import pytest

import harness
import kserve as K
import models
from cann_sip import FailedPreconditionError, InferenceRequest, InvalidArgumentError
from test_ocr import CLS

X = np.arange(8, dtype=np.float32).reshape(2, 4)


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    pools = [{"name": "m", "model_path": str(model_dir["addmul"]), "pool_size": 2},
             {"name": "cls", "model_path": str(CLS), "pool_size": 1},
             {"name": "b", "backend": "builtin", "pool_size": 1}]
    with harness.serve(tmp_path_factory.mktemp("profile"), pools,
                       server={"http": "127.0.0.1:0"}) as s:
        yield s


def load(srv, pool, inputs, stop, errors):
    """Requests to `pool` one after another until `stop`; failures recorded."""
    def run():
        with srv.client() as c:
            while not stop.is_set():
                try:
                    r = c.infer(InferenceRequest(pool, inputs))
                    if pool == "m":
                        np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(X, X))
                except Exception as e:  # recorded: the test fails on any
                    errors.append(repr(e))
    t = threading.Thread(target=run)
    t.start()
    return t


def test_profile_names_operators_while_serving(srv):
    stop, errors = threading.Event(), []
    t = load(srv, "m", {"lhs": X, "rhs": X}, stop, errors)
    try:
        with srv.client() as c:
            p = c.profile("m", seconds=1.0, session=1)
    finally:
        stop.set()
        t.join(10)
    assert not errors, errors[:3]
    assert (p["pool"], p["session"], p["seconds"]) == ("m", 1, 1.0)
    runs = p["executions"]
    assert runs > 0
    ops = {o["op"]: o for o in p["operators"]}
    assert set(ops) == {"Mul", "Add"}, ops
    for o in ops.values():  # each node ran once per execution of the model
        assert o["count"] == runs
        assert 0 < o["mean_us"] <= o["p99_us"] * 1.0001 or o["count"] < 100
        assert abs(o["mean_us"] * o["count"] - o["total_us"]) < 1e-6 * o["total_us"] + 1e-3
    assert abs(sum(o["share"] for o in ops.values()) - 1.0) < 1e-9
    assert sorted(n["op"] for n in p["nodes"]) == ["Add", "Mul"]
    # The trace: Chrome trace events, the nodes' kernel times among them,
    # each inside a model_run of the session.
    trace = p["trace"]
    assert isinstance(trace, list) and all({"name", "ph", "ts"} <= set(e) for e in trace)
    kernels = [e for e in trace if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    run_events = [e for e in trace if e.get("cat") == "Session" and e["name"] == "model_run"]
    assert len(run_events) == runs and len(kernels) == 2 * runs
    for e in kernels:
        assert any(r["ts"] <= e["ts"] and e["ts"] + e["dur"] <= r["ts"] + r["dur"] + 1
                   for r in run_events), e
    # The session serves as before, and the pool with it.
    with srv.client() as c:
        st = srv.pool_status("m", c)
        assert [s["state"] for s in st["sessions"]] == ["READY", "READY"]
        r = c.infer(InferenceRequest("m", {"lhs": X, "rhs": X}))
        np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(X, X))


def test_profile_of_a_real_model(srv):
    x = np.random.default_rng(1).random((1, 3, 48, 192), dtype=np.float32)
    stop, errors = threading.Event(), []
    t = load(srv, "cls", {"x": x}, stop, errors)
    try:
        with srv.client() as c:
            p = c.profile("cls", seconds=1.0, trace=False)
    finally:
        stop.set()
        t.join(10)
    assert not errors, errors[:3]
    assert "trace" not in p and p["executions"] > 0
    ops = [o["op"] for o in p["operators"]]
    assert "Conv" in ops, ops
    totals = [o["total_us"] for o in p["operators"]]
    assert totals == sorted(totals, reverse=True)


def test_drained_session_stays_drained(srv):
    with srv.client() as c:
        c.admin("drain", "m", session=0)
        try:
            c.profile("m", seconds=0.2, session=0, trace=False)
            st = srv.pool_status("m", c)
            assert st["sessions"][0]["state"] == "SUSPENDED"
        finally:
            c.admin("resume", "m", session=0)


def test_refusals(srv):
    with srv.client() as c:
        with pytest.raises(FailedPreconditionError, match="backend builtin has no operator"):
            c.profile("b", seconds=0.2)
        with pytest.raises(InvalidArgumentError, match=r"\"seconds\" must be a number 0\.1\.\.60"):
            c.profile("m", seconds=100)
        with pytest.raises(InvalidArgumentError, match=r"has sessions 0\.\.1; got session 5"):
            c.profile("m", seconds=0.2, session=5)


def test_cli_and_http(srv, tmp_path):
    out = tmp_path / "trace.json"
    r = subprocess.run([str(harness.require_sipd().parent / "sip"), "-e", srv.endpoint,
                        "profile", "m", "--seconds", "0.3", "--trace", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "OPERATOR" in r.stdout and "pool m session 0" in r.stdout
    assert isinstance(json.loads(out.read_text()), list)
    reply = K.request("POST", K.http_base(srv) + "/v2/admin",
                      body=json.dumps({"action": "profile", "pool": "m", "seconds": 0.3,
                                       "trace": False}).encode())
    assert reply.status == 200, reply.body
    body = json.loads(reply.body)
    assert body["pool"] == "m" and "operators" in body and "trace" not in body
    reply = K.request("POST", K.http_base(srv) + "/v2/admin",
                      body=json.dumps({"action": "profile", "pool": "b"}).encode())
    assert reply.status == 400 and b"no operator profiler" in reply.body
