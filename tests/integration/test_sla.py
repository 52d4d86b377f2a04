"""The SLA monitor of a real sipd (docs/sla.md): a builtin pool slowed past its
latency target (fault injection, kind slow) sends a warning, then a critical
alert, then a resolve once the slowdown stops, to a webhook receiver running
in the test (http.server on a thread), to the event stream (ALERT) and to the
log; failures count against availability and the client's own bad input does
not; a webhook that is down or answers 500 is retried and counted without
holding anything up; the status "sla" object and the sip_sla_* metrics."""

import json
import re
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

import harness
import kserve as K
from cann_sip import InferenceRequest, InvalidArgumentError, SessionCallback, SipError

F = np.float32
WAIT_S = 30  # the longest any expected alert may take on a loaded machine


class Receiver:
    """A webhook receiver: records every POST (path, content type, JSON body).
    The first `fail_first` POSTs are answered 500, later ones 200."""

    def __init__(self, fail_first=0):
        self.posts = []
        self.cv = threading.Condition()
        self.fail_first = fail_first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.cv:
                    outer.posts.append((self.path, self.headers.get("Content-Type"),
                                        json.loads(body)))
                    status = 500 if len(outer.posts) <= outer.fail_first else 200
                    outer.cv.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/hook" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self):
        with self.cv:
            return [p[2] for p in self.posts]

    def wait_for(self, pred, timeout=WAIT_S):
        with self.cv:
            ok = self.cv.wait_for(lambda: pred([p[2] for p in self.posts]), timeout)
        assert ok, "the receiver got %r" % self.bodies()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class SlaServer(harness.SipServer):
    """sipd with a top-level alerts block."""

    def __init__(self, workdir, pools, alerts, **kw):
        super().__init__(workdir, pools, **kw)
        self.alerts = alerts

    def config(self):
        c = super().config()
        c["alerts"] = self.alerts
        return c


@pytest.fixture
def start_sla(sipd_bin, tmp_path):
    started = []

    def start(pools, alerts, **kw):
        srv = SlaServer(tmp_path / ("sipd%d" % len(started)), pools, alerts, **kw)
        started.append(srv)
        srv.start()
        return srv

    yield start
    failures = harness.stop_all(started)
    assert not failures, "\n\n".join(failures)


def pool(name, sla, **kw):
    p = {"name": name, "backend": "builtin", "pool_size": 1,
         "backend_options": {"shape": "-1"}, "sla": sla}
    p.update(kw)
    return p


class Load:
    """One client sending requests back to back (a short pause between)
    from a thread, until stopped."""

    def __init__(self, client, pool_name, pause=0.005):
        self.client, self.pool, self.pause = client, pool_name, pause
        self.stop_ev = threading.Event()
        self.errors = []
        self.count = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        x = np.ones(4, F)
        while not self.stop_ev.is_set():
            try:
                self.client.infer(InferenceRequest(self.pool, {"input": x}))
            except SipError as e:
                self.errors.append(e)
            self.count += 1
            time.sleep(self.pause)  # not a wait: paces the load (a rate, not a flood)

    def stop(self):
        self.stop_ev.set()
        self.thread.join(30)


class Alerts(SessionCallback):
    def __init__(self):
        self.got = []

    def on_event(self, session_id, event, context):
        if event == "ALERT":
            self.got.append(context)


def sla_of(srv, name):
    if getattr(srv, "status_client", None) is None:
        srv.status_client = srv.client()
    return srv.pool_status(name, srv.status_client)["sla"]


def wait_until(pred, timeout=WAIT_S, what="condition"):
    return harness.wait_until(pred, timeout, what)


def windows_pass(srv, name, n):
    """Waits until `n` more of the pool's SLA windows have closed."""
    w0 = sla_of(srv, name)["windows"] or 0
    wait_until(lambda: (sla_of(srv, name)["windows"] or 0) >= w0 + n,
               what="%d more SLA windows of pool %s" % (n, name))


def metrics(srv):
    with urllib.request.urlopen(K.http_base(srv) + "/metrics", timeout=10) as r:
        return r.read().decode()


