"""The TorchScript backend (backend: torchscript) on a real sipd: a seeded
MLP against torch in this process, dict results, dynamic batching, one
module shared by a pool's sessions under concurrent clients, a pool in a
worker process, server.intra_op_threads reaching libtorch, KServe metadata
(platform pytorch_libtorch), the declaration and load errors, the choice of
the backend by a .pt file (pool and repository version), and a
pipeline that runs an ONNX stage then a TorchScript stage over the native
protocol, KServe HTTP (JSON and binary) and KServe gRPC. The tests every
backend shares run for this one too (the `backend` fixture of
test_inference.py)."""

import subprocess
import sys
import threading

import numpy as np
import pytest

import harness
import kserve as K
import models
import torch_models as T
from cann_sip import FailedPreconditionError, InferenceRequest, InvalidArgumentError

F = np.float32


def ts_pool(name, torch_dir, **kw):
    return T.pool(name, "torchscript", None, torch_dir, **kw)


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, torch_model_dir, tmp_path_factory):
    pools = [
        ts_pool("mlp", torch_model_dir, pool_size=3),
        ts_pool("mlp", torch_model_dir, pool_name="mlp_batched", pool_size=1,
                dynamic_batching={"max_batch_size": 16, "max_queue_delay_us": 4000}),
        ts_pool("named", torch_model_dir),
        # addmul declaring a dtype its forward() does not return
        ts_pool("addmul", torch_model_dir, pool_name="wrong_out",
                backend_options={"inputs": "lhs:float32[-1,4]; rhs:float32[-1,4]",
                                 "outputs": "y:float64[-1,4]"}),
        # mlp with its input declared of any shape: forward() itself rejects bad ones
        ts_pool("mlp", torch_model_dir, pool_name="mlp_any",
                backend_options={"inputs": "x:float32", "outputs": "y:float32"}),
        # the module loaded in a worker process of its own
        ts_pool("mlp", torch_model_dir, pool_name="mlp_iso", isolation="process"),
        {"name": "two_out", "model_path": str(model_dir["two_out"])},
    ]
    pipelines = [{"name": "mixed", "stages": [
        {"name": "onnx", "pool": "two_out"},  # sum = x + x, prod = x * x
        {"name": "torch", "pool": "mlp", "input_mapping": {"x": "onnx.sum"}},
    ]}]
    s = harness.SipServer(tmp_path_factory.mktemp("torchscript"), pools,
                          server={"http": "127.0.0.1:0", "grpc": "127.0.0.1:0"})
    cfg = s.config()
    cfg["pipeline_sessions"] = pipelines
    s.config = lambda: cfg
    s.start()
    try:
        s.http = K.http_base(s)
        s.grpc = K.printed_address(s, "grpc")[len("grpc://"):]
        yield s
    except BaseException:
        s.kill()
        raise
    assert s.stop() == 0, s.log_tail()


@pytest.fixture(scope="module")
def client(srv):
    return srv.client(timeout_s=60)


def rows(n, seed):
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(F)


@pytest.mark.parametrize("n", [1, 5, 33])
def test_mlp_equals_torch(client, n):
    x = rows(n, n)
    r = client.infer(InferenceRequest("mlp", {"x": x}))
    y = r.outputs["y"]
    assert y.shape == (n, 3) and y.dtype == F
    np.testing.assert_allclose(y, T.mlp_ref(x), rtol=1e-5, atol=1e-6)


def test_isolated_in_a_worker_process(client):
    x = rows(4, 31)
    r = client.infer(InferenceRequest("mlp_iso", {"x": x}))
    np.testing.assert_allclose(r.outputs["y"], T.mlp_ref(x), rtol=1e-5, atol=1e-6)


def test_dict_result_by_key(client):
    x = np.arange(6, dtype=F).reshape(3, 2)
    r = client.infer(InferenceRequest("named", {"x": x}))
    assert list(r.outputs) == ["double", "count"]
    np.testing.assert_array_equal(r.outputs["double"], x * 2)
    assert r.outputs["count"].dtype == np.int64 and r.outputs["count"].tolist() == [3]
    r = client.infer(InferenceRequest("named", {"x": x}, outputs=["count"]))
    assert list(r.outputs) == ["count"]


def concurrent(client, pool, threads, per_thread):
    errors, sent = [], [0] * threads

    def work(t):
        rng = np.random.default_rng(100 + t)
        try:
            for i in range(per_thread):
                x = rng.standard_normal((int(rng.integers(1, 4)), 4)).astype(F)
                y = client.infer(InferenceRequest(pool, {"x": x})).outputs["y"]
                np.testing.assert_allclose(y, T.mlp_ref(x), rtol=1e-5, atol=1e-6,
                                           err_msg="thread %d request %d" % (t, i))
                sent[t] += x.shape[0]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts), "client threads did not finish"
    if errors:
        raise errors[0]
    return sum(sent)


