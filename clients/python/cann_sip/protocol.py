"""Encoding and decoding of the sip native protocol (docs/protocol.md, version 1).

Pure functions over bytes and numpy arrays; no sockets here. Every decoder is
strict: a payload that does not parse exactly (truncated fields, trailing
bytes, a rank over 16, negative dims, a size that does not match dtype x dims,
non-zero padding or reserved fields, a string element running past the data)
raises :class:`ProtocolError` naming the field and the offset.

Layout reminders:
  frame   = 24-byte header (magic "SIPF", u16 version, u16 type, u32 length,
            u32 flags, u64 request_id) + payload, all little-endian;
  tensor  = str16 name, u8 dtype, u8 rank, u16 reserved, rank x i64 dims,
            u64 nbytes, zero padding to the next multiple of 8 counted from
            the payload start, data;
            or, with reserved bit 0 (TENSOR_SHM), after the dims: str16 region,
            u64 offset, u64 nbytes (the data is in a shared memory region).
"""

import json
import struct
from collections import namedtuple

import numpy as np

__all__ = [
    "MAGIC", "VERSION", "HEADER_SIZE", "MAX_RANK",
    "INFER_REQUEST", "INFER_RESPONSE", "INFO_REQUEST", "INFO_RESPONSE", "ERROR",
    "INFO_READY", "INFO_POOLS", "INFO_STATUS",
    "PRIORITY_DEFAULT", "PRIORITY_HIGH", "PRIORITY_MEDIUM", "PRIORITY_LOW",
    "DTYPE_FLOAT32", "DTYPE_UINT8", "DTYPE_INT8", "DTYPE_UINT16", "DTYPE_INT16",
    "DTYPE_INT32", "DTYPE_INT64", "DTYPE_STRING", "DTYPE_BOOL", "DTYPE_FLOAT16",
    "DTYPE_FLOAT64", "DTYPE_UINT32", "DTYPE_UINT64", "DTYPE_NAMES",
    "ProtocolError", "FrameHeader", "InferRequestMessage", "InferResponseMessage",
    "dtype_code", "dtype_name", "numpy_dtype", "as_tensor_array", "priority_code",
    "encode_header", "decode_header", "check_header", "encode_frame",
    "encode_tensor", "decode_tensor",
    "encode_infer_request", "encode_infer_request_parts", "decode_infer_request",
    "encode_infer_response", "decode_infer_response",
    "encode_info_request", "decode_info_request", "encode_info_response",
    "decode_info_response", "encode_error", "decode_error",
    "SHM_REGISTER", "SHM_UNREGISTER", "SHM_STATUS", "SharedTensor", "OutputDestination", "SharedOutput",
    "encode_shm_register", "encode_shm_name",
    "SUBSCRIBE", "EVENT", "encode_subscribe", "decode_event",
]

MAGIC = b"SIPF"
VERSION = 1
HEADER_SIZE = 24
MAX_RANK = 16
MAX_U32 = 0xFFFFFFFF
MAX_U64 = 0xFFFFFFFFFFFFFFFF

# Message types.
INFER_REQUEST = 1
INFER_RESPONSE = 2
INFO_REQUEST = 3
INFO_RESPONSE = 4
ERROR = 5
BATCH_INFER_REQUEST = 6
REPO_REQUEST = 7  # JSON {"action": "index" | "load" | "unload", "model": name} -> INFO_RESPONSE
# Shared memory (unix sockets), each answered by INFO_RESPONSE:
SHM_REGISTER = 8    # str16 name, u64 offset, u64 byte_size; one memfd as SCM_RIGHTS
SHM_UNREGISTER = 9  # str16 name ("" = every region of the connection)
SHM_STATUS = 10     # str16 name ("" = every region of the connection)
SUBSCRIBE = 11      # str16 pool ("" = every pool), u32 buffer -> INFO_RESPONSE, then EVENT frames
EVENT = 12          # server to client: one event as a JSON object
MAX_EVENT_BUFFER = 65536
ADMIN_REQUEST = 13  # JSON {"action": "fault" | "drain" | "resume", "pool": P, ...} -> INFO_RESPONSE
AUTH = 14           # the token, the whole payload -> INFO_RESPONSE {"authenticated", "groups"}
TENSOR_SHM = 0x1    # tensor reserved bit: the data is in a shared memory region

