"""A client's POSIX shared memory object shrinking (ftruncate) while a request
reads or writes its region, over HTTP and gRPC: sipd stays up (no SIGBUS),
the request is answered with a clear error naming the region, its key and the
size its registration needs, never with an empty body, garbage or a cut
connection; a request after the object grew back (or after registering the
region again) works; another client's request running at the same time is
answered correctly. Region names that no lookup could use are refused alike
by both front-ends."""

import http.client
import json
import os
import threading
import time
import urllib.parse
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness import serve
import kserve as K

grpc = pytest.importorskip("grpc")

REPO = Path(__file__).resolve().parents[2]
COUNT = 65536              # float32 elements: the regions are 256 KiB
NBYTES = COUNT * 4
DELAY_MS = 1000            # the builtin backend's execution: the window to shrink in
WAIT_S = 20.0


class Obj:
    """A POSIX shared memory object of the test's own (no mapping here: the
    test writes and reads it with pwrite/pread, so its shrinking cannot
    fault the test itself)."""

    def __init__(self, size, tag):
        self.name = "sip_shrink_%d_%s_%d" % (os.getpid(), tag, time.monotonic_ns() % 10**9)
        self.key = "/" + self.name
        self.path = "/dev/shm/" + self.name
        self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(self.fd, size)

    def write(self, offset, data):
        assert os.pwrite(self.fd, data, offset) == len(data)

    def read(self, offset, n):
        return os.pread(self.fd, n, offset)

    def truncate(self, size):
        os.ftruncate(self.fd, size)

    def close(self):
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


@pytest.fixture
def obj():
    made = []

    def make(size=NBYTES, tag="r"):
        o = Obj(size, tag)
        made.append(o)
        return o

    yield make
    for o in made:
        o.close()


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """Stubs generated from proto/grpc_service.proto (as test_grpc.py does)."""
    out = tmp_path_factory.mktemp("stubs")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO / "proto"),
                    "--python_out", str(out), "--grpc_python_out", str(out),
                    "grpc_service.proto"], check=True)
    sys.path.insert(0, str(out))
    try:
        return (importlib.import_module("grpc_service_pb2"),
                importlib.import_module("grpc_service_pb2_grpc"))
    finally:
        sys.path.remove(str(out))


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("shm_shrink")
    record = root / "slow_inputs.txt"
    slow = {"backend": "builtin", "pool_size": 1,
            "backend_options": {"shape": "-1", "delay_ms": DELAY_MS}}
    # "slow" reads its input after the delay (record_file: one line of its
    # values per execution): a shrunk input region faults right there.
    pools = [{"name": "slow", "backend": "builtin", "pool_size": 1,
              "backend_options": {"shape": "-1", "delay_ms": DELAY_MS,
                                  "record_file": str(record)}},
             dict(slow, name="other")]
    server = {"http": "127.0.0.1:0", "http_threads": 4, "grpc": "127.0.0.1:0",
              "grpc_threads": 2, "grpc_max_message_bytes": 4 << 20}
    with serve(root, pools, server=server) as s:
        s.http = K.http_base(s)
        s.grpc = K.printed_address(s, "grpc")[len("grpc://"):]
        s.record = record
        yield s


@pytest.fixture(scope="module")
def stub(srv, pb):
    ch = grpc.insecure_channel(srv.grpc, options=[("grpc.max_receive_message_length", 8 << 20)])
    yield pb[1].GRPCInferenceServiceStub(ch)
    ch.close()


@pytest.fixture
def base(srv):
    yield srv.http
    # Every test leaves sipd up and the server's set empty.
    srv.assert_alive()
    assert K.get(srv.http + "/v2/health/live").status == 200
    assert K.request("POST", srv.http + "/v2/systemsharedmemory/unregister").status == 200


# ---------------------------------------------------------------------------
# helpers

def post(base, path, doc):
    return K.request("POST", base + path, body=json.dumps(doc).encode(),
                     headers={"Content-Type": "application/json"})


def register(base, name, key, byte_size=NBYTES, offset=0):
    return post(base, "/v2/systemsharedmemory/region/%s/register" % name,
                {"key": key, "offset": offset, "byte_size": byte_size})


