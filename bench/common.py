"""Shared plumbing for the benchmarks: start a real sipd, drive it with
`sip bench`, run the in-process baseline, and say how sure a figure is.

Every benchmark measures its A and its B in the same run, taking turns
(`interleave`: A B, B A, A B, ... at least 3 rounds), so that load on the
machine that comes and goes falls on both; it prints each figure with
`report`: the median over the rounds, their spread, the machine's load, and
"unstable" when the rounds disagree. With SIP_BENCH_RESULTS set, `report`
also appends the figure as a JSON line to that file; `make bench` prints
them all as one table at the end (`python3 bench/common.py --table FILE`)."""
import glob
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Absolute: benches start processes in other working directories (cluster.py).
BUILD = os.path.abspath(os.environ.get("SIP_BUILD_DIR") or (sys.argv[1] if len(sys.argv) > 1
                                                            else os.path.join(ROOT, "build")))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
from cann_sip import SessionClient  # noqa: E402

# A bench stopped with SIGTERM (a timeout, `make` interrupted) unwinds as on
# an error, so every sipd it started is stopped and every temporary
# directory removed (the `with` blocks and `finally` clauses run).
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

OCR = os.path.join(ROOT, "third_party", "models", "ocr")
CLS = os.path.join(OCR, "ch_ppocr_mobile_v2.0_cls_infer.onnx")
TINY = os.path.join(ROOT, "examples", "models", "tiny", "1", "model.onnx")


def ensure_tiny():
    if not os.path.exists(TINY):
        subprocess.check_call(["/usr/bin/python3", os.path.join(ROOT, "examples",
                                                                "make_tiny_model.py"), TINY])
    return TINY


class Sipd:
    """sipd on a temporary unix socket with the given pools (YAML flow maps)."""

    def __init__(self, pools, server_extra="", pipelines="", config=None, env=None, build=None):
        """config: a whole config's text instead (its server.endpoints list is
        replaced by this server's socket); env: variables added to sipd's
        environment; build: the build directory whose sipd runs (BUILD when
        None). The temporary directory goes with close()."""
        self.dir = tempfile.mkdtemp(prefix="sipb", dir="/tmp")
        self.sock = os.path.join(self.dir, "s.sock")
        self.endpoint = "ipc://" + self.sock
        cfg = os.path.join(self.dir, "sip.yaml")
        with open(cfg, "w") as f:
            if config is not None:
                f.write(re.sub(r"(?m)^  endpoints:\n(?:    - .*\n)+",
                               "  endpoints: ['%s']\n" % self.endpoint, config, count=1))
            else:
                f.write("server:\n  endpoints: ['%s']\n  log_level: warn\n%s" % (self.endpoint,
                                                                               server_extra))
                f.write("session_pools:\n")
                for p in pools:
                    f.write("  - %s\n" % json.dumps(p))
                f.write(pipelines)
        self.proc = subprocess.Popen([os.path.join(build or BUILD, "sipd"), "--config", cfg],
                                     stdout=subprocess.DEVNULL,
                                     env=dict(os.environ, **(env or {})))
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with SessionClient(self.endpoint, timeout_s=5) as c:
                    if c.ready():
                        return
            except Exception:
                pass
            time.sleep(0.1)
        self.proc.kill()
        self.proc.wait(timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)
        raise RuntimeError("sipd did not become ready")

    def status(self, pool):
        with SessionClient(self.endpoint) as c:
            return [p for p in c.status()["pools"] if p["name"] == pool][0]

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def sip_bench(endpoint, pool, inputs, *args, window_ms=2000, max_windows=8, background=False):
    cmd = [os.path.join(BUILD, "sip"), "-e", endpoint, "--json", "bench", pool]
    for i in inputs:
        cmd += ["-i", i]
    cmd += ["--window-ms", str(window_ms), "--max-windows", str(max_windows)] + list(args)
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited with %d; expected 0:\n%s" % (" ".join(cmd), r.returncode,
                                                                    r.stderr[-2000:]))
    return json.loads(r.stdout)


