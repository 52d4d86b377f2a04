"""Autoscaling a pool's sessions (docs/elastic.md, "Autoscaling"): sessions
follow the load between min_sessions and max_sessions, go when idle after
the cooldown (all of them with min_sessions 0, and the next request brings
one back), stop at what the memory quota and budget hold, emit POOL_SCALED,
show in the status and /metrics, and never fail a request while they
change."""

import json
import re
import threading
import time

import numpy as np

import harness
import kserve as K
from cann_sip import InferenceRequest
from test_events import read_event, subscribe
from test_failover import pool, status_of

F = np.float32


def req(name, v):
    return InferenceRequest(name, {"input": np.full(3, v, F)})


def n_sessions(c, name):
    return len(status_of(c, name)["sessions"])


class Load:
    """`k` clients each sending requests back to back (each value checked
    against the identity it must come back as) until stopped."""

    def __init__(self, srv, name, k, pause_s=0.0):
        self.stop_ev = threading.Event()
        self.sent, self.bad, self.errors = [0] * k, [], []
        self.threads = [threading.Thread(target=self._run, args=(srv, name, i, pause_s), daemon=True)
                        for i in range(k)]
        for t in self.threads:
            t.start()

    def _run(self, srv, name, i, pause_s):
        c = srv.client()
        n = 0
        while not self.stop_ev.is_set():
            v = float(i * 100000 + n)
            try:
                out = c.infer(req(name, v))["output"]
                if out.tolist() != [v] * 3:
                    self.bad.append((v, out.tolist()))
            except Exception as e:  # counted: the test asserts there are none
                self.errors.append(repr(e))
            n += 1
            self.sent[i] = n
            if pause_s:
                self.stop_ev.wait(pause_s)
        c.close()

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in self.threads)
        return sum(self.sent)


def scaled_events(sub, until, timeout=20):
    """POOL_SCALED messages read from `sub` until one matches `until`."""
    sub.settimeout(timeout)
    got = []
    while True:
        e = read_event(sub)
        if e["event"] == "POOL_SCALED":
            got.append(e["message"])
            if re.search(until, e["message"]):
                return got


def auto(name, size, delay_ms, **autoscale):
    return pool(name, size, backend_options={"shape": "-1", "delay_ms": delay_ms},
                autoscale=autoscale)


def test_scale_up_under_load_then_down_when_idle(start_sipd):
    srv = start_sipd([auto("p", 1, 30, min_sessions=1, max_sessions=6, window_s=1,
                           cooldown_s=2)])
    c = srv.client()
    sub = subscribe(srv.endpoint, "p")
    load = Load(srv, "p", 6)
    try:
        harness.wait_until(lambda: n_sessions(c, "p") >= 4, timeout=30,
                           what=lambda: "p to grow to 4 sessions: %r" % status_of(c, "p")["autoscale"])
        msgs = scaled_events(sub, r"sessions \d+ -> [4-6] \(")
        assert msgs[0].startswith("sessions 1 -> ") and "(utilization)" in msgs[0], msgs
        st = status_of(c, "p")["autoscale"]
        assert st["scaled_up"] >= 1 and st["utilization"] > 0, st
        assert n_sessions(c, "p") <= 6
    finally:
        sent = load.stop()
    assert not load.errors and not load.bad, (load.errors[:3], load.bad[:3])
    st = status_of(c, "p")
    assert set(st["requests"]) == {"OK"} and st["requests"]["OK"] == sent, st["requests"]
    # Idle: back to min_sessions once the cooldown has passed.
    harness.wait_until(lambda: n_sessions(c, "p") == 1, timeout=30,
                       what=lambda: "p to shrink to 1: %r" % status_of(c, "p")["autoscale"])
    msgs = scaled_events(sub, r"-> 1 \(idle\)")
    assert re.fullmatch(r"sessions \d -> 1 \(idle\)", msgs[-1]), msgs
    st = status_of(c, "p")["autoscale"]
    assert st["scaled_down"] >= 1 and st["last_reason"] == "idle", st
    sub.close()