def test_sessions_share_one_module_concurrently(srv, client):
    before = srv.pool_status("mlp", client)
    concurrent(client, "mlp", threads=12, per_thread=10)
    st = srv.pool_status("mlp", client)
    assert len(st["sessions"]) == 3
    assert st["requests"].get("OK", 0) - before["requests"].get("OK", 0) == 120
    # every session took part: the three share the one module
    done = [s["inferences"] for s in st["sessions"]]
    assert sum(done) - sum(s["inferences"] for s in before["sessions"]) == 120


def test_dynamic_batching_merges_requests(srv, client):
    rows_sent = concurrent(client, "mlp_batched", threads=16, per_thread=8)
    st = srv.pool_status("mlp_batched", client)
    assert st["stats"]["inference_count"] == 128
    assert st["batch_sizes"]["sum"] == rows_sent
    assert st["stats"]["execution_count"] < 128, st["batch_sizes"]


def test_pool_document_and_kserve_metadata(srv, client):
    pools = {p["name"]: p for p in client.pools()}
    assert pools["mlp"]["backend"] == "torchscript"
    assert pools["mlp"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 4]}]
    assert pools["mlp"]["outputs"] == [{"name": "y", "dtype": "float32", "shape": [-1, 3]}]
    doc = K.get(srv.http + "/v2/models/mlp").json()
    assert doc["platform"] == "pytorch_libtorch"
    assert doc["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert doc["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}]
    assert K.get(srv.http + "/v2/models/two_out").json()["platform"] == "onnxruntime_onnx"


def test_output_of_another_dtype_than_declared(client):
    a = np.ones((2, 4), F)
    with pytest.raises(FailedPreconditionError) as ei:
        client.infer(InferenceRequest("wrong_out", {"lhs": a, "rhs": a}))
    assert "output 'y' is Float; backend option outputs declares float64" in ei.value.message


