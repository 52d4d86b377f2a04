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

from __future__ import annotations

import json
import struct
from typing import Any, Container, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from .errors import InvalidArgumentError
# The building blocks, re-exported: programs use them as cann_sip.protocol's.
from .wire import (DTYPE_BOOL, DTYPE_FLOAT16, DTYPE_FLOAT32, DTYPE_FLOAT64, DTYPE_INT8,
                   DTYPE_INT16, DTYPE_INT32, DTYPE_INT64, DTYPE_NAMES, DTYPE_STRING, DTYPE_UINT8,
                   DTYPE_UINT16, DTYPE_UINT32, DTYPE_UINT64, MAX_RANK, MAX_U32, MAX_U64,
                   TENSOR_SHM, _U8, _U32, Buffer, ProtocolError, SharedOutput, SharedTensor,
                   Tensors, _encode_str, _Reader, _read_tensor, _write_tensor, _Writer,
                   as_tensor_array, decode_tensor, dtype_code, dtype_name, encode_tensor,
                   numpy_dtype)
# Internals that the clients and the tests use as cann_sip.protocol's.
from .wire import _TENSOR_META as _TENSOR_META  # noqa: F401
from .wire import _items as _items
from .wire import _unpack_strings as _unpack_strings  # noqa: F401

__all__ = [
    "MAGIC", "VERSION", "HEADER_SIZE", "MAX_RANK", "MAX_U32", "MAX_U64", "TENSOR_SHM",
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
    "Buffer", "Tensors",
]

MAGIC = b"SIPF"
VERSION = 1
HEADER_SIZE = 24

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

PADDING = {"none": 0, "replicate_last": 1, "zero": 2}
_BATCH_PREFIX = struct.Struct("<IB3x")  # max_batch_size, padding; keeps data 8-aligned
MESSAGE_TYPES: Tuple[int, ...] = (INFER_REQUEST, INFER_RESPONSE, INFO_REQUEST, INFO_RESPONSE, ERROR)

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

_HEADER = struct.Struct("<4sHHIIQ")
_TIMES_TAIL = struct.Struct("<QQQHHI")
_REQUEST_HEAD = struct.Struct("<B3sIHH")    # after the pool name

class FrameHeader(NamedTuple):
    magic: bytes
    version: int
    type: int
    length: int
    flags: int
    request_id: int


class OutputDestination(NamedTuple):
    """Where the server writes a requested output: ``byte_size`` bytes at
    ``offset`` of region ``region``."""
    region: str
    offset: int
    byte_size: int


class InferRequestMessage(NamedTuple):
    pool: str
    priority: int
    timeout_ms: int
    outputs: List[Any]  # names, or (name, OutputDestination) pairs
    inputs: Dict[str, Any]


class InferResponseMessage(NamedTuple):
    code: int
    message: str
    queue_us: int
    compute_us: int
    total_us: int
    outputs: Dict[str, Any]  # name -> numpy array or SharedOutput
    replayed: bool = False

RESP_REPLAYED = 0x1  # INFER_RESPONSE flags: another request's answer (same idempotency key)


# ---------------------------------------------------------------------------
# dtypes and inputs

def priority_code(priority: Union[int, str, None]) -> int:
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


# ---------------------------------------------------------------------------
# header and frames

def encode_header(msg_type: int, length: int, request_id: int, *, flags: int = 0,
                  version: int = VERSION, magic: bytes = MAGIC) -> bytes:
    """24-byte frame header. flags/version/magic are overridable to build bad frames."""
    return _HEADER.pack(magic, version, msg_type, length, flags, request_id)


def decode_header(buf: Buffer) -> FrameHeader:
    """Decodes the first 24 bytes of ``buf`` into a FrameHeader (no checks)."""
    if len(buf) < HEADER_SIZE:
        raise ProtocolError("truncated frame header: %d of %d bytes" % (len(buf), HEADER_SIZE))
    return FrameHeader(*_HEADER.unpack_from(buf, 0))