def test_cooldown_holds_sessions_of_an_idle_pool(start_sipd):
    # Started at 3 of 1..3 and idle: nothing goes until cooldown_s (4 s)
    # after the sessions were made.
    srv = start_sipd([auto("p", 3, 0, min_sessions=1, max_sessions=3, window_s=1, cooldown_s=4)])
    c = srv.client()
    t0 = time.monotonic()
    assert n_sessions(c, "p") == 3
    harness.wait_until(lambda: n_sessions(c, "p") == 1, timeout=30, what="p to shrink to 1")
    assert time.monotonic() - t0 >= 3.0  # the cooldown began a little before t0 (at load)


def test_scale_down_under_load_fails_nothing(start_sipd):
    # Two clients, each a 15 ms execution then a 20 ms pause: under one
    # session busy, a utilisation near 0.2 of 4, so the pool shrinks to 2
    # or 1 while the requests keep coming and queue.
    srv = start_sipd([auto("p", 4, 15, min_sessions=1, max_sessions=4, window_s=1, cooldown_s=1)])
    c = srv.client()
    load = Load(srv, "p", 2, pause_s=0.02)
    try:
        harness.wait_until(lambda: n_sessions(c, "p") <= 2, timeout=30,
                           what=lambda: "p to shrink under load: %r" % status_of(c, "p")["autoscale"])
        before = sum(load.sent)
        harness.wait_until(lambda: sum(load.sent) >= before + 20, what="20 more requests")
    finally:
        sent = load.stop()
    assert not load.errors and not load.bad, (load.errors[:3], load.bad[:3])
    st = status_of(c, "p")
    assert st["requests"] == {"OK": sent}, st["requests"]
    assert st["autoscale"]["scaled_down"] >= 1


def test_min_zero_releases_every_session_and_the_next_request_brings_one(start_sipd):
    # A 3 s window: the subscription (which replays nothing) is in place
    # before the idle pool can be scaled down (under the sanitizers, a 1 s
    # one was once over before it).
    srv = start_sipd([pool("p", 2, backend_options={"shape": "-1", "session_memory_mb": 8},
                           autoscale={"min_sessions": 0, "max_sessions": 2, "window_s": 3,
                                      "cooldown_s": 1})])
    c = srv.client()
    sub = subscribe(srv.endpoint, "p")
    assert n_sessions(c, "p") == 2, "scaled down before the subscription: the event is lost"
    held = status_of(c, "p")["memory_bytes"]
    assert status_of(c, "p")["session_memory_bytes"] >= 7 << 20
    harness.wait_until(lambda: n_sessions(c, "p") == 0, timeout=30, what="p to release its sessions")
    msgs = scaled_events(sub, r"-> 0 \(idle\)")
    assert msgs[-1] == "sessions 2 -> 0 (idle)", msgs
    st = status_of(c, "p")
    assert st["state"] == "READY" and st["active_sessions"] == 0
    # What the two sessions were measured to hold is given back.
    assert st["memory_bytes"] <= held - (14 << 20), (held, st["memory_bytes"])
    # The next request is answered, by a session started for it.
    out = c.infer(req("p", 4.5))["output"]
    assert out.tolist() == [4.5] * 3
    assert n_sessions(c, "p") == 1
    msgs = scaled_events(sub, r"0 -> 1 \(wake\)")
    assert msgs[-1] == "sessions 0 -> 1 (wake)", msgs
    assert status_of(c, "p")["requests"] == {"OK": 1}
    sub.close()


def test_memory_quota_and_budget_cap_a_scale_up(start_sipd):
    # Each session holds 16 MiB: the quota (40 MiB) holds two sessions of
    # p; the budget (72 MiB) holds q's model and about three sessions.
    opts = {"shape": "-1", "delay_ms": 40, "session_memory_mb": 16}
    srv = start_sipd([pool("p", 1, backend_options=opts, resource_quota={"max_memory_mb": 40},
                           autoscale={"max_sessions": 6, "window_s": 1, "cooldown_s": 60}),
                      pool("q", 1, backend_options=opts,
                           autoscale={"max_sessions": 6, "window_s": 1, "cooldown_s": 60})],
                     server={"memory_budget_mb": 88})
    c = srv.client()
    sub_p, sub_q = subscribe(srv.endpoint, "p"), subscribe(srv.endpoint, "q")
    load_p = Load(srv, "p", 6)
    try:
        msgs = scaled_events(sub_p, r"capped at \d+ by resource_quota\.max_memory_mb")
        assert n_sessions(c, "p") == 2, msgs
        st = status_of(c, "p")
        assert st["memory_bytes"] <= 40 << 20
        # The event goes out from the resize; the autoscaler counts the
        # capped episode just after it.
        harness.wait_until(lambda: status_of(c, "p")["autoscale"]["capped"] >= 1, timeout=10,
                           what="p's capped count")
    finally:
        load_p.stop()
    load_q = Load(srv, "q", 6)
    try:
        msgs = scaled_events(sub_q, r"capped at \d+ by server\.memory_budget_mb")
        models = sum(status_of(c, n)["memory_bytes"] for n in ("p", "q"))
        assert models <= 88 << 20, models
        assert 2 <= n_sessions(c, "q") < 6, msgs
    finally:
        load_q.stop()
    assert not load_p.errors and not load_q.errors, (load_p.errors[:3], load_q.errors[:3])
    sub_p.close()
    sub_q.close()


