"""The KServe v2 HTTP/REST front-end where a test needs a server of its own
(or this module's small one): request priority and timeout parameters, the
body size limit, no HTTP thread held while requests wait, readiness while
draining and while loading, a full queue's 429, cann_sip.MetricsCollector,
and Triton's log and trace settings. test_http.py has the rest."""

import json
import shutil
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

from cann_sip import InferenceRequest, MetricsCollector
from harness import SipServer, serve, wait_until
import kserve as K
from test_http import error_of, raw_post

CURL = shutil.which("curl")


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    pools = [{"name": "addmul", "model_path": str(model_dir["addmul"])},
             {"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,4"}}]
    with serve(tmp_path_factory.mktemp("http_serving"), pools,
               server={"http": "127.0.0.1:0"}) as s:
        s.http = K.http_base(s)
        yield s


@pytest.fixture(scope="module")
def base(srv):
    return srv.http


# ---------------------------------------------------------------------------
# request parameters, limits, threads, readiness, queue

def test_priority_and_timeout_parameters(sipd_bin, tmp_path):
    pools = [{"name": "slow", "backend": "builtin", "pool_size": 1,
              "backend_options": {"shape": "-1,4", "delay_ms": 500}}]
    with serve(tmp_path, pools, server={"http": "127.0.0.1:0"}) as s:
        base = K.http_base(s)
        x = np.ones((1, 4), np.float32)
        done, lock = [], threading.Lock()
        c = s.client()

        def send(tag, params):
            r = K.infer(base, "slow", {"input": x}, params=params)
            with lock:
                done.append((tag, r.status))

        blocker = threading.Thread(target=send, args=("blocker", None))
        blocker.start()
        # the blocker is running; the rest queue behind it
        wait_until(lambda: s.pool_status("slow", c)["sessions"][0]["state"] == "RUNNING",
                   what="the blocker to run")
        # A deadline shorter than the wait: 504 without running.
        t = time.monotonic()
        msg = error_of(K.infer(base, "slow", {"input": x}, params={"timeout": 50000}), 504)
        assert "timeout of 50 ms" in msg and time.monotonic() - t < 0.25
        lows = [threading.Thread(target=send, args=("low%d" % i, {"priority": 9}))
                for i in range(2)]
        for th in lows:
            th.start()
        wait_until(lambda: s.pool_status("slow", c)["queued_requests"] == 2,
                   what="the two low-priority requests to queue")
        high = threading.Thread(target=send, args=("high", {"priority": 1}))
        high.start()
        for th in [blocker, high] + lows:
            th.join(10)
        tags = [t for t, st in done if st == 200]
        assert tags[0] == "blocker" and tags[1] == "high", done
        assert len(tags) == 4
        error_of(K.infer(base, "slow", {"input": x}, params={"priority": -1}), 400)
        error_of(K.infer(base, "slow", {"input": x}, params={"timeout": "soon"}), 400)


