"""The sip session client for asyncio: the calls of cann_sip.SessionClient
as coroutines, on one connection that any number of tasks share.

    import asyncio
    from cann_sip import InferenceRequest
    from cann_sip.aio import SessionClient

    async def main():
        async with SessionClient("ipc:///tmp/sip_service.sock") as client:
            reqs = [InferenceRequest("tiny", {"x": x}) for x in batches]
            responses = await asyncio.gather(*(client.infer(r) for r in reqs))

    asyncio.run(main())

Requests are written whole, in the order the tasks send them, and answers
are matched to them by request id in whatever order they come back. A call
that gets no answer within ``timeout_s`` raises DeadlineExceededError; a
call whose task is cancelled (``asyncio.wait_for``, ``task.cancel()``)
stops waiting at once and its answer, if it comes, is dropped (the server
still runs the request). The requests, responses and errors are those of the
threaded client (cann_sip.messages, cann_sip.errors), encoded and decoded by
the same code; its reconnection, backoff, idempotent resends and
authentication work the same way. Shared memory regions are the threaded
client's only: an asyncio transport cannot pass their file descriptors.
Events: ``await client.subscribe(pool)`` is an async iterator of
(session_id, event, context); ``await client.register_callbacks(pool, cb)``
calls ``cb.on_event`` (awaiting it when it is a coroutine) on a task of the
client.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

from . import messages as M
from . import protocol as P
from .aio_connection import Connection, Event, Subscription, _ConnectionGone
from .errors import (DeadlineExceededError, InvalidArgumentError, NotFoundError, SipError,
                     UnauthenticatedError, UnavailableError, copy_error)
from .events import SessionCallback
from .messages import (DEFAULT_ENDPOINT, BatchInferenceRequest, BatchInferenceResponse,
                       InferenceRequest, InferenceResponse)

__all__ = ["SessionClient", "Sequence", "Subscription", "Event"]


class Sequence(M.SequenceBase):
    """The requests of one sequence on a pool with sequence_batching
    (docs/sequences.md), as cann_sip.client.Sequence: the first infer()
    starts it, infer(..., end=True) or end() sends its last request. Await
    each request before sending the next: they must run in order."""

    def __init__(self, client: SessionClient, session_pool: str, sequence_id: Union[int, str],
                 **request_options: Any) -> None:
        super().__init__(session_pool, sequence_id, request_options)
        self.client = client

    async def infer(self, inputs: P.Tensors, end: bool = False) -> InferenceResponse:
        call = await self.client._send_infer(self._request(inputs, end))
        self.started = not end
        resp: InferenceResponse = await self.client._finish(call)
        return resp

    async def end(self, inputs: P.Tensors) -> InferenceResponse:
        """Sends the sequence's last request and returns its response."""
        return await self.infer(inputs, end=True)


# A call on its way: its connection, request id and the future of its answer.
_Call = Tuple[Connection, int, "asyncio.Future[Any]"]


