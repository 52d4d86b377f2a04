"""The KServe v2 HTTP/REST front-end of a real sipd (server.http), driven with
urllib, http.client and curl: every endpoint, JSON and binary tensors of every
datatype against numpy references, errors, the header limit, keep-alive
concurrency, /metrics (parsed with prometheus_client), compressed bodies.
test_http_serving.py has the tests that need a server of their own."""

import json
import shutil
import socket
import subprocess
import threading

import numpy as np
import onnx
import pytest

from harness import serve
import kserve as K
import models

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

CURL = shutil.which("curl")


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("http")
    versioned = root / "vmodel"
    for v, build in (("1", models.two_out), ("3", models.addmul)):
        (versioned / v).mkdir(parents=True)
        onnx.save(build(), str(versioned / v / "model.onnx"))
    pools = [{"name": "id_" + dt, "model_path": str(model_dir["id_" + dt])} for dt in models.DTYPES]
    pools += [
        {"name": "addmul", "model_path": str(model_dir["addmul"]), "pool_size": 2},
        {"name": "two_out", "model_path": str(model_dir["two_out"]), "priority": "high",
         "resource_quota": {"max_memory_mb": 512, "max_compute_percent": 50},
         "backend_options": {"graph_optimization_level": "basic"}},
        {"name": "vmodel", "model_path": str(versioned)},
        {"name": "echo", "backend": "builtin", "pool_size": 2,
         "backend_options": {"shape": "-1,4"}},
        {"name": "broken", "model_path": str(models.write_corrupt(root / "broken.onnx"))},
    ]
    # 'broken' fails to load; the server serves the rest and says it is ready
    # (strict readiness and its 503 are test_failed_pool.py's).
    with serve(root, pools, server={"http": "127.0.0.1:0", "http_threads": 2,
                                    "strict_readiness": False}) as s:
        s.http = K.http_base(s)
        yield s


@pytest.fixture(scope="module")
def base(srv):
    return srv.http


rand = models.random_array
same = models.assert_same



def error_of(reply, status):
    assert reply.status == status, reply
    assert reply.headers.get("content-type", "").startswith("application/json")
    doc = json.loads(reply.body)
    assert list(doc) == ["error"] and isinstance(doc["error"], str) and doc["error"], doc
    return doc["error"]


def metrics(base):
    r = K.get(base + "/metrics")
    assert r.status == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(m, name, **labels):
    """The sample's value; a missing sample fails (a gauge expected at 0 must exist)."""
    key = (name, tuple(sorted(labels.items())))
    assert key in m, "no sample %s%s in /metrics" % (name, labels)
    return m[key]


# ---------------------------------------------------------------------------
# health, server and model metadata

def test_health_and_server_metadata(base):
    r = K.get(base + "/v2/health/live")
    assert r.status == 200 and r.json() == {"live": True}
    r = K.get(base + "/v2/health/ready")
    assert r.status == 200 and r.json() == {"ready": True}
    r = K.get(base + "/v2")
    doc = r.json()
    assert r.status == 200 and doc["name"] == "sip" and doc["version"]
    assert {"binary_tensor_data", "classification", "statistics",
            "model_configuration", "logging", "trace"} <= set(doc["extensions"])


@pytest.mark.parametrize("dtype", models.DTYPES)
def test_model_metadata(base, dtype):
    r = K.get(base + "/v2/models/id_" + dtype)
    assert r.status == 200, r
    doc = r.json()
    ks = K.DATATYPE[dtype]
    assert doc["name"] == "id_" + dtype and doc["platform"] == "onnxruntime_onnx"
    assert doc["versions"] == []
    assert doc["inputs"] == [{"name": "data", "datatype": ks, "shape": [-1, -1]},
                             {"name": "scalar", "datatype": ks, "shape": []}]
    assert doc["outputs"] == [{"name": "data_out", "datatype": ks, "shape": [-1, -1]},
                              {"name": "scalar_out", "datatype": ks, "shape": []}]
    r = K.get(base + "/v2/models/id_%s/ready" % dtype)
    assert r.status == 200 and r.json() == {"name": "id_" + dtype, "ready": True}


