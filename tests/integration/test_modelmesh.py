"""sip as a native ModelMesh runtime: ModelMesh's model runtime SPI
(mmesh.ModelRuntime, proto/mmesh_model_runtime.proto) on sipd's gRPC port,
driven with grpcio as ModelMesh drives it: runtimeStatus while sipd starts
and once it is ready, predictModelSize, loadModel of files fetched outside
the repository, modelSize, ModelInfer forwarded with `mm-model-id`
metadata (compared with numpy), unloadModel, and the errors a bad id or
path gets. Stubs are generated at test time with grpc_tools."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import harness
from harness import wait_until
import kserve as K
import models

grpc = pytest.importorskip("grpc")

REPO = Path(__file__).resolve().parents[2]
INFER = "inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    out = tmp_path_factory.mktemp("stubs")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO / "proto"),
                    "--python_out", str(out), "--grpc_python_out", str(out),
                    "mmesh_model_runtime.proto", "grpc_service.proto"], check=True)
    sys.path.insert(0, str(out))
    try:
        names = ("mmesh_model_runtime_pb2", "mmesh_model_runtime_pb2_grpc", "grpc_service_pb2",
                 "grpc_service_pb2_grpc")
        mods = {n: importlib.import_module(n) for n in names}
    finally:
        sys.path.remove(str(out))

    class M:
        mm = mods["mmesh_model_runtime_pb2"]
        mmsvc = mods["mmesh_model_runtime_pb2_grpc"]
        pb = mods["grpc_service_pb2"]
        svc = mods["grpc_service_pb2_grpc"]
    return M


class Runtime:
    """A sipd with an empty model repository (model_control: explicit), as
    deploy/modelmesh/sip.yaml runs it, and stubs on its gRPC port."""

    def __init__(self, root, pb, repo=None, pools=(), until_ready=True):
        self.repo = Path(repo or root / "repo")
        self.repo.mkdir(parents=True, exist_ok=True)
        server = {"model_repository": str(self.repo), "model_control": "explicit",
                  "grpc": "127.0.0.1:0"}
        self.srv = harness.SipServer(root / "srv", list(pools), server=server)
        self.srv.start(until_ready=until_ready)
        try:
            address = K.printed_address(self.srv, "grpc")[len("grpc://"):]
        except BaseException:
            self.srv.kill()
            raise
        self.ch = grpc.insecure_channel(address)
        self.rt = pb.mmsvc.ModelRuntimeStub(self.ch)
        self.kv2 = pb.svc.GRPCInferenceServiceStub(self.ch)
        self.pb = pb

    def close(self):
        self.ch.close()
        rc = self.srv.stop()
        assert rc == 0, "sipd exited with %s:\n%s" % (rc, self.srv.log_tail())

    def load(self, model_id, path, model_type="onnx"):
        return self.rt.loadModel(self.pb.mm.LoadModelRequest(
            modelId=model_id, modelType=model_type, modelPath=str(path), modelKey="{}"),
            timeout=60)

    def unload(self, model_id):
        return self.rt.unloadModel(self.pb.mm.UnloadModelRequest(modelId=model_id), timeout=60)

    def size(self, model_id):
        return self.rt.modelSize(self.pb.mm.ModelSizeRequest(modelId=model_id), timeout=10)

    def status(self):
        return self.rt.runtimeStatus(self.pb.mm.RuntimeStatusRequest(), timeout=30)

    def infer(self, model_id, lhs, rhs, model_name=""):
        """ModelInfer as ModelMesh forwards it: the id in mm-model-id."""
        req = self.pb.pb.ModelInferRequest(model_name=model_name)
        for name, a in (("lhs", lhs), ("rhs", rhs)):
            t = req.inputs.add()
            t.name, t.datatype = name, "FP32"
            t.shape.extend(a.shape)
            req.raw_input_contents.append(a.tobytes())
        md = [("mm-model-id", model_id), ("mm-vmodel-id", "v-" + model_id)]
        r = self.kv2.ModelInfer(req, metadata=md, timeout=30)
        return np.frombuffer(r.raw_output_contents[0], np.float32).reshape(r.outputs[0].shape)

    def memory_of(self, name):
        """What ModelStatistics reports for the model (the measured bytes)."""
        st = self.kv2.ModelStatistics(self.pb.pb.ModelStatisticsRequest(name=name), timeout=10)
        return sum(m.memory_usage[0].byte_size for m in st.model_stats)


@pytest.fixture
def runtime(tmp_path, pb, sipd_bin):
    rts = []

    def start(**kw):
        rts.append(Runtime(tmp_path / ("rt%d" % len(rts)), pb, **kw))
        return rts[-1]
    yield start
    failures = []
    for r in rts:
        try:
            r.close()
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def fetched(root, model_id, file_name="addmul.onnx"):
    """Files as ModelMesh's puller leaves them: <root>/<model id>/<file>."""
    d = Path(root) / model_id
    d.mkdir(parents=True)
    onnx.save(models.addmul(), str(d / file_name))
    return d


