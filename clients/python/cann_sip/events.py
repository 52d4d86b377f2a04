"""Engine events over the native protocol (docs/events.md).

    from cann_sip import SessionCallback, SessionEvent

    class Printer(SessionCallback):
        def on_event(self, session_id, event, context):
            if event == SessionEvent.STATE_CHANGE:
                print(session_id, context["old_state"], "->", context["new_state"])

    client.register_callbacks("image_classification", Printer())

A subscription is a connection of its own: SUBSCRIBE, then the server
streams EVENT frames. Callbacks run on that subscription's reader thread, one
event at a time, in the order the engine emitted them. A slow callback never
slows inference: the server keeps a bounded buffer per subscriber, drops
what does not fit, and tells the next event how many were lost
(``context["dropped"]``).
"""

from __future__ import annotations

import enum
import logging
import select
import socket
import threading
from typing import Any, Dict, List, Optional, Tuple, Union

from . import protocol as P
from .errors import InternalError, SipError, UnavailableError, sip_error_from_code

__all__ = ["SessionEvent", "SessionCallback", "event_arguments"]

_log = logging.getLogger("cann_sip.events")
_POLL_MS = 200


class SessionEvent(str, enum.Enum):
    """What happened. A str, so ``event == "STATE_CHANGE"`` holds too.

    STATE_CHANGE: context old_state, new_state, reason.
    INFERENCE_COMPLETE: request_id, latency_ms, queue_ms, batch_size.
    ERROR: request_id, code (a name such as "DEADLINE_EXCEEDED"), message, latency_ms.
    POOL_LOADED, POOL_FAILED (message), POOL_SCALED, POOL_FAILOVER (message).
    ALERT: level ("warning", "critical"), state ("firing", "resolved"),
    previous_level, reason (a pool's SLA alert, docs/sla.md).
    Every context has event, pool, session, time_us and dropped (events lost
    just before this one because the subscriber fell behind)."""

    STATE_CHANGE = "STATE_CHANGE"
    INFERENCE_COMPLETE = "INFERENCE_COMPLETE"
    ERROR = "ERROR"
    POOL_LOADED = "POOL_LOADED"
    POOL_FAILED = "POOL_FAILED"
    POOL_SCALED = "POOL_SCALED"
    POOL_FAILOVER = "POOL_FAILOVER"
    ALERT = "ALERT"

    def __str__(self) -> str:
        return self.value


class SessionCallback:
    """Subclass and override on_event; register with
    ``SessionClient.register_callbacks(pool, callback)``."""

    def on_event(self, session_id: str, event: Union[SessionEvent, str],
                 context: Dict[str, Any]) -> Any:
        """Called on the subscription's thread for every event of the pool.
        session_id: the session ("<pool>/<index>"), or the pool's name for
        pool events and for errors of requests no session ran; event: a
        SessionEvent; context: a dict (see SessionEvent)."""


def event_arguments(ctx: Dict[str, Any]) -> Tuple[str, Union[SessionEvent, str], Dict[str, Any]]:
    """(session_id, event, context) of an EVENT's JSON object, as callbacks
    get them: the event a SessionEvent (its name for a kind this client does
    not know yet), session_id the session or, for pool events, the pool."""
    name = ctx.get("event")
    event: Union[SessionEvent, str]
    try:
        event = SessionEvent(name)
    except ValueError:
        event = str(name)  # a kind this client does not know yet
    return ctx.get("session") or ctx.get("pool") or "", event, ctx


def _recv_exact(sock: socket.socket, n: int, stop: threading.Event) -> Optional[bytearray]:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    while got < n:
        if stop.is_set():
            return None
        if not poller.poll(_POLL_MS):
            continue
        try:
            k = sock.recv_into(view[got:], n - got)
        except (BlockingIOError, InterruptedError, socket.timeout):
            continue
        if k == 0:
            return None
        got += k
    return buf


def _read_frame(sock: socket.socket,
                stop: threading.Event) -> Optional[Tuple[P.FrameHeader, bytearray]]:
    """(header, payload), or None when the connection ended or stop is set."""
    hbuf = _recv_exact(sock, P.HEADER_SIZE, stop)
    if hbuf is None:
        return None
    h = P.decode_header(hbuf)
    if h.magic != P.MAGIC or h.version != P.VERSION:
        raise P.ProtocolError("bad frame header from the server")
    payload = _recv_exact(sock, h.length, stop) if h.length else bytearray()
    if payload is None:
        return None
    return h, payload


def _exchange(sock: socket.socket, msg_type: int, payload: bytes, what: str) -> Any:
    """Sends one frame and reads its INFO_RESPONSE; raises the server's error."""
    sock.sendall(P.encode_frame(msg_type, 1, payload))
    got = _read_frame(sock, threading.Event())
    if got is None:
        raise UnavailableError("the server closed the connection instead of answering " + what)
    h, payload = got
    if h.type == P.ERROR:
        raise sip_error_from_code(*P.decode_error(payload, strict=False))
    if h.type != P.INFO_RESPONSE:
        raise InternalError("%s answered by frame type %d" % (what, h.type))
    code, body = P.decode_info_response(payload)
    if code != 0:
        raise sip_error_from_code(code, (body or {}).get("error", what + " refused"))
    return body


class Subscription:
    """One SUBSCRIBE connection and its reader thread (internal; made by
    SessionClient.register_callbacks)."""

    def __init__(self, sock: socket.socket, pool: Optional[str], buffer: int, timeout_s: float,
                 token: Optional[bytes] = None) -> None:
        self.sock = sock
        self.pool = pool or ""
        self.callbacks: List[SessionCallback] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.dropped = 0  # events lost so far (what the server told)
        self.error: Optional[SipError] = None  # why the stream ended, when the server ended it
        sock.settimeout(timeout_s)
        try:
            if token:
                _exchange(sock, P.AUTH, P.encode_auth(token), "AUTH")
            _exchange(sock, P.SUBSCRIBE, P.encode_subscribe(pool, buffer), "SUBSCRIBE")
        except BaseException:
            sock.close()
            raise
        self.thread = threading.Thread(target=self._run, name="cann_sip-events", daemon=True)
        self.thread.start()

    def add(self, cb: SessionCallback) -> None:
        with self.lock:
            self.callbacks.append(cb)

    def remove(self, cb: Optional[SessionCallback]) -> int:
        """Removes cb (None: all); returns how many are left."""
        with self.lock:
            self.callbacks = [c for c in self.callbacks if cb is not None and c is not cb]
            return len(self.callbacks)

    def _dispatch(self, ctx: Dict[str, Any]) -> None:
        session_id, event, _ = event_arguments(ctx)
        self.dropped += int(ctx.get("dropped", 0) or 0)
        with self.lock:
            callbacks = list(self.callbacks)
        for cb in callbacks:
            try:
                cb.on_event(session_id, event, ctx)
            except Exception:  # one bad callback must not end the stream
                _log.exception("event callback %r failed", cb)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                got = _read_frame(self.sock, self.stop)
                if got is None:
                    break
                h, payload = got
                if h.type == P.ERROR:
                    self.error = sip_error_from_code(*P.decode_error(payload, strict=False))
                    break
                if h.type == P.EVENT:
                    self._dispatch(P.decode_event(payload))
        except (OSError, P.ProtocolError) as e:
            if not self.stop.is_set():
                self.error = UnavailableError("event stream lost: %s" % e)
        finally:
            self.sock.close()

    def close(self) -> None:
        self.stop.set()
        if threading.current_thread() is not self.thread:
            self.thread.join(5.0)
