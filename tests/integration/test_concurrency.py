"""Many client threads against one sipd: one shared client (pipelined on one
connection, answers demultiplexed by request_id) and one client per thread."""

import threading

import numpy as np
import pytest

from cann_sip import InferenceRequest, SessionClient
from harness import serve
import models

THREADS = 16
PER_THREAD = 200


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    pools = [
        {"name": "addmul", "model_path": str(model_dir["addmul"]), "pool_size": 2},
        {"name": "id_string", "model_path": str(model_dir["id_string"]), "pool_size": 1},
        {"name": "two_out", "model_path": str(model_dir["two_out"]), "pool_size": 1},
    ]
    with serve(tmp_path_factory.mktemp("concurrency"), pools) as s:
        yield s


def run_threads(work):
    errors = []
    lock = threading.Lock()

    def wrap(t):
        try:
            work(t)
        except BaseException as e:  # noqa: BLE001
            with lock:
                errors.append((t, e))

    threads = [threading.Thread(target=wrap, args=(t,), name="w%d" % t) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(180)
        assert not th.is_alive(), "worker thread hung"
    assert not errors, "%d threads failed; first: %r" % (len(errors), errors[0])


def one_request(client, t, i):
    """A request whose answer can only be right if it was not mixed up with
    another thread's: the inputs encode (thread, iteration)."""
    kind = i % 3
    if kind == 0:
        batch = 1 + (t + i) % 5
        a = np.full((batch, 4), t, dtype=np.float32) + np.arange(4, dtype=np.float32)
        b = np.full((batch, 4), i, dtype=np.float32)
        r = client.infer(InferenceRequest("addmul", {"lhs": a, "rhs": b}))
        np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(a, b), rtol=1e-6)
    elif kind == 1:
        x = np.array([["t%d" % t, "i%d" % i]], dtype=object)
        r = client.infer(InferenceRequest("id_string", {"data": x, "scalar": "%d/%d" % (t, i)}))
        assert r.outputs["data_out"].tolist() == [[b"t%d" % t, b"i%d" % i]]
        assert r.outputs["scalar_out"][()] == b"%d/%d" % (t, i)
    else:
        x = np.array([[t, i, -t, -i]], dtype=np.float32)
        r = client.infer(InferenceRequest("two_out", {"x": x}, outputs=["sum"]))
        assert list(r.outputs) == ["sum"]
        np.testing.assert_array_equal(r.outputs["sum"], x + x)


def test_shared_client(srv):
    client = SessionClient(srv.endpoint, timeout_s=60)
    try:
        run_threads(lambda t: [one_request(client, t, i) for i in range(PER_THREAD)])
    finally:
        client.close()
    srv.assert_alive()


def test_client_per_thread(srv):
    def work(t):
        ep = srv.tcp_endpoint if t % 2 else srv.unix_endpoint
        with SessionClient(ep, timeout_s=60) as client:
            for i in range(PER_THREAD):
                one_request(client, t, i)

    run_threads(work)
    srv.assert_alive()


def test_shared_client_async_burst(srv):
    """Every thread fires its requests without waiting, then collects."""
    client = SessionClient(srv.endpoint, timeout_s=120)
    try:
        def work(t):
            futs = []
            for i in range(PER_THREAD):
                a = np.full((1, 4), t * 1000 + i, dtype=np.float32)
                futs.append((a, client.infer_async(
                    InferenceRequest("addmul", {"lhs": a, "rhs": a}))))
            for a, f in futs:
                np.testing.assert_allclose(f.result(timeout=120).outputs["y"],
                                           models.addmul_ref(a, a), rtol=1e-6)
        run_threads(work)
    finally:
        client.close()


def test_counters_add_up(srv):
    """The status document accounts for every request served so far."""
    with SessionClient(srv.endpoint, timeout_s=30) as c:
        st = {p["name"]: p for p in c.status()["pools"]}
    total_ok = sum(p["requests"].get("OK", 0) for p in st.values())
    total_inf = sum(s["inferences"] for p in st.values() for s in p["sessions"])
    assert total_ok >= 3 * THREADS * PER_THREAD
    assert all(set(p["requests"]) <= {"OK"} or
               all(v == 0 for k, v in p["requests"].items() if k != "OK") for p in st.values())
    assert 0 < total_inf <= total_ok  # (a batcher may run several requests at once)
    assert all(s["errors"] == 0 for p in st.values() for s in p["sessions"])
    assert all(p["queued_requests"] == 0 for p in st.values())
