"""Pool and session metrics over the native protocol (seed 000's MetricsCollector).

    from cann_sip import MetricsCollector
    with MetricsCollector(endpoint="ipc:///tmp/sip_service.sock") as mc:
        m = mc.collect()
        pool = m.session_pools["image_classification"]
        pool.active_sessions, pool.queued_requests, pool.avg_latency_ms, pool.p99_latency_ms
        pool.throughput_ratio
        m.sessions["image_classification/0"].error_count

Everything comes from one status request (INFO_REQUEST kind 3, the same numbers as
``sip status`` and ``GET /metrics``). Rates and latencies describe a *window*: the
time between this collect() and the previous one on the same collector, or since
the server started for the first call.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Tuple

from .client import DEFAULT_ENDPOINT, SessionClient

__all__ = ["MetricsCollector", "MetricsSnapshot", "PoolMetrics", "SessionMetrics"]

# A pool's histograms at one collection: (uptime_s, total latency buckets,
# their sum in us, compute buckets, their sum in us).
_Window = Tuple[float, List[Tuple[float, int]], int, List[Tuple[float, int]], int]


def _buckets(hist: Optional[Mapping[str, Any]]) -> List[Tuple[float, int]]:
    """[(upper_bound_us or inf, cumulative count), ...] of a status histogram."""
    out = []
    for le, cum in (hist or {}).get("buckets", []):
        out.append((float("inf") if le == "+Inf" else float(le), int(cum)))
    return out


def _quantile_us(bounds: Sequence[float], cum: Sequence[int], q: float) -> float:
    """Quantile q (0..1) of a cumulative histogram by linear interpolation inside
    the bucket, as the server does (src/core/metrics.c); 0.0 when empty."""
    total = cum[-1] if cum else 0
    if total <= 0:
        return 0.0
    rank = q * total
    prev_cum, lo = 0, 0.0
    for le, c in zip(bounds, cum):
        n = c - prev_cum
        if n > 0 and c >= rank:
            hi = le if le != float("inf") else lo * 2
            return lo + (hi - lo) * (rank - prev_cum) / n
        prev_cum = c
        lo = le if le != float("inf") else lo
    return lo


class SessionMetrics:
    """One session: ``id`` ("pool/index"), ``pool``, ``state`` (INIT, READY, RUNNING,
    SUSPENDED, FAILED, DESTROYED), ``inferences`` and ``error_count`` (executions
    that failed), both counted since the server started."""

    def __init__(self, id: str, pool: str, state: Optional[str], inferences: int,
                 error_count: int) -> None:
        self.id = id
        self.pool = pool
        self.state = state
        self.inferences = inferences
        self.error_count = error_count

    def __repr__(self) -> str:
        return "SessionMetrics(id=%r, state=%s, inferences=%d, error_count=%d)" % (
            self.id, self.state, self.inferences, self.error_count)


class PoolMetrics:
    """One pool over the collection window.

    ``active_sessions``   sessions READY or RUNNING now.
    ``queued_requests``   requests waiting in the pool's queues now.
    ``completed``         requests answered after being queued, in the window.
    ``avg_latency_ms``    mean arrival-to-answer time of those (0.0 when none).
    ``p99_latency_ms``    their 99th percentile, interpolated in the server's latency
                          histogram buckets (0.0 when none).
    ``throughput_rps``    completed / window seconds.
    ``throughput_ratio``  achieved throughput over measured capacity:
                          throughput_rps / (active_sessions / mean compute time per
                          request), with the mean compute time measured in the window
                          (or since start when the window ran nothing). A session runs
                          one execution at a time, so this is the average fraction of
                          the active sessions kept busy: 0 idle, 1 saturated. Batching
                          can lift it above 1 (one execution serves several requests).
                          0.0 when there are no active sessions or nothing has run yet.
    ``requests``          answers by result code since start ({"OK": n, ...}).
    ``error_count``       answers other than OK since start.
    """

    name: str
    state: Optional[str]
    active_sessions: int
    queued_requests: int
    completed: int
    avg_latency_ms: float
    p99_latency_ms: float
    throughput_rps: float
    throughput_ratio: float
    mean_compute_ms: float
    requests: Dict[str, int]
    error_count: int
    window_s: float

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def __repr__(self) -> str:
        return ("PoolMetrics(name=%r, state=%s, active_sessions=%d, queued_requests=%d, "
                "avg_latency_ms=%.3f, p99_latency_ms=%.3f, throughput_ratio=%.3f)" % (
                    self.name, self.state, self.active_sessions, self.queued_requests,
                    self.avg_latency_ms, self.p99_latency_ms, self.throughput_ratio))


class MetricsSnapshot:
    """``session_pools``: {pool name: PoolMetrics}; ``sessions``: {session id:
    SessionMetrics}; ``interval_s``: the window's length; ``uptime_s``; ``timestamp``
    (time.time() of the collection)."""

    def __init__(self, session_pools: Dict[str, PoolMetrics], sessions: Dict[str, SessionMetrics],
                 interval_s: float, uptime_s: float, timestamp: float,
                 raw: Dict[str, Any]) -> None:
        self.session_pools = session_pools
        self.sessions = sessions
        self.interval_s = interval_s
        self.uptime_s = uptime_s
        self.timestamp = timestamp
        self.raw = raw  # the status JSON it was computed from

    def __repr__(self) -> str:
        return "MetricsSnapshot(pools=%s, sessions=%d, interval_s=%.3f)" % (
            sorted(self.session_pools), len(self.sessions), self.interval_s)


class MetricsCollector:
    """Collects pool and session metrics from a sipd over the native protocol.

    ``endpoint`` as for SessionClient (or pass ``client=`` to share one). Thread-safe
    only as far as calls are not interleaved: each collector keeps the previous
    snapshot to compute its window.
    """

    def __init__(self, endpoint: str = DEFAULT_ENDPOINT, timeout_s: float = 10,
                 client: Optional[SessionClient] = None,
                 token: Optional[str] = None) -> None:
        self._own = client is None
        self._client = client or SessionClient(endpoint, timeout_s=timeout_s, token=token)
        # pool name -> (uptime_s, total hist, its sum, compute hist, its sum)
        self._prev: Dict[str, _Window] = {}
        self._prev_uptime: Optional[float] = None

    def collect(self) -> MetricsSnapshot:
        status = self._client.status()
        uptime = float(status.get("uptime_s", 0.0))
        pools: Dict[str, PoolMetrics] = {}
        sessions: Dict[str, SessionMetrics] = {}
        prev: Dict[str, _Window] = {}
        for p in status.get("pools", []):
            name = p["name"]
            lat = p.get("latency_us", {})
            total, compute = _buckets(lat.get("total")), _buckets(lat.get("compute"))
            t_sum, c_sum = int(lat.get("total", {}).get("sum", 0)), int(lat.get("compute", {}).get("sum", 0))
            cur = (uptime, total, t_sum, compute, c_sum)
            prev[name] = cur
            last: Optional[_Window] = self._prev.get(name)
            # A restarted server (uptime or counts going backwards) starts a new window.
            if (last is None or last[0] > uptime or len(last[1]) != len(total)
                    or (total and last[1][-1][1] > total[-1][1])):
                last = (0.0, [(le, 0) for le, _ in total], 0, [(le, 0) for le, _ in compute], 0)
            window = max(uptime - last[0], 1e-9)
            bounds = [le for le, _ in total]
            d_cum = [c - lc for (_, c), (_, lc) in zip(total, last[1])]
            d_count = d_cum[-1] if d_cum else 0
            d_sum = t_sum - last[2]
            dc_count = (compute[-1][1] - last[3][-1][1]) if compute else 0
            dc_sum = c_sum - last[4]
            if dc_count > 0:
                mean_compute_s = dc_sum / dc_count / 1e6
            elif compute and compute[-1][1] > 0:
                mean_compute_s = c_sum / compute[-1][1] / 1e6
            else:
                mean_compute_s = 0.0
            active = int(p.get("active_sessions", 0))
            rps = d_count / window
            ratio = (rps * mean_compute_s / active) if active and mean_compute_s > 0 else 0.0
            codes = dict(p.get("requests", {}))
            pools[name] = PoolMetrics(
                name=name, state=p.get("state"), active_sessions=active,
                queued_requests=int(p.get("queued_requests", 0)), completed=d_count,
                avg_latency_ms=(d_sum / d_count / 1000.0) if d_count else 0.0,
                p99_latency_ms=_quantile_us(bounds, d_cum, 0.99) / 1000.0,
                throughput_rps=rps, throughput_ratio=ratio, mean_compute_ms=mean_compute_s * 1e3,
                requests=codes, error_count=sum(v for k, v in codes.items() if k != "OK"),
                window_s=window)
            for s in p.get("sessions", []):
                sessions[s["id"]] = SessionMetrics(s["id"], name, s.get("state"),
                                                   int(s.get("inferences", 0)),
                                                   int(s.get("errors", 0)))
        interval = uptime - (self._prev_uptime if self._prev_uptime is not None
                             and self._prev_uptime <= uptime else 0.0)
        self._prev, self._prev_uptime = prev, uptime
        return MetricsSnapshot(pools, sessions, interval, uptime, time.time(), status)

    def close(self) -> None:
        if self._own:
            self._client.close()

    def __enter__(self) -> MetricsCollector:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False
