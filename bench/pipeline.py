#!/usr/bin/python3
"""Pipeline benchmarks (issue 5).

1. Per-hop overhead: a 3-stage pipeline of tiny models (y = 2x + 1, three
   pools t0, t1, t2) through sipd over the unix socket, against the same
   three models called one after the other in-process (bench_inproc chain),
   and a single tiny pool over the socket for scale. Target: the pipeline's
   p50 adds at most 50 us per hop over the in-process chain (3 hops: the
   request into the first stage, and the two between stages).
2. Pipelining: a 3-stage pipeline whose middle stage is the only model (the
   angle classifier, pool `cls` with 2 sessions) between two softmax
   transforms: throughput at concurrency 8 against that model's pool alone
   at concurrency 8 (target >= 0.8 x), and against the same pipeline driven
   one request at a time.

Each part measures its sides in every round, the order turning each round;
figures are medians over the rounds of each round's value.
"""
from common import CLS, ROUNDS, Sipd, ensure_tiny, inproc, interleave, ratios, report, sip_bench

tiny = ensure_tiny()
X = ["x:float32:1,4=ones"]


def p50(s, pool):
    return lambda: sip_bench(s.endpoint, pool, X, "--concurrency", "1", window_ms=700,
                             max_windows=3)["latency_ms"]["p50"] * 1000


pools = [{"name": "t%d" % i, "model_path": tiny} for i in range(3)]
extra = ("pipeline_sessions:\n  - name: three\n    stages:\n"
         "      - {name: a, pool: t0}\n      - {name: b, pool: t1, input_mapping: {x: a.y}}\n"
         "      - {name: c, pool: t2, input_mapping: {x: b.y}}\n")
with Sipd(pools, pipelines=extra) as s:
    r = interleave(ROUNDS, {
        "chain": lambda: inproc("chain", ",".join([tiny] * 3), "x", "1,4", 20000)["p50_us"],
        "pipeline": p50(s, "three"), "single": p50(s, "t0")})
for k, label in (("chain", "in-process chain of 3"), ("pipeline", "pipeline over socket"),
                 ("single", "single pool over socket")):
    print("%-24s: p50 %s us" % (label, " ".join("%7.1f" % v for v in r[k])))
report("pipeline p50 added per hop over the in-process chain",
       [(p - c) / 3 for p, c in zip(r["pipeline"], r["chain"])], "<= 50", "%.1f", " us")

inp = ["x:float32:1,3,48,192=random"]
extra = ("pipeline_sessions:\n  - name: p3\n    stages:\n"
         "      - {name: a, type: transform, operation: softmax,"
         " input_mapping: {input: pipeline.x}}\n"
         "      - {name: b, pool: cls, input_mapping: {x: a.output}}\n"
         "      - {name: c, type: transform, operation: softmax,"
         " input_mapping: {input: b.softmax_0.tmp_0}}\n")


def rate(s, pool, conc, *extra):
    return lambda: sip_bench(s.endpoint, pool, inp, "--concurrency", str(conc), *extra,
                             window_ms=1000, max_windows=3)["throughput_rps"]


with Sipd([{"name": "cls", "model_path": CLS, "pool_size": 2}], pipelines=extra) as s:
    # Only the final output comes back (stage outputs are on request).
    r = interleave(ROUNDS, {"slow": rate(s, "cls", 8), "piped": rate(s, "p3", 8, "-o", "output"),
                            "serial": rate(s, "p3", 1, "-o", "output")})
for k, label in (("slow", "model stage alone (conc 8)"), ("piped", "pipeline (conc 8)"),
                 ("serial", "pipeline one at a time")):
    print("%-27s: %s req/s" % (label, " ".join("%7.1f" % v for v in r[k])))
report("pipeline / its model stage alone", ratios(r["piped"], r["slow"]), ">= 0.8", "%.2f")
report("pipelined / one at a time", ratios(r["piped"], r["serial"]), None, "%.2f")
