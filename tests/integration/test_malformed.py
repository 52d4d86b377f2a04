"""Malformed input on the wire (docs/protocol.md, "Malformed input"): every
bad frame gets an ERROR frame naming the problem and its connection is
closed; other connections and their requests are unaffected. Also partial
frames, oversize frames (server.max_frame_bytes: 4096), abrupt disconnects."""

import os
import socket
import struct
import threading
import time

import numpy as np
import pytest

from cann_sip import (InferenceRequest, ResourceExhaustedError, SessionClient, SipError,
                      UnavailableError, protocol as P)
from cann_sip.errors import CODE_NAMES
from harness import raw_connect, read_frame, read_until_closed, send_quietly, serve, wait_until
import models

MAX_FRAME = 4096
F = np.float32


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    pools = [
        {"name": "addmul", "model_path": str(model_dir["addmul"]), "pool_size": 1},
        {"name": "id_string", "model_path": str(model_dir["id_string"]), "pool_size": 1},
        {"name": "slow", "backend": "builtin", "pool_size": 1,
         "backend_options": {"delay_ms": 100, "shape": "-1"}},
    ]
    with serve(tmp_path_factory.mktemp("malformed"), pools,
               server={"max_frame_bytes": MAX_FRAME}) as s:
        yield s


@pytest.fixture(scope="module")
def bystander(srv):
    """A client connected for the whole module: must never notice anything."""
    c = srv.client(srv.tcp_endpoint)
    check_serving(c)
    return c


def check_serving(client, i=1):
    a = np.full((2, 4), i, F)
    r = client.infer(InferenceRequest("addmul", {"lhs": a, "rhs": a}))
    np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(a, a))


def hang_up(s):
    """Ends the client's side (sipd reads EOF, as after a close) and returns
    once sipd has closed its end: it has handled the hang-up."""
    try:
        s.shutdown(socket.SHUT_WR)
        assert read_until_closed(s, 20) == b"", "sipd answered a cut frame"
    finally:
        s.close()


def addmul_payload(a=None):
    a = np.ones((1, 4), F) if a is None else a
    return P.encode_infer_request("addmul", {"lhs": a, "rhs": a})


def frame(payload, msg_type=P.INFER_REQUEST, rid=1, **kw):
    return P.encode_frame(msg_type, rid, payload, **kw)


def expect_error_frame(srv, bystander, data, codes, endpoint=None):
    """Sends raw bytes; expects one ERROR frame with a code in `codes` and a
    message, then EOF. Returns (code name, message, header)."""
    s = raw_connect(endpoint or srv.unix_endpoint)
    try:
        send_quietly(s, data)
        fr = read_frame(s)
        assert fr is not None, "server closed the connection without an ERROR frame"
        hdr, payload = fr
        assert hdr.type == P.ERROR, "expected an ERROR frame, got type %d" % hdr.type
        code, msg = P.decode_error(payload)  # strict: the ERROR frame itself must be exact
        name = CODE_NAMES[code] if code < len(CODE_NAMES) else str(code)
        assert name in codes, "ERROR code %s (%r), expected one of %s" % (name, msg, codes)
        assert msg.strip(), "ERROR frame without a message"
        rest = read_until_closed(s)
        assert rest == b"", "server sent more after the ERROR frame: %r" % rest[:64]
    finally:
        s.close()
    srv.assert_alive()
    check_serving(bystander)
    return name, msg, hdr


# ---------------------------------------------------------------------------
# bad headers

def test_garbage_bytes(srv, bystander):
    garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(40)
    name, msg, _ = expect_error_frame(srv, bystander, garbage, {"INVALID_ARGUMENT"})
    assert "magic" in msg.lower(), msg


def test_garbage_bytes_tcp(srv, bystander):
    garbage = bytes(range(256)) * 2
    expect_error_frame(srv, bystander, garbage, {"INVALID_ARGUMENT"}, endpoint=srv.tcp_endpoint)


def test_bad_version(srv, bystander):
    _, msg, _ = expect_error_frame(srv, bystander, frame(addmul_payload(), version=2),
                                   {"INVALID_ARGUMENT", "UNIMPLEMENTED"})
    assert "version" in msg.lower(), msg


