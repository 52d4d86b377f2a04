"""KServe/Triton system shared memory over HTTP with a real sipd: regions the
test creates in /dev/shm are registered, listed and unregistered through
/v2/systemsharedmemory, inference reads inputs from them and writes outputs
into them (compared with numpy), and every hostile registration or request
is refused with its status and reason while sipd stays up."""

import json
import mmap
import os
import threading
import time

import numpy as np
import pytest

from harness import serve, wait_until
import kserve as K
import models


class Shm:
    """A POSIX shared memory object of the test's own, mapped."""

    def __init__(self, size, tag="r"):
        self.name = "sip_test_%d_%s_%d" % (os.getpid(), tag, time.monotonic_ns() % 10**9)
        self.key = "/" + self.name
        self.path = "/dev/shm/" + self.name
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.size = size

    def write(self, offset, data):
        self.map[offset:offset + len(data)] = data

    def read(self, offset, n):
        return bytes(self.map[offset:offset + n])

    def close(self):
        self.map.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


@pytest.fixture
def shm():
    made = []

    def make(size, tag="r"):
        s = Shm(size, tag)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("shm_http")
    pools = [{"name": "id_" + dt, "model_path": str(model_dir["id_" + dt])} for dt in models.DTYPES]
    pools += [
        {"name": "addmul", "model_path": str(model_dir["addmul"])},
        {"name": "slow", "backend": "builtin", "pool_size": 1,
         "backend_options": {"shape": "-1,4", "delay_ms": 600}},
    ]
    with serve(root, pools, server={"http": "127.0.0.1:0", "http_threads": 2}) as s:
        s.http = K.http_base(s)
        yield s


@pytest.fixture
def base(srv):
    yield srv.http
    # Every test leaves the server's set empty, and sipd up.
    assert K.request("POST", srv.http + "/v2/systemsharedmemory/unregister").status == 200
    assert K.get(srv.http + "/v2/health/live").status == 200


def error_of(reply, status):
    assert reply.status == status, reply
    doc = json.loads(reply.body)
    assert list(doc) == ["error"] and doc["error"], doc
    return doc["error"]


def post(base, path, doc=None, raw=None):
    body = raw if raw is not None else (json.dumps(doc).encode() if doc is not None else b"")
    return K.request("POST", base + path, body=body, headers={"Content-Type": "application/json"})


def register(base, name, key, offset, byte_size):
    return post(base, "/v2/systemsharedmemory/region/%s/register" % name,
                {"key": key, "offset": offset, "byte_size": byte_size})


def status(base, name=None):
    path = "/v2/systemsharedmemory%s/status" % ("/region/" + name if name else "")
    return K.get(base + path)


def shm_param(region, nbytes, offset=0):
    p = {"shared_memory_region": region, "shared_memory_byte_size": nbytes}
    if offset:
        p["shared_memory_offset"] = offset
    return p


def raw_bytes(arr):
    return K.to_kserve_bytes(arr) if K.dtype_name(arr) == "string" else arr.tobytes()


def infer(base, model, inputs, outputs=None, headers=None):
    """inputs: [(name, arr or None, params)]; arr None: data comes from shm."""
    doc = {"inputs": []}
    for name, arr, params, dt, shape in inputs:
        t = {"name": name, "datatype": dt, "shape": list(shape)}
        if arr is not None:
            t["data"] = K.json_data(arr)
        if params:
            t["parameters"] = params
        doc["inputs"].append(t)
    if outputs is not None:
        doc["outputs"] = [{"name": n, "parameters": p} if p else {"name": n} for n, p in outputs]
    return post(base, "/v2/models/%s/infer" % model, doc)


def shm_input(name, arr, region, offset=0, nbytes=None):
    n = len(raw_bytes(arr)) if nbytes is None else nbytes
    return (name, None, shm_param(region, n, offset), K.DATATYPE[K.dtype_name(arr)], arr.shape)


def json_input(name, arr):
    return (name, arr, None, K.DATATYPE[K.dtype_name(arr)], arr.shape)


def out_doc(reply, name):
    for o in reply.json()["outputs"]:
        if o["name"] == name:
            return o
    raise AssertionError("no output %r in %r" % (name, reply))


