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

import array
import errno
import fcntl
import itertools
import json
import mmap
import os
import random
import select
import socket
import threading
import time
from concurrent.futures import Future

import numpy as np
from concurrent.futures import TimeoutError as _FutureTimeout

from . import protocol as P
from .events import Subscription
from .errors import (CancelledError, DeadlineExceededError, InternalError,
                     InvalidArgumentError, NotFoundError, SipError, UnauthenticatedError,
                     UnavailableError, sip_error_from_code)

__all__ = ["SessionClient", "InferenceRequest", "InferenceResponse", "SharedMemoryRegion",
           "parse_endpoint", "DEFAULT_ENDPOINT"]

DEFAULT_ENDPOINT = "ipc:///tmp/sip_service.sock"

# How often the reader wakes up while idle to expire overdue calls.
_SWEEP_INTERVAL_S = 0.1
_RECV_CHUNK = 1 << 20


class InferenceRequest:
    """One inference request.

    session_pool: the pool (or pipeline) name.
    inputs: dict name -> numpy array (or python scalar/list; str/bytes arrays
        are STRING tensors).
    timeout_ms: server-side queueing deadline (None or 0: none).
    priority: None/0 (pool default), 1/2/3 or "high"/"medium"/"low".
    request_id: wire request id (auto-assigned when None).
    outputs: names of the outputs wanted (None: all), or a dict name ->
        destination (``region.output(...)``, an OutputDestination; None:
        inline) to have the server write those outputs into a shared memory
        region; the response then holds numpy views of the region.
    Inputs may be arrays that live in one of the client's shared memory
    regions (``region.ndarray(...)``) or ``region.tensor(...)`` references:
    they are sent by reference, not copied onto the socket.
    sequence_id, sequence_start, sequence_end: for pools with
        sequence_batching (docs/sequences.md): the sequence (an int >= 1 or a
        str), and whether this is its first / last request. Sequence (from
        SessionClient.sequence) sets them for you.
    idempotency_key: a string naming the request for the server: it runs at
        most once while the server keeps the key (docs/idempotency.md), so the
        client sends it again after a dropped connection.
    traceparent, tracestate: the caller's W3C trace context (docs/tracing.md):
        a traced request joins the caller's trace, its root span a child of
        the caller's span. The server ignores an invalid traceparent.
    """

    __slots__ = ("session_pool", "inputs", "timeout_ms", "priority", "request_id", "outputs",
                 "pipeline_config", "sequence_id", "sequence_start", "sequence_end",
                 "idempotency_key", "traceparent", "tracestate")

    def __init__(self, session_pool, inputs, timeout_ms=None, priority=None, request_id=None,
                 outputs=None, pipeline_config=None, sequence_id=None, sequence_start=False,
                 sequence_end=False, idempotency_key=None, traceparent=None, tracestate=None):
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.sequence_id = sequence_id
        self.sequence_start = sequence_start
        self.sequence_end = sequence_end
        self.idempotency_key = idempotency_key
        self.session_pool = session_pool
        self.inputs = inputs
        self.timeout_ms = timeout_ms
        self.priority = priority
        self.request_id = request_id
        self.outputs = outputs
        # For pipelines: {"stage_timeout_ms": [50, 20, 30], "early_exit_condition": "..."}.
        self.pipeline_config = pipeline_config

    def __repr__(self):
        return ("InferenceRequest(session_pool=%r, inputs=[%s], timeout_ms=%r, priority=%r, "
                "request_id=%r, outputs=%r)" % (self.session_pool, ", ".join(self.inputs or ()),
                                                self.timeout_ms, self.priority, self.request_id,
                                                self.outputs))


def _trace_parameters(request, params):
    """`params` (a dict or None) with the request's traceparent and
    tracestate added when it has them; raises InvalidArgumentError for a
    value that is not a str."""
    for name in ("traceparent", "tracestate"):
        v = getattr(request, name, None)
        if v is not None:
            if not isinstance(v, str):
                raise InvalidArgumentError("%s must be a str, not %s" % (name, type(v).__name__))
            params = dict(params or {}, **{name: v})
    return params


def sequence_parameters(sequence_id, start=False, end=False):
    """The request parameters for a sequence ({} when sequence_id is None);
    raises InvalidArgumentError for values the server would refuse."""
    if sequence_id is None:
        if start or end:
            raise InvalidArgumentError("sequence_start/sequence_end need a sequence_id")
        return {}
    if isinstance(sequence_id, bool) or not isinstance(sequence_id, (int, str)):
        raise InvalidArgumentError("sequence_id must be an int >= 1 or a str, not %s"
                                   % type(sequence_id).__name__)
    if isinstance(sequence_id, int) and not 1 <= sequence_id < 2 ** 63:
        raise InvalidArgumentError("sequence_id %d is out of range; expected 1..2**63-1"
                                   % sequence_id)
    if isinstance(sequence_id, str) and not 1 <= len(sequence_id.encode()) <= 256:
        raise InvalidArgumentError("sequence_id must be a string of 1..256 bytes")
    for name, v in (("sequence_start", start), ("sequence_end", end)):
        if not isinstance(v, bool):
            raise InvalidArgumentError("%s must be a bool, not %s" % (name, type(v).__name__))
    return {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}