PADDING = {"none": 0, "replicate_last": 1, "zero": 2}
_BATCH_PREFIX = struct.Struct("<IB3x")  # max_batch_size, padding; keeps data 8-aligned
MESSAGE_TYPES = (INFER_REQUEST, INFER_RESPONSE, INFO_REQUEST, INFO_RESPONSE, ERROR)

# INFO_REQUEST kinds.
INFO_READY = 1
INFO_POOLS = 2
INFO_STATUS = 3

# Wire priorities.
PRIORITY_DEFAULT = 0
PRIORITY_HIGH = 1
PRIORITY_MEDIUM = 2
PRIORITY_LOW = 3
_PRIORITY_BY_NAME = {"default": 0, "": 0, "high": 1, "medium": 2, "low": 3}

# Data types: ONNX TensorProto.DataType numbers.
DTYPE_FLOAT32 = 1
DTYPE_UINT8 = 2
DTYPE_INT8 = 3
DTYPE_UINT16 = 4
DTYPE_INT16 = 5
DTYPE_INT32 = 6
DTYPE_INT64 = 7
DTYPE_STRING = 8
DTYPE_BOOL = 9
DTYPE_FLOAT16 = 10
DTYPE_FLOAT64 = 11
DTYPE_UINT32 = 12
DTYPE_UINT64 = 13

DTYPE_NAMES = {
    DTYPE_FLOAT32: "float32", DTYPE_UINT8: "uint8", DTYPE_INT8: "int8",
    DTYPE_UINT16: "uint16", DTYPE_INT16: "int16", DTYPE_INT32: "int32",
    DTYPE_INT64: "int64", DTYPE_STRING: "string", DTYPE_BOOL: "bool",
    DTYPE_FLOAT16: "float16", DTYPE_FLOAT64: "float64", DTYPE_UINT32: "uint32",
    DTYPE_UINT64: "uint64",
}
_CODE_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}

# Little-endian numpy dtypes of the fixed-size types.
_NP_BY_CODE = {
    DTYPE_FLOAT32: np.dtype("<f4"), DTYPE_UINT8: np.dtype("u1"), DTYPE_INT8: np.dtype("i1"),
    DTYPE_UINT16: np.dtype("<u2"), DTYPE_INT16: np.dtype("<i2"), DTYPE_INT32: np.dtype("<i4"),
    DTYPE_INT64: np.dtype("<i8"), DTYPE_BOOL: np.dtype("?"), DTYPE_FLOAT16: np.dtype("<f2"),
    DTYPE_FLOAT64: np.dtype("<f8"), DTYPE_UINT32: np.dtype("<u4"), DTYPE_UINT64: np.dtype("<u8"),
}
_CODE_BY_KIND_SIZE = {
    ("b", 1): DTYPE_BOOL,
    ("i", 1): DTYPE_INT8, ("i", 2): DTYPE_INT16, ("i", 4): DTYPE_INT32, ("i", 8): DTYPE_INT64,
    ("u", 1): DTYPE_UINT8, ("u", 2): DTYPE_UINT16, ("u", 4): DTYPE_UINT32, ("u", 8): DTYPE_UINT64,
    ("f", 2): DTYPE_FLOAT16, ("f", 4): DTYPE_FLOAT32, ("f", 8): DTYPE_FLOAT64,
}

_HEADER = struct.Struct("<4sHHIIQ")
_TENSOR_META = struct.Struct("<BBH")
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TIMES_TAIL = struct.Struct("<QQQHHI")
_REQUEST_HEAD = struct.Struct("<B3sIHH")    # after the pool name

# Data blocks at least this large travel as their own buffer (no copy into the
# small-field buffer); smaller ones are copied.
_SEPARATE_PART_BYTES = 64 * 1024


class ProtocolError(ValueError):
    """A frame or payload that does not follow docs/protocol.md."""