def inproc(*args):
    out = subprocess.run([os.path.join(BUILD, "bench_inproc")] + [str(a) for a in args],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def pipelined_rate(endpoint, pool, n, window):
    """Requests per second of n requests of a (1, 4) float32 "input" to pool
    `pool`, `window` of them in flight at a time, over one client."""
    import numpy as np
    from cann_sip import InferenceRequest
    x = np.ones((1, 4), np.float32)
    with SessionClient(endpoint, timeout_s=60) as c:
        c.infer(InferenceRequest(pool, {"input": x}))  # connected, warm
        t0 = time.perf_counter()
        futs = []
        for _ in range(n):
            futs.append(c.infer_async(InferenceRequest(pool, {"input": x})))
            if len(futs) >= window:
                futs.pop(0).result()
        for f in futs:
            f.result()
        return n / (time.perf_counter() - t0)


# ---------------------------------------------------------------------------
# rounds, figures and the table

ROUNDS = int(os.environ.get("SIP_BENCH_ROUNDS", "3"))  # at least 3
NAME = os.path.splitext(os.path.basename(sys.argv[0]))[0]


def interleave(rounds, fns):
    """Runs each of `fns` (a dict, name -> a function of no arguments
    returning a measurement) once per round for `rounds` rounds (at least
    3), the order turning each round (A B C, B C A, C A B, ...), so that
    load on the machine falls on every side alike and none always goes
    first. Returns {name: [its measurement in each round]}."""
    rounds = max(3, rounds)
    names = list(fns)
    out = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            out[n].append(fns[n]())
    return out


def ratios(a, b):
    """a / b round by round (the rounds' pairs ran next to each other)."""
    return [x / y for x, y in zip(a, b)]


def median(v):
    return statistics.median(v)


def load():
    """The machine's 1-minute load average and its CPU count, as printed."""
    return "load %.2f on %d CPUs" % (os.getloadavg()[0], os.cpu_count() or 0)


def _meets(v, target):
    if target.startswith("within"):  # "within ±10%": a ratio from 0.9 to 1.1
        d = float(target.split()[1].strip("±%")) / 100
        return 1 - d <= v <= 1 + d
    op, x = target.split()
    x = float(x)
    return {"<=": v <= x, ">=": v >= x, "<": v < x, ">": v > x}[op]


def report(figure, values, target=None, fmt="%.3g", unit="", spread_limit=0.25):
    """Prints one figure measured over rounds and returns its row:

      figure: 1.23 (rounds 1.20 1.23 1.31: spread 9%), load 3.40 on 2 CPUs; target <= 1.3: pass

    values: the figure in each round (a ratio B / A of the same round, or a
    measurement); the median is the figure. spread: (max - min) / median.
    target: None (reported only), "<= X", ">= X", "< X", "> X", or
    "within ±N%" (a ratio from 1 - N/100 to 1 + N/100, both ends included).
    Status: "pass" / "fail" by the median; "unstable" instead when the rounds
    disagree: their spread is over spread_limit (None: not judged, for
    figures near zero), some rounds meet the target and others do not, or
    fewer than 3 rounds ran. "reported" for a stable figure without a target.
    The row goes to $SIP_BENCH_RESULTS (a JSON line) when it is set."""
    values = [float(v) for v in values]
    m = median(values)
    spread = (max(values) - min(values)) / abs(m) if m else 0.0
    verdicts = {_meets(v, target) for v in values} if target else set()
    unstable = (len(values) < 3 or len(verdicts) > 1 or
                (spread_limit is not None and spread > spread_limit))
    status = ("unstable" if unstable else
              "reported" if not target else "pass" if _meets(m, target) else "fail")
    why = ""
    if unstable:
        why = (" (fewer than 3 rounds)" if len(values) < 3 else
               " (rounds disagree on the target)" if len(verdicts) > 1 else
               " (spread over %.0f%%)" % (100 * spread_limit))
        if target:
            why += "; the median %s" % ("meets it" if _meets(m, target) else "misses it")
    f = fmt + unit.replace("%", "%%")
    line = "%s: %s (rounds %s: spread %.0f%%), %s" % (
        figure, f % m, " ".join(fmt % v for v in values), 100 * spread, load())
    if target:
        line += "; target %s: %s" % (target, status)
    elif unstable:
        line += "; unstable"
    print(line + why)
    row = {"bench": NAME, "figure": figure, "target": target or "", "measured": f % m,
           "median": m, "rounds": values, "spread": spread, "load": os.getloadavg()[0],
           "cpus": os.cpu_count(), "status": status}
    path = os.environ.get("SIP_BENCH_RESULTS")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(row) + "\n")
    sys.stdout.flush()
    return row


def children_cpu_s():
    """CPU seconds (user + system) used so far by this process's finished
    children (a `sip bench` run, once it exited)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def table(path, crashed=()):
    """`make bench`'s closing table from the rows in `path` (bench, figure,
    target, measured, status, and the 1-minute load average / CPUs when the
    figure was reported); benches that stopped with an error (`crashed`) or
    wrote no figure are listed too.
    Returns 1 when a bench stopped with an error, else 0."""
    rows = []
    if os.path.exists(path):
        with open(path) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    here = os.path.dirname(os.path.abspath(__file__))
    names = sorted(os.path.splitext(os.path.basename(p))[0]
                   for p in glob.glob(os.path.join(here, "*.py")) if not p.endswith("common.py"))
    crashed = {os.path.splitext(os.path.basename(c))[0] for c in crashed}
    wf = max([len(r["figure"]) for r in rows] + [6])
    wb = max([len(n) for n in names] + [5])
    print("\n%-*s  %-*s  %-11s  %-14s  %-10s  %s" % (wb, "bench", wf, "figure", "target",
                                                   "measured", "status", "load"))
    counts = {}
    for n in names:
        mine = [r for r in rows if r["bench"] == n]
        for r in mine:
            print("%-*s  %-*s  %-11s  %-14s  %-10s  %.2f/%d" % (
                wb, n, wf, r["figure"], r["target"] or "-", r["measured"], r["status"],
                r["load"], r["cpus"]))
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        if n in crashed:
            print("%-*s  %-*s  %-11s  %-14s  %s" % (wb, n, wf, "(stopped with an error)", "-", "-",
                                                   "error"))
        elif not mine:
            print("%-*s  %-*s  %-11s  %-14s  %s" % (wb, n, wf, "(wrote no figure)", "-", "-", "-"))
    print("%s; %s" % (", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())) or
                      "no figures", "benches stopped with an error: " + " ".join(sorted(crashed))
                      if crashed else "every bench ran to its end"))
    return 1 if crashed else 0


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--table":
    sys.exit(table(sys.argv[2], sys.argv[3:]))