def test_builtin_platform_and_versions(base):
    doc = K.get(base + "/v2/models/echo").json()
    assert doc["platform"] == "builtin"
    assert doc["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]
    doc = K.get(base + "/v2/models/vmodel").json()
    assert doc["versions"] == ["3"] and doc["inputs"][0]["name"] == "lhs"
    assert K.get(base + "/v2/models/vmodel/versions/3").status == 200
    assert K.get(base + "/v2/models/vmodel/versions/3/ready").status == 200
    msg = error_of(K.get(base + "/v2/models/vmodel/versions/1"), 404)
    assert "'vmodel' version 1 is not found" in msg and "'3'" in msg
    error_of(K.get(base + "/v2/models/vmodel/versions/1/ready"), 404)
    error_of(K.get(base + "/v2/models/addmul/versions/1"), 404)  # unversioned
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    r = K.infer(base, "vmodel", {"lhs": a, "rhs": a}, version="3")
    doc, out = K.decode_outputs(r)
    assert r.status == 200 and doc["model_name"] == "vmodel" and doc["model_version"] == "3"
    np.testing.assert_array_equal(out["y"], models.addmul_ref(a, a))
    error_of(K.infer(base, "vmodel", {"lhs": a, "rhs": a}, version="1"), 404)
    # Without a version the response names the one that served it.
    assert K.decode_outputs(K.infer(base, "vmodel", {"lhs": a, "rhs": a}))[0]["model_version"] == "3"


def test_failed_and_unknown_models(base):
    msg = error_of(K.get(base + "/v2/models/broken/ready"), 503)
    assert "FAILED" in msg
    assert "failed to load" in error_of(K.get(base + "/v2/models/broken"), 503)
    x = np.ones((1, 4), np.float32)
    assert "failed to load" in error_of(K.infer(base, "broken", {"x": x}), 503)
    assert "Request for unknown model: 'nope' is not found" in error_of(K.get(base + "/v2/models/nope"), 404)
    error_of(K.get(base + "/v2/models/nope/ready"), 404)
    error_of(K.get(base + "/v2/models/nope/config"), 404)
    error_of(K.get(base + "/v2/models/nope/stats"), 404)
    assert "Request for unknown model: 'nope' is not found" in error_of(K.infer(base, "nope", {"x": x}), 404)
    # The server is still ready: a FAILED pool is reported, not waited for.
    assert K.get(base + "/v2/health/ready").status == 200


# ---------------------------------------------------------------------------
# inference: every datatype, JSON and binary, against numpy

@pytest.mark.parametrize("dtype", models.DTYPES)
@pytest.mark.parametrize("nested", [True, False])
def test_json_infer_every_dtype(base, dtype, nested):
    rng = np.random.default_rng(abs(hash((dtype, nested))) % 2**32)
    data, scalar = rand(dtype, (3, 5), rng), rand(dtype, (), rng)
    if dtype == "uint64":  # JSON integers travel as int64 in jansson
        data, scalar = data >> np.uint64(1), scalar >> np.uint64(1)
    r = K.infer(base, "id_" + dtype, {"data": data, "scalar": scalar}, nested=nested,
                id="req-%s" % dtype)
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/json" and r.header_len() is None
    doc, out = K.decode_outputs(r)
    assert doc["id"] == "req-" + dtype and doc["model_name"] == "id_" + dtype
    assert [o["datatype"] for o in doc["outputs"]] == [K.DATATYPE[dtype]] * 2
    same(out["data_out"], data)
    same(out["scalar_out"], np.asarray(scalar))


@pytest.mark.parametrize("dtype", models.DTYPES)
def test_binary_infer_every_dtype(base, dtype):
    rng = np.random.default_rng(7)
    data, scalar = rand(dtype, (4, 3), rng), rand(dtype, (), rng)
    if dtype in ("float16", "float32", "float64"):
        data.ravel()[:3] = [np.nan, np.inf, -np.inf]  # binary carries every bit pattern
    r = K.infer(base, "id_" + dtype, {"data": data, "scalar": scalar},
                binary_inputs=("data", "scalar"), params={"binary_data_output": True})
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/octet-stream"
    doc, out = K.decode_outputs(r)
    for o in doc["outputs"]:
        assert "data" not in o
        if dtype != "string":  # strings: 4-byte lengths + bytes, checked by decode_outputs
            assert o["parameters"]["binary_data_size"] == out[o["name"]].nbytes
    same(out["data_out"], data)
    same(out["scalar_out"], np.asarray(scalar))


def test_mixed_binary_and_json(base):
    rng = np.random.default_rng(3)
    lhs = rand("float32", (5, 4), rng)
    rhs = rand("float32", (5, 4), rng)
    # One input binary, one JSON; the output asked binary explicitly.
    r = K.infer(base, "addmul", {"lhs": lhs, "rhs": rhs}, binary_inputs=("rhs",),
                outputs=[("y", {"binary_data": True})])
    doc, out = K.decode_outputs(r)
    assert r.status == 200 and doc["outputs"][0]["parameters"]["binary_data_size"] == 80
    np.testing.assert_array_equal(out["y"], models.addmul_ref(lhs, rhs))
    # binary_data_output for all, one output overridden back to JSON.
    x = rand("float32", (2, 4), rng)
    r = K.infer(base, "two_out", {"x": x}, params={"binary_data_output": True},
                outputs=[("sum", {"binary_data": False}), "prod"])
    doc, out = K.decode_outputs(r)
    assert "data" in doc["outputs"][0] and "parameters" in doc["outputs"][1]
    np.testing.assert_array_equal(out["sum"], x + x)
    np.testing.assert_array_equal(out["prod"], x * x)


def test_requested_outputs_and_id(base):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    r = K.infer(base, "two_out", {"x": x}, outputs=["prod"], id="abc-\u00e9-\"1\"")
    doc, out = K.decode_outputs(r)
    assert doc["id"] == "abc-\u00e9-\"1\"" and list(out) == ["prod"]
    np.testing.assert_array_equal(out["prod"], x * x)
    r = K.infer(base, "two_out", {"x": x})
    assert list(K.decode_outputs(r)[1]) == ["sum", "prod"] and "id" not in r.json()


def test_raw_binary_request(base):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = K.request("POST", base + "/v2/models/two_out/infer", body=x.tobytes(),
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    doc, out = K.decode_outputs(r)
    assert doc["outputs"][0]["shape"] == [3, 4]  # N inferred from the byte count
    np.testing.assert_array_equal(out["sum"], x + x)
    np.testing.assert_array_equal(out["prod"], x * x)
    # Triton's form: an explicit Inference-Header-Content-Length of 0.
    r = K.request("POST", base + "/v2/models/echo/infer", body=x.tobytes(),
                  headers={"Inference-Header-Content-Length": "0"})
    np.testing.assert_array_equal(K.decode_outputs(r)[1]["output"], x)
    msg = error_of(K.request("POST", base + "/v2/models/addmul/infer", body=x.tobytes(),
                             headers={"Content-Type": "application/octet-stream"}), 400)
    assert "single input" in msg and "2 inputs" in msg
    msg = error_of(K.request("POST", base + "/v2/models/two_out/infer", body=b"\0" * 20,
                             headers={"Content-Type": "application/octet-stream"}), 400)
    assert "do not fill" in msg


def test_classification(base):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for binary in (False, True):
        r = K.infer(base, "two_out", {"x": x},
                    outputs=[("sum", {"classification": 2, "binary_data": binary})])
        doc, out = K.decode_outputs(r)
        assert r.status == 200, r
        assert doc["outputs"][0]["datatype"] == "BYTES" and doc["outputs"][0]["shape"] == [3, 2]
        s = x + x
        for row in range(3):
            order = np.argsort(-s[row], kind="stable")[:2]
            want = [("%f:%d" % (s[row][i], i)).encode() for i in order]
            assert list(out["sum"][row]) == want
    # More classes than exist: all of them; integer outputs work too.
    d = np.array([[5, -3, 9]], np.int32)
    r = K.infer(base, "id_int32", {"data": d, "scalar": np.int32(1)},
                outputs=[("data_out", {"classification": 10})])
    assert list(K.decode_outputs(r)[1]["data_out"][0]) == [b"9:2", b"5:0", b"-3:1"]
    msg = error_of(K.infer(base, "id_string", {"data": np.array([[b"a"]], object),
                                               "scalar": np.array(b"b", object)},
                           outputs=[("data_out", {"classification": 1})]), 400)
    assert "numeric" in msg


# ---------------------------------------------------------------------------
# errors

def raw_post(base, path, body, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return K.request("POST", base + path, body=body, headers=h)


def test_error_statuses_and_bodies(base):
    x = {"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}
    path = "/v2/models/two_out/infer"

    def post(doc, **kw):
        return raw_post(base, path, json.dumps(doc).encode(), **kw)

    assert "malformed" in error_of(raw_post(base, path, b"{\"inputs\": ["), 400)
    assert "not an object" in error_of(raw_post(base, path, b"[1]"), 400)
    assert "inputs is missing" in error_of(post({}), 400)
    # The protocol's datatype names, in Triton's wording.
    assert ("inference input 'x' data-type is 'FP64', but model 'two_out' expects 'FP32'"
            in error_of(post({"inputs": [dict(x, datatype="FP64")]}), 400))
    assert "received shape [2,2]" in error_of(post({"inputs": [dict(x, shape=[2, 2])]}), 400)
    assert "data has 4 elements; its shape needs 8" in error_of(
        post({"inputs": [dict(x, shape=[2, 4])]}), 400)
    assert "missing input 'x'" in error_of(post({"inputs": []}), 400)
    assert "has no input 'y'" in error_of(post({"inputs": [dict(x, name="y")]}), 400)
    assert "has no output 'nope'" in error_of(post({"inputs": [x], "outputs": [{"name": "nope"}]}),
                                              400)
    assert "is a string" in error_of(post({"inputs": [dict(x, data=[1, 2, "3", 4])]}), 400)
    assert "out of range" in error_of(raw_post(
        base, "/v2/models/id_int8/infer",
        json.dumps({"inputs": [{"name": "data", "datatype": "INT8", "shape": [1, 1], "data": [300]},
                               {"name": "scalar", "datatype": "INT8", "shape": [], "data": [1]}]}
                   ).encode()), 400)
    assert "unknown" in error_of(post({"inputs": [dict(x, datatype="FLOAT")]}), 400)
    assert "BF16" in error_of(post({"inputs": [dict(x, datatype="BF16")]}), 501)
    assert "both shared_memory_region and data" in error_of(post({"inputs": [dict(
        x, parameters={"shared_memory_region": "r"})]}), 400)
    assert "listed twice" in error_of(post({"inputs": [x], "outputs": [{"name": "sum"},
                                                                       {"name": "sum"}]}), 400)
    assert "given twice" in error_of(post({"inputs": [x, x]}), 400)
    deep = b"{\"inputs\": [{\"name\": \"x\", \"data\": " + b"[" * 100 + b"]" * 100 + b"}]}"
    assert "deeper than 64" in error_of(raw_post(base, path, deep), 400)
    # Binary framing errors.
    head = json.dumps({"inputs": [dict(x, data=None, parameters={"binary_data_size": 16})]})
    head = head.replace(', "data": null', "").encode()
    blob = np.ones(4, np.float32).tobytes()
    ok = raw_post(base, path, head + blob, {"Inference-Header-Content-Length": str(len(head))})
    assert ok.status == 200, ok
    assert "only 8 bytes" in error_of(raw_post(
        base, path, head + blob[:8], {"Inference-Header-Content-Length": str(len(head))}), 400)
    assert "follow the last binary input" in error_of(raw_post(
        base, path, head + blob + b"xx", {"Inference-Header-Content-Length": str(len(head))}), 400)
    assert "has only" in error_of(raw_post(
        base, path, head, {"Inference-Header-Content-Length": str(len(head) + 5)}), 400)
    assert "not a byte count" in error_of(raw_post(
        base, path, head, {"Inference-Header-Content-Length": "-3"}), 400)
    assert "no binary section" in error_of(raw_post(base, path, head), 400)
    # Endpoints and methods.
    msg = error_of(K.get(base + "/v2/models/two_out/infer"), 405)
    assert "use POST" in msg
    r = K.request("POST", base + "/v2/models/two_out", body=b"{}")
    assert error_of(r, 405) and r.headers["allow"] == "GET, HEAD"
    assert "no such endpoint" in error_of(K.get(base + "/v2/nothing"), 404)
    error_of(K.get(base + "/v2/models/two_out/explode"), 404)
    error_of(K.get(base + "/v2/models//ready"), 404)
    # Names a pool cannot have never reach the engine (or its logs).
    assert "no such endpoint" in error_of(K.get(base + "/v2/models/a%0Ab/ready"), 404)
    error_of(raw_post(base, "/v2/models/two%20out/infer", b"{}"), 404)


def test_json_output_of_non_utf8_bytes(base):
    data = np.array([[b"\xff\xfe"]], dtype=object)
    inputs = {"data": data, "scalar": np.array(b"ok", dtype=object)}
    msg = error_of(K.infer(base, "id_string", inputs, binary_inputs=("data", "scalar")), 400)
    assert "not UTF-8" in msg and "binary_data" in msg
    r = K.infer(base, "id_string", inputs, binary_inputs=("data", "scalar"),
                params={"binary_data_output": True})
    same(K.decode_outputs(r)[1]["data_out"], data)


# ---------------------------------------------------------------------------
# limits (the body's: test_http_serving.py)

def test_header_size_limit(base):
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), 10) as c:
        c.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 +
                  b"\r\n\r\n")
        c.settimeout(10)
        head = c.recv(4096)
    # MHD answers 431 when the headers outgrow the connection's memory limit.
    assert head.startswith(b"HTTP/1.1 431"), head
    # An ordinary large header (8 KiB) is fine.
    r = K.request("GET", base + "/v2/health/live", headers={"X-Big": "a" * 8192})
    assert r.status == 200


# ---------------------------------------------------------------------------
# concurrency: keep-alive connections

def test_64_concurrent_keepalive_connections(base, srv):
    n, per = 64, 5
    barrier = threading.Barrier(n + 1, timeout=30)
    measured = threading.Barrier(n + 1, timeout=30)
    errors, socks = [], {}

    def worker(i):
        try:
            conn = K.connection(base)
            rng = np.random.default_rng(i)
            for k in range(per):
                lhs = rng.standard_normal((2, 4)).astype(np.float32)
                rhs = rng.standard_normal((2, 4)).astype(np.float32)
                body, headers = K.build_request({"lhs": lhs, "rhs": rhs}, binary_inputs=("lhs",))
                conn.request("POST", "/v2/models/addmul/infer", body=body, headers=headers)
                resp = conn.getresponse()
                reply = K.Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()},
                                resp.read())
                assert reply.status == 200, reply
                assert reply.headers.get("connection", "").lower() != "close"
                np.testing.assert_array_equal(K.decode_outputs(reply)[1]["y"],
                                              models.addmul_ref(lhs, rhs))
                if k == 0:
                    socks[i] = conn.sock
                    barrier.wait()  # every connection open at once
                    measured.wait()  # ... until the main thread has counted them
                assert conn.sock is socks[i], "the connection was not kept alive"
            conn.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
            barrier.abort()
            measured.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    conns = srv.client().status()["connections"]["http"]
    m = metrics(base)
    measured.wait()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    assert conns >= n, conns
    assert sample(m, "sip_open_connections", transport="http") >= n


