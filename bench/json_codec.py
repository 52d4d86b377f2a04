#!/usr/bin/python3
"""JSON tensor text, written against read, on one core (bench_json_codec, in
process): a KServe request whose input is a JSON "data" array of floats as
Python's json module writes it (17 significant digits) is decoded (the fast
path of src/http/kserve_numbers.c), its tensor encoded back as a JSON response
(sip__ks_encode: the shortest text that reads back to the same float,
src/core/fmt.c), and that response's own data decoded again; and the elements
alone written by the former formatter (printf's %.9g / %.17g text,
sip__ks_format_g) and by the shortest one.

Sizes: 1,024, 27,648 (the PP-OCR cls tensor, 1x3x48x192) and 262,144 float32
values of a normal distribution, 27,648 of the cls input's 256 levels, and
27,648 float64. The five timings interleave inside each run (A B C D E A B
...), each in the thread's CPU time (other processes on a shared machine do
not count, though they still share its caches), and ROUNDS runs of every case
interleave too; each line gives the median over the rounds and their spread
(min-max), and marks a ratio "unstable" when the rounds disagree by more than
10% or fall on both sides of 1; the machine's load is printed. Target:
encoding 27,648 float32 takes no longer than decoding them (ratio <= 1),
reported with common.report (a row of `make bench`'s table), as is the
shortest formatter's time over the old one's at that size.
"""
import json
import os
import statistics
import subprocess
import tempfile

import numpy as np

from common import BUILD, ROUNDS as COMMON_ROUNDS, report

ROUNDS = max(5, COMMON_ROUNDS)
SHAPE = (1, 3, 48, 192)  # 27,648


def body(x):
    return json.dumps({"inputs": [{"name": "x", "shape": list(x.shape),
                                   "datatype": "FP32" if x.dtype == np.float32 else "FP64",
                                   "data": x.tolist()}]})


def cases():
    rng = np.random.default_rng(1)
    return [
        ("fp32 normal 1,024", rng.standard_normal((1, 1024)).astype(np.float32)),
        ("fp32 normal 27,648", rng.standard_normal(SHAPE).astype(np.float32)),
        ("fp32 cls levels 27,648",
         ((rng.integers(0, 256, SHAPE) / 255.0 - 0.5) / 0.5).astype(np.float32)),
        ("fp32 normal 262,144", rng.standard_normal((1, 262144)).astype(np.float32)),
        ("fp64 normal 27,648", rng.standard_normal(SHAPE)),
    ]


def run(path, samples):
    out = subprocess.run([os.path.join(BUILD, "bench_json_codec"), path, str(samples)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def spread(values, fmt="%.0f"):
    return ("median " + fmt + " [" + fmt + "-" + fmt + "]") % (
        statistics.median(values), min(values), max(values))


def ratio_line(ratios):
    m = statistics.median(ratios)
    unstable = (max(ratios) - min(ratios)) / m > 0.10 or (min(ratios) <= 1 < max(ratios))
    return "%s%s" % (spread(ratios, "%.2f"), "  UNSTABLE" if unstable else ""), m, unstable


load0 = os.getloadavg()
results = {}
with tempfile.TemporaryDirectory() as tmp:
    files = []
    for label, x in cases():
        path = os.path.join(tmp, "%d.json" % len(files))
        with open(path, "w") as f:
            f.write(body(x))
        # About 0.1 s of each timing per run, whatever the size.
        files.append((label, path, max(15, min(200, int(3e6 / x.size)))))
    for _ in range(ROUNDS):
        for label, path, samples in files:
            results.setdefault(label, []).append(run(path, samples))
load1 = os.getloadavg()

print("== JSON tensor text on one core: microseconds, %d interleaved rounds (median [min-max])"
      % ROUNDS)
for label, rs in results.items():
    r0 = rs[0]
    print("%s: %d bytes read (Python's json), %d written (shortest), %d with %%.9g/%%.17g"
          % (label, r0["bytes_in"], r0["bytes_out"], r0["bytes_fmt_old"] + r0["bytes_out"]
             - r0["bytes_fmt_new"]))
    print("  decode               %s" % spread([r["decode_us"] for r in rs], "%.1f"))
    print("  decode own response  %s" % spread([r["decode_own_us"] for r in rs], "%.1f"))
    print("  encode               %s" % spread([r["encode_us"] for r in rs], "%.1f"))
    print("  encode / decode      %s" % ratio_line([r["encode_us"] / r["decode_us"]
                                                    for r in rs])[0])
    print("  encode / decode own  %s" % ratio_line([r["encode_us"] / r["decode_own_us"]
                                                    for r in rs])[0])
    print("  elements, old %%g    %s" % spread([r["fmt_old_us"] for r in rs], "%.1f"))
    print("  elements, shortest   %s" % spread([r["fmt_new_us"] for r in rs], "%.1f"))
    print("  shortest / old       %s" % ratio_line([r["fmt_new_us"] / r["fmt_old_us"]
                                                    for r in rs])[0])
print("load average (1, 5, 15 min): %.2f %.2f %.2f before, %.2f %.2f %.2f after (%d cores)"
      % (load0 + load1 + (os.cpu_count(),)))
report("fp32 27,648: encode / decode (thread CPU time)",
       [r["encode_us"] / r["decode_us"] for r in results["fp32 normal 27,648"]], "<= 1", "%.2f",
       spread_limit=0.10)
report("fp32 27,648: shortest / old %g formatter",
       [r["fmt_new_us"] / r["fmt_old_us"] for r in results["fp32 normal 27,648"]], None, "%.2f",
       spread_limit=0.10)
