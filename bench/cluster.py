"""Several sipd behind HAProxy with one shared Redis response cache
(docs/deploy.md, "Several sipd behind HAProxy").   python3 bench/cluster.py [BUILD_DIR]

redis-server, 3 sipd and HAProxy (Debian's) on 127.0.0.1 ports of their own
(no network namespaces), HAProxy running docs/deploy.md's recipe: HTTP and
gRPC (h2) balanced, health checks on /v2/health/ready, retries on connection
failure, redispatch. Under load from 8 clients (4 HTTP, 4 gRPC; half of each
with idempotency keys and retry), in interleaved rounds: failed requests
when one instance gets SIGTERM (0 expected: server.drain_delay_ms) and
SIGKILL (0 with keys; those without counted), how soon a restarted instance
is back in HAProxy (<= 2 health intervals), and the throughput of 8 HTTP
clients with 1, 2 and 3 instances on the builtin model with delay_ms.
tests/integration/test_cluster.py, the short run, imports Cluster, Load, Nginx.
"""
import http.client
import importlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = "delay"
INTER_MS = 500      # HAProxy's health check interval
FALL = 2            # failed checks before a server is DOWN
RISE = 1            # good checks before it is UP again
# Readiness false before the drain: HAProxy notices within INTER_MS * FALL
# plus a check's own time; the rest is margin for a loaded machine.
DRAIN_DELAY_MS = INTER_MS * FALL + 1000


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout, what):
    """cond()'s first truthy value, polled every 10 ms; an AssertionError
    naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("not within %.0f s: %s" % (timeout, what))
        time.sleep(0.01)


def http_get(port, path, timeout=2.0):
    """(status, body) of GET path on 127.0.0.1:port; (0, why) when it cannot connect."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()
    except OSError as e:
        return 0, str(e).encode()


def tail(path, n=40):
    """The last n lines of a log file ('' when it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-n:])
    except OSError:
        return ""


def stop_process(proc, sig=signal.SIGTERM, timeout=20.0):
    """Signals proc, waits up to `timeout`, then SIGKILLs it; its exit status."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(10)


