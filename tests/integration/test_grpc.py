"""The KServe v2 gRPC front-end of a real sipd (server.grpc), driven with
Debian's python3-grpcio through stubs generated at test time from
proto/grpc_service.proto (python3-grpc-tools): health, metadata, inference
with raw and typed contents of every datatype against numpy references,
streams, deadlines, cancellation, errors and their status codes, the
statistics, shared memory and settings RPCs. test_grpc_servers.py has the
tests that need a server of their own (the repository RPCs among them)."""

import importlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from harness import serve, wait_until
import kserve as K
import models

grpc = pytest.importorskip("grpc")

REPO = Path(__file__).resolve().parents[2]

NP_OF = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
         "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
         "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64}
PROTO_OF = {"bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64",
            "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
            "float16": "FP16", "float32": "FP32", "float64": "FP64", "string": "BYTES"}
TYPED_FIELD = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
               "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
               "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
               "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """The generated modules (grpc_service_pb2, _pb2_grpc, health_pb2, _pb2_grpc)."""
    out = tmp_path_factory.mktemp("stubs")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO / "proto"),
                    "--python_out", str(out), "--grpc_python_out", str(out),
                    "grpc_service.proto", "health.proto"], check=True)
    sys.path.insert(0, str(out))
    try:
        mods = {n: importlib.import_module(n) for n in
                ("grpc_service_pb2", "grpc_service_pb2_grpc", "health_pb2", "health_pb2_grpc")}
    finally:
        sys.path.remove(str(out))

    class M:
        pass
    m = M()
    m.pb = mods["grpc_service_pb2"]
    m.svc = mods["grpc_service_pb2_grpc"]
    m.hpb = mods["health_pb2"]
    m.hsvc = mods["health_pb2_grpc"]
    return m


def grpc_address(srv):
    """host:port of the grpc://host:port sipd printed."""
    return K.printed_address(srv, "grpc")[len("grpc://"):]


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc")
    versioned = root / "vmodel"
    for v, build in (("1", models.two_out), ("3", models.addmul)):
        (versioned / v).mkdir(parents=True)
        onnx.save(build(), str(versioned / v / "model.onnx"))
    pools = [{"name": "id_" + dt, "model_path": str(model_dir["id_" + dt])} for dt in models.DTYPES]
    pools += [
        {"name": "addmul", "model_path": str(model_dir["addmul"]), "pool_size": 2},
        {"name": "two_out", "model_path": str(model_dir["two_out"])},
        {"name": "vmodel", "model_path": str(versioned)},
        {"name": "echo", "backend": "builtin", "pool_size": 2,
         "backend_options": {"shape": "-1,4"}},
        {"name": "slow", "backend": "builtin", "backend_options": {"delay_ms": 1000}},
        {"name": "b", "backend": "builtin", "backend_options": {"dtype": "bool", "shape": "-1"}},
    ]
    server = {"grpc": "127.0.0.1:0", "grpc_max_message_bytes": 1 << 20, "grpc_threads": 2,
              "http": "127.0.0.1:0"}
    with serve(root, pools, server=server) as s:
        s.grpc = grpc_address(s)
        s.http = K.http_base(s)
        yield s


@pytest.fixture(scope="module")
def stub(srv, pb):
    ch = grpc.insecure_channel(srv.grpc)
    yield pb.svc.GRPCInferenceServiceStub(ch)
    ch.close()


def code_of(excinfo):
    return excinfo.value.code()


# ---------------------------------------------------------------------------
# health and metadata

def test_live_ready_metadata(stub, pb, srv):
    assert stub.ServerLive(pb.pb.ServerLiveRequest()).live is True
    assert stub.ServerReady(pb.pb.ServerReadyRequest()).ready is True
    md = stub.ServerMetadata(pb.pb.ServerMetadataRequest())
    assert md.name == "sip" and md.version
    assert "statistics" in md.extensions and "model_repository" not in md.extensions
    assert stub.ModelReady(pb.pb.ModelReadyRequest(name="addmul")).ready is True
    # Triton: a model it does not serve is not ready (OK, ready false)
    assert stub.ModelReady(pb.pb.ModelReadyRequest(name="nope")).ready is False