def code_of(ei):
    return ei.value.code()


LHS = np.arange(8, dtype=np.float32).reshape(2, 4)
RHS = np.full((2, 4), 1.5, np.float32)


# ---------------------------------------------------------------------------

def test_status_starting_then_ready(runtime, pb):
    """STARTING while sipd loads its pools, READY once it is ready, with
    the runtime's limits and the inference method ModelMesh may forward."""
    rt = runtime(pools=[{"name": "slow", "backend": "builtin",
                         "backend_options": {"load_delay_ms": 5000}}], until_ready=False)
    first = rt.status()
    ready_now = rt.kv2.ServerReady(pb.pb.ServerReadyRequest(), timeout=10).ready
    assert not ready_now, "the server was ready before its 5 s load ended"
    assert first.status == pb.mm.RuntimeStatusResponse.STARTING
    st = wait_until(lambda: (lambda s: s if s.status == pb.mm.RuntimeStatusResponse.READY
                             else None)(rt.status()), 60, "runtimeStatus READY")
    assert rt.kv2.ServerReady(pb.pb.ServerReadyRequest(), timeout=10).ready
    md = rt.kv2.ServerMetadata(pb.pb.ServerMetadataRequest(), timeout=10)
    assert st.runtimeVersion == md.version and st.runtimeVersion
    assert st.maxLoadingConcurrency == 1
    assert st.modelLoadingTimeoutMs > 0 and st.defaultModelSizeInBytes > 0
    assert not st.limitModelConcurrency and not st.allowAnyMethod
    assert list(st.methodInfos[INFER].idInjectionPath) == [1]
    # model_name is field 1 of ModelInferRequest: where ModelMesh may put the id
    assert pb.pb.ModelInferRequest.DESCRIPTOR.fields_by_number[1].name == "model_name"
    mem_total = int(next(l.split()[1] for l in open("/proc/meminfo")
                         if l.startswith("MemTotal:"))) << 10
    assert 0 < st.capacityInBytes <= mem_total


def test_load_size_infer_unload(runtime, pb, tmp_path):
    rt = runtime()
    model_id = "addmul__isvc-5d8e9f"
    src = fetched(tmp_path / "models", model_id)
    pred = rt.rt.predictModelSize(pb.mm.PredictModelSizeRequest(
        modelId=model_id, modelType="onnx", modelPath=str(src)), timeout=10)
    assert pred.sizeInBytes == 2 * os.path.getsize(src / "addmul.onnx") + (1 << 20)

    r = rt.load(model_id, src)
    assert r.sizeInBytes > 0 and r.maxConcurrency == 1
    # sizeInBytes is what the pool measured when it loaded
    assert r.sizeInBytes == rt.memory_of(model_id)
    assert rt.size(model_id).sizeInBytes == r.sizeInBytes
    # imported into the repository by a hard link, beside a marker
    placed = rt.repo / model_id / "1" / "model.onnx"
    assert placed.stat().st_ino == (src / "addmul.onnx").stat().st_ino
    assert (rt.repo / model_id / ".sip-import").read_text().split("\n")[0] == str(src)
    idx = rt.kv2.RepositoryIndex(pb.pb.RepositoryIndexRequest(), timeout=10)
    assert [(m.name, m.state) for m in idx.models] == [(model_id, "READY")]

    ref = models.addmul_ref(LHS, RHS)
    np.testing.assert_allclose(rt.infer(model_id, LHS, RHS), ref, rtol=1e-6)
    # the header wins over whatever model_name says
    np.testing.assert_allclose(rt.infer(model_id, LHS, RHS, model_name="elsewhere"), ref,
                               rtol=1e-6)
    meta = rt.kv2.ModelMetadata(pb.pb.ModelMetadataRequest(), metadata=[("mm-model-id", model_id)],
                                timeout=10)
    assert meta.name == model_id and [i.name for i in meta.inputs] == ["lhs", "rhs"]
    # loading it again from the same path changes nothing
    assert rt.load(model_id, src).sizeInBytes == r.sizeInBytes

    rt.unload(model_id)
    assert not (rt.repo / model_id).exists()
    assert (src / "addmul.onnx").exists()  # the fetched files are the puller's
    with pytest.raises(grpc.RpcError) as ei:
        rt.size(model_id)
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND and model_id in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        rt.infer(model_id, LHS, RHS)
    assert code_of(ei) in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
    # unloading what is not loaded is fine, as ModelMesh expects
    rt.unload(model_id)
    rt.unload("never-loaded")
    idx = rt.kv2.RepositoryIndex(pb.pb.RepositoryIndexRequest(), timeout=10)
    assert list(idx.models) == []


