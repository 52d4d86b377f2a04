"""Quotas while serving (docs/elastic.md "Quotas while serving"):
resource_quota.max_memory_mb caps what an ONNX Runtime pool allocates while
it runs, so a request that needs more fails with RESOURCE_EXHAUSTED naming
the quota and the pool serves on; `sip pool update` moves the cap.
max_compute_percent is measured: each pool's share of the execution time
over the arbiter's window is in /metrics, GET /v2/status and `sip status`."""

import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

import harness
from cann_sip import InferenceRequest, ResourceExhaustedError
from test_failover import pool as builtin_pool, sip_cli, status_of
from test_memory import http_status, metrics, pool_of

MIB = 1 << 20
BIG = 4096  # an input [1, 4096] makes a 4096 x 4096 float intermediate: 64 MiB
SMALL = 64


def outer_model(path):
    """y = sum over rows of x^T x = x * sum(x): the working memory (x^T x)
    grows with the square of the input's length, the output with its
    length."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
        helper.make_node("MatMul", ["xt", "x"], ["outer"]),
        helper.make_node("ReduceSum", ["outer", "axes"], ["s"], keepdims=0),
        helper.make_node("Unsqueeze", ["s", "axes"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "outer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor("axes", TensorProto.INT64, [1], [0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def rss(srv):
    with open("/proc/%d/status" % srv.proc.pid) as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))


def ask(c, n, seed):
    x = np.random.default_rng(seed).random((1, n), dtype=np.float32)
    return x, InferenceRequest("p", {"x": x})


def check(c, n, seed):
    x, r = ask(c, n, seed)
    y = c.infer(r)["y"]
    np.testing.assert_allclose(y, x * x.sum(dtype=np.float64), rtol=1e-4)


def test_memory_quota_refuses_an_oversized_request_and_serves_on(start_sipd, tmp_path):
    path = outer_model(tmp_path / "outer.onnx")
    srv = start_sipd([{"name": "p", "model_path": str(path), "pool_size": 1,
                       "resource_quota": {"max_memory_mb": 48}}])
    c = srv.client()
    for seed in range(3):
        check(c, SMALL, seed)
    before = rss(srv)
    _, big = ask(c, BIG, 7)
    try:
        c.infer(big)
        raise AssertionError("a request needing 64 MiB passed a 48 MiB quota")
    except ResourceExhaustedError as e:
        msg = str(e)
    assert "resource_quota.max_memory_mb is 48 MiB" in msg, msg
    assert "asked for 64.0 MiB more" in msg, msg
    # The refused intermediate never existed: the process did not grow by it.
    assert rss(srv) - before < 16 * MIB, (before, rss(srv))
    for seed in range(3, 6):
        check(c, SMALL, seed)
    st = status_of(c, "p")
    assert st["state"] == "READY"
    assert st["requests"] == {"OK": 6, "RESOURCE_EXHAUSTED": 1}, st["requests"]
    assert st["failover"]["session_failures"] == 0
    assert [s["state"] for s in st["sessions"]] == ["READY"]

    # Raised while serving: the same request passes.
    r = sip_cli(srv, "pool", "update", "p", "--max-memory-mb", "400")
    assert r.returncode == 0, r.stderr
    x, big = ask(c, BIG, 7)
    np.testing.assert_allclose(c.infer(big)["y"], x * x.sum(dtype=np.float64), rtol=1e-4)
    # Lowered again: refused again, and the pool still serves.
    assert sip_cli(srv, "pool", "update", "p", "--max-memory-mb", "48").returncode == 0
    try:
        c.infer(big)
        raise AssertionError("a request needing 64 MiB passed the lowered quota")
    except ResourceExhaustedError as e:
        assert "resource_quota.max_memory_mb is 48 MiB" in str(e), str(e)
    check(c, SMALL, 9)
    assert status_of(c, "p")["requests"] == {"OK": 8, "RESOURCE_EXHAUSTED": 2}


def test_without_a_quota_the_big_request_runs(start_sipd, tmp_path):
    # The same model and request with no quota: what the quota refused is
    # the request's size, not something else in the pool.
    path = outer_model(tmp_path / "outer.onnx")
    srv = start_sipd([{"name": "p", "model_path": str(path), "pool_size": 1}])
    c = srv.client()
    check(c, BIG, 7)


def drive(c, name, n, spent):
    """n requests to pool `name`, one at a time; adds each one's measured
    round trip to spent[name]."""
    for i in range(n):
        t0 = time.monotonic()
        c.infer(InferenceRequest(name, {"input": np.full(3, float(i), np.float32)}))
        spent[name] += time.monotonic() - t0


def test_compute_share_is_measured_against_the_quota(start_sipd):
    # heavy: 20 executions of 40 ms; light: 20 of 10 ms, at the same time.
    srv = start_sipd([
        builtin_pool("heavy", backend_options={"shape": "-1", "delay_ms": 40},
                     resource_quota={"max_compute_percent": 60}),
        builtin_pool("light", backend_options={"shape": "-1", "delay_ms": 10},
                     resource_quota={"max_compute_percent": 40})],
        server={"http": "127.0.0.1:0"})
    spent = {"heavy": 0.0, "light": 0.0}
    threads = [threading.Thread(target=drive, args=(srv.client(), name, 20, spent))
               for name in spent]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    expected = spent["heavy"] / (spent["heavy"] + spent["light"])
    doc = http_status(srv)
    share = {n: pool_of(doc, n)["compute_share"] for n in spent}
    assert share["heavy"]["window_s"] == 10
    assert share["heavy"]["quota"] == 0.6 and share["light"]["quota"] == 0.4
    total = share["heavy"]["share"] + share["light"]["share"]
    assert abs(total - 1.0) < 1e-6, share
    assert share["heavy"]["share"] > share["light"]["share"], share
    # The test's round trips hold each execution plus a little transport.
    assert abs(share["heavy"]["share"] - expected) < 0.05, (share, spent)
    assert share["heavy"]["recent_ns"] >= 20 * 40e6 and share["light"]["recent_ns"] >= 20 * 10e6
    m = metrics(srv)
    assert abs(m[("sip_compute_share_ratio", "heavy")] - share["heavy"]["share"]) < 0.01
    assert abs(m[("sip_compute_share_ratio", "light")] - share["light"]["share"]) < 0.01
    assert m[("sip_compute_quota_ratio", "heavy")] == 0.6
    assert m[("sip_compute_quota_ratio", "light")] == 0.4
    out = sip_cli(srv, "status")
    assert out.returncode == 0, out.stderr
    assert "(max_compute_percent 60%)" in out.stdout and "(max_compute_percent 40%)" in out.stdout
    # Past the window nothing ran: the shares fall to 0.
    harness.wait_until(lambda: pool_of(http_status(srv), "heavy")["compute_share"]["share"] == 0,
                       timeout=20, what="the heavy pool's share to leave the window")


def test_memory_quota_in_an_isolated_worker(start_sipd, tmp_path):
    # The worker process loads with the quota: the refusal comes back as the
    # request's answer and the worker is not restarted. The check at load
    # counts the whole worker (ONNX Runtime's own ~200 MiB): a quota of
    # 768 MiB, a request asking for 1 GiB.
    path = outer_model(tmp_path / "outer.onnx")
    srv = start_sipd([{"name": "p", "model_path": str(path), "pool_size": 1,
                       "isolation": "process", "resource_quota": {"max_memory_mb": 768}}])
    c = srv.client()
    check(c, SMALL, 1)
    pid = status_of(c, "p")["worker"]["pid"]
    _, big = ask(c, 16384, 7)
    try:
        c.infer(big)
        raise AssertionError("a request needing 1 GiB passed a 768 MiB quota")
    except ResourceExhaustedError as e:
        assert "resource_quota.max_memory_mb is 768 MiB" in str(e), str(e)
        assert "asked for 1024.0 MiB more" in str(e), str(e)
    check(c, SMALL, 2)
    st = status_of(c, "p")
    assert st["worker"]["pid"] == pid and st["worker"]["restarts"] == 0, st["worker"]
    assert st["failover"]["session_failures"] == 0 and st["state"] == "READY"
