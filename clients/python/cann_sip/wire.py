"""The building blocks of the sip native protocol (docs/protocol.md): data
types, the payload writer and reader, and tensors. cann_sip.protocol
re-exports everything here and builds the messages on it.

  tensor  = str16 name, u8 dtype, u8 rank, u16 reserved, rank x i64 dims,
            u64 nbytes, zero padding to the next multiple of 8 counted from
            the payload start, data;
            or, with reserved bit 0 (TENSOR_SHM), after the dims: str16 region,
            u64 offset, u64 nbytes (the data is in a shared memory region).
"""

from __future__ import annotations

import struct
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

# Bytes-like payloads: what the decoders read and the encoders' parts are.
Buffer = Union[bytes, bytearray, memoryview]
# Tensors by name: a dict name -> value, or (name, value) pairs; a value is an
# array-like, a SharedTensor or (decoded) a SharedOutput.
Tensors = Union[Mapping[str, Any], Iterable[Tuple[str, Any]], None]

MAX_RANK = 16
MAX_U32 = 0xFFFFFFFF
MAX_U64 = 0xFFFFFFFFFFFFFFFF
TENSOR_SHM = 0x1    # tensor reserved bit: the data is in a shared memory region

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
_NP_BY_CODE: Dict[int, np.dtype[Any]] = {
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

_TENSOR_META = struct.Struct("<BBH")
_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

# Data blocks at least this large travel as their own buffer (no copy into the
# small-field buffer); smaller ones are copied.
_SEPARATE_PART_BYTES = 64 * 1024


class ProtocolError(ValueError):
    """A frame or payload that does not follow docs/protocol.md."""


class SharedTensor(NamedTuple):
    """A tensor whose bytes are at ``offset`` of the connection's shared memory
    region ``region`` (an input sent by reference, or an output the server
    wrote there); ``shape`` a tuple, ``dtype`` a numpy dtype or wire code."""
    region: str
    offset: int
    shape: Tuple[int, ...]
    dtype: Any


class SharedOutput(NamedTuple):
    """A decoded tensor that the server wrote into a shared memory region (the
    client turns it into a view of its mapping): ``dtype`` is the wire code."""
    region: str
    offset: int
    shape: Tuple[int, ...]
    dtype: int
    nbytes: int


# ---------------------------------------------------------------------------
# dtypes and inputs

def dtype_code(dtype: npt.DTypeLike) -> int:
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


def dtype_name(code: int) -> str:
    """Lower-case name of a wire dtype code ("float32", "string")."""
    return DTYPE_NAMES.get(code, "invalid(%s)" % code)


def numpy_dtype(code: Union[int, str]) -> np.dtype[Any]:
    """Numpy dtype of a wire code (object for STRING). Accepts names too."""
    if isinstance(code, str):
        code = _CODE_BY_NAME[code]
    if code == DTYPE_STRING:
        return np.dtype(object)
    try:
        return _NP_BY_CODE[code]
    except KeyError:
        raise ProtocolError("unknown dtype code %r" % (code,)) from None


def as_tensor_array(value: Any) -> Tuple[int, npt.NDArray[Any]]:
    """Turns an input value into (wire dtype code, numpy array).

    numpy arrays pass through; python scalars and (nested) lists go through
    np.asarray (int -> int64, float -> float64, bool -> bool, str/bytes ->
    STRING).
    """
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    return dtype_code(arr.dtype), arr


def _encode_str(s: Union[str, Buffer], what: str) -> bytes:
    if isinstance(s, str):
        b = s.encode("utf-8")
    elif isinstance(s, (bytes, bytearray, memoryview)):
        b = bytes(s)
    else:
        raise TypeError("%s must be str or bytes, not %s" % (what, type(s).__name__))
    return b


def _pack_strings(arr: npt.NDArray[Any], name: str) -> bytes:
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

    def __init__(self) -> None:
        self.parts: List[Buffer] = []
        self.small = bytearray()
        self.offset = 0

    def put(self, b: Buffer) -> None:
        n = len(b)
        if n >= _SEPARATE_PART_BYTES:
            if self.small:
                self.parts.append(bytes(self.small))
                self.small = bytearray()
            self.parts.append(b)
        else:
            self.small += b
        self.offset += n

    def u8(self, v: int) -> None:
        self.put(_U8.pack(v))

    def u16(self, v: int) -> None:
        self.put(_U16.pack(v))

    def u32(self, v: int) -> None:
        self.put(_U32.pack(v))

    def u64(self, v: int) -> None:
        self.put(_U64.pack(v))

    def str16(self, s: Union[str, Buffer], what: str) -> None:
        b = _encode_str(s, what)
        if len(b) > 0xFFFF:
            raise ValueError("%s is longer than 65535 bytes" % what)
        self.put(_U16.pack(len(b)) + b)

    def pad8(self) -> None:
        pad = -self.offset % 8
        if pad:
            self.put(b"\0" * pad)

    def finish(self) -> List[Buffer]:
        if self.small:
            self.parts.append(bytes(self.small))
            self.small = bytearray()
        return self.parts


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: Buffer) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)

    def need(self, n: int, what: str) -> None:
        if self.end - self.pos < n:
            raise ProtocolError("truncated %s at offset %d: need %d bytes, %d left"
                                % (what, self.pos, n, self.end - self.pos))

    def unpack(self, st: struct.Struct, what: str) -> Tuple[Any, ...]:
        self.need(st.size, what)
        v = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return v

    def u8(self, what: str) -> int:
        return int(self.unpack(_U8, what)[0])

    def u16(self, what: str) -> int:
        return int(self.unpack(_U16, what)[0])

    def u32(self, what: str) -> int:
        return int(self.unpack(_U32, what)[0])

    def u64(self, what: str) -> int:
        return int(self.unpack(_U64, what)[0])

    def raw(self, n: int, what: str) -> bytes:
        self.need(n, what)
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b

    def str16(self, what: str) -> str:
        n = self.u16(what + " length")
        b = self.raw(n, what)
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("%s at offset %d is not valid UTF-8" % (what, self.pos - n)) from None

    def pad8(self, what: str) -> None:
        pad = -self.pos % 8
        if pad:
            self.need(pad, what + " padding")
            if any(self.buf[self.pos:self.pos + pad]):
                raise ProtocolError("non-zero %s padding at offset %d" % (what, self.pos))
            self.pos += pad

    def done(self, what: str) -> None:
        if self.pos != self.end:
            raise ProtocolError("%d trailing bytes after the %s at offset %d"
                                % (self.end - self.pos, what, self.pos))