# ---------------------------------------------------------------------------
# statistics, model configuration, /metrics

def test_statistics_extension(srv, base):
    before = K.get(base + "/v2/models/addmul/stats").json()["model_stats"][0]
    a = np.ones((1, 4), np.float32)
    for _ in range(3):
        assert K.infer(base, "addmul", {"lhs": a, "rhs": a}).status == 200
    error_of(K.infer(base, "addmul", {"lhs": a}), 400)
    r = K.get(base + "/v2/models/addmul/stats")
    st = r.json()["model_stats"]
    assert r.status == 200 and len(st) == 1
    st = st[0]
    assert st["name"] == "addmul" and st["version"] == ""
    assert st["inference_count"] - before["inference_count"] == 3
    assert st["execution_count"] - before["execution_count"] == 3
    inf = st["inference_stats"]
    assert set(inf) == {"success", "fail", "queue", "compute_input", "compute_infer",
                        "compute_output"}
    assert inf["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    assert inf["fail"]["count"] - before["inference_stats"]["fail"]["count"] == 1
    assert inf["compute_infer"]["ns"] > 0 and st["last_inference"] > 0
    assert st["batch_stats"] == []
    assert st["memory_usage"][0]["type"] == "CPU" and st["memory_usage"][0]["byte_size"] >= 0
    all_stats = K.get(base + "/v2/models/stats").json()["model_stats"]
    assert {m["name"] for m in all_stats} >= {"addmul", "two_out", "vmodel", "echo"}
    assert K.get(base + "/v2/models/vmodel/versions/3/stats").json()["model_stats"][0][
        "version"] == "3"
    error_of(K.get(base + "/v2/models/vmodel/versions/2/stats"), 404)


def test_model_configuration_extension(base):
    r = K.get(base + "/v2/models/two_out/config")
    cfg = r.json()
    assert r.status == 200
    assert cfg["name"] == "two_out" and cfg["platform"] == "onnxruntime_onnx"
    assert cfg["backend"] == "onnxruntime" and cfg["max_batch_size"] == 0
    assert cfg["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 4]}]
    assert [o["name"] for o in cfg["output"]] == ["sum", "prod"]
    assert cfg["instance_group"] == [{"count": 1, "kind": "KIND_CPU"}]
    assert cfg["priority"] == "high"
    assert cfg["resource_quota"] == {"max_memory_mb": 512, "max_compute_percent": 50}
    assert cfg["backend_options"] == {"graph_optimization_level": "basic"}
    assert K.get(base + "/v2/models/id_string/config").json()["input"][0]["data_type"] == \
        "TYPE_STRING"
    assert K.get(base + "/v2/models/vmodel/versions/3/config").json()["version"] == "3"


def test_metrics_counters_move_exactly(base):
    m0 = metrics(base)
    a = np.ones((2, 4), np.float32)
    ok, bad = 7, 2
    for _ in range(ok):
        assert K.infer(base, "addmul", {"lhs": a, "rhs": a}).status == 200
    for _ in range(bad):
        error_of(K.infer(base, "addmul", {"lhs": a, "rhs": a[:, :2]}), 400)
    m1 = metrics(base)
    lab = {"pool": "addmul", "version": ""}

    def d(name, **extra):
        # A code's sample appears with its first request: none before is 0
        # (this test may run first in its server).
        before = m0.get((name, tuple(sorted(dict(lab, **extra).items()))), 0)
        return sample(m1, name, **lab, **extra) - before

    assert d("sip_requests_total", code="OK") == ok
    assert d("sip_requests_total", code="INVALID_ARGUMENT") == bad
    assert d("sip_inference_count_total") == ok
    assert d("sip_execution_count_total") == ok
    # Refused requests never queue: histograms count exactly the requests run.
    assert d("sip_request_latency_us_count") == ok
    assert d("sip_request_latency_us_bucket", le="+Inf") == ok
    assert d("sip_queue_latency_us_count") == ok
    assert d("sip_compute_latency_us_count") == ok
    assert d("sip_request_duration_us_total") > 0
    assert d("sip_compute_infer_duration_us_total") > 0
    sessions = [k for k in m1 if k[0] == "sip_session_inferences_total"
                and dict(k[1])["pool"] == "addmul"]
    assert len(sessions) == 2
    assert sum(m1[k] - m0.get(k, 0) for k in sessions) == ok
    assert sample(m1, "sip_sessions", state="READY", **lab) == 2
    assert sample(m1, "sip_pool_state", state="READY", **lab) == 1
    assert sample(m1, "sip_pool_state", state="FAILED", pool="broken", version="") == 1
    assert sample(m1, "sip_pending_requests", **lab) == 0
    assert sample(m1, "sip_pending_requests_by_priority", priority="high", **lab) == 0
    assert sample(m1, "sip_model_load_duration_ms", **lab) > 0
    assert ("sip_model_memory_bytes", tuple(sorted(lab.items()))) in m1
    assert sample(m1, "sip_request_latency_us_count", pool="vmodel", version="3") >= 0
    assert ("sip_request_latency_us_count", (("pool", "vmodel"), ("version", "3"))) in m1
    assert sample(m1, "process_resident_memory_bytes") > 1 << 20
    assert sample(m1, "process_cpu_seconds_total") > 0
    for t in ("unix", "tcp", "http"):
        assert ("sip_open_connections", (("transport", t),)) in m1
    assert sample(m1, "sip_open_connections", transport="http") >= 1
    # Histogram buckets are cumulative and end at the count.
    buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in m1.items()
                      if k[0] == "sip_request_latency_us_bucket" and dict(k[1])["pool"] == "addmul"))
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert buckets[-1][1] == sample(m1, "sip_request_latency_us_count", **lab)