def http_infer(base, model, in_region=None, out_region=None, data=None):
    """One request over a connection of its own: (status, headers, body),
    the body as far as it came (a cut answer is seen, not raised)."""
    t = {"name": "input", "datatype": "FP32", "shape": [COUNT]}
    if in_region:
        t["parameters"] = {"shared_memory_region": in_region, "shared_memory_byte_size": NBYTES}
    else:
        t["data"] = data.tolist()
    doc = {"inputs": [t]}
    if out_region:
        doc["outputs"] = [{"name": "output", "parameters": {
            "shared_memory_region": out_region, "shared_memory_byte_size": NBYTES}}]
    else:
        doc["outputs"] = [{"name": "output", "parameters": {"binary_data": True}}]
    u = urllib.parse.urlsplit(base)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=WAIT_S + DELAY_MS / 1000)
    try:
        c.request("POST", "/v2/models/%s/infer" % model, body=json.dumps(doc).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        try:
            body = r.read()
        except http.client.IncompleteRead as e:
            body = e.partial
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        c.close()


def grpc_request(pb, model, in_region=None, out_region=None, data=None):
    req = pb[0].ModelInferRequest(model_name=model, id="shrink")
    t = req.inputs.add(name="input", datatype="FP32", shape=[COUNT])
    if in_region:
        t.parameters["shared_memory_region"].string_param = in_region
        t.parameters["shared_memory_byte_size"].int64_param = NBYTES
    else:
        req.raw_input_contents.append(data.tobytes())
    o = req.outputs.add(name="output")
    if out_region:
        o.parameters["shared_memory_region"].string_param = out_region
        o.parameters["shared_memory_byte_size"].int64_param = NBYTES
    return req


def grpc_infer(stub, pb, model, **kw):
    """("ok", response) or (status code, details)."""
    try:
        return "ok", stub.ModelInfer(grpc_request(pb, model, **kw), timeout=WAIT_S)
    except grpc.RpcError as e:
        return e.code(), e.details()


def wait_running(srv, pools):
    """Until each pool's one session is executing (the builtin backend's delay)."""
    c = srv.client()
    deadline = time.monotonic() + WAIT_S
    while True:
        states = [srv.pool_status(p, c)["sessions"][0]["state"] for p in pools]
        if all(s == "RUNNING" for s in states):
            return
        srv.assert_alive()
        assert time.monotonic() < deadline, "not executing within %.0f s: %s" % (WAIT_S, states)
        time.sleep(0.005)


def in_thread(fn, *args, **kw):
    out = []
    t = threading.Thread(target=lambda: out.append(fn(*args, **kw)), daemon=True)
    t.start()
    return t, out


def joined(t, out):
    t.join(WAIT_S + DELAY_MS / 1000)
    assert not t.is_alive(), "no answer within %.0f s" % WAIT_S
    return out[0]


def values(seed):
    return (np.arange(COUNT, dtype=np.float32) + seed) * 0.5


def last_record(srv):
    """The input values of pool "slow"'s last execution, as it read them."""
    return np.array(srv.record.read_text().splitlines()[-1].split(), dtype=np.float32)


def shrink_message_ok(msg, region, key):
    assert "shared memory region '%s' (key '%s')" % (region, key) in msg, msg
    assert "shrank" in msg and "%d bytes" % NBYTES in msg, msg


# ---------------------------------------------------------------------------
# the four cases: input or output region, HTTP or gRPC

def shrink_during(srv, start, obj, size=0):
    """Starts `start` (a request on pool "slow") and another client's request
    on pool "other" through an intact region of its own; shrinks `obj` to
    `size` while both execute. Returns (the first answer, the other's)."""
    mine = in_thread(start)
    theirs = in_thread(*srv.other_request)
    wait_running(srv, ["slow", "other"])
    obj.truncate(size)
    return joined(*mine), joined(*theirs)


@pytest.fixture
def other(srv, base, obj):
    """Another client: an identity request on pool "other" over HTTP, its
    input and output in a region "keep" that nobody shrinks."""
    o = obj(2 * NBYTES, "keep")
    o.write(0, values(7).tobytes())
    assert register(base, "keep", o.key, 2 * NBYTES).status == 200

    def run():
        t = {"name": "input", "datatype": "FP32", "shape": [COUNT], "parameters": {
            "shared_memory_region": "keep", "shared_memory_byte_size": NBYTES}}
        out = {"name": "output", "parameters": {"shared_memory_region": "keep",
                                                "shared_memory_byte_size": NBYTES,
                                                "shared_memory_offset": NBYTES}}
        return post(base, "/v2/models/other/infer", {"inputs": [t], "outputs": [out]})

    srv.other_request = (run,)
    yield o
    del srv.other_request


def other_ok(reply, o):
    assert reply.status == 200, reply
    assert np.array_equal(np.frombuffer(o.read(NBYTES, NBYTES), np.float32), values(7))


def test_http_input_shrinks(srv, base, obj, other):
    s = obj()
    s.write(0, values(1).tobytes())
    assert register(base, "r", s.key).status == 200
    (status, headers, body), theirs = shrink_during(
        srv, lambda: http_infer(base, "slow", in_region="r"), s)
    srv.assert_alive()
    # An error the client can read, not a 200 whose announced body never comes.
    assert status == 400, (status, headers, body[:200])
    assert int(headers["content-length"]) == len(body)
    shrink_message_ok(json.loads(body)["error"], "r", s.key)
    other_ok(theirs, other)
    # The backend read the region after it shrank: zeros, not the end of sipd.
    assert np.array_equal(last_record(srv), np.zeros(COUNT, np.float32))
    # The object grown back: the same registration serves again.
    s.truncate(NBYTES)
    s.write(0, values(2).tobytes())
    status, headers, body = http_infer(base, "slow", in_region="r")
    assert status == 200, body[:300]
    hl = int(headers["inference-header-content-length"])
    assert np.array_equal(np.frombuffer(body[hl:], np.float32), values(2))


def test_http_output_shrinks(srv, base, obj, other):
    s = obj()
    assert register(base, "out", s.key).status == 200
    (status, headers, body), theirs = shrink_during(
        srv, lambda: http_infer(base, "slow", out_region="out", data=values(3)), s)
    srv.assert_alive()
    assert status == 400, (status, headers, body[:200])
    shrink_message_ok(json.loads(body)["error"], "out", s.key)
    other_ok(theirs, other)
    # Still shrunk: refused before running, saying so.
    status, _, body = http_infer(base, "slow", out_region="out", data=values(3))
    assert status == 400 and "truncated" in json.loads(body)["error"], body
    # Registered anew over the grown object: written again.
    s.truncate(NBYTES)
    assert K.request("POST", base + "/v2/systemsharedmemory/region/out/unregister").status == 200
    assert register(base, "out", s.key).status == 200
    status, _, body = http_infer(base, "slow", out_region="out", data=values(4))
    assert status == 200, body[:300]
    assert np.array_equal(np.frombuffer(s.read(0, NBYTES), np.float32), values(4))


def test_grpc_input_shrinks(srv, base, stub, pb, obj, other):
    s = obj()
    s.write(0, values(5).tobytes())
    assert register(base, "r", s.key).status == 200
    (code, details), theirs = shrink_during(
        srv, lambda: grpc_infer(stub, pb, "slow", in_region="r"), s)
    srv.assert_alive()
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    shrink_message_ok(details, "r", s.key)
    other_ok(theirs, other)
    assert np.array_equal(last_record(srv), np.zeros(COUNT, np.float32))
    s.truncate(NBYTES)
    s.write(0, values(6).tobytes())
    code, resp = grpc_infer(stub, pb, "slow", in_region="r")
    assert code == "ok", resp
    assert np.array_equal(np.frombuffer(resp.raw_output_contents[0], np.float32), values(6))


def test_grpc_output_shrinks(srv, base, stub, pb, obj, other):
    s = obj()
    assert register(base, "out", s.key).status == 200
    (code, details), theirs = shrink_during(
        srv, lambda: grpc_infer(stub, pb, "slow", out_region="out", data=values(8)), s)
    srv.assert_alive()
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    shrink_message_ok(details, "out", s.key)
    other_ok(theirs, other)
    s.truncate(NBYTES)
    code, resp = grpc_infer(stub, pb, "slow", out_region="out", data=values(9))
    assert code == "ok", resp
    assert resp.outputs[0].parameters["shared_memory_byte_size"].int64_param == NBYTES
    assert np.array_equal(np.frombuffer(s.read(0, NBYTES), np.float32), values(9))


def test_stream_input_shrinks(srv, base, stub, pb, obj):
    """A stream carries the error as error_message and goes on."""
    s = obj()
    s.write(0, values(10).tobytes())
    assert register(base, "r", s.key).status == 200
    def run():
        return list(stub.ModelStreamInfer(iter([grpc_request(pb, "slow", in_region="r")]),
                                          timeout=WAIT_S))
    t, out = in_thread(run)
    wait_running(srv, ["slow"])
    s.truncate(0)
    answers = joined(t, out)
    assert len(answers) == 1 and answers[0].error_message, answers
    shrink_message_ok(answers[0].error_message, "r", s.key)
    srv.assert_alive()


# ---------------------------------------------------------------------------
# names

BAD_NAMES = [".", "..", "a/b", "/", "x" * 256, "tab\there", ""]


def test_unusable_names_refused_over_grpc(srv, stub, pb, obj):
    s = obj(4096)
    for name in BAD_NAMES:
        with pytest.raises(grpc.RpcError) as ei:
            stub.SystemSharedMemoryRegister(pb[0].SystemSharedMemoryRegisterRequest(
                name=name, key=s.key, offset=0, byte_size=16))
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert "region name" in ei.value.details(), ei.value.details()
    # A NUL would cut the name short ("a" registered for "a\0b"): refused whole.
    with pytest.raises(grpc.RpcError) as ei:
        stub.SystemSharedMemoryRegister(pb[0].SystemSharedMemoryRegisterRequest(
            name="a\x00b", key=s.key, offset=0, byte_size=16))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid inference.SystemSharedMemoryRegisterRequest" in ei.value.details()
    st = stub.SystemSharedMemoryStatus(pb[0].SystemSharedMemoryStatusRequest())
    assert len(st.regions) == 0


def test_unusable_names_refused_over_http(base, obj):
    s = obj(4096)
    for name in (".", ".."):
        r = register(base, name, s.key, 16)
        assert r.status == 400, (name, r)
        assert "region name" in json.loads(r.body)["error"], r
    assert K.get(base + "/v2/systemsharedmemory/status").json() == []
    assert register(base, "a.b", s.key, 16).status == 200  # dots inside are fine
