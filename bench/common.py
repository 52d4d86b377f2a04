"""Shared plumbing for the benchmarks: start a real sipd, drive it with
`sip bench`, run the in-process baseline. Every benchmark prints ratios
against a baseline measured in the same run."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("SIP_BUILD_DIR") or (sys.argv[1] if len(sys.argv) > 1 else
                                            os.path.join(ROOT, "build"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
from cann_sip import SessionClient  # noqa: E402

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

    def __init__(self, pools, server_extra="", pipelines="", config=None, env=None):
        """config: a whole config's text instead (its server.endpoints list is
        replaced by this server's socket); env: variables added to sipd's
        environment. The temporary directory goes with close()."""
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
        self.proc = subprocess.Popen([os.path.join(BUILD, "sipd"), "--config", cfg],
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
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


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