def test_import_brings_its_settings_file(runtime, pb, tmp_path):
    """A fetched directory with Triton's config.pbtxt (and no config.yaml):
    the import places it beside the model, so the pool gets its settings."""
    rt = runtime()
    model_id = "addmul-triton"
    src = fetched(tmp_path / "models", model_id, file_name="model.onnx")
    (src / "config.pbtxt").write_text('instance_group [ { count: 3 kind: KIND_CPU } ]\n')
    r = rt.load(model_id, src)
    assert r.maxConcurrency == 3  # the pool's sessions, from config.pbtxt
    assert (rt.repo / model_id / "config.pbtxt").exists()
    np.testing.assert_allclose(rt.infer(model_id, LHS, RHS), models.addmul_ref(LHS, RHS),
                               rtol=1e-6)
    rt.unload(model_id)


def test_ids_map_to_names_and_file_paths(runtime, pb, tmp_path):
    """Ids with bytes sip names do not allow are escaped (.HH), a model
    file path loads as version 1, and a puller's directory that is the
    repository model's own directory is adopted, not moved."""
    rt = runtime()
    f = tmp_path / "elsewhere" / "m.onnx"
    f.parent.mkdir()
    onnx.save(models.addmul(), str(f))
    r = rt.load("team/addmul.v2", f)
    assert r.sizeInBytes > 0
    assert (rt.repo / "team.2faddmul.2ev2" / "1" / "model.onnx").exists()
    np.testing.assert_allclose(rt.infer("team/addmul.v2", LHS, RHS),
                               models.addmul_ref(LHS, RHS), rtol=1e-6)
    assert rt.size("team/addmul.v2").sizeInBytes == r.sizeInBytes
    rt.unload("team/addmul.v2")
    assert not (rt.repo / "team.2faddmul.2ev2").exists()

    # the puller wrote <repository>/<id>/mnist.onnx itself
    own = fetched(rt.repo, "adopted-1", "mnist.onnx")
    rt.load("adopted-1", own)
    np.testing.assert_allclose(rt.infer("adopted-1", LHS, RHS), models.addmul_ref(LHS, RHS),
                               rtol=1e-6)
    rt.unload("adopted-1")
    assert sorted(p.name for p in own.iterdir()) == ["mnist.onnx"]


def test_bad_input(runtime, pb, tmp_path):
    rt = runtime()
    src = fetched(tmp_path / "models", "good")
    cases = [
        ("good", tmp_path / "nowhere", grpc.StatusCode.NOT_FOUND, "nowhere"),
        ("good", "", grpc.StatusCode.INVALID_ARGUMENT, "modelPath is empty"),
        ("", src, grpc.StatusCode.INVALID_ARGUMENT, "modelId is empty"),
        ("/abs", src, grpc.StatusCode.INVALID_ARGUMENT, "starts with '/'"),
        ("x" * 200, src, grpc.StatusCode.INVALID_ARGUMENT, "too long"),
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    cases.append(("good", empty, grpc.StatusCode.NOT_FOUND, "holds no model"))
    txt = tmp_path / "notes.txt"
    txt.write_text("not a model")
    cases.append(("good", txt, grpc.StatusCode.INVALID_ARGUMENT, "no format this server loads"))
    corrupt = tmp_path / "corrupt" / "model.onnx"
    corrupt.parent.mkdir()
    models.write_corrupt(corrupt)
    cases.append(("corrupt", corrupt.parent, None, "corrupt"))
    plain = rt.repo / "plain" / "1"
    plain.mkdir(parents=True)
    onnx.save(models.addmul(), str(plain / "model.onnx"))
    cases.append(("plain", src, grpc.StatusCode.FAILED_PRECONDITION, "was not imported"))
    for model_id, path, code, words in cases:
        with pytest.raises(grpc.RpcError) as ei:
            rt.load(model_id, path)
        assert code is None or code_of(ei) == code, (model_id, path, ei.value)
        assert words in ei.value.details() or code is None, ei.value.details()
    # nothing of the failed loads stays in the repository
    assert sorted(p.name for p in rt.repo.iterdir()) == ["plain"]
    assert (plain / "model.onnx").exists()
    with pytest.raises(grpc.RpcError) as ei:
        rt.rt.predictModelSize(pb.mm.PredictModelSizeRequest(
            modelId="good", modelPath=str(tmp_path / "nowhere")), timeout=10)
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as ei:
        rt.infer("/bad", LHS, RHS)
    assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT


def test_status_purges_imported_models(runtime, pb, tmp_path):
    """runtimeStatus is ModelMesh's start: the models it imported before
    are removed (it no longer knows them); other repository models stay."""
    rt = runtime()
    src = fetched(tmp_path / "models", "stale")
    rt.load("stale", src)
    plain = rt.repo / "plain" / "1"
    plain.mkdir(parents=True)
    onnx.save(models.addmul(), str(plain / "model.onnx"))
    st = rt.status()
    assert st.status == pb.mm.RuntimeStatusResponse.READY
    with pytest.raises(grpc.RpcError) as ei:
        rt.size("stale")
    assert code_of(ei) == grpc.StatusCode.NOT_FOUND
    assert sorted(p.name for p in rt.repo.iterdir()) == ["plain"]