class Sequence:
    """The requests of one sequence on a pool with sequence_batching
    (docs/sequences.md). The first infer() starts the sequence (binding it to
    a session); infer(..., end=True) or end() sends its last request, after
    which the next infer() starts it again.

        seq = client.sequence("tracker", 42)
        seq.infer({"x": frame0}); seq.infer({"x": frame1}); seq.end({"x": frame2})
    """

    def __init__(self, client, session_pool, sequence_id, **request_options):
        sequence_parameters(sequence_id)  # checks the id now
        self.client = client
        self.session_pool = session_pool
        self.sequence_id = sequence_id
        self.request_options = request_options
        self.started = False

    def infer_async(self, inputs, end=False):
        """Sends the sequence's next request; returns a Future (see
        SessionClient.infer_async)."""
        req = InferenceRequest(self.session_pool, inputs, sequence_id=self.sequence_id,
                               sequence_start=not self.started, sequence_end=end,
                               **self.request_options)
        fut = self.client.infer_async(req)
        self.started = not end
        return fut

    def infer(self, inputs, end=False):
        return self.client._wait(self.infer_async(inputs, end))

    def end(self, inputs):
        """Sends the sequence's last request and returns its response."""
        return self.infer(inputs, end=True)

    def __repr__(self):
        return "Sequence(%r, %r, started=%r)" % (self.session_pool, self.sequence_id, self.started)


class BatchInferenceRequest:
    """Many items in one call (seed 000). The server splits them into chunks
    of ``batch_config["max_batch_size"]`` rows, pads the last chunk per
    ``padding_strategy`` (none | replicate_last | zero), runs the chunks
    (which batch with other traffic) and answers with outputs in input order.

    batch_inputs: a list of items; each item is a dict name -> array, or a
        bare array for a single-input pool. An item with the model's rank
        contributes its dim 0 rows; one with rank - 1 is one row.
    batch_config: {"max_batch_size": N (0: the pool's), "timeout_ms": T (the
        longest a chunk waits in the pool's batcher for other requests to
        fill its batch, instead of the pool's max_queue_delay; not a
        deadline), "padding_strategy": "none" | "replicate_last" | "zero"}.
    traceparent, tracestate: the caller's W3C trace context, as for
        InferenceRequest (docs/tracing.md).
    """

    __slots__ = ("session_pool", "batch_inputs", "batch_config", "priority", "request_id",
                 "outputs", "traceparent", "tracestate")

    def __init__(self, session_pool, batch_inputs, batch_config=None, priority=None,
                 request_id=None, outputs=None, traceparent=None, tracestate=None):
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.session_pool = session_pool
        self.batch_inputs = list(batch_inputs)
        self.batch_config = dict(batch_config or {})
        self.priority = priority
        self.request_id = request_id
        self.outputs = outputs

    def __repr__(self):
        return "BatchInferenceRequest(session_pool=%r, items=%d, batch_config=%r)" % (
            self.session_pool, len(self.batch_inputs), self.batch_config)


class StageOutputs(dict):
    """One pipeline stage's outputs: a dict name -> array that also reads
    them as attributes (``stage_outputs["det"].boxes``). ``predictions`` is a
    classification stage's top-k as a list per row of (label, score) pairs:
    from its ``labels``/``scores`` outputs, else a topk stage's ``labels``
    (with ``labels_file``) or ``indices``, with its ``values``, else the 5 best of its only [N, classes] float
    output as (class index, score)."""

    __slots__ = ()
    TOP_K = 5

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            if name == "predictions":
                return self._predictions()
            raise AttributeError("stage has no output %r (it has: %s)"
                                 % (name, ", ".join(sorted(self)) or "none")) from None

    def _predictions(self):
        pair = next((p for p in (("labels", "scores"), ("labels", "values"), ("indices", "values"))
                     if p[0] in self and p[1] in self), None)
        if pair:
            labels, scores = np.asarray(self[pair[0]]), np.asarray(self[pair[1]], np.float64)
            labels = labels.reshape(scores.shape)
            if scores.ndim == 1:
                labels, scores = labels[np.newaxis], scores[np.newaxis]
            return [[(lab.decode() if isinstance(lab, bytes) else lab.item(), float(sc))
                     for lab, sc in zip(lr, sr)] for lr, sr in zip(labels, scores)]
        probs = [v for v in self.values()
                 if isinstance(v, np.ndarray) and v.ndim == 2 and v.dtype.kind == "f"]
        if len(probs) != 1:
            raise AttributeError("stage has no predictions: expected labels and scores outputs "
                                 "or one [N, classes] float output (it has: %s)"
                                 % ", ".join(sorted(self)))
        top = np.argsort(-probs[0], axis=1, kind="stable")[:, :self.TOP_K]
        return [[(int(i), float(row[i])) for i in idx] for row, idx in zip(probs[0], top)]


