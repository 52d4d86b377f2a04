#!/usr/bin/python3
"""Benchmark 1 (issue 4): per-request overhead of the native unix socket.

The tiny model (y = 2x + 1, float32 [1, 4]) one request at a time through
sipd over the unix socket (C client, `sip bench --concurrency 1`) against the
same model called in-process through sip's ONNX Runtime backend, measured in
the same run. Targets: p50 adds at most 25 us; p99 <= 3 x p50.
"""
from common import Sipd, ensure_tiny, inproc, sip_bench

tiny = ensure_tiny()
base = inproc("latency", tiny, "x", "1,4", 50000)
with Sipd([{"name": "tiny", "model_path": tiny, "pool_size": 1}]) as s:
    r = sip_bench(s.endpoint, "tiny", ["x:float32:1,4=ones"], "--concurrency", "1")
p50, p99 = r["latency_ms"]["p50"] * 1000, r["latency_ms"]["p99"] * 1000
print("in-process ORT : p50 %7.1f us  p99 %7.1f us" % (base["p50_us"], base["p99_us"]))
print("unix socket    : p50 %7.1f us  p99 %7.1f us  (%.0f req/s, stable=%s)"
      % (p50, p99, r["throughput_rps"], r["stable"]))
print("added p50      : %7.1f us   target <= 25 us: %s" % (p50 - base["p50_us"],
                                                          "PASS" if p50 - base["p50_us"] <= 25 else "FAIL"))
print("socket p99/p50 : %7.2f      target <= 3: %s" % (p99 / p50, "PASS" if p99 <= 3 * p50 else "FAIL"))
print("ratio socket/in-process p50: %.2f" % (p50 / base["p50_us"]))