def test_nonzero_flags(srv, bystander):
    _, msg, _ = expect_error_frame(srv, bystander, frame(addmul_payload(), flags=4),
                                   {"INVALID_ARGUMENT"})
    assert "flag" in msg.lower(), msg


@pytest.mark.parametrize("msg_type", [0, 15, 99, 0xFFFF])
def test_unknown_type(srv, bystander, msg_type):
    _, msg, _ = expect_error_frame(srv, bystander, frame(b"\0" * 8, msg_type=msg_type),
                                   {"UNIMPLEMENTED"})
    assert str(msg_type) in msg, msg


@pytest.mark.parametrize("msg_type", [P.INFER_RESPONSE, P.INFO_RESPONSE, P.ERROR, P.EVENT])
def test_server_bound_types_rejected(srv, bystander, msg_type):
    expect_error_frame(srv, bystander, frame(P.encode_error(1, "x"), msg_type=msg_type),
                       {"INVALID_ARGUMENT", "UNIMPLEMENTED"})


def test_oversize_header_only(srv, bystander):
    """Rejected from the header alone: the payload is never sent."""
    _, msg, _ = expect_error_frame(srv, bystander,
                                   P.encode_header(P.INFER_REQUEST, 1_000_000, 9),
                                   {"RESOURCE_EXHAUSTED"})
    assert "1000000" in msg and str(MAX_FRAME) in msg, msg


# ---------------------------------------------------------------------------
# bad payloads

def _tensor_request(name=b"lhs", dtype=1, rank=2, reserved=0, dims=(1, 4), nbytes=16,
                    data=None):
    head = struct.pack("<H", 6) + b"addmul" + bytes(4) + struct.pack("<IHH", 0, 0, 1)
    t = struct.pack("<H", len(name)) + name + struct.pack("<BBH", dtype, rank, reserved)
    t += struct.pack("<%dq" % len(dims), *dims) + struct.pack("<Q", nbytes)
    t += b"\0" * (-(len(head) + len(t)) % 8)
    t += data if data is not None else b"\0" * nbytes
    return head + t


def test_handmade_request_is_valid(srv):
    """The hand-built payload the next tests break is accepted when intact
    (the model wants two inputs, so the answer is INVALID_ARGUMENT about rhs,
    as an INFER_RESPONSE: the frame itself parsed)."""
    assert P.decode_infer_request(_tensor_request()).inputs["lhs"].shape == (1, 4)
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(frame(_tensor_request(), rid=5))
        hdr, payload = read_frame(s)
        assert hdr.type == P.INFER_RESPONSE and hdr.request_id == 5
        m = P.decode_infer_response(payload)
        assert CODE_NAMES[m.code] == "INVALID_ARGUMENT" and "rhs" in m.message
    finally:
        s.close()


BAD_PAYLOADS = {
    "trailing_byte": addmul_payload() + b"\0",
    "truncated_tensor": addmul_payload()[:-5],
    "truncated_in_name": addmul_payload()[:3],
    "empty_payload": b"",
    "rank_17": _tensor_request(rank=17, dims=(1,) * 17, nbytes=4),
    "negative_dim": _tensor_request(dims=(-1, 4)),
    "size_mismatch": _tensor_request(nbytes=12),
    "size_overflow": _tensor_request(dims=(2 ** 62, 4), nbytes=16),
    "unknown_dtype": _tensor_request(dtype=42),
    "dtype_zero": _tensor_request(dtype=0),
    "reserved_tensor_field": _tensor_request(reserved=7),
    "string_overrun": _tensor_request(dtype=8, dims=(1, 1), nbytes=6,
                                      data=struct.pack("<I", 100) + b"ab"),
    "string_count_mismatch": _tensor_request(dtype=8, dims=(1, 2), nbytes=5,
                                             data=struct.pack("<I", 1) + b"a"),
    "string_leftover": _tensor_request(dtype=8, dims=(1, 1), nbytes=8,
                                       data=struct.pack("<I", 1) + b"abc"),
    "priority_9": struct.pack("<H", 6) + b"addmul" + bytes([9, 0, 0, 0]) + bytes(8),
    "reserved_request_bytes": struct.pack("<H", 6) + b"addmul" + bytes([0, 1, 0, 0]) + bytes(8),
    "n_inputs_too_many": struct.pack("<H", 6) + b"addmul" + bytes(4) + struct.pack("<IHH", 0, 0, 3),
    "pool_name_past_end": struct.pack("<H", 500) + b"addmul",
}


