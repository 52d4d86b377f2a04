#!/usr/bin/python3
"""Shared memory on the native protocol: the round trip of a float32 tensor
through an identity model, 4 KB and 4 MB, three ways, measured in one run:

  in-process  the ONNX Identity model called through sip's ONNX Runtime
              backend (bench_inproc), no transport at all;
  socket      SessionClient over the unix socket, the tensor inline in the
              frames both ways;
  shm         SessionClient with a memfd region: the input sits in the region
              (written in place by numpy), travels by reference, and the
              server writes the output into the region, read back as a numpy
              view.

Two identity models: "onnx" (ONNX Identity run by ONNX Runtime, which writes
its output straight into the destination in the region: its 4 MB copy from
input to output is the model's own work, as in-process) and "builtin" (sip's
builtin identity backend, whose output is a view of its input, copied into the
destination by the server). "shm-in-place" directs the output over the input's
own bytes: ONNX Runtime's Identity then copies nothing, and neither does the
server. One request at a time; p50 of each.

Target: the 4 MB round trip over shared memory within 1.2x of the 4 KB one.
"""
import os
import sys
import tempfile
import time

import numpy as np

from common import Sipd, inproc

from cann_sip import InferenceRequest, SessionClient  # noqa: E402 (common sets the path)

SIZES = {"4KB": 1024, "4MB": 1024 * 1024}  # float32 elements
N = int(os.environ.get("SHM_BENCH_N", "400"))


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


def p50_us(fn, n):
    for _ in range(max(10, n // 10)):  # warm-up
        fn()
    lat = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        lat.append(time.perf_counter_ns() - t0)
    lat.sort()
    return lat[n // 2] / 1e3


def run(endpoint, pool, count, mode, region=None):
    c = SessionClient(endpoint, timeout_s=60)
    try:
        x = np.arange(count, dtype=np.float32)
        if mode == "socket":
            def call():
                r = c.infer(InferenceRequest(pool, {"input": x}))
                assert r.outputs["output"].shape == (count,)
        else:
            nbytes = count * 4
            reg = c.create_shared_memory("bench", 2 * nbytes)
            xin = reg.ndarray((count,), np.float32, 0)
            xin[:] = x
            dst = reg.output(0 if mode == "shm-in-place" else nbytes, nbytes)

            def call():
                r = c.infer(InferenceRequest(pool, {"input": xin}, outputs={"output": dst}))
                assert r.outputs["output"].shape == (count,)
        call()
        return p50_us(call, N if count < 100000 else max(N // 2, 50))
    finally:
        c.close()


def main():
    tmp = tempfile.mkdtemp(prefix="sipshm")
    model = identity_model(os.path.join(tmp, "identity.onnx"))
    base = {k: inproc("latency", model, "input", str(n), N)["p50_us"] for k, n in SIZES.items()}
    res = {}
    with Sipd([{"name": "onnx", "model_path": model, "pool_size": 1},
               {"name": "builtin", "backend": "builtin", "pool_size": 1}]) as s:
        for pool in ("onnx", "builtin"):
            modes = ["socket", "shm", "shm-in-place"]
            for mode in modes:
                for k, n in SIZES.items():
                    res[pool, mode, k] = run(s.endpoint, pool, n, mode)
    load = os.getloadavg()
    print("float32 identity round trips, one request at a time, p50 (load avg %.2f %.2f %.2f, "
          "%d CPUs)" % (load + (os.cpu_count(),)))
    print("%-28s %12s %12s %10s" % ("", "4 KB", "4 MB", "4MB/4KB"))
    print("%-28s %9.1f us %9.1f us %9.2fx" % ("in-process ORT (baseline)", base["4KB"],
                                               base["4MB"], base["4MB"] / base["4KB"]))
    for (pool, mode) in sorted({(p, m) for p, m, _ in res}, key=lambda t: (t[0] != "onnx", t[1])):
        a, b = res[pool, mode, "4KB"], res[pool, mode, "4MB"]
        print("%-28s %9.1f us %9.1f us %9.2fx" % ("%s over %s" % (pool, mode), a, b, b / a))
    print()
    for pool in ("onnx", "builtin"):
        sock, shm = res[pool, "socket", "4MB"], res[pool, "shm", "4MB"]
        print("%-8s 4 MB: socket/shm %.2fx; shm vs in-process %.2fx (+%.1f us)"
              % (pool, sock / shm, shm / base["4MB"], shm - base["4MB"]))
    ok = True
    for pool, mode in [("onnx", "shm"), ("onnx", "shm-in-place"), ("builtin", "shm"),
                       ("builtin", "shm-in-place")]:
        ratio = res[pool, mode, "4MB"] / res[pool, mode, "4KB"]
        hit = ratio <= 1.2
        ok &= hit
        print("target: %s over %s, 4 MB within 1.2x of 4 KB: %.2fx %s"
              % (pool, mode, ratio, "PASS" if hit else "FAIL"))
    return 0 if ok or os.environ.get("SHM_BENCH_STRICT") != "1" else 1


if __name__ == "__main__":
    sys.exit(main())