def test_status_and_metrics(start_sipd):
    srv = start_sipd([auto("p", 1, 5, min_sessions=1, max_sessions=3, window_s=2, cooldown_s=60,
                           predictive=True, history_window_s=10, prediction_horizon_s=2,
                           target_p99_ms=500)],
                     server={"http": "127.0.0.1:0"})
    c = srv.client()
    load = Load(srv, "p", 2, pause_s=0.01)
    try:
        harness.wait_until(
            lambda: status_of(c, "p")["autoscale"].get("forecast_error", -1) >= 0, timeout=30,
            what=lambda: "a checked forecast: %r" % status_of(c, "p")["autoscale"])
    finally:
        load.stop()
    st = status_of(c, "p")["autoscale"]
    for k, v in {"min_sessions": 1, "max_sessions": 3, "scale_up_threshold": 0.85,
                 "scale_down_threshold": 0.3, "cooldown_s": 60, "window_s": 2,
                 "predictive": True, "history_window_s": 10, "prediction_horizon_s": 2,
                 "target_p99_ms": 500}.items():
        assert st[k] == v, (k, st)
    assert st["forecast_rps"] > 0 and st["service_ms"] > 0, st
    doc = json.loads(K.get(K.http_base(srv) + "/v2/status").body)
    http_st = next(q for q in doc["pools"] if q["name"] == "p")["autoscale"]
    assert http_st["max_sessions"] == 3 and http_st["predictive"] is True, http_st
    text = K.get(K.http_base(srv) + "/metrics").body.decode()
    lab = 'pool="p",version=""'
    for fam in ("sip_autoscale_utilization", "sip_autoscale_forecast_rps",
                "sip_autoscale_forecast_error", "sip_autoscale_p99_seconds"):
        m = re.search(r"^%s\{%s\} (\S+)$" % (fam, re.escape(lab)), text, re.M)
        assert m, (fam, text[:2000])
    assert re.search(r'^sip_pool_scaled_total\{%s,direction="up"\} \d+$' % re.escape(lab), text, re.M)
    assert re.search(r'^sip_autoscale_sessions\{%s,bound="max"\} 3$' % re.escape(lab), text, re.M)


def test_a_pool_with_no_session_gets_one_back_when_the_budget_has_no_room(start_sipd):
    # p releases both its sessions (16 MiB each); the pinned pool "hog"
    # keeps the budget (40 MiB) full, so the room left is less than one
    # session. A request to p still gets a session, and an answer: its
    # requests would otherwise wait for ever (a pool with requests queued
    # is never evicted to make the room).
    opts = {"shape": "-1", "session_memory_mb": 16}
    srv = start_sipd([pool("p", 2, backend_options=opts,
                           autoscale={"min_sessions": 0, "max_sessions": 2, "window_s": 1,
                                      "cooldown_s": 1}),
                      pool("hog", 2, backend_options=opts)],
                     server={"memory_budget_mb": 40})
    c = srv.client()
    sub = subscribe(srv.endpoint, "p")
    harness.wait_until(lambda: n_sessions(c, "p") == 0, timeout=30, what="p to release its sessions")
    assert status_of(c, "hog")["memory_bytes"] >= 30 << 20
    out = c.infer(InferenceRequest("p", {"input": np.full(3, 2.5, F)}, timeout_ms=20000))["output"]
    assert out.tolist() == [2.5] * 3
    msgs = scaled_events(sub, r"0 -> 1 \(wake\)")
    assert msgs[-1].startswith("sessions 0 -> 1 (wake)"), msgs
    assert n_sessions(c, "p") == 1
    sub.close()
