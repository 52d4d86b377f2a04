"""Requests a real sipd must refuse, and how it says so: gRPC ModelReady of
a model or version it does not serve (OK with ready false, as Triton),
sequence parameters sent to a stateless pool, negative numbers smuggled in
as uint64, a Host header with userinfo, an Origin of another scheme — and
every request refused while decoding counted in /metrics by model, protocol
and reason, and logged (rate-limited)."""

import re
import socket

import numpy as np
import pytest

from cann_sip import InferenceRequest, InvalidArgumentError, NotFoundError, protocol as P
from harness import raw_connect, read_until_closed, serve
import kserve as K

grpc = pytest.importorskip("grpc")
from test_grpc import grpc_address, make_request, pb  # noqa: E402,F401  (pb: the stubs)

ECHO = {"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,3"}}
X = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    with serve(tmp_path_factory.mktemp("rej"), [ECHO],
               server={"http": "127.0.0.1:0", "grpc": "127.0.0.1:0"}) as s:
        yield s


@pytest.fixture(scope="module")
def stub(srv, pb):
    ch = grpc.insecure_channel(grpc_address(srv))
    yield pb.svc.GRPCInferenceServiceStub(ch)
    ch.close()


def grpc_code(call):
    with pytest.raises(grpc.RpcError) as ei:
        call()
    return ei.value.code(), ei.value.details()


def raw_http(srv, head):
    """Sends `head` (request line and headers, CRLF-separated, no blank
    line) with an empty body; the status code."""
    host, port = K.http_base(srv)[len("http://"):].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head.encode() + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1])


# ---- gRPC ModelReady ------------------------------------------------------------------