# ---------------------------------------------------------------------------
# curl as the client

@pytest.mark.skipif(not CURL, reason="curl is not installed")
def test_curl_client(base, tmp_path):
    def curl(*args, data=None):
        out = subprocess.run([CURL, "-s", "-S", "-D", str(tmp_path / "h")] + list(args),
                             input=data, capture_output=True, timeout=30)
        assert out.returncode == 0, out.stderr
        head = (tmp_path / "h").read_text()
        return int(head.split()[1]), head.lower(), out.stdout

    st, _, body = curl(base + "/v2/health/ready")
    assert st == 200 and json.loads(body) == {"ready": True}
    st, _, body = curl("-X", "POST", "-H", "Content-Type: application/json", "-d",
                       '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],'
                       '"data":[[1,2,3,4]]}],"outputs":[{"name":"sum"}]}',
                       base + "/v2/models/two_out/infer")
    assert st == 200 and json.loads(body)["outputs"][0]["data"] == [2, 4, 6, 8]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    raw = tmp_path / "x.bin"
    raw.write_bytes(x.tobytes())
    st, head, body = curl("-X", "POST", "-H", "Content-Type: application/octet-stream",
                          "--data-binary", "@" + str(raw), base + "/v2/models/echo/infer")
    assert st == 200 and "inference-header-content-length:" in head
    hl = int(head.split("inference-header-content-length:")[1].split()[0])
    assert np.frombuffer(body[hl:], np.float32).tolist() == x.ravel().tolist()
    st, _, body = curl(base + "/v2/models/nope")
    assert st == 404 and "error" in json.loads(body)
    st, head, body = curl(base + "/metrics")
    assert st == 200 and "text/plain; version=0.0.4" in head and b"sip_requests_total" in body


