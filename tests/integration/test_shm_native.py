"""Shared memory on the native protocol (docs/protocol.md, "Shared memory"):
memfd regions passed over the unix socket (SCM_RIGHTS), inputs read from
them by reference and outputs written into them, against numpy references;
and the hostile cases: unknown regions, out-of-bounds and overflowing
ranges, undersized destinations, missing, extra and wrong descriptors, a
region unregistered under a request, and the connection closing with regions
registered (no descriptor or mapping left behind in sipd)."""

import array
import fcntl
import json
import os
import socket
import tempfile

import numpy as np
import pytest

from cann_sip import (FailedPreconditionError, InferenceRequest, InvalidArgumentError,
                      NotFoundError, protocol as P)
from harness import wait_until

CODE_OK, CODE_INVALID, CODE_NOT_FOUND, CODE_EXISTS = 0, 1, 2, 3


@pytest.fixture
def server(start_sipd, model_dir):
    return start_sipd([
        {"name": "echo", "backend": "builtin"},
        {"name": "slow", "backend": "builtin", "backend_options": {"delay_ms": 400}},
        {"name": "addmul", "model_path": str(model_dir["addmul"]), "pool_size": 1},
        {"name": "id_string", "model_path": str(model_dir["id_string"]), "pool_size": 1},
    ])


def sealed_memfd(size, seals=fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW):
    fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


# ---- a raw connection, to send what the client never would --------------

class Raw:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.rid = 0

    def send(self, msg_type, payload, fds=()):
        self.rid += 1
        frame = P.encode_frame(msg_type, self.rid, payload)
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
        self.sock.sendmsg([frame], anc)
        return self.rid

    def recv(self):
        def exact(n):
            b = b""
            while len(b) < n:
                k = self.sock.recv(n - len(b))
                if not k:
                    return None
                b += k
            return b
        h = exact(P.HEADER_SIZE)
        if h is None:
            return None, None
        h = P.decode_header(h)
        return h, exact(h.length) if h.length else b""

    def call(self, msg_type, payload, fds=()):
        rid = self.send(msg_type, payload, fds)
        h, body = self.recv()
        assert h is not None, "connection closed without an answer"
        assert h.request_id == rid
        return h, body

    def info(self, msg_type, payload, fds=()):
        """(code, text) of the INFO_RESPONSE answering a shm message."""
        h, body = self.call(msg_type, payload, fds)
        assert h.type == P.INFO_RESPONSE, (h, body)
        return P.decode_info_response(body, parse_json=False)

    def register(self, name, fd, size, offset=0):
        return self.info(P.SHM_REGISTER, P.encode_shm_register(name, offset, size), [fd])

    def closed(self):
        h, _ = self.recv()
        return h is None

    def close(self):
        self.sock.close()


@pytest.fixture
def raw(server):
    r = Raw(server.sock_path)
    yield r
    r.close()


def infer_raw(raw, inputs, outputs=(), pool="echo"):
    """Sends an INFER_REQUEST (inputs may hold P.SharedTensor, outputs
    P.OutputDestination); returns the decoded response."""
    parts = P.encode_infer_request_parts(pool, inputs, outputs=outputs)
    h, body = raw.call(P.INFER_REQUEST, b"".join(bytes(p) for p in parts))
    assert h.type == P.INFER_RESPONSE, (h, body)
    return P.decode_infer_response(body)


# ---- round trips ----------------------------------------------------------

