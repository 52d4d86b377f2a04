#!/usr/bin/python3
"""Pipeline benchmarks (issue 5).

1. Per-hop overhead: a 3-stage pipeline of tiny models (y = 2x + 1, three
   times) through sipd over the unix socket, against the same three models
   called one after the other in-process (measured in the same run). Target:
   the pipeline's p50 adds at most 50 us per hop over the in-process chain
   (3 hops: the request into the first stage, and the two between stages).
2. Pipelining: a 3-stage pipeline whose middle stage is the slowest (the
   angle classifier; the others are tiny): throughput at concurrency 8 vs
   that slowest stage alone at concurrency 8 (target >= 0.8 x), and vs the
   same pipeline driven one request at a time.
"""
from common import CLS, Sipd, ensure_tiny, inproc, sip_bench

tiny = ensure_tiny()
base = inproc("chain", ",".join([tiny] * 3), "x", "1,4", 20000)
pools = [{"name": "t%d" % i, "model_path": tiny} for i in range(3)]
extra = ("pipeline_sessions:\n  - name: three\n    stages:\n"
         "      - {name: a, pool: t0}\n      - {name: b, pool: t1, input_mapping: {x: a.y}}\n"
         "      - {name: c, pool: t2, input_mapping: {x: b.y}}\n")
with Sipd(pools, pipelines=extra) as s:
    pl = sip_bench(s.endpoint, "three", ["x:float32:1,4=ones"], "--concurrency", "1")
    one = sip_bench(s.endpoint, "t0", ["x:float32:1,4=ones"], "--concurrency", "1")
p50 = pl["latency_ms"]["p50"] * 1000
print("in-process chain of 3 : p50 %7.1f us  p99 %7.1f us" % (base["p50_us"], base["p99_us"]))
print("pipeline over socket  : p50 %7.1f us  p99 %7.1f us" % (p50, pl["latency_ms"]["p99"] * 1000))
print("single pool over socket: p50 %7.1f us" % (one["latency_ms"]["p50"] * 1000))
per_hop = (p50 - base["p50_us"]) / 3
print("added per hop = %.1f us   target <= 50: %s" % (per_hop, "PASS" if per_hop <= 50 else "FAIL"))

inp = ["x:float32:1,3,48,192=random"]
pools = [{"name": "pre", "model_path": tiny}, {"name": "cls", "model_path": CLS, "pool_size": 2},
         {"name": "post", "model_path": tiny}]
extra = ("pipeline_sessions:\n  - name: p3\n    stages:\n"
         "      - {name: a, type: transform, operation: softmax, input_mapping: {input: pipeline.x}}\n"
         "      - {name: b, pool: cls, input_mapping: {x: a.output}}\n"
         "      - {name: c, type: transform, operation: softmax, input_mapping: {input: b.softmax_0.tmp_0}}\n")
with Sipd(pools, pipelines=extra) as s:
    slow = sip_bench(s.endpoint, "cls", inp, "--concurrency", "8")
    # Only the final output comes back (stage outputs are on request).
    piped = sip_bench(s.endpoint, "p3", inp, "--concurrency", "8", "-o", "output")
    serial = sip_bench(s.endpoint, "p3", inp, "--concurrency", "1", "-o", "output")
r1 = piped["throughput_rps"] / slow["throughput_rps"]
r2 = piped["throughput_rps"] / serial["throughput_rps"]
print("slowest stage alone (conc 8): %7.1f req/s" % slow["throughput_rps"])
print("pipeline (conc 8)           : %7.1f req/s" % piped["throughput_rps"])
print("pipeline one at a time      : %7.1f req/s" % serial["throughput_rps"])
print("pipeline / slowest stage = %.2f   target >= 0.8: %s" % (r1, "PASS" if r1 >= 0.8 else "FAIL"))
print("pipelined / one at a time = %.2f" % r2)