def sample(text, name, **labels):
    want = ",".join('%s="%s"' % kv for kv in labels.items())
    for line in text.splitlines():
        m = re.match(r'%s\{([^}]*)\} (\S+)$' % re.escape(name), line)
        if m and all(('%s="%s"' % kv) in m.group(1) for kv in labels.items()):
            return float(m.group(2))
    raise AssertionError("no sample %s{%s} in /metrics" % (name, want))


def test_slow_pool_warns_then_critical_then_resolves(start_sla):
    rx = Receiver()
    try:
        srv = start_sla(
            [pool("p", {"latency_p99_ms": 150, "window_s": 1}),
             pool("calm", {"latency_p99_ms": 1000, "window_s": 1})],
            {"warning_after": 1, "critical_after": 3, "resolve_after": 2,
             "webhooks": [rx.url], "timeout_ms": 5000, "retries": 2, "backoff_ms": 100},
            server={"allow_fault_injection": True, "http": "127.0.0.1:0"})
        c = srv.client()
        cb = Alerts()
        c.register_callbacks("p", cb)
        load = Load(srv.client(), "p")
        # Fast: windows close good. (A loaded machine may stall a request past
        # the target now and then: the test starts from a pool at level none
        # whose last window was good, and looks at what came after.)
        wait_until(lambda: (sla_of(srv, "p")["windows"] or 0) >= 2, what="two windows")
        wait_until(lambda: sla_of(srv, "p")["alert"]["level"] == "none" and
                   sla_of(srv, "p")["last_window"]["ok"], what="a good pool")
        n0, e0 = len(rx.bodies()), len(cb.got)

        c.admin("fault", "p", kind="slow", rate=1.0, delay_ms=300)
        rx.wait_for(lambda b: len(b) >= n0 + 2)  # warning, then critical
        c.admin("fault", "p", kind="none")
        rx.wait_for(lambda b: len(b) >= n0 + 3)  # resolved once fast again
        load.stop()
        assert not load.errors, load.errors[:3]
        windows_pass(srv, "p", 2)  # no further alert comes (the pool stays good)
        alerts = rx.bodies()[n0:]
        assert [(a["level"], a["state"]) for a in alerts] == [
            ("warning", "firing"), ("critical", "firing"), ("critical", "resolved")], alerts
        warn, crit, res = alerts
        assert all(a["pool"] == "p" and a["version"] is None for a in alerts)
        assert [a["previous_level"] for a in alerts] == ["none", "warning", "critical"]
        assert warn["time_us"] < crit["time_us"] < res["time_us"]
        assert [a["consecutive_windows"] for a in alerts] == [1, 3, 2]
        for a in (warn, crit):
            v, = a["violations"]
            assert v["metric"] == "latency_p99_ms" and v["target"] == 150
            assert 290 <= v["measured"] <= 2000, v  # the 300 ms delay, measured
            assert a["window"]["ok"] is False and a["window"]["p99_ms"] == v["measured"]
            assert a["reason"].startswith("p99 latency ") and "ms > 150 ms" in a["reason"]
        assert res["violations"] == [] and res["window"]["ok"] is True
        assert res["reason"] == "every target met for 2 consecutive windows"
        assert res["targets"] == {"latency_p99_ms": 150, "availability": None,
                                  "min_throughput_rps": None}
        assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", warn["time"])
        assert {p[0] for p in rx.posts} == {"/hook"}
        assert {p[1] for p in rx.posts} == {"application/json"}

        # The same alerts in the event stream, in order.
        wait_until(lambda: len(cb.got) >= e0 + 3, what="ALERT events")
        assert [(e["level"], e["state"], e["previous_level"]) for e in cb.got[e0:]] == [
            ("warning", "firing", "none"), ("critical", "firing", "warning"),
            ("critical", "resolved", "critical")]
        assert cb.got[e0]["reason"] == warn["reason"] and cb.got[e0]["pool"] == "p"

        # Status: resolved, compliance below 1, webhook counters.
        st = sla_of(srv, "p")
        assert st["alert"]["level"] == "none"
        assert st["alert"]["reason"] == res["reason"]
        assert st["alert"]["since_us"] == res["time_us"]
        assert 0 < st["compliance"] < 1
        n = n0 // 2  # alerts fired before (each resolved: a warning and its resolution)
        assert st["alerts_fired"] == {"warning": 1 + n, "critical": 1, "resolved": 1 + n}
        hooks = c.status()["alerts"]["webhooks"]
        assert hooks == [{"url": rx.url, "delivered": 3 + n0, "failed": 0, "dropped": 0,
                          "attempts": 3 + n0, "queued": 0}]
        # The pool that was never slow: no alert.
        assert sla_of(srv, "calm")["alerts_fired"] == {"warning": 0, "critical": 0,
                                                       "resolved": 0}

        text = metrics(srv)
        assert sample(text, "sip_sla_alerts_total", pool="p", level="warning") == 1 + n
        assert sample(text, "sip_sla_alerts_total", pool="p", level="critical") == 1
        assert sample(text, "sip_sla_alerts_resolved_total", pool="p") == 1 + n
        assert sample(text, "sip_sla_alert_level", pool="p") == 0
        assert 0 < sample(text, "sip_sla_compliance_ratio", pool="p") < 1
        assert sample(text, "sip_alert_webhook_deliveries_total", url=rx.url,
                      result="delivered") == 3 + n0
        # The page parses as Prometheus text, these families included.
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert fams["sip_sla_alerts"].type == "counter"
        assert fams["sip_sla_compliance_ratio"].type == "gauge"
        assert fams["sip_alert_webhook_deliveries"].type == "counter"

        # `sip status` shows it in a line.
        out = subprocess.run([str(harness.require_sipd().parent / "sip"), "-e", srv.endpoint,
                              "status"], capture_output=True, text=True, timeout=30).stdout
        line = next(l for l in out.splitlines() if l.startswith("  sla: window 1s"))
        assert re.match(r"  sla: window 1s, compliance \d+\.\d% \(\d+/\d+ windows\), last window "
                        r"ok( p99 \d+\.\d{3} ms availability 100\.00%)? \d+\.\d rps, alert none$", line), line

        log = srv.log()
        assert re.search(r'level=warn msg="sla alert" pool=p level=warning state=firing', log)
        assert re.search(r'level=error msg="sla alert" pool=p level=critical state=firing', log)
        assert re.search(r'level=info msg="sla alert" pool=p level=critical state=resolved', log)
    finally:
        rx.close()