class InferenceResponse:
    """The answer to one request.

    outputs: dict name -> numpy array (STRING outputs: object arrays of bytes).
    latency_ms: client-measured round trip (send to answer), float.
    request_id: the wire request id.
    timings: {"queue_us", "compute_us", "total_us"} as reported by the server.
    replayed: True when the server answered with the answer of an earlier
        request with the same idempotency key (this one did not run).
    """

    __slots__ = ("outputs", "latency_ms", "request_id", "timings", "session_pool",
                 "stage_outputs", "stages", "early_exit", "replayed", "retries", "served_by")

    def __init__(self, outputs, latency_ms, request_id, timings, session_pool=None, message="",
                 replayed=False):
        self.replayed = replayed
        # A pipeline answers with "<stage>/<output>" tensors and a JSON story of
        # its stages in the message: split them out (seed 000's stage_outputs).
        self.outputs = {k: v for k, v in outputs.items() if "/" not in k}
        self.stage_outputs = {}
        for k, v in outputs.items():
            if "/" in k:
                stage, out = k.split("/", 1)
                self.stage_outputs.setdefault(stage, StageOutputs())[out] = v
        self.stages, self.early_exit = {}, None
        # A request failed over to another session (docs/availability.md):
        # how often it was retried and the session that answered.
        self.retries, self.served_by = 0, None
        if message:
            try:
                info = json.loads(message)
                self.stages = info.get("stages", {})
                self.early_exit = info.get("early_exit")
                failover = info.get("failover") or {}
                self.retries = int(failover.get("retries", 0))
                self.served_by = failover.get("served_by")
            except (ValueError, AttributeError):
                pass
        self.latency_ms = latency_ms
        self.request_id = request_id
        self.timings = timings
        self.session_pool = session_pool

    def __getitem__(self, name):
        return self.outputs[name]

    def __repr__(self):
        shapes = ", ".join("%s%s" % (k, list(v.shape)) for k, v in self.outputs.items())
        return "InferenceResponse(request_id=%r, outputs={%s}, latency_ms=%.3f)" % (
            self.request_id, shapes, self.latency_ms)


class BatchOutputs(list):
    """A batch's results: one dict name -> array per input item, in input
    order (``len()`` is the number of items); indexed by an output name it
    is that output with every item's rows stacked in order."""

    __slots__ = ("by_name",)

    def __init__(self, items, by_name):
        super().__init__(items)
        self.by_name = by_name

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.by_name[key]
        return list.__getitem__(self, key)

    def __contains__(self, key):
        return key in self.by_name if isinstance(key, str) else list.__contains__(self, key)

    def keys(self):
        return self.by_name.keys()

    def items(self):
        return self.by_name.items()


class BatchInferenceResponse(InferenceResponse):
    """The answer to a BatchInferenceRequest: ``outputs[i]`` is item i's
    dict name -> array (``len(outputs)`` items), ``outputs["name"]`` every
    item's rows of that output in input order; ``batch_outputs`` is the list
    of items' dicts."""

    __slots__ = ("batch_outputs",)

    def __init__(self, inner, rows):
        super().__init__(inner.outputs, inner.latency_ms, inner.request_id, inner.timings,
                         inner.session_pool)
        self.batch_outputs = []
        start = 0
        for n in rows:
            self.batch_outputs.append({k: v[start:start + n] for k, v in inner.outputs.items()})
            start += n
        self.outputs = BatchOutputs(self.batch_outputs, inner.outputs)


