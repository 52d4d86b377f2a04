#!/usr/bin/python3
"""Benchmark 1 (issues 4 and 10): per-request overhead of the native unix socket.

The tiny model (y = 2x + 1, float32 [1, 4]) one request at a time through
sipd over the unix socket (C client, `sip bench --concurrency 1`) against the
same model called in-process through sip's ONNX Runtime backend, and against
a bare unix-socket ping-pong of a request-sized message (two threads, the
answering one waiting in epoll as sipd's transport does), all measured in the
same run. Targets: p50 adds at most 25 us over in-process; p50 <= ping-pong +
in-process + 10 us; p99 <= 3 x p50.
"""
import json
import os
import subprocess

from common import BUILD, Sipd, ensure_tiny, inproc, sip_bench

tiny = ensure_tiny()
base = inproc("latency", tiny, "x", "1,4", 50000)
# An INFER_REQUEST for "tiny" with one [1, 4] float32 input is ~100 bytes.
pp = json.loads(subprocess.run([os.path.join(BUILD, "bench_pingpong"), "112", "50000"],
                               check=True, capture_output=True, text=True).stdout)
with Sipd([{"name": "tiny", "model_path": tiny, "pool_size": 1}]) as s:
    r = sip_bench(s.endpoint, "tiny", ["x:float32:1,4=ones"], "--concurrency", "1")
p50, p99 = r["latency_ms"]["p50"] * 1000, r["latency_ms"]["p99"] * 1000
print("in-process ORT : p50 %7.1f us  p99 %7.1f us" % (base["p50_us"], base["p99_us"]))
print("ping-pong      : p50 %7.1f us  p99 %7.1f us" % (pp["p50_us"], pp["p99_us"]))
print("unix socket    : p50 %7.1f us  p99 %7.1f us  (%.0f req/s, stable=%s)"
      % (p50, p99, r["throughput_rps"], r["stable"]))
print("added p50      : %7.1f us   target <= 25 us: %s" % (p50 - base["p50_us"],
                                                          "PASS" if p50 - base["p50_us"] <= 25 else "FAIL"))
floor = pp["p50_us"] + base["p50_us"]
print("over ping-pong + in-process: %7.1f us   target <= 10 us: %s"
      % (p50 - floor, "PASS" if p50 - floor <= 10 else "FAIL"))
print("socket p99/p50 : %7.2f      target <= 3: %s" % (p99 / p50, "PASS" if p99 <= 3 * p50 else "FAIL"))
print("ratio socket/in-process p50: %.2f" % (p50 / base["p50_us"]))
print("load average   : %.2f %.2f %.2f" % os.getloadavg())