def test_body_size_limit(sipd_bin, tmp_path):
    limit = 4096
    pools = [{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,4"}}]
    with serve(tmp_path, pools, server={"http": "127.0.0.1:0", "http_max_body_bytes": limit}) as s:
        base = K.http_base(s)
        doc = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                      "data": [1, 2, 3, 4]}]}).encode()
        at_limit = doc + b" " * (limit - len(doc))  # trailing whitespace is valid JSON
        assert len(at_limit) == limit
        r = raw_post(base, "/v2/models/echo/infer", at_limit)
        assert r.status == 200, r
        msg = error_of(raw_post(base, "/v2/models/echo/infer", at_limit + b" "), 413)
        assert "4097 bytes" in msg and "4096" in msg
        # Refused on the header alone: a client announcing a huge body gets 413
        # without sending it.
        with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), 10) as c:
            c.sendall(b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 1000000000\r\n\r\n")
            c.settimeout(10)
            head = c.recv(4096)
        assert head.startswith(b"HTTP/1.1 413"), head
        if CURL:
            out = subprocess.run([CURL, "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                  "-H", "Content-Type: application/json", "--data-binary", "@-",
                                  base + "/v2/models/echo/infer"], input=at_limit + b"x",
                                 capture_output=True, timeout=30)
            assert out.stdout == b"413", out
        # The server is fine afterwards.
        assert raw_post(base, "/v2/models/echo/infer", doc).status == 200


def test_no_http_thread_held_while_waiting(sipd_bin, tmp_path):
    pools = [{"name": "slow", "backend": "builtin", "pool_size": 4,
              "backend_options": {"shape": "-1,4", "delay_ms": 600}}]
    with serve(tmp_path, pools, server={"http": "127.0.0.1:0", "http_threads": 1}) as s:
        base = K.http_base(s)
        x = np.ones((1, 4), np.float32)
        statuses = []
        threads = [threading.Thread(target=lambda: statuses.append(
            K.infer(base, "slow", {"input": x}).status)) for _ in range(4)]
        c = s.client()
        t0 = time.monotonic()
        for t in threads:
            t.start()
        # every request is in, and some run (as many as execution slots allow)
        wait_until(lambda: c.status()["connections"]["http"] == 4 and "RUNNING" in [
            x["state"] for x in s.pool_status("slow", c)["sessions"]],
            what="four HTTP connections and a request running")
        # One HTTP thread, four requests waiting on it: it still answers.
        t1 = time.monotonic()
        assert K.get(base + "/v2/health/live").status == 200
        assert time.monotonic() - t1 < 0.3
        for t in threads:
            t.join(10)
        assert statuses == [200] * 4
        assert time.monotonic() - t0 < 1.5  # ran concurrently, not one after another


def test_drain_ready_503_while_in_flight_completes(sipd_bin, tmp_path):
    pools = [{"name": "slow", "backend": "builtin", "pool_size": 1,
              "backend_options": {"shape": "-1,4", "delay_ms": 1500}}]
    s = SipServer(tmp_path, pools, server={"http": "127.0.0.1:0"})
    s.start()
    try:
        base = K.http_base(s)
        x = np.ones((1, 4), np.float32)
        result = {}
        t = threading.Thread(target=lambda: result.update(r=K.infer(base, "slow", {"input": x})))
        c = s.client()
        t.start()
        wait_until(lambda: s.pool_status("slow", c)["sessions"][0]["state"] == "RUNNING",
                   what="the request to run")
        s.send_signal(signal.SIGTERM)
        # the signal is handled: not ready any more (the request still runs)
        wait_until(lambda: K.get(base + "/v2/health/ready").status == 503,
                   what="/v2/health/ready to answer 503 after SIGTERM")
        msg = error_of(K.get(base + "/v2/health/ready"), 503)
        assert "draining" in msg
        assert K.get(base + "/v2/health/live").status == 200
        t.join(10)
        assert result["r"].status == 200, result
        np.testing.assert_array_equal(K.decode_outputs(result["r"])[1]["output"], x)
        assert s.wait() == 0
    finally:
        s.kill()


def test_ready_503_while_loading_then_200(sipd_bin, tmp_path):
    """Issue 3: /v2/health/ready is 503 while a pool loads, the model's ready
    is 503 too, and both turn 200 once it has loaded."""
    pools = [{"name": "slow_load", "backend": "builtin",
              "backend_options": {"shape": "-1,4", "load_delay_ms": 1500}}]
    s = SipServer(tmp_path, pools, server={"http": "127.0.0.1:0"})
    s.start(until_ready=False)
    try:
        base = K.http_base(s)
        error_of(K.get(base + "/v2/health/ready"), 503)
        assert K.get(base + "/v2/health/live").status == 200
        assert "is not ready: it is LOADING" in error_of(
            K.get(base + "/v2/models/slow_load/ready"), 503)
        wait_until(lambda: K.get(base + "/v2/health/ready").status == 200,
                   what="/v2/health/ready to answer 200 once loaded")
        assert K.get(base + "/v2/models/slow_load/ready").status == 200
    finally:
        assert s.stop() == 0, s.log_tail()


def test_queue_full_is_429(sipd_bin, tmp_path):
    """Issue 3's status mapping: a full queue (queue.max_size) answers 429
    with the reason; the requests admitted still succeed."""
    pools = [{"name": "narrow", "backend": "builtin", "pool_size": 1,
              "backend_options": {"shape": "-1,4", "delay_ms": 800},
              "queue": {"max_size": 1}}]
    s = SipServer(tmp_path, pools, server={"http": "127.0.0.1:0", "http_threads": 4})
    s.start()
    try:
        base = K.http_base(s)
        x = np.ones((1, 4), np.float32)
        replies = [None] * 4
        threads = [threading.Thread(target=lambda i=i: replies.__setitem__(
            i, K.infer(base, "narrow", {"input": x}))) for i in range(4)]
        c = s.client()
        # One runs, one queues, the others find the queue full.
        threads[0].start()
        wait_until(lambda: s.pool_status("narrow", c)["sessions"][0]["state"] == "RUNNING",
                   what="the first request to run")
        threads[1].start()
        wait_until(lambda: s.pool_status("narrow", c)["queued_requests"] == 1,
                   what="the second request to queue")
        for t in threads[2:]:
            t.start()
        for t in threads:
            t.join(10)
        codes = sorted(r.status for r in replies)
        assert codes == [200, 200, 429, 429], replies
        for r in replies:
            if r.status == 429:
                assert "queue" in error_of(r, 429)
    finally:
        assert s.stop() == 0, s.log_tail()


# ---------------------------------------------------------------------------
# cann_sip.MetricsCollector

def test_metrics_collector(sipd_bin, tmp_path):
    pools = [{"name": "work", "backend": "builtin", "pool_size": 2,
              "backend_options": {"shape": "-1,4", "delay_ms": 20, "fail_every": 5}}]
    with serve(tmp_path, pools) as s, MetricsCollector(s.endpoint) as mc:
        c = s.client()
        x = np.ones((1, 4), np.float32)
        m = mc.collect()
        p = m.session_pools["work"]
        assert p.active_sessions == 2 and p.queued_requests == 0 and p.completed == 0
        assert p.avg_latency_ms == 0.0 and p.throughput_ratio == 0.0
        assert set(m.sessions) == {"work/0", "work/1"}
        futs = [c.infer_async(InferenceRequest("work", {"input": x})) for _ in range(20)]
        failed = 0
        for f in futs:
            try:
                f.result(30)
            except Exception:  # noqa: BLE001 - fail_every makes every 5th execution fail
                failed += 1
        m = mc.collect()
        p = m.session_pools["work"]
        assert failed == 4
        assert p.completed == 20 and p.error_count == 4 and p.requests["INTERNAL"] == 4
        assert 20 <= p.avg_latency_ms < 1000
        assert p.avg_latency_ms <= p.p99_latency_ms < 2000
        assert 0 < p.throughput_ratio <= 1.5, p
        assert sum(sm.error_count for sm in m.sessions.values()) == 4
        assert sum(sm.inferences for sm in m.sessions.values()) == 20
        assert all(sm.state == "READY" and sm.pool == "work" for sm in m.sessions.values())
        # An idle window: nothing completed, nothing achieved.
        m = mc.collect()
        p = m.session_pools["work"]
        assert p.completed == 0 and p.throughput_ratio == 0.0 and p.avg_latency_ms == 0.0
        assert m.sessions["work/0"].error_count + m.sessions["work/1"].error_count == 4


def test_metrics_collector_quantile():
    from cann_sip.metrics import _quantile_us
    inf = float("inf")
    bounds = [50.0, 100.0, 250.0, inf]
    assert _quantile_us(bounds, [0, 0, 0, 0], 0.99) == 0.0
    # 100 observations in (50, 100]: p99 interpolates inside that bucket.
    assert _quantile_us(bounds, [0, 100, 100, 100], 0.99) == pytest.approx(99.5)
    assert _quantile_us(bounds, [50, 100, 100, 100], 0.5) == pytest.approx(50.0)
    # Past the last finite bound: up to twice it, as the server interpolates.
    assert 250.0 < _quantile_us(bounds, [0, 0, 0, 10], 0.99) <= 500.0


# ---------------------------------------------------------------------------
# Triton's log and trace settings

def post_json(url, doc):
    return K.request("POST", url, body=json.dumps(doc).encode(),
                     headers={"Content-Type": "application/json"})


def test_log_settings_change_the_level_live(srv, base):
    doc = K.get(base + "/v2/logging").json()
    assert doc == {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
                   "log_verbose_level": 0, "log_format": "default"}
    r = post_json(base + "/v2/logging", {"log_verbose_level": 1})
    assert r.status == 200 and r.json()["log_verbose_level"] == 1
    # sipd says so in its log (a warning: seen whatever the level).
    wait_until(lambda: 'msg="log level changed" to=debug' in srv.log(),
               what=lambda: "sipd to log the change to debug:\n" + srv.log_tail())
    r = post_json(base + "/v2/logging", {"log_verbose_level": 0, "log_info": False})
    assert r.status == 200
    assert r.json() == {"log_file": "", "log_info": False, "log_warning": True, "log_error": True,
                        "log_verbose_level": 0, "log_format": "default"}
    for bad, frag in (({"log_error": False}, "always logs errors"),
                      ({"log_file": "/tmp/x"}, "logs to stderr"),
                      ({"log_info": "yes"}, "log_info is not a boolean"),
                      ({"log_verbose_level": -1}, "log_verbose_level"),
                      ({"colour": True}, "unknown log setting 'colour'")):
        assert frag in error_of(post_json(base + "/v2/logging", bad), 400)
    assert "not a JSON object" in error_of(
        K.request("POST", base + "/v2/logging", body=b"[1]"), 400)
    # Refused settings changed nothing; put the default back for the other tests.
    assert K.get(base + "/v2/logging").json()["log_info"] is False
    assert post_json(base + "/v2/logging", {"log_info": True}).status == 200
    r = K.request("PUT", base + "/v2/logging", body=b"{}")
    assert r.status == 405 and r.headers["allow"] == "GET, HEAD, POST"


def test_trace_settings_are_stored_per_model(base):
    default = {"trace_file": "", "trace_level": ["OFF"], "trace_rate": "1000",
               "trace_count": "-1", "log_frequency": "0", "trace_mode": "triton"}
    assert K.get(base + "/v2/trace/setting").json() == default
    r = post_json(base + "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"], "trace_rate": 50})
    assert r.status == 200
    glob = dict(default, trace_level=["TIMESTAMPS"], trace_rate="50")
    assert r.json() == glob and K.get(base + "/v2/trace/setting").json() == glob
    # A model's own settings override the global ones; null falls back.
    r = post_json(base + "/v2/models/addmul/trace/setting", {"trace_count": "10"})
    assert r.status == 200 and r.json() == dict(glob, trace_count="10")
    assert K.get(base + "/v2/models/addmul/trace/setting").json() == dict(glob, trace_count="10")
    assert K.get(base + "/v2/models/echo/trace/setting").json() == glob
    assert K.get(base + "/v2/trace/setting").json() == glob
    r = post_json(base + "/v2/models/addmul/trace/setting", {"trace_count": None})
    assert r.status == 200 and r.json() == glob
    # null clears only a setting that exists (found by fuzz_settings).
    assert "unknown trace setting 'sample'" in error_of(
        post_json(base + "/v2/models/addmul/trace/setting", {"sample": None}), 400)
    for bad, frag in (({"trace_level": ["LOUD"]}, "trace_level[0]"),
                      ({"trace_level": []}, "non-empty list"),
                      ({"trace_rate": "-3"}, "trace_rate is not a whole number"),
                      ({"trace_count": "x"}, "trace_count"),
                      ({"trace_mode": "udp"}, "trace_mode"),
                      ({"trace_rate": None}, "trace_rate"),
                      ({"sample": 1}, "unknown trace setting 'sample'")):
        assert frag in error_of(post_json(base + "/v2/trace/setting", bad), 400)
    # A refused body changes nothing, even its valid keys.
    assert "trace_mode" in error_of(post_json(base + "/v2/trace/setting",
                                              {"trace_rate": "7", "trace_mode": "udp"}), 400)
    assert K.get(base + "/v2/trace/setting").json() == glob
    assert "Request for unknown model: 'nope' is not found" in error_of(
        K.get(base + "/v2/models/nope/trace/setting"), 404)
    assert post_json(base + "/v2/trace/setting", {"trace_level": ["OFF"], "trace_rate": "1000"}
                     ).status == 200
