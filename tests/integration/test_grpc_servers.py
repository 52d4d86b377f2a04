"""The KServe v2 gRPC front-end where a test needs a server of its own: the
repository RPCs (explicit model control), the configuration's grpc
endpoint checked and a taken port refused, SIGTERM with an idle stream open,
and failover parameters in a response. test_grpc.py has the rest."""

import shutil
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from harness import SIPD, sipd_env, to_yaml
import models

grpc = pytest.importorskip("grpc")
from test_grpc import (code_of, grpc_address, make_request, outputs_of,  # noqa: E402
                       pb)  # noqa: F401  (pb: the generated stubs, a fixture)


def test_repository_rpcs(start_sipd, tmp_path, pb, model_dir):
    repo = tmp_path / "repo"
    (repo / "addk" / "1").mkdir(parents=True)
    shutil.copy(model_dir["addmul"], repo / "addk" / "1" / "model.onnx")
    srv = start_sipd([], server={"model_repository": str(repo), "model_control": "explicit",
                                 "grpc": "127.0.0.1:0"})
    with grpc.insecure_channel(grpc_address(srv)) as ch:
        stub = pb.svc.GRPCInferenceServiceStub(ch)
        assert "model_repository" in stub.ServerMetadata(pb.pb.ServerMetadataRequest()).extensions
        idx = stub.RepositoryIndex(pb.pb.RepositoryIndexRequest())
        assert [(m.name, m.state) for m in idx.models] == [("addk", "UNAVAILABLE")]
        assert len(stub.RepositoryIndex(pb.pb.RepositoryIndexRequest(ready=True)).models) == 0
        stub.RepositoryModelLoad(pb.pb.RepositoryModelLoadRequest(model_name="addk"), timeout=30)
        idx = stub.RepositoryIndex(pb.pb.RepositoryIndexRequest(ready=True))
        assert ("addk", "1", "READY") in [(m.name, m.version, m.state) for m in idx.models]
        x = np.ones((1, 4), np.float32)
        out = outputs_of(stub.ModelInfer(make_request(pb, "addk", {"lhs": x, "rhs": x})))
        np.testing.assert_allclose(out["y"], models.addmul_ref(x, x))
        # Triton's config parameter (a JSON model config): instance count -> pool size.
        lq = pb.pb.RepositoryModelLoadRequest(model_name="addk")
        lq.parameters["config"].string_param = '{"instance_group": [{"count": 2}]}'
        stub.RepositoryModelLoad(lq, timeout=30)
        cfg = stub.ModelConfig(pb.pb.ModelConfigRequest(name="addk")).config
        assert cfg.instance_group[0].count == 2
        for key, setter, want in [
                ("config", lambda p: setattr(p, "string_param", '{"colour": 1}'),
                 "unknown field 'colour'"),
                ("config", lambda p: setattr(p, "bool_param", True), "not a string_param"),
                ("file:1/model.onnx", lambda p: setattr(p, "bytes_param", b"x"),
                 "model files in a load request")]:
            lq = pb.pb.RepositoryModelLoadRequest(model_name="addk")
            setter(lq.parameters[key])
            with pytest.raises(grpc.RpcError) as ei:
                stub.RepositoryModelLoad(lq, timeout=30)
            assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT and want in ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            stub.RepositoryModelLoad(pb.pb.RepositoryModelLoadRequest(model_name="nope"))
        assert code_of(ei) == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.RpcError) as ei:
            stub.RepositoryModelLoad(pb.pb.RepositoryModelLoadRequest(model_name="../etc"))
        assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT
        u = pb.pb.RepositoryModelUnloadRequest(model_name="addk")
        u.parameters["unload_dependents"].bool_param = False
        stub.RepositoryModelUnload(u, timeout=30)
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelInfer(make_request(pb, "addk", {"lhs": x, "rhs": x}))
        assert code_of(ei) in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
        with pytest.raises(grpc.RpcError) as ei:
            stub.RepositoryModelUnload(pb.pb.RepositoryModelUnloadRequest(model_name=""))
        assert code_of(ei) == grpc.StatusCode.INVALID_ARGUMENT


def test_check_config_names_grpc(sipd_bin, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(to_yaml({"server": {"grpc": "127.0.0.1:8001", "grpc_threads": 3},
                            "session_pools": []}) + "\n")
    r = subprocess.run([str(SIPD), "--check-config", str(cfg)], capture_output=True, text=True,
                       timeout=30, env=sipd_env())
    assert r.returncode == 0, r.stderr
    assert "grpc 127.0.0.1:8001" in r.stdout
    cfg.write_text(to_yaml({"server": {"grpc": "8001"}, "session_pools": []}) + "\n")
    r = subprocess.run([str(SIPD), "--check-config", str(cfg)], capture_output=True, text=True,
                       timeout=30, env=sipd_env())
    assert r.returncode == 1 and "server.grpc" in r.stderr and "HOST:PORT" in r.stderr


def test_port_in_use_fails_startup(sipd_bin, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        cfg = tmp_path / "sipd.yaml"
        cfg.write_text(to_yaml({"server": {"endpoints": ["ipc://%s" % (tmp_path / "s.sock")],
                                           "grpc": "127.0.0.1:%d" % port},
                                "session_pools": [{"name": "a", "backend": "builtin"}]}) + "\n")
        r = subprocess.run([str(SIPD), "--config", str(cfg)], capture_output=True, text=True,
                           timeout=30, env=sipd_env())
    assert r.returncode != 0
    assert "server.grpc 127.0.0.1:%d: cannot listen there" % port in r.stderr, r.stderr


def test_sigterm_with_open_stream(start_sipd, pb):
    """An idle stream left open by its client does not hold shutdown."""
    srv = start_sipd([{"name": "a", "backend": "builtin"}], server={"grpc": "127.0.0.1:0"})
    ch = grpc.insecure_channel(grpc_address(srv))
    stub = pb.svc.GRPCInferenceServiceStub(ch)
    hold = threading.Event()

    def gen():
        yield make_request(pb, "a", {"input": np.ones(3, np.float32)}, id="1")
        hold.wait(30)

    it = stub.ModelStreamInfer(gen())
    assert next(it).infer_response.id == "1"
    t0 = time.monotonic()
    srv.send_signal(signal.SIGTERM)
    assert srv.wait(20) == 0, srv.log_tail()
    assert time.monotonic() - t0 < 10
    hold.set()
    ch.close()


def test_failover_parameters(start_sipd, pb):
    """A request whose session failed and that was retried says so in the
    response's parameters (retries, served_by), as over HTTP; one that was
    not retried carries neither."""
    pools = [{"name": "p", "backend": "builtin", "pool_size": 2,
              "failover": {"strategy": "immediate_retry", "max_retries": 2}}]
    srv = start_sipd(pools, server={"grpc": "127.0.0.1:0", "allow_fault_injection": True})
    x = np.full(3, 4.0, np.float32)
    with grpc.insecure_channel(grpc_address(srv)) as ch:
        stub = pb.svc.GRPCInferenceServiceStub(ch)
        plain = stub.ModelInfer(make_request(pb, "p", {"input": x}))
        assert "retries" not in plain.parameters and "served_by" not in plain.parameters
        srv.client().admin("fault", "p", kind="crash", count=1)
        resp = stub.ModelInfer(make_request(pb, "p", {"input": x}))
        np.testing.assert_array_equal(outputs_of(resp)["output"], x)
        assert resp.parameters["retries"].int64_param == 1
        assert resp.parameters["served_by"].string_param in ("p/0", "p/1")
