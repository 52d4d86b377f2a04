"""What the threaded client (cann_sip.client) and the asyncio client
(cann_sip.aio) share above the wire format of cann_sip.protocol: endpoints,
the request and response objects, turning a request into its payload, and
turning an answer's payload into a response or the SipError it stands for.
No sockets here.
"""

from __future__ import annotations

import json
import socket
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union)

import numpy as np
import numpy.typing as npt

from . import protocol as P
from .errors import InvalidArgumentError, SipError, sip_error_from_code

__all__ = ["DEFAULT_ENDPOINT", "parse_endpoint", "InferenceRequest", "BatchInferenceRequest",
           "InferenceResponse", "BatchInferenceResponse", "StageOutputs", "BatchOutputs",
           "sequence_parameters"]

DEFAULT_ENDPOINT = "ipc:///tmp/sip_service.sock"

# (family, address): (AF_UNIX, path) or ("tcp", (host, port)).
Endpoint = Tuple[Union[int, str], Union[str, Tuple[str, int]]]
# A pool's post-process hook and its config (SessionClient.register_postprocess).
Postprocess = Tuple[Callable[[Dict[str, Any], Any], Dict[str, Any]], Any]
# The ranks of a pool's inputs (None: unknown), for batch requests.
Ranks = Dict[str, Optional[int]]


def parse_endpoint(endpoint: str) -> Endpoint:
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


# ---------------------------------------------------------------------------
# requests

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

    def __init__(self, session_pool: str, inputs: P.Tensors,
                 timeout_ms: Optional[float] = None, priority: Union[int, str, None] = None,
                 request_id: Optional[int] = None, outputs: Any = None,
                 pipeline_config: Optional[Dict[str, Any]] = None,
                 sequence_id: Union[int, str, None] = None, sequence_start: bool = False,
                 sequence_end: bool = False, idempotency_key: Optional[str] = None,
                 traceparent: Optional[str] = None, tracestate: Optional[str] = None) -> None:
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

    def __repr__(self) -> str:
        names = self.inputs.keys() if isinstance(self.inputs, Mapping) else (
            n for n, _ in (self.inputs or ()))
        return ("InferenceRequest(session_pool=%r, inputs=[%s], timeout_ms=%r, priority=%r, "
                "request_id=%r, outputs=%r)" % (self.session_pool, ", ".join(names),
                                                self.timeout_ms, self.priority, self.request_id,
                                                self.outputs))


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

    def __init__(self, session_pool: str, batch_inputs: Iterable[Any],
                 batch_config: Optional[Mapping[str, Any]] = None,
                 priority: Union[int, str, None] = None, request_id: Optional[int] = None,
                 outputs: Any = None, traceparent: Optional[str] = None,
                 tracestate: Optional[str] = None) -> None:
        self.traceparent = traceparent
        self.tracestate = tracestate
        self.session_pool = session_pool
        self.batch_inputs = list(batch_inputs)
        self.batch_config: Dict[str, Any] = dict(batch_config or {})
        self.priority = priority
        self.request_id = request_id
        self.outputs = outputs

    def __repr__(self) -> str:
        return "BatchInferenceRequest(session_pool=%r, items=%d, batch_config=%r)" % (
            self.session_pool, len(self.batch_inputs), self.batch_config)