def test_health_check(srv, pb):
    with grpc.insecure_channel(srv.grpc) as ch:
        h = pb.hsvc.HealthStub(ch)
        r = h.Check(pb.hpb.HealthCheckRequest())
        assert r.status == pb.hpb.HealthCheckResponse.SERVING
        r = h.Check(pb.hpb.HealthCheckRequest(service="inference.GRPCInferenceService"))
        assert r.status == pb.hpb.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as ei:
            h.Check(pb.hpb.HealthCheckRequest(service="other"))
        assert code_of(ei) == grpc.StatusCode.NOT_FOUND


def test_model_metadata(stub, pb):
    md = stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="addmul"))
    assert md.name == "addmul" and md.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == [
        ("lhs", "FP32", [-1, 4]), ("rhs", "FP32", [-1, 4])]
    assert [(t.name, t.datatype) for t in md.outputs] == [("y", "FP32")]
    vm = stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="vmodel"))
    assert list(vm.versions) == ["3"]  # the latest version serves by default
    v3 = stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="vmodel", version="3"))
    assert [t.name for t in v3.inputs] == ["lhs", "rhs"]
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="vmodel", version="1"))
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND
    assert "'vmodel' version 1 is not found" in ei.value.details()


def test_unknown_method(srv):
    with grpc.insecure_channel(srv.grpc) as ch:
        call = ch.unary_unary("/inference.GRPCInferenceService/Nope")
        with pytest.raises(grpc.RpcError) as ei:
            call(b"")
        assert code_of(ei) == grpc.StatusCode.UNIMPLEMENTED


def test_garbage_message(srv):
    with grpc.insecure_channel(srv.grpc) as ch:
        for method in ("ModelInfer", "ModelMetadata"):
            call = ch.unary_unary("/inference.GRPCInferenceService/" + method)
            with pytest.raises(grpc.RpcError) as ei:
                call(b"\xff\xff\xff\xff\x0f")
            assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT
        # A unary call that sends no message at all.
        with pytest.raises(grpc.RpcError) as ei:
            ch.stream_unary("/inference.GRPCInferenceService/ModelInfer")(iter([]))
        assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT
        assert "no request message; expected one inference.ModelInferRequest" in \
            ei.value.details(), ei.value.details()
    srv.assert_alive()


# ---------------------------------------------------------------------------
# inference

rand = models.random_array
same = models.assert_same


def raw_bytes(a):
    if a.dtype == object:
        return b"".join(len(x).to_bytes(4, "little") + bytes(x) for x in a.ravel())
    return np.ascontiguousarray(a).tobytes()


def from_raw(raw, datatype, shape):
    if datatype == "BYTES":
        out, i = [], 0
        while i < len(raw):
            n = int.from_bytes(raw[i:i + 4], "little")
            out.append(raw[i + 4:i + 4 + n])
            i += 4 + n
        a = np.empty(len(out), dtype=object)
        a[:] = out
        return a.reshape(shape)
    return np.frombuffer(raw, dtype=NP_OF[datatype]).reshape(shape)


def make_request(pb, model, inputs, typed=False, outputs=None, **kw):
    req = pb.pb.ModelInferRequest(model_name=model, **kw)
    for name, a in inputs.items():
        dt = PROTO_OF[str(a.dtype)] if a.dtype != object else "BYTES"
        t = req.inputs.add(name=name, datatype=dt, shape=list(a.shape))
        if typed:
            vals = [bytes(x) for x in a.ravel()] if dt == "BYTES" else a.ravel().tolist()
            getattr(t.contents, TYPED_FIELD[dt]).extend(vals)
        else:
            req.raw_input_contents.append(raw_bytes(a))
    for o in outputs or []:
        req.outputs.add(name=o)
    return req