FrameHeader = namedtuple("FrameHeader", "magic version type length flags request_id")
# A tensor whose bytes are at ``offset`` of the connection's shared memory
# region ``region`` (an input sent by reference, or an output the server wrote
# there); ``shape`` a tuple, ``dtype`` a numpy dtype or wire code.
SharedTensor = namedtuple("SharedTensor", "region offset shape dtype")
# Where the server writes a requested output: ``byte_size`` bytes at
# ``offset`` of region ``region``.
OutputDestination = namedtuple("OutputDestination", "region offset byte_size")
# A decoded tensor that the server wrote into a shared memory region (the
# client turns it into a view of its mapping): ``dtype`` is the wire code.
SharedOutput = namedtuple("SharedOutput", "region offset shape dtype nbytes")
InferRequestMessage = namedtuple("InferRequestMessage",
                                 "pool priority timeout_ms outputs inputs")
InferResponseMessage = namedtuple("InferResponseMessage",
                                  "code message queue_us compute_us total_us outputs replayed",
                                  defaults=(False,))
RESP_REPLAYED = 0x1  # INFER_RESPONSE flags: another request's answer (same idempotency key)


# ---------------------------------------------------------------------------
# dtypes and inputs

def dtype_code(dtype):
    """Wire dtype code of a numpy dtype (or anything np.dtype accepts).

    str ('U'), bytes ('S') and object arrays are STRING. Raises TypeError for
    types the protocol has no code for (complex, datetime, ...).
    """
    dt = np.dtype(dtype)
    if dt.kind in ("U", "S", "O"):
        return DTYPE_STRING
    code = _CODE_BY_KIND_SIZE.get((dt.kind, dt.itemsize))
    if code is None:
        raise TypeError("numpy dtype %s has no sip wire type" % dt)
    return code


def dtype_name(code):
    """Lower-case name of a wire dtype code ("float32", "string")."""
    return DTYPE_NAMES.get(code, "invalid(%s)" % code)


def numpy_dtype(code):
    """Numpy dtype of a wire code (object for STRING). Accepts names too."""
    if isinstance(code, str):
        code = _CODE_BY_NAME[code]
    if code == DTYPE_STRING:
        return np.dtype(object)
    try:
        return _NP_BY_CODE[code]
    except KeyError:
        raise ProtocolError("unknown dtype code %r" % (code,)) from None


def as_tensor_array(value):
    """Turns an input value into (wire dtype code, numpy array).

    numpy arrays pass through; python scalars and (nested) lists go through
    np.asarray (int -> int64, float -> float64, bool -> bool, str/bytes ->
    STRING).
    """
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    return dtype_code(arr.dtype), arr


def priority_code(priority):
    """Wire priority: None/0 -> 0 (pool default), 1/2/3, or "high"/"medium"/"low"."""
    if priority is None:
        return PRIORITY_DEFAULT
    if isinstance(priority, str):
        try:
            return _PRIORITY_BY_NAME[priority.strip().lower()]
        except KeyError:
            raise ValueError("priority must be high, medium or low, not %r" % priority) from None
    if isinstance(priority, bool) or int(priority) != priority or not 0 <= int(priority) <= 3:
        raise ValueError("priority must be 0 (default), 1 (high), 2 (medium) or 3 (low), "
                         "not %r" % (priority,))
    return int(priority)


def _encode_str(s, what):
    if isinstance(s, str):
        b = s.encode("utf-8")
    elif isinstance(s, (bytes, bytearray, memoryview)):
        b = bytes(s)
    else:
        raise TypeError("%s must be str or bytes, not %s" % (what, type(s).__name__))
    return b


def _pack_strings(arr, name):
    """STRING tensor data: each element as u32 length + bytes, row-major."""
    chunks = []
    for i, e in enumerate(arr.ravel(order="C")):
        if isinstance(e, str):
            b = e.encode("utf-8")
        elif isinstance(e, (bytes, bytearray, memoryview)):
            b = bytes(e)
        else:
            raise TypeError("string tensor %r: element %d is %s, expected str or bytes"
                            % (name, i, type(e).__name__))
        if len(b) > MAX_U32:
            raise ValueError("string tensor %r: element %d is longer than 4 GiB" % (name, i))
        chunks.append(_U32.pack(len(b)))
        chunks.append(b)
    return b"".join(chunks)


