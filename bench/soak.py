#!/usr/bin/python3
"""Memory soak (issue: high availability): sipd under a mixed load for a
while, its resident memory sampled every few seconds. The load mixes what
leaks would hide in: native and HTTP inference (ONNX and builtin pools),
requests with bad input, idempotency keys (new and replayed), requests that
time out in the queue, clients that drop their connection with requests in
flight, HTTP connections cut mid-request, repository loads and unloads, runtime
pool resizes, injected session crashes with failover, and, when this sipd
supports `isolation: process`, SIGKILL of the process pool's worker.

Prints the RSS curve and the growth after warm-up (the first fifth of the
run); target: <= 10 MB. The baseline is sipd's own RSS at the end of
warm-up in this run; the growth is judged at each of the last three samples
(its median, and unstable when they disagree on the target). Duration:
SOAK_SECONDS (default 60; 600 for the ten-minute soak)."""
import atexit
import os

import http.client
import json
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import numpy as np

from common import BUILD, Sipd, ensure_tiny, report
from cann_sip import InferenceRequest, SessionClient

SECONDS = float(os.environ.get("SOAK_SECONDS", "60"))
SAMPLE_S = 5.0 if SECONDS >= 120 else 2.0
TARGET_MB = 10.0


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def supports_isolation(tmp):
    cfg = os.path.join(tmp, "probe.yaml")
    with open(cfg, "w") as f:
        f.write("session_pools:\n  - {name: p, backend: builtin, isolation: process}\n")
    r = subprocess.run([os.path.join(BUILD, "sipd"), "--check-config", cfg],
                       capture_output=True, text=True)
    return r.returncode == 0


tmp = tempfile.mkdtemp(prefix="sipsoak", dir="/tmp")
atexit.register(shutil.rmtree, tmp, True)  # also when the soak stops with an error
tiny = ensure_tiny()
repo = os.path.join(tmp, "repo")
os.makedirs(os.path.join(repo, "r", "1"))
shutil.copy(tiny, os.path.join(repo, "r", "1", "model.onnx"))
isolated = supports_isolation(tmp)
builtin = {"shape": "-1"}
pools = [
    {"name": "tiny", "model_path": tiny, "pool_size": 2,
     "dynamic_batching": {"max_batch_size": 8, "max_queue_delay_us": 500}},
    {"name": "b", "backend": "builtin", "pool_size": 2, "backend_options": builtin,
     "failover": {"strategy": "immediate_retry", "max_retries": 2},
     "idempotency": {"ttl_s": 5, "max_entries": 2000}},
    {"name": "slow", "backend": "builtin", "pool_size": 1,
     "backend_options": {"shape": "-1", "delay_ms": 5}},
]
if isolated:
    pools.append({"name": "iso", "backend": "builtin", "pool_size": 2, "isolation": "process",
                  "backend_options": builtin,
                  "failover": {"strategy": "immediate_retry", "max_retries": 3}})
server = ("  allow_fault_injection: true\n  http: 127.0.0.1:0\n  model_repository: %s\n"
          "  model_control: explicit\n  state_dir: %s\n"
          % (repo, os.path.join(tmp, "state")))

stop = threading.Event()
counts = {}
lock = threading.Lock()


def count(what):
    with lock:
        counts[what] = counts.get(what, 0) + 1


def loop(fn):
    def run():
        rng = random.Random(hash(fn.__name__))
        while not stop.is_set():
            try:
                fn(rng)
            except Exception as e:  # noqa: BLE001 - the soak counts, it does not stop
                count("%s: %s" % (fn.__name__, type(e).__name__))
    return threading.Thread(target=run, daemon=True)


