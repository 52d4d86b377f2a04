#!/usr/bin/python3
"""JSON tensor benchmark: KServe v2 requests whose input is a JSON "data"
array of 27,648 floats (the PP-OCR cls input, 1x3x48x192 float32).

1. Decoding on one core (bench_json_decode, in process): the fast path
   (src/http/kserve_numbers.c) against the classic jansson decoder, for a body
   as Python's json module writes it (17 significant digits) and one with 6
   digits; MB/s of JSON text and the ratio fast / classic; and the time to
   encode the tensor back as a JSON response. Each round runs the two bodies.
2. HTTP JSON inference with the real cls model at concurrency 1 and 8
   (`sip bench --http-format json`, one connection per outstanding request),
   the server with the fast path against the same server forced to the classic
   decoder (SIP_HTTP_JSON_CLASSIC=1), both running at once and driven in turn
   round by round; and the CPU seconds each HTTP event-loop thread used at
   concurrency 8 in the last round, to show the connections spread over both
   threads.
Figures are medians over the rounds of each round's value.
"""
import glob
import json
import os
import socket
import subprocess
import tempfile

import numpy as np

from common import BUILD, CLS, ROUNDS, Sipd, interleave, ratios, report, sip_bench

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


def server(classic):
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    srv = Sipd([{"name": "cls", "model_path": CLS}],
               "  http: 127.0.0.1:%d\n  http_threads: 2\n" % port,
               env={"SIP_HTTP_JSON_CLASSIC": "1"} if classic else None)
    srv.url = "http://127.0.0.1:%d" % port
    return srv


def http_rate(srv, c, cpu):
    def run():
        before = http_threads_cpu(srv.proc.pid)
        r = sip_bench(srv.url, "cls", ["x:float32:1,3,48,192=random"], "--concurrency", str(c),
                      "--http-format", "json", window_ms=1000, max_windows=3)
        after = http_threads_cpu(srv.proc.pid)
        cpu[c] = sorted(after[t] - before.get(t, 0) for t in after)
        return r["throughput_rps"]
    return run


print("== decode, one core (27,648 float32 values); target fast <= 1 ms, >= 300 MB/s")
dec = interleave(ROUNDS, {"decode": decode_rates})["decode"]
for i, (label, _) in enumerate(dec[0]):
    rs = [d[i][1] for d in dec]
    print("%-24s %7d bytes  fast %s us  classic %s us  encode %s us"
          % (label, rs[0]["bytes"], " ".join("%6.0f" % r["fast_us"] for r in rs),
             " ".join("%6.0f" % r["classic_us"] for r in rs),
             " ".join("%6.0f" % r["encode_us"] for r in rs)))
    report("%s: fast decode" % label, [r["fast_us"] for r in rs], "<= 1000", "%.0f", " us")
    report("%s: fast decode rate" % label, [r["fast_mb_s"] for r in rs], ">= 300", "%.0f",
           " MB/s")
    report("%s: classic / fast decode time" % label,
           [r["classic_us"] / r["fast_us"] for r in rs], None, "%.1f")

print("== HTTP JSON infer, PP-OCR cls 1x3x48x192 (http_threads 2, %d cores)" % os.cpu_count())
cpu = {"fast": {}, "classic": {}}
with server(False) as fast, server(True) as classic:
    fns = {}
    for c in (1, 8):
        fns[("fast", c)] = http_rate(fast, c, cpu["fast"])
        fns[("classic", c)] = http_rate(classic, c, cpu["classic"])
    r = interleave(ROUNDS, fns)
for c in (1, 8):
    print("concurrency %d: fast %s req/s  classic %s req/s"
          % (c, " ".join("%6.1f" % v for v in r[("fast", c)]),
             " ".join("%6.1f" % v for v in r[("classic", c)])))
    report("HTTP JSON cls at concurrency %d: fast / classic throughput" % c,
           ratios(r[("fast", c)], r[("classic", c)]), None, "%.2f")
for label in ("fast", "classic"):
    print("concurrency 8, %-7s CPU s of the HTTP threads (last round): %s" %
          (label, "  ".join("%.2f" % v for v in cpu[label][8])))