def check_header(h: FrameHeader, max_payload: Optional[int] = None,
                 types: Container[int] = MESSAGE_TYPES) -> FrameHeader:
    """Raises ProtocolError unless the header is a valid version-1 frame header
    of one of ``types``."""
    if h.magic != MAGIC:
        raise ProtocolError("bad frame magic %r, expected %r" % (h.magic, MAGIC))
    if h.version != VERSION:
        raise ProtocolError("unsupported protocol version %d, expected %d" % (h.version, VERSION))
    if h.flags != 0:
        raise ProtocolError("frame flags are 0x%x, expected 0" % h.flags)
    if h.type not in types:
        raise ProtocolError("unknown message type %d" % h.type)
    if max_payload is not None and h.length > max_payload:
        raise ProtocolError("frame payload of %d bytes exceeds the limit of %d"
                            % (h.length, max_payload))
    return h


def encode_frame(msg_type: int, request_id: int, payload: Union[Buffer, Sequence[Buffer]],
                 **header_overrides: Any) -> bytes:
    """Header + payload as one bytes object."""
    data = (b"".join(payload) if isinstance(payload, (list, tuple))
            else bytes(payload))  # type: ignore[arg-type]
    return encode_header(msg_type, len(data), request_id, **header_overrides) + data


# ---------------------------------------------------------------------------
# INFER_REQUEST / INFER_RESPONSE

REQ_HAS_PARAMETERS = 0x01  # first reserved byte: a JSON parameters object follows the inputs
REQ_OUTPUT_SHM = 0x02      # each requested output is followed by its destination


def encode_infer_request_parts(pool: str, inputs: Tensors, *,
                               priority: Union[int, str, None] = 0,
                               timeout_ms: Optional[float] = 0, outputs: Any = (),
                               parameters: Optional[Mapping[str, Any]] = None) -> List[Buffer]:
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


def encode_batch_infer_request_parts(pool: str, inputs: Tensors, *, max_batch_size: int = 0,
                                     padding: str = "none",
                                     priority: Union[int, str, None] = 0,
                                     timeout_ms: Optional[float] = 0, outputs: Any = (),
                                     parameters: Optional[Mapping[str, Any]] = None
                                     ) -> List[Buffer]:
    """BATCH_INFER_REQUEST payload: an 8-byte prefix (u32 max_batch_size, u8
    padding) and an INFER_REQUEST payload whose dim 0 stacks the items."""
    if padding not in PADDING:
        raise ValueError("padding_strategy %r; expected one of %s" % (padding, sorted(PADDING)))
    if not 0 <= int(max_batch_size) <= MAX_U32:
        raise ValueError("max_batch_size must be within 0..%d" % MAX_U32)
    return [_BATCH_PREFIX.pack(int(max_batch_size), PADDING[padding])] + \
        encode_infer_request_parts(pool, inputs, priority=priority, timeout_ms=timeout_ms,
                                   outputs=outputs, parameters=parameters)


def encode_infer_request(pool: str, inputs: Tensors, *, priority: Union[int, str, None] = 0,
                         timeout_ms: Optional[float] = 0, outputs: Any = ()) -> bytes:
    """INFER_REQUEST payload as bytes."""
    return b"".join(bytes(p) for p in encode_infer_request_parts(
        pool, inputs, priority=priority, timeout_ms=timeout_ms, outputs=outputs))


def decode_infer_request(payload: Buffer, copy: bool = False) -> InferRequestMessage:
    """Parses an INFER_REQUEST payload into an InferRequestMessage (inputs as a dict)."""
    r = _Reader(payload)
    pool = r.str16("pool name")
    prio, reserved, timeout_ms, n_out, n_in = r.unpack(_REQUEST_HEAD, "request header")
    if prio > 3:
        raise ProtocolError("priority %d, expected 0..3" % prio)
    if reserved[1:] != b"\0\0" or reserved[0] & ~(REQ_HAS_PARAMETERS | REQ_OUTPUT_SHM):
        raise ProtocolError("reserved request bytes are not zero")
    outs: List[Any] = []
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


