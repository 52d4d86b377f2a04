#!/usr/bin/python3
"""JSON tensor benchmark: KServe v2 requests whose input is a JSON "data"
array of 27,648 floats (the PP-OCR cls input, 1x3x48x192 float32).

1. Decoding on one core (bench_json_decode, in process): the fast path
   (src/http/kserve_numbers.c) against the classic jansson decoder, for a body
   as Python's json module writes it (17 significant digits) and one with 6
   digits; MB/s of JSON text and the ratio fast / classic; and the time to
   encode the tensor back as a JSON response.
2. HTTP JSON inference with the real cls model at concurrency 1 and 8
   (`sip bench --http-format json`, one connection per outstanding request),
   the server with the fast path against the same server forced to the classic
   decoder (SIP_HTTP_JSON_CLASSIC=1), both in this run; and the CPU seconds each
   HTTP event-loop thread used at concurrency 8, to show the connections spread
   over both threads.
"""
import glob
import json
import os
import socket
import subprocess
import tempfile

import numpy as np

from common import BUILD, CLS, Sipd, sip_bench

SHAPE = (1, 3, 48, 192)


def decode_rates():
    rng = np.random.default_rng(1)
    x = ((rng.integers(0, 256, SHAPE) / 255.0 - 0.5) / 0.5).astype(np.float32)
    bodies = {
        "python json (17 digits)": json.dumps({"inputs": [{
            "name": "x", "shape": list(SHAPE), "datatype": "FP32", "data": x.tolist()}]}),
        "6 digits (%.6g)": '{"inputs":[{"name":"x","shape":[1,3,48,192],"datatype":"FP32",'
                           '"data":[' + ",".join("%.6g" % v for v in x.flat) + "]}]}",
    }
    rows = []
    for label, body in bodies.items():
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            f.write(body)
            f.flush()
            out = subprocess.run([os.path.join(BUILD, "bench_json_decode"), f.name, "200"],
                                 check=True, capture_output=True, text=True).stdout
        rows.append((label, json.loads(out)))
    return rows


def http_threads_cpu(pid):
    """CPU seconds (user + system) of each of sipd's MHD event-loop threads."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu = {}
    for comm in glob.glob("/proc/%d/task/*/comm" % pid):
        try:
            if not open(comm).read().startswith("MHD"):
                continue
            f = open(os.path.join(os.path.dirname(comm), "stat")).read().rsplit(")", 1)[1].split()
            cpu[comm.split("/")[4]] = (int(f[11]) + int(f[12])) / tick
        except OSError:
            pass
    return cpu


def http_rates(classic):
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    if classic:
        os.environ["SIP_HTTP_JSON_CLASSIC"] = "1"
    try:
        srv = Sipd([{"name": "cls", "model_path": CLS}],
                   "  http: 127.0.0.1:%d\n  http_threads: 2\n" % port)
    finally:
        os.environ.pop("SIP_HTTP_JSON_CLASSIC", None)
    url = "http://127.0.0.1:%d" % port
    res = {}
    with srv:
        for c in (1, 8):
            before = http_threads_cpu(srv.proc.pid)
            r = sip_bench(url, "cls", ["x:float32:1,3,48,192=random"], "--concurrency", str(c),
                          "--http-format", "json", window_ms=1500, max_windows=4)
            after = http_threads_cpu(srv.proc.pid)
            res[c] = (r["throughput_rps"], None,
                      sorted(after[t] - before.get(t, 0) for t in after))
    return res


print("== decode, one core (27,648 float32 values); target fast <= 1 ms, >= 300 MB/s")
for label, r in decode_rates():
    print("%-24s %7d bytes  fast %6.0f us %5.0f MB/s   classic %6.0f us %4.0f MB/s   ratio %4.1fx"
          % (label, r["bytes"], r["fast_us"], r["fast_mb_s"], r["classic_us"], r["classic_mb_s"],
             r["classic_us"] / r["fast_us"]))
    print("%-24s encode back as a JSON response: %6.0f us %5.0f MB/s" %
          ("", r["encode_us"], r["encode_mb_s"]))

print("== HTTP JSON infer, PP-OCR cls 1x3x48x192 (http_threads 2, %d cores)" % os.cpu_count())
fast, classic = http_rates(False), http_rates(True)
for c in (1, 8):
    print("concurrency %d: fast %6.1f req/s  classic %6.1f req/s  ratio %4.2fx" %
          (c, fast[c][0], classic[c][0], fast[c][0] / classic[c][0]))
for label, res in (("fast", fast), ("classic", classic)):
    cpu = res[8][2]
    print("concurrency 8, %-7s CPU s of the HTTP threads: %s" %
          (label, "  ".join("%.2f" % s for s in cpu)))
print("load average: %.2f %.2f %.2f" % os.getloadavg())
