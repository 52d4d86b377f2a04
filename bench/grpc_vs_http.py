#!/usr/bin/python3
"""gRPC benchmark: the tiny model over KServe v2 gRPC (raw tensors) against
KServe v2 HTTP with binary tensors, measured in the same run, HTTP and gRPC
alternating round by round so machine load hits both alike, twice: with C
clients (`sip bench --http-format binary` over libcurl; bench_grpc_client over
gRPC's C core), which show the servers' cost, and with Python clients
(http.client keep-alive; python3-grpcio), which pay the interpreter's. Each:
p50/p99 latency one request at a time and throughput with 8 requests
outstanding. Prints gRPC's ratios to HTTP binary; the target is within 1.3x.
"""
import sys

import http.client

import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time

import numpy as np

from common import BUILD, ROOT, Sipd, ensure_tiny, sip_bench

import grpc  # python3-grpcio

ROUNDS = 5           # HTTP and gRPC alternate, so machine load hits both alike
N_LATENCY = 500      # requests per round, one at a time
THROUGHPUT_S = 1.0   # seconds per round with CONCURRENCY clients
CONCURRENCY = 8


def stubs():
    out = tempfile.mkdtemp(prefix="sipgrpc")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.join(ROOT, "proto"),
                    "--python_out", out, "--grpc_python_out", out, "grpc_service.proto"],
                   check=True)
    sys.path.insert(0, out)
    import grpc_service_pb2
    import grpc_service_pb2_grpc
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
        c_lat, c_qps = c_clients(hport, addr)
        p_lat, p_qps = python_clients(pb, svc, hport, addr)
    print("load: %.2f (1-minute load average, %d cores)" % (os.getloadavg()[0], os.cpu_count()))
    for title, lat, qps in (("C clients", c_lat, c_qps), ("Python clients", p_lat, p_qps)):
        print(title + ":")
        for k, label in (("HTTP", "HTTP binary"), ("gRPC", "gRPC raw")):
            print("  %-11s  p50 %7.1f us  p99 %7.1f us   %d outstanding: %7.0f req/s"
                  % (label, lat[k][0], lat[k][1], CONCURRENCY, qps[k]))
        print("  gRPC / HTTP binary: p50 latency ratio %.2f, throughput ratio (HTTP/gRPC) %.2f "
              "(target <= 1.3)" % (lat["gRPC"][0] / lat["HTTP"][0], qps["HTTP"] / qps["gRPC"]))


def c_clients(hport, addr):
    """(p50, p99) in us and req/s per protocol, medians over the rounds."""
    def http(conc):
        r = sip_bench("http://127.0.0.1:%d" % hport, "tiny", ["x:float32:1,4=ones"],
                      "--concurrency", str(conc), "--http-format", "binary",
                      window_ms=1000, max_windows=3)
        return r["latency_ms"]["p50"] * 1000, r["latency_ms"]["p99"] * 1000, r["throughput_rps"]

    def grpc_c(conc):
        out = subprocess.run([os.path.join(BUILD, "bench_grpc_client"), addr, "tiny",
                              str(THROUGHPUT_S * 2), str(conc)],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out)
        return r["p50_us"], r["p99_us"], r["throughput_rps"]
    runs = {"HTTP": http, "gRPC": grpc_c}
    one = {"HTTP": [], "gRPC": []}
    many = {"HTTP": [], "gRPC": []}
    for r in range(3):
        for k in (("HTTP", "gRPC") if r % 2 == 0 else ("gRPC", "HTTP")):
            one[k].append(runs[k](1))
            many[k].append(runs[k](CONCURRENCY)[2])
    lat = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for k, v in one.items()}
    return lat, {k: statistics.median(v) for k, v in many.items()}


def python_clients(pb, svc, hport, addr):
    one = {"HTTP": http_client(hport), "gRPC": grpc_client(pb, svc, addr)}
    many = {"HTTP": [http_client(hport) for _ in range(CONCURRENCY)],
            "gRPC": [grpc_client(pb, svc, addr) for _ in range(CONCURRENCY)]}
    for k in one:  # warm up connections and the model
        for _ in range(200):
            one[k]()
        for c in many[k]:
            c()
    lat = {"HTTP": [], "gRPC": []}
    qps = {"HTTP": [], "gRPC": []}
    for r in range(ROUNDS):
        for k in (("HTTP", "gRPC") if r % 2 == 0 else ("gRPC", "HTTP")):
            lat[k] += latency(one[k])
            qps[k].append(throughput(many[k]))
    return ({k: (pct(v, 0.5), pct(v, 0.99)) for k, v in lat.items()},
            {k: statistics.median(v) for k, v in qps.items()})


main()