def test_grpc_model_ready_of_unserved_model_is_false(stub, pb):
    assert stub.ModelReady(pb.pb.ModelReadyRequest(name="echo")).ready is True
    # Triton answers OK with ready false (clients poll this after a load).
    assert stub.ModelReady(pb.pb.ModelReadyRequest(name="no_such_model")).ready is False
    assert stub.ModelReady(pb.pb.ModelReadyRequest(name="echo", version="7")).ready is False
    code, _ = grpc_code(lambda: stub.ModelReady(pb.pb.ModelReadyRequest(name="")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# ---- parameters -----------------------------------------------------------------------

def test_sequence_id_on_a_stateless_pool_is_refused(srv, stub, pb):
    base = K.http_base(srv)
    body, hl = K.build_request({"input": X}, params={"sequence_id": 5})
    r = K.request("POST", base + "/v2/models/echo/infer", body=body,
                  headers={"Content-Type": "application/json"})
    assert r.status == 400, r
    assert "does not serve sequences" in r.json()["error"]
    req = make_request(pb, "echo", {"input": X})
    req.parameters["sequence_id"].string_param = "abc"
    code, msg = grpc_code(lambda: stub.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "does not serve sequences" in msg
    c = srv.client()
    with pytest.raises(InvalidArgumentError, match="does not serve sequences"):
        c.infer(InferenceRequest("echo", {"input": X}, sequence_id=9))
    # without it, the same request runs
    np.testing.assert_array_equal(c.infer(InferenceRequest("echo", {"input": X})).outputs["output"], X)


@pytest.mark.parametrize("key,field,value", [
    ("timeout", "uint64_param", 2 ** 64 - 1),
    ("timeout", "int64_param", -1),
    ("sequence_id", "uint64_param", 2 ** 64 - 1),
    ("sequence_id", "int64_param", -1),
    ("priority", "uint64_param", 2 ** 63),
])
def test_grpc_negative_numbers_are_refused(stub, pb, key, field, value):
    req = make_request(pb, "echo", {"input": X})
    setattr(req.parameters[key], field, value)
    code, msg = grpc_code(lambda: stub.ModelInfer(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, msg
    assert "parameters.%s" % key in msg and "0..2^63-1" in msg


# ---- Host and Origin ------------------------------------------------------------------

@pytest.mark.parametrize("host,status", [
    ("localhost:80@evil.example", 421),
    ("localhost@evil.example", 421),
    ("localhost:80/evil.example", 421),
    ("localhost:http", 421),
    ("localhost:", 421),
    ("[::1]x", 421),
    ("localhost:8000", 200),
    ("127.0.0.1", 200),
    ("[::1]:8000", 200),
])
def test_host_must_be_an_authority(srv, host, status):
    head = "POST /v2/repository/index HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json" % host
    assert raw_http(srv, head) == status, host


def test_origin_scheme_must_match_the_server(srv):
    base = K.http_base(srv)  # plain HTTP
    port = base.rsplit(":", 1)[1]
    for origin, status in (("https://127.0.0.1:%s" % port, 403), ("http://127.0.0.1:%s" % port, 200),
                           ("HTTP://127.0.0.1:%s" % port, 200), ("null", 403)):
        head = ("POST /v2/repository/index HTTP/1.1\r\nHost: 127.0.0.1:%s\r\nOrigin: %s\r\n"
                "Content-Type: application/json" % (port, origin))
        assert raw_http(srv, head) == status, origin


# ---- rejections counted and logged ----------------------------------------------------

def rejected(srv):
    """{(model, protocol, reason): count} from /metrics."""
    text = K.get(K.http_base(srv) + "/metrics").body.decode()
    out = {}
    for m in re.finditer(r'^sip_requests_rejected_total\{model="([^"]*)",protocol="([^"]*)",'
                         r'reason="([^"]*)"\} (\d+)$', text, re.M):
        out[m.group(1, 2, 3)] = int(m.group(4))
    return out


def test_rejections_are_counted_by_model_protocol_and_reason(srv, stub, pb):
    base = K.http_base(srv)
    before = rejected(srv)
    post = lambda model, body: K.request("POST", base + "/v2/models/%s/infer" % model, body=body,
                                         headers={"Content-Type": "application/json"})
    assert post("echo", b'{"inputs": [').status == 400                     # not JSON
    wrong = b'{"inputs":[{"name":"input","datatype":"INT8","shape":[1,3],"data":[1,2,3]}]}'
    assert post("echo", wrong).status == 400                                  # wrong datatype
    assert post("echo", wrong).status == 400
    assert post("made_up_%d" % 1, wrong).status == 404                        # unknown model
    assert post("made_up_%d" % 2, wrong).status == 404
    short = make_request(pb, "echo", {"input": X})                          # contents != shape
    short.raw_input_contents[0] = short.raw_input_contents[0][:4]
    code, _ = grpc_code(lambda: stub.ModelInfer(short))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    code, _ = grpc_code(lambda: stub.ModelInfer(make_request(pb, "made_up_3", {"input": X})))
    assert code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(NotFoundError):                                        # native: no such model
        srv.client().infer(InferenceRequest("made_up_4", {"input": X}))
    bad = grpc.insecure_channel(grpc_address(srv)).unary_unary(
        "/inference.GRPCInferenceService/ModelInfer")
    code, _ = grpc_code(lambda: bad(b"\xff\xff\xff"))                         # not protobuf
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    payload = P.encode_infer_request("echo", {"input": X})[:-5]              # native: cut short
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(P.encode_frame(P.INFER_REQUEST, 7, payload))
        assert read_until_closed(s)  # an ERROR frame, then the connection closes
    finally:
        s.close()
    after = rejected(srv)
    grew = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    assert grew.get(("echo", "http", "malformed")) == 1, grew
    assert grew.get(("echo", "http", "invalid")) == 2, grew
    # made-up names do not become label values
    assert grew.get(("unknown", "http", "unknown_model")) == 2, grew
    assert not any(k[0].startswith("made_up") for k in after), after
    assert grew.get(("echo", "grpc", "invalid")) == 1, grew
    assert grew.get(("unknown", "grpc", "malformed")) == 1, grew
    assert grew.get(("unknown", "grpc", "unknown_model")) == 1, grew
    assert grew.get(("unknown", "native", "unknown_model")) == 1, grew
    assert grew.get(("echo", "native", "malformed")) == 1, grew
    log = srv.log()
    assert 'msg="request rejected" protocol=http model="echo" reason=malformed' in log
    assert 'protocol=grpc' in log and 'protocol=native' in log
