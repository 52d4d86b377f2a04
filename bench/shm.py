#!/usr/bin/python3
"""Shared memory on the native protocol: the round trip of a float32 tensor
through an identity model, 4 KB and 4 MB, measured in one run with the C
client (`sip bench --concurrency 1`, one request at a time), three ways:

  in-process    the ONNX Identity model called through sip's ONNX Runtime
                backend (bench_inproc), no transport at all;
  socket        the tensor inline in the frames both ways;
  shm           `sip bench --shm separate`: the input sits in a memfd region
                registered on the connection and travels by reference; the
                server writes the output into the region after it;
  shm-in-place  `sip bench --shm in-place`: the output is directed over the
                input's own bytes.

Two identity models: "onnx" (ONNX Identity run by ONNX Runtime, which writes
its output straight into the destination in the region: its 4 MB copy from
input to output is the model's own work, as in-process) and "builtin" (sip's
builtin identity backend, whose output is a view of its input, copied into the
destination by the server). In place, ONNX Runtime's Identity copies nothing,
and neither does the server.

Every round measures every (model, way, size) once, the order turning each
round; each figure is the median over the rounds of that round's ratio.
Target: the 4 MB round trip over shared memory within 1.2x of the 4 KB one,
judged in place, where nothing is copied and the figure is what passing a
tensor by reference costs. With a separate output the 4 MB answer is written
once (by ONNX Runtime's Identity, its own work, ~0.3 ms here, 15x the 4 KB
round trip; by the server for the builtin identity), so there the ratio is
reported, and for "onnx" also the 4 MB round trip over the 4 KB one plus
the model's own in-process 4 MB time: what the transport adds to the work.
"""
import os
import shutil
import tempfile

from common import ROUNDS, Sipd, inproc, interleave, ratios, report, sip_bench

SIZES = {"4KB": 1024, "4MB": 1024 * 1024}  # float32 elements
MODES = {"socket": [], "shm": ["--shm", "separate"], "shm-in-place": ["--shm", "in-place"]}


def identity_model(path):
    import onnx
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "identity",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def p50(endpoint, pool, n, mode):
    def run():
        r = sip_bench(endpoint, pool, ["input:float32:%d=ones" % n], "--concurrency", "1",
                      "-o", "output", *MODES[mode], window_ms=400, max_windows=3)
        assert r["errors"] == 0, r
        return r["latency_ms"]["p50"] * 1000
    return run


def main():
    tmp = tempfile.mkdtemp(prefix="sipshm")
    try:
        model = identity_model(os.path.join(tmp, "identity.onnx"))
        with Sipd([{"name": "onnx", "model_path": model, "pool_size": 1},
                   {"name": "builtin", "backend": "builtin", "pool_size": 1}]) as s:
            fns = {("in-process", k): (lambda n=n: inproc("latency", model, "input", str(n),
                                                           400)["p50_us"])
                   for k, n in SIZES.items()}
            for pool in ("onnx", "builtin"):
                for mode in MODES:
                    for k, n in SIZES.items():
                        fns[(pool, mode, k)] = p50(s.endpoint, pool, n, mode)
            res = interleave(ROUNDS, fns)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("float32 identity round trips, one request at a time, p50 us per round:")
    for key, v in res.items():
        print("  %-32s %s" % (" ".join(key), " ".join("%9.1f" % x for x in v)))
    for pool in ("onnx", "builtin"):
        for mode in ("shm", "shm-in-place"):
            report("%s over %s: 4 MB / 4 KB p50" % (pool, mode),
                   ratios(res[(pool, mode, "4MB")], res[(pool, mode, "4KB")]),
                   "<= 1.2" if mode == "shm-in-place" else None, "%.2f")
        if pool == "onnx":
            report("onnx over shm: 4 MB / (4 KB + in-process 4 MB) p50",
                   ratios(res[(pool, "shm", "4MB")],
                          [a + b for a, b in zip(res[(pool, "shm", "4KB")],
                                                 res[("in-process", "4MB")])]), None, "%.2f")
        report("%s 4 MB: socket / shm p50" % pool,
               ratios(res[(pool, "socket", "4MB")], res[(pool, "shm", "4MB")]), None, "%.2f")
        report("%s 4 MB: shm / in-process p50" % pool,
               ratios(res[(pool, "shm", "4MB")], res[("in-process", "4MB")]), None, "%.2f")


if __name__ == "__main__":
    main()
