"""Unit tests of cann_sip.protocol (encode/decode) and cann_sip.errors. No server needed."""

import pickle
import struct
import zlib

import numpy as np
import pytest

from cann_sip import protocol as P
from cann_sip import errors as E
from cann_sip.client import parse_endpoint

ALL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64"]
CODES = {"float32": 1, "uint8": 2, "int8": 3, "uint16": 4, "int16": 5, "int32": 6, "int64": 7,
         "string": 8, "bool": 9, "float16": 10, "float64": 11, "uint32": 12, "uint64": 13}


def rand_array(dtype, shape, rng):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    return (rng.standard_normal(size=shape) * 100).astype(dt)


# ---------------------------------------------------------------------------
# header

def test_header_layout():
    h = P.encode_header(P.INFER_REQUEST, 0x01020304, 0x1122334455667788)
    assert len(h) == P.HEADER_SIZE == 24
    assert h[:4] == b"SIPF"
    assert h[4:6] == b"\x01\x00"                       # version 1
    assert h[6:8] == b"\x01\x00"                       # type
    assert h[8:12] == b"\x04\x03\x02\x01"              # length, little-endian
    assert h[12:16] == b"\0\0\0\0"                     # flags
    assert h[16:24] == bytes.fromhex("8877665544332211")
    d = P.check_header(P.decode_header(h))
    assert (d.type, d.length, d.request_id, d.flags, d.version) == (
        1, 0x01020304, 0x1122334455667788, 0, 1)


@pytest.mark.parametrize("kw,match", [
    ({"magic": b"SIPX"}, "magic"),
    ({"version": 2}, "version"),
    ({"flags": 1}, "flags"),
])
def test_header_rejects(kw, match):
    with pytest.raises(P.ProtocolError, match=match):
        P.check_header(P.decode_header(P.encode_header(P.INFO_REQUEST, 1, 1, **kw)))


def test_header_rejects_type_and_size():
    with pytest.raises(P.ProtocolError, match="type"):
        P.check_header(P.decode_header(P.encode_header(99, 1, 1)))
    with pytest.raises(P.ProtocolError, match="limit"):
        P.check_header(P.decode_header(P.encode_header(1, 5000, 1)), max_payload=4096)
    with pytest.raises(P.ProtocolError, match="truncated"):
        P.decode_header(b"SIPF\x01\x00")


def test_encode_frame():
    f = P.encode_frame(P.INFO_REQUEST, 7, P.encode_info_request(P.INFO_STATUS))
    assert len(f) == 25
    h = P.decode_header(f)
    assert h.length == 1 and h.request_id == 7 and f[24] == 3


# ---------------------------------------------------------------------------
# exact bytes

def test_request_exact_bytes():
    """A hand-assembled INFER_REQUEST, byte for byte, per docs/protocol.md."""
    got = P.encode_infer_request("ab", {"x": np.array([1.5, -2.0], dtype=np.float32)},
                                 priority="low", timeout_ms=100, outputs=["y"])
    exp = b""
    exp += struct.pack("<H", 2) + b"ab"                # pool str16            (0..4)
    exp += bytes([3, 0, 0, 0])                         # priority low + reserved (4..8)
    exp += struct.pack("<I", 100)                      # timeout_ms           (8..12)
    exp += struct.pack("<HH", 1, 1)                    # n_outputs, n_inputs  (12..16)
    exp += struct.pack("<H", 1) + b"y"                 # outputs             (16..19)
    exp += struct.pack("<H", 1) + b"x"                 # tensor name         (19..22)
    exp += bytes([1, 1]) + b"\0\0"                     # FLOAT32, rank 1, reserved (22..26)
    exp += struct.pack("<q", 2)                        # dims                (26..34)
    exp += struct.pack("<Q", 8)                        # nbytes              (34..42)
    exp += b"\0" * 6                                   # pad to 48
    exp += np.array([1.5, -2.0], dtype="<f4").tobytes()
    assert got == exp
    assert len(got) == 56


