"""The container image (issue 20, point 4; docs/deploy.md "Container image"):
`make image IMAGE_BASE=debian` builds Containerfile on Debian 12 bases made
here from Debian's packages (mmdebstrap, imported with podman: no registry is
reachable from these machines), then the image runs with a config and a
model repository mounted on its volumes: it turns ready, answers one
inference over HTTP and one over gRPC, and SIGTERM during a request drains
it (the request completes) and it exits 0.

How it runs: `buildah run --isolation chroot` (what works inside this
sandbox; `podman run` needs to raise rlimits, which the sandbox forbids).
buildah run does not read the image's ENTRYPOINT and CMD, so the test runs
the command they name and checks the image's metadata (user, ports, volumes,
healthcheck, stop signal) separately; the healthcheck's command itself runs
inside the container against the test's port.

The build stage compiles with -j2; the whole build takes a few minutes cold
(mmdebstrap twice, apt, compiling), well under a minute when only sources
changed and the apt layers are cached."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import pytest

import harness
import kserve as K
import models
from harness import free_port, to_yaml, wait_until

IMAGE = "localhost/sip-test:latest"
BUILD_TIMEOUT_S = 900
START_TIMEOUT_S = 60


def need(tool):
    if not shutil.which(tool):
        pytest.skip("%s not found (scripts/deps.sh installs it)" % tool)


@pytest.fixture(scope="module")
def image():
    for tool in ("buildah", "podman", "mmdebstrap"):
        need(tool)
    t0 = time.monotonic()
    r = subprocess.run(["make", "--no-print-directory", "image", "IMAGE=" + IMAGE,
                        "IMAGE_BASE=debian", "IMAGE_JOBS=2"], cwd=str(harness.REPO),
                       capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    took = time.monotonic() - t0
    assert r.returncode == 0, "make image failed:\n%s\n%s" % (r.stdout[-6000:], r.stderr[-6000:])
    print("\nmake image: %.0f s (buildah bud --isolation chroot, -j2)" % took)
    out = subprocess.run(["podman", "image", "inspect", IMAGE], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)[0]


@pytest.fixture
def container(image):
    name = "sip-test-%d-%d" % (os.getpid(), time.monotonic_ns() % 10**9)
    subprocess.run(["buildah", "from", "--name", name, IMAGE], check=True,
                   capture_output=True, timeout=120)
    try:
        yield name
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True, timeout=120)


def test_image_metadata(image):
    cfg = image["Config"]
    assert cfg["User"] == "sip"
    assert set(cfg["ExposedPorts"]) == {"8000/tcp", "8001/tcp"}
    assert set(cfg["Volumes"]) == {"/etc/sip", "/models"}
    assert cfg["Entrypoint"] == ["/usr/bin/sipd"]
    assert cfg["Cmd"] == ["--config", "/etc/sip/sip.yaml"]
    assert cfg["StopSignal"] == "SIGTERM"
    hc = image["Healthcheck"]["Test"]
    assert hc[0] == "CMD-SHELL" and "http://127.0.0.1:8000/v2/health/ready" in hc[1], hc


def in_container(name, *cmd, timeout=120, mounts=()):
    args = ["buildah", "run", "--isolation", "chroot"]
    for src, dst in mounts:
        args += ["-v", "%s:%s:ro" % (src, dst)]
    return subprocess.run(args + [name, "--"] + list(cmd), capture_output=True, text=True,
                          timeout=timeout)


def test_runtime_has_no_build_tools(container):
    r = in_container(container, "sh", "-c",
                     "id -un; command -v cc gcc cmake || true; ls /usr/include/sip 2>&1 || true;"
                     " sipd --version; sip --version; echo man: $(find /usr/share/man -type f | wc -l)")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.split("\n")
    assert lines[0] == "sip", r.stdout
    assert "/cc" not in r.stdout and "cmake" not in r.stdout, r.stdout
    assert "No such file" in r.stdout and "sipd " in r.stdout and "sip " in r.stdout, r.stdout
    assert "man: 0" in r.stdout, r.stdout  # the slim base: no manuals


def sipd_under(pid):
    """The pid of the sipd below process `pid` (buildah's chroot helper
    starts it), or None."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        table[int(entry)] = (ppid, cmd)
    for p, (ppid, cmd) in table.items():
        if cmd and cmd[0] == b"/usr/bin/sipd":
            q = ppid
            while q > 1 and q in table:
                if q == pid:
                    return p
                q = table[q][0]
    return None


