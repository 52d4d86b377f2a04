"""End-to-end inference through a real sipd: every dtype, scalars, empty
tensors, dynamic batch, multiple outputs, introspection, both transports.
The model tests run once per backend (the `backend` fixture): ONNX models
on onnxruntime and their TorchScript twins (torch_models.py) on torchscript;
those about strings and the transports run on onnxruntime only."""

import zlib

import numpy as np
import pytest

from cann_sip import (InferenceRequest, InvalidArgumentError, NotFoundError, SessionClient)
from harness import serve
import models
import torch_pools

NUMERIC = [d for d in models.DTYPES if d != "string"]
# The dtypes each backend's identity models cover.
DTYPES_OF = {"onnxruntime": models.DTYPES, "torchscript": torch_pools.TORCH_DTYPES}
ONNX_ONLY = pytest.mark.parametrize("backend", ["onnxruntime"], indirect=True, scope="module")


@pytest.fixture(scope="module")
def srv(sipd_bin, backend, model_dir, torch_model_dir, tmp_path_factory):
    def pool(name, **kw):
        return torch_pools.pool(name, backend, model_dir, torch_model_dir, **kw)
    pools = [pool("id_" + dt, pool_size=1) for dt in DTYPES_OF[backend]]
    pools += [
        pool("addmul", pool_size=2, priority="high"),
        pool("scalar", pool_size=1),
        pool("two_out", pool_size=1, backend=backend, priority="low"),
    ]
    with serve(tmp_path_factory.mktemp("inference_" + backend), pools) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client()


def rand(dtype, shape, rng):
    if dtype == "string":
        words = ["", "a", "héllo", "\u4e2d\u6587\u5b57", "x" * 100, "tab\tnew\nline"]
        flat = np.empty(int(np.prod(shape)), dtype=object)
        for i in range(flat.size):
            flat[i] = words[rng.integers(len(words))] + str(i)
        return flat.reshape(shape)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    return (rng.standard_normal(size=shape) * 1000).astype(dt)


def expect_same(out, ref, dtype):
    if dtype == "string":
        assert out.dtype == object
        assert out.shape == ref.shape
        assert [bytes(b) for b in out.ravel()] == [s.encode("utf-8") for s in ref.ravel()]
    else:
        assert out.dtype == np.dtype(dtype), (out.dtype, dtype)
        assert out.shape == ref.shape
        # bitwise: identity must not touch a single bit (float16 included)
        assert out.tobytes() == np.ascontiguousarray(ref).tobytes()


@pytest.mark.parametrize("backend, dtype", [(b, d) for b in DTYPES_OF for d in DTYPES_OF[b]],
                         indirect=["backend"], scope="module")
@pytest.mark.parametrize("shape", [(3, 5), (1, 1), (0, 4), (6, 0), (0, 0)])
def test_identity_every_dtype(client, dtype, shape):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shape)).encode()))
    x = rand(dtype, shape, rng)
    s = rand(dtype, (), rng)
    r = client.infer(InferenceRequest("id_" + dtype, {"data": x, "scalar": s}))
    assert set(r.outputs) == {"data_out", "scalar_out"}
    expect_same(r.outputs["data_out"], x, dtype)
    expect_same(r.outputs["scalar_out"], s, dtype)
    assert r.outputs["scalar_out"].shape == ()


def test_float16_special_values(client):
    bits = np.array([[0x0000, 0x8000, 0x3C00, 0x7BFF], [0x0001, 0x7C00, 0xFC00, 0x3555]],
                    dtype=np.uint16)
    r = client.infer(InferenceRequest("id_float16", {"data": bits.view(np.float16),
                                                     "scalar": np.float16(-0.0)}))
    np.testing.assert_array_equal(r.outputs["data_out"].view(np.uint16), bits)
    assert r.outputs["scalar_out"].view(np.uint16) == 0x8000


def test_integer_extremes(client, backend):
    for dt in [d for d in ("int64", "uint64", "int8", "uint32", "uint8", "int16")
               if d in DTYPES_OF[backend]]:
        info = np.iinfo(dt)
        x = np.array([[info.min, info.max, 0, 1]], dtype=dt)
        r = client.infer(InferenceRequest("id_" + dt, {"data": x,
                                                       "scalar": np.array(info.max, dt)}))
        np.testing.assert_array_equal(r.outputs["data_out"], x)
        assert r.outputs["scalar_out"] == info.max