def test_response_exact_bytes():
    got = P.encode_infer_response(0, "", queue_us=1, compute_us=2, total_us=3,
                                  outputs={"y": np.array(7, dtype=np.int64)})
    exp = struct.pack("<II", 0, 0) + struct.pack("<QQQ", 1, 2, 3) + struct.pack("<HHI", 1, 0, 0)
    assert len(exp) == 40
    exp += struct.pack("<H", 1) + b"y" + bytes([7, 0, 0, 0])   # rank 0: no dims
    exp += struct.pack("<Q", 8)                                  # 40+7+8 = 55
    exp += b"\0"                                                 # pad to 56
    exp += struct.pack("<q", 7)
    assert got == exp


def test_string_tensor_bytes():
    t = P.encode_tensor("s", np.array(["a", "", "é"], dtype=object), offset=0)
    data = struct.pack("<I", 1) + b"a" + struct.pack("<I", 0) + struct.pack("<I", 2) + "é".encode()
    exp = struct.pack("<H", 1) + b"s" + bytes([8, 1, 0, 0]) + struct.pack("<q", 3)
    exp += struct.pack("<Q", len(data))
    exp += b"\0" * (-len(exp) % 8) + data
    assert t == exp


@pytest.mark.parametrize("offset", range(8))
def test_padding_relative_to_payload_start(offset):
    t = P.encode_tensor("x", np.arange(3, dtype=np.int32), offset=offset)
    # name(3) + meta(4) + dims(8) + nbytes(8) = 23 bytes before padding
    data_at = offset + 23
    pad = -data_at % 8
    assert len(t) == 23 + pad + 12
    assert t[23:23 + pad] == b"\0" * pad
    name, arr, end = P.decode_tensor(b"\0" * offset + t, offset)
    assert name == "x" and end == offset + len(t)
    np.testing.assert_array_equal(arr, [0, 1, 2])


def test_all_tensor_data_is_8_aligned():
    rng = np.random.default_rng(0)
    inputs = {("n" * k): rand_array(dt, (k % 3 + 1,), rng)
              for k, dt in enumerate(ALL_DTYPES, start=1)}
    for pool in ("p", "pool_with_a_longer_name"):
        payload = P.encode_infer_request(pool, inputs, outputs=["o1", "output_two"])
        # walk the tensors by hand
        r = 2 + len(pool) + 12
        r += (2 + 2) + (2 + 10)
        for name, arr in inputs.items():
            nlen = struct.unpack_from("<H", payload, r)[0]
            assert payload[r + 2:r + 2 + nlen] == name.encode()
            r += 2 + nlen
            code, rank = payload[r], payload[r + 1]
            assert code == CODES[str(arr.dtype)] and rank == arr.ndim
            r += 4 + 8 * rank
            nbytes = struct.unpack_from("<Q", payload, r)[0]
            r += 8
            r += -r % 8
            assert r % 8 == 0
            assert payload[r:r + nbytes] == arr.astype(arr.dtype.newbyteorder("<")).tobytes()
            r += nbytes
        assert r == len(payload)


# ---------------------------------------------------------------------------
# round trips

@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (1, 0, 4), (2, 1, 1, 3)])
def test_roundtrip_numeric(dtype, shape):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shape)).encode()))
    arr = rand_array(dtype, shape, rng)
    payload = P.encode_infer_request("pool", {"x": arr})
    m = P.decode_infer_request(payload)
    out = m.inputs["x"]
    assert out.dtype == np.dtype(dtype)
    assert out.shape == shape
    np.testing.assert_array_equal(out, arr)
    # and as a response
    r = P.decode_infer_response(P.encode_infer_response(0, outputs={"y": arr}))
    assert r.outputs["y"].dtype == np.dtype(dtype) and r.outputs["y"].shape == shape
    np.testing.assert_array_equal(r.outputs["y"], arr)


def test_dtype_codes():
    for name, code in CODES.items():
        if name == "string":
            assert P.dtype_code(np.dtype("U3")) == code
            assert P.dtype_code(np.dtype("S3")) == code
            assert P.dtype_code(np.dtype(object)) == code
        else:
            assert P.dtype_code(np.dtype(name)) == code
            assert P.numpy_dtype(code) == np.dtype(name)
        assert P.dtype_name(code) == name
    with pytest.raises(TypeError):
        P.dtype_code(np.complex64)
    with pytest.raises(TypeError):
        P.dtype_code("datetime64[s]")