def test_failures_count_and_bad_input_does_not(start_sla):
    """Availability: errors the server is to blame for (an injected
    execution error) miss the target; requests refused for their own bad
    input are left out."""
    rx = Receiver()
    try:
        srv = start_sla([pool("p", {"availability": "99%", "window_s": 1})],
                        {"warning_after": 1, "critical_after": 0, "resolve_after": 1,
                         "webhooks": [rx.url]},
                        server={"allow_fault_injection": True})
        c = srv.client()
        bad = InferenceRequest("p", {"input": np.ones((2, 2), F)})  # rank 2: refused
        ok = InferenceRequest("p", {"input": np.ones(4, F)})
        # Two windows of mostly bad input: no alert.
        t_end = time.monotonic() + 3
        refused = 0
        while time.monotonic() < t_end:
            with pytest.raises(InvalidArgumentError):
                c.infer(bad)
            refused += 1
            c.infer(ok)
            time.sleep(0.01)  # not a wait: paces the requests over the windows
        st = sla_of(srv, "p")
        assert st["last_window"]["excluded"] > 0 and st["last_window"]["failed"] == 0
        assert st["last_window"]["availability"] == 1.0 and st["last_window"]["ok"] is True
        assert rx.bodies() == []
        # Execution errors on 1 request in 2: availability ~50% misses 99%.
        c.admin("fault", "p", kind="error", rate=0.5)
        load = Load(srv.client(), "p")
        rx.wait_for(lambda b: len(b) >= 1)
        c.admin("fault", "p", kind="none")
        rx.wait_for(lambda b: len(b) >= 2)
        load.stop()
        warn, res = rx.bodies()[:2]
        assert (warn["level"], warn["state"], res["state"]) == ("warning", "firing", "resolved")
        v, = warn["violations"]
        assert v["metric"] == "availability" and v["target"] == 0.99 and v["measured"] < 0.99
        assert warn["window"]["failed"] > 0
        assert "availability" in warn["reason"] and "requests failed" in warn["reason"]
    finally:
        rx.close()


