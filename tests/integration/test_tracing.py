"""Request tracing (docs/tracing.md) on a real sipd: W3C traceparent over
HTTP, gRPC and the native protocol, spans for receive, queue, batch,
execute, pipeline stages and send, exported as OTLP/HTTP JSON to a test
collector (http.server on a thread); sampling by tracing.sample_ratio and
by Triton's trace settings changed live; a dead collector fails nothing."""

import http.server
import json
import socket
import threading
import time

import numpy as np
import pytest

from cann_sip import BatchInferenceRequest, InferenceRequest
from harness import SipServer, wait_until
import kserve as K
from test_idempotency import grpc_stubs

F = np.float32
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class Collector:
    """An OTLP/HTTP collector: keeps every span POSTed to /v1/traces."""

    def __init__(self):
        self.spans = []
        self.posts = 0
        self.cv = threading.Condition()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                doc = json.loads(body)
                got = []
                for rs in doc["resourceSpans"]:
                    svc = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
                    for ss in rs["scopeSpans"]:
                        for sp in ss["spans"]:
                            sp["_service"] = svc["service.name"]["stringValue"]
                            got.append(sp)
                with outer.cv:
                    outer.posts += 1
                    outer.spans.extend(got)
                    outer.cv.notify_all()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d/v1/traces" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def trace(self, trace_id, want, timeout=15.0):
        """The spans of trace_id once `want(spans)` holds."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                spans = [s for s in self.spans if s["traceId"] == trace_id]
                if want(spans):
                    return spans
                left = deadline - time.monotonic()
                assert left > 0, "trace %s incomplete: %s" % (trace_id, [s["name"] for s in spans])
                self.cv.wait(left)

    def traces(self):
        with self.cv:
            return {s["traceId"] for s in self.spans}


def start(tmp, tracing, pools=None, pipelines=None, server=None):
    pools = pools or [
        {"name": "echo", "backend": "builtin", "pool_size": 1,
         "backend_options": {"shape": "-1,4", "delay_ms": 5}},
        {"name": "echo2", "backend": "builtin", "backend_options": {"shape": "-1,4"}},
    ]
    s = SipServer(tmp, pools, server=dict({"http": "127.0.0.1:0"}, **(server or {})))
    cfg = s.config()
    cfg["tracing"] = tracing
    if pipelines:
        cfg["pipeline_sessions"] = pipelines
    s.config = lambda: cfg
    s.start()
    try:
        s.http = K.http_base(s)
    except BaseException:
        s.kill()
        raise
    return s


@pytest.fixture(scope="module")
def collector():
    c = Collector()
    yield c
    c.close()


@pytest.fixture(scope="module")
def srv(sipd_bin, collector, tmp_path_factory):
    pipelines = [{"name": "two", "stages": [
        {"name": "a", "pool": "echo", "input_mapping": {"input": "pipeline.input"}},
        {"name": "b", "pool": "echo2", "input_mapping": {"input": "a.output"}},
    ]}]
    s = start(tmp_path_factory.mktemp("tr"),
              {"otlp_endpoint": collector.url, "sample_ratio": 1, "service_name": "sip-test"},
              pipelines=pipelines, server={"grpc": "127.0.0.1:0"})
    s.grpc = K.printed_address(s, "grpc")[len("grpc://"):]
    yield s
    assert s.stop() == 0, s.log_tail()


def x4():
    return np.arange(8, dtype=F).reshape(2, 4)


def by_name(spans):
    out = {}
    for s in spans:
        out.setdefault(s["name"], []).append(s)
    return out


def t(s, k):
    return int(s[k + "TimeUnixNano"])


def within(child, parent):
    return t(parent, "start") <= t(child, "start") <= t(child, "end") <= t(parent, "end")


def attr(span, key):
    for a in span.get("attributes", []):
        if a["key"] == key:
            v = a["value"]
            return v.get("stringValue", v.get("intValue"))
    return None


def has(*names):
    return lambda spans: set(names) <= {s["name"] for s in spans}


def pool_trace(collector, tid):
    """The spans of pool request `tid` once all of them arrived."""
    return collector.trace(tid, has("request", "receive", "queue", "batch", "execute", "send"))


def check_pool_trace(spans, root_parent=CALLER_SPAN):
    """The shape of one traced pool request; returns the root span."""
    n = by_name(spans)
    assert len(n["request"]) == 1
    root = n["request"][0]
    assert root.get("parentSpanId") == root_parent
    assert root["kind"] == 2 and root["_service"] == "sip-test"
    ids = {s["spanId"] for s in spans}
    assert len(ids) == len(spans), "span ids repeat"
    for name in ("receive", "queue", "batch", "execute", "send"):
        assert len(n[name]) == 1, name
        s = n[name][0]
        assert s["parentSpanId"] == root["spanId"], name
        assert within(s, root), (name, s, root)
    # They follow each other: receive, queue, batch, execute, send.
    order = [n[k][0] for k in ("receive", "queue", "batch", "execute", "send")]
    for a, b in zip(order, order[1:]):
        assert t(a, "end") <= t(b, "start"), (a["name"], b["name"])
    dur = lambda s: t(s, "end") - t(s, "start")
    assert dur(n["queue"][0]) + dur(n["execute"][0]) <= dur(root)
    assert dur(n["execute"][0]) >= 4_000_000  # the builtin pool's 5 ms delay
    assert attr(n["batch"][0], "sip.batch_size") == "1"
    assert attr(root, "sip.model") == "echo"
    return root


def test_http_traceparent(srv, collector):
    tid = "0af7651916cd43dd8448eb211c80319c"
    body, headers = K.build_request({"input": x4()})
    headers["traceparent"] = "00-%s-%s-01" % (tid, CALLER_SPAN)
    headers["tracestate"] = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    r = K.request("POST", srv.http + "/v2/models/echo/infer", body=body, headers=headers)
    assert r.status == 200, r
    root = check_pool_trace(pool_trace(collector, tid))
    assert root["traceState"] == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


def test_native_traceparent(srv, collector):
    tid = "1af7651916cd43dd8448eb211c80319d"
    c = srv.client()
    r = c.infer(InferenceRequest("echo", {"input": x4()},
                                 traceparent="00-%s-%s-01" % (tid, CALLER_SPAN)))
    np.testing.assert_array_equal(r.outputs["output"], x4())
    check_pool_trace(pool_trace(collector, tid))


def test_grpc_traceparent(srv, collector, tmp_path):
    grpc, msgs, svc = grpc_stubs(tmp_path)
    tid = "2af7651916cd43dd8448eb211c80319e"
    req = msgs.ModelInferRequest(model_name="echo")
    req.inputs.add(name="input", datatype="FP32", shape=[2, 4])
    req.raw_input_contents.append(x4().tobytes())
    with grpc.insecure_channel(srv.grpc) as ch:
        resp = svc.GRPCInferenceServiceStub(ch).ModelInfer(
            req, timeout=20, metadata=[("traceparent", "00-%s-%s-01" % (tid, CALLER_SPAN))])
    assert resp.raw_output_contents[0] == x4().tobytes()
    check_pool_trace(pool_trace(collector, tid))


def test_pipeline_stage_spans(srv, collector):
    tid = "3af7651916cd43dd8448eb211c80319f"
    c = srv.client()
    r = c.infer(InferenceRequest("two", {"input": x4()},
                                 traceparent="00-%s-%s-01" % (tid, CALLER_SPAN)))
    np.testing.assert_array_equal(r.outputs["output"], x4())
    spans = collector.trace(tid, lambda s: len(s) >= 1 + 2 + 2 * 3 + 1 and has(
        "request", "stage:a", "stage:b", "send")(s))
    n = by_name(spans)
    root = n["request"][0]
    assert root.get("parentSpanId") == CALLER_SPAN
    assert attr(root, "sip.model") == "two"
    stages = {s["spanId"]: s for s in n["stage:a"] + n["stage:b"]}
    assert len(stages) == 2
    for st in stages.values():
        assert st["parentSpanId"] == root["spanId"] and within(st, root)
    assert t(n["stage:a"][0], "end") <= t(n["stage:b"][0], "start")
    assert attr(n["stage:b"][0], "sip.stage") == "b"
    # Each stage's model request: queue, batch, execute under the stage.
    for name in ("queue", "batch", "execute"):
        assert len(n[name]) == 2, name
        for s in n[name]:
            parent = stages[s["parentSpanId"]]
            assert within(s, parent), (name, s, parent)
    under = lambda st: [s for s in spans if s.get("parentSpanId") == st["spanId"]]
    assert {s["name"] for s in under(n["stage:a"][0])} == {"queue", "batch", "execute"}


def test_client_batch_chunks(srv, collector):
    """A BatchInferenceRequest split into 3 chunks: each chunk's queue,
    batch and execute spans under the one request span."""
    tid = "6af7651916cd43dd8448eb211c8031a1"
    c = srv.client()
    items = [np.full(4, i, F) for i in range(5)]
    r = c.batch_infer(BatchInferenceRequest("echo2", items, {"max_batch_size": 2},
                                            traceparent="00-%s-%s-01" % (tid, CALLER_SPAN)))
    assert len(r.outputs) == 5
    spans = collector.trace(tid, lambda s: len(s) >= 1 + 1 + 3 * 3 + 1 and has("send")(s))
    n = by_name(spans)
    root = n["request"][0]
    assert root.get("parentSpanId") == CALLER_SPAN
    for name in ("queue", "batch", "execute"):
        assert len(n[name]) == 3, name
        for s in n[name]:
            assert s["parentSpanId"] == root["spanId"] and within(s, root)
    assert sorted(attr(s, "sip.batch_rows") for s in n["execute"]) == ["1", "2", "2"]
    assert within(n["send"][0], root)


def roots_since(collector, t0):
    """Root spans of requests received after t0 (Unix ns): traces of earlier
    tests may still be on their way."""
    with collector.cv:
        return [s for s in collector.spans if s["name"] == "request" and t(s, "start") >= t0]


def test_invalid_traceparent_ignored(srv, collector):
    t0 = time.time_ns()
    for bad in ("00-%s-%s-01" % ("0" * 32, CALLER_SPAN),          # all-zero trace id
                "00-%s-%s-01" % (CALLER_TRACE, "0" * 16),         # all-zero parent
                "ff-%s-%s-01" % (CALLER_TRACE, CALLER_SPAN),      # version ff
                "00-%s-%s-01" % (CALLER_TRACE.upper(), CALLER_SPAN),
                "00-%s-%s-01-extra" % (CALLER_TRACE, CALLER_SPAN),
                "garbage"):
        body, headers = K.build_request({"input": x4()})
        headers["traceparent"] = bad
        headers["tracestate"] = "k=v"
        r = K.request("POST", srv.http + "/v2/models/echo2/infer", body=body, headers=headers)
        assert r.status == 200, (bad, r)
    # Each got a trace of its own (sampled at ratio 1), not the caller's.
    wait_until(lambda: len(roots_since(collector, t0)) >= 6, what="six new traces at the collector")
    roots = roots_since(collector, t0)
    assert len({r["traceId"] for r in roots}) == 6
    assert CALLER_TRACE not in collector.traces()
    for r in roots:  # no parent, and the tracestate went with the traceparent
        assert "parentSpanId" not in r and "traceState" not in r


def metric(srv, name):
    body = K.request("GET", srv.http + "/metrics").body.decode()
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no %s in /metrics" % name)


def post_setting(srv, path, doc):
    r = K.request("POST", srv.http + path, body=json.dumps(doc).encode(),
                  headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    return json.loads(r.body)


def test_trace_settings_drive_tracing(srv, collector):
    c = srv.client()
    try:
        post_setting(srv, "/v2/trace/setting", {"trace_level": ["OFF"]})
        n0 = metric(srv, "sip_traces_sampled_total")
        for _ in range(3):
            c.infer(InferenceRequest("echo2", {"input": x4()}))
        assert metric(srv, "sip_traces_sampled_total") == n0
        # One model back on: only it is traced.
        doc = post_setting(srv, "/v2/models/echo2/trace/setting", {"trace_level": ["TIMESTAMPS"],
                                                                   "trace_rate": "1"})
        assert doc["trace_level"] == ["TIMESTAMPS"]
        c.infer(InferenceRequest("echo", {"input": x4()}))
        assert metric(srv, "sip_traces_sampled_total") == n0
        tid = "5af7651916cd43dd8448eb211c8031a0"
        c.infer(InferenceRequest("echo2", {"input": x4()},
                                 traceparent="00-%s-%s-01" % (tid, CALLER_SPAN)))
        assert metric(srv, "sip_traces_sampled_total") == n0 + 1
        collector.trace(tid, has("request", "execute", "send"))
        # A caller that did not sample its trace is not traced.
        c.infer(InferenceRequest("echo2", {"input": x4()},
                                 traceparent="00-%s-%s-00" % (tid, CALLER_SPAN)))
        assert metric(srv, "sip_traces_sampled_total") == n0 + 1
    finally:
        post_setting(srv, "/v2/models/echo2/trace/setting", {"trace_level": None,
                                                             "trace_rate": None})
        post_setting(srv, "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})


def test_grpc_trace_setting_drives_tracing(srv, tmp_path):
    grpc, msgs, svc = grpc_stubs(tmp_path)
    c = srv.client()
    with grpc.insecure_channel(srv.grpc) as ch:
        stub = svc.GRPCInferenceServiceStub(ch)

        def setting(model, **kv):
            req = msgs.TraceSettingRequest(model_name=model)
            for k, v in kv.items():
                req.settings[k].value.extend(v)
            return stub.TraceSetting(req, timeout=20)

        got = setting("echo2", trace_level=["OFF"])
        assert list(got.settings["trace_level"].value) == ["OFF"]
        try:
            n0 = metric(srv, "sip_traces_sampled_total")
            c.infer(InferenceRequest("echo2", {"input": x4()}))
            assert metric(srv, "sip_traces_sampled_total") == n0
            c.infer(InferenceRequest("echo", {"input": x4()}))  # the global settings: traced
            assert metric(srv, "sip_traces_sampled_total") == n0 + 1
        finally:
            setting("echo2", trace_level=[])  # back to the global setting
        c.infer(InferenceRequest("echo2", {"input": x4()}))
        assert metric(srv, "sip_traces_sampled_total") == n0 + 2


def test_ratio_one_sends_all(srv, collector):
    c = srv.client()
    t0 = time.time_ns()
    n0 = metric(srv, "sip_traces_sampled_total")
    for _ in range(20):
        c.infer(InferenceRequest("echo2", {"input": x4()}))
    assert metric(srv, "sip_traces_sampled_total") == n0 + 20
    wait_until(lambda: len(roots_since(collector, t0)) >= 20, what="20 traces at the collector")
    # Not a wait: two flush intervals pass, in which nothing more may come.
    time.sleep(0.5)
    assert len({r["traceId"] for r in roots_since(collector, t0)}) == 20


def test_ratio_zero_sends_nothing(sipd_bin, tmp_path):
    col = Collector()
    s = start(tmp_path, {"otlp_endpoint": col.url, "sample_ratio": 0})
    try:
        c = s.client()
        for _ in range(10):
            c.infer(InferenceRequest("echo2", {"input": x4()},
                                     traceparent="00-%s-%s-01" % (CALLER_TRACE, CALLER_SPAN)))
        body, headers = K.build_request({"input": x4()})
        assert K.request("POST", s.http + "/v2/models/echo2/infer", body=body,
                         headers=headers).status == 200
        assert metric(s, "sip_traces_sampled_total") == 0
        assert s.stop() == 0, s.log_tail()  # the exporter flushes at exit
        assert col.posts == 0 and not col.spans
    finally:
        if s.alive():
            s.kill()
        col.close()


def test_dead_collector_fails_nothing(sipd_bin, tmp_path):
    with socket.socket() as sk:  # a port nobody listens on
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    s = start(tmp_path, {"otlp_endpoint": "http://127.0.0.1:%d/v1/traces" % port,
                         "timeout_ms": 200, "max_queue": 4})
    try:
        c = s.client()
        for _ in range(30):
            r = c.infer(InferenceRequest("echo2", {"input": x4()}))
            np.testing.assert_array_equal(r.outputs["output"], x4())
        wait_until(lambda: metric(s, "sip_trace_spans_dropped_total") >= 30 * 3,
                   what=lambda: "90 spans dropped:\n" + s.log_tail())
        assert metric(s, "sip_trace_spans_exported_total") == 0
        assert metric(s, "sip_traces_sampled_total") == 30
        assert s.stop() == 0, s.log_tail()
    finally:
        if s.alive():
            s.kill()
