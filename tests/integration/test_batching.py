"""Dynamic batching, cancel on disconnect and compute shares, against a real
sipd: batched results equal numpy (and the unbatched pool) under concurrent
clients; a client that hangs up has its queued requests cancelled, never
executed; two saturated pools share one execution slot by their
max_compute_percent, and a lone pool gets all of it."""

import threading
import time

import numpy as np

import models
import torch_pools
from cann_sip import InferenceRequest, protocol as P
from harness import raw_connect, wait_until as wait_for

F = np.float32


def builtin(name, pool_size=1, **kw):
    opts = kw.pop("backend_options", {})
    p = {"name": name, "backend": "builtin", "pool_size": pool_size}
    if opts:
        p["backend_options"] = opts
    p.update(kw)
    return p


def bucket_le(pool, bound):
    """Executions with at most `bound` rows (batch_sizes is cumulative)."""
    for b, n in pool["batch_sizes"]["buckets"]:
        if b == bound:
            return n
    raise AssertionError("no batch_sizes bucket %r in %r" % (bound, pool["batch_sizes"]))


# ---------------------------------------------------------------------------
# batched == unbatched == numpy

def test_batched_results_equal_unbatched(start_sipd, backend, model_dir, torch_model_dir):
    """On each backend (the `backend` fixture)."""
    srv = start_sipd([
        torch_pools.pool("addmul", backend, model_dir, torch_model_dir, pool_name="batched",
                          pool_size=1,
                          dynamic_batching={"max_batch_size": 16, "max_queue_delay_us": 4000}),
        torch_pools.pool("addmul", backend, model_dir, torch_model_dir, pool_name="plain",
                          pool_size=1),
    ])
    client = srv.client(timeout_s=30)
    threads, per_thread = 16, 12
    errors, rows_sent = [], [0] * threads

    def work(t):
        rng = np.random.default_rng(1000 + t)
        try:
            for i in range(per_thread):
                n = int(rng.integers(1, 4))
                lhs = rng.standard_normal((n, 4)).astype(F)
                rhs = rng.standard_normal((n, 4)).astype(F)
                want = models.addmul_ref(lhs, rhs)
                r = client.infer(InferenceRequest("batched", {"lhs": lhs, "rhs": rhs}))
                got = r.outputs["y"]
                assert got.shape == (n, 4), "thread %d request %d: shape %s, want %s" % (
                    t, i, got.shape, (n, 4))
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7,
                                           err_msg="thread %d request %d" % (t, i))
                if i % 4 == 0:  # the same request, alone on the unbatched pool
                    alone = client.infer(InferenceRequest("plain", {"lhs": lhs, "rhs": rhs}))
                    np.testing.assert_allclose(got, alone.outputs["y"], rtol=1e-6, atol=1e-7,
                                               err_msg="batched vs unbatched, thread %d" % t)
                rows_sent[t] += n
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "client threads did not finish"
    if errors:
        raise errors[0]

    st = srv.pool_status("batched", client)
    total = threads * per_thread
    assert st["requests"].get("OK", 0) == total
    assert st["stats"]["inference_count"] == total
    bs = st["batch_sizes"]
    assert bs["count"] == st["stats"]["execution_count"]
    assert bs["sum"] == sum(rows_sent), "every row sent ran exactly once, no padding"
    # Requests were merged: fewer executions than requests, and some
    # execution had more rows (> 4) than any single request (<= 3).
    assert st["stats"]["execution_count"] < total, bs
    assert bs["count"] - bucket_le(st, 4) > 0, bs
    assert srv.pool_status("plain", client)["batch_sizes"]["sum"] >= 1


# ---------------------------------------------------------------------------
# cancel on disconnect