# ---------------------------------------------------------------------------
# compressed request bodies (Content-Encoding)

def test_compressed_request_bodies(srv, base):
    import gzip
    import zlib
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    doc = {"inputs": [{"name": "lhs", "datatype": "FP32", "shape": [2, 4], "data": a.ravel().tolist()},
                      {"name": "rhs", "datatype": "FP32", "shape": [2, 4], "data": a.ravel().tolist()}]}
    plain = json.dumps(doc).encode()
    want = K.decode_outputs(K.request("POST", base + "/v2/models/addmul/infer", body=plain,
                                      headers={"Content-Type": "application/json"}))[1]
    for enc, body in (("gzip", gzip.compress(plain)), ("deflate", zlib.compress(plain)),
                      ("GZIP", gzip.compress(plain)), ("identity", plain)):
        r = K.request("POST", base + "/v2/models/addmul/infer", body=body,
                      headers={"Content-Type": "application/json", "Content-Encoding": enc})
        assert r.status == 200, (enc, r)
        got = K.decode_outputs(r)[1]
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    # A binary request: the header length counts the inflated JSON header.
    head = json.dumps({"inputs": [
        {"name": n, "datatype": "FP32", "shape": [2, 4], "parameters": {"binary_data_size": 32}}
        for n in ("lhs", "rhs")]}).encode()
    r = K.request("POST", base + "/v2/models/addmul/infer",
                  body=gzip.compress(head + a.tobytes() + a.tobytes()),
                  headers={"Inference-Header-Content-Length": str(len(head)),
                           "Content-Encoding": "gzip"})
    assert r.status == 200, r
    for k in want:
        np.testing.assert_array_equal(K.decode_outputs(r)[1][k], want[k])
    # Hostile bodies: corrupt, truncated, an unknown encoding, and a bomb
    # that inflates past server.http_max_body_bytes; sipd answers and serves on.
    for enc, body, status, frag in (
            ("gzip", b"not gzip at all", 400, "not valid gzip/deflate data"),
            ("gzip", gzip.compress(plain)[:-12], 400, "not valid gzip/deflate data"),
            ("br", plain, 400, "Content-Encoding 'br' is not supported"),
            ("gzip", gzip.compress(b" " * (65 << 20)), 413, "inflates to more than")):
        r = K.request("POST", base + "/v2/models/addmul/infer", body=body,
                      headers={"Content-Type": "application/json", "Content-Encoding": enc})
        assert frag in error_of(r, status), (enc, frag)
    r = K.request("POST", base + "/v2/models/addmul/infer", body=plain,
                  headers={"Content-Type": "application/json"})
    assert r.status == 200


