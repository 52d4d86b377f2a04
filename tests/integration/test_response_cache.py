"""The response cache on a real sipd (docs/response_cache.md): a pool with
response_cache: true answers an identical request from the cache (the same
outputs byte for byte, the KServe parameter "cached", counted in /metrics,
the model not run); other inputs, other requested outputs and other versions
miss; sequences and failures are never cached; the memory backend evicts the
least recently used within max_bytes. The redis backend runs against a real
redis-server started here on a free loopback port: two sipd sharing it share
answers; with Redis killed requests still succeed (uncached, errors counted);
with Redis back answers are cached again."""

import re
import shutil
import socket
import subprocess

import numpy as np
import pytest

import harness
import kserve as K
from cann_sip import InferenceRequest

F = np.float32


def pool(name, cache=True, **opts):
    p = {"name": name, "backend": "builtin", "pool_size": 1,
         "backend_options": dict({"shape": "-1"}, **opts)}
    if cache:
        p["response_cache"] = True
    return p


def metric(base, name, labels):
    text = K.get(base + "/metrics").body.decode()
    m = re.search(r"^%s\{%s\} (-?[0-9.]+)$" % (name, re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else 0.0


def pool_metric(base, name, pool_name, version=""):
    return metric(base, name, 'pool="%s",version="%s"' % (pool_name, version))


def executions(base, pool_name, version=""):
    return pool_metric(base, "sip_inference_count_total", pool_name, version)


def http_infer(base, model, x, version=None, **kw):
    r = K.infer(base, model, {"input": x}, version=version, **kw)
    assert r.status == 200, r
    doc, outs = K.decode_outputs(r)
    return doc, outs


def cached(doc):
    return bool((doc.get("parameters") or {}).get("cached"))


def same_answer(a, b):
    """Two replies' outputs: names, datatypes, shapes and values identical."""
    strip = lambda d: [{k: v for k, v in o.items()} for o in d["outputs"]]  # noqa: E731
    assert strip(a) == strip(b)


# ---------------------------------------------------------------------------
# memory backend

@pytest.fixture
def srv(start_sipd):
    s = start_sipd([pool("count"), pool("plain", cache=False), pool("failing", fail_every=1),
                    pool("small")],
                   server={"http": "127.0.0.1:0", "response_cache": {"backend": "memory"}})
    s.http = K.http_base(s)
    return s


def test_hit_returns_the_same_outputs_and_is_counted(srv):
    x = np.arange(5, dtype=F) * 1.5
    first, out1 = http_infer(srv.http, "count", x)
    assert not cached(first)
    again, out2 = http_infer(srv.http, "count", x)
    assert cached(again)
    same_answer(first, again)
    np.testing.assert_array_equal(out2["output"], x)
    assert out2["output"].dtype == np.float32 and out2["output"].shape == (5,)
    # Binary outputs too, and the native protocol: the same bytes.
    r = K.infer(srv.http, "count", {"input": x}, params={"binary_data_output": True})
    assert r.header_len() is not None, r
    doc, out3 = K.decode_outputs(r)
    assert cached(doc)
    assert out3["output"].tobytes() == x.tobytes()
    native = srv.client().infer(InferenceRequest("count", {"input": x}))
    assert native.outputs["output"].tobytes() == x.tobytes()
    # The model ran once; three hits (HTTP JSON, HTTP binary, native), one miss.
    assert executions(srv.http, "count") == 1
    assert pool_metric(srv.http, "sip_response_cache_hits_total", "count") == 3
    assert pool_metric(srv.http, "sip_response_cache_misses_total", "count") == 1
    assert pool_metric(srv.http, "sip_response_cache_errors_total", "count") == 0
    assert pool_metric(srv.http, "sip_response_cache_bytes", "count") > x.nbytes
    # Triton's names for the same counts (an unversioned pool is version "1").
    tri = 'model="count",version="1"'
    assert metric(srv.http, "nv_cache_num_hits_per_model", tri) == 3
    assert metric(srv.http, "nv_cache_num_misses_per_model", tri) == 1
    # A pool without response_cache never uses the cache.
    for _ in range(2):
        doc, _ = http_infer(srv.http, "plain", x)
        assert not cached(doc)
    assert executions(srv.http, "plain") == 2
    assert pool_metric(srv.http, "sip_response_cache_misses_total", "plain") == 0


def test_grpc_marks_cached_answers(start_sipd, tmp_path):
    import importlib
    import sys
    import grpc
    out = tmp_path / "stubs"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(harness.REPO / "proto"),
                    "--python_out", str(out), "--grpc_python_out", str(out),
                    "grpc_service.proto"], check=True)
    sys.path.insert(0, str(out))
    try:
        pb = importlib.import_module("grpc_service_pb2")
        svc = importlib.import_module("grpc_service_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    s = start_sipd([pool("count")], server={"grpc": "127.0.0.1:0"})
    addr = K.printed_address(s, "grpc")[len("grpc://"):]
    x = np.arange(6, dtype=F) - 2.5
    with grpc.insecure_channel(addr) as ch:
        stub = svc.GRPCInferenceServiceStub(ch)

        def infer():
            req = pb.ModelInferRequest(model_name="count")
            req.inputs.add(name="input", datatype="FP32", shape=[6])
            req.raw_input_contents.append(x.tobytes())
            return stub.ModelInfer(req, timeout=30)
        first, again = infer(), infer()
    assert "cached" not in first.parameters
    assert again.parameters["cached"].bool_param is True
    assert [(o.name, o.datatype, list(o.shape)) for o in again.outputs] == \
        [(o.name, o.datatype, list(o.shape)) for o in first.outputs] == [("output", "FP32", [6])]
    assert again.raw_output_contents[0] == first.raw_output_contents[0] == x.tobytes()


def test_other_inputs_and_outputs_miss(srv):
    x = np.ones(4, dtype=F)
    http_infer(srv.http, "count", x)
    for y in (np.full(4, 2, F), np.ones(3, dtype=F), np.full(4, -1, F)):
        doc, out = http_infer(srv.http, "count", y)
        assert not cached(doc)
        np.testing.assert_array_equal(out["output"], y)
    # The same inputs with the outputs named: another key.
    doc, _ = http_infer(srv.http, "count", x, outputs=["output"])
    assert not cached(doc)
    doc, _ = http_infer(srv.http, "count", x, outputs=["output"])
    assert cached(doc)
    # Parameters that do not change a result (priority, timeout, id) keep the key.
    doc, _ = http_infer(srv.http, "count", x, params={"priority": 1, "timeout": 900000},
                        id="req-42")
    assert cached(doc) and doc["id"] == "req-42"
    assert executions(srv.http, "count") == 5
    assert pool_metric(srv.http, "sip_response_cache_hits_total", "count") == 2


def test_failures_are_never_cached(srv):
    x = np.ones(2, dtype=F)
    for _ in range(3):
        r = K.infer(srv.http, "failing", {"input": x})
        assert r.status >= 400, r
        assert "injected failure" in r.json()["error"]
    assert pool_metric(srv.http, "sip_response_cache_hits_total", "failing") == 0
    assert pool_metric(srv.http, "sip_response_cache_misses_total", "failing") == 3
    assert pool_metric(srv.http, "sip_response_cache_bytes", "failing") == 0


def test_max_bytes_evicts_least_recently_used(start_sipd):
    # Each answer of 64 floats takes about 370 bytes: two fit in 1 KiB, three do not.
    s = start_sipd([pool("lru")], server={"http": "127.0.0.1:0",
                                          "response_cache": {"max_bytes": 1024}})
    base = K.http_base(s)
    a, b, c = (np.full(64, v, F) for v in (1, 2, 3))
    http_infer(base, "lru", a)
    http_infer(base, "lru", b)
    assert cached(http_infer(base, "lru", a)[0])  # a is now the most recently used
    http_infer(base, "lru", c)  # evicts b
    assert cached(http_infer(base, "lru", a)[0])
    assert cached(http_infer(base, "lru", c)[0])
    assert not cached(http_infer(base, "lru", b)[0])
    assert 0 < pool_metric(base, "sip_response_cache_bytes", "lru") <= 1024
    assert executions(base, "lru") == 4


def test_sequences_are_never_cached(start_sipd):
    seq = pool("seq")
    seq["sequence_batching"] = {"idle_timeout_us": 60000000}
    s = start_sipd([seq], server={"http": "127.0.0.1:0"})
    base = K.http_base(s)
    x = np.ones(3, dtype=F)
    c = s.client()
    for i in range(3):
        r = c.infer(InferenceRequest("seq", {"input": x}, sequence_id=7, sequence_start=i == 0,
                                     sequence_end=i == 2))
        np.testing.assert_array_equal(r.outputs["output"], x)
    # The same requests in another sequence: run again, never answered from the cache.
    for i in range(3):
        r = c.infer(InferenceRequest("seq", {"input": x}, sequence_id=8, sequence_start=i == 0,
                                     sequence_end=i == 2))
        np.testing.assert_array_equal(r.outputs["output"], x)
    assert executions(base, "seq") == 6
    assert pool_metric(base, "sip_response_cache_misses_total", "seq") == 0
    assert pool_metric(base, "sip_response_cache_hits_total", "seq") == 0


def test_versions_never_share_answers(start_sipd, model_dir, tmp_path):
    repo = tmp_path / "repo"
    for v in ("1", "2"):
        (repo / "addmul" / v).mkdir(parents=True)
        shutil.copy(str(model_dir["addmul"]), str(repo / "addmul" / v / "model.onnx"))
    (repo / "addmul" / "config.yaml").write_text("version_policy: all\nresponse_cache: true\n")
    s = start_sipd([], server={"http": "127.0.0.1:0", "model_repository": str(repo)})
    base = K.http_base(s)
    lhs = np.arange(8, dtype=F).reshape(2, 4)
    rhs = np.full((2, 4), 0.5, F)

    def run(version):
        r = K.infer(base, "addmul", {"lhs": lhs, "rhs": rhs}, version=version)
        assert r.status == 200, r
        doc, out = K.decode_outputs(r)
        np.testing.assert_allclose(out["y"], lhs * rhs + lhs)
        return cached(doc)
    assert not run("1")
    assert run("1")
    assert not run("2")  # the same model and inputs at another version: computed
    assert run("2")
    for v in ("1", "2"):
        assert pool_metric(base, "sip_response_cache_hits_total", "addmul", v) == 1
        assert pool_metric(base, "sip_response_cache_misses_total", "addmul", v) == 1
        assert executions(base, "addmul", v) == 1


# ---------------------------------------------------------------------------
# redis backend

class Redis:
    """A redis-server on a loopback port, no persistence; stop() always."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.port = None
        self.proc = None

    def start(self, port=None):
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not installed (scripts/deps.sh installs it)"
        self.port = port or harness.free_port()
        self.log = open(str(self.workdir / "redis.log"), "ab")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", str(self.workdir)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        harness.wait_until(lambda: self.proc.poll() is not None or self.ping(),
                           what="redis-server to answer PING")
        assert self.proc.poll() is None, (self.workdir / "redis.log").read_text()
        return self

    def command(self, *args):
        """One RESP command; the reply's first line."""
        req = b"*%d\r\n" % len(args) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in args))
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(req)
            buf = b""
            while not buf.endswith(b"\r\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
            return buf.split(b"\r\n")[0].decode()

    def ping(self):
        try:
            return self.command("PING") == "+PONG"
        except OSError:
            return False

    def dbsize(self):
        return int(self.command("DBSIZE")[1:])

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc:
            self.log.close()
        self.proc = None


@pytest.fixture
def redis(tmp_path):
    r = Redis(tmp_path)
    try:
        yield r.start()
    finally:
        r.stop()


def redis_server(start_sipd, redis):
    s = start_sipd([pool("count")], server={
        "http": "127.0.0.1:0",
        "response_cache": {"backend": "redis",
                           "redis": {"address": "127.0.0.1:%d" % redis.port, "ttl_s": 600,
                                     "timeout_ms": 200}}})
    s.http = K.http_base(s)
    return s


def test_redis_shared_between_servers_and_down_is_not_fatal(start_sipd, redis):
    a = redis_server(start_sipd, redis)
    b = redis_server(start_sipd, redis)
    x = np.linspace(0, 1, 6, dtype=F)
    first, _ = http_infer(a.http, "count", x)
    assert not cached(first)
    assert redis.dbsize() == 1  # stored before the answer was sent
    # The second server gets what the first computed, without running it.
    doc, out = http_infer(b.http, "count", x)
    assert cached(doc)
    same_answer(first, doc)
    assert out["output"].tobytes() == x.tobytes()
    assert executions(b.http, "count") == 0
    assert pool_metric(b.http, "sip_response_cache_hits_total", "count") == 1
    assert pool_metric(a.http, "sip_response_cache_misses_total", "count") == 1

    # Redis down: every request still succeeds, uncached, and errors are counted.
    port = redis.port
    redis.stop()
    for v in (x, np.full(3, 7, F), x):
        doc, out = http_infer(a.http, "count", v)
        assert not cached(doc)
        np.testing.assert_array_equal(out["output"], v)
    assert pool_metric(a.http, "sip_response_cache_errors_total", "count") >= 3
    assert executions(a.http, "count") == 4

    # Redis back (empty): once the backoff has passed, answers are kept and hit again.
    redis.start(port)
    y = np.full(4, 3, F)

    def hit():
        doc, out = http_infer(a.http, "count", y)
        np.testing.assert_array_equal(out["output"], y)
        return cached(doc)
    harness.wait_until(hit, what="a cache hit after Redis came back")
    doc, _ = http_infer(b.http, "count", y)
    assert cached(doc)
    assert redis.dbsize() >= 1
