"""Shared memory regions of the threaded client (unix sockets): a sealed
memfd mapped here and registered with the server, so that tensors living in
it travel by reference instead of through the socket (docs/protocol.md,
"Shared memory").
"""

from __future__ import annotations

import fcntl
import mmap
import os
from typing import TYPE_CHECKING, Any, Iterable, Literal, Optional, Sequence, Union, cast

import numpy as np
import numpy.typing as npt

from . import protocol as P
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .client import SessionClient
    from .connection import _Connection

__all__ = ["SharedMemoryRegion"]


class SharedMemoryRegion:
    """A memfd shared with the server over this client's unix socket
    connection (``SessionClient.create_shared_memory``). No other process can
    name it. Arrays made by :meth:`ndarray` live in the region: fill them in
    place and pass them as inputs, and they travel by reference; outputs
    directed to :meth:`output` destinations come back as numpy views of the
    region (valid until the region is closed; later requests writing to the
    same bytes overwrite them).
    """

    def __init__(self, client: SessionClient, name: str, byte_size: int) -> None:
        if not isinstance(name, str) or not name or len(name.encode("utf-8")) > 255:
            raise InvalidArgumentError("a shared memory region needs a name of 1 to 255 bytes, "
                                       "not %r" % (name,))
        byte_size = int(byte_size)
        if byte_size <= 0:
            raise InvalidArgumentError("shared memory region %r: byte_size must be > 0, not %d"
                                       % (name, byte_size))
        self.client = client
        self.name = name
        self.byte_size = byte_size
        self.fd = os.memfd_create("sip:" + name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, byte_size)
            # The server requires the size to be fixed: it maps the region and
            # must not fault on a truncation.
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self.mm = mmap.mmap(self.fd, byte_size)
        except BaseException:
            os.close(self.fd)
            raise
        self.buffer: Optional[npt.NDArray[np.uint8]] = np.frombuffer(self.mm, dtype=np.uint8)
        self._addr: int = self.buffer.__array_interface__["data"][0]
        self.closed = False
        self.registered_on: Optional[_Connection] = None  # the connection it is registered on

    def _check_range(self, offset: int, nbytes: int, what: str) -> None:
        if self.closed:
            raise InvalidArgumentError("shared memory region %r is closed" % self.name)
        if offset < 0 or nbytes < 0 or offset + nbytes > self.byte_size:
            raise InvalidArgumentError("%s: offset %d + %d bytes is past the end of shared memory "
                                       "region %r (%d bytes)" % (what, offset, nbytes, self.name,
                                                                 self.byte_size))

    def ndarray(self, shape: Union[int, Sequence[int]], dtype: npt.DTypeLike = np.float32,
                offset: int = 0) -> npt.NDArray[Any]:
        """A numpy array of ``shape`` and ``dtype`` living at ``offset`` of the
        region (no copy: writes go straight to the shared memory)."""
        dt = np.dtype(dtype)
        dims = (tuple(cast(Iterable[int], shape)) if np.iterable(shape)
                else (int(cast(int, shape)),))
        count = int(np.prod(dims, dtype=np.int64))
        self._check_range(offset, count * dt.itemsize, "ndarray")
        return np.ndarray(dims, dt, buffer=self.mm, offset=offset)

    def tensor(self, shape: Sequence[int], dtype: npt.DTypeLike = np.float32,
               offset: int = 0) -> P.SharedTensor:
        """An input by reference: ``shape`` x ``dtype`` at ``offset``."""
        dt = np.dtype(dtype)
        count = int(np.prod(tuple(shape), dtype=np.int64))
        self._check_range(offset, count * dt.itemsize, "tensor")
        return P.SharedTensor(self.name, int(offset), tuple(shape), dt)

    def output(self, offset: int = 0, byte_size: Optional[int] = None) -> P.OutputDestination:
        """A destination for an output: ``byte_size`` bytes (default: the rest
        of the region) at ``offset``."""
        if byte_size is None:
            byte_size = self.byte_size - offset
        self._check_range(offset, byte_size, "output destination")
        return P.OutputDestination(self.name, int(offset), int(byte_size))

    def reference(self, arr: Any) -> Optional[P.SharedTensor]:
        """The SharedTensor for an array that lives in this region (C-contiguous),
        or None when it does not."""
        if self.closed or not isinstance(arr, np.ndarray) or arr.dtype.kind in "OUS":
            return None
        addr: int = arr.__array_interface__["data"][0]
        if not (self._addr <= addr and addr + arr.nbytes <= self._addr + self.byte_size):
            return None
        if not arr.flags.c_contiguous:
            raise InvalidArgumentError("an input living in shared memory region %r must be "
                                       "C-contiguous" % self.name)
        return P.SharedTensor(self.name, addr - self._addr, arr.shape, arr.dtype)

    def view(self, out: P.SharedOutput) -> npt.NDArray[Any]:
        """A numpy view of a P.SharedOutput the server wrote into this region."""
        self._check_range(out.offset, out.nbytes, "output")
        if out.dtype == P.DTYPE_STRING:
            raw = bytes(self.mm[out.offset:out.offset + out.nbytes])
            count = int(np.prod(out.shape, dtype=np.int64))
            return P._unpack_strings(raw, 0, len(raw), count, out.shape, "output")
        dt = P.numpy_dtype(out.dtype)
        return np.ndarray(out.shape, dt, buffer=self.mm, offset=out.offset)

    def unregister(self) -> None:
        """Unregisters the region on the server (it stays mapped here)."""
        self.client.unregister_shared_memory(self.name)

    def close(self) -> None:
        """Unregisters the region and unmaps it. Views made earlier must not be
        used afterwards."""
        if self.closed:
            return
        try:
            self.client._forget_region(self)
        finally:
            self._release()

    def _release(self) -> None:
        self.closed = True
        self.buffer = None
        try:
            self.mm.close()
        except BufferError:
            pass  # arrays still view it: the mapping goes with the last of them
        os.close(self.fd)

    def __enter__(self) -> SharedMemoryRegion:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return "SharedMemoryRegion(%r, byte_size=%d)" % (self.name, self.byte_size)
