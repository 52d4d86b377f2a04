"""sipd as a process: --check-config, startup failures, SIGTERM/SIGINT drain."""

import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from cann_sip import InferenceRequest, SipError, UnavailableError
import harness
from harness import SIPD, sipd_env, to_yaml

F = np.float32


def check_config(path, timeout=30):
    return subprocess.run([str(SIPD), "--check-config", str(path)], capture_output=True,
                          text=True, timeout=timeout, env=sipd_env())


def good_config():
    # --check-config validates only: nothing is bound or loaded
    return {"server": {"endpoints": ["ipc:///tmp/sip_check_good.sock", "tcp://127.0.0.1:1"],
                       "intra_op_threads": 1, "max_frame_bytes": 1048576, "log_level": "warn"},
            "session_pools": [{"name": "a", "backend": "builtin", "pool_size": 2,
                               "priority": "high",
                               "resource_quota": {"max_memory_mb": 64,
                                                  "max_compute_percent": 50},
                               "backend_options": {"delay_ms": 5, "shape": "-1,4"}}]}


# ---------------------------------------------------------------------------
# --check-config

def test_check_config_good(sipd_bin, tmp_path, model_dir):
    cfg = good_config()
    cfg["session_pools"].append({"name": "m", "model_path": str(model_dir["addmul"])})
    p = tmp_path / "good.yaml"
    p.write_text(to_yaml(cfg) + "\n")
    r = check_config(p)
    assert r.returncode == 0, r.stderr


