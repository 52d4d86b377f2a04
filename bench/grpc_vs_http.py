#!/usr/bin/python3
"""gRPC benchmark: the tiny model over KServe v2 gRPC (raw tensors) against
KServe v2 HTTP with binary tensors, against the same sipd in one run, HTTP
and gRPC taking turns round by round (common.interleave), twice: with C
clients (`sip bench`, whose HTTP client is as light as wrk and its gRPC
client as light as h2load: kept connections, the request encoded once;
tests/integration/test_bench_vs_wrk.py holds both to it), which show the
servers' cost, and with Python clients
(http.client keep-alive; python3-grpcio), which pay the interpreter's. Each:
p50/p99 latency one request at a time and throughput with 8 requests
outstanding. Prints gRPC's p50 over HTTP binary's and HTTP's throughput
over gRPC's, medians of each round's ratio; the target is within 1.3x.

Then where the time goes: a second sipd with every request traced
(docs/tracing.md; so that the client's p50 and the spans' medians are of the
same requests) sends its spans to a collector on a thread of this process,
which keeps the bodies and parses them between runs, and the C clients drive
it one request at a time, HTTP, gRPC and the native unix socket (`sip
bench`) taking turns round by round, each on a pool of its own (the root
span's sip.model tells them apart). Per protocol, the median over a round's
requests of each span: receive (from the request's first bytes in the
front-end through decoding, until admission), queue, batch, execute, send
(encoding the answer and handing it to the connection), the request span
less those five ("between spans": mostly the answer's way back to the
front-end's thread), and the client's p50 less the request span (the client,
the kernel, and the transport library's work outside sip's spans: HTTP
parsing in libmicrohttpd before the headers are in, gRPC core's HTTP/2
framing before the message is in hand and after the answer is handed over).
Tracing costs each request a little, so these are measured apart from the
figures above; the gRPC - HTTP difference per stage is reported (medians
over the rounds).
"""
import sys

import http.client

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import numpy as np

from common import ROOT, ROUNDS, Sipd, ensure_tiny, interleave, ratios, report, sip_bench

import grpc  # python3-grpcio
import http.server

N_LATENCY = 500      # requests per round, one at a time
THROUGHPUT_S = 1.0   # seconds per round with CONCURRENCY clients
CONCURRENCY = 8


def stubs():
    out = tempfile.mkdtemp(prefix="sipgrpc")
    try:
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I",
                        os.path.join(ROOT, "proto"), "--python_out", out, "--grpc_python_out",
                        out, "grpc_service.proto"], check=True)
        sys.path.insert(0, out)
        import grpc_service_pb2
        import grpc_service_pb2_grpc
    finally:
        sys.path.remove(out) if out in sys.path else None
        shutil.rmtree(out, ignore_errors=True)  # the modules are loaded
    return grpc_service_pb2, grpc_service_pb2_grpc


def free_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


X = np.arange(4, dtype=np.float32).reshape(1, 4)


def grpc_client(pb, svc, addr):
    stub = svc.GRPCInferenceServiceStub(grpc.insecure_channel(addr))
    req = pb.ModelInferRequest(model_name="tiny")
    req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    req.raw_input_contents.append(X.tobytes())

    def call():
        r = stub.ModelInfer(req)
        assert len(r.raw_output_contents[0]) == 16
    return call


def http_client(port):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                                     "parameters": {"binary_data_size": 16}}],
                         "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    body = header + X.tobytes()
    headers = {"Inference-Header-Content-Length": str(len(header)),
               "Content-Type": "application/octet-stream"}

    def call():
        conn.request("POST", "/v2/models/tiny/infer", body, headers)
        r = conn.getresponse()
        data = r.read()
        assert r.status == 200 and len(data) >= 16
    return call


def latency(call):
    ts = []
    for _ in range(N_LATENCY):
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return ts


def throughput(calls):
    stop = time.monotonic() + THROUGHPUT_S
    counts = [0] * len(calls)

    def run(i):
        while time.monotonic() < stop:
            calls[i]()
            counts[i] += 1
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def pct(ts, q):
    ts = sorted(ts)
    return ts[min(len(ts) - 1, int(len(ts) * q))] * 1e6