# ---------------------------------------------------------------------------
# low-level writer / reader

class _Writer:
    """Accumulates a payload as a list of buffers, tracking the offset so
    that tensor padding is computed from the payload start."""

    __slots__ = ("parts", "small", "offset")

    def __init__(self):
        self.parts = []
        self.small = bytearray()
        self.offset = 0

    def put(self, b):
        n = len(b)
        if n >= _SEPARATE_PART_BYTES:
            if self.small:
                self.parts.append(bytes(self.small))
                self.small = bytearray()
            self.parts.append(b)
        else:
            self.small += b
        self.offset += n

    def u8(self, v):
        self.put(_U8.pack(v))

    def u16(self, v):
        self.put(_U16.pack(v))

    def u32(self, v):
        self.put(_U32.pack(v))

    def u64(self, v):
        self.put(_U64.pack(v))

    def str16(self, s, what):
        b = _encode_str(s, what)
        if len(b) > 0xFFFF:
            raise ValueError("%s is longer than 65535 bytes" % what)
        self.put(_U16.pack(len(b)) + b)

    def pad8(self):
        pad = -self.offset % 8
        if pad:
            self.put(b"\0" * pad)

    def finish(self):
        if self.small:
            self.parts.append(bytes(self.small))
            self.small = bytearray()
        return self.parts


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf):
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    def need(self, n, what):
        if self.end - self.pos < n:
            raise ProtocolError("truncated %s at offset %d: need %d bytes, %d left"
                                % (what, self.pos, n, self.end - self.pos))

    def unpack(self, st, what):
        self.need(st.size, what)
        v = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def u8(self, what):
        return self.unpack(_U8, what)[0]

    def u16(self, what):
        return self.unpack(_U16, what)[0]

    def u32(self, what):
        return self.unpack(_U32, what)[0]

    def u64(self, what):
        return self.unpack(_U64, what)[0]

    def raw(self, n, what):
        self.need(n, what)
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def str16(self, what):
        n = self.u16(what + " length")
        b = self.raw(n, what)
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("%s at offset %d is not valid UTF-8" % (what, self.pos - n)) from None

    def pad8(self, what):
        pad = -self.pos % 8
        if pad:
            self.need(pad, what + " padding")
            if any(self.buf[self.pos:self.pos + pad]):
                raise ProtocolError("non-zero %s padding at offset %d" % (what, self.pos))
            self.pos += pad

    def done(self, what):
        if self.pos != self.end:
            raise ProtocolError("%d trailing bytes after the %s at offset %d"
                                % (self.end - self.pos, what, self.pos))


# ---------------------------------------------------------------------------
# header and frames

def encode_header(msg_type, length, request_id, *, flags=0, version=VERSION, magic=MAGIC):
    """24-byte frame header. flags/version/magic are overridable to build bad frames."""
    return _HEADER.pack(magic, version, msg_type, length, flags, request_id)


def decode_header(buf):
    """Decodes the first 24 bytes of ``buf`` into a FrameHeader (no checks)."""
    if len(buf) < HEADER_SIZE:
        raise ProtocolError("truncated frame header: %d of %d bytes" % (len(buf), HEADER_SIZE))
    return FrameHeader(*_HEADER.unpack_from(buf, 0))


def check_header(h, max_payload=None):
    """Raises ProtocolError unless the header is a valid version-1 frame header."""
    if h.magic != MAGIC:
        raise ProtocolError("bad frame magic %r, expected %r" % (h.magic, MAGIC))
    if h.version != VERSION:
        raise ProtocolError("unsupported protocol version %d, expected %d" % (h.version, VERSION))
    if h.flags != 0:
        raise ProtocolError("frame flags are 0x%x, expected 0" % h.flags)
    if h.type not in MESSAGE_TYPES:
        raise ProtocolError("unknown message type %d" % h.type)
    if max_payload is not None and h.length > max_payload:
        raise ProtocolError("frame payload of %d bytes exceeds the limit of %d"
                            % (h.length, max_payload))
    return h