class Redis:
    """redis-server on a loopback port, no persistence."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.port = free_port()
        exe = shutil.which("redis-server")
        if not exe:
            raise RuntimeError("redis-server is not installed (scripts/deps.sh installs it)")
        self.log = open(os.path.join(workdir, "redis.log"), "ab")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", workdir],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.proc.poll() is not None or self.command("PING") == "+PONG",
                 10, "redis-server to answer PING")
        if self.proc.poll() is not None:
            raise RuntimeError("redis-server exited:\n" + tail(os.path.join(workdir, "redis.log")))

    def command(self, *args):
        """One RESP command; the first line of its reply ('' when it cannot connect)."""
        req = b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                s.sendall(req)
                buf = b""
                while not buf.endswith(b"\r\n"):
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                return buf.split(b"\r\n")[0].decode()
        except OSError:
            return ""

    def close(self):
        stop_process(self.proc, signal.SIGKILL)
        self.log.close()


class Sipd:
    """One sipd: HTTP and gRPC on loopback ports that stay the same across
    restarts (HAProxy's config names them), a unix socket, the builtin
    model MODEL with delay_ms, its answers in the shared Redis cache."""

    def __init__(self, workdir, index, redis_port, delay_ms, pool_size, on_start=None):
        self.index = index
        self.dir = os.path.join(workdir, "sipd%d" % index)
        os.makedirs(self.dir, exist_ok=True)
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.on_start = on_start
        self.proc = None
        self.config = os.path.join(self.dir, "sip.yaml")
        pool = {"name": MODEL, "backend": "builtin", "pool_size": pool_size,
                "backend_options": {"delay_ms": delay_ms, "shape": "-1"},
                "response_cache": True}
        with open(self.config, "w") as f:
            f.write("server:\n  http: 127.0.0.1:%d\n  grpc: 127.0.0.1:%d\n"
                    "  endpoints: ['unix://%s']\n  log_level: warn\n  execution_slots: %d\n"
                    "  drain_delay_ms: %d\n  drain_timeout_ms: 10000\n  response_cache: {backend: redis, redis: {address: '127.0.0.1:%d', ttl_s: 600}}\n"
                    "session_pools:\n  - %s\n"
                    % (self.http_port, self.grpc_port, os.path.join(self.dir, "s.sock"),
                       pool_size, DRAIN_DELAY_MS, redis_port, json.dumps(pool)))

    def start(self):
        """Starts sipd (not waiting for it); its log goes to sipd.log."""
        env = dict(os.environ)
        ort = os.path.join(ROOT, "third_party", "onnxruntime", "lib")
        if os.path.isdir(ort):
            env["LD_LIBRARY_PATH"] = ort + (":" + env["LD_LIBRARY_PATH"]
                                            if env.get("LD_LIBRARY_PATH") else "")
        with open(os.path.join(self.dir, "sipd.log"), "ab") as log:
            self.proc = subprocess.Popen([os.path.join(
            os.environ.get("SIP_BUILD_DIR") or os.path.join(ROOT, "build"), "sipd"), "--config",
                                          self.config], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, cwd=self.dir)
        if self.on_start:
            self.on_start(self.proc, "sipd --config %s" % self.config)
        return self

    def ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("sipd %d exited with %s:\n%s"
                                 % (self.index, self.proc.returncode, self.log_tail()))
        return http_get(self.http_port, "/v2/health/ready")[0] == 200

    def wait_ready(self, timeout=60):
        """The monotonic time at which /v2/health/ready first answered 200."""
        wait_for(self.ready, timeout, "sipd %d ready" % self.index)
        return time.monotonic()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self):
        return tail(os.path.join(self.dir, "sipd.log"))

    def stop(self, sig=signal.SIGTERM, timeout=30.0):
        return stop_process(self.proc, sig, timeout)


DEPLOY_MD = os.path.join(ROOT, "docs", "deploy.md")


def recipe(lang):
    """The ```lang block of docs/deploy.md (haproxy, nginx): the recipe
    the docs give is the config these runs use."""
    with open(DEPLOY_MD) as f:
        text = f.read()
    m = re.search(r"^```%s\n(.*?)^```$" % lang, text, re.S | re.M)
    if not m:
        raise RuntimeError("docs/deploy.md has no ```%s block" % lang)
    return m.group(1)


def local_addresses(cfg, instances, fronts):
    """The recipe's addresses replaced: 10.0.0.1N:8000 / :8001 by instance
    N-1's HTTP / gRPC port on 127.0.0.1; the front ports 8000 / 8001
    (`bind :P`, `listen P`) by fronts[0] / fronts[1]."""
    def server(m):
        s = instances[int(m.group(1)) - 1]
        return "127.0.0.1:%d" % (s.http_port if m.group(2) == "8000" else s.grpc_port)
    cfg = re.sub(r"10\.0\.0\.1(\d):(800[01])", server, cfg)
    cfg = re.sub(r"(bind |listen )(?::)?(800[01])\b",
                 lambda m: "%s127.0.0.1:%d" % (m.group(1), fronts[int(m.group(2)) - 8000]), cfg)
    return cfg


class HAProxy:
    """HAProxy in the foreground with docs/deploy.md's config (its
    addresses replaced by the instances' loopback ports); its admin socket
    answers `show stat` and `set server`."""

    def __init__(self, workdir, instances, on_start=None):
        self.dir = workdir
        self.sock = os.path.join(workdir, "haproxy.sock")
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.config = os.path.join(workdir, "haproxy.cfg")
        cfg = recipe("haproxy")
        timers = "inter %dms fastinter %dms downinter %dms rise %d fall %d" % (
            INTER_MS, INTER_MS, INTER_MS, RISE, FALL)
        if timers not in cfg:
            raise RuntimeError("docs/deploy.md's HAProxy recipe lacks %r (this run's timers)"
                               % timers)
        cfg = local_addresses(cfg, instances, (self.http_port, self.grpc_port))
        cfg = re.sub(r"stats socket \S+", "stats socket " + self.sock, cfg)
        with open(self.config, "w") as f:
            f.write(cfg)
        exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not os.path.exists(exe):
            raise RuntimeError("haproxy is not installed (scripts/deps.sh installs it)")
        check = subprocess.run([exe, "-c", "-f", self.config], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError("haproxy -c refused %s:\n%s%s" % (self.config, check.stdout,
                                                                  check.stderr))
        self.log = open(os.path.join(workdir, "haproxy.log"), "ab")
        self.proc = subprocess.Popen([exe, "-db", "-f", self.config], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        if on_start:
            on_start(self.proc, "haproxy -f %s" % self.config)
        wait_for(lambda: self.proc.poll() is not None or self.stats(), 10,
                 "haproxy's stats socket")
        if self.proc.poll() is not None:
            raise RuntimeError("haproxy exited with %s:\n%s" % (self.proc.returncode,
                                                                tail(os.path.join(workdir, "haproxy.log"))))

    def command(self, line):
        """One admin socket command's reply ('' when the socket does not answer)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(self.sock)
                s.sendall(line.encode() + b"\n")
                out = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        return out.decode(errors="replace")
                    out += chunk
        except OSError:
            return ""

    def stats(self):
        """{(backend, server): row dict} from `show stat`."""
        text = self.command("show stat")
        lines = [ln for ln in text.splitlines() if ln]
        if not lines or not lines[0].startswith("# "):
            return {}
        cols = lines[0][2:].split(",")
        out = {}
        for ln in lines[1:]:
            row = dict(zip(cols, ln.split(",")))
            out[(row["pxname"], row["svname"])] = row
        return out

    def status(self, index, backend="sip_http"):
        return self.stats().get((backend, "sip%d" % (index + 1)), {}).get("status", "")

    def served(self, index, backend="sip_http"):
        """Requests HAProxy sent to instance `index` so far (its stot)."""
        return int(self.stats().get((backend, "sip%d" % (index + 1)), {}).get("stot", "0") or 0)

    def set_state(self, index, state):
        """`state`: ready | drain | maint (the gRPC server tracks the HTTP one)."""
        self.command("set server sip_http/sip%d state %s" % (index + 1, state))


    def close(self):
        stop_process(self.proc, signal.SIGTERM, 10)
        self.log.close()


class Nginx:
    """nginx in the foreground with docs/deploy.md's recipe (addresses
    replaced) in a minimal main config of its own (a temporary prefix)."""

    def __init__(self, workdir, instances, on_start=None):
        self.dir = os.path.join(workdir, "nginx")
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.config = os.path.join(self.dir, "nginx.conf")
        body = local_addresses(recipe("nginx"), instances, (self.http_port, self.grpc_port))
        with open(self.config, "w") as f:
            f.write("daemon off;\nmaster_process on;\nworker_processes 1;\n"
                    "pid %s/nginx.pid;\nerror_log %s/logs/error.log warn;\n"
                    "events { worker_connections 1024; }\nhttp {\n  access_log off;\n"
                    "%s%s}\n" % (self.dir, self.dir, "".join(
                        "  %s_temp_path %s/%s;\n" % (k, self.dir, k) for k in
                        ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")), body))
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(exe):
            raise RuntimeError("nginx is not installed (scripts/deps.sh installs it)")
        args = [exe, "-p", self.dir + "/", "-e", os.path.join(self.dir, "logs", "error.log"),
                "-c", self.config]
        check = subprocess.run(args + ["-t"], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError("nginx -t refused %s:\n%s" % (self.config, check.stderr))
        self.log = open(os.path.join(self.dir, "nginx.out"), "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        if on_start:
            on_start(self.proc, "nginx -c %s" % self.config)
        wait_for(lambda: self.proc.poll() is not None or http_get(self.http_port,
                                                                  "/v2/health/live")[0] == 200,
                 10, "nginx to answer")
        if self.proc.poll() is not None:
            raise RuntimeError("nginx exited with %s" % self.proc.returncode)

    def close(self):
        stop_process(self.proc, signal.SIGTERM, 10)  # nginx: SIGTERM is its fast shutdown
        self.log.close()


class Cluster:
    """Redis, `n` sipd and HAProxy in a temporary directory; close() stops
    every process whatever happened (a context manager)."""

    def __init__(self, n=3, delay_ms=50, pool_size=2, on_start=None):
        self.dir = tempfile.mkdtemp(prefix="sipc", dir="/tmp")
        self.redis = self.haproxy = None
        self.instances = []
        try:
            self.redis = Redis(self.dir)
            self.instances = [Sipd(self.dir, i, self.redis.port, delay_ms, pool_size, on_start)
                              for i in range(n)]
            for s in self.instances:
                s.start()
            for s in self.instances:
                s.wait_ready()
            self.haproxy = HAProxy(self.dir, self.instances, on_start)
            for s in self.instances:
                self.wait_status(s.index, "UP", 10)
        except BaseException:
            self.close()
            raise

    def wait_status(self, index, status, timeout):
        """Waits until HAProxy reports instance `index` as `status` (UP,
        DOWN, MAINT); the monotonic time it was first seen so."""
        wait_for(lambda: self.haproxy.status(index) == status, timeout,
                 "haproxy to report s%d %s (now %r)" % (index, status,
                                                       self.haproxy.status(index)))
        return time.monotonic()

    def restart(self, index, timeout=60):
        """Starts instance `index` again; (ready_at, up_at): when its own
        readiness turned true and when HAProxy first reported it UP."""
        s = self.instances[index]
        s.start()
        ready_at = s.wait_ready(timeout)
        up_at = self.wait_status(index, "UP", timeout)
        return ready_at, up_at

    def close(self):
        """Stops every process: HAProxy, then sipd (SIGTERM, which must end
        each with exit 0), then Redis. Returns the sipd exit statuses."""
        codes = []
        try:
            if self.haproxy:
                self.haproxy.close()
        finally:
            try:
                for s in self.instances:  # all at once: each drain_delay_ms runs in parallel
                    if s.alive():
                        s.proc.send_signal(signal.SIGTERM)
                for s in self.instances:
                    codes.append(s.stop())
            finally:
                if self.redis:
                    self.redis.close()
                shutil.rmtree(self.dir, ignore_errors=True)
        return codes

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


# load

def grpc_modules(outdir):
    """grpc, grpc_service_pb2, grpc_service_pb2_grpc: stubs generated from
    proto/grpc_service.proto into `outdir` with grpc_tools."""
    import grpc
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I",
                    os.path.join(ROOT, "proto"), "--python_out", outdir,
                    "--grpc_python_out", outdir, "grpc_service.proto"], check=True)
    sys.path.insert(0, outdir)
    try:
        return (grpc, importlib.import_module("grpc_service_pb2"),
                importlib.import_module("grpc_service_pb2_grpc"))
    finally:
        sys.path.remove(outdir)


class Client(threading.Thread):
    """One client in a closed loop: a request, its answer checked (the
    builtin model gives back its input), the next. keyed: every request
    carries an idempotency key and a failed one is sent again with the same
    key (up to `tries` times, a new connection each time); otherwise a
    failure is counted and the client goes on."""

    def __init__(self, load, n, kind, keyed, tries=8):
        super().__init__(daemon=True, name="client-%d" % n)
        self.load, self.n, self.kind, self.keyed, self.tries = load, n, kind, keyed, tries
        self.ok = self.failed = self.retried = 0
        self.errors = []  # what each failure was
        self.conn = self.stub = None

    def call_http(self, vals, key):
        body = {"inputs": [{"name": "input", "shape": [4], "datatype": "FP32", "data": vals}]}
        if key:
            body["parameters"] = {"idempotency_key": key}
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.load.http_port, timeout=30)
        try:
            self.conn.request("POST", "/v2/models/%s/infer" % MODEL, json.dumps(body),
                              {"Content-Type": "application/json"})
            r = self.conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException) as e:
            self.conn.close()
            self.conn = None
            return "connection: %s" % (e or type(e).__name__)
        if r.status != 200:
            return "HTTP %d: %s" % (r.status, data[:200].decode(errors="replace"))
        out = json.loads(data)["outputs"][0]["data"]
        return None if out == vals else "wrong output %r for %r" % (out, vals)

    def call_grpc(self, vals, key):
        import numpy as np
        pb = self.load.pb
        if self.stub is None:
            self.stub = self.load.svc.GRPCInferenceServiceStub(self.load.channel())
        req = pb.ModelInferRequest(model_name=MODEL, inputs=[pb.ModelInferRequest.InferInputTensor(
            name="input", datatype="FP32", shape=[4],
            contents=pb.InferTensorContents(fp32_contents=vals))])
        if key:
            req.parameters["idempotency_key"].string_param = key
        try:
            r = self.stub.ModelInfer(req, timeout=30)
        except self.load.grpc.RpcError as e:
            return "gRPC %s: %s" % (e.code().name, (e.details() or "")[:200])
        if r.raw_output_contents:
            out = np.frombuffer(r.raw_output_contents[0], np.float32).tolist()
        else:
            out = list(r.outputs[0].contents.fp32_contents)
        return None if out == vals else "wrong output %r for %r" % (out, vals)

    def run(self):
        call = self.call_http if self.kind == "http" else self.call_grpc
        seq = 0
        while not self.load.stop.is_set():
            seq += 1
            # unique inputs: the response cache never answers the load
            vals = [float(self.n), float(seq % 1000003), float(self.load.nonce), 1.5]
            key = uuid.uuid4().hex if self.keyed else None
            for attempt in range(self.tries if self.keyed else 1):
                err = call(vals, key)
                if not err:
                    break
                if attempt + 1 < (self.tries if self.keyed else 1):
                    self.retried += 1
                    self.load.stop.wait(0.02 * (attempt + 1))  # a client's back-off
            if err:
                self.failed += 1
                self.errors.append(err)
            else:
                self.ok += 1
        if self.conn is not None:
            self.conn.close()


class Load:
    """Clients against HAProxy until stop(). kinds: a list of (kind,
    keyed) per client, kind "http" or "grpc"."""

    def __init__(self, haproxy, kinds, grpc_mods=None):
        self.http_port = haproxy.http_port
        self.grpc_port = haproxy.grpc_port
        self.nonce = time.monotonic_ns() % 1000003
        self.stop = threading.Event()
        self._channels = []
        self._ch_lock = threading.Lock()
        if grpc_mods:
            self.grpc, self.pb, self.svc = grpc_mods
        self.clients = [Client(self, n, kind, keyed) for n, (kind, keyed) in enumerate(kinds)]

    def channel(self):
        with self._ch_lock:
            ch = self.grpc.insecure_channel("127.0.0.1:%d" % self.grpc_port)
            self._channels.append(ch)
            return ch

    def start(self):
        for c in self.clients:
            c.start()
        return self

    def ok(self):
        return sum(c.ok for c in self.clients)

    def finish(self, timeout=60):
        """Stops the clients (each ends its request in progress); an
        AssertionError when one is stuck."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        for c in self.clients:
            c.join(max(0.0, deadline - time.monotonic()))
        for ch in self._channels:
            ch.close()
        stuck = [c.name for c in self.clients if c.is_alive()]
        if stuck:
            raise AssertionError("clients still waiting for an answer after %d s: %s"
                                 % (timeout, stuck))

    def summary(self):
        """{"keyed": (ok, failed, retried), "plain": (ok, failed, retried)}
        and every failure's text, by client."""
        out = {}
        for name, keyed in (("keyed", True), ("plain", False)):
            cs = [c for c in self.clients if c.keyed == keyed]
            out[name] = (sum(c.ok for c in cs), sum(c.failed for c in cs),
                         sum(c.retried for c in cs))
        out["errors"] = ["%s %s: %s" % (c.name, c.kind, e) for c in self.clients
                         for e in c.errors]
        return out


# 8 clients: 4 HTTP, 4 gRPC; of each, 2 with idempotency keys and retry.
MIXED = [("http", True), ("http", True), ("http", False), ("http", False),
         ("grpc", True), ("grpc", True), ("grpc", False), ("grpc", False)]


def sigterm_round(cl, load, victim):
    """SIGTERM `victim` under load: waits for HAProxy to take it out and
    for it to exit, then restarts it. Returns (exit status, rejoin seconds)."""
    s = cl.instances[victim]
    before = load.ok()
    wait_for(lambda: load.ok() >= before + 8, 30, "load to run before the signal")
    s.proc.send_signal(signal.SIGTERM)
    cl.wait_status(victim, "DOWN", 30)
    rc = s.proc.wait(60)
    ready_at, up_at = cl.restart(victim)
    return rc, up_at - ready_at


def sigkill_round(cl, load, victim, after_kill=None):
    """SIGKILL `victim` under load (then after_kill(), if given): waits for
    HAProxy to take it out, then restarts it. Returns the rejoin seconds."""
    s = cl.instances[victim]
    before = load.ok()
    wait_for(lambda: load.ok() >= before + 8, 30, "load to run before the signal")
    s.proc.kill()
    s.proc.wait(10)
    if after_kill:
        after_kill()
    cl.wait_status(victim, "DOWN", 30)
    after = load.ok()
    wait_for(lambda: load.ok() >= after + 8, 30, "load to go on on the other instances")
    ready_at, up_at = cl.restart(victim)
    return up_at - ready_at


def main():
    if len(sys.argv) > 1 and not os.environ.get("SIP_BUILD_DIR"):
        os.environ["SIP_BUILD_DIR"] = os.path.abspath(sys.argv[1])  # sipd runs in its own dir
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common
    delay_ms, seconds = 50, float(os.environ.get("SIP_CLUSTER_SECONDS", "4"))
    stubs = tempfile.mkdtemp(prefix="sipg", dir="/tmp")
    print("cluster: 3 sipd (builtin model, delay_ms %d, 2 sessions each) behind HAProxy %s, "
          "one redis-server; every process on 127.0.0.1 ports (no network namespaces); "
          "health checks every %d ms, fall %d, rise %d; server.drain_delay_ms %d; %s"
          % (delay_ms, subprocess.run(["haproxy", "-v"], capture_output=True, text=True)
             .stdout.split()[2], INTER_MS, FALL, RISE, DRAIN_DELAY_MS, common.load()))
    try:
        mods = grpc_modules(stubs)
        with Cluster(3, delay_ms=delay_ms) as cl:
            def throughput(n):
                def run():
                    for i in range(3):
                        cl.haproxy.set_state(i, "ready" if i < n else "maint")
                        cl.wait_status(i, "UP" if i < n else "MAINT", 10)
                    load = Load(cl.haproxy, [("http", False)] * 8).start()
                    wait_for(lambda: load.ok() >= 8, 30, "the load to start")
                    ok0, t0 = load.ok(), time.monotonic()
                    time.sleep(seconds)  # the measuring window, not a synchronisation
                    rate = (load.ok() - ok0) / (time.monotonic() - t0)
                    load.finish()
                    assert not load.summary()["errors"], load.summary()["errors"][:5]
                    return rate
                return run
            rates = common.interleave(common.ROUNDS, {n: throughput(n) for n in (1, 2, 3)})
            for i in range(3):
                cl.haproxy.set_state(i, "ready")
                cl.wait_status(i, "UP", 10)
            cap = 2 * 1000.0 / delay_ms
            for n in (1, 2, 3):
                common.report("HTTP requests/s, 8 clients, %d instance%s (bound %.0f)"
                              % (n, "s" if n > 1 else "", n * cap), rates[n], fmt="%.1f")
            common.report("throughput 3 instances / 1", common.ratios(rates[3], rates[1]),
                          target=">= 2.5", fmt="%.2f")

            term = {"failed": [], "rejoin": []}
            kill = {"keyed": [], "plain": [], "rejoin": [], "retried": []}

            def fault_round(sig):
                def run():
                    load = Load(cl.haproxy, MIXED, mods).start()
                    try:
                        if sig == "SIGTERM":
                            rc, rejoin = sigterm_round(cl, load, 1)
                            assert rc == 0, "sipd exited with %s after SIGTERM" % rc
                        else:
                            rejoin = sigkill_round(cl, load, 2)
                    finally:
                        load.finish()
                    sm = load.summary()
                    if sig == "SIGTERM":
                        term["failed"].append(sm["keyed"][1] + sm["plain"][1])
                        term["rejoin"].append(rejoin * 1000)
                    else:
                        kill["keyed"].append(sm["keyed"][1])
                        kill["plain"].append(sm["plain"][1])
                        kill["retried"].append(sm["keyed"][2])
                        kill["rejoin"].append(rejoin * 1000)
                    for e in sm["errors"][:5]:
                        print("  %s round failure: %s" % (sig, e))
                return run

            common.interleave(common.ROUNDS, {s: fault_round(s) for s in ("SIGTERM", "SIGKILL")})
            common.report("SIGTERM one of 3 under 8 clients: failed requests", term["failed"],
                          target="<= 0", fmt="%.0f", spread_limit=None)
            common.report("SIGKILL one of 3: failed requests with idempotency key and retry",
                          kill["keyed"], target="<= 0", fmt="%.0f", spread_limit=None)
            common.report("SIGKILL one of 3: failed requests without key (in flight on it)",
                          kill["plain"], fmt="%.0f", spread_limit=None)
            common.report("SIGKILL one of 3: keyed requests sent again by their client",
                          kill["retried"], fmt="%.0f", spread_limit=None)
            common.report("restarted instance ready -> HAProxy UP (ms; 2 intervals = %d)"
                          % (2 * INTER_MS), term["rejoin"] + kill["rejoin"],
                          target="<= %d" % (2 * INTER_MS), fmt="%.0f", spread_limit=None)
            redis_keys = cl.redis.command("DBSIZE")
            print("shared redis cache: %s keys (one per distinct request)" % redis_keys[1:])
    finally:
        shutil.rmtree(stubs, ignore_errors=True)


if __name__ == "__main__":
    main()
