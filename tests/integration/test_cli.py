"""The `sip` command-line client against a real sipd."""

import json
import re
import subprocess

import numpy as np

import harness
import models

SIP = harness.BUILD_DIR / "sip"


def sip(srv, *args, endpoint=None):
    return subprocess.run([str(SIP), "-e", endpoint or srv.endpoint, *args],
                          capture_output=True, text=True, timeout=30)


def test_cli_status_pools_ready(start_sipd, model_dir, tmp_path):
    bad = tmp_path / "bad.onnx"
    models.write_corrupt(bad)
    srv = start_sipd([{"name": "addmul", "model_path": str(model_dir["addmul"]), "pool_size": 2},
                      {"name": "broken", "model_path": str(bad)}])
    r = sip(srv, "ready")  # a pool FAILED: not ready (server.strict_readiness)
    assert r.returncode == 1 and r.stdout.strip() == "not ready"

    r = sip(srv, "status")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^addmul\s+READY\s+2\s+0", r.stdout, re.M), r.stdout
    assert re.search(r"^broken\s+FAILED", r.stdout, re.M), r.stdout
    assert "session addmul/0" in r.stdout and "session addmul/1" in r.stdout
    assert "error: FAILED_PRECONDITION" in r.stdout

    r = sip(srv, "pools")
    assert r.returncode == 0, r.stderr
    assert re.search(r"input\s+lhs\s+float32\s+\[-1, 4\]", r.stdout), r.stdout
    assert re.search(r"output\s+y\s+float32\s+\[-1, 4\]", r.stdout), r.stdout

    r = sip(srv, "--json", "status")
    st = json.loads(r.stdout)
    assert {p["name"]: p["state"] for p in st["pools"]} == {"addmul": "READY", "broken": "FAILED"}


def test_cli_infer_matches_numpy(start_sipd, model_dir):
    srv = start_sipd([{"name": "addmul", "model_path": str(model_dir["addmul"])}])
    lhs = np.arange(8, dtype=np.float32).reshape(2, 4)
    rhs = np.full((2, 4), 3, np.float32)
    for ep in (srv.unix_endpoint, srv.tcp_endpoint):
        r = sip(srv, "infer", "addmul", "-i", "lhs:float32:2,4=" + ",".join(map(str, lhs.ravel())),
                "-i", "rhs:float32:2,4=ones", endpoint=ep)
        assert r.returncode == 0, r.stderr
        line = [l for l in r.stdout.splitlines() if l.startswith("y:")][0]
        assert "float32 [2, 4]" in line
        shown = [float(v) for v in line.split("=")[1].split("(")[0].split()[:8]]
        np.testing.assert_allclose(shown, models.addmul_ref(lhs, np.ones_like(rhs)).ravel())
        assert re.search(r"latency [0-9.]+ ms \(server: queue \d+ us, compute \d+ us", r.stdout)


def test_cli_errors_exit_nonzero(start_sipd, model_dir):
    srv = start_sipd([{"name": "addmul", "model_path": str(model_dir["addmul"])}])
    r = sip(srv, "infer", "nope", "-i", "lhs:float32:1,4=zeros")
    assert r.returncode != 0 and "NOT_FOUND" in r.stderr and "nope" in r.stderr
    r = sip(srv, "infer", "addmul", "-i", "lhs:float32:1,3=zeros", "-i", "rhs:float32:1,4=zeros")
    assert r.returncode != 0 and "INVALID_ARGUMENT" in r.stderr and "[-1,4]" in r.stderr
    r = sip(srv, "status", endpoint="ipc:///tmp/no_such_sip.sock")
    assert r.returncode != 0 and "UNAVAILABLE" in r.stderr
