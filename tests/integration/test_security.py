"""Security settings of a real sipd (docs/security.md): bearer tokens per API
group over HTTP, gRPC and the native protocol (Python client, and the C client
through the sip CLI), management only from loopback without tokens, Host and
Origin checks on HTTP management routes, the unix socket's mode, TLS for HTTP
and gRPC with a certificate made at test time, and answers that never show
the server's directories."""

import json
import os
import socket
import ssl
import stat
import subprocess
import urllib.error
import urllib.request

import numpy as np
import pytest

from cann_sip import (InferenceRequest, PermissionDeniedError, SessionCallback, SessionClient,
                      UnauthenticatedError)
from harness import BUILD_DIR, CLIENT_TIMEOUT_S, SipServer, serve, wait_until
import kserve as K
import models

grpc = pytest.importorskip("grpc")
from test_grpc import grpc_address, make_request, pb  # noqa: E402,F401  (pb: the stubs)

INF, MGMT, MET = "inference-token-0001", "management-token-0002", "metrics-token-0003"
AUTH = {"inference_tokens": [INF], "management_tokens": ["env:SIP_TEST_MGMT_TOKEN"],
        "metrics_tokens": [MET]}
ECHO = {"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,4"}}
X = np.arange(8, dtype=np.float32).reshape(2, 4)


def http(method, url, body=None, headers=None, token=None, context=None):
    """A K.Reply for any status."""
    headers = dict(headers or {})
    if token:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as r:
            return K.Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        return K.Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def infer_body():
    return K.build_request({"input": X})[0]