def main():
    pb, svc = stubs()
    tiny = ensure_tiny()
    hport, gport = free_port(), free_port()
    extra = "  http: 127.0.0.1:%d\n  grpc: 127.0.0.1:%d\n" % (hport, gport)
    with Sipd([{"name": "tiny", "model_path": tiny, "pool_size": 2}], extra):
        addr = "127.0.0.1:%d" % gport
        c = interleave(ROUNDS, c_clients(hport, addr))
        p = interleave(ROUNDS, python_clients(pb, svc, hport, addr))
    for title, res in (("C clients", c), ("Python clients", p)):
        print(title + ":")
        for k, label in (("HTTP", "HTTP binary"), ("gRPC", "gRPC raw")):
            print("  %-11s  p50 %s us  p99 %s us   %d outstanding: %s req/s"
                  % (label, " ".join("%6.1f" % x[0] for x in res[k]),
                     " ".join("%6.1f" % x[1] for x in res[k]), CONCURRENCY,
                     " ".join("%6.0f" % x[2] for x in res[k])))
        report("%s: gRPC / HTTP binary p50" % title,
               ratios([x[0] for x in res["gRPC"]], [x[0] for x in res["HTTP"]]), "<= 1.3",
               "%.2f")
        report("%s: HTTP / gRPC throughput, %d outstanding" % (title, CONCURRENCY),
               ratios([x[2] for x in res["HTTP"]], [x[2] for x in res["gRPC"]]), "<= 1.3",
               "%.2f")


def c_clients(hport, addr):
    """Per protocol, a round's (p50 us, p99 us, req/s with CONCURRENCY outstanding)."""
    def http():
        def one(conc):
            return sip_bench("http://127.0.0.1:%d" % hport, "tiny", ["x:float32:1,4=ones"],
                             "--concurrency", str(conc), "--http-format", "binary",
                             window_ms=700, max_windows=3)
        a, b = one(1), one(CONCURRENCY)
        return (a["latency_ms"]["p50"] * 1000, a["latency_ms"]["p99"] * 1000,
                b["throughput_rps"])

    def grpc_c():
        def one(conc):
            r = sip_bench("grpc://" + addr, "tiny", ["x:float32:1,4=ones"], "--concurrency",
                          str(conc), window_ms=700, max_windows=3)
            if r["errors"]:
                raise RuntimeError("sip bench over gRPC: %d failed calls (%s); expected none"
                                   % (r["errors"], r["errors_by_code"]))
            return r
        a, b = one(1), one(CONCURRENCY)
        return (a["latency_ms"]["p50"] * 1000, a["latency_ms"]["p99"] * 1000,
                b["throughput_rps"])
    return {"HTTP": http, "gRPC": grpc_c}


def python_clients(pb, svc, hport, addr):
    one = {"HTTP": http_client(hport), "gRPC": grpc_client(pb, svc, addr)}
    many = {"HTTP": [http_client(hport) for _ in range(CONCURRENCY)],
            "gRPC": [grpc_client(pb, svc, addr) for _ in range(CONCURRENCY)]}
    for k in one:  # warm up connections and the model
        for _ in range(200):
            one[k]()
        for c in many[k]:
            c()

    def run(k):
        def go():
            ts = latency(one[k])
            return (pct(ts, 0.5), pct(ts, 0.99), throughput(many[k]))
        return go
    return {k: run(k) for k in one}


# ---------------------------------------------------------------------------
# where the time goes: sip's own spans

STAGES = ("receive", "queue", "batch", "execute", "send")
PROTOCOLS = ("HTTP", "gRPC", "native")


class Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP JSON receiver: keeps each POST's body, parsed later
    (`traces`), so that it takes little CPU while a client runs."""
    lock = threading.Lock()
    bodies = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with Collector.lock:
            Collector.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def traces(bodies):
    """[(model, {span name: [durations us]}, request us)] of the finished
    traces in OTLP/HTTP JSON bodies."""
    got = []
    for body in bodies:
        by_trace = {}
        for rs in json.loads(body).get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    by_trace.setdefault(sp["traceId"], []).append(sp)
        for spans in by_trace.values():
            root = [sp for sp in spans if sp["name"] == "request"]
            if len(root) != 1:
                continue
            model = {a["key"]: a["value"].get("stringValue") for a in
                     root[0].get("attributes", [])}.get("sip.model")
            dur = {}
            for sp in spans:
                us = (int(sp["endTimeUnixNano"]) - int(sp["startTimeUnixNano"])) / 1000.0
                dur.setdefault(sp["name"], []).append(us)
            got.append((model, dur, dur["request"][0]))
    return got


def drain():
    """The traces collected since the last call, once the exporter has sent
    what the last client run left (no new POST for 3 flush periods; at
    most 30 s)."""
    deadline, last, quiet_since = time.monotonic() + 30, -1, time.monotonic()
    while time.monotonic() < deadline:
        with Collector.lock:
            n = len(Collector.bodies)
        if n != last:
            last, quiet_since = n, time.monotonic()
        elif time.monotonic() - quiet_since > 0.6:
            break
        time.sleep(0.05)
    with Collector.lock:
        out, Collector.bodies = Collector.bodies, []
    return traces(out)


def breakdown_round(traces, model, client_p50):
    """One round's medians per stage (us) of one protocol's traces."""
    mine = [(d, req) for m, d, req in traces if m == model]
    if not mine:
        raise SystemExit("no trace of %s reached the collector; expected every request"
                         % model)
    out = {"traces": len(mine)}
    for st in STAGES:
        out[st] = np.median([sum(d.get(st, [0.0])) for d, _ in mine])
    out["request"] = np.median([req for _, req in mine])
    out["between spans"] = np.median(
        [req - sum(sum(d.get(st, [0.0])) for st in STAGES) for d, req in mine])
    out["outside sip's spans"] = client_p50 - out["request"]
    out["client p50"] = client_p50
    return out


def breakdown(tiny, n_rounds):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    collector = "http://127.0.0.1:%d/v1/traces" % httpd.server_address[1]
    hport, gport = free_port(), free_port()
    extra = "  http: 127.0.0.1:%d\n  grpc: 127.0.0.1:%d\n" % (hport, gport)
    tracing = ("tracing: {otlp_endpoint: '%s', sample_ratio: 1, max_queue: 16384}\n"
               % collector)
    pools = [{"name": "tiny_" + p.lower(), "model_path": tiny, "pool_size": 2} for p in PROTOCOLS]
    try:
        with Sipd(pools, extra, pipelines=tracing) as s:
            def one(proto):
                model = "tiny_" + proto.lower()

                def run():
                    drain()
                    ep = {"native": s.endpoint, "HTTP": "http://127.0.0.1:%d" % hport,
                          "gRPC": "grpc://127.0.0.1:%d" % gport}[proto]
                    p50 = sip_bench(ep, model, ["x:float32:1,4=ones"], "--concurrency", "1",
                                    window_ms=200, max_windows=3)["latency_ms"]["p50"] * 1000
                    return breakdown_round(drain(), model, p50)
                return run
            res = interleave(n_rounds, {p: one(p) for p in PROTOCOLS})
    finally:
        httpd.shutdown()
        httpd.server_close()
    rows = STAGES + ("between spans", "request", "outside sip's spans", "client p50")
    print("Where a request's time goes (C clients, one at a time, every request traced; "
          "p50 us, the median over %d rounds; traces per round %s):"
          % (len(res["HTTP"]), ", ".join("%s %s" % (p, "/".join(str(x["traces"]) for x in res[p]))
                                         for p in PROTOCOLS)))
    print("  %-22s %9s %9s %9s %12s" % ("stage", "HTTP", "gRPC", "native", "gRPC - HTTP"))
    for k in rows:
        med = {p: np.median([x[k] for x in res[p]]) for p in PROTOCOLS}
        print("  %-22s %9.1f %9.1f %9.1f %12.1f" % (k, med["HTTP"], med["gRPC"], med["native"],
                                                   med["gRPC"] - med["HTTP"]))
    d = {k: np.median([g[k] - h[k] for g, h in zip(res["gRPC"], res["HTTP"])]) for k in rows}
    print("gRPC's p50 - HTTP's: %.1f us; inside sip's spans %.1f us (receive %.1f, queue + batch"
          " + execute %.1f, send %.1f, between spans %.1f); outside them %.1f us (the clients,"
          " the kernel, and libmicrohttpd's or gRPC core's own work, which the spans cannot"
          " split)" % (d["client p50"], d["request"], d["receive"],
                       d["queue"] + d["batch"] + d["execute"], d["send"],
                       d["between spans"], d["outside sip's spans"]))
    for k in ("receive", "send", "between spans", "outside sip's spans"):
        report("traced, gRPC - HTTP: %s p50" % k,
               [g[k] - h[k] for g, h in zip(res["gRPC"], res["HTTP"])], None, "%.1f", " us",
               spread_limit=None)


main()
breakdown(ensure_tiny(), ROUNDS)