def encode_frame(msg_type, request_id, payload, **header_overrides):
    """Header + payload as one bytes object."""
    payload = b"".join(payload) if isinstance(payload, (list, tuple)) else bytes(payload)
    return encode_header(msg_type, len(payload), request_id, **header_overrides) + payload


# ---------------------------------------------------------------------------
# tensors

def _write_shared_tensor(w, name, t):
    code = t.dtype if isinstance(t.dtype, int) else dtype_code(t.dtype)
    if code == DTYPE_STRING:
        raise ValueError("tensor %r: STRING tensors cannot be passed in shared memory by "
                         "reference from this client" % name)
    shape = tuple(int(d) for d in t.shape)
    if len(shape) > MAX_RANK or any(d < 0 for d in shape):
        raise ValueError("tensor %r: shape %s; expected at most %d dims >= 0"
                         % (name, list(shape), MAX_RANK))
    count = 1
    for d in shape:
        count *= d
    w.str16(name, "tensor name")
    w.put(_TENSOR_META.pack(code, len(shape), TENSOR_SHM))
    if shape:
        w.put(struct.pack("<%dq" % len(shape), *shape))
    w.str16(t.region, "shared memory region name")
    w.u64(int(t.offset))
    w.u64(count * _NP_BY_CODE[code].itemsize)


def _write_tensor(w, name, value):
    if isinstance(value, SharedTensor):
        _write_shared_tensor(w, name, value)
        return
    code, arr = as_tensor_array(value)
    if arr.ndim > MAX_RANK:
        raise ValueError("tensor %r has rank %d; the protocol allows at most %d"
                         % (name, arr.ndim, MAX_RANK))
    if code == DTYPE_STRING:
        data = _pack_strings(arr, name)
    else:
        # (not ascontiguousarray: it turns a 0-d scalar into shape [1])
        arr = arr.astype(_NP_BY_CODE[code], order="C", copy=False)
        data = memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else b""
    w.str16(name, "tensor name")
    w.put(_TENSOR_META.pack(code, arr.ndim, 0))
    if arr.ndim:
        w.put(struct.pack("<%dq" % arr.ndim, *arr.shape))
    w.u64(len(data))
    w.pad8()
    if len(data):
        w.put(data)


def encode_tensor(name, value, offset=0):
    """One tensor as bytes, as if written at ``offset`` bytes into a payload
    (the padding before the data depends on it)."""
    w = _Writer()
    w.offset = offset
    _write_tensor(w, name, value)
    return b"".join(bytes(p) for p in w.finish())


def _read_tensor(r, copy):
    name = r.str16("tensor name")
    code, rank, reserved = r.unpack(_TENSOR_META, "tensor %r header" % name)
    if code not in DTYPE_NAMES:
        raise ProtocolError("tensor %r: unknown dtype %d" % (name, code))
    if rank > MAX_RANK:
        raise ProtocolError("tensor %r: rank %d exceeds %d" % (name, rank, MAX_RANK))
    if reserved & ~TENSOR_SHM:
        raise ProtocolError("tensor %r: reserved field is %d, expected 0 or 1" % (name, reserved))
    dims = r.unpack(struct.Struct("<%dq" % rank), "tensor %r dims" % name) if rank else ()
    for i, d in enumerate(dims):
        if d < 0:
            raise ProtocolError("tensor %r: dim %d is %d, expected >= 0" % (name, i, d))
    count = 1
    for d in dims:
        count *= d
    if reserved & TENSOR_SHM:
        region = r.str16("tensor %r region" % name)
        offset = r.u64("tensor %r offset" % name)
        nbytes = r.u64("tensor %r nbytes" % name)
        if code != DTYPE_STRING and nbytes != count * _NP_BY_CODE[code].itemsize:
            raise ProtocolError("tensor %r: %d bytes in shared memory, expected %d (%s x %s)"
                                % (name, nbytes, count * _NP_BY_CODE[code].itemsize,
                                   dtype_name(code), list(dims)))
        return name, SharedOutput(region, offset, tuple(dims), code, nbytes)
    nbytes = r.u64("tensor %r nbytes" % name)
    r.pad8("tensor %r" % name)
    r.need(nbytes, "tensor %r data (%d bytes)" % (name, nbytes))
    start = r.pos
    r.pos += nbytes
    if code == DTYPE_STRING:
        return name, _unpack_strings(r.buf, start, nbytes, count, dims, name)
    dt = _NP_BY_CODE[code]
    if nbytes != count * dt.itemsize:
        raise ProtocolError("tensor %r: %d bytes of data, expected %d (%s x %s)"
                            % (name, nbytes, count * dt.itemsize, dtype_name(code), list(dims)))
    if count == 0:
        return name, np.zeros(dims, dtype=dt)
    arr = np.frombuffer(r.buf, dtype=dt, count=count, offset=start).reshape(dims)
    return name, (arr.copy() if copy else arr)


