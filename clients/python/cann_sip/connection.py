"""The threaded client's connection: one socket, its pending calls and the
reader thread that completes them (see cann_sip.client for the design).
"""

from __future__ import annotations

import array
import errno
import select
import socket
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence, Tuple, cast

from . import messages as M
from . import protocol as P
from .errors import (CancelledError, DeadlineExceededError, InternalError, InvalidArgumentError,
                     SipError, UnavailableError, copy_error)

if TYPE_CHECKING:
    from .shm import SharedMemoryRegion

# How often the reader wakes up while idle to expire overdue calls.
_SWEEP_INTERVAL_S = 0.1
_RECV_CHUNK = 1 << 20


def _connect_unix(sock: socket.socket, addr: str, timeout_s: float) -> None:
    """Connects a unix socket, retrying while the server's listen backlog is
    full (EAGAIN: a burst of clients connecting at once) with a backoff from
    1 ms to 100 ms, for up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            sock.connect(addr)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BlockingIOError(errno.EAGAIN, "the server's listen backlog stayed full "
                                      "for %.1f s (it accepts no connections)" % timeout_s)
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.1)


def _open_socket(endpoint: str, timeout_s: float) -> socket.socket:
    family, addr = M.parse_endpoint(endpoint)
    try:
        if family == "tcp":
            sock = socket.create_connection(cast(Tuple[str, int], addr), timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout_s)
                _connect_unix(sock, cast(str, addr), timeout_s)
            except BaseException:
                sock.close()
                raise
    except OSError as e:
        raise UnavailableError("cannot connect to %s: %s" % (endpoint, e)) from None
    # The timeout bounds sends (a server that stops reading); the reader
    # only calls recv after poll() says data is there.
    sock.settimeout(timeout_s)
    return sock


def _sendall_parts(sock: socket.socket, parts: Sequence[P.Buffer], fds: Sequence[int] = ()) -> None:
    """sendall over several buffers without joining them; ``fds`` go as
    SCM_RIGHTS with the first bytes."""
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    while views:
        # IOV_MAX is 1024 on Linux.
        sent = sock.sendmsg(views[:512], anc)
        anc = []
        while sent:
            n = len(views[0])
            if sent >= n:
                sent -= n
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


class _Pending:
    __slots__ = ("future", "kind", "t0", "deadline", "pool", "regions")

    def __init__(self, future: Future[Any], kind: str, t0: float, deadline: float,
                 pool: Optional[str], regions: Optional[Dict[str, SharedMemoryRegion]] = None
                 ) -> None:
        self.future = future
        self.kind = kind
        self.t0 = t0
        self.deadline = deadline
        self.pool = pool
        self.regions = regions  # {name: SharedMemoryRegion} its outputs may be written to


class _ConnectionGone(Exception):
    """Internal: the connection died before the request was registered."""


class _Connection:
    """One socket, its pending calls and its reader thread."""

    def __init__(self, sock: socket.socket, endpoint: str, timeout_s: float) -> None:
        self.sock = sock
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.wlock = threading.Lock()
        self.lock = threading.Lock()
        self.pending: Dict[int, _Pending] = {}
        self.dead = False
        self.dead_error: Optional[BaseException] = None
        # the client's {pool: (fn, config)}, shared
        self.postprocess: Optional[Dict[str, M.Postprocess]] = None
        self.regions: Dict[str, SharedMemoryRegion] = {}  # the client's, shared
        self._last_sweep = time.monotonic()
        self.reader = threading.Thread(target=self._read_loop, name="cann_sip-reader",
                                       daemon=True)
        self.reader.start()

    # -- open ---------------------------------------------------------------
    @classmethod
    def open(cls, endpoint: str, timeout_s: float) -> _Connection:
        return cls(_open_socket(endpoint, timeout_s), endpoint, timeout_s)

    # -- requests -----------------------------------------------------------
    def submit(self, request_id: int, kind: str, msg_type: int, parts: Sequence[P.Buffer],
               pool: Optional[str], fds: Sequence[int] = (),
               regions: Optional[Dict[str, SharedMemoryRegion]] = None) -> Future[Any]:
        """Registers and sends one request; returns its Future."""
        fut: Future[Any] = Future()
        fut.set_running_or_notify_cancel()  # not cancellable once created
        t0 = time.monotonic()
        entry = _Pending(fut, kind, t0, t0 + self.timeout_s, pool, regions)
        length = sum(len(p) for p in parts)
        if length > P.MAX_U32:
            raise InvalidArgumentError("request payload of %d bytes exceeds the protocol's "
                                       "4 GiB frame limit" % length)
        header = P.encode_header(msg_type, length, request_id)
        with self.lock:
            if self.dead:
                raise _ConnectionGone()
            if request_id in self.pending:
                raise InvalidArgumentError("request_id %d is already in flight on this "
                                           "connection" % request_id)
            self.pending[request_id] = entry
        try:
            with self.wlock:
                _sendall_parts(self.sock, [header] + list(parts), fds)
        except OSError as e:
            self._after_send_failure(e)
        return fut

    def _after_send_failure(self, exc: OSError) -> None:
        # The peer may have answered with an ERROR frame before closing (an
        # oversize frame is rejected before its payload is read): give the
        # reader a moment to deliver it, then fail whatever is left.
        if isinstance(exc, socket.timeout):
            # A partial frame may be on the wire: the stream is unusable.
            self.fail(UnavailableError("sending to %s timed out after %.1f s"
                                       % (self.endpoint, self.timeout_s)))
            return
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if threading.current_thread() is not self.reader:
            self.reader.join(2.0)
        self.fail(UnavailableError("connection to %s lost while sending: %s"
                                   % (self.endpoint, exc)))

    # -- failure and close --------------------------------------------------
    def fail(self, err: BaseException) -> None:
        """Marks the connection dead, fails every pending call with a copy of
        ``err`` and wakes the reader (which closes the socket)."""
        with self.lock:
            if self.dead:
                return
            self.dead = True
            self.dead_error = err
            pending, self.pending = self.pending, {}
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for rid, entry in pending.items():
            e = copy_error(err)
            if isinstance(e, SipError):
                e.request_id = rid
            entry.future.set_exception(e)

    def close(self, err: Optional[BaseException] = None) -> None:
        self.fail(err or CancelledError("client closed"))
        if threading.current_thread() is not self.reader:
            self.reader.join(5.0)

    def _sweep(self, now: float) -> None:
        self._last_sweep = now
        with self.lock:
            expired = [(rid, e) for rid, e in self.pending.items() if e.deadline <= now]
            for rid, _ in expired:
                del self.pending[rid]
        for rid, entry in expired:
            err = DeadlineExceededError("no answer from %s within %.1f s" % (self.endpoint,
                                                                             self.timeout_s))
            err.request_id = rid
            entry.future.set_exception(err)

    # -- reader -------------------------------------------------------------
    def _recv_exact(self, n: int, poller: select.poll, at_boundary: bool) -> Optional[bytearray]:
        """Reads exactly n bytes into a fresh bytearray; None on a clean EOF
        at a frame boundary. Raises _ConnectionGone when the connection is
        closed locally."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            if self.dead:
                raise _ConnectionGone()
            now = time.monotonic()
            if now - self._last_sweep >= _SWEEP_INTERVAL_S:
                self._sweep(now)
            if not poller.poll(int(_SWEEP_INTERVAL_S * 1000)):
                continue
            try:
                k = self.sock.recv_into(view[got:], min(n - got, _RECV_CHUNK))
            except (BlockingIOError, InterruptedError, socket.timeout):
                continue
            if k == 0:
                if got == 0 and at_boundary:
                    return None
                raise UnavailableError("connection to %s closed in the middle of a frame "
                                       "(%d of %d bytes)" % (self.endpoint, got, n))
            got += k
        return buf

    def _read_loop(self) -> None:
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        err: Optional[BaseException] = None
        try:
            while True:
                hbuf = self._recv_exact(P.HEADER_SIZE, poller, True)
                if hbuf is None:
                    err = UnavailableError("connection to %s closed by the server"
                                           % self.endpoint)
                    break
                try:
                    h = P.check_header(P.decode_header(hbuf))
                except P.ProtocolError as e:
                    err = InternalError("bad frame from %s: %s" % (self.endpoint, e))
                    break
                # (only a read at a frame boundary returns None)
                payload = (self._recv_exact(h.length, poller, False) if h.length
                           else None) or bytearray()
                if h.type == P.ERROR:
                    err = M.error_frame(payload)
                    break
                if h.type not in (P.INFER_RESPONSE, P.INFO_RESPONSE):
                    err = InternalError("unexpected frame type %d from %s" % (h.type,
                                                                              self.endpoint))
                    break
                self._deliver(h, payload)
        except _ConnectionGone:
            pass
        except UnavailableError as e:
            err = e
        except OSError as e:
            err = UnavailableError("connection to %s lost: %s" % (self.endpoint, e))
        except BaseException as e:  # a bug here must not leave callers hanging
            err = InternalError("client reader failed: %r" % (e,))
        finally:
            self.fail(err or CancelledError("client closed"))
            try:
                poller.unregister(self.sock.fileno())
            except (OSError, ValueError, KeyError):
                pass
            self.sock.close()

    def _deliver(self, h: P.FrameHeader, payload: bytearray) -> None:
        with self.lock:
            entry = self.pending.pop(h.request_id, None)
        if entry is None:
            return  # already expired (or never ours): drop it
        fut = entry.future
        latency_ms = (time.monotonic() - entry.t0) * 1000.0
        try:
            if entry.kind == "infer":
                post = self.postprocess.get(entry.pool) if self.postprocess and entry.pool else None
                fut.set_result(M.decode_infer_answer(h.type, h.request_id, payload, latency_ms,
                                                     entry.pool, self._region_view(entry), post))
            else:
                fut.set_result(M.decode_info_answer(h.type, payload))
        except P.ProtocolError as e:
            fut.set_exception(InternalError("malformed answer from %s: %s" % (self.endpoint, e)))
        except Exception as e:  # the request's error, or its post-process hook's
            fut.set_exception(e)

    def _region_view(self, entry: _Pending) -> Callable[[P.SharedOutput], Any]:
        def view(out: P.SharedOutput) -> Any:
            # The region the request named, even if unregistered since.
            region = (entry.regions or {}).get(out.region) or self.regions.get(out.region)
            return None if region is None or region.closed else region.view(out)
        return view