@pytest.mark.parametrize("case", sorted(BAD_PAYLOADS))
def test_bad_infer_payload(srv, bystander, case):
    _, msg, hdr = expect_error_frame(srv, bystander, frame(BAD_PAYLOADS[case], rid=77),
                                     {"INVALID_ARGUMENT"})
    assert hdr.request_id in (77, 0)


@pytest.mark.parametrize("payload", [b"", b"\x01\x02", b"\x01\0\0\0"])
def test_bad_info_payload(srv, bystander, payload):
    expect_error_frame(srv, bystander, frame(payload, msg_type=P.INFO_REQUEST),
                       {"INVALID_ARGUMENT"})


def test_unknown_info_kind(srv, bystander):
    """kind 9 parses but means nothing: either an INFO_RESPONSE with an error
    code (connection stays) or an ERROR frame. Never silence, never a crash."""
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(frame(P.encode_info_request(9), msg_type=P.INFO_REQUEST, rid=3))
        fr = read_frame(s)
        assert fr is not None, "no answer to INFO kind 9"
        hdr, payload = fr
        if hdr.type == P.INFO_RESPONSE:
            code, _ = P.decode_info_response(payload, parse_json=False)
            assert code != 0
        else:
            assert hdr.type == P.ERROR
    finally:
        s.close()
    check_serving(bystander)


# ---------------------------------------------------------------------------
# oversize frames through the client

def test_oversize_request(srv, bystander):
    c = SessionClient(srv.unix_endpoint, timeout_s=20)
    try:
        check_serving(c)
        big = np.zeros((512, 4), F)  # 8 KiB per input, over the 4096-byte limit
        with pytest.raises(ResourceExhaustedError) as ei:
            c.infer(InferenceRequest("addmul", {"lhs": big, "rhs": big}))
        assert str(MAX_FRAME) in ei.value.message, ei.value.message
        check_serving(c, 2)  # the client reconnects by itself
    finally:
        c.close()
    check_serving(bystander)


def test_oversize_request_pending_calls_fail(srv, bystander):
    """The ERROR frame ends the connection: requests already waiting on it
    fail too (with the ERROR's code), and the next call reconnects."""
    c = SessionClient(srv.unix_endpoint, timeout_s=20)
    try:
        before = srv.pool_status("slow", bystander)["stats"]["inference_count"]
        pending = [c.infer_async(InferenceRequest("slow", {"input": np.ones(2, F)}))
                   for _ in range(3)]

        def arrived():  # run, running or queued
            st = srv.pool_status("slow", bystander)
            return (st["stats"]["inference_count"] - before + st["queued_requests"]
                    + (st["sessions"][0]["state"] == "RUNNING")) >= 3
        wait_until(arrived, what="the three requests to reach pool slow")
        big = np.zeros(2048, F)
        with pytest.raises(ResourceExhaustedError):
            c.infer(InferenceRequest("slow", {"input": big}))
        for f in pending:
            try:
                r = f.result(timeout=20)  # may have been answered before the ERROR
                np.testing.assert_array_equal(r.outputs["output"], np.ones(2, F))
            except SipError as e:
                assert isinstance(e, (ResourceExhaustedError, UnavailableError)), e
        check_serving(c)
    finally:
        c.close()


def test_oversize_large_payload_tcp(srv, bystander):
    """1 MiB against a 4 KiB limit over TCP: the server stops reading after the
    header, so the client sees the ERROR frame or a reset; either way it fails
    cleanly and the server serves on."""
    c = SessionClient(srv.tcp_endpoint, timeout_s=20)
    try:
        big = np.zeros((65536, 4), F)
        with pytest.raises((ResourceExhaustedError, UnavailableError)):
            c.infer(InferenceRequest("addmul", {"lhs": big, "rhs": big}))
        check_serving(c)
    finally:
        c.close()
    srv.assert_alive()
    check_serving(bystander)


