#!/usr/bin/python3
"""gRPC benchmark: the tiny model over KServe v2 gRPC (python3-grpcio, raw
tensors) against KServe v2 HTTP with binary tensors (http.client, keep-alive)
measured in the same run with the same kind of client (Python, so both pay the
same interpreter costs): p50/p99 latency one request at a time, and throughput
with 8 concurrent clients. Prints gRPC's ratios to HTTP binary; the target is
within 1.3x.
"""
import sys

# bench/http.py would shadow the standard library's http package: take it
# first, with bench/ out of the path.
_BENCH = sys.path.pop(0)
import http.client  # noqa: E402
sys.path.insert(0, _BENCH)

import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from common import ROOT, Sipd, ensure_tiny  # noqa: E402

import grpc  # noqa: E402  (python3-grpcio)

N_LATENCY = 2000
THROUGHPUT_S = 3.0
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
    for _ in range(200):
        call()
    ts = []
    for _ in range(N_LATENCY):
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return statistics.median(ts) * 1e6, ts[int(len(ts) * 0.99)] * 1e6


def throughput(make_call):
    calls = [make_call() for _ in range(CONCURRENCY)]
    for c in calls:
        c()
    stop = time.monotonic() + THROUGHPUT_S
    counts = [0] * CONCURRENCY

    def run(i):
        while time.monotonic() < stop:
            calls[i]()
            counts[i] += 1
    threads = [threading.Thread(target=run, args=(i,)) for i in range(CONCURRENCY)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - t0)


def main():
    pb, svc = stubs()
    tiny = ensure_tiny()
    hport, gport = free_port(), free_port()
    extra = "  http: 127.0.0.1:%d\n  grpc: 127.0.0.1:%d\n" % (hport, gport)
    with Sipd([{"name": "tiny", "model_path": tiny, "pool_size": 2}], extra):
        addr = "127.0.0.1:%d" % gport
        h50, h99 = latency(http_client(hport))
        g50, g99 = latency(grpc_client(pb, svc, addr))
        hq = throughput(lambda: http_client(hport))
        gq = throughput(lambda: grpc_client(pb, svc, addr))
    print("load: %s (1-minute load average)" % os.getloadavg()[0])
    print("HTTP binary  p50 %7.1f us  p99 %7.1f us   %d clients: %7.0f req/s" % (h50, h99,
                                                                                CONCURRENCY, hq))
    print("gRPC raw     p50 %7.1f us  p99 %7.1f us   %d clients: %7.0f req/s" % (g50, g99,
                                                                                CONCURRENCY, gq))
    print("gRPC / HTTP binary: p50 latency ratio %.2f, throughput ratio (HTTP/gRPC) %.2f "
          "(target <= 1.3)" % (g50 / h50, hq / gq))


main()
