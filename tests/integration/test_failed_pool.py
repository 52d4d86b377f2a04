"""A pool whose model cannot load is FAILED (with a reason) while the others
serve; requests to it get UNAVAILABLE; the server is not ready (Triton's
strict readiness, the default) unless server.strict_readiness is false; the
start-up log line counts the failures; sipd --check-config names model files
that cannot be read, and --load the models that cannot load."""

import json
import re
import subprocess

import numpy as np
import pytest

from cann_sip import InferenceRequest, UnavailableError
from harness import require_sipd, serve, to_yaml
import kserve as K
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
    with serve(d, pools, server={"http": "127.0.0.1:0"}) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client()


def test_not_ready_with_failed_pool(srv, client):
    doc = client.info(1)
    assert doc["ready"] is False and doc["loading"] is False  # loaded, two FAILED
    assert doc["pools"] == {"good": "READY", "broken": "FAILED", "empty": "FAILED",
                            "good2": "READY"}
    assert client.ready() is False
    r = K.get(K.http_base(srv) + "/v2/health/ready")
    assert r.status == 503 and "'broken' FAILED" in r.json()["error"], r
    assert K.get(K.http_base(srv) + "/v2/health/live").status == 200
    assert "sip_ready 0\n" in K.get(K.http_base(srv) + "/metrics").body.decode()
    log = srv.log()  # each load's start and end are logged, the end with its time and memory
    assert log.index('msg="pool loading" pool=good') < log.index('msg="pool loaded" pool=good')
    assert re.search(r'msg="pool loaded" pool=good .*load_ms=[0-9.]+ .*memory_bytes=\d+', log)
    line = [l for l in srv.log().splitlines() if "pools loaded, some failed" in l]
    assert len(line) == 1 and "failed=2" in line[0] and "ready=false" in line[0], line
    # the good pools serve all the same
    a = np.ones((1, 4), np.float32)
    client.infer(InferenceRequest("good", {"lhs": a, "rhs": a}))


def test_ready_with_failed_pool_when_not_strict(sipd_bin, tmp_path):
    pools = [{"name": "good", "backend": "builtin"},
             {"name": "broken", "model_path": str(models.write_corrupt(tmp_path / "c.onnx"))}]
    with serve(tmp_path, pools, server={"strict_readiness": False}) as s:
        c = s.client()
        assert c.info(1)["ready"] is True and c.ready() is True
        assert "failed=1" in s.log() and "ready=true" in s.log()


def test_json_log_lines(sipd_bin, tmp_path):
    pools = [{"name": "good", "backend": "builtin"},
             {"name": "broken", "model_path": str(models.write_corrupt(tmp_path / "c.onnx"))}]
    with serve(tmp_path, pools, server={"strict_readiness": False, "log_format": "json"}) as s:
        lines = [json.loads(l) for l in s.log().splitlines() if l.startswith("{")]
    by_msg = {l["msg"]: l for l in lines}
    assert by_msg["pool loaded"]["pool"] == "good" and float(by_msg["pool loaded"]["load_ms"]) >= 0
    failed = by_msg["pool failed to load"]
    assert failed["pool"] == "broken" and failed["level"] == "error" and failed["reason"]
    assert by_msg["pools loaded, some failed"]["failed"] == "1"
    assert all(set(l) >= {"ts", "level", "msg"} for l in lines)


def check_config(path, *extra):
    return subprocess.run([str(require_sipd()), "--check-config", str(path)] + list(extra),
                          capture_output=True, text=True, timeout=120)


def test_check_config_reads_model_files_and_loads_them(sipd_bin, model_dir, tmp_path):
    corrupt = models.write_corrupt(tmp_path / "corrupt.onnx")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(to_yaml({"session_pools": [
        {"name": "good", "model_path": str(model_dir["addmul"])},
        {"name": "gone", "model_path": str(tmp_path / "missing.onnx")},
        {"name": "echo", "backend": "builtin"}]}) + "\n")
    r = check_config(cfg)
    assert r.returncode == 1, r
    assert "pool 'gone'" in r.stderr and "missing.onnx" in r.stderr and "No such file" in r.stderr
    cfg.write_text(to_yaml({"session_pools": [
        {"name": "good", "model_path": str(model_dir["addmul"])},
        {"name": "broken", "model_path": str(corrupt)},
        {"name": "echo", "backend": "builtin"}]}) + "\n")
    r = check_config(cfg)  # every file is there: valid without --load
    assert r.returncode == 0 and "OK" in r.stdout, r
    r = check_config(cfg, "--load")
    assert r.returncode == 1, r
    assert "1 of 3 models failed to load" in r.stderr and "pool 'broken'" in r.stderr, r.stderr
    cfg.write_text(to_yaml({"session_pools": [
        {"name": "good", "model_path": str(model_dir["addmul"])},
        {"name": "echo", "backend": "builtin"}]}) + "\n")
    r = check_config(cfg, "--load")
    assert r.returncode == 0 and "2 models loaded" in r.stdout, r


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