def test_frame_exactly_at_limit(srv, bystander):
    """A payload of exactly max_frame_bytes is allowed; one byte more is not."""
    def make(n):  # the string is the last thing in the payload: no padding moves
        return P.encode_infer_request("id_string", {"data": np.array([["a"]], dtype=object),
                                                    "scalar": "x" * n})
    pad = MAX_FRAME - len(make(0))
    ok = make(pad)
    assert len(ok) == MAX_FRAME
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(frame(ok, rid=11))
        hdr, payload = read_frame(s)
        assert hdr.type == P.INFER_RESPONSE, "a frame of exactly the limit was refused"
        m = P.decode_infer_response(payload)
        assert m.code == 0, m.message
        assert m.outputs["scalar_out"][()] == b"x" * pad
    finally:
        s.close()
    over = make(pad + 1)
    assert len(over) == MAX_FRAME + 1
    expect_error_frame(srv, bystander, frame(over), {"RESOURCE_EXHAUSTED"})


# ---------------------------------------------------------------------------
# partial frames, slow writers, abrupt disconnects

@pytest.mark.parametrize("cut", [0, 5, 23, 24, 30])
def test_truncated_frame_then_close(srv, bystander, cut):
    data = frame(addmul_payload())
    s = raw_connect(srv.unix_endpoint)
    s.sendall(data[:cut])
    hang_up(s)
    srv.assert_alive()
    check_serving(bystander)


def test_truncated_frame_then_close_tcp(srv, bystander):
    data = frame(addmul_payload())
    for cut in (10, 30, len(data) - 1):
        s = raw_connect(srv.tcp_endpoint)
        s.sendall(data[:cut])
        hang_up(s)
    srv.assert_alive()
    check_serving(bystander)


def test_slow_writer_does_not_block_others(srv, bystander):
    """Half a frame, a pause (others are served meanwhile), then the rest:
    the frame is reassembled and answered."""
    a = np.arange(4, dtype=F).reshape(1, 4)
    data = frame(addmul_payload(a), rid=4242)
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(data[:30])
        t0 = time.monotonic()
        for i in range(5):
            check_serving(bystander, i)
        assert time.monotonic() - t0 < 5
        s.sendall(data[30:])
        hdr, payload = read_frame(s)
        assert hdr.type == P.INFER_RESPONSE and hdr.request_id == 4242
        m = P.decode_infer_response(payload)
        assert m.code == 0, m.message
        np.testing.assert_allclose(m.outputs["y"], models.addmul_ref(a, a))
    finally:
        s.close()


def test_byte_at_a_time(srv):
    a = np.full((1, 4), 3, F)
    data = frame(addmul_payload(a), rid=8)
    s = raw_connect(srv.tcp_endpoint)
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(len(data)):
            s.send(data[i:i + 1])
        hdr, payload = read_frame(s)
        assert hdr.request_id == 8
        np.testing.assert_allclose(P.decode_infer_response(payload).outputs["y"],
                                   models.addmul_ref(a, a))
    finally:
        s.close()


def test_many_frames_in_one_write(srv):
    """Frames coalesced into one write are all answered (by request_id)."""
    blobs = []
    for i in range(20):
        a = np.full((1, 4), i, F)
        blobs.append(frame(addmul_payload(a), rid=1000 + i))
    blobs.append(frame(P.encode_info_request(1), msg_type=P.INFO_REQUEST, rid=5000))
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(b"".join(blobs))
        got = {}
        for _ in range(21):
            hdr, payload = read_frame(s)
            got[hdr.request_id] = (hdr.type, payload)
        assert sorted(got) == list(range(1000, 1020)) + [5000]
        for i in range(20):
            t, payload = got[1000 + i]
            assert t == P.INFER_RESPONSE
            a = np.full((1, 4), i, F)
            np.testing.assert_allclose(P.decode_infer_response(payload).outputs["y"],
                                       models.addmul_ref(a, a))
        t, payload = got[5000]
        assert t == P.INFO_RESPONSE and P.decode_info_response(payload)[1]["ready"] is True
    finally:
        s.close()