def test_webhook_retried_after_500(start_sla):
    """A receiver that answers 500 gets the alert again after backoff_ms."""
    rx = Receiver(fail_first=1)
    try:
        srv = start_sla([pool("p", {"min_throughput_rps": 1000000, "window_s": 1})],
                        {"warning_after": 1, "critical_after": 0, "webhooks": [rx.url],
                         "retries": 3, "backoff_ms": 200})
        rx.wait_for(lambda b: len(b) >= 2)
        a, b = rx.bodies()[:2]
        assert a == b and a["level"] == "warning"  # the same alert, delivered twice
        v, = a["violations"]
        assert v["metric"] == "min_throughput_rps" and v["measured"] == 0
        wait_until(lambda: srv.client().status()["alerts"]["webhooks"][0]["delivered"] == 1,
                   what="delivery")
        h = srv.client().status()["alerts"]["webhooks"][0]
        assert (h["attempts"], h["failed"], h["dropped"]) == (2, 0, 0)
    finally:
        rx.close()


def test_dead_webhook_is_retried_and_given_up(start_sla):
    """Nothing listens at the webhook: each attempt is refused, the alert is
    retried `retries` times, counted failed and logged; alerts still reach
    the event stream, and the server stops at once."""
    dead = "http://127.0.0.1:%d/hook" % harness.free_port()
    srv = start_sla([pool("p", {"min_throughput_rps": 1000000, "window_s": 1})],
                    {"warning_after": 1, "critical_after": 2, "webhooks": [dead],
                     "retries": 2, "backoff_ms": 50, "timeout_ms": 1000})
    c = srv.client()
    cb = Alerts()
    c.register_callbacks(None, cb)
    wait_until(lambda: c.status()["alerts"]["webhooks"][0]["failed"] >= 2, what="two failures")
    h = c.status()["alerts"]["webhooks"][0]
    assert h["url"] == dead and h["delivered"] == 0 and h["attempts"] >= 6
    assert [e["level"] for e in cb.got[:2]] == ["warning", "critical"]
    assert 'msg="alert webhook failed" url="%s" attempts=3' % dead in srv.log()
    t0 = time.monotonic()
    assert srv.stop() == 0
    assert time.monotonic() - t0 < 10


def test_status_and_metrics_keys(start_sla):
    srv = start_sla([pool("a", {"latency_p99_ms": 250, "availability": 0.995,
                                "min_throughput_rps": 0.5, "window_s": 1,
                                "horizon_windows": 10}),
                     {"name": "plain", "backend": "builtin", "pool_size": 1}],
                    {}, server={"http": "127.0.0.1:0"})
    c = srv.client()
    assert "sla" not in srv.pool_status("plain")
    st = sla_of(srv, "a")
    assert st["targets"] == {"latency_p99_ms": 250, "availability": 0.995,
                             "min_throughput_rps": 0.5}
    assert st["window_s"] == 1 and st["horizon_windows"] == 10
    # An idle window misses min_throughput_rps: a warning may already be on.
    assert st["alert"]["level"] in ("none", "warning")
    assert isinstance(st["alert"]["reason"], str) and isinstance(st["alert"]["since_us"], int)
    for _ in range(5):
        c.infer(InferenceRequest("a", {"input": np.ones(4, F)}))
    wait_until(lambda: sla_of(srv, "a")["last_window"] is not None, what="a window")
    lw = sla_of(srv, "a")["last_window"]
    assert set(lw) >= {"p99_ms", "availability", "throughput_rps", "ok", "requests",
                       "violations"}
    assert c.status()["alerts"] == {"warning_after": 1, "critical_after": 3, "resolve_after": 2,
                                    "sent": c.status()["alerts"]["sent"], "webhooks": []}
    # The same document over HTTP.
    with urllib.request.urlopen(K.http_base(srv) + "/v2/status", timeout=10) as r:
        doc = json.loads(r.read())
    a = next(p for p in doc["pools"] if p["name"] == "a")
    assert set(a["sla"]) >= {"targets", "window_s", "compliance", "last_window", "alert"}
    assert set(a["sla"]["alert"]) == {"level", "since_us", "reason"}
    assert "sla" not in next(p for p in doc["pools"] if p["name"] == "plain")
    assert doc["alerts"]["webhooks"] == []
    text = metrics(srv)
    for name in ("sip_sla_compliance_ratio", "sip_sla_window_ok", "sip_sla_alert_level",
                 "sip_sla_window_throughput_rps"):
        sample(text, name, pool="a")
        assert not re.search(r'^%s\{pool="plain"' % name, text, re.M)
    assert sample(text, "sip_sla_alerts_total", pool="a", level="critical") >= 0


