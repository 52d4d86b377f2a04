"""The sip session client: one connection, many threads, pipelined requests.

Design
------
A :class:`SessionClient` owns at most one live connection. Any number of
threads call it at once: a request is encoded in the calling thread, sent
under a writer lock, and registered by request_id; one background reader
thread per connection decodes answers and completes the matching
``concurrent.futures.Future`` — answers may come back in any order. Requests
that get no answer within ``timeout_s`` fail with DeadlineExceededError (the
reader sweeps them), so no call can hang forever.

When the connection drops, every call still waiting on it fails with
UnavailableError, and the next call opens a new connection: attempts to
connect are spaced by an exponential backoff with jitter (``backoff_s`` up to
``max_backoff_s``), and a call waits for one for up to ``reconnect_timeout_s``
(0: it fails at once while the server cannot be reached). A request with an
``idempotency_key`` is sent again instead (on a new connection, after a
backoff) when its connection drops or the server answers UNAVAILABLE, until
``timeout_s`` after it was first sent: the server runs it at most once
(docs/idempotency.md). A client closed by its user never reconnects. An ERROR frame
from the server fails every waiting call with the error it names (the server
closes the connection after it).

Future callbacks (``add_done_callback``) run on the reader thread; keep them
short.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as _FutureTimeout
from typing import Any, Dict, List, Literal, Optional, Sequence as _Seq, TypeVar, Union

import numpy as np

from . import messages as M
from . import protocol as P
from .connection import _Connection, _ConnectionGone
from .connection import _open_socket as _open_socket  # (tests import it from here)
from .errors import (CancelledError, DeadlineExceededError, InvalidArgumentError, NotFoundError,
                     SipError, UnauthenticatedError, UnavailableError, copy_error)
from .events import SessionCallback, Subscription
# Re-exported: they were defined here first and programs import them from here.
from .messages import (DEFAULT_ENDPOINT, BatchInferenceRequest, BatchInferenceResponse,
                       BatchOutputs, InferenceRequest, InferenceResponse, StageOutputs,
                       parse_endpoint, sequence_parameters)
from .shm import SharedMemoryRegion

__all__ = ["SessionClient", "InferenceRequest", "InferenceResponse", "SharedMemoryRegion",
           "parse_endpoint", "DEFAULT_ENDPOINT", "Sequence", "BatchInferenceRequest",
           "BatchInferenceResponse"]
__all__ += ["BatchOutputs", "StageOutputs", "sequence_parameters"]

_T = TypeVar("_T")


class Sequence(M.SequenceBase):
    """The requests of one sequence on a pool with sequence_batching
    (docs/sequences.md). The first infer() starts the sequence (binding it to
    a session); infer(..., end=True) or end() sends its last request, after
    which the next infer() starts it again.

        seq = client.sequence("tracker", 42)
        seq.infer({"x": frame0}); seq.infer({"x": frame1}); seq.end({"x": frame2})
    """

    def __init__(self, client: SessionClient, session_pool: str, sequence_id: Union[int, str],
                 **request_options: Any) -> None:
        super().__init__(session_pool, sequence_id, request_options)
        self.client = client

    def infer_async(self, inputs: P.Tensors, end: bool = False) -> Future[InferenceResponse]:
        """Sends the sequence's next request; returns a Future (see
        SessionClient.infer_async)."""
        fut = self.client.infer_async(self._request(inputs, end))
        self.started = not end
        return fut

    def infer(self, inputs: P.Tensors, end: bool = False) -> InferenceResponse:
        return self.client._wait(self.infer_async(inputs, end))

    def end(self, inputs: P.Tensors) -> InferenceResponse:
        """Sends the sequence's last request and returns its response."""
        return self.infer(inputs, end=True)