def test_round_trip_identity_in_and_out_of_shared_memory(server):
    c = server.client()
    region = c.create_shared_memory("buf", 1 << 20)
    x = region.ndarray((1000,), np.float32)
    x[:] = np.random.default_rng(1).standard_normal(1000, dtype=np.float32)
    dst = region.output(offset=8192, byte_size=4000)
    resp = c.infer(InferenceRequest("echo", {"input": x}, outputs={"output": dst}))
    y = resp.outputs["output"]
    assert y.dtype == np.float32 and y.shape == (1000,)
    np.testing.assert_array_equal(y, x)
    # A view of the region, at the destination: no copy on the client.
    assert np.shares_memory(y, region.buffer)
    assert y.__array_interface__["data"][0] == region.buffer.__array_interface__["data"][0] + 8192
    # Written by the server into the region's bytes.
    np.testing.assert_array_equal(np.frombuffer(region.mm, np.float32, 1000, 8192), x)
    # The same array again, written in place over the input.
    x *= 2
    resp = c.infer(InferenceRequest("echo", {"input": x},
                                    outputs={"output": region.output(0, 4000)}))
    np.testing.assert_array_equal(resp.outputs["output"], x)
    assert resp.outputs["output"].__array_interface__["data"][0] == \
        x.__array_interface__["data"][0]


def test_onnx_model_with_inputs_in_shared_memory(server):
    rng = np.random.default_rng(2)
    c = server.client()
    region = c.create_shared_memory("io", 64 * 1024)
    lhs = region.ndarray((8, 4), np.float32, offset=0)
    rhs = region.ndarray((8, 4), np.float32, offset=128)
    lhs[:] = rng.standard_normal((8, 4), dtype=np.float32)
    rhs[:] = rng.standard_normal((8, 4), dtype=np.float32)
    want = lhs * rhs + lhs
    # Output in shared memory.
    resp = c.infer(InferenceRequest("addmul", {"lhs": lhs, "rhs": rhs},
                                    outputs={"y": region.output(4096, 128)}))
    np.testing.assert_allclose(resp.outputs["y"], want, rtol=1e-6)
    assert np.shares_memory(resp.outputs["y"], region.buffer)
    # Output inline, inputs mixed: one by reference, one on the socket.
    resp = c.infer(InferenceRequest("addmul", {"lhs": region.tensor((8, 4), np.float32, 0),
                                               "rhs": rhs.copy()}))
    np.testing.assert_allclose(resp.outputs["y"], want, rtol=1e-6)
    assert not np.shares_memory(resp.outputs["y"], region.buffer)


def test_string_output_to_shared_memory(server):
    c = server.client()
    region = c.create_shared_memory("s", 4096)
    data = np.array([[b"a", b"bc"], [b"", b"hello"]], dtype=object)
    resp = c.infer(InferenceRequest("id_string", {"data": data, "scalar": np.array(b"s", object)},
                                    outputs={"data_out": region.output(0, 4096),
                                             "scalar_out": None}))
    assert resp.outputs["data_out"].tolist() == data.tolist()
    assert resp.outputs["scalar_out"].item() == b"s"


def string_request(region, offset, nbytes, count):
    """An INFER_REQUEST for id_string whose `data` input is a STRING tensor of
    `count` elements in shared memory (the Python client sends only numeric
    tensors by reference)."""
    w = P._Writer()
    w.str16("id_string", "pool")
    w.put(P._REQUEST_HEAD.pack(0, b"\0\0\0", 0, 0, 2))
    w.str16("data", "name")
    w.put(P._TENSOR_META.pack(P.DTYPE_STRING, 2, P.TENSOR_SHM))
    w.put(np.array([1, count], "<i8").tobytes())
    w.str16(region, "region")
    w.u64(offset)
    w.u64(nbytes)
    P._write_tensor(w, "scalar", np.array(b"s", object))
    return b"".join(bytes(p) for p in w.finish())


def test_string_input_in_shared_memory(server, raw):
    fd = sealed_memfd(4096)
    assert raw.register("s", fd, 4096)[0] == CODE_OK
    words = [b"", b"ab", b"hello"]
    packed = b"".join(len(x).to_bytes(4, "little") + x for x in words)
    os.pwrite(fd, packed, 100)
    h, body = raw.call(P.INFER_REQUEST, string_request("s", 100, len(packed), 3))
    m = P.decode_infer_response(body)
    assert m.code == CODE_OK, m.message
    assert m.outputs["data_out"].tolist() == [words]
    # An element running past the tensor's bytes: the request's error.
    bad = (7).to_bytes(4, "little") + b"abc"
    os.pwrite(fd, bad, 200)
    h, body = raw.call(P.INFER_REQUEST, string_request("s", 200, len(bad), 1))
    m = P.decode_infer_response(body)
    assert m.code == CODE_INVALID, m.message
    assert "string element 0 claims 7 bytes but only 3 remain" in m.message
    os.close(fd)