class SharedMemoryRegion:
    """A memfd shared with the server over this client's unix socket
    connection (``SessionClient.create_shared_memory``). No other process can
    name it. Arrays made by :meth:`ndarray` live in the region: fill them in
    place and pass them as inputs, and they travel by reference; outputs
    directed to :meth:`output` destinations come back as numpy views of the
    region (valid until the region is closed; later requests writing to the
    same bytes overwrite them).
    """

    def __init__(self, client, name, byte_size):
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
        self.buffer = np.frombuffer(self.mm, dtype=np.uint8)
        self._addr = self.buffer.__array_interface__["data"][0]
        self.closed = False
        self.registered_on = None  # the _Connection it is registered on

    def _check_range(self, offset, nbytes, what):
        if self.closed:
            raise InvalidArgumentError("shared memory region %r is closed" % self.name)
        if offset < 0 or nbytes < 0 or offset + nbytes > self.byte_size:
            raise InvalidArgumentError("%s: offset %d + %d bytes is past the end of shared memory "
                                       "region %r (%d bytes)" % (what, offset, nbytes, self.name,
                                                                 self.byte_size))

    def ndarray(self, shape, dtype=np.float32, offset=0):
        """A numpy array of ``shape`` and ``dtype`` living at ``offset`` of the
        region (no copy: writes go straight to the shared memory)."""
        dt = np.dtype(dtype)
        shape = tuple(shape) if np.iterable(shape) else (int(shape),)
        count = int(np.prod(shape, dtype=np.int64))
        self._check_range(offset, count * dt.itemsize, "ndarray")
        return np.ndarray(shape, dt, buffer=self.mm, offset=offset)

    def tensor(self, shape, dtype=np.float32, offset=0):
        """An input by reference: ``shape`` x ``dtype`` at ``offset``."""
        dt = np.dtype(dtype)
        count = int(np.prod(tuple(shape), dtype=np.int64))
        self._check_range(offset, count * dt.itemsize, "tensor")
        return P.SharedTensor(self.name, int(offset), tuple(shape), dt)

    def output(self, offset=0, byte_size=None):
        """A destination for an output: ``byte_size`` bytes (default: the rest
        of the region) at ``offset``."""
        if byte_size is None:
            byte_size = self.byte_size - offset
        self._check_range(offset, byte_size, "output destination")
        return P.OutputDestination(self.name, int(offset), int(byte_size))

    def reference(self, arr):
        """The SharedTensor for an array that lives in this region (C-contiguous),
        or None when it does not."""
        if self.closed or not isinstance(arr, np.ndarray) or arr.dtype.kind in "OUS":
            return None
        addr = arr.__array_interface__["data"][0]
        if not (self._addr <= addr and addr + arr.nbytes <= self._addr + self.byte_size):
            return None
        if not arr.flags.c_contiguous:
            raise InvalidArgumentError("an input living in shared memory region %r must be "
                                       "C-contiguous" % self.name)
        return P.SharedTensor(self.name, addr - self._addr, arr.shape, arr.dtype)

    def view(self, out):
        """A numpy view of a P.SharedOutput the server wrote into this region."""
        self._check_range(out.offset, out.nbytes, "output")
        if out.dtype == P.DTYPE_STRING:
            raw = bytes(self.mm[out.offset:out.offset + out.nbytes])
            count = int(np.prod(out.shape, dtype=np.int64))
            return P._unpack_strings(raw, 0, len(raw), count, out.shape, "output")
        dt = P.numpy_dtype(out.dtype)
        return np.ndarray(out.shape, dt, buffer=self.mm, offset=out.offset)

    def unregister(self):
        """Unregisters the region on the server (it stays mapped here)."""
        self.client.unregister_shared_memory(self.name)

    def close(self):
        """Unregisters the region and unmaps it. Views made earlier must not be
        used afterwards."""
        if self.closed:
            return
        try:
            self.client._forget_region(self)
        finally:
            self._release()

    def _release(self):
        self.closed = True
        self.buffer = None
        try:
            self.mm.close()
        except BufferError:
            pass  # arrays still view it: the mapping goes with the last of them
        os.close(self.fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "SharedMemoryRegion(%r, byte_size=%d)" % (self.name, self.byte_size)


def parse_endpoint(endpoint):
    """``ipc:///path`` | ``unix:///path`` -> (AF_UNIX, path);
    ``tcp://host:port`` (``[v6]:port`` too) -> ("tcp", (host, port))."""
    if not isinstance(endpoint, str):
        raise InvalidArgumentError("endpoint must be a string, not %r" % (endpoint,))
    for scheme in ("ipc://", "unix://"):
        if endpoint.startswith(scheme):
            path = endpoint[len(scheme):]
            if not path:
                raise InvalidArgumentError("endpoint %r has no socket path" % endpoint)
            if path.startswith("@"):  # Linux abstract namespace
                path = "\0" + path[1:]
            return socket.AF_UNIX, path
    if endpoint.startswith("tcp://"):
        rest = endpoint[len("tcp://"):].rstrip("/")
        if rest.startswith("["):
            host, sep, port = rest[1:].partition("]:")
        else:
            host, sep, port = rest.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidArgumentError("endpoint %r: expected tcp://host:port" % endpoint)
        return "tcp", (host, int(port))
    raise InvalidArgumentError("endpoint %r: expected ipc:///path, unix:///path or "
                               "tcp://host:port" % endpoint)


def _connect_unix(sock, addr, timeout_s):
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


def _open_socket(endpoint, timeout_s):
    family, addr = parse_endpoint(endpoint)
    try:
        if family == "tcp":
            sock = socket.create_connection(addr, timeout=timeout_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout_s)
                _connect_unix(sock, addr, timeout_s)
            except BaseException:
                sock.close()
                raise
    except OSError as e:
        raise UnavailableError("cannot connect to %s: %s" % (endpoint, e)) from None
    # The timeout bounds sends (a server that stops reading); the reader
    # only calls recv after poll() says data is there.
    sock.settimeout(timeout_s)
    return sock


def _copy_error(err):
    """A fresh exception of the same class and text (one per future, so that
    threads raising them don't share tracebacks)."""
    if type(err) is SipError or not isinstance(err, SipError):
        return SipError(err.code_value, err.message) if isinstance(err, SipError) else err
    return sip_error_from_code(err.code_value, err.message)


def _sendall_parts(sock, parts, fds=()):
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

    def __init__(self, future, kind, t0, deadline, pool, regions=None):
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

    def __init__(self, sock, endpoint, timeout_s):
        self.sock = sock
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.wlock = threading.Lock()
        self.lock = threading.Lock()
        self.pending = {}
        self.dead = False
        self.dead_error = None
        self.postprocess = None  # the client's {pool: (fn, config)}, shared
        self.regions = {}  # the client's {name: SharedMemoryRegion}, shared
        self._last_sweep = time.monotonic()
        self.reader = threading.Thread(target=self._read_loop, name="cann_sip-reader",
                                       daemon=True)
        self.reader.start()

    # -- open ---------------------------------------------------------------
    @classmethod
    def open(cls, endpoint, timeout_s):
        return cls(_open_socket(endpoint, timeout_s), endpoint, timeout_s)

    # -- requests -----------------------------------------------------------
    def submit(self, request_id, kind, msg_type, parts, pool, fds=(), regions=None):
        """Registers and sends one request; returns its Future."""
        fut = Future()
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

    def _after_send_failure(self, exc):
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
    def fail(self, err):
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
            e = _copy_error(err)
            if isinstance(e, SipError):
                e.request_id = rid
            entry.future.set_exception(e)

    def close(self, err=None):
        self.fail(err or CancelledError("client closed"))
        if threading.current_thread() is not self.reader:
            self.reader.join(5.0)

    def _sweep(self, now):
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
    def _recv_exact(self, n, poller, at_boundary):
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

    def _read_loop(self):
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        err = None
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
                payload = self._recv_exact(h.length, poller, False) if h.length else bytearray()
                if h.type == P.ERROR:
                    code, msg = P.decode_error(payload, strict=False)
                    err = sip_error_from_code(code, msg)
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

    def _deliver(self, h, payload):
        with self.lock:
            entry = self.pending.pop(h.request_id, None)
        if entry is None:
            return  # already expired (or never ours): drop it
        fut = entry.future
        latency_ms = (time.monotonic() - entry.t0) * 1000.0
        try:
            if entry.kind == "infer":
                if h.type != P.INFER_RESPONSE:
                    raise P.ProtocolError("expected INFER_RESPONSE, got type %d" % h.type)
                m = P.decode_infer_response(payload)
                if m.code != 0:
                    e = sip_error_from_code(m.code, m.message)
                    e.request_id = h.request_id
                    fut.set_exception(e)
                    return
                for name, v in m.outputs.items():
                    if isinstance(v, P.SharedOutput):
                        # The region the request named, even if unregistered since.
                        region = (entry.regions or {}).get(v.region) or self.regions.get(v.region)
                        if region is None or region.closed:
                            raise P.ProtocolError("output %r was written to shared memory region "
                                                  "%r, which this client does not hold"
                                                  % (name, v.region))
                        m.outputs[name] = region.view(v)
                timings = {"queue_us": m.queue_us, "compute_us": m.compute_us,
                           "total_us": m.total_us}
                resp = InferenceResponse(m.outputs, latency_ms, h.request_id, timings,
                                         entry.pool, m.message, m.replayed)
                post = self.postprocess.get(entry.pool) if self.postprocess else None
                if post is not None:
                    fn, config = post
                    try:
                        resp.outputs = fn(resp.outputs, config)
                    except Exception as e:  # the hook's failure is the caller's, not the reader's
                        fut.set_exception(e)
                        return
                fut.set_result(resp)
            else:
                if h.type != P.INFO_RESPONSE:
                    raise P.ProtocolError("expected INFO_RESPONSE, got type %d" % h.type)
                code, text = P.decode_info_response(payload, parse_json=False)
                if code != 0:
                    msg = text
                    try:
                        obj = json.loads(text)
                        if isinstance(obj, dict) and obj.get("error"):
                            msg = obj["error"]
                            if isinstance(msg, dict):
                                msg = msg.get("message", text)
                    except ValueError:
                        pass
                    fut.set_exception(sip_error_from_code(code, msg))
                    return
                fut.set_result(P.decode_info_response(payload)[1])
        except P.ProtocolError as e:
            fut.set_exception(InternalError("malformed answer from %s: %s" % (self.endpoint, e)))


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

    def __init__(self, endpoint=DEFAULT_ENDPOINT, timeout_s=30, reconnect_timeout_s=0.0,
                 backoff_s=0.05, max_backoff_s=2.0, token=None):
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
        self._connect_error = None
        self.endpoint = endpoint
        self.timeout_s = float(timeout_s)
        self._lock = threading.Lock()
        self._conn = None
        self._closed = False
        self._ids = itertools.count(1)
        self._ranks = {}  # pool -> {input: rank}, for batch_infer
        self._postprocess = {}  # pool -> (fn, config), see register_postprocess
        self._regions = {}  # name -> SharedMemoryRegion, registered on every connection
        self._subs = {}  # pool ("" = every pool) -> events.Subscription

    # -- plumbing -----------------------------------------------------------
    def _connection(self, wait_until=None):
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

    def _open_locked(self):
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

    def _next_id(self):
        return next(self._ids) & P.MAX_U64

    def _submit(self, request_id, kind, msg_type, parts, pool, regions=None, wait_until=None):
        # A connection that died before the request was registered has sent
        # nothing for it, so one retry on a fresh connection is safe.
        for attempt in (0, 1):
            conn = self._connection(wait_until)
            try:
                return conn.submit(request_id, kind, msg_type, parts, pool, regions=regions)
            except _ConnectionGone:
                if attempt:
                    raise _copy_error(conn.dead_error or UnavailableError(
                        "connection to %s lost" % self.endpoint)) from None

    def _wait(self, fut):
        try:
            return fut.result(timeout=self.timeout_s + 5.0)
        except _FutureTimeout:
            raise DeadlineExceededError("no answer from %s within %.1f s"
                                        % (self.endpoint, self.timeout_s)) from None

    # -- inference ----------------------------------------------------------
    def infer_async(self, request):
        """Sends ``request`` and returns a concurrent.futures.Future that
        resolves to an InferenceResponse or raises a SipError. Input that
        cannot be encoded raises InvalidArgumentError here, before sending."""
        if not isinstance(request, InferenceRequest):
            raise InvalidArgumentError("infer expects an InferenceRequest, not %s"
                                       % type(request).__name__)
        params = None
        if request.pipeline_config is not None:
            if not isinstance(request.pipeline_config, dict):
                raise InvalidArgumentError("pipeline_config must be a dict, not %s"
                                           % type(request.pipeline_config).__name__)
            params = {"pipeline_config": request.pipeline_config}
        seq = sequence_parameters(request.sequence_id, request.sequence_start,
                                  request.sequence_end)
        if seq:
            params = dict(params or {}, **seq)
        key = request.idempotency_key
        if key is not None:
            if not isinstance(key, str) or not key or len(key.encode("utf-8")) > 1024:
                raise InvalidArgumentError("idempotency_key must be a string of 1 to 1024 bytes, "
                                           "not %r" % (key,))
            params = dict(params or {}, idempotency_key=key)
        params = _trace_parameters(request, params)
        inputs = request.inputs
        if self._regions and inputs:
            inputs = [(k, self._by_reference(v)) for k, v in P._items(inputs)]
        try:
            parts = P.encode_infer_request_parts(request.session_pool, inputs,
                                                 priority=request.priority,
                                                 timeout_ms=request.timeout_ms,
                                                 outputs=request.outputs, parameters=params)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(str(e)) from None
        rid = request.request_id
        if rid is None:
            rid = self._next_id()
        elif isinstance(rid, bool) or not isinstance(rid, int) or not 0 <= rid <= P.MAX_U64:
            raise InvalidArgumentError("request_id must be an integer in 0..2**64-1, not %r"
                                       % (rid,))
        regions = None
        if isinstance(request.outputs, dict):
            with self._lock:
                regions = {d.region: self._regions[d.region] for d in request.outputs.values()
                           if d is not None and d.region in self._regions}
        if key is None:
            return self._submit(rid, "infer", P.INFER_REQUEST, parts, request.session_pool,
                                regions)
        return self._submit_keyed(rid, parts, request.session_pool, regions)

    def _submit_keyed(self, rid, parts, pool, regions):
        """Sends a request with an idempotency key, and again (after a
        backoff, on a new connection) when its connection drops or the server
        answers UNAVAILABLE, until timeout_s after the first send."""
        deadline = time.monotonic() + self.timeout_s
        outer = Future()
        outer.set_running_or_notify_cancel()
        state = {"backoff": 0.0}

        def finish(f):
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

        def attempt(delay):
            time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
            try:
                inner = self._submit(rid, "infer", P.INFER_REQUEST, parts, pool, regions,
                                     wait_until=deadline)
            except SipError as e:
                inner = Future()
                inner.set_exception(e)
            inner.add_done_callback(finish)

        inner = self._submit(rid, "infer", P.INFER_REQUEST, parts, pool, regions,
                             wait_until=deadline)
        inner.add_done_callback(finish)
        return outer

    def infer(self, request):
        """Runs one request and returns its InferenceResponse (raises SipError)."""
        return self._wait(self.infer_async(request))

    def sequence(self, session_pool, sequence_id, **request_options):
        """A Sequence: the requests of one sequence on a pool with
        sequence_batching; request_options (timeout_ms, priority, outputs)
        apply to each of its requests."""
        return Sequence(self, session_pool, sequence_id, **request_options)

    # -- shared memory ------------------------------------------------------
    def _by_reference(self, value):
        """An input array living in one of the regions becomes a reference."""
        if isinstance(value, np.ndarray):
            with self._lock:
                regions = list(self._regions.values())
            for region in regions:
                ref = region.reference(value)
                if ref is not None:
                    return ref
        return value

    def _register_on(self, conn, region):
        fut = conn.submit(self._next_id(), "info", P.SHM_REGISTER,
                          [P.encode_shm_register(region.name, 0, region.byte_size)], None,
                          fds=[region.fd])
        self._wait(fut)
        region.registered_on = conn

    def create_shared_memory(self, name, byte_size):
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

    def _forget_region(self, region):
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

    def unregister_shared_memory(self, name=None):
        """Unregisters region ``name`` (None: every region) on the server.
        The regions stay mapped here; requests in flight that use them are
        unaffected."""
        with self._lock:
            regions = [r for n, r in self._regions.items() if name is None or n == name]
        if name is not None and not regions:
            # Not one of ours: the server's answer (unknown names are fine).
            self._wait(self._submit(self._next_id(), "info", P.SHM_UNREGISTER,
                                    [P.encode_shm_name(name)], None))
        for r in regions:
            self._forget_region(r)

    def shared_memory_status(self, name=None):
        """The regions registered on this connection: a list of {"name",
        "offset", "byte_size"} (NotFoundError for an unknown ``name``)."""
        obj = self._wait(self._submit(self._next_id(), "info", P.SHM_STATUS,
                                      [P.encode_shm_name(name or "")], None)) or {}
        return obj.get("regions", [])

    def register_postprocess(self, pool, fn, config=None):
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

    def _input_ranks(self, pool):
        ranks = self._ranks.get(pool)
        if ranks is None:
            # "model:version" names one version of a repository model.
            name, _, version = pool.partition(":")
            for p in self.pools():
                if p["name"] == name and (p.get("version") == version if version
                                          else p.get("default", True)):
                    ranks = {i["name"]: (len(i["shape"]) if i.get("shape") is not None else None)
                             for i in p.get("inputs", [])}
                    self._ranks[pool] = ranks
                    break
        if ranks is None:
            raise NotFoundError("Request for unknown model: '%s' is not found (on %s)" % (pool, self.endpoint))
        return ranks

    def _stack_items(self, request):
        ranks = self._input_ranks(request.session_pool)
        items = []
        for item in request.batch_inputs:
            if not isinstance(item, dict):
                if len(ranks) != 1:
                    raise InvalidArgumentError(
                        "pool %r has %d inputs; give each item as a dict name -> array"
                        % (request.session_pool, len(ranks)))
                item = {next(iter(ranks)): item}
            items.append({k: P.as_tensor_array(v)[1] for k, v in item.items()})
        if not items:
            raise InvalidArgumentError("batch_inputs is empty")
        rows, stacked = [], {}
        for item in items:
            if set(item) != set(items[0]):
                raise InvalidArgumentError("every item needs the same inputs: %s vs %s"
                                           % (sorted(items[0]), sorted(item)))
            n = None
            for name, arr in item.items():
                rank = ranks.get(name)
                k = 1 if rank is not None and arr.ndim == rank - 1 else (
                    arr.shape[0] if arr.ndim else None)
                if k is None or (n is not None and k != n):
                    raise InvalidArgumentError(
                        "item inputs must share dim 0 (the rows of the item); %r has shape %s"
                        % (name, list(arr.shape)))
                n = k
            rows.append(n)
        for name in items[0]:
            parts = []
            for item in items:
                arr = item[name]
                rank = ranks.get(name)
                parts.append(arr[np.newaxis] if rank is not None and arr.ndim == rank - 1 else arr)
            stacked[name] = np.concatenate(parts, axis=0)
        return stacked, rows

    def batch_infer_async(self, request):
        """Sends a BatchInferenceRequest; returns a Future resolving to a
        BatchInferenceResponse."""
        if not isinstance(request, BatchInferenceRequest):
            raise InvalidArgumentError("batch_infer expects a BatchInferenceRequest, not %s"
                                       % type(request).__name__)
        cfg = request.batch_config
        unknown = set(cfg) - {"max_batch_size", "timeout_ms", "padding_strategy"}
        if unknown:
            raise InvalidArgumentError("unknown batch_config keys %s; expected max_batch_size, "
                                       "timeout_ms, padding_strategy" % sorted(unknown))
        stacked, rows = self._stack_items(request)
        params = _trace_parameters(
            request, {"batch_timeout_ms": cfg["timeout_ms"]} if cfg.get("timeout_ms") else None)
        try:
            parts = P.encode_batch_infer_request_parts(
                request.session_pool, stacked, max_batch_size=cfg.get("max_batch_size", 0) or 0,
                padding=cfg.get("padding_strategy", "none") or "none",
                priority=request.priority, outputs=request.outputs, parameters=params)
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(str(e)) from None
        rid = request.request_id if request.request_id is not None else self._next_id()
        inner = self._submit(rid, "infer", P.BATCH_INFER_REQUEST, parts, request.session_pool)
        outer = Future()

        def done(f):
            try:
                outer.set_result(BatchInferenceResponse(f.result(), rows))
            except BaseException as e:  # noqa: B902 - propagate any failure to the caller
                outer.set_exception(e)

        inner.add_done_callback(done)
        return outer

    def batch_infer(self, request):
        """Runs a BatchInferenceRequest; returns its BatchInferenceResponse."""
        return self._wait(self.batch_infer_async(request))

    # -- introspection ------------------------------------------------------
    def info_async(self, kind):
        return self._submit(self._next_id(), "info", P.INFO_REQUEST,
                            [P.encode_info_request(kind)], None)

    def info(self, kind):
        """The parsed JSON of INFO kind 1 (ready), 2 (pools) or 3 (status)."""
        return self._wait(self.info_async(kind))

    def ready(self):
        """True when the server is up and every pool has finished loading;
        False when it is unreachable or still loading."""
        try:
            obj = self.info(P.INFO_READY)
        except UnavailableError:
            return False
        return bool(obj and obj.get("ready"))

    def pools(self):
        """List of pool descriptions (name, state, backend, inputs, outputs, error, ...)."""
        obj = self.info(P.INFO_POOLS) or {}
        return obj.get("pools", [])

    def status(self):
        """The status document: uptime, per-pool counters, histograms and sessions."""
        return self.info(P.INFO_STATUS) or {}

    # -- operator requests on sessions (docs/availability.md) ---------------
    def admin(self, action, pool, **fields):
        """ADMIN_REQUEST: ``admin("fault", pool, kind="crash", count=1)`` (also
        rate, delay_ms, session; refused with PermissionDeniedError unless the
        server sets allow_fault_injection), ``admin("drain"|"resume", pool,
        session=N)`` or ``admin("update", pool, pool_size=N, max_memory_mb=M,
        max_compute_percent=C)`` (see update_pool). Returns the server's answer
        (a dict)."""
        obj = dict(fields, action=action, pool=pool)
        return self._wait(self._submit(self._next_id(), "info", P.ADMIN_REQUEST,
                                       [json.dumps(obj).encode("utf-8")], None))

    def update_pool(self, pool, pool_size=None, max_memory_mb=None, max_compute_percent=None):
        """Changes a serving pool: its number of sessions (grown on the model
        already loaded, shrunk as the last sessions finish their work) and
        its quotas (max_memory_mb 0: unlimited; max_compute_percent 0: unset).
        Returns {"pool", "pool_size", "max_memory_mb", "max_compute_percent"}
        as they are now. Raises ResourceExhaustedError (past the memory
        quota), FailedPreconditionError (a sequence pool's size),
        InvalidArgumentError, NotFoundError."""
        fields = {k: v for k, v in (("pool_size", pool_size), ("max_memory_mb", max_memory_mb),
                                    ("max_compute_percent", max_compute_percent))
                  if v is not None}
        return self.admin("update", pool, **fields)

    def profile(self, pool, seconds=5.0, session=0, trace=True):
        """Runs session ``session`` of ``pool`` under its backend's operator
        profiler (ONNX Runtime's) for ``seconds`` while it serves, and returns
        {"pool", "session", "seconds", "executions", "operators": [{"op",
        "count", "total_us", "mean_us", "p99_us", "share"}, ...] (most time
        first), "nodes": [...], "trace": the Chrome trace events (with
        trace=True)}. Raises FailedPreconditionError for a backend without a
        profiler."""
        return self.admin("profile", pool, seconds=seconds, session=session, trace=bool(trace))

    # -- model repository ---------------------------------------------------
    def _repo(self, action, model=None, **extra):
        if model is not None and not isinstance(model, str):
            raise InvalidArgumentError("model name must be a str, not %s" % type(model).__name__)
        return self._wait(self._submit(self._next_id(), "info", P.REPO_REQUEST,
                                       [P.encode_repo_request(action, model, **extra)], None))

    def repository_index(self, ready=False):
        """The model repository index: a list of {"name", "version" (absent for a
        model as a whole), "state" (READY, LOADING, UNLOADING, UNAVAILABLE),
        "reason", "source" ("repository" or "config"), "default"}. With
        ``ready=True`` only READY entries."""
        obj = self._repo("index", ready=bool(ready)) or {}
        return obj.get("models", [])

    def load_model(self, name, config=None):
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
        if not isinstance(config, (str, dict)):
            raise InvalidArgumentError("config must be a dict or JSON text, not %s"
                                       % type(config).__name__)
        return self._repo("load", name, config=config)

    def unload_model(self, name):
        """Unloads repository model ``name`` (requests in flight finish first)."""
        return self._repo("unload", name)

    # -- lifetime -----------------------------------------------------------
    # -- events (docs/events.md) -------------------------------------------
    def register_callbacks(self, pool, callback, buffer=0):
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

    def unregister_callbacks(self, pool, callback=None):
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

    def close(self):
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            c = self._conn
            if c is not None:
                c.fail(CancelledError("client garbage-collected"))
        except Exception:
            pass

    def __repr__(self):
        return "SessionClient(%r, timeout_s=%r)" % (self.endpoint, self.timeout_s)