BAD_CONFIGS = {
    # name: (text, line of the error (1-based) or None, words the message must contain)
    "unknown_key": ("""server:
  endpoints:
    - "ipc:///tmp/sip_check.sock"
session_pools:
  - name: a
    backend: builtin
    bogus_key: 3
""", 7, ["bogus_key"]),
    "pool_size_zero": ("""session_pools:
  - name: a
    backend: builtin
    pool_size: 0
""", 4, ["pool_size"]),
    "pool_size_not_int": ("""session_pools:
  - name: a
    backend: builtin
    pool_size: lots
""", 4, ["pool_size"]),
    "bad_priority": ("""session_pools:
  - name: a
    backend: builtin

    priority: urgent
""", 5, ["priority", "urgent"]),
    "bad_backend": ("""session_pools:
  - name: a
    backend: tensorflow
""", 3, ["backend", "tensorflow"]),
    "bad_log_level": ("""server:
  log_level: loud
session_pools:
  - name: a
    backend: builtin
""", 2, ["log_level"]),
    "frame_too_small": ("""server:
  max_frame_bytes: 10
session_pools:
  - name: a
    backend: builtin
""", 2, ["max_frame_bytes"]),
    "bad_endpoint": ("""server:
  endpoints:
    - "http://nowhere"
session_pools:
  - name: a
    backend: builtin
""", 3, ["http://nowhere"]),
    "duplicate_pool": ("""session_pools:
  - name: a
    backend: builtin
  - name: a
    backend: builtin
""", 4, ["a"]),
    "missing_name": ("""session_pools:
  - backend: builtin
    pool_size: 1
""", 2, ["name"]),
    "compute_percent": ("""session_pools:
  - name: a
    backend: builtin
    resource_quota: {max_memory_mb: 10, max_compute_percent: 150}
""", 4, ["max_compute_percent"]),
    "yaml_syntax": ("""session_pools:
  - name: a
    backend: [builtin
""", None, []),
    "not_a_mapping": ("""- just
- a list
""", None, []),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_check_config_bad(sipd_bin, tmp_path, case):
    text, line, words = BAD_CONFIGS[case]
    p = tmp_path / ("%s.yaml" % case)
    p.write_text(text)
    r = check_config(p)
    assert r.returncode == 1, "exit %d, stderr: %s" % (r.returncode, r.stderr)
    err = r.stderr
    m = re.search(r"(?:%s|%s):(\d+):(\d+)" % (re.escape(str(p)), re.escape(p.name)), err)
    assert m, "no file:line:col in: %r" % err
    if line is not None:
        assert int(m.group(1)) == line, "line %s, expected %d: %r" % (m.group(1), line, err)
    for w in words:
        assert w in err, "%r not in %r" % (w, err)


def test_check_config_missing_file(sipd_bin, tmp_path):
    r = check_config(tmp_path / "nope.yaml")
    assert r.returncode == 1
    assert "nope.yaml" in r.stderr


def test_bad_config_fails_startup(sipd_bin, tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text(BAD_CONFIGS["unknown_key"][0])
    r = subprocess.run([str(SIPD), "--config", str(p)], capture_output=True, text=True,
                       timeout=30, env=sipd_env())
    assert r.returncode != 0
    assert "bogus_key" in r.stderr


def test_unknown_flag(sipd_bin):
    r = subprocess.run([str(SIPD), "--no-such-flag"], capture_output=True, text=True,
                       timeout=30, env=sipd_env())
    assert r.returncode != 0
    assert r.stderr.strip()


# ---------------------------------------------------------------------------
# signals and drain

def test_sigterm_idle_exits_quickly(start_sipd):
    srv = start_sipd([{"name": "a", "backend": "builtin"}])
    t0 = time.monotonic()
    srv.send_signal(signal.SIGTERM)
    assert srv.wait(10) == 0, srv.log_tail()
    assert time.monotonic() - t0 < 5


def test_sigint_exits_zero(start_sipd):
    srv = start_sipd([{"name": "a", "backend": "builtin"}])
    c = srv.client()
    c.infer(InferenceRequest("a", {"input": np.ones(3, F)}))
    srv.send_signal(signal.SIGINT)
    assert srv.wait(10) == 0, srv.log_tail()


def test_sigterm_drains_in_flight(start_sipd):
    srv = start_sipd([{"name": "slow", "backend": "builtin", "pool_size": 1,
                       "backend_options": {"delay_ms": 300, "shape": "-1"}}])
    c = srv.client(timeout_s=20)
    futs = [c.infer_async(InferenceRequest("slow", {"input": np.full(2, i, F)}))
            for i in range(3)]

    def first_running_two_queued():
        st = srv.pool_status("slow", c)
        return st["sessions"][0]["state"] == "RUNNING" and st["queued_requests"] == 2
    harness.wait_until(first_running_two_queued, what="the first executing, two queued")
    srv.send_signal(signal.SIGTERM)
    # the running request completes and is answered
    r = futs[0].result(timeout=10)
    np.testing.assert_array_equal(r.outputs["output"], np.full(2, 0, F))
    # queued ones are either served or refused as UNAVAILABLE - never lost
    for i, f in enumerate(futs[1:], start=1):
        try:
            np.testing.assert_array_equal(f.result(timeout=10).outputs["output"],
                                          np.full(2, i, F))
        except SipError as e:
            assert isinstance(e, UnavailableError), repr(e)
    assert srv.wait(15) == 0, srv.log_tail()


def test_sigterm_with_idle_connections(start_sipd):
    """Open, idle client connections do not keep the server from exiting."""
    srv = start_sipd([{"name": "a", "backend": "builtin"}])
    clients = [srv.client() for _ in range(3)]
    for c in clients:
        assert c.ready()
    raws = [harness.raw_connect(srv.tcp_endpoint) for _ in range(3)]
    try:
        srv.send_signal(signal.SIGTERM)
        assert srv.wait(10) == 0, srv.log_tail()
    finally:
        for s in raws:
            s.close()


def test_restart_on_same_socket_path(sipd_bin, tmp_path):
    """A second sipd on the same socket path after a clean stop starts fine."""
    pools = [{"name": "a", "backend": "builtin"}]
    sockdir = harness.short_tmpdir()
    try:
        srv = harness.SipServer(tmp_path / "one", pools, tcp=False, sockdir=sockdir)
        srv.start()
        assert srv.stop() == 0, srv.log_tail()
        srv2 = harness.SipServer(tmp_path / "two", pools, tcp=False, sockdir=sockdir)
        assert srv2.sock_path == srv.sock_path
        try:
            srv2.start()
            c = srv2.client()
            r = c.infer(InferenceRequest("a", {"input": np.ones(2, F)}))
            np.testing.assert_array_equal(r.outputs["output"], np.ones(2, F))
        finally:
            rc = srv2.stop()
        assert rc == 0, srv2.log_tail()
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)


def test_second_server_on_live_socket_refused(sipd_bin, tmp_path):
    """A second sipd on the socket path of a running one must fail to start
    (exit non-zero) and must leave the first one's socket alone."""
    pools = [{"name": "a", "backend": "builtin"}]
    sockdir = harness.short_tmpdir()
    try:
        first = harness.SipServer(tmp_path / "first", pools, tcp=False, sockdir=sockdir)
        first.start()
        try:
            second = harness.SipServer(tmp_path / "second", pools, tcp=False, sockdir=sockdir)
            second.write_config()
            r = subprocess.run([str(SIPD), "--config", str(second.config_path)],
                               capture_output=True, text=True, timeout=30, env=sipd_env())
            assert r.returncode != 0
            assert r.stderr.strip()
            c = first.client()
            assert c.ready()
            np.testing.assert_array_equal(
                c.infer(InferenceRequest("a", {"input": np.ones(2, F)})).outputs["output"],
                np.ones(2, F))
        finally:
            rc = first.stop()
        assert rc == 0, first.log_tail()
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)


