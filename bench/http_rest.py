#!/usr/bin/python3
"""HTTP benchmark (issue 3): round-trip latency of the tiny model, one request
at a time, over KServe v2 HTTP with JSON tensors and with binary tensors
(`sip bench`'s HTTP client: kept-alive plain sockets, the request encoded
once, as light as wrk; tests/integration/test_bench_vs_wrk.py holds it to
wrk's figure), over the native unix socket (`sip bench`, C client), and in
process (the model run straight through the ONNX Runtime backend,
bench_inproc), all against the same sipd in one run, taking turns round by
round. Prints each one's p50 and p99 and the figures HTTP / native and
X / in-process, medians over the rounds of each round's ratio.
"""
import socket

from common import (ROUNDS, Sipd, ensure_tiny, inproc, interleave, ratios, report,
                    sip_bench)

tiny = ensure_tiny()
with socket.socket() as sk:
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
http = "http://127.0.0.1:%d" % port
inp = ["x:float32:1,4=ones"]


def over(ep, *extra):
    def run():
        r = sip_bench(ep, "tiny", inp, "--concurrency", "1", *extra, window_ms=700,
                      max_windows=3)
        return (r["latency_ms"]["p50"] * 1000, r["latency_ms"]["p99"] * 1000)
    return run


def in_process():
    b = inproc("latency", tiny, "x", "1,4", 20000)
    return (b["p50_us"], b["p99_us"])


with Sipd([{"name": "tiny", "model_path": tiny}], "  http: 127.0.0.1:%d\n" % port) as s:
    r = interleave(ROUNDS, {"in-process ORT": in_process,
                            "native unix": over(s.endpoint),
                            "HTTP binary": over(http, "--http-format", "binary"),
                            "HTTP JSON": over(http, "--http-format", "json")})
p50 = {k: [x[0] for x in v] for k, v in r.items()}
for k, v in r.items():
    print("%-15s p50 %s us   p99 %s us" % (k, " ".join("%7.1f" % x[0] for x in v),
                                          " ".join("%7.1f" % x[1] for x in v)))
for k in ("HTTP binary", "HTTP JSON"):
    report("%s / native unix p50" % k, ratios(p50[k], p50["native unix"]), None, "%.2f")
for k in ("native unix", "HTTP binary", "HTTP JSON"):
    report("%s / in-process p50" % k, ratios(p50[k], p50["in-process ORT"]), None, "%.1f")