def other_address():
    """An address of this host that is not loopback, or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent: it only picks the route's source
        ip = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if ip.startswith("127.") else ip


@pytest.fixture(scope="module")
def secured(sipd_bin, tmp_path_factory):
    os.environ["SIP_TEST_MGMT_TOKEN"] = MGMT  # sipd reads it through env:
    root = tmp_path_factory.mktemp("secured")
    server = {"http": "127.0.0.1:0", "grpc": "127.0.0.1:0", "auth": AUTH,
              "grpc_max_message_bytes": 1 << 20}
    with serve(root, [ECHO], server=server) as s:
        s.http = K.http_base(s)
        s.grpc = grpc_address(s)
        yield s


# ---- HTTP ----------------------------------------------------------------------------------

def test_http_health_stays_open(secured):
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/echo/ready"):
        assert http("GET", secured.http + path).status == 200, path


def test_http_inference_needs_its_token(secured):
    r = http("GET", secured.http + "/v2/models/echo")
    assert r.status == 401
    assert r.headers["www-authenticate"] == 'Bearer realm="sip"'
    assert "inference_tokens" in json.loads(r.body)["error"]
    r = http("GET", secured.http + "/v2/models/echo", token="wrong-token-9999")
    assert r.status == 401
    assert 'error="invalid_token"' in r.headers["www-authenticate"]
    # the body of a refused request is read and dropped: the server stays up
    r = http("POST", secured.http + "/v2/models/echo/infer", body=infer_body())
    assert r.status == 401
    for tok in (INF, MGMT):  # a management token opens every group
        r = http("GET", secured.http + "/v2/models/echo", token=tok)
        assert r.status == 200 and json.loads(r.body)["name"] == "echo"
        r = http("POST", secured.http + "/v2/models/echo/infer", body=infer_body(), token=tok)
        assert r.status == 200, r
        out = json.loads(r.body)["outputs"][0]
        assert out["data"] == X.ravel().tolist()
    r = http("GET", secured.http + "/v2/models/echo", token=MET)  # not the metrics token
    assert r.status == 401


def test_http_refused_before_a_large_body(secured):
    """A request refused for its token and announcing a body over
    http_max_body_bytes is answered at once, before any of the body."""
    host, port = secured.http[len("http://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n")
        head = s.recv(4096)
    assert head.startswith(b"HTTP/1.1 401"), head
    assert b"WWW-Authenticate: Bearer" in head


def test_http_metrics_and_management_groups(secured):
    assert http("GET", secured.http + "/metrics").status == 401
    assert http("GET", secured.http + "/metrics", token=INF).status == 401
    r = http("GET", secured.http + "/metrics", token=MET)
    assert r.status == 200 and b"sip_" in r.body
    assert http("GET", secured.http + "/v2/models/echo/stats", token=MET).status == 200
    index = secured.http + "/v2/repository/index"
    assert http("POST", index, body=b"{}").status == 401
    assert http("POST", index, body=b"{}", token=INF).status == 401
    assert http("POST", index, body=b"{}", token=MET).status == 401
    assert http("POST", index, body=b"{}", token=MGMT).status == 200
    assert http("GET", secured.http + "/v2/logging", token=MGMT).status == 200
    assert http("GET", secured.http + "/v2/logging", token=INF).status == 401


# ---- native protocol -------------------------------------------------------------------------

def test_native_tokens(secured):
    anon = SessionClient(secured.endpoint, timeout_s=CLIENT_TIMEOUT_S)
    try:
        assert anon.ready()  # readiness stays open
        with pytest.raises(UnauthenticatedError, match="AUTH"):
            anon.infer(InferenceRequest(session_pool="echo", inputs={"input": X}))
    finally:
        anon.close()
    with pytest.raises(UnauthenticatedError, match="not valid"):
        bad = SessionClient(secured.endpoint, timeout_s=CLIENT_TIMEOUT_S, token="wrong-token-9999")
        try:
            bad.ready()
        finally:
            bad.close()
    c = SessionClient(secured.endpoint, timeout_s=CLIENT_TIMEOUT_S, token=INF)
    try:
        out = c.infer(InferenceRequest(session_pool="echo", inputs={"input": X}))
        np.testing.assert_array_equal(out.outputs["output"], X)
        # the connection is kept: the same client reconnects with its token
        with pytest.raises(UnauthenticatedError):
            c.status()  # metrics group; closes this connection
        out = c.infer(InferenceRequest(session_pool="echo", inputs={"input": X}))
        np.testing.assert_array_equal(out.outputs["output"], X)
    finally:
        c.close()
    m = SessionClient(secured.tcp_endpoint, timeout_s=CLIENT_TIMEOUT_S, token=MGMT)
    try:
        assert any(p["name"] == "echo" for p in m.status()["pools"])
        assert isinstance(m.repository_index(), list)
    finally:
        m.close()


def test_native_event_subscription_token(secured):
    class Nop(SessionCallback):
        def on_event(self, session_id, event, context):
            pass
    anon = SessionClient(secured.endpoint, timeout_s=CLIENT_TIMEOUT_S)
    try:
        with pytest.raises(UnauthenticatedError):
            anon.register_callbacks("echo", Nop())
    finally:
        anon.close()
    c = SessionClient(secured.endpoint, timeout_s=CLIENT_TIMEOUT_S, token=MET)
    try:
        sub = c.register_callbacks("echo", Nop())
        assert sub.thread.is_alive()
    finally:
        c.close()


def test_c_client_token_through_cli(secured):
    sip = BUILD_DIR / "sip"
    env = dict(os.environ)
    env.pop("SIP_TOKEN", None)
    r = subprocess.run([str(sip), "-e", secured.endpoint, "status"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode != 0 and "UNAUTHENTICATED" in r.stderr, (r.stdout, r.stderr)
    env["SIP_TOKEN"] = MET
    r = subprocess.run([str(sip), "-e", secured.endpoint, "status"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode == 0 and "echo" in r.stdout, r.stderr
    env["SIP_TOKEN"] = "wrong-token-9999"
    r = subprocess.run([str(sip), "-e", secured.endpoint, "status"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode != 0 and "UNAUTHENTICATED" in r.stderr, (r.stdout, r.stderr)


@pytest.mark.parametrize("proto", ["http", "grpc"])
def test_bench_sends_the_token(secured, proto):
    """sip bench over HTTP (Authorization: Bearer) and gRPC (authorization
    metadata) carries $SIP_TOKEN; without it every request is refused."""
    endpoint = secured.http if proto == "http" else "grpc://" + secured.grpc

    def bench(token):
        env = dict(os.environ)
        env.pop("SIP_TOKEN", None)
        if token:
            env["SIP_TOKEN"] = token
        r = subprocess.run([str(BUILD_DIR / "sip"), "-e", endpoint, "--json", "bench", "echo",
                            "-i", "input:float32:1,4=ones", "--window-ms", "200",
                            "--max-windows", "3", "--concurrency", "1"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode in (0, 1), r.stderr
        return json.loads(r.stdout)
    r = bench(INF)
    assert r["requests"] > 0 and r["errors"] == 0, r
    r = bench(None)
    assert r["requests"] > 0 and r["errors"] == r["requests"], r
    assert set(r["errors_by_code"]) == {"UNAUTHENTICATED"}, r


# ---- gRPC ----------------------------------------------------------------------------------

def test_grpc_tokens(secured, pb):  # noqa: F811
    with grpc.insecure_channel(secured.grpc) as ch:
        stub = pb.svc.GRPCInferenceServiceStub(ch)
        assert stub.ServerLive(pb.pb.ServerLiveRequest()).live  # open
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="echo"))
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="echo"),
                               metadata=[("authorization", "Bearer wrong-token-9999")])
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        md = stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="echo"),
                                metadata=[("authorization", "Bearer " + INF)])
        assert md.name == "echo"
        with pytest.raises(grpc.RpcError) as ei:
            stub.RepositoryIndex(pb.pb.RepositoryIndexRequest(),
                                 metadata=[("authorization", "Bearer " + INF)])
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stub.RepositoryIndex(pb.pb.RepositoryIndexRequest(),
                             metadata=[("authorization", "Bearer " + MGMT)])
        reqs = [make_request(pb, "echo", {"input": X})]
        with pytest.raises(grpc.RpcError) as ei:
            list(stub.ModelStreamInfer(iter(reqs), timeout=30))
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        got = list(stub.ModelStreamInfer(iter(reqs), timeout=30,
                                         metadata=[("authorization", "Bearer " + INF)]))
        assert len(got) == 1 and not got[0].error_message
        stats = stub.ModelStatistics(pb.pb.ModelStatisticsRequest(name="echo"),
                                     metadata=[("authorization", "Bearer " + MET)])
        assert stats.model_stats[0].name == "echo"


def test_grpc_token_checked_before_the_message_is_read(secured, pb):  # noqa: F811
    """A method that needs a token is checked before its message is read: a
    call without one is refused for that, even with a message over
    server.grpc_max_message_bytes (1 MiB here), which a caller with a token
    is refused for."""
    big = make_request(pb, "echo", {"input": np.zeros((1 << 18, 2), np.float32)})  # 2 MiB
    with grpc.insecure_channel(secured.grpc) as ch:
        stub = pb.svc.GRPCInferenceServiceStub(ch)
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelInfer(big, timeout=30)
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED, ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelInfer(big, timeout=30, metadata=[("authorization", "Bearer " + INF)])
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, ei.value.details()
    secured.assert_alive()


# ---- defaults: no tokens, management from loopback only -----------------------------------

def test_default_management_only_from_loopback(sipd_bin, tmp_path, pb):  # noqa: F811
    ip = other_address()
    if ip is None:
        pytest.skip("this host has no address other than loopback")
    server = {"http": "0.0.0.0:0", "grpc": "0.0.0.0:0"}
    with serve(tmp_path, [ECHO], server=server, tcp=False) as s:
        port = int(K.http_base(s).rsplit(":", 1)[1])
        gport = int(grpc_address(s).rsplit(":", 1)[1])
        local, remote = "http://127.0.0.1:%d" % port, "http://%s:%d" % (ip, port)
        assert http("POST", local + "/v2/repository/index", body=b"{}").status == 200
        r = http("POST", remote + "/v2/repository/index", body=b"{}",
                 headers={"Host": "127.0.0.1:%d" % port})
        assert r.status == 403 and "loopback" in json.loads(r.body)["error"]
        # inference stays open to everyone
        assert http("POST", remote + "/v2/models/echo/infer", body=infer_body()).status == 200
        with grpc.insecure_channel("%s:%d" % (ip, gport)) as ch:
            stub = pb.svc.GRPCInferenceServiceStub(ch)
            with pytest.raises(grpc.RpcError) as ei:
                stub.RepositoryIndex(pb.pb.RepositoryIndexRequest())
            assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="echo")).name == "echo"


def test_default_native_management_only_from_local_peers(sipd_bin, tmp_path):
    ip = other_address()
    if ip is None:
        pytest.skip("this host has no address other than loopback")
    # Its TCP port is chosen at start (again if another process took it first).
    s = SipServer(tmp_path, [ECHO], tcp_host="0.0.0.0")
    s.start()
    local = s.client("tcp://127.0.0.1:%d" % s.port)
    remote = s.client("tcp://%s:%d" % (ip, s.port))
    try:
        assert isinstance(local.repository_index(), list)
        assert isinstance(s.client().repository_index(), list)  # a unix socket is local
        with pytest.raises(PermissionDeniedError, match="local peers"):
            remote.repository_index()
        out = remote.infer(InferenceRequest(session_pool="echo", inputs={"input": X}))
        np.testing.assert_array_equal(out.outputs["output"], X)
    finally:
        assert s.stop() == 0, s.log_tail()  # closes the clients too


# ---- Host and Origin --------------------------------------------------------------------

def test_cross_site_and_foreign_host_refused(sipd_bin, tmp_path):
    with serve(tmp_path, [ECHO], server={"http": "127.0.0.1:0"}) as s:
        base = K.http_base(s)
        port = base.rsplit(":", 1)[1]
        unload = base + "/v2/repository/models/echo/unload"
        cases = [
            ({"Origin": "http://evil.example", "Content-Type": "application/json"}, 403),
            ({"Content-Type": "text/plain"}, 403),
            ({"Content-Type": "multipart/form-data; boundary=x"}, 403),
            ({"Sec-Fetch-Site": "cross-site"}, 403),
            ({"Host": "evil.example:%s" % port}, 421),
            ({"Host": "evil.example"}, 421),
        ]
        for headers, status in cases:
            r = http("POST", unload, body=b"{}", headers=headers)
            assert r.status == status, (headers, r)
            assert http("GET", base + "/v2/models/echo/ready").status == 200, headers
        # the same-origin page of the server itself, and localhost, may
        r = http("POST", base + "/v2/repository/index", body=b"{}",
                 headers={"Origin": base, "Content-Type": "application/json"})
        assert r.status == 200, r
        r = http("POST", base + "/v2/repository/index", body=b"{}",
                 headers={"Host": "localhost:%s" % port})
        assert r.status == 200, r
        # a foreign Host on inference is not a management request
        r = http("POST", base + "/v2/models/echo/infer", body=infer_body(),
                 headers={"Host": "evil.example"})
        assert r.status == 200, r


def test_allowed_hosts(sipd_bin, tmp_path):
    server = {"http": "127.0.0.1:0", "allowed_hosts": ["sip.example.com"]}
    with serve(tmp_path, [ECHO], server=server) as s:
        index = K.http_base(s) + "/v2/repository/index"
        assert http("POST", index, body=b"{}", headers={"Host": "sip.example.com:8000"}).status == 200
        assert http("POST", index, body=b"{}", headers={"Host": "localhost"}).status == 421


# ---- the unix socket's mode -----------------------------------------------------------------

@pytest.mark.parametrize("mode", [None, "0660"])
def test_socket_mode(sipd_bin, tmp_path, mode):
    old = os.umask(0)  # sipd inherits it: a mode that followed the umask would be 0777
    try:
        server = {"socket_mode": mode} if mode else {}
        with serve(tmp_path, [ECHO], server=server, tcp=False) as s:
            st = os.stat(s.sock_path)
            assert stat.S_ISSOCK(st.st_mode)
            assert stat.S_IMODE(st.st_mode) == (0o660 if mode else 0o600)
            # nothing left of the private directory it was bound in
            assert os.listdir(s.sockdir) == ["sipd.sock"]
            assert s.client().ready()
    finally:
        os.umask(old)


# ---- TLS ----------------------------------------------------------------------------------

def make_cert(d):
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_tls_http_and_grpc(sipd_bin, tmp_path, pb):  # noqa: F811
    cert, key = make_cert(tmp_path)
    server = {"http": "127.0.0.1:0", "grpc": "127.0.0.1:0",
              "tls": {"cert_file": "cert.pem", "key_file": str(key)},
              "auth": {"inference_tokens": [INF]}}
    with serve(tmp_path, [ECHO], server=server) as s:
        base = K.printed_address(s, "https")
        ctx = ssl.create_default_context(cafile=str(cert))
        r = http("GET", base + "/v2/health/ready", context=ctx)
        assert r.status == 200
        r = http("POST", base + "/v2/models/echo/infer", body=infer_body(), token=INF,
                 context=ctx)
        assert r.status == 200 and json.loads(r.body)["outputs"][0]["data"] == X.ravel().tolist()
        # plain HTTP on the TLS port gets no answer
        with pytest.raises(Exception):
            urllib.request.urlopen(base.replace("https", "http") + "/v2/health/ready", timeout=5)
        # an unknown certificate is refused by a verifying client
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(base + "/v2/health/ready", timeout=5,
                                   context=ssl.create_default_context())
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        gport = grpc_address(s).rsplit(":", 1)[1]
        with grpc.secure_channel("localhost:" + gport, creds) as ch:
            stub = pb.svc.GRPCInferenceServiceStub(ch)
            assert stub.ServerLive(pb.pb.ServerLiveRequest()).live
            md = stub.ModelMetadata(pb.pb.ModelMetadataRequest(name="echo"),
                                    metadata=[("authorization", "Bearer " + INF)])
            assert md.name == "echo"
        with grpc.insecure_channel("127.0.0.1:" + gport) as ch:
            stub = pb.svc.GRPCInferenceServiceStub(ch)
            with pytest.raises(grpc.RpcError):
                stub.ServerLive(pb.pb.ServerLiveRequest(), timeout=5)


def test_tls_bad_files_refused_at_start(sipd_bin, tmp_path):
    (tmp_path / "notpem.pem").write_text("hello\n")
    cfg = tmp_path / "sipd.yaml"
    sock = tmp_path / "s.sock"
    cfg.write_text("server:\n  endpoints: [\"ipc://%s\"]\n  http: 127.0.0.1:0\n"
                   "  tls: {cert_file: notpem.pem, key_file: missing.pem}\n"
                   "session_pools:\n  - {name: echo, backend: builtin}\n" % sock)
    r = subprocess.run([str(sipd_bin), "--config", str(cfg)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "server.tls.cert_file" in r.stderr + r.stdout and "not PEM" in r.stderr + r.stdout


# ---- no server paths in answers ---------------------------------------------------------------

def test_no_server_paths_in_answers(sipd_bin, model_dir, tmp_path, pb):  # noqa: F811
    repo = tmp_path / "repo"
    (repo / "badrepo" / "1").mkdir(parents=True)
    models.write_corrupt(repo / "badrepo" / "1" / "model.onnx")
    (tmp_path / "m").mkdir()
    good = tmp_path / "m" / "addmul.onnx"
    good.write_bytes(model_dir["addmul"].read_bytes())
    broken = models.write_corrupt(tmp_path / "m" / "broken.onnx")
    pools = [{"name": "addmul", "model_path": str(good)},
             {"name": "broken", "model_path": str(broken)},
             {"name": "missing", "model_path": str(tmp_path / "m" / "nothere.onnx")}]
    server = {"http": "127.0.0.1:0", "grpc": "127.0.0.1:0", "model_repository": str(repo),
              "model_control": "explicit"}
    secrets = {str(tmp_path), os.path.realpath(str(tmp_path))}
    answers = []
    with serve(tmp_path, pools, server=server) as s:
        base = K.http_base(s)
        for path in ("/v2/models/addmul", "/v2/models/addmul/config", "/v2/models/broken",
                     "/v2/models/broken/config", "/v2/models/missing/config", "/v2/models/stats"):
            answers.append(http("GET", base + path).body.decode())
        answers.append(http("POST", base + "/v2/models/broken/infer", body=infer_body()).body.decode())
        r = http("POST", base + "/v2/repository/models/badrepo/load", body=b"{}")
        assert r.status != 200
        answers.append(r.body.decode())
        answers.append(http("POST", base + "/v2/repository/index", body=b"{}").body.decode())
        c = s.client()
        answers.append(json.dumps(c.info(2)))
        answers.append(json.dumps(c.status()))
        for pool in ("broken", "missing"):
            with pytest.raises(Exception) as ei:
                c.infer(InferenceRequest(session_pool=pool, inputs={"x": X}))
            answers.append(str(ei.value))
        class Collect(SessionCallback):
            def __init__(self):
                self.seen = []

            def on_event(self, session_id, event, context):
                self.seen.append("%s %s %s" % (session_id, event, json.dumps(context)))
        events = Collect()
        c.register_callbacks(None, events)
        with pytest.raises(Exception) as ei:
            c.load_model("badrepo")
        answers.append(str(ei.value))
        wait_until(lambda: any("model.onnx" in e for e in events.seen),  # the failure's reason
                   what=lambda: "an event naming model.onnx, got %r" % events.seen)
        answers.extend(events.seen)
        with grpc.insecure_channel(grpc_address(s)) as ch:
            stub = pb.svc.GRPCInferenceServiceStub(ch)
            answers.append(str(stub.ModelConfig(pb.pb.ModelConfigRequest(name="addmul"))))
            for name in ("broken", "missing"):
                with pytest.raises(grpc.RpcError) as ei:
                    stub.ModelMetadata(pb.pb.ModelMetadataRequest(name=name))
                answers.append(ei.value.details())
            with pytest.raises(grpc.RpcError) as ei:
                stub.RepositoryModelLoad(pb.pb.RepositoryModelLoadRequest(model_name="badrepo"))
            answers.append(ei.value.details())
        log = s.log()
    text = "\n".join(answers)
    assert "addmul.onnx" in text and "broken.onnx" in text  # the paths are there, relative
    for secret in secrets:
        assert secret not in text, [a for a in answers if secret in a][:3]
    assert str(tmp_path) in log or os.path.realpath(str(tmp_path)) in log  # the log keeps them
