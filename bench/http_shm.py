#!/usr/bin/python3
"""HTTP system shared memory benchmark: round-trip latency of an identity
(builtin backend, no compute) over KServe v2 HTTP for FP32 tensors of 4 KB
and 4 MB, one request at a time with `sip bench`'s HTTP client (kept-alive
plain sockets, the request encoded once): the tensor sent and answered as
binary data (`--http-format binary -o output`, the baseline), and read from
and written into shared memory regions registered over HTTP instead (a JSON
body naming them, sent with `--http-body`). Every round measures the four
in turn, the order turning each round; prints shm / binary per size, the
median of each round's ratio, and checks once that the output region holds
the input.
"""
import http.client
import json
import mmap
import os
import shutil
import socket
import tempfile

from common import ROUNDS, Sipd, interleave, ratios, report, sip_bench

SIZES = {"4KB": 4 << 10, "4MB": 4 << 20}

with socket.socket() as sk:
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
url = "http://127.0.0.1:%d" % port
pools = [{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"}}]


def post(conn, path, body):
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    assert r.status == 200, (path, r.status, data[:300])
    return data


def p50(inputs, *args):
    def run():
        r = sip_bench(url, "echo", inputs, *args, "--concurrency", "1", window_ms=400,
                      max_windows=3)
        assert r["errors"] == 0, r
        return r["latency_ms"]["p50"] * 1000
    return run


name = "sip_bench_shm_%d" % os.getpid()
path = "/dev/shm/" + name
tmp = tempfile.mkdtemp(prefix="siphttpshm")
total = 2 * sum(SIZES.values())
fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
try:
    os.ftruncate(fd, total)
    m = mmap.mmap(fd, total)
    with Sipd(pools, "  http: 127.0.0.1:%d\n  http_max_body_bytes: 64MiB\n" % port) as s:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        fns, off, regions = {}, 0, {}
        for label, size in SIZES.items():
            n = size // 4
            m[off:off + size] = bytes(range(256)) * (size // 256)  # the input's bytes
            for io, at in (("in", off), ("out", off + size)):
                post(conn, "/v2/systemsharedmemory/region/%s%s/register" % (io, label),
                     json.dumps({"key": "/" + name, "offset": at, "byte_size": size}).encode())
            regions[label] = (off, size)
            off += 2 * size
            body = os.path.join(tmp, "shm%s.json" % label)
            with open(body, "w") as f:
                json.dump({"inputs": [{"name": "input", "datatype": "FP32", "shape": [n],
                                       "parameters": {"shared_memory_region": "in" + label,
                                                      "shared_memory_byte_size": size}}],
                           "outputs": [{"name": "output", "parameters": {
                               "shared_memory_region": "out" + label,
                               "shared_memory_byte_size": size}}]}, f)
            fns[("binary", label)] = p50(["input:float32:%d=ones" % n], "-o", "output",
                                         "--http-format", "binary")
            fns[("shm", label)] = p50([], "--http-body", body)
        conn.close()
        res = interleave(ROUNDS, fns)
        for label, (at, size) in regions.items():
            assert m[at + size:at + 2 * size] == m[at:at + size], "the output region differs"
    m.close()
finally:
    os.close(fd)
    os.unlink(path)
    shutil.rmtree(tmp, ignore_errors=True)
for key, v in res.items():
    print("FP32 %-3s %-6s p50 %s us" % (key[1], key[0], " ".join("%9.1f" % x for x in v)))
for label in SIZES:
    report("%s: shm / binary p50" % label, ratios(res[("shm", label)], res[("binary", label)]),
           None, "%.2f")