def test_model_rejecting_its_input(client):
    with pytest.raises(InvalidArgumentError) as ei:
        client.infer(InferenceRequest("mlp_any", {"x": np.ones((2, 5), F)}))
    assert "torchscript: run failed" in ei.value.message
    assert "mat1 and mat2 shapes cannot be multiplied (2x5 and 4x8)" in ei.value.message
    # the server carries on
    x = rows(2, 7)
    np.testing.assert_allclose(client.infer(InferenceRequest("mlp_any", {"x": x})).outputs["y"],
                               T.mlp_ref(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# a pipeline of an ONNX stage and a TorchScript stage

def mixed_ref(x):
    return T.mlp_ref(x + x)


def test_mixed_pipeline_native(client):
    x = rows(5, 11)
    r = client.infer(InferenceRequest("mixed", {"x": x}))
    np.testing.assert_allclose(r.outputs["y"], mixed_ref(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(r.stage_outputs["onnx"]["sum"], x + x)
    assert all(s["status"] == "ran" for s in r.stages.values())


@pytest.mark.parametrize("binary", [False, True])
def test_mixed_pipeline_kserve_http(srv, binary):
    x = rows(3, 12)
    r = K.infer(srv.http, "mixed", {"x": x}, binary_inputs=("x",) if binary else ())
    assert r.status == 200, r
    doc, out = K.decode_outputs(r)
    np.testing.assert_allclose(out["y"], mixed_ref(x), rtol=1e-5, atol=1e-5)
    assert out["y"].shape == (3, 3)


def test_mixed_pipeline_kserve_grpc(srv, tmp_path):
    grpc = pytest.importorskip("grpc")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I",
                    str(harness.REPO / "proto"), "--python_out", str(tmp_path),
                    "--grpc_python_out", str(tmp_path), "grpc_service.proto"], check=True)
    sys.path.insert(0, str(tmp_path))
    try:
        import grpc_service_pb2 as pb
        import grpc_service_pb2_grpc as svc
    finally:
        sys.path.remove(str(tmp_path))
    x = rows(4, 13)
    req = pb.ModelInferRequest(model_name="mixed")
    req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(x.tobytes())
    with grpc.insecure_channel(srv.grpc) as ch:
        resp = svc.GRPCInferenceServiceStub(ch).ModelInfer(req, timeout=30)
        meta = svc.GRPCInferenceServiceStub(ch).ModelMetadata(
            pb.ModelMetadataRequest(name="mlp"), timeout=30)
    assert meta.platform == "pytorch_libtorch"
    got = {t.name: (t, raw) for t, raw in zip(resp.outputs, resp.raw_output_contents)}
    t, raw = got["y"]
    assert t.datatype == "FP32" and list(t.shape) == [4, 3]
    np.testing.assert_allclose(np.frombuffer(raw, F).reshape(4, 3), mixed_ref(x), rtol=1e-5,
                               atol=1e-6)


# ---------------------------------------------------------------------------
# declarations and loading

@pytest.mark.parametrize("options, message", [
    ({"outputs": "y:float32[-1,3]"},
     "backend_options must declare inputs (a TorchScript file does not record dtypes or shapes)"),
    ({"inputs": "x:float32[-1,4]"}, "backend_options must declare outputs"),
    ({"inputs": "z:float32[-1,4]", "outputs": "y:float32[-1,3]"},
     "declared input 'z' is not a parameter of forward(); its parameters are: x"),
    ({"inputs": "x:uint16[-1,4]", "outputs": "y:float32[-1,3]"},
     "dtype uint16 has no libtorch equivalent"),
    ({"inputs": "x:float32[-1,4", "outputs": "y:float32[-1,3]"}, "does not end its dims with ']'"),
    ({"inputs": "x:float32[-1,4]", "outputs": "y:float32; z:float32"},
     "forward() returns one tensor; backend option outputs declares 2"),
])
def test_declaration_errors_fail_the_pool(start_sipd, torch_model_dir, options, message):
    s = start_sipd([ts_pool("mlp", torch_model_dir, pool_name="bad", backend_options=options),
                    ts_pool("mlp", torch_model_dir, pool_name="good")])
    c = s.client()
    pools = {p["name"]: p for p in c.pools()}
    assert pools["good"]["state"] == "READY"
    assert pools["bad"]["state"] == "FAILED"
    assert message in pools["bad"]["error"]


def test_unknown_option_refused_at_config_check(sipd_bin, torch_model_dir, tmp_path):
    cfg = tmp_path / "sip.yaml"
    cfg.write_text(harness.to_yaml({"session_pools": [ts_pool(
        "mlp", torch_model_dir, backend_options=dict(T.OPTIONS["mlp"], freeze="true"))]}) + "\n")
    r = subprocess.run([str(sipd_bin), "--check-config", str(cfg)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1, r
    assert ("session_pools[0].backend_options.freeze: unknown option of backend torchscript; "
            "expected one of inputs, outputs") in r.stderr + r.stdout


def test_not_a_torchscript_file(start_sipd, torch_model_dir, tmp_path):
    bad = models.write_corrupt(tmp_path / "junk.pt")
    s = start_sipd([{"name": "junk", "model_path": str(bad), "backend": "torchscript",
                     "backend_options": dict(T.OPTIONS["mlp"])},
                    ts_pool("mlp", torch_model_dir)])
    pools = {p["name"]: p for p in s.client().pools()}
    assert pools["junk"]["state"] == "FAILED"
    assert "torchscript: cannot load model" in pools["junk"]["error"]
    assert "expected a TorchScript file saved by torch.jit.save" in pools["junk"]["error"]
    assert pools["mlp"]["state"] == "READY"


# ---------------------------------------------------------------------------
# chosen by the model file

def test_pt_file_without_backend_is_torchscript(start_sipd, torch_model_dir):
    s = start_sipd([{"name": "mlp", "model_path": str(torch_model_dir["mlp"]),
                     "backend_options": dict(T.OPTIONS["mlp"])}])
    c = s.client()
    assert {p["name"]: p for p in c.pools()}["mlp"]["backend"] == "torchscript"
    x = rows(3, 21)
    np.testing.assert_allclose(c.infer(InferenceRequest("mlp", {"x": x})).outputs["y"],
                               T.mlp_ref(x), rtol=1e-5, atol=1e-6)


def test_repository_version_of_model_pt(start_sipd, torch_model_dir, tmp_path):
    repo = tmp_path / "repo"
    (repo / "mlp" / "1").mkdir(parents=True)
    (repo / "mlp" / "1" / "model.pt").write_bytes(torch_model_dir["mlp"].read_bytes())
    (repo / "mlp" / "config.yaml").write_text(
        "backend_options: {inputs: \"%s\", outputs: \"%s\"}\n"
        % (T.OPTIONS["mlp"]["inputs"], T.OPTIONS["mlp"]["outputs"]))
    s = start_sipd([], server={"model_repository": str(repo)})
    c = s.client()
    pool = [p for p in c.pools() if p["name"].startswith("mlp")][0]
    assert pool["backend"] == "torchscript" and pool["state"] == "READY", pool
    x = rows(2, 22)
    np.testing.assert_allclose(c.infer(InferenceRequest("mlp:1", {"x": x})).outputs["y"],
                               T.mlp_ref(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# server.intra_op_threads reaches libtorch

def threads_of(pid):
    import os
    return len(os.listdir("/proc/%d/task" % pid))


@pytest.mark.parametrize("intra", [1, 3])
def test_intra_op_threads_setting(start_sipd, torch_model_dir, intra):
    """libtorch's OpenMP team for a large elementwise op: intra_op_threads - 1
    worker threads appear with the first such execution, none with 1."""
    s = start_sipd([ts_pool("addmul", torch_model_dir)], server={"intra_op_threads": intra})
    c = s.client(timeout_s=60)
    small = np.ones((1, 4), F)
    c.infer(InferenceRequest("addmul", {"lhs": small, "rhs": small}))  # everything else started
    before = threads_of(s.proc.pid)
    big = np.ones((200000, 4), F)  # 800k elements: libtorch splits it across its threads
    r = c.infer(InferenceRequest("addmul", {"lhs": big, "rhs": big}))
    np.testing.assert_array_equal(r.outputs["y"][:2], np.full((2, 4), 2, F))
    assert threads_of(s.proc.pid) - before == intra - 1
