#!/usr/bin/python3
"""HTTP benchmark (issue 3): round-trip latency of the tiny model, one request
at a time, over KServe v2 HTTP with JSON tensors, with binary tensors, and
over the native unix socket; each against the in-process baseline measured
in the same run (the model run straight through the ONNX Runtime backend).
"""
import socket

from common import Sipd, ensure_tiny, inproc, sip_bench

tiny = ensure_tiny()
base = inproc("latency", tiny, "x", "1,4", 20000)
with socket.socket() as sk:
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
http = "http://127.0.0.1:%d" % port
inp = ["x:float32:1,4=ones"]
with Sipd([{"name": "tiny", "model_path": tiny}], "  http: 127.0.0.1:%d\n" % port) as s:
    rows = [("in-process ORT", base["p50_us"], base["p99_us"])]
    for label, ep, extra in (("native unix", s.endpoint, []),
                             ("HTTP binary", http, ["--http-format", "binary"]),
                             ("HTTP JSON", http, ["--http-format", "json"])):
        r = sip_bench(ep, "tiny", inp, "--concurrency", "1", *extra)
        rows.append((label, r["latency_ms"]["p50"] * 1000, r["latency_ms"]["p99"] * 1000))
for label, p50, p99 in rows:
    print("%-15s p50 %7.1f us  p99 %7.1f us   p50 ratio to in-process %6.1f" %
          (label, p50, p99, p50 / base["p50_us"]))
