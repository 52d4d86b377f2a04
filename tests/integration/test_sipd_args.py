"""sipd's listening addresses from the command line and the environment
(README, "Configuration"): --http, --grpc and --endpoint replace the
config's server.http, server.grpc and server.endpoints; SIP_HTTP and
SIP_GRPC do the same; the command line wins over the environment; an
address that is not one is refused before anything starts, naming it."""

import re
import shutil
import signal
import subprocess

import numpy as np
import pytest

from cann_sip import InferenceRequest, SessionClient
from harness import free_port, require_sipd, short_tmpdir, sipd_env, to_yaml, track, wait_until
import kserve as K

grpc = pytest.importorskip("grpc")


def start(tmp_path, args, env_extra):
    sockdir = short_tmpdir()
    sock = sockdir + "/s.sock"
    cfg = tmp_path / "sipd.yaml"
    cfg.write_text(to_yaml({"server": {"endpoints": ["ipc://" + sock], "http": "127.0.0.1:1"},
                            "session_pools": [{"name": "echo", "backend": "builtin",
                                               "backend_options": {"shape": "-1,3"}}]}) + "\n")
    log = tmp_path / "sipd.log"
    env = dict(sipd_env(), **env_extra)
    with open(log, "wb") as out:
        proc = track(subprocess.Popen([str(require_sipd()), "--config", str(cfg)] + args,
                                      stdout=out, stderr=subprocess.STDOUT, env=env),
                     "sipd with address overrides")
    proc.sockdir = sockdir
    return proc, log


def stop(proc):
    shutil.rmtree(proc.sockdir, ignore_errors=True)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def printed(log, scheme):
    m = wait_until(lambda: re.search(r"listening on (%s://\S+)" % scheme, log.read_text()),
                   what=lambda: "sipd to print its %s address:\n%s" % (scheme, log.read_text()))
    return m.group(1)


def test_command_line_and_environment_replace_the_config(tmp_path):
    http, grpc_port, tcp = free_port(), free_port(), free_port()
    # SIP_HTTP is overridden by --http; SIP_GRPC is used as given.
    proc, log = start(tmp_path, ["--http", "127.0.0.1:%d" % http,
                                 "--endpoint", "tcp://127.0.0.1:%d" % tcp],
                      {"SIP_HTTP": "127.0.0.1:1", "SIP_GRPC": "127.0.0.1:%d" % grpc_port})
    try:
        assert printed(log, "http") == "http://127.0.0.1:%d" % http
        assert printed(log, "grpc") == "grpc://127.0.0.1:%d" % grpc_port
        assert printed(log, "tcp") == "tcp://127.0.0.1:%d" % tcp
        # --endpoint replaced the config's unix socket
        assert "ipc://" not in log.read_text() and "unix://" not in log.read_text()
        wait_until(lambda: K.get("http://127.0.0.1:%d/v2/health/ready" % http).status == 200,
                   what="HTTP ready on the --http address")
        with SessionClient("tcp://127.0.0.1:%d" % tcp) as c:
            x = np.ones((1, 3), np.float32)
            np.testing.assert_array_equal(c.infer(InferenceRequest("echo", {"input": x}))
                                          .outputs["output"], x)
        ch = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
        grpc.channel_ready_future(ch).result(timeout=20)
        ch.close()
    finally:
        stop(proc)
    assert proc.returncode == 0, log.read_text()


@pytest.mark.parametrize("args,env,want", [
    (["--http", "nonsense"], {}, "--http / SIP_HTTP address 'nonsense' is not one"),
    ([], {"SIP_GRPC": "host:99999"}, "--grpc / SIP_GRPC address 'host:99999' is not one"),
    (["--endpoint", "ftp://x"], {}, "--endpoint 'ftp://x'"),
])
def test_bad_addresses_are_refused(tmp_path, args, env, want):
    proc, log = start(tmp_path, args, env)
    try:
        proc.wait(30)
    finally:
        stop(proc)
    assert proc.returncode == 1
    assert want in log.read_text(), log.read_text()
