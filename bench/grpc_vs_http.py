#!/usr/bin/python3
"""gRPC benchmark: the tiny model over KServe v2 gRPC (raw tensors) against
KServe v2 HTTP with binary tensors, against the same sipd in one run, HTTP
and gRPC taking turns round by round (common.interleave), twice: with C
clients (`sip bench --http-format binary`, whose HTTP client is as light as
wrk: kept-alive plain sockets, the request encoded once; bench_grpc_client
over gRPC's C core), which show the servers' cost, and with Python clients
(http.client keep-alive; python3-grpcio), which pay the interpreter's. Each:
p50/p99 latency one request at a time and throughput with 8 requests
outstanding. Prints gRPC's p50 over HTTP binary's and HTTP's throughput
over gRPC's, medians of each round's ratio; the target is within 1.3x.
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

from common import BUILD, ROOT, ROUNDS, Sipd, ensure_tiny, interleave, ratios, report, sip_bench

import grpc  # python3-grpcio

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
            out = subprocess.run([os.path.join(BUILD, "bench_grpc_client"), addr, "tiny",
                                  str(THROUGHPUT_S * 2), str(conc)],
                                 check=True, capture_output=True, text=True).stdout
            return json.loads(out)
        a, b = one(1), one(CONCURRENCY)
        return (a["p50_us"], a["p99_us"], b["throughput_rps"])
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


main()