def uid_of(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


def test_serves_http_grpc_and_drains_on_sigterm(container, tmp_path):
    grpc = pytest.importorskip("grpc")
    # A model repository and a config on ports of our own, mounted beside
    # the image's volumes: `buildah run -v` onto a path the image declares a
    # VOLUME races with buildah's own volume mount there (seen on buildah
    # 1.28: either may end on top), so /mnt/... stand for /models and /etc/sip.
    repo = tmp_path / "models"
    (repo / "addmul" / "1").mkdir(parents=True)
    onnx.save(models.addmul(), str(repo / "addmul" / "1" / "model.onnx"))
    http_port, grpc_port = free_port(), free_port()
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "sip.yaml").write_text(to_yaml({
        "server": {"http": "127.0.0.1:%d" % http_port, "grpc": "127.0.0.1:%d" % grpc_port,
                   "model_repository": "/mnt/models", "drain_timeout_ms": 20000,
                   "endpoints": ["unix:///run/sip/sipd.sock"]},
        "session_pools": [{"name": "slow", "backend": "builtin",
                           "backend_options": {"shape": "-1,4", "delay_ms": 1500}}]}) + "\n")
    for p in (tmp_path, repo, conf):
        os.chmod(p, 0o755)  # read by the image's user
    for dirpath, dirs, files in os.walk(tmp_path):
        for d in dirs:
            os.chmod(os.path.join(dirpath, d), 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    log = open(tmp_path / "sipd.log", "wb")
    proc = subprocess.Popen(
        ["buildah", "run", "--isolation", "chroot", "-v", "%s:/mnt/models:ro" % repo,
         "-v", "%s:/mnt/config:ro" % conf, container, "--", "/usr/bin/sipd", "--config",
         "/mnt/config/sip.yaml"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = "http://127.0.0.1:%d" % http_port

    def log_tail():
        return (tmp_path / "sipd.log").read_text(errors="replace")[-4000:]
    try:
        def ready():
            assert proc.poll() is None, "the container exited:\n" + log_tail()
            try:
                return K.get(base + "/v2/health/ready", timeout=2).status == 200
            except OSError:
                return False
        wait_until(ready, START_TIMEOUT_S, lambda: "sipd ready in the container:\n" + log_tail())
        pid = wait_until(lambda: sipd_under(proc.pid), what="sipd below buildah run")
        assert uid_of(pid) == 10001, "sipd runs as uid %s, expected the image's user sip" % uid_of(pid)

        # One inference over HTTP, one over gRPC, against numpy.
        rng = np.random.default_rng(7)
        lhs = rng.standard_normal((2, 4)).astype(np.float32)
        rhs = rng.standard_normal((2, 4)).astype(np.float32)
        r = K.infer(base, "addmul", {"lhs": lhs, "rhs": rhs})
        assert r.status == 200, r.body
        np.testing.assert_allclose(K.decode_outputs(r)[1]["y"], models.addmul_ref(lhs, rhs),
                                   rtol=1e-6)
        pb, svc = grpc_stubs(tmp_path)
        with grpc.insecure_channel("127.0.0.1:%d" % grpc_port) as ch:
            stub = svc.GRPCInferenceServiceStub(ch)
            assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready is True
            req = pb.ModelInferRequest(model_name="addmul")
            for name, arr in (("lhs", lhs), ("rhs", rhs)):
                t = req.inputs.add(name=name, datatype="FP32", shape=list(arr.shape))
                t.contents.fp32_contents.extend(arr.ravel().tolist())
            resp = stub.ModelInfer(req, timeout=30)
            y = np.frombuffer(resp.raw_output_contents[0], np.float32).reshape(2, 4)
            np.testing.assert_allclose(y, models.addmul_ref(lhs, rhs), rtol=1e-6)

        # The image's healthcheck command, on the test's port.
        hc = in_container(container, "sh", "-c",
                          "curl -fsS -o /dev/null http://127.0.0.1:%d/v2/health/ready" % http_port)
        assert hc.returncode == 0, hc.stdout + hc.stderr

        # SIGTERM while a request runs: it completes, then sipd exits 0.
        x = np.ones((1, 4), np.float32)
        answer = {}

        def slow():
            answer["r"] = K.infer(base, "slow", {"input": x})
        t = threading.Thread(target=slow)
        t.start()
        wait_until(lambda: _running(base, "slow"), what="the slow request running")
        os.kill(pid, signal.SIGTERM)
        t.join(60)
        assert not t.is_alive()
        assert answer["r"].status == 200, answer["r"].body
        np.testing.assert_array_equal(K.decode_outputs(answer["r"])[1]["output"], x)
        assert proc.wait(START_TIMEOUT_S) == 0, log_tail()
        text = log_tail()
        assert "SIGTERM received, draining" in text and 'msg="drained"' in text, text
    finally:
        if proc.poll() is None:
            p = sipd_under(proc.pid)
            if p:
                os.kill(p, signal.SIGKILL)
            proc.kill()
            proc.wait(30)
        log.close()


def _running(base, pool):
    """A session of the pool is executing a request (/metrics sip_sessions)."""
    text = K.get(base + "/metrics").body.decode()
    return any(line.startswith("sip_sessions{") and 'pool="%s"' % pool in line
               and 'state="RUNNING"' in line and float(line.rsplit(" ", 1)[1]) >= 1
               for line in text.splitlines())


def grpc_stubs(tmp_path):
    out = tmp_path / "stubs"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(harness.REPO / "proto"),
                    "--python_out", str(out), "--grpc_python_out", str(out),
                    "grpc_service.proto"], check=True)
    sys.path.insert(0, str(out))
    try:
        import grpc_service_pb2 as pb
        import grpc_service_pb2_grpc as svc
    finally:
        sys.path.remove(str(out))
    return pb, svc