def test_status_and_unregister(server):
    c = server.client()
    a = c.create_shared_memory("a", 4096)
    c.create_shared_memory("b", 8192)
    assert c.shared_memory_status() == [{"name": "a", "offset": 0, "byte_size": 4096},
                                        {"name": "b", "offset": 0, "byte_size": 8192}]
    assert c.shared_memory_status("b") == [{"name": "b", "offset": 0, "byte_size": 8192}]
    with pytest.raises(NotFoundError, match="'zz'"):
        c.shared_memory_status("zz")
    a.close()
    assert [r["name"] for r in c.shared_memory_status()] == ["b"]
    c.unregister_shared_memory()
    assert c.shared_memory_status() == []
    # Regions are per connection: another client sees none of them.
    other = server.client()
    other.create_shared_memory("a", 4096)
    assert [r["name"] for r in other.shared_memory_status()] == ["a"]


def test_regions_are_per_connection(server):
    c1, c2 = server.client(), server.client()
    r1 = c1.create_shared_memory("mine", 4096)
    with pytest.raises(NotFoundError, match="no shared memory region named 'mine'"):
        c2.infer(InferenceRequest("echo", {"input": P.SharedTensor("mine", 0, (4,), np.float32)}))
    x = r1.ndarray((4,), np.float32)
    x[:] = [1, 2, 3, 4]
    np.testing.assert_array_equal(c1.infer(InferenceRequest("echo", {"input": x}))["output"], x)


# ---- request errors (the connection stays) --------------------------------

def test_bad_references_are_request_errors(server, raw):
    fd = sealed_memfd(4096)
    assert raw.register("r", fd, 4096) == (CODE_OK, '{"name":"r","offset":0,"byte_size":4096}')
    os.close(fd)
    cases = [
        # unknown region
        ({"input": P.SharedTensor("nope", 0, (4,), np.float32)}, (), CODE_NOT_FOUND,
         "input 'input': no shared memory region named 'nope'"),
        # past the end
        ({"input": P.SharedTensor("r", 4096 - 8, (4,), np.float32)}, (), CODE_INVALID,
         "offset 4088 + byte size 16 is past the end of shared memory region 'r' (4096 bytes)"),
        # offset + size overflowing 64 bits
        ({"input": P.SharedTensor("r", 2**64 - 8, (4,), np.float32)}, (), CODE_INVALID,
         "past the end"),
        # misaligned float32
        ({"input": P.SharedTensor("r", 2, (4,), np.float32)}, (), CODE_INVALID,
         "not aligned to its 4-byte elements"),
        # destination: unknown, past the end, overflowing
        ({"input": np.ones(4, np.float32)}, {"output": P.OutputDestination("nope", 0, 16)},
         CODE_NOT_FOUND, "output 'output': no shared memory region named 'nope'"),
        ({"input": np.ones(4, np.float32)}, {"output": P.OutputDestination("r", 4000, 100)},
         CODE_INVALID, "output 'output': offset 4000 + byte size 100 is past the end"),
        ({"input": np.ones(4, np.float32)},
         {"output": P.OutputDestination("r", 16, 2**64 - 8)}, CODE_INVALID, "past the end"),
        # a destination too small for the output
        ({"input": np.ones(100, np.float32)}, {"output": P.OutputDestination("r", 0, 399)},
         CODE_INVALID, "output 'output' needs 400 bytes but its destination in shared memory "
                       "region 'r' (offset 0) holds 399"),
    ]
    for inputs, outputs, code, text in cases:
        m = infer_raw(raw, inputs, outputs)
        assert m.code == code, (m, text)
        assert text in m.message
    # The connection still serves, from the region too.
    m = infer_raw(raw, {"input": P.SharedTensor("r", 0, (4,), np.float32)},
                  {"output": P.OutputDestination("r", 16, 16)})
    assert m.code == CODE_OK
    assert m.outputs["output"] == P.SharedOutput("r", 16, (4,), P.DTYPE_FLOAT32, 16)