def test_cuda_shared_memory_without_gpus(base):
    """As a Triton without GPUs answers: what its shared-memory examples call
    first (status, unregister) succeeds; registering is refused."""
    r = K.get(base + "/v2/cudasharedmemory/status")
    assert r.status == 200 and r.json() == []
    for path in ("/v2/cudasharedmemory/unregister", "/v2/cudasharedmemory/region/out0/unregister"):
        r = K.request("POST", base + path, body=b"{}")
        assert r.status == 200 and r.json() == {}, path
    assert "no GPUs" in error_of(K.get(base + "/v2/cudasharedmemory/region/out0/status"), 404)
    body = json.dumps({"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64}).encode()
    assert "no GPUs" in error_of(
        K.request("POST", base + "/v2/cudasharedmemory/region/in0/register", body=body), 400)
    r = K.request("GET", base + "/v2/cudasharedmemory/unregister")
    assert r.status == 405 and r.headers["allow"] == "POST"


def test_compressed_responses(base):
    import gzip
    import zlib
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    doc = json.dumps({"inputs": [
        {"name": n, "datatype": "FP32", "shape": [2, 4], "data": a.ravel().tolist()}
        for n in ("lhs", "rhs")]}).encode()
    path = base + "/v2/models/addmul/infer"
    plain = K.request("POST", path, body=doc, headers={"Content-Type": "application/json"})
    assert plain.status == 200 and "content-encoding" not in plain.headers
    for accept, enc, unpack in (("gzip", "gzip", gzip.decompress),
                                ("br, gzip;q=0.5", "gzip", gzip.decompress),
                                ("deflate", "deflate", zlib.decompress),
                                ("gzip;q=0, deflate", "deflate", zlib.decompress)):
        r = K.request("POST", path, body=doc, headers={"Content-Type": "application/json",
                                                        "Accept-Encoding": accept})
        assert r.status == 200 and r.headers.get("content-encoding") == enc, (accept, r.headers)
        assert unpack(r.body) == plain.body, accept
    for accept in ("br", "gzip;q=0", "identity"):
        r = K.request("POST", path, body=doc, headers={"Content-Type": "application/json",
                                                        "Accept-Encoding": accept})
        assert r.status == 200 and "content-encoding" not in r.headers and r.body == plain.body
    # Binary outputs: the header length is the JSON's before compression.
    body = json.dumps({"inputs": json.loads(doc)["inputs"],
                       "parameters": {"binary_data_output": True}}).encode()
    ref = K.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = K.request("POST", path, body=body, headers={"Content-Type": "application/json",
                                                    "Accept-Encoding": "gzip"})
    assert r.status == 200 and r.headers["content-encoding"] == "gzip"
    assert r.headers["inference-header-content-length"] == ref.headers["inference-header-content-length"]
    assert gzip.decompress(r.body) == ref.body
