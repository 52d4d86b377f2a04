#!/usr/bin/python3
"""Benchmark 2 (issue 4): dynamic batching on the PP-OCR angle classifier.

Ceiling: the classifier run in-process through ONNX Runtime at batch sizes
1..32 (best items/s), measured in this run. Then sipd serves the same model
as two pools: `batched` (dynamic_batching, max_batch_size 32) and `plain`
(no batching, 2 sessions), each driven at concurrency 32 with single-item
requests by `sip bench`. Targets: batched >= 0.85 x ceiling; batched > plain.
"""
from common import CLS, Sipd, inproc, sip_bench

CONC = 32
ceiling = {}
for b in (1, 2, 4, 8, 16, 32):
    ceiling[b] = inproc("throughput", CLS, "x", "%d,3,48,192" % b, 3)["items_per_s"]
best_b = max(ceiling, key=ceiling.get)
inp = ["x:float32:1,3,48,192=random"]
with Sipd([{"name": "batched", "model_path": CLS, "pool_size": 1,
            "dynamic_batching": {"max_batch_size": 32, "max_queue_delay_us": 2000}},
           {"name": "plain", "model_path": CLS, "pool_size": 2}]) as s:
    rb = sip_bench(s.endpoint, "batched", inp, "--concurrency", str(CONC))
    rp = sip_bench(s.endpoint, "plain", inp, "--concurrency", str(CONC))
    st = s.status("batched")
mean_batch = st["batch_sizes"]["sum"] / max(1, st["batch_sizes"]["count"])
print("in-process ORT items/s by batch: " + "  ".join("%d:%.0f" % kv for kv in ceiling.items()))
print("ceiling (batch %d)      : %8.1f items/s" % (best_b, ceiling[best_b]))
print("sipd batched  (conc %d) : %8.1f items/s  p99 %.1f ms  mean batch %.1f" %
      (CONC, rb["throughput_rps"], rb["latency_ms"]["p99"], mean_batch))
print("sipd plain    (conc %d) : %8.1f items/s  p99 %.1f ms" %
      (CONC, rp["throughput_rps"], rp["latency_ms"]["p99"]))
r1 = rb["throughput_rps"] / ceiling[best_b]
r2 = rb["throughput_rps"] / rp["throughput_rps"]
print("batched / ceiling = %.3f   target >= 0.85: %s" % (r1, "PASS" if r1 >= 0.85 else "FAIL"))
print("batched / plain   = %.3f   target > 1: %s" % (r2, "PASS" if r2 > 1 else "FAIL"))