def test_new_requests_refused_while_draining(start_sipd):
    """docs/protocol.md: UNAVAILABLE covers "server draining". Once SIGTERM
    arrived, a new request (on an open connection) is refused with
    UNAVAILABLE - or its connection is closed - while the in-flight one
    completes."""
    srv = start_sipd([{"name": "slow", "backend": "builtin", "pool_size": 1,
                       "backend_options": {"delay_ms": 1000, "shape": "-1"}},
                      {"name": "fast", "backend": "builtin"}])
    c = srv.client(timeout_s=20)
    assert c.infer(InferenceRequest("fast", {"input": np.ones(1, F)}))
    running = c.infer_async(InferenceRequest("slow", {"input": np.ones(2, F)}))
    harness.wait_until(lambda: srv.pool_status("slow", c)["sessions"][0]["state"] == "RUNNING",
                       what="the slow request to run")
    srv.send_signal(signal.SIGTERM)
    # the signal is handled (not ready any more); the slow request still runs
    harness.wait_until(lambda: not c.ready(), what="sipd to turn not ready after SIGTERM")
    with pytest.raises(UnavailableError):
        c.infer(InferenceRequest("fast", {"input": np.ones(1, F)}))
    np.testing.assert_array_equal(running.result(timeout=10).outputs["output"], np.ones(2, F))
    assert srv.wait(15) == 0, srv.log_tail()


@pytest.mark.parametrize("level", ["info", "error"])
def test_structured_log_lines_and_level(sipd_bin, model_dir, tmp_path, level):
    """Issue 2: a structured line per pool load (model, load time, memory)
    and per failed request (pool, code, reason); server.log_level filters."""
    pools = [{"name": "addmul", "model_path": str(model_dir["addmul"])}]
    srv = harness.SipServer(tmp_path, pools, log_level=level)
    srv.start()
    try:
        c = srv.client()
        with pytest.raises(SipError):
            c.infer(InferenceRequest("addmul", {"lhs": np.ones((1, 3), F),
                                                "rhs": np.ones((1, 3), F)}))
    finally:
        assert srv.stop() == 0, srv.log_tail()
    log = srv.log()
    loaded = [ln for ln in log.splitlines() if 'msg="pool loaded"' in ln]
    failed = [ln for ln in log.splitlines() if 'msg="request failed"' in ln]
    if level == "error":  # info and warn lines are filtered out
        assert not loaded and not failed and "level=info" not in log, log
        return
    assert len(loaded) == 1, log
    assert re.search(r'level=info .*pool=addmul .*model="[^"]*addmul[^"]*".* load_ms=[0-9.]+ '
                     r'.*memory_bytes=[0-9]+', loaded[0]), loaded[0]
    assert len(failed) == 1, log
    assert re.search(r'level=warn .*pool=addmul code=INVALID_ARGUMENT reason=".*shape', failed[0]), \
        failed[0]