class SessionClient:
    """asyncio client of one sipd endpoint; the arguments are those of
    cann_sip.SessionClient. Use it from one event loop; the connection opens
    on the first call (or ``await client.connect()``) and reopens after it
    drops. Close it with ``await client.close()`` or ``async with``."""

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, timeout_s: float = 30,
                 reconnect_timeout_s: float = 0.0, backoff_s: float = 0.05,
                 max_backoff_s: float = 2.0, token: Union[str, bytes, None] = None) -> None:
        M.parse_endpoint(endpoint)  # fail early on a malformed endpoint
        self._token = P.encode_auth(token) if token is not None else None
        if not timeout_s or timeout_s <= 0:
            raise InvalidArgumentError("timeout_s must be > 0, not %r" % (timeout_s,))
        if reconnect_timeout_s < 0 or backoff_s <= 0 or max_backoff_s < backoff_s:
            raise InvalidArgumentError("expected reconnect_timeout_s >= 0 and 0 < backoff_s <= "
                                       "max_backoff_s, not %r, %r, %r"
                                       % (reconnect_timeout_s, backoff_s, max_backoff_s))
        self.endpoint = endpoint
        self.timeout_s = float(timeout_s)
        self.reconnect_timeout_s = float(reconnect_timeout_s)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self._backoff = 0.0
        self._next_attempt = 0.0
        self._connect_error: Optional[SipError] = None
        self._conn: Optional[Connection] = None
        self._open_lock: Optional[asyncio.Lock] = None  # made in the loop that uses it
        self._closed = False
        self._ids = itertools.count(1)
        self._ranks: Dict[str, M.Ranks] = {}
        self._postprocess: Dict[str, M.Postprocess] = {}
        self._subs: Dict[str, Subscription] = {}  # register_callbacks' subscriptions, by pool
        self._streams: List[Subscription] = []  # subscribe()'s

    # -- plumbing -----------------------------------------------------------
    def _next_id(self) -> int:
        return next(self._ids) & P.MAX_U64

    async def connect(self) -> None:
        """Opens the connection now (the first call opens it otherwise)."""
        await self._connection()

    async def _connection(self, wait_until: Optional[float] = None) -> Connection:
        """The live connection, opened if needed; attempts while the server
        cannot be reached are spaced by the backoff, for up to
        reconnect_timeout_s (or until ``wait_until``)."""
        if wait_until is None:
            wait_until = time.monotonic() + self.reconnect_timeout_s
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        while True:
            if self._closed:
                raise UnavailableError("client is closed")
            c = self._conn
            if c is not None and not c.dead:
                return c
            async with self._open_lock:
                c = self._conn
                if c is not None and not c.dead:
                    return c
                if time.monotonic() >= self._next_attempt:
                    try:
                        c = await self._open()
                        self._backoff = 0.0
                        return c
                    except UnavailableError as e:
                        self._connect_error = e
                        self._backoff = min(max(self._backoff * 2, self.backoff_s),
                                            self.max_backoff_s)
                        self._next_attempt = (time.monotonic()
                                              + self._backoff * random.uniform(0.5, 1.0))
                err = self._connect_error
                delay = max(self._next_attempt - time.monotonic(), 0.0)
            if time.monotonic() + delay > wait_until:
                raise UnavailableError("%s (next attempt in %.2f s)"
                                       % (err.message if err else "cannot connect", delay))
            await asyncio.sleep(max(delay, 0.001))

    async def _open(self) -> Connection:
        c = await Connection.open(self.endpoint, self.timeout_s)
        c.postprocess = self._postprocess
        if self._closed:
            c.close()
            raise UnavailableError("client is closed")
        if self._token is not None:
            try:
                rid = self._next_id()
                await self._finish((c, rid, c.send(rid, "info", P.AUTH, [self._token], None)))
            except SipError as e:
                c.close(e)
                if isinstance(e, UnauthenticatedError):
                    raise  # a wrong token: no retry makes it right
                raise UnavailableError("cannot connect to %s: %s" % (self.endpoint, e)) from None
        self._conn = c
        return c

    async def _send(self, kind: str, msg_type: int, parts: List[P.Buffer], pool: Optional[str],
                    request_id: Optional[int] = None,
                    wait_until: Optional[float] = None) -> _Call:
        """Writes one request; a connection that died before it was
        registered has sent nothing of it, so it goes once more on a new
        one."""
        rid = self._next_id() if request_id is None else request_id
        conn = await self._connection(wait_until)
        try:
            return conn, rid, conn.send(rid, kind, msg_type, parts, pool)
        except _ConnectionGone:
            pass
        conn = await self._connection(wait_until)
        try:
            return conn, rid, conn.send(rid, kind, msg_type, parts, pool)
        except _ConnectionGone:
            raise copy_error(conn.dead_error or UnavailableError(
                "connection to %s lost" % self.endpoint)) from None

    async def _finish(self, call: _Call, timeout_s: Optional[float] = None) -> Any:
        """Waits for a call's answer (and, while the socket's write buffer is
        full, for its frame to leave it) for up to timeout_s."""
        conn, rid, fut = call
        timeout = self.timeout_s if timeout_s is None else timeout_s
        expired = False
        waiter: Optional[asyncio.Future[None]] = None

        def expire() -> None:
            nonlocal expired
            expired = True
            for f in (fut, waiter):
                if f is not None and not f.done():
                    f.cancel()

        timer = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            if conn.write_paused:
                waiter = asyncio.ensure_future(conn.drain())
                await waiter
            return await fut
        except asyncio.CancelledError:
            if expired:  # (not the caller's cancellation)
                raise DeadlineExceededError("no answer from %s within %.1f s"
                                            % (self.endpoint, timeout)) from None
            raise
        finally:
            timer.cancel()
            conn.forget(rid, fut)
            if not fut.done():
                fut.cancel()

    async def _call(self, msg_type: int, payload: bytes) -> Any:
        """One request answered by INFO_RESPONSE; returns its JSON."""
        return await self._finish(await self._send("info", msg_type, [payload], None))

    # -- inference ----------------------------------------------------------
    async def _send_infer(self, request: InferenceRequest, request_id: Optional[int] = None,
                          wait_until: Optional[float] = None) -> _Call:
        parts = M.encode_infer(request)
        rid = request.request_id if request_id is None else request_id
        return await self._send("infer", P.INFER_REQUEST, parts, request.session_pool, rid,
                                wait_until)

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Runs one request and returns its InferenceResponse (raises SipError;
        InvalidArgumentError before sending for input that cannot be
        encoded). A request with an idempotency_key is sent again after a
        dropped connection or an UNAVAILABLE answer, until timeout_s after
        it was first sent (docs/idempotency.md)."""
        resp: InferenceResponse
        if not isinstance(request, InferenceRequest) or request.idempotency_key is None:
            resp = await self._finish(await self._send_infer(request))
            return resp
        # Every resend carries the same request id.
        rid = request.request_id if request.request_id is not None else self._next_id()
        deadline = time.monotonic() + self.timeout_s
        backoff = 0.0
        while True:
            try:
                call = await self._send_infer(request, rid, deadline)
                resp = await self._finish(call, max(deadline - time.monotonic(), 0.001))
                return resp
            except UnavailableError:
                if self._closed or time.monotonic() >= deadline:
                    raise
            backoff = min(max(backoff * 2, self.backoff_s), self.max_backoff_s)
            await asyncio.sleep(min(backoff * random.uniform(0.5, 1.0),
                                    max(deadline - time.monotonic(), 0.0)))

    def sequence(self, session_pool: str, sequence_id: Union[int, str],
                 **request_options: Any) -> Sequence:
        """A Sequence: the requests of one sequence on a pool with
        sequence_batching; request_options (timeout_ms, priority, outputs)
        apply to each of its requests."""
        return Sequence(self, session_pool, sequence_id, **request_options)

    async def _input_ranks(self, pool: str) -> M.Ranks:
        ranks = self._ranks.get(pool)
        if ranks is None:
            ranks = M.input_ranks(await self.pools(), pool)
            if ranks is None:
                raise NotFoundError("Request for unknown model: '%s' is not found (on %s)"
                                    % (pool, self.endpoint))
            self._ranks[pool] = ranks
        return ranks

    async def batch_infer(self, request: BatchInferenceRequest) -> BatchInferenceResponse:
        """Runs a BatchInferenceRequest (see cann_sip.BatchInferenceRequest);
        returns its BatchInferenceResponse."""
        M.check_batch_request(request)
        parts, rows = M.encode_batch(request, await self._input_ranks(request.session_pool))
        call = await self._send("infer", P.BATCH_INFER_REQUEST, parts, request.session_pool,
                                request.request_id)
        return BatchInferenceResponse(await self._finish(call), rows)

    def register_postprocess(self, pool: str, fn: Optional[Any], config: Any = None) -> None:
        """As cann_sip.SessionClient.register_postprocess; ``fn`` runs in the
        event loop as the answer arrives."""
        if fn is None:
            self._postprocess.pop(pool, None)
        elif not callable(fn):
            raise InvalidArgumentError("postprocess for %r is not callable" % (pool,))
        else:
            self._postprocess[pool] = (fn, config)

    # -- introspection and management (as the threaded client's) ------------
    async def info(self, kind: int) -> Any:
        """The parsed JSON of INFO kind 1 (ready), 2 (pools) or 3 (status)."""
        return await self._call(P.INFO_REQUEST, P.encode_info_request(kind))

    async def ready(self) -> bool:
        """True when the server is up and every pool has finished loading."""
        try:
            obj = await self.info(P.INFO_READY)
        except UnavailableError:
            return False
        return bool(obj and obj.get("ready"))

    async def pools(self) -> List[Dict[str, Any]]:
        obj = await self.info(P.INFO_POOLS) or {}
        return list(obj.get("pools", []))

    async def status(self) -> Dict[str, Any]:
        return dict(await self.info(P.INFO_STATUS) or {})

    async def admin(self, action: str, pool: Optional[str], **fields: Any) -> Any:
        return await self._call(P.ADMIN_REQUEST, M.admin_payload(action, pool, **fields))

    async def update_pool(self, pool: str, pool_size: Optional[int] = None,
                          max_memory_mb: Optional[int] = None,
                          max_compute_percent: Optional[int] = None) -> Any:
        return await self.admin("update", pool, **M.update_pool_fields(
            pool_size, max_memory_mb, max_compute_percent))

    async def profile(self, pool: str, seconds: float = 5.0, session: int = 0,
                      trace: bool = True) -> Any:
        return await self.admin("profile", pool, seconds=seconds, session=session,
                                trace=bool(trace))

    async def repository_index(self, ready: bool = False) -> List[Dict[str, Any]]:
        obj = await self._call(P.REPO_REQUEST, M.repo_payload("index", ready=bool(ready))) or {}
        return list(obj.get("models", []))

    async def load_model(self, name: str,
                         config: Union[str, Dict[str, Any], None] = None) -> Any:
        extra = {} if config is None else {"config": config}
        return await self._call(P.REPO_REQUEST, M.repo_payload("load", name, **extra))

    async def unload_model(self, name: str) -> Any:
        return await self._call(P.REPO_REQUEST, M.repo_payload("unload", name))

    # -- events (docs/events.md) --------------------------------------------
    async def subscribe(self, pool: Optional[str] = None, buffer: int = 0) -> Subscription:
        """A Subscription to the events of ``pool`` (None: every pool) on a
        connection of its own: ``async for session_id, event, context in
        sub``. ``buffer``: events the server keeps while this reader is
        behind (0: its default, 1024); more are dropped and counted
        (``sub.dropped``, and the next event's context["dropped"])."""
        if self._closed:
            raise UnavailableError("client is closed")
        sub = await Subscription.open(self.endpoint, pool, buffer, self.timeout_s, self._token)
        self._streams = [s for s in self._streams if not s._ended] + [sub]
        return sub

    async def register_callbacks(self, pool: Optional[str], callback: SessionCallback,
                                 buffer: int = 0) -> Subscription:
        """Calls ``callback.on_event(session_id, event, context)`` for every
        event of ``pool`` (None: every pool) on a task of this client (a
        coroutine on_event is awaited before the next event) until
        unregister_callbacks or close; callbacks of one pool share one
        subscription. Returns it (its ``dropped`` counts the events lost)."""
        if not callable(getattr(callback, "on_event", None)):
            raise InvalidArgumentError("callback must have an on_event(session_id, event, "
                                       "context) method (subclass SessionCallback)")
        if self._closed:
            raise UnavailableError("client is closed")
        key = pool or ""
        sub = self._subs.get(key)
        if sub is None or sub._ended:
            new = await Subscription.open(self.endpoint, key, buffer, self.timeout_s,
                                          self._token)
            sub = self._subs.get(key)
            if self._closed or (sub is not None and not sub._ended):
                await new.close()  # closed, or another task subscribed meanwhile
                if self._closed or sub is None:
                    raise UnavailableError("client is closed")
            else:
                new.task = asyncio.get_running_loop().create_task(new.dispatch())
                self._subs[key] = sub = new
        sub.callbacks.append(callback)
        return sub

    async def unregister_callbacks(self, pool: Optional[str],
                                   callback: Optional[SessionCallback] = None) -> None:
        """Stops calling ``callback`` (None: every callback of ``pool``); the
        subscription closes with its last callback, and this returns once
        none of them runs any more (unless called from one)."""
        key = pool or ""
        sub = self._subs.get(key)
        if sub is None:
            return
        sub.callbacks = [c for c in sub.callbacks if callback is not None and c is not callback]
        if not sub.callbacks:
            del self._subs[key]
            await sub.close()

    # -- lifetime -----------------------------------------------------------
    async def close(self) -> None:
        """Closes the connection and the subscriptions; calls still waiting
        fail with CancelledError (cann_sip's), later calls raise
        UnavailableError. Idempotent."""
        self._closed = True
        c, self._conn = self._conn, None
        if c is not None:
            c.close()
        subs = list(self._subs.values()) + self._streams
        self._subs, self._streams = {}, []
        for s in subs:
            await s.close()

    async def __aenter__(self) -> SessionClient:
        return self

    async def __aexit__(self, *exc: object) -> Literal[False]:
        await self.close()
        return False

    def __repr__(self) -> str:
        return "aio.SessionClient(%r, timeout_s=%r)" % (self.endpoint, self.timeout_s)