def test_cancel_on_disconnect(start_sipd):
    srv = start_sipd([builtin("slow", backend_options={"delay_ms": 300, "shape": "-1"})])
    client = srv.client()
    sock = raw_connect(srv.unix_endpoint)
    try:
        for rid in range(1, 6):
            payload = P.encode_infer_request("slow", {"input": np.full(2, rid, F)})
            sock.sendall(P.encode_frame(P.INFER_REQUEST, rid, payload))
        # The first runs (300 ms), the other four wait in the queue.
        def first_running_rest_queued():
            st = srv.pool_status("slow", client)
            return st["sessions"][0]["state"] == "RUNNING" and st["queued_requests"] == 4
        wait_for(first_running_rest_queued, 20, "the first request to run, 4 queued")
        assert srv.pool_status("slow", client)["stats"]["inference_count"] == 0
    finally:
        sock.close()
    # The four queued requests are cancelled at once, before the first ends.
    wait_for(lambda: srv.pool_status("slow", client)["requests"].get("CANCELLED", 0) == 4, 20,
             "4 CANCELLED")
    st = srv.pool_status("slow", client)
    assert st["queued_requests"] == 0
    assert st["stats"]["inference_count"] == 0, "cancelled before the first one ended"
    # The running one finishes (its answer has nowhere to go); nothing else
    # runs. The server and other clients carry on: a later request, queued
    # behind any wrongly kept one (one session, first come first served),
    # runs once that would have.
    r = client.infer(InferenceRequest("slow", {"input": np.full(2, 9, F)}))
    np.testing.assert_array_equal(r.outputs["output"], np.full(2, 9, F))
    st = srv.pool_status("slow", client)
    assert st["sessions"][0]["inferences"] == 2, st["sessions"]
    assert st["stats"]["inference_count"] == 2
    assert st["stats"]["execution_count"] == 2
    assert st["requests"].get("CANCELLED", 0) == 4
    assert st["requests"].get("OK", 0) == 2
    srv.assert_alive()


# ---------------------------------------------------------------------------
# compute shares on one execution slot

class Load:
    """`threads` client threads sending to `pool` back to back until stopped."""

    def __init__(self, client, pool, threads):
        self.client, self.pool = client, pool
        self.stop = threading.Event()
        self.errors = []
        self.done = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self):
        x = np.ones(1, F)
        try:
            while not self.stop.is_set():
                self.client.infer(InferenceRequest(self.pool, {"input": x}))
                self.done += 1
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.errors.append(e)

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(30)
        assert not any(t.is_alive() for t in self.threads), "load threads did not stop"
        if self.errors:
            raise self.errors[0]


def compute_ns(client):
    return {p["name"]: p["compute_ns"] for p in client.status()["pools"]}


def test_compute_shares(start_sipd):
    # 20 ms executions: the hand-over of the slot between sessions (a
    # thread wake-up) stays small next to them, even on a loaded machine.
    opts = {"delay_ms": 20, "shape": "-1"}
    srv = start_sipd([
        builtin("quarter", pool_size=2, backend_options=opts,
                resource_quota={"max_compute_percent": 25}),
        builtin("rest", pool_size=2, backend_options=opts,
                resource_quota={"max_compute_percent": 75}),
    ], server={"execution_slots": 1})
    cq, cr, cs = srv.client(), srv.client(), srv.client()
    q = Load(cq, "quarter", 6).start()
    r = Load(cr, "rest", 6).start()
    try:
        # Both saturated: every session waits for the slot, requests queue.
        wait_for(lambda: all(srv.pool_status(n, cs)["queued_requests"] > 0
                             for n in ("quarter", "rest")), 20, "both pools to have a queue")
        before, t0 = compute_ns(cs), time.monotonic()
        time.sleep(3.0)  # not a wait: the window the shares are measured over
        after, t1 = compute_ns(cs), time.monotonic()
        dq = after["quarter"] - before["quarter"]
        dr = after["rest"] - before["rest"]
        share = 100.0 * dq / (dq + dr)
        assert 20.0 <= share <= 30.0, (
            "quarter used %.1f%% of the slot (%d ns vs %d ns); want 25 +- 5" % (share, dq, dr))
        # One slot: together they used (almost) all of it, never more.
        busy = (dq + dr) / ((t1 - t0) * 1e9)
        assert 0.5 <= busy <= 1.05, "the slot was busy %.0f%% of the time" % (100 * busy)

        # Alone, the 25% pool gets the whole slot: its quota is lent, not a cap.
        r.finish()  # every "rest" request has its answer: "rest" is idle from here
        wait_for(lambda: srv.pool_status("quarter", cs)["queued_requests"] > 0, 20,
                 "the lone pool to saturate the slot")
        before, t0 = compute_ns(cs), time.monotonic()
        time.sleep(1.0)  # not a wait: the window the lone pool's use is measured over
        after, t1 = compute_ns(cs), time.monotonic()
        alone = (after["quarter"] - before["quarter"]) / ((t1 - t0) * 1e9)
        assert alone >= 0.5, "a lone pool with a 25%% quota used %.0f%% of the slot" % (
            100 * alone)
        assert after["rest"] == before["rest"]
    finally:
        q.stop.set()
        r.stop.set()
    q.finish()
    r.finish()