def test_valid_frame_then_garbage(srv, bystander):
    """A good request followed by garbage on the same connection: the good
    one may or may not be answered before the ERROR, but an ERROR comes and
    the connection closes."""
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(frame(addmul_payload(), rid=1) + b"\xde\xad\xbe\xef" * 8)
        types = []
        while True:
            fr = read_frame(s)
            if fr is None:
                break
            types.append(fr[0].type)
        assert P.ERROR in types, types
        assert types[-1] == P.ERROR, types
    finally:
        s.close()
    check_serving(bystander)


def test_disconnect_with_requests_in_flight(srv, bystander):
    """Clients that vanish while their requests queue or run (the answer is
    written to a closed socket: no SIGPIPE death, no leak of the pool)."""
    for _ in range(5):
        s = raw_connect(srv.unix_endpoint)
        for i in range(5):
            s.sendall(frame(P.encode_infer_request("slow", {"input": np.ones(3, F)}), rid=i))
        s.close()
    for _ in range(3):
        s = raw_connect(srv.tcp_endpoint)
        s.sendall(frame(P.encode_infer_request("slow", {"input": np.ones(3, F)}), rid=1))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
        s.close()
    # the slow pool drains the abandoned requests (or drops them) and serves again
    with SessionClient(srv.unix_endpoint, timeout_s=30) as c:
        r = c.infer(InferenceRequest("slow", {"input": np.arange(3, dtype=F)}))
        np.testing.assert_array_equal(r.outputs["output"], np.arange(3, dtype=F))
    srv.assert_alive()
    check_serving(bystander)


def test_connection_churn(srv, bystander):
    def churn():
        for _ in range(50):
            s = raw_connect(srv.endpoint)
            s.close()

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    srv.assert_alive()
    check_serving(bystander)


def test_many_idle_connections(srv, bystander):
    socks = [raw_connect(srv.endpoint) for _ in range(200)]
    try:
        check_serving(bystander)
        s = socks[-1]
        s.sendall(frame(P.encode_info_request(1), msg_type=P.INFO_REQUEST, rid=2))
        hdr, _ = read_frame(s)
        assert hdr.type == P.INFO_RESPONSE
    finally:
        for s in socks:
            s.close()
    srv.assert_alive()


def test_client_that_does_not_read(srv, bystander):
    """A client that pipelines thousands of requests and reads nothing for a
    while: the server must not block on it (other clients are served), and
    once it reads, every answer is there, in full."""
    n = 3000
    a = np.arange(64 * 4, dtype=F).reshape(64, 4)  # 1 KiB per answer
    one = frame(addmul_payload(a), rid=0)
    blob = b"".join(one[:16] + struct.pack("<Q", i) + one[24:] for i in range(n))
    s = raw_connect(srv.unix_endpoint, timeout=60)
    sent = threading.Event()

    def writer():
        s.sendall(blob)  # may block while the server pushes back: that is fine
        sent.set()

    before = srv.pool_status("addmul", bystander)["stats"]["inference_count"]
    th = threading.Thread(target=writer, daemon=True)
    th.start()
    try:
        # The flood is being served while its client reads nothing.
        wait_until(lambda: srv.pool_status("addmul", bystander)["stats"]["inference_count"]
                   >= before + 100, what="100 of the flood's requests to run")
        for i in range(5):
            check_serving(bystander, i)  # not starved by the flood
        ids = set()
        ref = models.addmul_ref(a, a)
        for _ in range(n):
            hdr, payload = read_frame(s)
            assert hdr.type == P.INFER_RESPONSE
            m = P.decode_infer_response(payload)
            assert m.code == 0, m.message
            ids.add(hdr.request_id)
        np.testing.assert_allclose(m.outputs["y"], ref)
        assert ids == set(range(n))
        assert sent.wait(10)
    finally:
        s.close()
    srv.assert_alive()