def test_undersized_destination_through_the_client(server):
    c = server.client()
    region = c.create_shared_memory("small", 4096)
    with pytest.raises(InvalidArgumentError, match="needs 8000 bytes.*holds 96"):
        c.infer(InferenceRequest("echo", {"input": np.zeros(2000, np.float32)},
                                 outputs={"output": region.output(4000)}))
    # Nothing was written.
    assert not region.buffer.any()


def test_register_errors(server, raw):
    memfd = sealed_memfd(4096)
    # no descriptor
    code, text = raw.info(P.SHM_REGISTER, P.encode_shm_register("a", 0, 4096))
    assert code == CODE_INVALID and "carried no file descriptors; expected exactly one" in text
    # two descriptors
    other = sealed_memfd(4096)
    code, text = raw.info(P.SHM_REGISTER, P.encode_shm_register("a", 0, 4096),
                             [memfd, other])
    assert code == CODE_INVALID and "carried several file descriptors" in text
    os.close(other)
    # a pipe, a directory, a socket, a regular file, an unsealed memfd, a
    # read-only one, one sealed against writes
    rd, wr = os.pipe()
    d = os.open(tempfile.gettempdir(), os.O_RDONLY | os.O_DIRECTORY)
    s1, s2 = socket.socketpair()
    with tempfile.TemporaryFile() as f:
        f.truncate(4096)
        unsealed = sealed_memfd(4096, seals=0)
        write_sealed = sealed_memfd(4096, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_WRITE)
        ro = os.open("/proc/self/fd/%d" % memfd, os.O_RDONLY)
        unsealable = os.memfd_create("u", os.MFD_CLOEXEC)  # no MFD_ALLOW_SEALING
        os.ftruncate(unsealable, 4096)
        for fd, why in [(rd, "a pipe"), (d, "a directory"), (s1.fileno(), "a socket"),
                        (f.fileno(), "not a memfd"), (unsealed, "without F_SEAL_SHRINK"),
                        (unsealable, "cannot be sealed against shrinking"),
                        (ro, "not open read-write"), (write_sealed, "sealed against writing")]:
            code, text = raw.register("a", fd, 4096)
            assert code == CODE_INVALID, (why, text)
            assert "the descriptor passed is" in text and why in text, text
    for fd in (rd, wr, d, unsealed, unsealable, write_sealed, ro):
        os.close(fd)
    s1.close()
    s2.close()
    # bad ranges
    code, text = raw.register("a", memfd, 4097)
    assert code == CODE_INVALID and "past the end" in text and "4096 bytes" in text
    code, text = raw.register("a", memfd, 0)
    assert code == CODE_INVALID and "byte size > 0" in text
    code, text = raw.register("a", memfd, 16, offset=2**64 - 8)
    assert code == CODE_INVALID
    code, text = raw.register("", memfd, 16)
    assert code == CODE_INVALID and "needs a name" in text
    # a good one, then the same name again
    assert raw.register("a", memfd, 4096)[0] == CODE_OK
    code, text = raw.register("a", memfd, 4096)
    assert code == CODE_EXISTS and "already registered" in text
    # at an offset
    assert raw.register("b", memfd, 100, offset=3000)[0] == CODE_OK
    os.close(memfd)
    # The connection stays up after all of that.
    assert raw.info(P.SHM_STATUS, P.encode_shm_name(""))[0] == CODE_OK


def test_region_limit_per_connection(server, raw):
    fd = sealed_memfd(4096)
    for i in range(64):
        assert raw.register("r%d" % i, fd, 4096)[0] == CODE_OK
    code, text = raw.register("r64", fd, 4096)
    assert code == 4 and "64 shared memory regions are registered" in text
    raw.info(P.SHM_UNREGISTER, P.encode_shm_name("r0"))
    assert raw.register("r64", fd, 4096)[0] == CODE_OK
    os.close(fd)