class SessionClient:
    """Client of one sipd endpoint. Thread-safe: share one between threads.

    endpoint: ``ipc:///path``, ``unix:///path`` or ``tcp://host:port``.
    timeout_s: how long any call waits for its answer (and for a connect or
        a blocked send) before it fails with DeadlineExceededError /
        UnavailableError.
    The connection opens on the first call and reopens after it drops.
    reconnect_timeout_s: how long a call waits for the connection to reopen
        (attempts spaced by the backoff) while the server cannot be reached;
        0: it fails at once with UnavailableError.
    token: a bearer token of the server's server.auth (docs/security.md),
        sent as an AUTH message first on every connection; None: none.
    backoff_s, max_backoff_s: the first delay between connection attempts,
        doubled after each failure up to the cap (each delay is jittered down
        to half of it); reset by a connection that opens.
    """

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, timeout_s: float = 30,
                 reconnect_timeout_s: float = 0.0, backoff_s: float = 0.05,
                 max_backoff_s: float = 2.0, token: Union[str, bytes, None] = None) -> None:
        parse_endpoint(endpoint)  # fail early on a malformed endpoint
        # A server with server.auth takes requests of a group only after an
        # AUTH message with one of its tokens; sent first on every connection.
        self._token = P.encode_auth(token) if token is not None else None
        if not timeout_s or timeout_s <= 0:
            raise InvalidArgumentError("timeout_s must be > 0, not %r" % (timeout_s,))
        if reconnect_timeout_s < 0 or backoff_s <= 0 or max_backoff_s < backoff_s:
            raise InvalidArgumentError("expected reconnect_timeout_s >= 0 and 0 < backoff_s <= "
                                       "max_backoff_s, not %r, %r, %r"
                                       % (reconnect_timeout_s, backoff_s, max_backoff_s))
        self.reconnect_timeout_s = float(reconnect_timeout_s)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self._backoff = 0.0  # the last delay between attempts (0: the last one worked)
        self._next_attempt = 0.0  # monotonic time before which no attempt is made
        self._connect_error: Optional[SipError] = None
        self.endpoint = endpoint
        self.timeout_s = float(timeout_s)
        self._lock = threading.Lock()
        self._conn: Optional[_Connection] = None
        self._closed = False
        self._ids = itertools.count(1)
        self._ranks: Dict[str, M.Ranks] = {}  # pool -> {input: rank}, for batch_infer
        # pool -> (fn, config), see register_postprocess
        self._postprocess: Dict[str, M.Postprocess] = {}
        # name -> SharedMemoryRegion, registered on every connection
        self._regions: Dict[str, SharedMemoryRegion] = {}
        self._subs: Dict[str, Subscription] = {}  # pool ("" = every pool) -> its subscription

    # -- plumbing -----------------------------------------------------------
    def _connection(self, wait_until: Optional[float] = None) -> _Connection:
        """The live connection, opened if needed. While the server cannot be
        reached, attempts are spaced by the backoff; the call waits for one
        until ``wait_until`` (monotonic; None: now + reconnect_timeout_s)."""
        if wait_until is None:
            wait_until = time.monotonic() + self.reconnect_timeout_s
        while True:
            with self._lock:
                if self._closed:
                    raise UnavailableError("client is closed")
                c = self._conn
                if c is not None and not c.dead:
                    return c
                now = time.monotonic()
                if now >= self._next_attempt:
                    try:
                        c = self._open_locked()
                        self._backoff = 0.0
                        return c
                    except UnavailableError as e:
                        self._connect_error = e
                        self._backoff = min(max(self._backoff * 2, self.backoff_s),
                                            self.max_backoff_s)
                        self._next_attempt = now + self._backoff * random.uniform(0.5, 1.0)
                err = self._connect_error
                delay = self._next_attempt - time.monotonic()
            if time.monotonic() + max(delay, 0.0) > wait_until:
                raise UnavailableError("%s (next attempt in %.2f s)"
                                       % (err.message if err else "cannot connect",
                                          max(delay, 0.0))) from None
            time.sleep(max(delay, 0.001))

    def _open_locked(self) -> _Connection:
        c = _Connection.open(self.endpoint, self.timeout_s)
        try:
            if self._token is not None:
                self._wait(c.submit(self._next_id(), "info", P.AUTH, [self._token], None))
            c.postprocess = self._postprocess
            c.regions = self._regions
            # Regions belong to a connection: a new one gets them again.
            for region in list(self._regions.values()):
                self._register_on(c, region)
        except SipError as e:
            c.close(e)
            if isinstance(e, UnauthenticatedError):
                raise  # a wrong token: no retry makes it right
            raise UnavailableError("cannot connect to %s: registering shared memory failed: %s"
                                   % (self.endpoint, e)) from None
        self._conn = c
        return c

    def _next_id(self) -> int:
        return next(self._ids) & P.MAX_U64

    def _submit(self, request_id: int, kind: str, msg_type: int, parts: _Seq[P.Buffer],
                pool: Optional[str], regions: Optional[Dict[str, SharedMemoryRegion]] = None,
                wait_until: Optional[float] = None) -> Future[Any]:
        # A connection that died before the request was registered has sent
        # nothing for it, so one retry on a fresh connection is safe.
        conn = self._connection(wait_until)
        try:
            return conn.submit(request_id, kind, msg_type, parts, pool, regions=regions)
        except _ConnectionGone:
            pass
        conn = self._connection(wait_until)
        try:
            return conn.submit(request_id, kind, msg_type, parts, pool, regions=regions)
        except _ConnectionGone:
            raise copy_error(conn.dead_error or UnavailableError(
                "connection to %s lost" % self.endpoint)) from None

    def _call(self, msg_type: int, payload: bytes) -> Any:
        """Sends one request answered by INFO_RESPONSE; returns its JSON."""
        return self._wait(self._submit(self._next_id(), "info", msg_type, [payload], None))

    def _wait(self, fut: Future[_T]) -> _T:
        try:
            return fut.result(timeout=self.timeout_s + 5.0)
        except _FutureTimeout:
            raise DeadlineExceededError("no answer from %s within %.1f s"
                                        % (self.endpoint, self.timeout_s)) from None

    # -- inference ----------------------------------------------------------
    def infer_async(self, request: InferenceRequest) -> Future[InferenceResponse]:
        """Sends ``request`` and returns a concurrent.futures.Future that
        resolves to an InferenceResponse or raises a SipError. Input that
        cannot be encoded raises InvalidArgumentError here, before sending."""
        parts = M.encode_infer(request, self._by_reference if self._regions else None)
        rid = request.request_id
        if rid is None:
            rid = self._next_id()
        regions = None
        if isinstance(request.outputs, dict):
            with self._lock:
                regions = {d.region: self._regions[d.region] for d in request.outputs.values()
                           if d is not None and d.region in self._regions}
        if request.idempotency_key is None:
            return self._submit(rid, "infer", P.INFER_REQUEST, parts, request.session_pool,
                                regions)
        return self._submit_keyed(rid, parts, request.session_pool, regions)

    def _submit_keyed(self, rid: int, parts: _Seq[P.Buffer], pool: str,
                      regions: Optional[Dict[str, SharedMemoryRegion]]) -> Future[Any]:
        """Sends a request with an idempotency key, and again (after a
        backoff, on a new connection) when its connection drops or the server
        answers UNAVAILABLE, until timeout_s after the first send."""
        deadline = time.monotonic() + self.timeout_s
        outer: Future[Any] = Future()
        outer.set_running_or_notify_cancel()
        state = {"backoff": 0.0}

        def finish(f: Future[Any]) -> None:
            e = f.exception()
            if e is None:
                outer.set_result(f.result())
                return
            if (isinstance(e, UnavailableError) and not self._closed
                    and time.monotonic() < deadline):
                state["backoff"] = min(max(state["backoff"] * 2, self.backoff_s),
                                       self.max_backoff_s)
                threading.Thread(target=attempt, name="cann_sip-resend", daemon=True,
                                 args=(state["backoff"] * random.uniform(0.5, 1.0),)).start()
                return
            outer.set_exception(e)

        def attempt(delay: float) -> None:
            time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
            try:
                inner = self._submit(rid, "infer", P.INFER_REQUEST, parts, pool, regions,
                                     wait_until=deadline)
            except SipError as e:
                inner = Future()
                inner.set_exception(e)  # (this call's own failure, not a copy)
            inner.add_done_callback(finish)

        inner = self._submit(rid, "infer", P.INFER_REQUEST, parts, pool, regions,
                             wait_until=deadline)
        inner.add_done_callback(finish)
        return outer

    def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Runs one request and returns its InferenceResponse (raises SipError)."""
        return self._wait(self.infer_async(request))

    def sequence(self, session_pool: str, sequence_id: Union[int, str],
                 **request_options: Any) -> Sequence:
        """A Sequence: the requests of one sequence on a pool with
        sequence_batching; request_options (timeout_ms, priority, outputs)
        apply to each of its requests."""
        return Sequence(self, session_pool, sequence_id, **request_options)

    # -- shared memory ------------------------------------------------------
    def _by_reference(self, value: Any) -> Any:
        """An input array living in one of the regions becomes a reference."""
        if isinstance(value, np.ndarray):
            with self._lock:
                regions = list(self._regions.values())
            for region in regions:
                ref = region.reference(value)
                if ref is not None:
                    return ref
        return value

    def _register_on(self, conn: _Connection, region: SharedMemoryRegion) -> None:
        fut = conn.submit(self._next_id(), "info", P.SHM_REGISTER,
                          [P.encode_shm_register(region.name, 0, region.byte_size)], None,
                          fds=[region.fd])
        self._wait(fut)
        region.registered_on = conn

    def create_shared_memory(self, name: str, byte_size: int) -> SharedMemoryRegion:
        """A new SharedMemoryRegion of ``byte_size`` bytes (a sealed memfd,
        mapped here) registered with the server as ``name`` on this client's
        connection (unix sockets only; registered again if the connection is
        reopened). Raises InvalidArgumentError for a name already in use."""
        with self._lock:
            if name in self._regions:
                raise InvalidArgumentError("shared memory region %r already exists on this client"
                                           % (name,))
        region = SharedMemoryRegion(self, name, byte_size)
        try:
            conn = self._connection()
            self._register_on(conn, region)
        except BaseException:
            region._release()
            raise
        with self._lock:
            self._regions[name] = region
        return region

    def _forget_region(self, region: SharedMemoryRegion) -> None:
        with self._lock:
            if self._regions.get(region.name) is region:
                del self._regions[region.name]
            conn = self._conn
        if conn is not None and not conn.dead and region.registered_on is conn:
            try:
                self._wait(conn.submit(self._next_id(), "info", P.SHM_UNREGISTER,
                                       [P.encode_shm_name(region.name)], None))
            except (UnavailableError, _ConnectionGone):
                pass  # the connection went, and its regions with it
        region.registered_on = None

    def unregister_shared_memory(self, name: Optional[str] = None) -> None:
        """Unregisters region ``name`` (None: every region) on the server.
        The regions stay mapped here; requests in flight that use them are
        unaffected."""
        with self._lock:
            regions = [r for n, r in self._regions.items() if name is None or n == name]
        if name is not None and not regions:
            # Not one of ours: the server's answer (unknown names are fine).
            self._call(P.SHM_UNREGISTER, P.encode_shm_name(name))
        for r in regions:
            self._forget_region(r)

    def shared_memory_status(self, name: Optional[str] = None) -> List[Dict[str, Any]]:
        """The regions registered on this connection: a list of {"name",
        "offset", "byte_size"} (NotFoundError for an unknown ``name``)."""
        obj = self._call(P.SHM_STATUS, P.encode_shm_name(name or "")) or {}
        return list(obj.get("regions", []))

    def register_postprocess(self, pool: str, fn: Optional[Any], config: Any = None) -> None:
        """Seed 003's post-process hook: every response of `pool` (a pool or a
        pipeline) has its outputs replaced by ``fn(raw_outputs, config)``,
        which must return a dict. Runs on the client, in the thread that
        delivers the answer; ``fn=None`` removes the hook."""
        if fn is None:
            self._postprocess.pop(pool, None)
        elif not callable(fn):
            raise InvalidArgumentError("postprocess for %r is not callable" % (pool,))
        else:
            self._postprocess[pool] = (fn, config)

    def _input_ranks(self, pool: str) -> M.Ranks:
        ranks = self._ranks.get(pool)
        if ranks is None:
            ranks = M.input_ranks(self.pools(), pool)
            if ranks is not None:
                self._ranks[pool] = ranks
        if ranks is None:
            raise NotFoundError("Request for unknown model: '%s' is not found (on %s)" % (pool, self.endpoint))
        return ranks

    def batch_infer_async(self, request: BatchInferenceRequest
                          ) -> Future[BatchInferenceResponse]:
        """Sends a BatchInferenceRequest; returns a Future resolving to a
        BatchInferenceResponse."""
        M.check_batch_request(request)
        parts, rows = M.encode_batch(request, self._input_ranks(request.session_pool))
        rid = request.request_id if request.request_id is not None else self._next_id()
        inner = self._submit(rid, "infer", P.BATCH_INFER_REQUEST, parts, request.session_pool)
        outer: Future[BatchInferenceResponse] = Future()

        def done(f: Future[Any]) -> None:
            try:
                outer.set_result(BatchInferenceResponse(f.result(), rows))
            except BaseException as e:  # noqa: B902 - propagate any failure to the caller
                outer.set_exception(e)

        inner.add_done_callback(done)
        return outer

    def batch_infer(self, request: BatchInferenceRequest) -> BatchInferenceResponse:
        """Runs a BatchInferenceRequest; returns its BatchInferenceResponse."""
        return self._wait(self.batch_infer_async(request))

    # -- introspection ------------------------------------------------------
    def info_async(self, kind: int) -> Future[Any]:
        return self._submit(self._next_id(), "info", P.INFO_REQUEST,
                            [P.encode_info_request(kind)], None)

    def info(self, kind: int) -> Any:
        """The parsed JSON of INFO kind 1 (ready), 2 (pools) or 3 (status)."""
        return self._wait(self.info_async(kind))

    def ready(self) -> bool:
        """True when the server is up, every pool has finished loading and
        (server.strict_readiness, the default) none failed; False when it
        is unreachable, still loading, has a failed model or drains."""
        try:
            obj = self.info(P.INFO_READY)
        except UnavailableError:
            return False
        return bool(obj and obj.get("ready"))

    def pools(self) -> List[Dict[str, Any]]:
        """List of pool descriptions (name, state, backend, inputs, outputs, error, ...)."""
        obj = self.info(P.INFO_POOLS) or {}
        return list(obj.get("pools", []))

    def status(self) -> Dict[str, Any]:
        """The status document: uptime, per-pool counters, histograms and sessions."""
        return dict(self.info(P.INFO_STATUS) or {})

    # -- operator requests on sessions (docs/availability.md) ---------------
    def admin(self, action: str, pool: Optional[str], **fields: Any) -> Any:
        """ADMIN_REQUEST: ``admin("fault", pool, kind="crash", count=1)`` (also
        rate, delay_ms, session; refused with PermissionDeniedError unless the
        server sets allow_fault_injection), ``admin("drain"|"resume", pool,
        session=N)`` or ``admin("update", pool, pool_size=N, max_memory_mb=M,
        max_compute_percent=C)`` (see update_pool). Returns the server's answer
        (a dict)."""
        return self._call(P.ADMIN_REQUEST, M.admin_payload(action, pool, **fields))

    def update_pool(self, pool: str, pool_size: Optional[int] = None,
                    max_memory_mb: Optional[int] = None,
                    max_compute_percent: Optional[int] = None) -> Any:
        """Changes a serving pool: its number of sessions (grown on the model
        already loaded, shrunk as the last sessions finish their work) and
        its quotas (max_memory_mb 0: unlimited; max_compute_percent 0: unset).
        Returns {"pool", "pool_size", "max_memory_mb", "max_compute_percent"}
        as they are now. Raises ResourceExhaustedError (past the memory
        quota), FailedPreconditionError (a sequence pool's size),
        InvalidArgumentError, NotFoundError."""
        return self.admin("update", pool,
                          **M.update_pool_fields(pool_size, max_memory_mb, max_compute_percent))

    def profile(self, pool: str, seconds: float = 5.0, session: int = 0,
                trace: bool = True) -> Any:
        """Runs session ``session`` of ``pool`` under its backend's operator
        profiler (ONNX Runtime's) for ``seconds`` while it serves, and returns
        {"pool", "session", "seconds", "executions", "operators": [{"op",
        "count", "total_us", "mean_us", "p99_us", "share"}, ...] (most time
        first), "nodes": [...], "trace": the Chrome trace events (with
        trace=True)}. Raises FailedPreconditionError for a backend without a
        profiler."""
        return self.admin("profile", pool, seconds=seconds, session=session, trace=bool(trace))

    # -- model repository ---------------------------------------------------
    def _repo(self, action: str, model: Optional[str] = None, **extra: Any) -> Any:
        return self._call(P.REPO_REQUEST, M.repo_payload(action, model, **extra))

    def repository_index(self, ready: bool = False) -> List[Dict[str, Any]]:
        """The model repository index: a list of {"name", "version" (absent for a
        model as a whole), "state" (READY, LOADING, UNLOADING, UNAVAILABLE),
        "reason", "source" ("repository" or "config"), "default"}. With
        ``ready=True`` only READY entries."""
        obj = self._repo("index", ready=bool(ready)) or {}
        return list(obj.get("models", []))

    def load_model(self, name: str, config: Union[str, Dict[str, Any], None] = None) -> Any:
        """Loads (or reloads) repository model ``name``; returns when its new
        versions serve and the replaced ones are freed. ``config``: a Triton
        model config (a dict or its JSON text) applied over the model's
        config.yaml for this load (max_batch_size, dynamic_batching,
        instance_group counts, version_policy). Raises SipError: the load's
        failure (what was serving stays), NotFoundError, InvalidArgumentError
        (a name with '/', '..', ...; a config field that is wrong or not
        supported)."""
        if config is None:
            return self._repo("load", name)
        return self._repo("load", name, config=config)

    def unload_model(self, name: str) -> Any:
        """Unloads repository model ``name`` (requests in flight finish first)."""
        return self._repo("unload", name)

    # -- events (docs/events.md) -------------------------------------------
    def register_callbacks(self, pool: Optional[str], callback: SessionCallback,
                           buffer: int = 0) -> Subscription:
        """Calls ``callback.on_event(session_id, event, context)`` (a
        SessionCallback) for every event of ``pool`` (None: every pool), on
        a thread of this client, from now until unregister_callbacks or
        close. Callbacks of one pool share one subscription connection.
        buffer: events the server keeps for this subscriber while it is
        behind (0: the server's default, 1024); more are dropped and counted
        in the next event's context["dropped"]. Returns the subscription
        (its ``dropped`` counts the events lost so far). Raises
        UnavailableError when the server cannot be reached."""
        if not callable(getattr(callback, "on_event", None)):
            raise InvalidArgumentError("callback must have an on_event(session_id, event, "
                                       "context) method (subclass SessionCallback)")
        key = pool or ""
        with self._lock:
            if self._closed:
                raise UnavailableError("client is closed")
            sub = self._subs.get(key)
            if sub is not None and not sub.thread.is_alive():
                sub = None
            if sub is None:
                sub = Subscription(_open_socket(self.endpoint, self.timeout_s), key, buffer,
                                   self.timeout_s, token=self._token)
                self._subs[key] = sub
            sub.add(callback)
        return sub

    def unregister_callbacks(self, pool: Optional[str],
                             callback: Optional[SessionCallback] = None) -> None:
        """Stops calling ``callback`` (None: every callback of ``pool``);
        the subscription closes with its last callback. Returns once no
        callback of it runs any more (unless called from one)."""
        key = pool or ""
        with self._lock:
            sub = self._subs.get(key)
            if sub is None or sub.remove(callback):
                return
            del self._subs[key]
        sub.close()

    # -- lifetime -----------------------------------------------------------
    def close(self) -> None:
        """Closes the connection (the server drops its regions) and unmaps the
        shared memory regions; calls still waiting fail with CancelledError.
        Event subscriptions end. Later calls raise UnavailableError.
        Idempotent."""
        with self._lock:
            self._closed = True
            c, self._conn = self._conn, None
            regions, self._regions = list(self._regions.values()), {}
            subs, self._subs = list(self._subs.values()), {}
        if c is not None:
            c.close()
        for r in regions:
            r.close()
        for s in subs:
            s.close()

    def __enter__(self) -> SessionClient:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __del__(self) -> None:
        try:
            c = self._conn
            if c is not None:
                c.fail(CancelledError("client garbage-collected"))
        except Exception:
            pass

    def __repr__(self) -> str:
        return "SessionClient(%r, timeout_s=%r)" % (self.endpoint, self.timeout_s)
