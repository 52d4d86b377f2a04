#!/usr/bin/python3
"""HTTP system shared memory benchmark: round-trip latency of an identity
(builtin backend, no compute) over KServe v2 HTTP for FP32 tensors of
several sizes, the tensor sent and answered as binary data (the baseline,
measured in the same run) and read from and written into registered shared
memory regions instead; prints the ratio shm / binary per size.
"""
import json
import mmap
import os
import socket
import statistics
import time

import numpy as np

import http.client

from common import Sipd

SIZES = [64 << 10, 1 << 20, 16 << 20]
ROUNDS = {64 << 10: 400, 1 << 20: 100, 16 << 20: 20}

with socket.socket() as sk:
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
pools = [{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"}}]


def post(conn, path, body, headers):
    conn.request("POST", path, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    assert r.status == 200, (r.status, data[:300])
    return r, data


def timed(fn, rounds):
    fn()  # warm
    t = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return statistics.median(t) * 1e6


name = "sip_bench_shm_%d" % os.getpid()
path = "/dev/shm/" + name
with Sipd(pools, "  http: 127.0.0.1:%d\n  http_max_body_bytes: 64MiB\n" % port) as s:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, 2 * max(SIZES))
        m = mmap.mmap(fd, 2 * max(SIZES))
        rows = []
        for size in SIZES:
            n = size // 4
            x = np.arange(n, dtype=np.float32)
            m[:size] = x.tobytes()
            post(conn, "/v2/systemsharedmemory/unregister", b"", {})
            for region, off in (("in", 0), ("out", max(SIZES))):
                post(conn, "/v2/systemsharedmemory/region/%s/register" % region,
                     json.dumps({"key": "/" + name, "offset": off, "byte_size": size}).encode(),
                     {"Content-Type": "application/json"})
            head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [n],
                                           "parameters": {"binary_data_size": size}}],
                               "outputs": [{"name": "output",
                                            "parameters": {"binary_data": True}}]}).encode()
            binary = head + x.tobytes()
            bh = {"Inference-Header-Content-Length": str(len(head))}
            shm = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [n],
                                          "parameters": {"shared_memory_region": "in",
                                                         "shared_memory_byte_size": size}}],
                              "outputs": [{"name": "output", "parameters": {
                                  "shared_memory_region": "out",
                                  "shared_memory_byte_size": size}}]}).encode()
            sh = {"Content-Type": "application/json"}

            def run_binary():
                r, data = post(conn, "/v2/models/echo/infer", binary, bh)
                assert len(data) > size

            def run_shm():
                post(conn, "/v2/models/echo/infer", shm, sh)

            b_us = timed(run_binary, ROUNDS[size])
            s_us = timed(run_shm, ROUNDS[size])
            assert m[max(SIZES):max(SIZES) + size] == m[:size]
            rows.append((size, b_us, s_us))
        m.close()
    finally:
        os.close(fd)
        os.unlink(path)
    conn.close()
print("load: %s" % " ".join("%.2f" % v for v in os.getloadavg()))
for size, b_us, s_us in rows:
    print("FP32 %6d KiB  binary p50 %9.1f us  shm p50 %9.1f us  shm/binary %5.2f" %
          (size >> 10, b_us, s_us, s_us / b_us))