def encode_infer_response(code: int, message: Optional[str] = "", *, queue_us: int = 0,
                          compute_us: int = 0, total_us: int = 0,
                          outputs: Tensors = None) -> bytes:
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


def decode_infer_response(payload: Buffer, copy: bool = False) -> InferResponseMessage:
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

def encode_info_request(kind: int) -> bytes:
    return _U8.pack(kind)


def encode_shm_register(name: str, offset: int, byte_size: int) -> bytes:
    """SHM_REGISTER payload (the memfd travels as SCM_RIGHTS with the frame)."""
    w = _Writer()
    w.str16(name, "region name")
    w.u64(int(offset))
    w.u64(int(byte_size))
    return b"".join(bytes(p) for p in w.finish())


def encode_shm_name(name: Optional[str]) -> bytes:
    """SHM_UNREGISTER / SHM_STATUS payload: the region's name ("" = all)."""
    w = _Writer()
    w.str16(name or "", "region name")
    return b"".join(bytes(p) for p in w.finish())


def encode_auth(token: Union[str, bytes]) -> bytes:
    """AUTH payload: the token's bytes (docs/security.md)."""
    if isinstance(token, str):
        token = token.encode("utf-8")
    if not isinstance(token, (bytes, bytearray)) or not token:
        raise InvalidArgumentError("token must be a non-empty str or bytes")
    return bytes(token)


def encode_subscribe(pool: Optional[str] = None, buffer: int = 0) -> bytes:
    """SUBSCRIBE payload: str16 pool ("" or None = every pool), u32 buffer
    (events the server keeps for a slow reader; 0 = its default, 1024)."""
    if not isinstance(buffer, int) or not 0 <= buffer <= MAX_EVENT_BUFFER:
        raise ProtocolError("event buffer must be an int in 0..%d, not %r"
                            % (MAX_EVENT_BUFFER, buffer))
    w = _Writer()
    w.str16(pool or "", "pool name")
    w.u32(buffer)
    return b"".join(bytes(p) for p in w.finish())


def decode_event(payload: Buffer) -> Dict[str, Any]:
    """EVENT payload -> dict (keys: event, pool, session, dropped, ...)."""
    try:
        obj = json.loads(bytes(payload).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError("EVENT payload is not JSON: %s" % e) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise ProtocolError("EVENT payload is not a JSON object with an \"event\" name")
    return obj


def decode_info_request(payload: Buffer) -> int:
    r = _Reader(payload)
    kind = r.u8("info kind")
    r.done("info request")
    return kind


def encode_repo_request(action: str, model: Optional[str] = None, **extra: Any) -> bytes:
    """REPO_REQUEST payload: the JSON object {"action", "model", ...extra}."""
    obj: Dict[str, Any] = {"action": action}
    if model is not None:
        obj["model"] = model
    obj.update(extra)
    return json.dumps(obj).encode("utf-8")


def encode_info_response(code: int, obj: Any) -> bytes:
    """INFO_RESPONSE payload; ``obj`` is JSON-encoded unless already str/bytes."""
    if isinstance(obj, (bytes, bytearray)):
        text = bytes(obj)
    elif isinstance(obj, str):
        text = obj.encode("utf-8")
    else:
        text = json.dumps(obj).encode("utf-8")
    return _U32.pack(int(code)) + text


def decode_info_response(payload: Buffer, parse_json: bool = True) -> Tuple[int, Any]:
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


def encode_error(code: int, message: Optional[str]) -> bytes:
    msg = _encode_str(message or "", "message")
    return _U32.pack(int(code)) + _U32.pack(len(msg)) + msg


def decode_error(payload: Buffer, strict: bool = True) -> Tuple[int, str]:
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