def from_shm(s, offset, out):
    """The ndarray an output listed with shared memory parameters holds."""
    p = out["parameters"]
    raw = s.read(offset, p["shared_memory_byte_size"])
    dt, shape = K.NUMPY[out["datatype"]], tuple(out["shape"])
    if dt == "string":
        return K.from_kserve_bytes(raw, shape)
    return np.frombuffer(raw, dtype=dt).reshape(shape)


def same(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    if b.dtype == object:
        assert [bytes(x) for x in a.ravel()] == [bytes(x) for x in b.ravel()]
    else:
        assert a.dtype == b.dtype
        assert a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------
# the routes

def test_extension_is_listed(base):
    assert "system_shared_memory" in K.get(base + "/v2").json()["extensions"]


def test_register_status_unregister(base, shm):
    s = shm(8192)
    assert status(base).json() == []
    for name, off, size in (("zeta", 4096, 4096), ("alpha", 0, 100), ("mid.1-x", 10, 1)):
        r = register(base, name, s.key, off, size)
        assert r.status == 200 and r.json() == {}, r
    # Sorted by name, each with what it was registered with.
    assert status(base).json() == [
        {"name": "alpha", "key": s.key, "offset": 0, "byte_size": 100},
        {"name": "mid.1-x", "key": s.key, "offset": 10, "byte_size": 1},
        {"name": "zeta", "key": s.key, "offset": 4096, "byte_size": 4096}]
    assert status(base, "zeta").json() == [
        {"name": "zeta", "key": s.key, "offset": 4096, "byte_size": 4096}]
    assert status(base, "alpha").status == 200
    assert "no shared memory region named 'nope'" in error_of(status(base, "nope"), 404)
    # One, then an unknown one (success, as Triton), then all.
    assert post(base, "/v2/systemsharedmemory/region/alpha/unregister").status == 200
    assert post(base, "/v2/systemsharedmemory/region/alpha/unregister").status == 200
    assert [r["name"] for r in status(base).json()] == ["mid.1-x", "zeta"]
    error_of(status(base, "alpha"), 404)
    assert post(base, "/v2/systemsharedmemory/unregister").status == 200
    assert status(base).json() == []
    # The name is free again.
    assert register(base, "alpha", s.key, 0, 8).status == 200
    # The key without its leading '/' is the same object.
    assert register(base, "bare", s.name, 0, 8).status == 200
    # HEAD answers like GET; the POST routes take only POST.
    assert K.request("HEAD", base + "/v2/systemsharedmemory/status").status == 200
    assert K.get(base + "/v2/systemsharedmemory/region/a/register").status == 405
    assert post(base, "/v2/systemsharedmemory/status").status == 405


def test_hostile_registrations(base, shm, tmp_path):
    s = shm(4096)
    bad_keys = ["../etc/passwd", "/a/b", "", "/", "/..", ".", "a/", "/" + "k" * 300, "x" * 256]
    for key in bad_keys:
        msg = error_of(register(base, "r", key, 0, 16), 400)
        assert "POSIX shm name" in msg or "key is needed" in msg, (key, msg)
    msg = error_of(register(base, "r", "/sip_test_no_such_object_%d" % os.getpid(), 0, 16), 404)
    assert "no shared memory object" in msg
    # Larger than the object (its real size, fstat), or past its end.
    msg = error_of(register(base, "r", s.key, 0, 4097), 400)
    assert "holds 4096 bytes" in msg, msg
    assert "holds 4096 bytes" in error_of(register(base, "r", s.key, 4000, 97), 400)
    # offset + byte_size overflowing, however the numbers come.
    assert "not a usable range" in error_of(register(base, "r", s.key, 2**63 - 1, 2), 400)
    assert "not a usable range" in error_of(register(base, "r", s.key, 1, 2**63 - 1), 400)
    msg = error_of(register(base, "r", s.key, 2**64 - 1, 16), 400)
    assert "not a JSON object" in msg and "too big" in msg, msg
    assert "not an integer >= 0" in error_of(register(base, "r", s.key, -1, 16), 400)
    assert "not an integer >= 0" in error_of(register(base, "r", s.key, 0, 1.5), 400)
    assert "not a usable range" in error_of(register(base, "r", s.key, 0, 0), 400)
    # Malformed bodies.
    path = "/v2/systemsharedmemory/region/r/register"
    assert "byte_size is missing" in error_of(post(base, path, {"key": s.key}), 400)
    assert "key is missing" in error_of(post(base, path, {"byte_size": 4}), 400)
    assert "key is not a string" in error_of(post(base, path, {"key": 5, "byte_size": 4}), 400)
    assert "unknown field 'size'" in error_of(
        post(base, path, {"key": s.key, "byte_size": 4, "size": 4}), 400)
    assert "not a JSON object" in error_of(post(base, path, raw=b"[1]"), 400)
    assert "not a JSON object" in error_of(post(base, path, raw=b"{\"key\":"), 400)
    assert "NUL" in error_of(post(base, path, raw=b'{"key": "/a\\u0000b", "byte_size": 4}'), 400)
    # Names: name characters, 1 to 255 bytes (others are no route).
    assert register(base, "n" * 255, s.key, 0, 16).status == 200
    error_of(register(base, "n" * 256, s.key, 0, 16), 404)
    error_of(post(base, "/v2/systemsharedmemory/region/a%20b/register",
                  {"key": s.key, "byte_size": 4}), 404)
    # Duplicate names.
    assert register(base, "dup", s.key, 0, 16).status == 200
    assert "already registered" in error_of(register(base, "dup", s.key, 16, 16), 409)
    # Things in /dev/shm that are not shared memory objects: a symbolic link
    # (to a file the server could read) and a FIFO, which must not block.
    link = shm(1, "link")
    os.unlink(link.path)
    target = tmp_path / "secret"
    target.write_bytes(b"x" * 4096)
    os.symlink(str(target), link.path)
    msg = error_of(register(base, "r", link.key, 0, 16), 400)
    assert "cannot open" in msg, msg
    fifo = shm(1, "fifo")
    os.unlink(fifo.path)
    os.mkfifo(fifo.path, 0o600)
    t = time.monotonic()
    assert "not a shared memory object" in error_of(register(base, "r", fifo.key, 0, 16), 400)
    assert time.monotonic() - t < 5
    assert [r["name"] for r in status(base).json()] == ["dup", "n" * 255]


# ---------------------------------------------------------------------------
# inference

@pytest.mark.parametrize("dtype", models.DTYPES)
def test_identity_through_shm(base, shm, dtype):
    rng = np.random.default_rng(7)
    from test_http import rand
    data, scalar = rand(dtype, (3, 5), rng), rand(dtype, (), rng)
    if dtype == "string":  # np.empty(()) object scalars: one element
        scalar = np.array(b"scalar-string", dtype=object)
    s_in, s_out = shm(8192, "in"), shm(8192, "out")
    d, c = raw_bytes(data), raw_bytes(scalar)
    s_in.write(64, d)
    s_in.write(1024, c)
    assert register(base, "in", s_in.key, 0, 8192).status == 200
    assert register(base, "out", s_out.key, 512, 4096).status == 200
    r = infer(base, "id_" + dtype,
              [shm_input("data", data, "in", 64), shm_input("scalar", scalar, "in", 1024)],
              outputs=[("data_out", shm_param("out", 3000, 8)),
                       ("scalar_out", shm_param("out", 1000, 3008))])
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("application/json")
    o = out_doc(r, "data_out")
    assert "data" not in o
    assert o["parameters"] == {"shared_memory_region": "out", "shared_memory_byte_size": len(d),
                               "shared_memory_offset": 8}
    assert o["datatype"] == K.DATATYPE[dtype] and o["shape"] == [3, 5]
    # Offsets are the registration's: region "out" starts 512 bytes in.
    same(from_shm(s_out, 512 + 8, o), data)
    same(from_shm(s_out, 512 + 3008, out_doc(r, "scalar_out")), scalar)


def test_mixed_shm_json_and_binary(base, shm):
    rng = np.random.default_rng(3)
    lhs = rng.standard_normal((6, 4)).astype(np.float32)
    rhs = rng.standard_normal((6, 4)).astype(np.float32)
    ref = models.addmul_ref(lhs, rhs)
    s = shm(4096)
    s.write(0, lhs.tobytes())
    assert register(base, "lhs", s.key, 0, lhs.nbytes).status == 200
    assert register(base, "y", s.key, 1024, 1024).status == 200
    # shm input + JSON input, output into shm.
    r = infer(base, "addmul", [shm_input("lhs", lhs, "lhs"), json_input("rhs", rhs)],
              outputs=[("y", shm_param("y", ref.nbytes))])
    assert r.status == 200, r
    np.testing.assert_array_equal(from_shm(s, 1024, out_doc(r, "y")), ref)
    # shm input, output in binary (the default kind for unlisted options).
    s.write(1024, b"\0" * ref.nbytes)
    doc = {"inputs": [{"name": "lhs", "datatype": "FP32", "shape": [6, 4],
                       "parameters": shm_param("lhs", lhs.nbytes)},
                      {"name": "rhs", "datatype": "FP32", "shape": [6, 4],
                       "parameters": {"binary_data_size": rhs.nbytes}}],
           "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}
    head = json.dumps(doc).encode()
    r = K.request("POST", base + "/v2/models/addmul/infer", body=head + rhs.tobytes(),
                  headers={"Inference-Header-Content-Length": str(len(head))})
    assert r.status == 200, r
    np.testing.assert_array_equal(K.decode_outputs(r)[1]["y"], ref)
    assert s.read(1024, ref.nbytes) == b"\0" * ref.nbytes  # not written: asked in binary
    # Binary and shm outputs in one answer (two_out-like: identity's two).
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    sc = np.array(5, dtype=np.int32)
    r = infer(base, "id_int32", [json_input("data", x), json_input("scalar", sc)],
              outputs=[("data_out", {"binary_data": True}), ("scalar_out", shm_param("y", 4))])
    assert r.status == 200, r
    assert r.header_len() is not None
    hl = r.header_len()
    doc = json.loads(r.body[:hl])
    assert doc["outputs"][0]["parameters"] == {"binary_data_size": 48}
    assert np.frombuffer(r.body[hl:], np.int32).tolist() == x.ravel().tolist()
    assert len(r.body) == hl + 48  # nothing of the shm output in the body
    assert np.frombuffer(s.read(1024, 4), np.int32)[0] == 5


def test_infer_refusals(base, shm):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    sc = np.array(1, dtype=np.float32)
    s = shm(4096)
    s.write(0, x.tobytes())
    assert register(base, "r", s.key, 0, 64).status == 200

    def run(data_params, out_params=None):
        ins = [("data", None, data_params, "FP32", [2, 4]), json_input("scalar", sc)]
        outs = [("data_out", out_params)] if out_params else None
        return infer(base, "id_float32", ins, outputs=outs)

    assert run(shm_param("r", 32)).status == 200
    msg = error_of(run(shm_param("gone", 32)), 400)
    assert "input 'data': no shared memory region named 'gone'" in msg
    assert "past the end of shared memory region 'r' (64 bytes)" in error_of(
        run(shm_param("r", 32, 40)), 400)
    assert "past the end" in error_of(run(shm_param("r", 32, 2**63 - 1)), 400)
    assert "malformed" in error_of(run(shm_param("r", 32, 2**64 - 1)), 400)
    msg = error_of(run(shm_param("r", 28)), 400)
    assert "shared_memory_byte_size is 28; shape and FP32 need 32 bytes" in msg
    assert "shared_memory_byte_size is missing" in error_of(
        run({"shared_memory_region": "r"}), 400)
    assert "shared_memory_offset is not an integer" in error_of(
        run(dict(shm_param("r", 32), shared_memory_offset=-8)), 400)
    # Outputs: an unknown region or a range outside it before running; too
    # small once the output's size is known, naming the size needed.
    ok = shm_param("r", 32)
    assert "output 'data_out': no shared memory region named 'gone'" in error_of(
        run(ok, shm_param("gone", 32)), 400)
    assert "past the end" in error_of(run(ok, shm_param("r", 32, 48)), 400)
    msg = error_of(run(ok, shm_param("r", 16, 32)), 400)
    assert "output 'data_out' is 32 bytes" in msg and "shared_memory_byte_size >= 32" in msg, msg
    assert "both shared_memory_region and binary_data" in error_of(
        run(ok, dict(shm_param("r", 32, 32), binary_data=True)), 400)
    # The object shrunk under the registration: refused, no SIGBUS.
    os.truncate(s.path, 16)
    assert "truncated" in error_of(run(shm_param("r", 32)), 400)
    os.truncate(s.path, 4096)
    assert run(shm_param("r", 32)).status == 200


def test_unregister_while_in_use(base, srv, shm):
    """A slow request holds its regions: unregistering them meanwhile (one,
    then all) leaves it reading and writing the same memory; it answers
    correctly and sipd stays up; later requests naming them are refused."""
    x = np.arange(16, dtype=np.float32).reshape(4, 4) * 1.5
    s_in, s_out = shm(4096, "in"), shm(4096, "out")
    s_in.write(0, x.tobytes())
    assert register(base, "in", s_in.key, 0, 4096).status == 200
    assert register(base, "out", s_out.key, 0, 4096).status == 200
    c = srv.client()
    for how in ("/region/in/unregister", "/unregister"):
        s_out.write(0, b"\0" * x.nbytes)
        replies = []
        t = threading.Thread(target=lambda: replies.append(infer(
            base, "slow", [shm_input("input", x, "in")],
            outputs=[("output", shm_param("out", x.nbytes))])))
        t.start()
        wait_until(lambda: srv.pool_status("slow", c)["sessions"][0]["state"] == "RUNNING",
                   what="the request decoded and running (600 ms)")
        assert post(base, "/v2/systemsharedmemory" + how).status == 200
        assert "in" not in [r["name"] for r in status(base).json()]
        t.join(10)
        assert replies and replies[0].status == 200, replies
        np.testing.assert_array_equal(from_shm(s_out, 0, out_doc(replies[0], "output")), x)
        assert "no shared memory region named 'in'" in error_of(
            infer(base, "slow", [shm_input("input", x, "in")]), 400)
        assert register(base, "in", s_in.key, 0, 4096).status == 200
        if how == "/unregister":
            break
        assert status(base, "out").status == 200
    assert K.get(base + "/v2/health/live").status == 200
    assert srv.proc.poll() is None


def test_triton_client_flow(base, shm):
    """What Triton's simple_http_shm_client does: clear, register an input
    and an output region, infer, read the output from shared memory."""
    assert post(base, "/v2/systemsharedmemory/unregister").status == 200
    assert status(base).json() == []
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    b = np.full((4, 4), 2, dtype=np.float32)
    s_in = shm(a.nbytes + b.nbytes, "input_data")
    s_out = shm(a.nbytes, "output_data")
    s_in.write(0, a.tobytes())
    s_in.write(a.nbytes, b.tobytes())
    assert register(base, "input_data", s_in.key, 0, s_in.size).status == 200
    assert register(base, "output_data", s_out.key, 0, s_out.size).status == 200
    assert [r["name"] for r in status(base).json()] == ["input_data", "output_data"]
    doc = {"inputs": [
        {"name": "lhs", "shape": [4, 4], "datatype": "FP32",
         "parameters": {"shared_memory_region": "input_data", "shared_memory_byte_size": a.nbytes}},
        {"name": "rhs", "shape": [4, 4], "datatype": "FP32",
         "parameters": {"shared_memory_region": "input_data", "shared_memory_byte_size": b.nbytes,
                        "shared_memory_offset": a.nbytes}}],
        "outputs": [{"name": "y", "parameters": {"shared_memory_region": "output_data",
                                                 "shared_memory_byte_size": a.nbytes}}]}
    # Twice: results land in the same region each time.
    for _ in range(2):
        r = post(base, "/v2/models/addmul/infer", doc)
        assert r.status == 200, r
        out = out_doc(r, "y")
        assert out["shape"] == [4, 4] and out["datatype"] == "FP32"
        np.testing.assert_array_equal(np.frombuffer(s_out.read(0, a.nbytes), np.float32)
                                      .reshape(4, 4), models.addmul_ref(a, b))
    assert post(base, "/v2/systemsharedmemory/region/input_data/unregister").status == 200
    assert post(base, "/v2/systemsharedmemory/region/output_data/unregister").status == 200
    assert status(base).json() == []