@ONNX_ONLY
def test_string_edge_cases(client):
    x = np.array([["", "\0", "a\0b"], ["\u00e9" * 1000, "\U0001F600", "plain"]], dtype=object)
    x[1, 2] = b"\xff\xfe raw bytes"  # not UTF-8: passed through as bytes
    r = client.infer(InferenceRequest("id_string", {"data": x, "scalar": "scalar string"}))
    y = r.outputs["data_out"]
    assert y.shape == (2, 3) and y.dtype == object
    assert y[0].tolist() == [b"", b"\0", b"a\0b"]
    assert y[1, 0] == ("\u00e9" * 1000).encode() and y[1, 1] == "\U0001F600".encode()
    assert y[1, 2] == b"\xff\xfe raw bytes"
    assert r.outputs["scalar_out"][()] == b"scalar string"


def test_python_scalar_and_list_inputs(client):
    r = client.infer(InferenceRequest("id_int64", {"data": [[1, 2, 3]], "scalar": 7}))
    assert r.outputs["data_out"].tolist() == [[1, 2, 3]] and r.outputs["scalar_out"] == 7
    r = client.infer(InferenceRequest("id_float64", {"data": [[0.5]], "scalar": 1.5}))
    assert r.outputs["data_out"].tolist() == [[0.5]] and r.outputs["scalar_out"] == 1.5
    r = client.infer(InferenceRequest("id_bool", {"data": [[True, False]], "scalar": True}))
    assert r.outputs["data_out"].tolist() == [[True, False]] and r.outputs["scalar_out"]


def test_scalar_model(client):
    v = np.array([1.0, -2.0, 3.5], dtype=np.float32)
    r = client.infer(InferenceRequest("scalar", {"scale": np.float32(2.5), "vec": v}))
    np.testing.assert_allclose(r.outputs["y"], v * np.float32(2.5), rtol=1e-6)
    assert r.outputs["scale2"].shape == () and r.outputs["scale2"].dtype == np.float32
    assert float(r.outputs["scale2"]) == 5.0
    # empty vector with a scalar
    r = client.infer(InferenceRequest("scalar", {"scale": np.float32(3),
                                                 "vec": np.zeros(0, np.float32)}))
    assert r.outputs["y"].shape == (0,)


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_dynamic_batch(client, batch):
    rng = np.random.default_rng(batch)
    a = rng.standard_normal((batch, 4)).astype(np.float32)
    b = rng.standard_normal((batch, 4)).astype(np.float32)
    r = client.infer(InferenceRequest("addmul", {"lhs": a, "rhs": b}))
    y = r.outputs["y"]
    assert y.shape == (batch, 4) and y.dtype == np.float32
    np.testing.assert_allclose(y, models.addmul_ref(a, b), rtol=1e-6, atol=1e-6)


def test_empty_batch(client):
    a = np.zeros((0, 4), np.float32)
    r = client.infer(InferenceRequest("addmul", {"lhs": a, "rhs": a}))
    assert r.outputs["y"].shape == (0, 4)


def test_two_outputs_and_selection(client):
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    r = client.infer(InferenceRequest("two_out", {"x": x}))
    assert set(r.outputs) == {"sum", "prod"}
    np.testing.assert_array_equal(r.outputs["sum"], x + x)
    np.testing.assert_array_equal(r.outputs["prod"], x * x)
    r = client.infer(InferenceRequest("two_out", {"x": x}, outputs=["prod"]))
    assert list(r.outputs) == ["prod"]
    np.testing.assert_array_equal(r.outputs["prod"], x * x)
    r = client.infer(InferenceRequest("two_out", {"x": x}, outputs=["prod", "sum"]))
    assert list(r.outputs) == ["prod", "sum"]
    with pytest.raises((InvalidArgumentError, NotFoundError)) as ei:
        client.infer(InferenceRequest("two_out", {"x": x}, outputs=["nope"]))
    assert "nope" in ei.value.message


def test_pipelined_async(client):
    rng = np.random.default_rng(5)
    reqs = []
    for i in range(300):
        a = rng.standard_normal((1 + i % 5, 4)).astype(np.float32)
        b = np.full_like(a, i)
        reqs.append((a, b, client.infer_async(InferenceRequest("addmul", {"lhs": a, "rhs": b}))))
    for a, b, f in reqs:
        np.testing.assert_allclose(f.result(timeout=60).outputs["y"], models.addmul_ref(a, b),
                                   rtol=1e-6)


def test_request_id_and_timings(client):
    rid = 2 ** 64 - 2
    r = client.infer(InferenceRequest("addmul", {"lhs": np.ones((1, 4), np.float32),
                                                 "rhs": np.ones((1, 4), np.float32)},
                                      request_id=rid, timeout_ms=5000, priority="low"))
    assert r.request_id == rid
    t = r.timings
    assert set(t) == {"queue_us", "compute_us", "total_us"}
    assert all(isinstance(v, int) and v >= 0 for v in t.values())
    assert t["total_us"] >= t["compute_us"] and t["total_us"] >= t["queue_us"]
    assert 0 < r.latency_ms < 10000
    # the client's round trip contains the server's time (1 ms of slack for clocks)
    assert r.latency_ms * 1000 + 1000 >= t["total_us"]