def test_descriptor_on_another_message_ends_the_connection(server, raw):
    fd = sealed_memfd(4096)
    h, body = raw.call(P.INFO_REQUEST, P.encode_info_request(P.INFO_READY), [fd])
    assert h.type == P.ERROR
    code, msg = P.decode_error(body)
    assert code == CODE_INVALID and "carried file descriptors; only SHM_REGISTER" in msg
    assert raw.closed()
    os.close(fd)
    server.assert_alive()


@pytest.fixture
def paused(start_sipd):
    """A raw connection to a sipd that stops reading a connection whose
    requests in flight hold over 1 MiB (max_unsent_bytes below that)."""
    srv = start_sipd([{"name": "echo", "backend": "builtin"},
                      {"name": "slow", "backend": "builtin",
                       "backend_options": {"delay_ms": 400}}],
                     server={"max_unsent_bytes": "64KiB"})
    r = Raw(srv.sock_path)
    yield srv, r
    r.close()


def queued_behind_a_pause(raw, frames):
    """Sends a 1.2 MB request to pool slow, more than sipd holds in flight
    for one connection here, so sipd stops reading the connection until it
    is answered; then `frames` [(type, payload,
    fds)], each in a sendmsg of its own. They all wait in the socket, and
    sipd reads each frame's end together with the next frame's first bytes
    and the descriptors sent with them. Returns the answers in the order
    the frames were sent (None for those not answered), and the ERROR frame
    that ended the connection if one did."""
    x = np.arange(300000, dtype=np.float32)
    parts = P.encode_infer_request_parts("slow", {"input": x})
    raw.rid += 1
    raw.sock.sendall(P.encode_frame(P.INFER_REQUEST, raw.rid, b"".join(bytes(p) for p in parts)))
    rids = [raw.rid] + [raw.send(t, payload, fds) for t, payload, fds in frames]
    got, error = {}, None
    while len(got) < len(rids) and error is None:
        h, body = raw.recv()
        if h is None:
            break
        if h.type == P.ERROR:
            error = (h, body)
        else:
            got[h.request_id] = (h, body)
    return [got.get(r) for r in rids], error


def test_descriptors_go_to_the_frame_they_were_sent_with(paused):
    """A frame read together with the first bytes of an SHM_REGISTER behind
    it, and that SHM_REGISTER's memfd: the descriptor is the SHM_REGISTER's,
    not the frame read with it. Three times over (after an SHM_STATUS, an
    INFER_REQUEST and another SHM_REGISTER), each answered in order."""
    server, raw = paused
    fds = [sealed_memfd(4096) for _ in range(3)]
    echo = b"".join(bytes(p) for p in P.encode_infer_request_parts(
        "echo", {"input": np.arange(4, dtype=np.float32)}))
    answers, error = queued_behind_a_pause(raw, [
        (P.SHM_STATUS, P.encode_shm_name(""), ()),
        (P.SHM_REGISTER, P.encode_shm_register("a", 0, 4096), [fds[0]]),
        (P.INFER_REQUEST, echo, ()),
        (P.SHM_REGISTER, P.encode_shm_register("b", 0, 4096), [fds[1]]),
        (P.SHM_REGISTER, P.encode_shm_register("c", 0, 4096), [fds[2]]),
        (P.SHM_STATUS, P.encode_shm_name(""), ())])
    assert error is None, error
    assert [a and a[0].type for a in answers] == [
        P.INFER_RESPONSE, P.INFO_RESPONSE, P.INFO_RESPONSE, P.INFER_RESPONSE,
        P.INFO_RESPONSE, P.INFO_RESPONSE, P.INFO_RESPONSE], answers
    info = [P.decode_info_response(body, parse_json=False) for h, body in answers
            if h.type == P.INFO_RESPONSE]
    assert [code for code, _ in info] == [CODE_OK] * 5, info
    assert [r["name"] for r in json.loads(info[-1][1])["regions"]] == ["a", "b", "c"]
    out = P.decode_infer_response(answers[3][1])
    assert out.code == 0, out
    np.testing.assert_array_equal(out.outputs["output"], np.arange(4, dtype=np.float32))
    for fd in fds:
        os.close(fd)


