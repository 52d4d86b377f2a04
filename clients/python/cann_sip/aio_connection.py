"""The asyncio client's connections (see cann_sip.aio): a buffered protocol
that cuts the byte stream into frames, the call connection that matches
answers to the calls waiting for them, and the event subscription
connection. The payloads are encoded and decoded by cann_sip.messages and
cann_sip.protocol, as the threaded client's are.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import socket
import time
from typing import (Any, Callable, Container, Dict, List, NamedTuple, Optional, Tuple, Union,
                    cast)

from . import messages as M
from . import protocol as P
from .errors import (CancelledError, InternalError, InvalidArgumentError, SipError,
                     UnavailableError, copy_error)
from .events import SessionCallback, SessionEvent, event_arguments

_log = logging.getLogger("cann_sip.aio")

# Frames up to this size are read through one staging buffer (several per
# read); larger payloads are read straight into a buffer of their own.
_STAGE_BYTES = 64 * 1024
_CALL_TYPES = (P.INFER_RESPONSE, P.INFO_RESPONSE, P.ERROR)
_ANY_TYPE = range(0x10000)  # a subscription ignores the frame types it does not know
# Events queued for a reader that is behind before the socket stops being
# read (the server then buffers, drops and counts them: docs/events.md).
_EVENT_QUEUE_HIGH = 1024


class _ConnectionGone(Exception):
    """Internal: the connection died before the request was registered."""


class FrameProtocol(asyncio.BufferedProtocol):
    """Reads frames into bytearrays of their own (decoded arrays view them)
    and hands each to ``on_frame``; ``on_lost`` gets why the stream ended (a
    ProtocolError for a bad frame header, the OSError, or None at EOF). ``drain()``
    waits while the transport's write buffer is over its high mark."""

    def __init__(self, on_frame: Callable[[P.FrameHeader, bytearray], None],
                 on_lost: Callable[[Optional[BaseException]], None],
                 types: Container[int]) -> None:
        self.on_frame = on_frame
        self.on_lost = on_lost
        self.types = types
        self.transport: Optional[asyncio.Transport] = None
        self._stage = bytearray(_STAGE_BYTES)
        self._n = 0  # bytes in the staging buffer
        self._big: Optional[bytearray] = None  # a large payload being read
        self._big_got = 0
        self._big_header: Optional[P.FrameHeader] = None
        self.paused = False
        self._drain_waiters: List[asyncio.Future[None]] = []
        self.lost = False
        self.partial = False  # the stream ended in the middle of a frame

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_got:]
        return memoryview(self._stage)[self._n:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._big is not None:
            self._big_got += nbytes
            if self._big_got == len(self._big):
                h, payload = cast(P.FrameHeader, self._big_header), self._big
                self._big, self._big_header = None, None
                self.on_frame(h, payload)
            return
        self._n += nbytes
        self._parse()

    def _parse(self) -> None:
        stage, pos = self._stage, 0
        while self._n - pos >= P.HEADER_SIZE and self._big is None and not self.lost:
            try:
                h = P.check_header(P.decode_header(stage[pos:pos + P.HEADER_SIZE]),
                                   types=self.types)
            except P.ProtocolError as e:
                self._fail(e)
                return
            end = pos + P.HEADER_SIZE + h.length
            if end <= self._n:
                payload = stage[pos + P.HEADER_SIZE:end]
                pos = end
                self.on_frame(h, payload)
            elif P.HEADER_SIZE + h.length > len(stage):
                big = bytearray(h.length)
                have = self._n - pos - P.HEADER_SIZE
                big[:have] = stage[pos + P.HEADER_SIZE:self._n]
                self._big, self._big_got, self._big_header = big, have, h
                pos = self._n
            else:
                break  # the rest of the frame fits: read more
        if pos:  # keep the partial frame at the start (the buffer's size never changes)
            rest = self._n - pos
            stage[:rest] = stage[pos:self._n]
            self._n = rest

    def _fail(self, err: BaseException) -> None:
        if not self.lost:
            self.lost = True
            self.on_lost(err)
        if self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> Optional[bool]:
        return None  # the transport closes itself

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.partial = self._n > 0 or self._big is not None
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters = []
        if not self.lost:
            self.lost = True
            self.on_lost(exc)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters = []

    async def drain(self) -> None:
        """Returns once the write buffer is below its low mark (or the
        connection is gone: the calls on it fail then)."""
        while self.paused and not self.lost:
            w = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(w)
            await w


async def _connect_unix(path: str, timeout_s: float) -> socket.socket:
    """A connected non-blocking unix socket; while the server's listen
    backlog is full (EAGAIN) the connect is tried again, 1 ms to 100 ms
    apart, for up to ``timeout_s``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(False)
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    try:
        while True:
            try:
                sock.connect(path)
                return sock
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BlockingIOError(errno.EAGAIN, "the server's listen backlog stayed full "
                                          "for %.1f s (it accepts no connections)" % timeout_s)
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, 0.1)
    except BaseException:
        sock.close()
        raise


async def open_transport(endpoint: str, timeout_s: float,
                         factory: Callable[[], FrameProtocol]
                         ) -> Tuple[asyncio.Transport, FrameProtocol]:
    """Connects to ``endpoint``; UnavailableError when it cannot."""
    family, addr = M.parse_endpoint(endpoint)
    loop = asyncio.get_running_loop()
    try:
        if family == "tcp":
            host, port = cast(Tuple[str, int], addr)
            # (asyncio sets TCP_NODELAY on TCP transports)
            transport, proto = await asyncio.wait_for(
                loop.create_connection(factory, host, port), timeout_s)
        else:
            sock = await _connect_unix(cast(str, addr), timeout_s)
            try:
                transport, proto = await loop.create_unix_connection(factory, sock=sock)
            except BaseException:
                sock.close()
                raise
    except (OSError, asyncio.TimeoutError) as e:
        raise UnavailableError("cannot connect to %s: %s"
                               % (endpoint, e or "no answer within %.1f s" % timeout_s)) from None
    return transport, proto


class _Pending(NamedTuple):
    future: asyncio.Future[Any]
    kind: str  # "infer" or "info"
    t0: float
    pool: Optional[str]


class Connection:
    """One socket of a client and the calls waiting on it."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.pending: Dict[int, _Pending] = {}
        self.dead = False
        self.dead_error: Optional[BaseException] = None
        self.postprocess: Dict[str, M.Postprocess] = {}  # the client's, shared
        self.transport: Optional[asyncio.Transport] = None
        self.proto: Optional[FrameProtocol] = None

    @classmethod
    async def open(cls, endpoint: str, timeout_s: float) -> Connection:
        conn = cls(endpoint)
        conn.transport, conn.proto = await open_transport(
            endpoint, timeout_s, lambda: FrameProtocol(conn._on_frame, conn._on_lost, _CALL_TYPES))
        return conn

    def send(self, request_id: int, kind: str, msg_type: int, parts: List[P.Buffer],
             pool: Optional[str]) -> asyncio.Future[Any]:
        """Registers and writes one request (the whole frame at once, so
        calls never interleave); returns the future of its answer."""
        length = sum(len(p) for p in parts)
        if length > P.MAX_U32:
            raise InvalidArgumentError("request payload of %d bytes exceeds the protocol's "
                                       "4 GiB frame limit" % length)
        if self.dead or self.transport is None or self.transport.is_closing():
            raise _ConnectionGone()
        if request_id in self.pending:
            raise InvalidArgumentError("request_id %d is already in flight on this connection"
                                       % request_id)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = _Pending(fut, kind, time.monotonic(), pool)
        # Small pieces go out joined (one send for a small request); large
        # tensor data as its own buffer.
        small = [P.encode_header(msg_type, length, request_id)]
        for part in parts:
            if len(part) < _STAGE_BYTES:
                small.append(part)
                continue
            self.transport.write(b"".join(small))
            small = []
            self.transport.write(part)
        if small:
            self.transport.write(b"".join(small))
        return fut

    @property
    def write_paused(self) -> bool:
        return self.proto is not None and self.proto.paused

    async def drain(self) -> None:
        if self.proto is not None:
            await self.proto.drain()

    def forget(self, request_id: int, fut: asyncio.Future[Any]) -> None:
        """Drops a call that stopped waiting (timed out, cancelled): its
        answer, if it comes, is ignored."""
        entry = self.pending.get(request_id)
        if entry is not None and entry.future is fut:
            del self.pending[request_id]

    def _on_frame(self, h: P.FrameHeader, payload: bytearray) -> None:
        if h.type == P.ERROR:
            self.close(M.error_frame(payload))
            return
        entry = self.pending.pop(h.request_id, None)
        if entry is None or entry.future.done():
            return  # no longer waited for
        fut = entry.future
        latency_ms = (time.monotonic() - entry.t0) * 1000.0
        try:
            if entry.kind == "infer":
                post = self.postprocess.get(entry.pool) if entry.pool else None
                fut.set_result(M.decode_infer_answer(h.type, h.request_id, payload, latency_ms,
                                                     entry.pool, None, post))
            else:
                fut.set_result(M.decode_info_answer(h.type, payload))
        except P.ProtocolError as e:
            fut.set_exception(InternalError("malformed answer from %s: %s" % (self.endpoint, e)))
        except Exception as e:  # the request's error, or its post-process hook's
            fut.set_exception(e)

    def _on_lost(self, exc: Optional[BaseException]) -> None:
        err: BaseException
        if isinstance(exc, P.ProtocolError):
            err = InternalError("bad frame from %s: %s" % (self.endpoint, exc))
        elif exc is not None:
            err = UnavailableError("connection to %s lost: %s" % (self.endpoint, exc))
        elif self.proto is not None and self.proto.partial:
            err = UnavailableError("connection to %s closed in the middle of a frame"
                                   % self.endpoint)
        else:
            err = UnavailableError("connection to %s closed by the server" % self.endpoint)
        self.fail(err)

    def fail(self, err: BaseException) -> None:
        """Marks the connection dead and fails every waiting call with a copy
        of ``err``."""
        if self.dead:
            return
        self.dead, self.dead_error = True, err
        pending, self.pending = self.pending, {}
        for rid, entry in pending.items():
            if not entry.future.done():
                e = copy_error(err)
                if isinstance(e, SipError):
                    e.request_id = rid
                entry.future.set_exception(e)

    def close(self, err: Optional[BaseException] = None) -> None:
        self.fail(err or CancelledError("client closed"))
        if self.transport is not None:
            self.transport.close()


class Event(NamedTuple):
    """One engine event (docs/events.md), as a callback gets it."""
    session_id: str
    event: Union[SessionEvent, str]
    context: Dict[str, Any]


class Subscription:
    """A SUBSCRIBE connection: the events of one pool (or of every pool), in
    the order the engine emitted them. ``async for ev in sub`` (or ``await
    sub.get()``, None once the stream ended) reads them; ``dropped`` counts
    the events the server dropped while this reader was behind; ``error`` is
    why the server ended the stream, when it did. Close with ``await
    sub.close()`` (the client closes its subscriptions too)."""

    def __init__(self, endpoint: str, pool: Optional[str]) -> None:
        self.endpoint = endpoint
        self.pool = pool or ""
        self.dropped = 0
        self.error: Optional[SipError] = None
        self._queue: asyncio.Queue[Optional[Event]] = asyncio.Queue()
        self._answers: Dict[int, asyncio.Future[Any]] = {}
        self._transport: Optional[asyncio.Transport] = None
        self._reading_paused = False
        self._ended = False
        self._closing = False
        self.callbacks: List[SessionCallback] = []  # register_callbacks' callbacks
        self.task: Optional[asyncio.Task[None]] = None  # the task that calls them

    @classmethod
    async def open(cls, endpoint: str, pool: Optional[str], buffer: int, timeout_s: float,
                   token: Optional[bytes]) -> Subscription:
        payload = P.encode_subscribe(pool, buffer)  # checks buffer before connecting
        sub = cls(endpoint, pool)
        sub._transport, _ = await open_transport(
            endpoint, timeout_s, lambda: FrameProtocol(sub._on_frame, sub._on_lost, _ANY_TYPE))
        try:
            if token:
                await asyncio.wait_for(sub._exchange(1, P.AUTH, token), timeout_s)
            await asyncio.wait_for(sub._exchange(2, P.SUBSCRIBE, payload), timeout_s)
        except asyncio.TimeoutError:
            sub._transport.close()
            raise UnavailableError("%s did not answer SUBSCRIBE within %.1f s"
                                   % (endpoint, timeout_s)) from None
        except BaseException:
            sub._transport.close()
            raise
        return sub

    async def _exchange(self, rid: int, msg_type: int, payload: bytes) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._answers[rid] = fut
        assert self._transport is not None
        self._transport.write(P.encode_frame(msg_type, rid, payload))
        try:
            return await fut
        finally:
            self._answers.pop(rid, None)

    def _on_frame(self, h: P.FrameHeader, payload: bytearray) -> None:
        if h.type == P.EVENT:
            try:
                ctx = P.decode_event(payload)
            except P.ProtocolError as e:
                self._end(InternalError("bad EVENT from %s: %s" % (self.endpoint, e)))
                return
            self.dropped += int(ctx.get("dropped", 0) or 0)
            self._queue.put_nowait(Event(*event_arguments(ctx)))
            if self._queue.qsize() >= _EVENT_QUEUE_HIGH and self._transport is not None:
                self._transport.pause_reading()
                self._reading_paused = True
        elif h.type == P.ERROR:
            self._end(M.error_frame(payload))
        elif h.type == P.INFO_RESPONSE:
            fut = self._answers.pop(h.request_id, None)
            if fut is not None and not fut.done():
                try:
                    fut.set_result(M.decode_info_answer(h.type, payload))
                except (SipError, P.ProtocolError) as e:
                    fut.set_exception(e if isinstance(e, SipError) else InternalError(str(e)))

    def _on_lost(self, exc: Optional[BaseException]) -> None:
        if isinstance(exc, P.ProtocolError):
            self._end(InternalError("bad frame from %s: %s" % (self.endpoint, exc)))
        elif exc is not None and not self._closing:
            self._end(UnavailableError("event stream lost: %s" % exc))
        else:
            self._end(None)

    def _end(self, err: Optional[SipError]) -> None:
        if self._ended:
            return
        self._ended = True
        if err is not None and not self._closing:
            self.error = err
        for fut in self._answers.values():
            if not fut.done():
                fut.set_exception(copy_error(err) if err is not None else UnavailableError(
                    "the server closed the connection instead of answering"))
        self._answers = {}
        self._queue.put_nowait(None)
        if self._transport is not None:
            self._transport.close()

    async def get(self) -> Optional[Event]:
        """The next event; None once the stream has ended (then again None)."""
        ev = await self._queue.get()
        if ev is None:
            self._queue.put_nowait(None)  # every later get() ends too
        elif self._reading_paused and self._queue.qsize() < _EVENT_QUEUE_HIGH // 2:
            self._reading_paused = False
            if self._transport is not None and not self._transport.is_closing():
                self._transport.resume_reading()
        return ev

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        ev = await self.get()
        if ev is None:
            raise StopAsyncIteration
        return ev

    async def dispatch(self) -> None:
        """register_callbacks' task: calls each callback for every event,
        awaiting what it returns when that is awaitable."""
        async for ev in self:
            for cb in list(self.callbacks):
                try:
                    r = cb.on_event(ev.session_id, ev.event, ev.context)
                    if inspect.isawaitable(r):
                        await r
                except Exception:  # one bad callback must not end the stream
                    _log.exception("event callback %r failed", cb)

    async def close(self) -> None:
        """Ends the subscription (idempotent); returns once its callbacks'
        task, if any, has finished (unless called from that task)."""
        self._closing = True
        self._end(None)
        task = self.task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