def outputs_of(resp):
    assert len(resp.outputs) == len(resp.raw_output_contents)
    return {t.name: from_raw(raw, t.datatype, list(t.shape))
            for t, raw in zip(resp.outputs, resp.raw_output_contents)}


# FP16 has no typed contents field: typed float16 is test_infer_typed_fp16_refused.
@pytest.mark.parametrize("typed,dtype", [
    pytest.param(typed, dtype, id="%s-%s" % ("typed" if typed else "raw", dtype))
    for typed in (False, True) for dtype in models.DTYPES if not (typed and dtype == "float16")])
def test_infer_every_dtype(stub, pb, dtype, typed):
    rng = np.random.default_rng(7)
    data = rand(dtype, (3, 5), rng)
    scalar = rand(dtype, (), rng)
    resp = stub.ModelInfer(make_request(pb, "id_" + dtype, {"data": data, "scalar": scalar},
                                        typed=typed, id="req-%s" % dtype))
    assert resp.model_name == "id_" + dtype and resp.id == "req-%s" % dtype
    out = outputs_of(resp)
    same(out["data_out"], data)
    same(out["scalar_out"], scalar)
    assert {t.name: t.datatype for t in resp.outputs}["data_out"] == PROTO_OF[dtype]


def test_tiny_compressed_request(stub, pb):
    """A gzip-compressed message of 21 bytes, the model named by mm-model-id
    (model_name empty): the server decompresses it into a new slice and
    answers from it. Such a small slice may be one gRPC keeps inline, inside
    the slice struct; the server then gives the decoder no backing and it
    copies the bytes (src/grpc/server.c on_recv). This checks the answers on
    that path; it cannot see whether the slice was inline."""
    x = np.array([True])
    req = make_request(pb, "", {"input": x})
    assert req.ByteSize() <= 23, req.ByteSize()
    for _ in range(20):
        resp = stub.ModelInfer(req, metadata=[("mm-model-id", "b")],
                               compression=grpc.Compression.Gzip, timeout=10)
        np.testing.assert_array_equal(outputs_of(resp)["output"], x)


def test_infer_typed_fp16_refused(stub, pb):
    req = pb.pb.ModelInferRequest(model_name="id_float16")
    req.inputs.add(name="data", datatype="FP16", shape=[1, 1]).contents.fp32_contents.append(1)
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelInfer(req)
    assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT
    assert "raw_input_contents" in ei.value.details()


def test_infer_addmul_requested_output_and_version(stub, pb):
    rng = np.random.default_rng(1)
    lhs = rng.standard_normal((4, 4)).astype(np.float32)
    rhs = rng.standard_normal((4, 4)).astype(np.float32)
    resp = stub.ModelInfer(make_request(pb, "addmul", {"lhs": lhs, "rhs": rhs}, outputs=["y"]))
    np.testing.assert_allclose(outputs_of(resp)["y"], models.addmul_ref(lhs, rhs), rtol=1e-6)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    resp = stub.ModelInfer(make_request(pb, "two_out", {"x": x}, outputs=["prod"]))
    out = outputs_of(resp)
    assert list(out) == ["prod"]
    np.testing.assert_allclose(out["prod"], x * x, rtol=1e-6)
    resp = stub.ModelInfer(make_request(pb, "vmodel", {"lhs": lhs, "rhs": rhs},
                                        model_version="3"))
    assert resp.model_version == "3"
    # no version asked: the answer names the one that served, as Triton does
    resp = stub.ModelInfer(make_request(pb, "vmodel", {"lhs": lhs, "rhs": rhs}))
    assert resp.model_version == "3"
    assert stub.ModelInfer(make_request(pb, "two_out", {"x": x})).model_version == ""
    np.testing.assert_allclose(outputs_of(resp)["y"], models.addmul_ref(lhs, rhs), rtol=1e-6)