def _unpack_strings(buf, start, nbytes, count, dims, name):
    out = np.empty(count, dtype=object)
    pos, end = start, start + nbytes
    mv = memoryview(buf)
    for i in range(count):
        if end - pos < 4:
            raise ProtocolError("tensor %r: string element %d length runs past the data" % (name, i))
        (n,) = _U32.unpack_from(buf, pos)
        pos += 4
        if end - pos < n:
            raise ProtocolError("tensor %r: string element %d (%d bytes) runs past the data"
                                % (name, i, n))
        out[i] = bytes(mv[pos:pos + n])
        pos += n
    if pos != end:
        raise ProtocolError("tensor %r: %d bytes of string data left after %d elements"
                            % (name, end - pos, count))
    return out.reshape(dims)


def decode_tensor(buf, offset=0, copy=False):
    """Decodes one tensor starting at ``offset`` of a payload ``buf``.

    Returns (name, array, end_offset). Numeric arrays view ``buf`` unless
    ``copy`` (writeable when ``buf`` is a bytearray).
    """
    r = _Reader(buf)
    r.pos = offset
    name, arr = _read_tensor(r, copy)
    return name, arr, r.pos


# ---------------------------------------------------------------------------
# INFER_REQUEST / INFER_RESPONSE

def _items(tensors):
    if tensors is None:
        return []
    if isinstance(tensors, dict):
        return list(tensors.items())
    return list(tensors)


REQ_HAS_PARAMETERS = 0x01  # first reserved byte: a JSON parameters object follows the inputs
REQ_OUTPUT_SHM = 0x02      # each requested output is followed by its destination