# ---------------------------------------------------------------------------
# tensors

def _write_shared_tensor(w: _Writer, name: str, t: SharedTensor) -> None:
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


def _write_tensor(w: _Writer, name: str, value: Any) -> None:
    if isinstance(value, SharedTensor):
        _write_shared_tensor(w, name, value)
        return
    code, arr = as_tensor_array(value)
    if arr.ndim > MAX_RANK:
        raise ValueError("tensor %r has rank %d; the protocol allows at most %d"
                         % (name, arr.ndim, MAX_RANK))
    data: Buffer
    if code == DTYPE_STRING:
        data = _pack_strings(arr, name)
    else:
        # (not ascontiguousarray: it turns a 0-d scalar into shape [1])
        arr = arr.astype(_NP_BY_CODE[code], order="C", copy=False)
        data = arr.reshape(-1).view(np.uint8).data if arr.size else b""
    w.str16(name, "tensor name")
    w.put(_TENSOR_META.pack(code, arr.ndim, 0))
    if arr.ndim:
        w.put(struct.pack("<%dq" % arr.ndim, *arr.shape))
    w.u64(len(data))
    w.pad8()
    if len(data):
        w.put(data)


def encode_tensor(name: str, value: Any, offset: int = 0) -> bytes:
    """One tensor as bytes, as if written at ``offset`` bytes into a payload
    (the padding before the data depends on it)."""
    w = _Writer()
    w.offset = offset
    _write_tensor(w, name, value)
    return b"".join(bytes(p) for p in w.finish())


def _read_tensor(r: _Reader, copy: bool) -> Tuple[str, Any]:
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


def _unpack_strings(buf: Buffer, start: int, nbytes: int, count: int, dims: Sequence[int],
                    name: str) -> npt.NDArray[Any]:
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


def decode_tensor(buf: Buffer, offset: int = 0, copy: bool = False) -> Tuple[str, Any, int]:
    """Decodes one tensor starting at ``offset`` of a payload ``buf``.

    Returns (name, array, end_offset). Numeric arrays view ``buf`` unless
    ``copy`` (writeable when ``buf`` is a bytearray).
    """
    r = _Reader(buf)
    r.pos = offset
    name, arr = _read_tensor(r, copy)
    return name, arr, r.pos


def _items(tensors: Tensors) -> List[Tuple[str, Any]]:
    if tensors is None:
        return []
    if isinstance(tensors, Mapping):
        return list(tensors.items())
    return list(tensors)