def test_float16_bits_preserved():
    bits = np.array([0x0000, 0x8000, 0x3C00, 0x7BFF, 0x0001, 0x7C00, 0xFC00, 0x7E00],
                    dtype=np.uint16)
    arr = bits.view(np.float16)
    out = P.decode_infer_request(P.encode_infer_request("p", {"h": arr})).inputs["h"]
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.view(np.uint16), bits)


def test_bool_is_one_byte():
    arr = np.array([True, False, True])
    payload = P.encode_infer_request("p", {"b": arr})
    assert payload.endswith(b"\x01\x00\x01")
    out = P.decode_infer_request(payload).inputs["b"]
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, arr)


def test_big_endian_and_noncontiguous_inputs():
    be = np.arange(6, dtype=">i4").reshape(2, 3)
    nc = np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::2]
    payload = P.encode_infer_request("p", {"be": be, "nc": nc})
    m = P.decode_infer_request(payload)
    assert m.inputs["be"].dtype == np.dtype("<i4")
    np.testing.assert_array_equal(m.inputs["be"], be)
    np.testing.assert_array_equal(m.inputs["nc"], nc)
    assert np.arange(6, dtype="<i4").tobytes() in payload


def test_python_values():
    m = P.decode_infer_request(P.encode_infer_request("p", {
        "i": 3, "f": 2.5, "b": True, "l": [[1, 2], [3, 4]], "s": "héllo", "sl": ["a", "b"],
        "by": b"\x00\xff", "np32": np.float32(1.25)}))
    x = m.inputs
    assert x["i"].dtype == np.int64 and x["i"].shape == () and x["i"] == 3
    assert x["f"].dtype == np.float64 and x["f"] == 2.5
    assert x["b"].dtype == np.bool_ and x["b"]
    assert x["l"].dtype == np.int64 and x["l"].tolist() == [[1, 2], [3, 4]]
    assert x["s"].dtype == object and x["s"].shape == () and x["s"][()] == "héllo".encode()
    assert x["sl"].tolist() == [b"a", b"b"]
    assert x["by"][()] == b"\x00\xff"
    assert x["np32"].dtype == np.float32 and x["np32"].shape == ()


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 2), (0, 5)])
def test_roundtrip_strings(shape):
    pool = ["", "a", "héllo wörld", "\u4e2d\u6587", "x" * 300, "nul\0inside"]
    n = int(np.prod(shape))
    flat = np.empty(n, dtype=object)
    for i in range(n):
        flat[i] = pool[i % len(pool)]
    arr = flat.reshape(shape)
    out = P.decode_infer_request(P.encode_infer_request("p", {"s": arr})).inputs["s"]
    assert out.dtype == object and out.shape == shape
    assert [b for b in out.ravel()] == [s.encode("utf-8") for s in flat]


def test_strings_mixed_and_numpy_kinds():
    # (numpy 'U'/'S' arrays drop trailing NULs themselves; object arrays keep them)
    arr = np.array(["abc", "\xff\x00z"], dtype="U")
    out = P.decode_infer_request(P.encode_infer_request("p", {"s": arr})).inputs["s"]
    assert out.tolist() == [b"abc", "\xff\x00z".encode("utf-8")]
    arr = np.array([b"a\x00b", b"\xff"], dtype="S")
    out = P.decode_infer_request(P.encode_infer_request("p", {"s": arr})).inputs["s"]
    assert out.tolist() == [b"a\x00b", b"\xff"]
    mixed = np.array([b"raw\xff", "text"], dtype=object)
    out = P.decode_infer_request(P.encode_infer_request("p", {"s": mixed})).inputs["s"]
    assert out.tolist() == [b"raw\xff", b"text"]
    with pytest.raises(TypeError, match="element 1"):
        P.encode_infer_request("p", {"s": np.array(["a", 3], dtype=object)})


def test_request_fields_roundtrip():
    payload = P.encode_infer_request("my_pool", {}, priority=2, timeout_ms=12.2,
                                     outputs=["a", "bb"])
    m = P.decode_infer_request(payload)
    assert m.pool == "my_pool" and m.priority == 2 and m.timeout_ms == 13
    assert m.outputs == ["a", "bb"] and m.inputs == {}
    assert P.decode_infer_request(P.encode_infer_request("p", {}, timeout_ms=None)).timeout_ms == 0