def trace_parameters(request: Union[InferenceRequest, BatchInferenceRequest],
                     params: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
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


def sequence_parameters(sequence_id: Union[int, str, None], start: bool = False,
                        end: bool = False) -> Dict[str, Any]:
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


class SequenceBase:
    """What both clients' Sequence objects keep: the pool, the sequence id,
    the options of each request, and whether the sequence has started."""

    def __init__(self, session_pool: str, sequence_id: Union[int, str],
                 request_options: Dict[str, Any]) -> None:
        sequence_parameters(sequence_id)  # checks the id now
        self.session_pool = session_pool
        self.sequence_id = sequence_id
        self.request_options = request_options
        self.started = False

    def _request(self, inputs: P.Tensors, end: bool) -> InferenceRequest:
        """The sequence's next request (the first one starts it)."""
        return InferenceRequest(self.session_pool, inputs, sequence_id=self.sequence_id,
                                sequence_start=not self.started, sequence_end=end,
                                **self.request_options)

    def __repr__(self) -> str:
        return "Sequence(%r, %r, started=%r)" % (self.session_pool, self.sequence_id, self.started)


def check_request_id(rid: Any) -> int:
    if isinstance(rid, bool) or not isinstance(rid, int) or not 0 <= rid <= P.MAX_U64:
        raise InvalidArgumentError("request_id must be an integer in 0..2**64-1, not %r"
                                   % (rid,))
    return rid


def encode_infer(request: InferenceRequest,
                 by_reference: Optional[Callable[[Any], Any]] = None) -> List[P.Buffer]:
    """Checks ``request`` and encodes its INFER_REQUEST payload (as parts).
    ``by_reference`` turns an input living in shared memory into a
    reference. Raises InvalidArgumentError for what the server would refuse
    or the protocol cannot carry."""
    if not isinstance(request, InferenceRequest):
        raise InvalidArgumentError("infer expects an InferenceRequest, not %s"
                                   % type(request).__name__)
    params: Optional[Dict[str, Any]] = None
    if request.pipeline_config is not None:
        if not isinstance(request.pipeline_config, dict):
            raise InvalidArgumentError("pipeline_config must be a dict, not %s"
                                       % type(request.pipeline_config).__name__)
        params = {"pipeline_config": request.pipeline_config}
    seq = sequence_parameters(request.sequence_id, request.sequence_start, request.sequence_end)
    if seq:
        params = dict(params or {}, **seq)
    key = request.idempotency_key
    if key is not None:
        if not isinstance(key, str) or not key or len(key.encode("utf-8")) > 1024:
            raise InvalidArgumentError("idempotency_key must be a string of 1 to 1024 bytes, "
                                       "not %r" % (key,))
        params = dict(params or {}, idempotency_key=key)
    params = trace_parameters(request, params)
    inputs = request.inputs
    if by_reference is not None and inputs:
        inputs = [(k, by_reference(v)) for k, v in P._items(inputs)]
    try:
        parts = P.encode_infer_request_parts(request.session_pool, inputs,
                                             priority=request.priority,
                                             timeout_ms=request.timeout_ms,
                                             outputs=request.outputs, parameters=params)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(str(e)) from None
    if request.request_id is not None:
        check_request_id(request.request_id)
    return parts


def input_ranks(pools: Iterable[Mapping[str, Any]], pool: str) -> Optional[Ranks]:
    """The ranks of ``pool``'s inputs from a pools list (None: not served);
    "model:version" names one version of a repository model."""
    name, _, version = pool.partition(":")
    for p in pools:
        if p["name"] == name and (p.get("version") == version if version
                                  else p.get("default", True)):
            return {i["name"]: (len(i["shape"]) if i.get("shape") is not None else None)
                    for i in p.get("inputs", [])}
    return None


def _stack_items(request: BatchInferenceRequest,
                 ranks: Ranks) -> Tuple[Dict[str, npt.NDArray[Any]], List[int]]:
    items: List[Dict[str, npt.NDArray[Any]]] = []
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
    rows: List[int] = []
    stacked: Dict[str, npt.NDArray[Any]] = {}
    for it in items:
        if set(it) != set(items[0]):
            raise InvalidArgumentError("every item needs the same inputs: %s vs %s"
                                       % (sorted(items[0]), sorted(it)))
        n: Optional[int] = None
        for name, arr in it.items():
            rank = ranks.get(name)
            k = 1 if rank is not None and arr.ndim == rank - 1 else (
                arr.shape[0] if arr.ndim else None)
            if k is None or (n is not None and k != n):
                raise InvalidArgumentError(
                    "item inputs must share dim 0 (the rows of the item); %r has shape %s"
                    % (name, list(arr.shape)))
            n = k
        assert n is not None  # every item has at least one input
        rows.append(n)
    for name in items[0]:
        parts = []
        for it in items:
            arr = it[name]
            rank = ranks.get(name)
            parts.append(arr[np.newaxis] if rank is not None and arr.ndim == rank - 1 else arr)
        stacked[name] = np.concatenate(parts, axis=0)
    return stacked, rows


def encode_batch(request: BatchInferenceRequest,
                 ranks: Ranks) -> Tuple[List[P.Buffer], List[int]]:
    """Checks a BatchInferenceRequest, stacks its items (``ranks``: the
    pool's input ranks) and encodes its BATCH_INFER_REQUEST payload; returns
    (parts, rows of each item)."""
    cfg = request.batch_config
    unknown = set(cfg) - {"max_batch_size", "timeout_ms", "padding_strategy"}
    if unknown:
        raise InvalidArgumentError("unknown batch_config keys %s; expected max_batch_size, "
                                   "timeout_ms, padding_strategy" % sorted(unknown))
    stacked, rows = _stack_items(request, ranks)
    params = trace_parameters(
        request, {"batch_timeout_ms": cfg["timeout_ms"]} if cfg.get("timeout_ms") else None)
    try:
        parts = P.encode_batch_infer_request_parts(
            request.session_pool, stacked, max_batch_size=cfg.get("max_batch_size", 0) or 0,
            padding=cfg.get("padding_strategy", "none") or "none",
            priority=request.priority, outputs=request.outputs, parameters=params)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(str(e)) from None
    if request.request_id is not None:
        check_request_id(request.request_id)
    return parts, rows


def check_batch_request(request: Any) -> BatchInferenceRequest:
    if not isinstance(request, BatchInferenceRequest):
        raise InvalidArgumentError("batch_infer expects a BatchInferenceRequest, not %s"
                                   % type(request).__name__)
    return request


def admin_payload(action: str, pool: Optional[str], **fields: Any) -> bytes:
    """ADMIN_REQUEST payload: the JSON object {"action", "pool", ...fields}."""
    return json.dumps(dict(fields, action=action, pool=pool)).encode("utf-8")


def update_pool_fields(pool_size: Optional[int], max_memory_mb: Optional[int],
                       max_compute_percent: Optional[int]) -> Dict[str, int]:
    return {k: v for k, v in (("pool_size", pool_size), ("max_memory_mb", max_memory_mb),
                              ("max_compute_percent", max_compute_percent)) if v is not None}


def repo_payload(action: str, model: Optional[str] = None, **extra: Any) -> bytes:
    """REPO_REQUEST payload; a model name or load config of the wrong type
    raises InvalidArgumentError."""
    if model is not None and not isinstance(model, str):
        raise InvalidArgumentError("model name must be a str, not %s" % type(model).__name__)
    config = extra.get("config")
    if config is not None and not isinstance(config, (str, dict)):
        raise InvalidArgumentError("config must be a dict or JSON text, not %s"
                                   % type(config).__name__)
    return P.encode_repo_request(action, model, **extra)


# ---------------------------------------------------------------------------
# responses

class StageOutputs(Dict[str, Any]):
    """One pipeline stage's outputs: a dict name -> array that also reads
    them as attributes (``stage_outputs["det"].boxes``). ``predictions`` is a
    classification stage's top-k as a list per row of (label, score) pairs:
    from its ``labels``/``scores`` outputs, else a topk stage's ``labels``
    (with ``labels_file``) or ``indices``, with its ``values``, else the 5 best of its only [N, classes] float
    output as (class index, score)."""

    __slots__ = ()
    TOP_K = 5

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            if name == "predictions":
                return self._predictions()
            raise AttributeError("stage has no output %r (it has: %s)"
                                 % (name, ", ".join(sorted(self)) or "none")) from None

    def _predictions(self) -> List[List[Tuple[Any, float]]]:
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

    def __init__(self, outputs: Mapping[str, Any], latency_ms: float, request_id: int,
                 timings: Dict[str, int], session_pool: Optional[str] = None,
                 message: str = "", replayed: bool = False) -> None:
        self.replayed = replayed
        # A pipeline answers with "<stage>/<output>" tensors and a JSON story of
        # its stages in the message: split them out (seed 000's stage_outputs).
        self.outputs: Any = {k: v for k, v in outputs.items() if "/" not in k}
        self.stage_outputs: Dict[str, StageOutputs] = {}
        for k, v in outputs.items():
            if "/" in k:
                stage, out = k.split("/", 1)
                self.stage_outputs.setdefault(stage, StageOutputs())[out] = v
        self.stages: Dict[str, Any] = {}
        self.early_exit: Any = None
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

    def __getitem__(self, name: str) -> Any:
        return self.outputs[name]

    def __repr__(self) -> str:
        shapes = ", ".join("%s%s" % (k, list(v.shape)) for k, v in self.outputs.items())
        return "InferenceResponse(request_id=%r, outputs={%s}, latency_ms=%.3f)" % (
            self.request_id, shapes, self.latency_ms)


class BatchOutputs(List[Dict[str, Any]]):
    """A batch's results: one dict name -> array per input item, in input
    order (``len()`` is the number of items); indexed by an output name it
    is that output with every item's rows stacked in order."""

    __slots__ = ("by_name",)

    def __init__(self, items: Iterable[Dict[str, Any]], by_name: Dict[str, Any]) -> None:
        super().__init__(items)
        self.by_name = by_name

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return self.by_name[key]
        return list.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.by_name if isinstance(key, str) else list.__contains__(self, key)

    def keys(self) -> Any:
        return self.by_name.keys()

    def items(self) -> Any:
        return self.by_name.items()


class BatchInferenceResponse(InferenceResponse):
    """The answer to a BatchInferenceRequest: ``outputs[i]`` is item i's
    dict name -> array (``len(outputs)`` items), ``outputs["name"]`` every
    item's rows of that output in input order; ``batch_outputs`` is the list
    of items' dicts."""

    __slots__ = ("batch_outputs",)

    def __init__(self, inner: InferenceResponse, rows: Iterable[int]) -> None:
        super().__init__(inner.outputs, inner.latency_ms, inner.request_id, inner.timings,
                         inner.session_pool)
        self.batch_outputs: List[Dict[str, Any]] = []
        start = 0
        for n in rows:
            self.batch_outputs.append({k: v[start:start + n] for k, v in inner.outputs.items()})
            start += n
        self.outputs = BatchOutputs(self.batch_outputs, inner.outputs)


# ---------------------------------------------------------------------------
# answers

def decode_infer_answer(msg_type: int, request_id: int, payload: P.Buffer, latency_ms: float,
                        pool: Optional[str],
                        region_view: Optional[Callable[[P.SharedOutput], Any]] = None,
                        postprocess: Optional[Postprocess] = None) -> InferenceResponse:
    """The InferenceResponse an INFER_RESPONSE frame carries. Raises the
    SipError of a failed request, ProtocolError for a frame that does not
    parse (or a shared memory output ``region_view`` cannot map: it returns
    None for a region the client does not hold), and whatever the pool's
    post-process hook raises."""
    if msg_type != P.INFER_RESPONSE:
        raise P.ProtocolError("expected INFER_RESPONSE, got type %d" % msg_type)
    m = P.decode_infer_response(payload)
    if m.code != 0:
        e = sip_error_from_code(m.code, m.message)
        e.request_id = request_id
        raise e
    for name, v in m.outputs.items():
        if isinstance(v, P.SharedOutput):
            view = region_view(v) if region_view is not None else None
            if view is None:
                raise P.ProtocolError("output %r was written to shared memory region %r, "
                                      "which this client does not hold" % (name, v.region))
            m.outputs[name] = view
    timings = {"queue_us": m.queue_us, "compute_us": m.compute_us, "total_us": m.total_us}
    resp = InferenceResponse(m.outputs, latency_ms, request_id, timings, pool, m.message,
                             m.replayed)
    if postprocess is not None:
        fn, config = postprocess
        resp.outputs = fn(resp.outputs, config)
    return resp


def decode_info_answer(msg_type: int, payload: P.Buffer) -> Any:
    """The parsed JSON of an INFO_RESPONSE frame (None when empty); raises
    the SipError it carries (its message from the JSON's "error") or
    ProtocolError."""
    if msg_type != P.INFO_RESPONSE:
        raise P.ProtocolError("expected INFO_RESPONSE, got type %d" % msg_type)
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
        raise sip_error_from_code(code, msg)
    return P.decode_info_response(payload)[1]


def error_frame(payload: P.Buffer) -> SipError:
    """The SipError of an ERROR frame (any ERROR ends the connection)."""
    return sip_error_from_code(*P.decode_error(payload, strict=False))