def test_infer_parameters(stub, pb):
    x = np.ones((1, 4), np.float32)
    req = make_request(pb, "echo", {"input": x})
    req.parameters["priority"].int64_param = 1
    req.parameters["timeout"].int64_param = 5000000
    req.parameters["unrelated"].string_param = "ignored"
    same(outputs_of(stub.ModelInfer(req))["output"], x)
    req.parameters["priority"].string_param = "high"
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelInfer(req)
    assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT
    assert "parameters.priority" in ei.value.details()


def infer_error(stub, req):
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelInfer(req)
    return code_of(ei), ei.value.details()


def test_infer_errors(stub, pb, srv):
    x = np.ones((2, 4), np.float32)
    code, msg = infer_error(stub, make_request(pb, "nope", {"x": x}))
    assert code == grpc.StatusCode.NOT_FOUND
    assert "Request for unknown model: 'nope' is not found" in msg
    code, msg = infer_error(stub, make_request(pb, "addmul", {"lhs": x.astype(np.float64),
                                                              "rhs": x.astype(np.float64)}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "dtype" in msg
    code, msg = infer_error(stub, make_request(pb, "addmul", {"lhs": np.ones((2, 3), np.float32),
                                                              "rhs": np.ones((2, 3), np.float32)}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "shape" in msg
    req = make_request(pb, "addmul", {"lhs": x, "rhs": x})
    req.raw_input_contents[1] = b"\0" * 7
    code, msg = infer_error(stub, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "raw_input_contents[1] holds 7 bytes; expected 32" in msg
    req = make_request(pb, "addmul", {"lhs": x, "rhs": x})
    del req.raw_input_contents[1]
    code, msg = infer_error(stub, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "one per input" in msg
    req = make_request(pb, "addmul", {"lhs": x, "rhs": x}, typed=True)
    req.inputs[0].contents.fp32_contents.append(1.0)
    code, msg = infer_error(stub, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "holds 9 elements; expected 8" in msg
    req = make_request(pb, "addmul", {"lhs": x, "rhs": x})
    req.inputs[0].datatype = "FLOAT"
    code, msg = infer_error(stub, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "'FLOAT' is not a datatype" in msg
    req = make_request(pb, "addmul", {"lhs": x, "rhs": x}, outputs=["nope"])
    code, msg = infer_error(stub, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no output 'nope'" in msg
    code, msg = infer_error(stub, pb.pb.ModelInferRequest(model_name=""))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "model_name" in msg
    req = make_request(pb, "addmul", {"lhs": x, "rhs": x}, outputs=["y"])
    req.outputs[0].parameters["classification"].int64_param = 0
    code, msg = infer_error(stub, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "classification is not an integer >= 1" in msg
    req = make_request(pb, "addmul", {"lhs": x, "rhs": x})
    req.inputs[0].parameters["classification"].int64_param = 2
    code, msg = infer_error(stub, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "classification is for outputs" in msg
    srv.assert_alive()


def test_classification(stub, pb):
    """Triton's classification extension: the top N of the last dim as BYTES
    "value:index", the same strings as over HTTP."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    req = make_request(pb, "two_out", {"x": x}, outputs=["sum", "prod"])
    req.outputs[0].parameters["classification"].int64_param = 2
    resp = stub.ModelInfer(req)
    assert [(t.name, t.datatype, list(t.shape)) for t in resp.outputs] == [
        ("sum", "BYTES", [3, 2]), ("prod", "FP32", [3, 4])]
    got = from_raw(resp.raw_output_contents[0], "BYTES", [3, 2])
    s = x + x
    for row in range(3):
        order = np.argsort(-s[row], kind="stable")[:2]
        assert list(got[row]) == [("%f:%d" % (s[row][i], i)).encode() for i in order]
    np.testing.assert_array_equal(from_raw(resp.raw_output_contents[1], "FP32", [3, 4]), x * x)
    req = make_request(pb, "id_string", {"data": np.array([[b"a"]], object),
                                         "scalar": np.array(b"b", object)}, outputs=["data_out"])
    req.outputs[0].parameters["classification"].uint64_param = 1
    code, msg = infer_error(stub, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "numeric" in msg


def test_message_size_limit(stub, pb, srv):
    big = np.zeros((1 << 18, 4), np.float32)  # 4 MiB: over the 1 MiB limit configured
    code, _ = infer_error(stub, make_request(pb, "echo", {"input": big}))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    srv.assert_alive()


def test_deadline(stub, pb, srv):
    x = np.ones((1,), np.float32)
    t0 = time.monotonic()
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelInfer(make_request(pb, "slow", {"input": x}), timeout=0.3)
    assert code_of(ei) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - t0 < 0.9
    resp = stub.ModelInfer(make_request(pb, "slow", {"input": x}), timeout=10)
    same(outputs_of(resp)["output"], x)


def test_concurrent_calls(stub, pb):
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((2, 4)).astype(np.float32) for _ in range(32)]
    futs = [stub.ModelInfer.future(make_request(pb, "echo", {"input": x}, id=str(i)))
            for i, x in enumerate(xs)]
    for i, (f, x) in enumerate(zip(futs, xs)):
        r = f.result(timeout=20)
        assert r.id == str(i)
        same(outputs_of(r)["output"], x)


def slow_successes(stub, pb):
    st = stub.ModelStatistics(pb.pb.ModelStatisticsRequest(name="slow"))
    return st.model_stats[0].inference_stats.success.count


def native(srv):
    """The module server's native client, for its status."""
    if not hasattr(srv, "native"):
        srv.native = srv.client()
    return srv.native


def slow_cancelled(srv, c):
    return srv.pool_status("slow", c)["requests"].get("CANCELLED", 0)


def slow_running_and_queued(srv, c, queued):
    """Waits until pool slow (one session, 1 s executions) runs one request
    and has `queued` more waiting."""
    def state():
        st = srv.pool_status("slow", c)
        return st["sessions"][0]["state"] == "RUNNING" and st["queued_requests"] == queued
    wait_until(state, what="pool slow to run one request with %d queued" % queued)


def after_the_queue(stub, pb, x):
    """One more request to the one-session pool slow: it runs after any
    request still queued (first come first served), so once it is answered a
    wrongly kept request would have run."""
    stub.ModelInfer(make_request(pb, "slow", {"input": x}), timeout=30)


def test_cancelled_call_cancels_its_queued_request(stub, pb, srv):
    x = np.ones((1,), np.float32)
    c = native(srv)
    before, cancelled = slow_successes(stub, pb), slow_cancelled(srv, c)
    running = stub.ModelInfer.future(make_request(pb, "slow", {"input": x}))
    slow_running_and_queued(srv, c, 0)
    queued = stub.ModelInfer.future(make_request(pb, "slow", {"input": x}))
    slow_running_and_queued(srv, c, 1)
    assert queued.cancel()
    wait_until(lambda: slow_cancelled(srv, c) == cancelled + 1, what="the queued request cancelled")
    running.result(timeout=10)
    after_the_queue(stub, pb, x)
    assert slow_successes(stub, pb) == before + 2  # the first and the one after: not the cancelled


# ---------------------------------------------------------------------------
# streams

def test_stream_answers_matched_by_id(stub, pb):
    rng = np.random.default_rng(5)
    xs = {str(i): rng.standard_normal((1, 4)).astype(np.float32) for i in range(20)}
    reqs = [make_request(pb, "echo", {"input": x}, id=i) for i, x in xs.items()]
    reqs.insert(5, make_request(pb, "nope", {"input": xs["0"]}, id="bad-model"))
    bad = make_request(pb, "echo", {"input": xs["0"]}, id="bad-size")
    bad.raw_input_contents[0] = b"123"
    reqs.insert(9, bad)
    got = {}
    for r in stub.ModelStreamInfer(iter(reqs), timeout=30):
        got[r.infer_response.id] = r
    assert set(got) == set(xs) | {"bad-model", "bad-size"}
    for i, x in xs.items():
        assert got[i].error_message == ""
        same(outputs_of(got[i].infer_response)["output"], x)
    assert "Request for unknown model: 'nope' is not found" in got["bad-model"].error_message
    assert "holds 3 bytes" in got["bad-size"].error_message


def test_stream_empty_and_garbage(stub, pb, srv):
    assert list(stub.ModelStreamInfer(iter([]), timeout=10)) == []
    with grpc.insecure_channel(srv.grpc) as ch:
        call = ch.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        out = [pb.pb.ModelStreamInferResponse.FromString(b)
               for b in call(iter([b"\xff\xff\xff"]), timeout=10)]
        assert len(out) == 1 and "not a valid inference.ModelInferRequest" in out[0].error_message


def test_stream_cancel(stub, pb, srv):
    x = np.ones((1,), np.float32)
    before = slow_successes(stub, pb)
    stop = threading.Event()

    def gen():
        for i in range(3):
            yield make_request(pb, "slow", {"input": x}, id=str(i))
        stop.wait(10)

    c = native(srv)
    cancelled = slow_cancelled(srv, c)
    it = stub.ModelStreamInfer(gen(), timeout=30)
    slow_running_and_queued(srv, c, 2)
    it.cancel()
    stop.set()
    wait_until(lambda: slow_cancelled(srv, c) == cancelled + 2, what="the two queued requests cancelled")
    after_the_queue(stub, pb, x)
    assert slow_successes(stub, pb) == before + 2  # the first and the one after
    srv.assert_alive()
    assert stub.ServerLive(pb.pb.ServerLiveRequest()).live


@pytest.mark.parametrize("typed", [False, True], ids=["raw", "typed"])
def test_infer_binary_bytes(stub, pb, typed):
    data = np.empty((2, 2), dtype=object)
    data[:] = [[b"\x00\xff\xfe", b""], [bytes(range(256)), b"\x00" * 5]]
    scalar = np.array(b"\x80", dtype=object)
    resp = stub.ModelInfer(make_request(pb, "id_string", {"data": data, "scalar": scalar},
                                        typed=typed))
    out = outputs_of(resp)
    same(out["data_out"], data)
    same(out["scalar_out"], scalar)


# ---------------------------------------------------------------------------
# configuration, statistics, repository, shared memory, settings

def test_model_config(stub, pb):
    cfg = stub.ModelConfig(pb.pb.ModelConfigRequest(name="addmul")).config
    assert cfg.name == "addmul" and cfg.platform == "onnxruntime_onnx"
    assert cfg.backend == "onnxruntime"
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [
        ("lhs", pb.pb.TYPE_FP32, [-1, 4]), ("rhs", pb.pb.TYPE_FP32, [-1, 4])]
    assert cfg.output[0].name == "y"
    assert cfg.instance_group[0].count == 2
    assert cfg.instance_group[0].kind == pb.pb.ModelInstanceGroup.KIND_CPU
    assert cfg.parameters["priority"].string_value
    s = stub.ModelConfig(pb.pb.ModelConfigRequest(name="id_string")).config
    assert s.input[0].data_type == pb.pb.TYPE_STRING
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelConfig(pb.pb.ModelConfigRequest(name="nope"))
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND


def test_model_statistics(stub, pb):
    x = np.ones((1, 4), np.float32)
    before = stub.ModelStatistics(pb.pb.ModelStatisticsRequest(name="two_out")).model_stats[0]
    for _ in range(3):
        stub.ModelInfer(make_request(pb, "two_out", {"x": x}))
    st = stub.ModelStatistics(pb.pb.ModelStatisticsRequest(name="two_out")).model_stats
    assert len(st) == 1 and st[0].name == "two_out"
    assert st[0].inference_stats.success.count == before.inference_stats.success.count + 3
    assert st[0].inference_count == before.inference_count + 3
    assert st[0].inference_stats.compute_infer.ns > 0
    assert st[0].memory_usage[0].type == "CPU"
    names = {m.name for m in stub.ModelStatistics(pb.pb.ModelStatisticsRequest()).model_stats}
    assert {"addmul", "two_out", "echo", "vmodel"} <= names
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelStatistics(pb.pb.ModelStatisticsRequest(name="nope"))
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND


def test_system_shared_memory(stub, pb, srv, tmp_path):
    key = "/sip_grpc_test_%d" % time.monotonic_ns()
    path = Path("/dev/shm" + key)
    path.write_bytes(bytes(range(64)))
    try:
        stub.SystemSharedMemoryRegister(pb.pb.SystemSharedMemoryRegisterRequest(
            name="r1", key=key, offset=16, byte_size=32))
        st = stub.SystemSharedMemoryStatus(pb.pb.SystemSharedMemoryStatusRequest())
        r = st.regions["r1"]
        assert (r.name, r.key, r.offset, r.byte_size) == ("r1", key, 16, 32)
        with pytest.raises(grpc.RpcError) as ei:
            stub.SystemSharedMemoryRegister(pb.pb.SystemSharedMemoryRegisterRequest(
                name="r1", key=key, offset=0, byte_size=8))
        assert code_of(ei) == grpc.StatusCode.ALREADY_EXISTS
        with pytest.raises(grpc.RpcError) as ei:
            stub.SystemSharedMemoryRegister(pb.pb.SystemSharedMemoryRegisterRequest(
                name="r2", key=key, offset=0, byte_size=4096))
        assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as ei:
            stub.SystemSharedMemoryRegister(pb.pb.SystemSharedMemoryRegisterRequest(
                name="r3", key="/sip_no_such_object", offset=0, byte_size=8))
        assert code_of(ei) == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as ei:
            stub.SystemSharedMemoryStatus(pb.pb.SystemSharedMemoryStatusRequest(name="r9"))
        assert code_of(ei) == grpc.StatusCode.NOT_FOUND
        stub.SystemSharedMemoryUnregister(pb.pb.SystemSharedMemoryUnregisterRequest(name="r1"))
        st = stub.SystemSharedMemoryStatus(pb.pb.SystemSharedMemoryStatusRequest())
        assert len(st.regions) == 0
    finally:
        path.unlink()


def test_infer_through_shared_memory(stub, pb):
    key = "/sip_grpc_io_%d" % time.monotonic_ns()
    path = Path("/dev/shm" + key)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    path.write_bytes(x.tobytes() + bytes(96))
    try:
        stub.SystemSharedMemoryRegister(pb.pb.SystemSharedMemoryRegisterRequest(
            name="io", key=key, offset=0, byte_size=128))
        req = pb.pb.ModelInferRequest(model_name="echo", id="shm")
        t = req.inputs.add(name="input", datatype="FP32", shape=[2, 4])
        t.parameters["shared_memory_region"].string_param = "io"
        t.parameters["shared_memory_byte_size"].int64_param = 32
        o = req.outputs.add(name="output")
        o.parameters["shared_memory_region"].string_param = "io"
        o.parameters["shared_memory_byte_size"].int64_param = 64
        o.parameters["shared_memory_offset"].int64_param = 64
        resp = stub.ModelInfer(req)
        assert resp.raw_output_contents[0] == b""
        p = resp.outputs[0].parameters
        assert p["shared_memory_region"].string_param == "io"
        assert p["shared_memory_byte_size"].int64_param == 32
        assert list(resp.outputs[0].shape) == [2, 4]
        out = np.frombuffer(path.read_bytes()[64:96], np.float32).reshape(2, 4)
        np.testing.assert_array_equal(out, x)
        # an output that does not fit; a region that is not registered
        o.parameters["shared_memory_byte_size"].int64_param = 16
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelInfer(req)
        assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT
        assert "shared_memory_byte_size is 16" in ei.value.details()
        t.parameters["shared_memory_region"].string_param = "gone"
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelInfer(req)
        assert code_of(ei) == grpc.StatusCode.NOT_FOUND
    finally:
        stub.SystemSharedMemoryUnregister(pb.pb.SystemSharedMemoryUnregisterRequest(name="io"))
        path.unlink()


def test_cuda_shared_memory_without_gpus(stub, pb):
    assert len(stub.CudaSharedMemoryStatus(pb.pb.CudaSharedMemoryStatusRequest()).regions) == 0
    stub.CudaSharedMemoryUnregister(pb.pb.CudaSharedMemoryUnregisterRequest())
    with pytest.raises(grpc.RpcError) as ei:
        stub.CudaSharedMemoryRegister(pb.pb.CudaSharedMemoryRegisterRequest(
            name="g", raw_handle=b"x", device_id=0, byte_size=8))
    assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT and "no GPUs" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        stub.CudaSharedMemoryStatus(pb.pb.CudaSharedMemoryStatusRequest(name="g"))
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND


def settings_of(resp):
    return {k: list(v.value) for k, v in resp.settings.items()}


def test_trace_settings_shared_with_http(stub, pb, srv):
    req = pb.pb.TraceSettingRequest
    got = settings_of(stub.TraceSetting(req()))
    assert got["trace_level"] == ["OFF"] and got["trace_rate"] == ["1000"]
    r = req()
    r.settings["trace_rate"].value.append("50")
    r.settings["trace_level"].value.extend(["TIMESTAMPS", "TENSORS"])
    got = settings_of(stub.TraceSetting(r))
    assert got["trace_rate"] == ["50"] and got["trace_level"] == ["TIMESTAMPS", "TENSORS"]
    assert K.get(srv.http + "/v2/trace/setting").json()["trace_rate"] == "50"
    m = req(model_name="addmul")
    m.settings["trace_count"].value.append("7")
    assert settings_of(stub.TraceSetting(m))["trace_count"] == ["7"]
    assert K.get(srv.http + "/v2/models/addmul/trace/setting").json()["trace_count"] == "7"
    clear = req(model_name="addmul")
    clear.settings["trace_count"].SetInParent()
    assert settings_of(stub.TraceSetting(clear))["trace_count"] == ["-1"]
    bad = req()
    bad.settings["trace_rate"].value.append("often")
    with pytest.raises(grpc.RpcError) as ei:
        stub.TraceSetting(bad)
    assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT and "trace_rate" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        stub.TraceSetting(req(model_name="nope"))
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND
    r = req()
    r.settings["trace_rate"].value.append("1000")
    r.settings["trace_level"].value.append("OFF")
    stub.TraceSetting(r)


def test_log_settings(stub, pb, srv):
    def values(resp):
        out = {}
        for k, v in resp.settings.items():
            out[k] = getattr(v, v.WhichOneof("parameter_choice"))
        return out
    got = values(stub.LogSettings(pb.pb.LogSettingsRequest()))
    assert got["log_info"] is True and got["log_error"] is True and got["log_format"] == "default"
    r = pb.pb.LogSettingsRequest()
    r.settings["log_verbose_level"].uint32_param = 1
    assert values(stub.LogSettings(r))["log_verbose_level"] == 1
    assert K.get(srv.http + "/v2/logging").json()["log_verbose_level"] == 1
    r.settings["log_verbose_level"].uint32_param = 0
    assert values(stub.LogSettings(r))["log_verbose_level"] == 0
    bad = pb.pb.LogSettingsRequest()
    bad.settings["log_error"].bool_param = False
    with pytest.raises(grpc.RpcError) as ei:
        stub.LogSettings(bad)
    assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT and "log_error" in ei.value.details()
    bad = pb.pb.LogSettingsRequest()
    bad.settings["colour"].bool_param = True
    with pytest.raises(grpc.RpcError) as ei:
        stub.LogSettings(bad)
    assert "unknown log setting 'colour'" in ei.value.details()

