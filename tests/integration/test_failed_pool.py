"""A pool whose model cannot load is FAILED (with a reason) while the others
serve; requests to it get UNAVAILABLE; the server is still ready."""

import numpy as np
import pytest

from cann_sip import InferenceRequest, UnavailableError
from harness import serve
import models


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("failed")
    corrupt = models.write_corrupt(d / "corrupt.onnx")
    empty = d / "empty.onnx"
    empty.write_bytes(b"")
    pools = [
        {"name": "good", "model_path": str(model_dir["addmul"]), "pool_size": 1},
        {"name": "broken", "model_path": str(corrupt), "pool_size": 2},
        {"name": "empty", "model_path": str(empty), "pool_size": 1},
        {"name": "good2", "model_path": str(model_dir["two_out"]), "pool_size": 1},
    ]
    with serve(d, pools) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client()


def test_ready_with_failed_pool(client):
    doc = client.info(1)
    assert doc["ready"] is True  # every pool finished loading: READY or FAILED
    assert doc["pools"] == {"good": "READY", "broken": "FAILED", "empty": "FAILED",
                            "good2": "READY"}
    assert client.ready() is True


@pytest.mark.parametrize("name", ["broken", "empty"])
def test_pools_report_failure(client, name):
    pools = {p["name"]: p for p in client.pools()}
    p = pools[name]
    assert p["state"] == "FAILED"
    assert isinstance(p["error"], str) and p["error"].strip(), p
    assert pools["good"]["state"] == "READY" and pools["good"]["error"] is None


@pytest.mark.parametrize("name", ["broken", "empty"])
def test_status_reports_failure(client, name):
    st = {p["name"]: p for p in client.status()["pools"]}
    p = st[name]
    assert p["state"] == "FAILED"
    assert isinstance(p["error"], str) and p["error"].strip(), p
    assert p["active_sessions"] == 0
    assert st["good"]["state"] == "READY" and st["good"]["active_sessions"] == 1


@pytest.mark.parametrize("name", ["broken", "empty"])
def test_requests_to_failed_pool(client, name):
    with pytest.raises(UnavailableError) as ei:
        client.infer(InferenceRequest(name, {"lhs": np.ones((1, 4), np.float32)}))
    assert name in ei.value.message or "FAILED" in ei.value.message.upper(), ei.value.message


def test_other_pools_serve(client):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    for _ in range(3):
        r = client.infer(InferenceRequest("good", {"lhs": a, "rhs": a}))
        np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(a, a))
        with pytest.raises(UnavailableError):
            client.infer(InferenceRequest("broken", {"x": a}))
        r = client.infer(InferenceRequest("good2", {"x": a}))
        np.testing.assert_array_equal(r.outputs["sum"], a + a)


def test_failed_requests_counted(srv, client):
    before = srv.pool_status("broken", client)["requests"].get("UNAVAILABLE", 0)
    with pytest.raises(UnavailableError):
        client.infer(InferenceRequest("broken", {"x": 1}))
    after = srv.pool_status("broken", client)["requests"].get("UNAVAILABLE", 0)
    assert after == before + 1