def test_ready_document(client, backend):
    doc = client.info(1)
    assert doc["ready"] is True and doc["live"] is True
    assert doc["pools"]["addmul"] == "READY"
    assert set(doc["pools"]) >= {"id_" + d for d in DTYPES_OF[backend]} | {"scalar", "two_out"}
    assert client.ready() is True


def test_pools_document(client, backend):
    pools = {p["name"]: p for p in client.pools()}
    assert len(pools) == len(DTYPES_OF[backend]) + 3
    am = pools["addmul"]
    assert am["state"] == "READY" and am["error"] is None
    assert am["backend"] == backend
    assert am["pool_size"] == 2 and am["priority"] == "high"
    assert pools["two_out"]["priority"] == "low"
    assert pools["scalar"]["priority"] == "medium"  # the default
    assert am["inputs"] == [{"name": "lhs", "dtype": "float32", "shape": [-1, 4]},
                            {"name": "rhs", "dtype": "float32", "shape": [-1, 4]}]
    assert am["outputs"] == [{"name": "y", "dtype": "float32", "shape": [-1, 4]}]
    assert pools["scalar"]["inputs"] == [{"name": "scale", "dtype": "float32", "shape": []},
                                         {"name": "vec", "dtype": "float32", "shape": [-1]}]
    for dt in DTYPES_OF[backend]:
        p = pools["id_" + dt]
        assert p["inputs"] == [{"name": "data", "dtype": dt, "shape": [-1, -1]},
                               {"name": "scalar", "dtype": dt, "shape": []}], p
        assert [o["name"] for o in p["outputs"]] == ["data_out", "scalar_out"]
    assert [o["name"] for o in pools["two_out"]["outputs"]] == ["sum", "prod"]


def test_status_counts_requests(srv, client):
    before = srv.pool_status("two_out", client)
    n = 5
    for _ in range(n):
        client.infer(InferenceRequest("two_out", {"x": np.ones((2, 4), np.float32)}))
    after = srv.pool_status("two_out", client)
    assert after["state"] == "READY"
    assert after["requests"].get("OK", 0) - before["requests"].get("OK", 0) == n
    assert sum(s["inferences"] for s in after["sessions"]) - \
        sum(s["inferences"] for s in before["sessions"]) == n
    assert len(after["sessions"]) == 1
    sess = after["sessions"][0]
    assert sess["id"] == "two_out/0" and sess["state"] == "READY"
    for k in ("queue", "compute", "total"):
        h = after["latency_us"][k]
        assert h["count"] - before["latency_us"][k]["count"] == n
        assert h["buckets"][-1][0] == "+Inf" and h["buckets"][-1][1] == h["count"]
        counts = [c for _, c in h["buckets"]]
        assert counts == sorted(counts)  # cumulative
    assert after["queued_requests"] == 0
    assert set(after["queued_by_priority"]) == {"high", "medium", "low", "delayed"}
    assert after["active_sessions"] == 1
    assert after["load_ms"] >= 0 and after["model_bytes"] > 0


def test_status_document(client):
    st = client.status()
    assert st["uptime_s"] > 0
    am = [p for p in st["pools"] if p["name"] == "addmul"][0]
    assert [s["id"] for s in am["sessions"]] == ["addmul/0", "addmul/1"]
    assert am["active_sessions"] == 2


@ONNX_ONLY
@pytest.mark.parametrize("which", ["unix", "unix_scheme", "tcp"])
def test_endpoints(srv, which):
    ep = {"unix": srv.unix_endpoint, "unix_scheme": srv.unix_endpoint.replace("ipc://", "unix://"),
          "tcp": srv.tcp_endpoint}[which]
    with SessionClient(ep, timeout_s=20) as c:
        assert c.ready()
        x = np.random.default_rng(3).standard_normal((7, 4)).astype(np.float32)
        r = c.infer(InferenceRequest("two_out", {"x": x}))
        np.testing.assert_array_equal(r.outputs["prod"], x * x)
        s = np.array([["tcp", "and"], ["unix", "é"]], dtype=object)
        r = c.infer(InferenceRequest("id_string", {"data": s, "scalar": "z"}))
        assert r.outputs["data_out"].tolist() == [[b"tcp", b"and"], [b"unix", "é".encode()]]


@ONNX_ONLY
def test_large_tensor_over_tcp(srv):
    with SessionClient(srv.tcp_endpoint, timeout_s=60) as c:
        x = np.random.default_rng(4).standard_normal((1024, 4096)).astype(np.float32)  # 16 MiB
        r = c.infer(InferenceRequest("id_float32", {"data": x, "scalar": np.float32(0)}))
        assert r.outputs["data_out"].tobytes() == x.tobytes()