with Sipd(pools, server_extra=server) as s:
    pid = s.proc.pid
    # The HTTP port: sipd prints its address on stderr only; ask the OS.
    out = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True).stdout
    port = None
    for line in out.splitlines():
        if "pid=%d," % pid in line:
            port = int(line.split()[3].rsplit(":", 1)[1])
    x4 = np.arange(8, dtype=np.float32).reshape(2, 4)
    tiny_in = {i["name"]: np.ones([d if d > 0 else 1 for d in i["shape"]], np.float32)
               for i in [p for p in SessionClient(s.endpoint).pools() if p["name"] == "tiny"][0]
               ["inputs"]}

    native = SessionClient(s.endpoint, timeout_s=30)

    def native_infer(rng):
        native.infer(InferenceRequest("tiny", tiny_in))
        native.infer(InferenceRequest("b", {"input": np.full(16, rng.random(), np.float32)}))
        count("native ok")

    def native_errors(rng):
        try:
            native.infer(InferenceRequest("b", {"input": np.ones((2, 2), np.int64)}))
        except Exception:
            count("bad input refused")
        try:
            native.infer(InferenceRequest("nope", {"input": x4}))
        except Exception:
            count("unknown model refused")

    def keyed(rng):
        k = "k%d" % rng.randrange(4000)
        native.infer(InferenceRequest("b", {"input": np.ones(4, np.float32)}, idempotency_key=k))
        count("keyed")

    def timeouts(rng):
        futs = [native.infer_async(InferenceRequest("slow", {"input": np.ones(4, np.float32)},
                                                    timeout_ms=3)) for _ in range(8)]
        for f in futs:
            try:
                f.result(timeout=10)
            except Exception:
                count("deadline exceeded")

    def dropped_clients(rng):
        c = SessionClient(s.endpoint, timeout_s=5)
        for _ in range(5):
            c.infer_async(InferenceRequest("slow", {"input": np.ones(4, np.float32)}))
        time.sleep(0.002)
        c.close()  # requests in flight: the server cancels them
        count("client dropped")

    def http_mixed(rng):
        if not port:
            time.sleep(1)
            return
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = json.dumps({"inputs": [{"name": "input", "shape": [4], "datatype": "FP32",
                                       "data": [1, 2, 3, 4]}]})
        for _ in range(20):
            conn.request("POST", "/v2/models/b/infer", body)
            conn.getresponse().read()
        conn.request("POST", "/v2/models/b/infer", "{not json")
        conn.getresponse().read()
        conn.close()
        # Cut mid-request: headers promise a body that never comes.
        sk = socket.create_connection(("127.0.0.1", port), timeout=5)
        sk.sendall(b"POST /v2/models/b/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{")
        sk.close()
        count("http rounds")

    def repository(rng):
        with SessionClient(s.endpoint, timeout_s=60) as c:
            c.load_model("r")
            c.infer(InferenceRequest("r", tiny_in))
            c.unload_model("r")
        count("repository load+unload")
        time.sleep(0.5)

    def resize(rng):
        with SessionClient(s.endpoint) as c:
            c.update_pool("b", pool_size=rng.choice([1, 2, 3]))
        count("resize")
        time.sleep(0.5)

    def crashes(rng):
        with SessionClient(s.endpoint) as c:
            c.admin("fault", "b", kind="crash", count=1)
        count("crash injected")
        time.sleep(1)

    def worker_kills(rng):
        with SessionClient(s.endpoint) as c:
            st = [p for p in c.status()["pools"] if p["name"] == "iso"][0]
            c.infer(InferenceRequest("iso", {"input": np.ones(4, np.float32)}))
        pids = [pid for pid in [st.get("worker", {}).get("pid")] if pid]
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            count("worker killed")
        time.sleep(1)

    jobs = [native_infer, native_errors, keyed, timeouts, dropped_clients, http_mixed,
            repository, resize, crashes] + ([worker_kills] if isolated else [])
    only = os.environ.get("SOAK_JOBS")  # a comma list of job names, to look for a leak
    if only:
        jobs = [f for f in jobs if f.__name__ in only.split(",")]
    threads = [loop(f) for f in jobs]
    t0 = time.time()
    for t in threads:
        t.start()
    curve = []
    while time.time() - t0 < SECONDS:
        time.sleep(SAMPLE_S)
        curve.append((time.time() - t0, rss_mb(pid)))
        assert s.proc.poll() is None, "sipd died during the soak"
    stop.set()
    for t in threads:
        t.join(30)
    native.close()
    time.sleep(1)
    curve.append((time.time() - t0, rss_mb(pid)))

warm = SECONDS / 5
base = next(mb for t, mb in curve if t >= warm)
end = sorted(mb for _, mb in curve[-3:])[1]  # median of the last three samples
print("soak %.0f s on %s; load (1 min) %.2f; process isolation: %s"
      % (SECONDS, BUILD, os.getloadavg()[0], "yes" if isolated else "not in this sipd"))
print("RSS curve (s, MB):")
for t, mb in curve:
    print("  %6.0f  %7.1f%s" % (t, mb, "   <- warm-up ends" if mb == base and t >= warm and
                                  t - SAMPLE_S < warm else ""))
print("what ran:")
for k in sorted(counts):
    print("  %-40s %d" % (k, counts[k]))
print("RSS after warm-up %.1f MB, at the end %.1f MB" % (base, end))
report("RSS growth after warm-up (the last three samples)",
       [mb - base for _, mb in curve[-3:]], "<= %g" % TARGET_MB, "%.1f", " MB", spread_limit=None)