@pytest.mark.parametrize("value,code", [
    (None, 0), (0, 0), (1, 1), (2, 2), (3, 3), ("high", 1), ("Medium", 2), ("low", 3),
    ("default", 0)])
def test_priority_codes(value, code):
    assert P.priority_code(value) == code


@pytest.mark.parametrize("value", [4, -1, "urgent", 1.5, True])
def test_priority_invalid(value):
    with pytest.raises(ValueError):
        P.priority_code(value)


def test_request_limits():
    with pytest.raises(ValueError):
        P.encode_infer_request("p", {}, timeout_ms=-1)
    with pytest.raises(ValueError):
        P.encode_infer_request("p", {}, timeout_ms=2 ** 32)
    with pytest.raises(ValueError):
        P.encode_infer_request("p" * 70000, {})
    with pytest.raises(ValueError, match="rank"):
        P.encode_infer_request("p", {"x": np.zeros((1,) * 17, dtype=np.int8)})


def test_response_roundtrip_with_error_and_timings():
    payload = P.encode_infer_response(1, "input 'x': expected float32, got int32",
                                      queue_us=10, compute_us=20, total_us=35)
    m = P.decode_infer_response(payload)
    assert m.code == 1 and "expected float32" in m.message
    assert (m.queue_us, m.compute_us, m.total_us) == (10, 20, 35)
    assert m.outputs == {}


def test_response_outputs_view_payload_zero_copy():
    arr = np.arange(1000, dtype=np.float32)
    buf = bytearray(P.encode_infer_response(0, outputs={"y": arr, "z": arr * 2}))
    m = P.decode_infer_response(buf)
    y = m.outputs["y"]
    assert y.flags.writeable
    assert y.ctypes.data % 8 == 0
    y[0] = 42.0  # writes through to buf: it is a view
    assert P.decode_infer_response(buf).outputs["y"][0] == 42.0
    c = P.decode_infer_response(bytes(buf), copy=True).outputs["z"]
    assert c.flags.writeable and c.flags.owndata
    np.testing.assert_array_equal(c, arr * 2)


def test_info_and_error_roundtrip():
    assert P.decode_info_request(P.encode_info_request(2)) == 2
    obj = {"ready": True, "pools": {"a": "READY"}}
    assert P.decode_info_response(P.encode_info_response(0, obj)) == (0, obj)
    assert P.decode_info_response(P.encode_info_response(6, "")) == (6, None)
    assert P.decode_error(P.encode_error(4, "frame of 9000 bytes exceeds 4096")) == (
        4, "frame of 9000 bytes exceeds 4096")
    with pytest.raises(P.ProtocolError):
        P.decode_error(P.encode_error(4, "abc") + b"x")
    assert P.decode_error(P.encode_error(4, "abc")[:9], strict=False) == (4, "a")
    with pytest.raises(P.ProtocolError):
        P.decode_info_response(struct.pack("<I", 0) + b"{not json")


# ---------------------------------------------------------------------------
# malformed payloads

def _valid_request():
    return P.encode_infer_request("pool", {
        "x": np.arange(6, dtype=np.float32).reshape(2, 3),
        "s": np.array(["ab", "c"], dtype=object)}, outputs=["y"])


def test_every_truncation_fails():
    payload = _valid_request()
    for n in range(len(payload)):
        with pytest.raises(P.ProtocolError):
            P.decode_infer_request(payload[:n])


def test_trailing_bytes_fail():
    with pytest.raises(P.ProtocolError, match="trailing"):
        P.decode_infer_request(_valid_request() + b"\0")
    with pytest.raises(P.ProtocolError, match="trailing"):
        P.decode_infer_response(P.encode_infer_response(0) + b"\0")


def _tensor_payload(name=b"x", dtype=1, rank=1, reserved=0, dims=(2,), nbytes=8, data=None,
                    pad=None):
    head = struct.pack("<H", 1) + b"p" + bytes([0, 0, 0, 0]) + struct.pack("<IHH", 0, 0, 1)
    t = struct.pack("<H", len(name)) + name + struct.pack("<BBH", dtype, rank, reserved)
    t += struct.pack("<%dq" % len(dims), *dims) + struct.pack("<Q", nbytes)
    off = len(head) + len(t)
    t += (pad if pad is not None else b"\0" * (-off % 8))
    t += data if data is not None else b"\0" * nbytes
    return head + t