def test_descriptor_read_ahead_of_another_message_ends_only_that(paused):
    """An SHM_STATUS read together with the first bytes of an INFO_REQUEST
    that carries a descriptor: the SHM_STATUS is answered, the INFO_REQUEST
    is the protocol error (ERROR, connection closed)."""
    server, raw = paused
    fd = sealed_memfd(4096)
    answers, error = queued_behind_a_pause(raw, [
        (P.SHM_STATUS, P.encode_shm_name(""), ()),
        (P.INFO_REQUEST, P.encode_info_request(P.INFO_READY), [fd])])
    assert answers[0][0].type == P.INFER_RESPONSE, answers
    assert answers[1][0].type == P.INFO_RESPONSE, answers
    assert P.decode_info_response(answers[1][1], parse_json=False)[0] == CODE_OK
    assert answers[2] is None and error is not None, (answers, error)
    code, msg = P.decode_error(error[1])
    assert code == CODE_INVALID and "carried file descriptors; only SHM_REGISTER" in msg
    assert raw.closed()
    os.close(fd)
    server.assert_alive()


def test_tcp_cannot_register(server):
    c = server.client(server.tcp_endpoint)
    with pytest.raises((FailedPreconditionError, InvalidArgumentError),
                       match="unix socket|no file descriptors"):
        c.create_shared_memory("t", 4096)


def test_client_side_errors(server):
    c = server.client()
    c.create_shared_memory("dup", 4096)
    with pytest.raises(InvalidArgumentError, match="already exists"):
        c.create_shared_memory("dup", 4096)
    with pytest.raises(InvalidArgumentError, match="byte_size must be > 0"):
        c.create_shared_memory("z", 0)
    region = c.create_shared_memory("r", 64)
    with pytest.raises(InvalidArgumentError, match="past the end"):
        region.ndarray((17,), np.float32)
    with pytest.raises(InvalidArgumentError, match="C-contiguous"):
        c.infer(InferenceRequest("echo", {"input": region.ndarray((4, 4), np.float32).T}))


# ---- lifetimes ------------------------------------------------------------

def test_unregister_while_a_request_uses_the_region(server):
    c = server.client()
    region = c.create_shared_memory("busy", 1 << 16)
    x = region.ndarray((256,), np.float32)
    x[:] = np.arange(256, dtype=np.float32)
    fut = c.infer_async(InferenceRequest("slow", {"input": x},
                                         outputs={"output": region.output(4096, 1024)}))
    # the request is queued or running, holding its views
    wait_until(lambda: (lambda st: st["queued_requests"] > 0 or st["sessions"][0]["state"]
                        == "RUNNING")(server.pool_status("slow", c)),
               what="the request to queue or run in pool slow")
    c.unregister_shared_memory("busy")
    assert c.shared_memory_status() == []
    resp = fut.result(timeout=20)
    np.testing.assert_array_equal(resp.outputs["output"], np.arange(256, dtype=np.float32))
    server.assert_alive()


def sipd_fds(server):
    return len(os.listdir("/proc/%d/fd" % server.proc.pid))


def sipd_memfd_maps(server):
    with open("/proc/%d/maps" % server.proc.pid) as f:
        return sum("memfd:" in line for line in f)


def wait_for(fn, want, what):
    wait_until(lambda: fn() == want, what=lambda: "%s to be %r (it is %r)" % (what, want, fn()))


