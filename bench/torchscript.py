#!/usr/bin/python3
"""Benchmark (issue 18): the TorchScript backend against libtorch in process.

One TorchScript MLP (Linear 64 -> 256 -> 256 -> 10 with ReLUs, float32),
made here with torch.jit.script, served by sipd's TorchScript backend
(backend: torchscript, intra_op_threads 1) and called in-process through
libtorch itself (bench_torchscript_inproc: torch::jit::load and forward
under InferenceMode, no sip at all, 1 intra-op thread):

  latency     one [1, 64] request at a time: sipd pool of 1 session over
              the unix socket (`sip bench --concurrency 1`) against
              forward() called one call after another in process;
  throughput  [1, 64] requests, 8 outstanding, on a pool of one session per
              CPU, against as many threads calling the one module in
              process for the same time.

Each round measures all four, the order turning each round; figures are the
medians over the rounds of each round's value. The load generator shares
the machine with sipd, so throughput is also reported against the
in-process rate scaled to the CPUs the generator leaves. Reported, no
targets: p50 added over in-process (us), p50 ratio, throughput ratios.
"""
import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time

import torch

from common import BUILD, ROUNDS, Sipd, children_cpu_s, interleave, ratios, report, sip_bench

CPUS = len(os.sched_getaffinity(0))
CONC = 8


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                       torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                       torch.nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


if not os.path.exists(os.path.join(BUILD, "bench_torchscript_inproc")):
    raise SystemExit("bench/torchscript.py: %s has no bench_torchscript_inproc: this build has no "
                     "TorchScript backend (libtorch was not found; scripts/deps.sh installs it)"
                     % BUILD)


def inproc(*args):
    out = subprocess.run([os.path.join(BUILD, "bench_torchscript_inproc")] +
                         [str(a) for a in args], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


work = tempfile.mkdtemp(prefix="sipts")
atexit.register(shutil.rmtree, work, True)  # the model file goes with the run
model = os.path.join(work, "mlp.pt")
torch.jit.save(torch.jit.script(Mlp().eval()), model)
opts = {"inputs": "x:float32[-1,64]", "outputs": "y:float32[-1,10]"}
inp = ["x:float32:1,64=random"]


def served_latency(s):
    def run():
        r = sip_bench(s.endpoint, "lat", inp, "--concurrency", "1", window_ms=700,
                      max_windows=3)
        return {"p50_us": r["latency_ms"]["p50"] * 1000, "p99_us": r["latency_ms"]["p99"] * 1000}
    return run


def served_throughput(s):
    def run():
        cpu0, t0 = children_cpu_s(), time.monotonic()
        r = sip_bench(s.endpoint, "tput", inp, "--concurrency", str(CONC), window_ms=1000,
                      max_windows=3)
        gen = (children_cpu_s() - cpu0) / (time.monotonic() - t0)  # the generator's CPUs
        return r["throughput_rps"], gen
    return run


with Sipd([{"name": "lat", "model_path": model, "backend": "torchscript", "pool_size": 1,
            "backend_options": opts},
           {"name": "tput", "model_path": model, "backend": "torchscript", "pool_size": CPUS,
            "backend_options": opts}],
          server_extra="  intra_op_threads: 1\n") as s:
    r = interleave(ROUNDS, {
        "in-process latency": lambda: inproc("latency", model, "1,64", 20000, 1),
        "sipd latency": served_latency(s),
        "in-process throughput": lambda: inproc("throughput", model, "1,64", 1.5, 1, CPUS)
        ["items_per_s"],
        "sipd throughput": served_throughput(s)})

ip50 = [x["p50_us"] for x in r["in-process latency"]]
sp50 = [x["p50_us"] for x in r["sipd latency"]]
itp = r["in-process throughput"]
stp = [x[0] for x in r["sipd throughput"]]
gen = [x[1] for x in r["sipd throughput"]]
left = [c * max(0.0, CPUS - g) / CPUS for c, g in zip(itp, gen)]
print("in-process p50  : %s us  p99 %s us" % (" ".join("%7.1f" % v for v in ip50),
                                               " ".join("%7.1f" % x["p99_us"]
                                                        for x in r["in-process latency"])))
print("sipd p50        : %s us  p99 %s us" % (" ".join("%7.1f" % v for v in sp50),
                                               " ".join("%7.1f" % x["p99_us"]
                                                        for x in r["sipd latency"])))
print("in-process rate : %s calls/s (%d threads)" % (" ".join("%8.0f" % v for v in itp), CPUS))
print("sipd rate       : %s req/s (%d sessions, concurrency %d; generator CPUs %s of %d)"
      % (" ".join("%8.0f" % v for v in stp), CPUS, CONC, " ".join("%.2f" % g for g in gen), CPUS))
report("torchscript pool: p50 added over libtorch in-process", [a - b for a, b in zip(sp50, ip50)],
       None, "%.1f", " us", spread_limit=None)
report("torchscript pool: p50 / libtorch in-process p50", ratios(sp50, ip50), None, "%.2f")
report("torchscript pool: throughput / libtorch in-process", ratios(stp, itp), None, "%.3f")
report("torchscript pool: throughput / in-process on the CPUs the generator leaves",
       ratios(stp, left), None, "%.3f")