def test_handmade_tensor_is_valid():
    m = P.decode_infer_request(_tensor_payload())
    np.testing.assert_array_equal(m.inputs["x"], [0, 0])


@pytest.mark.parametrize("kw,match", [
    ({"rank": 17, "dims": (1,) * 17, "nbytes": 4}, "rank"),
    ({"dims": (-2,), "nbytes": 8}, "dim"),
    ({"nbytes": 12}, "expected 8"),
    ({"dtype": 99}, "dtype"),
    ({"dtype": 0}, "dtype"),
    ({"reserved": 2}, "reserved"),  # bit 0 is TENSOR_SHM
    ({"pad": b"\x01"}, "padding"),
    ({"dtype": 8, "dims": (1,), "nbytes": 6, "data": struct.pack("<I", 5) + b"ab"}, "runs past"),
    ({"dtype": 8, "dims": (2,), "nbytes": 5, "data": struct.pack("<I", 1) + b"a"}, "runs past"),
    ({"dtype": 8, "dims": (1,), "nbytes": 7, "data": struct.pack("<I", 1) + b"abc"}, "left after"),
    ({"name": b"\xff"}, "UTF-8"),
])
def test_malformed_tensor(kw, match):
    with pytest.raises(P.ProtocolError, match=match):
        P.decode_infer_request(_tensor_payload(**kw))


def test_bad_request_header_fields():
    good = P.encode_infer_request("p", {})
    bad_prio = bytearray(good)
    bad_prio[3] = 4
    with pytest.raises(P.ProtocolError, match="priority"):
        P.decode_infer_request(bytes(bad_prio))
    bad_res = bytearray(good)
    bad_res[4] = 4  # bits 0 and 1 are the parameters and output destination flags
    with pytest.raises(P.ProtocolError, match="reserved"):
        P.decode_infer_request(bytes(bad_res))


# ---------------------------------------------------------------------------
# errors and endpoints

def test_error_classes():
    expected = {1: E.InvalidArgumentError, 2: E.NotFoundError, 3: E.AlreadyExistsError,
                4: E.ResourceExhaustedError, 5: E.DeadlineExceededError, 6: E.UnavailableError,
                7: E.CancelledError, 8: E.UnimplementedError, 9: E.FailedPreconditionError,
                10: E.PermissionDeniedError, 11: E.InternalError}
    for code, cls in expected.items():
        e = E.sip_error_from_code(code, "msg %d" % code)
        assert type(e) is cls and isinstance(e, E.SipError)
        assert e.code == E.CODE_NAMES[code] and e.code_value == code
        assert e.message == "msg %d" % code
        assert str(e) == "%s: msg %d" % (E.CODE_NAMES[code], code)
        by_name = E.sip_error_from_code(E.CODE_NAMES[code], "m")
        assert type(by_name) is cls
        assert cls("x").code == E.CODE_NAMES[code]
        again = pickle.loads(pickle.dumps(e))
        assert type(again) is cls and again.message == e.message
    unk = E.sip_error_from_code(42, "odd")
    assert type(unk) is E.SipError and unk.code == "UNKNOWN" and unk.code_value == 42
    base = E.SipError("INVALID_ARGUMENT", "m")
    assert base.code == "INVALID_ARGUMENT" and base.code_value == 1


def test_parse_endpoint():
    import socket
    assert parse_endpoint("ipc:///tmp/a.sock") == (socket.AF_UNIX, "/tmp/a.sock")
    assert parse_endpoint("unix:///tmp/b.sock") == (socket.AF_UNIX, "/tmp/b.sock")
    assert parse_endpoint("tcp://127.0.0.1:8001") == ("tcp", ("127.0.0.1", 8001))
    assert parse_endpoint("tcp://[::1]:9") == ("tcp", ("::1", 9))
    assert parse_endpoint("tcp://localhost:65535") == ("tcp", ("localhost", 65535))
    for bad in ("http://x:1", "tcp://host", "tcp://host:0", "tcp://:80", "ipc://", "tcp://h:x"):
        with pytest.raises(E.InvalidArgumentError):
            parse_endpoint(bad)