def test_closing_a_connection_releases_its_regions(server):
    probe = server.client()
    probe.ready()  # the probe's own connection is open during both counts
    base_fds, base_maps = sipd_fds(server), sipd_memfd_maps(server)
    assert base_maps == 0
    for round_ in range(3):
        c = server.client()
        regions = [c.create_shared_memory("r%d" % i, 1 << 16) for i in range(5)]
        x = regions[0].ndarray((64,), np.float32)
        x[:] = round_
        resp = c.infer(InferenceRequest("echo", {"input": x},
                                        outputs={"output": regions[1].output()}))
        np.testing.assert_array_equal(resp.outputs["output"], x)
        assert sipd_memfd_maps(server) == 5
        # A raw connection that registers and hangs up without unregistering.
        raw = Raw(server.sock_path)
        fd = sealed_memfd(4096)
        assert raw.register("x", fd, 4096)[0] == CODE_OK
        os.close(fd)
        raw.close()
        c.close()
        wait_for(lambda: sipd_fds(server), base_fds, "sipd's open descriptors")
        wait_for(lambda: sipd_memfd_maps(server), 0, "sipd's memfd mappings")
    server.assert_alive()


def test_closing_the_connection_with_a_request_in_flight(server):
    """The connection goes while a request still reads its region: the view
    keeps the mapping until the request is done, then it goes too."""
    probe = server.client()
    probe.ready()
    base_fds = sipd_fds(server)
    raw = Raw(server.sock_path)
    fd = sealed_memfd(4096)
    assert raw.register("r", fd, 4096)[0] == CODE_OK
    os.close(fd)
    parts = P.encode_infer_request_parts("slow", {"input": P.SharedTensor("r", 0, (16,),
                                                                          np.float32)},
                                         outputs={"output": P.OutputDestination("r", 64, 64)})
    raw.send(P.INFER_REQUEST, b"".join(bytes(p) for p in parts))
    raw.close()
    wait_for(lambda: sipd_fds(server), base_fds, "sipd's open descriptors")
    wait_for(lambda: sipd_memfd_maps(server), 0, "sipd's memfd mappings")
    server.assert_alive()


def test_reconnect_registers_the_regions_again(server):
    c = server.client()
    region = c.create_shared_memory("again", 4096)
    x = region.ndarray((4,), np.float32)
    x[:] = [5, 6, 7, 8]
    # Drop the connection under the client: the next call opens a new one
    # and registers the region on it.
    c._conn.sock.shutdown(socket.SHUT_RDWR)
    wait_until(lambda: c._conn.dead, what="the client to see its connection gone")
    resp = c.infer(InferenceRequest("echo", {"input": x}, outputs={"output": region.output(64)}))
    np.testing.assert_array_equal(resp.outputs["output"], x)
    assert [r["name"] for r in c.shared_memory_status()] == ["again"]



# ---- the Python codec (no server) -----------------------------------------

def test_python_codec_shared_tensors():
    payload = P.encode_infer_request("p", {"a": P.SharedTensor("r", 64, (2, 3), np.float32),
                                           "b": np.arange(3, dtype=np.int32)},
                                     outputs={"y": P.OutputDestination("r", 128, 24), "z": None})
    m = P.decode_infer_request(payload)
    assert m.outputs == [("y", P.OutputDestination("r", 128, 24)), "z"]
    assert m.inputs["a"] == P.SharedOutput("r", 64, (2, 3), P.DTYPE_FLOAT32, 24)
    np.testing.assert_array_equal(m.inputs["b"], [0, 1, 2])
    # Byte layout of the reference: reserved bit 0, then region, offset, nbytes.
    ref = (b"\x01\x00a" + bytes([P.DTYPE_FLOAT32, 2]) + b"\x01\x00"
           + np.array([2, 3], "<i8").tobytes() + b"\x01\x00r"
           + np.array([64, 24], "<u8").tobytes())
    assert ref in payload
    # Requests without shared memory set no flag (their layout is unchanged).
    assert P.encode_infer_request("p", {"b": np.arange(3, dtype=np.int32)}, outputs=["z"])[4] == 0
    assert payload[4] == P.REQ_OUTPUT_SHM
    with pytest.raises(ValueError, match="STRING"):
        P.encode_infer_request("p", {"s": P.SharedTensor("r", 0, (1,), object)})
    with pytest.raises(P.ProtocolError, match="16 bytes in shared memory, expected 24"):
        bad = bytearray(payload)
        at = bytes(bad).index(np.array([64, 24], "<u8").tobytes())
        bad[at + 8] = 16
        P.decode_infer_request(bytes(bad))