def encode_infer_request_parts(pool, inputs, *, priority=0, timeout_ms=0, outputs=(),
                               parameters=None):
    """INFER_REQUEST payload as a list of buffers (large tensor data is not
    copied). ``inputs``: dict (or pairs) name -> array-like. ``parameters``:
    a dict sent as JSON after the inputs (e.g. {"pipeline_config": {...}})."""
    prio = priority_code(priority)
    if timeout_ms is None:
        timeout_ms = 0
    timeout_ms = int(-(-timeout_ms // 1))  # round fractions up
    if not 0 <= timeout_ms <= MAX_U32:
        raise ValueError("timeout_ms must be within 0..%d, not %r" % (MAX_U32, timeout_ms))
    # outputs: names, or a dict name -> OutputDestination (None: inline).
    if isinstance(outputs, dict):
        outs = list(outputs.items())
    else:
        outs = [(o, None) for o in (outputs or ())]
    to_shm = any(d is not None for _, d in outs)
    ins = _items(inputs)
    if len(outs) > 0xFFFF or len(ins) > 0xFFFF:
        raise ValueError("too many inputs or outputs (at most 65535 each)")
    w = _Writer()
    w.str16(pool, "pool name")
    flags = bytes([(REQ_HAS_PARAMETERS if parameters is not None else 0) |
                   (REQ_OUTPUT_SHM if to_shm else 0), 0, 0])
    w.put(_REQUEST_HEAD.pack(prio, flags, timeout_ms, len(outs), len(ins)))
    for o, d in outs:
        w.str16(o, "output name")
        if to_shm:
            w.str16(d.region if d is not None else "", "output destination region")
            w.u64(int(d.offset) if d is not None else 0)
            w.u64(int(d.byte_size) if d is not None else 0)
    for name, value in ins:
        _write_tensor(w, name, value)
    if parameters is not None:
        text = json.dumps(parameters).encode("utf-8")
        w.u32(len(text))
        w.put(text)
    return w.finish()


def encode_batch_infer_request_parts(pool, inputs, *, max_batch_size=0, padding="none",
                                     priority=0, timeout_ms=0, outputs=(), parameters=None):
    """BATCH_INFER_REQUEST payload: an 8-byte prefix (u32 max_batch_size, u8
    padding) and an INFER_REQUEST payload whose dim 0 stacks the items."""
    if padding not in PADDING:
        raise ValueError("padding_strategy %r; expected one of %s" % (padding, sorted(PADDING)))
    if not 0 <= int(max_batch_size) <= MAX_U32:
        raise ValueError("max_batch_size must be within 0..%d" % MAX_U32)
    return [_BATCH_PREFIX.pack(int(max_batch_size), PADDING[padding])] + \
        encode_infer_request_parts(pool, inputs, priority=priority, timeout_ms=timeout_ms,
                                   outputs=outputs, parameters=parameters)


def encode_infer_request(pool, inputs, *, priority=0, timeout_ms=0, outputs=()):
    """INFER_REQUEST payload as bytes."""
    return b"".join(bytes(p) for p in encode_infer_request_parts(
        pool, inputs, priority=priority, timeout_ms=timeout_ms, outputs=outputs))


def decode_infer_request(payload, copy=False):
    """Parses an INFER_REQUEST payload into an InferRequestMessage (inputs as a dict)."""
    r = _Reader(payload)
    pool = r.str16("pool name")
    prio, reserved, timeout_ms, n_out, n_in = r.unpack(_REQUEST_HEAD, "request header")
    if prio > 3:
        raise ProtocolError("priority %d, expected 0..3" % prio)
    if reserved[1:] != b"\0\0" or reserved[0] & ~(REQ_HAS_PARAMETERS | REQ_OUTPUT_SHM):
        raise ProtocolError("reserved request bytes are not zero")
    outs = []
    for i in range(n_out):
        outs.append(r.str16("output name %d" % i))
        if reserved[0] & REQ_OUTPUT_SHM:
            region = r.str16("output %d destination region" % i)
            offset, size = r.u64("output %d offset" % i), r.u64("output %d byte_size" % i)
            if region:
                outs[-1] = (outs[-1], OutputDestination(region, offset, size))
    ins = {}
    for _ in range(n_in):
        name, arr = _read_tensor(r, copy)
        ins[name] = arr
    if reserved[0] & REQ_HAS_PARAMETERS:
        n = r.u32("parameters length")
        r.raw(n, "parameters")
    r.done("request")
    return InferRequestMessage(pool, prio, timeout_ms, outs, ins)


def encode_infer_response(code, message="", *, queue_us=0, compute_us=0, total_us=0,
                          outputs=None):
    """INFER_RESPONSE payload as bytes (outputs: dict or pairs)."""
    w = _Writer()
    msg = _encode_str(message or "", "message")
    w.u32(int(code))
    w.u32(len(msg))
    w.put(msg)
    outs = _items(outputs)
    w.put(_TIMES_TAIL.pack(queue_us, compute_us, total_us, len(outs), 0, 0))
    for name, value in outs:
        _write_tensor(w, name, value)
    return b"".join(bytes(p) for p in w.finish())


def decode_infer_response(payload, copy=False):
    """Parses an INFER_RESPONSE payload into an InferResponseMessage.

    Numeric outputs view ``payload`` (zero copy) unless ``copy``; STRING
    outputs are object arrays of bytes.
    """
    r = _Reader(payload)
    code = r.u32("response code")
    n = r.u32("message length")
    msg = r.raw(n, "message").decode("utf-8", "replace")
    queue_us, compute_us, total_us, n_out, res16, res32 = r.unpack(_TIMES_TAIL, "response times")
    if (res16 & ~RESP_REPLAYED) or res32:
        raise ProtocolError("reserved response fields are not zero (apart from flag bit 0)")
    outs = {}
    for _ in range(n_out):
        name, arr = _read_tensor(r, copy)
        outs[name] = arr
    r.done("response")
    return InferResponseMessage(code, msg, queue_us, compute_us, total_us, outs,
                                bool(res16 & RESP_REPLAYED))


# ---------------------------------------------------------------------------
# INFO and ERROR

def encode_info_request(kind):
    return _U8.pack(kind)


def encode_shm_register(name, offset, byte_size):
    """SHM_REGISTER payload (the memfd travels as SCM_RIGHTS with the frame)."""
    w = _Writer()
    w.str16(name, "region name")
    w.u64(int(offset))
    w.u64(int(byte_size))
    return b"".join(bytes(p) for p in w.finish())


def encode_shm_name(name):
    """SHM_UNREGISTER / SHM_STATUS payload: the region's name ("" = all)."""
    w = _Writer()
    w.str16(name or "", "region name")
    return b"".join(bytes(p) for p in w.finish())


def encode_auth(token):
    """AUTH payload: the token's bytes (docs/security.md)."""
    if isinstance(token, str):
        token = token.encode("utf-8")
    if not isinstance(token, (bytes, bytearray)) or not token:
        raise InvalidArgumentError("token must be a non-empty str or bytes")
    return bytes(token)


def encode_subscribe(pool=None, buffer=0):
    """SUBSCRIBE payload: str16 pool ("" or None = every pool), u32 buffer
    (events the server keeps for a slow reader; 0 = its default, 1024)."""
    if not isinstance(buffer, int) or not 0 <= buffer <= MAX_EVENT_BUFFER:
        raise ProtocolError("event buffer must be an int in 0..%d, not %r"
                            % (MAX_EVENT_BUFFER, buffer))
    w = _Writer()
    w.str16(pool or "", "pool name")
    w.u32(buffer)
    return b"".join(bytes(p) for p in w.finish())


def decode_event(payload):
    """EVENT payload -> dict (keys: event, pool, session, dropped, ...)."""
    try:
        obj = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError("EVENT payload is not JSON: %s" % e) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise ProtocolError("EVENT payload is not a JSON object with an \"event\" name")
    return obj


def decode_info_request(payload):
    r = _Reader(payload)
    kind = r.u8("info kind")
    r.done("info request")
    return kind


def encode_repo_request(action, model=None, **extra):
    """REPO_REQUEST payload: the JSON object {"action", "model", ...extra}."""
    obj = {"action": action}
    if model is not None:
        obj["model"] = model
    obj.update(extra)
    return json.dumps(obj).encode("utf-8")


def encode_info_response(code, obj):
    """INFO_RESPONSE payload; ``obj`` is JSON-encoded unless already str/bytes."""
    if isinstance(obj, (bytes, bytearray)):
        text = bytes(obj)
    elif isinstance(obj, str):
        text = obj.encode("utf-8")
    else:
        text = json.dumps(obj).encode("utf-8")
    return _U32.pack(int(code)) + text


def decode_info_response(payload, parse_json=True):
    """Returns (code, parsed JSON or None when empty) — or (code, text)."""
    r = _Reader(payload)
    code = r.u32("info code")
    text = bytes(payload[r.pos:]).decode("utf-8", "replace")
    if not parse_json:
        return code, text
    if not text.strip():
        return code, None
    try:
        return code, json.loads(text)
    except ValueError as e:
        raise ProtocolError("INFO_RESPONSE JSON does not parse: %s" % e) from None


def encode_error(code, message):
    msg = _encode_str(message or "", "message")
    return _U32.pack(int(code)) + _U32.pack(len(msg)) + msg


def decode_error(payload, strict=True):
    """Returns (code, message) of an ERROR payload. With strict=False a short
    or overlong message is taken as far as it goes (the client's view: any
    ERROR frame ends the connection anyway)."""
    if not strict:
        if len(payload) < 4:
            return 11, "malformed ERROR frame (%d bytes)" % len(payload)
        code = _U32.unpack_from(payload, 0)[0]
        n = _U32.unpack_from(payload, 4)[0] if len(payload) >= 8 else 0
        return code, bytes(payload[8:8 + n]).decode("utf-8", "replace")
    r = _Reader(payload)
    code = r.u32("error code")
    n = r.u32("error message length")
    msg = r.raw(n, "error message").decode("utf-8", "replace")
    r.done("error")
    return code, msg
