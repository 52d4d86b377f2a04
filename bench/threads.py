#!/usr/bin/python3
"""Benchmark 4b (issue 4): one global ONNX Runtime thread pool vs a pool per
model, on this machine's cores.

Four pools, each its own copy of the angle classifier with one session, all
driven at once (concurrency 4 each). A: every model shares the global
intra-op pool (sip's default). B: every model gets its own intra-op pool of
2 threads (ONNX Runtime's default behaviour), so 4 x 2 threads compete for
the cores. Both sipds run at once and every round drives each in turn (the
order turning each round); prints each one's total throughput and worst
p99, and the medians of each round's ratio A / B.
(Memory of shared vs separate weights is bench/memory_sharing.py.)
"""
import json

from common import CLS, ROUNDS, Sipd, interleave, ratios, report, sip_bench

inp = ["x:float32:1,3,48,192=random"]


def server(own):
    opts = {"own_intra_op_threads": 2} if own else {}
    pools = [{"name": "m%d" % i, "model_path": CLS, "pool_size": 1, "backend_options": opts}
             for i in range(4)]
    return Sipd(pools, "  execution_slots: 4\n")


def run(s):
    def go():
        procs = [sip_bench(s.endpoint, "m%d" % i, inp, "--concurrency", "4", "--window-ms",
                           "1000", "--max-windows", "3", background=True) for i in range(4)]
        res = [json.loads(p.communicate()[0]) for p in procs]
        return sum(r["throughput_rps"] for r in res), max(r["latency_ms"]["p99"] for r in res)
    return go


with server(False) as g, server(True) as o:
    r = interleave(ROUNDS, {"global": run(g), "own": run(o)})
for k, label in (("global", "global pool"), ("own", "pool per model")):
    print("%-15s: %s items/s total, worst p99 %s ms"
          % (label, " ".join("%7.1f" % x[0] for x in r[k]), " ".join("%7.2f" % x[1] for x in r[k])))
report("global / per-model pools: throughput", ratios([x[0] for x in r["global"]],
                                                      [x[0] for x in r["own"]]), None, "%.2f")
report("global / per-model pools: worst p99", ratios([x[1] for x in r["global"]],
                                                     [x[1] for x in r["own"]]), None, "%.2f")
