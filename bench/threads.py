#!/usr/bin/python3
"""Benchmark 4b (issue 4): one global ONNX Runtime thread pool vs a pool per
model, on this machine's cores.

Four pools, each its own copy of the angle classifier with one session, all
driven at once (concurrency 4 each). A: every model shares the global
intra-op pool (sip's default). B: every model gets its own intra-op pool of
2 threads (ONNX Runtime's default behaviour), so 4 x 2 threads compete for
the cores. Prints the total throughput and p99 of each and their ratio.
(Memory of shared vs separate weights is bench/memory_sharing.py.)
"""
import time

from common import CLS, Sipd, sip_bench

inp = ["x:float32:1,3,48,192=random"]


def run(own):
    opts = {"own_intra_op_threads": 2} if own else {}
    pools = [{"name": "m%d" % i, "model_path": CLS, "pool_size": 1, "backend_options": opts}
             for i in range(4)]
    with Sipd(pools, "  execution_slots: 4\n") as s:
        procs = [sip_bench(s.endpoint, "m%d" % i, inp, "--concurrency", "4", "--window-ms",
                           "1500", "--max-windows", "4", background=True) for i in range(4)]
        import json
        res = [json.loads(p.communicate()[0]) for p in procs]
    return sum(r["throughput_rps"] for r in res), max(r["latency_ms"]["p99"] for r in res)


ga, gp = run(False)
time.sleep(1)
oa, op = run(True)
print("global pool     : %8.1f items/s total, worst p99 %7.2f ms" % (ga, gp))
print("pool per model  : %8.1f items/s total, worst p99 %7.2f ms" % (oa, op))
print("global / per-model throughput = %.2f, p99 = %.2f" % (ga / oa, gp / op))