def test_bad_sla_config_is_refused(sipd_bin, tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("session_pools:\n  - name: p\n    backend: builtin\n"
                   "    sla: {availability: 99.9}\n")
    r = subprocess.run([str(sipd_bin), "--check-config", str(cfg)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0
    assert ('session_pools[0].sla.availability: "99.9" is above 1: availability is a '
            'fraction (0.999) or a percent with a % sign ("99.9%")') in r.stderr + r.stdout


def test_blackholed_webhook_does_not_hold_up_shutdown(start_sla):
    """A webhook that accepts nothing and never answers: the POST in flight
    is abandoned within min(timeout_ms, 2 s) of SIGTERM, and sipd exits 0."""
    import socket
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(1)  # never accepted
    try:
        url = "http://127.0.0.1:%d/hook" % hole.getsockname()[1]
        srv = start_sla([pool("p", {"min_throughput_rps": 1000000, "window_s": 1})],
                        {"warning_after": 1, "critical_after": 2, "webhooks": [url],
                         "timeout_ms": 60000, "retries": 5})
        c = srv.client()
        wait_until(lambda: c.status()["alerts"]["sent"] >= 2, what="two alerts")
        h = c.status()["alerts"]["webhooks"][0]
        assert (h["delivered"], h["attempts"], h["queued"]) == (0, 0, 2)  # stuck on the first
        t0 = time.monotonic()
        assert srv.stop() == 0, srv.log_tail()
        assert time.monotonic() - t0 < 8, time.monotonic() - t0
        assert 'msg="alert webhook failed" url="%s" attempts=1' % url in srv.log()
    finally:
        hole.close()


def test_alert_of_a_replaced_pool_is_resolved(start_sla):
    """A config reload (SIGHUP) that changes a pool's sla replaces the pool:
    the old pool's alert, which nothing measures any more, is resolved."""
    import signal
    rx = Receiver()
    try:
        srv = start_sla([pool("p", {"min_throughput_rps": 1000000, "window_s": 1})],
                        {"warning_after": 1, "critical_after": 0, "webhooks": [rx.url]})
        rx.wait_for(lambda b: len(b) >= 1)
        srv.pools = [pool("p", {"availability": 0.5, "window_s": 1})]
        srv.write_config()
        srv.send_signal(signal.SIGHUP)
        rx.wait_for(lambda b: len(b) >= 2)
        warn, res = rx.bodies()[:2]
        assert (warn["level"], warn["state"]) == ("warning", "firing")
        assert (res["level"], res["state"], res["previous_level"]) == ("warning", "resolved",
                                                                       "warning")
        assert res["reason"].startswith("the pool was unloaded or replaced")
        assert res["targets"]["min_throughput_rps"] == 1000000  # the old pool's targets
        wait_until(lambda: sla_of(srv, "p")["targets"]["availability"] == 0.5, what="new pool")
        windows_pass(srv, "p", 2)  # the new pool (idle windows meet availability) fires nothing
        assert len(rx.bodies()) == 2, rx.bodies()
    finally:
        rx.close()
