"""The KServe v2 gRPC front-end of a real sipd (server.grpc), driven with
Debian's python3-grpcio through stubs generated at test time from
proto/grpc_service.proto (python3-grpc-tools): health, metadata, inference
with raw and typed contents of every datatype against numpy references,
streams, deadlines, cancellation, errors and their status codes, the
repository, statistics, shared memory and settings RPCs."""

import importlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from harness import serve
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
        {"name": "slow", "backend": "builtin", "backend_options": {"sleep_ms": 3000}},
    ]
    with serve(root, pools, server={"grpc": "127.0.0.1:0", "grpc_max_message_bytes": 1 << 20}) as s:
        s.grpc = grpc_address(s)
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
    with pytest.raises(grpc.RpcError) as ei:
        stub.ModelReady(pb.pb.ModelReadyRequest(name="nope"))
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND
    assert "Request for unknown model: 'nope' is not found" in ei.value.details()


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
    srv.assert_alive()
