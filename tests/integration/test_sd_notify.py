"""sipd under a service manager (issue 20, point 2; docs/deploy.md "systemd"):
the sd_notify protocol spoken to a NOTIFY_SOCKET datagram socket the test
binds, as systemd does for Type=notify — READY=1 only once start-up loading
is over, STATUS= lines, RELOADING=1 (with MONOTONIC_USEC) then READY=1
around a SIGHUP reload, STOPPING=1 on SIGTERM, WATCHDOG=1 every half
WATCHDOG_USEC (and none when WATCHDOG_PID names another process) — and the
installed sipd.service checked by `systemd-analyze verify`."""

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

import harness
import kserve as K
import models
from harness import SipServer, short_tmpdir, wait_until

LOAD_DELAY_MS = 1500


class NotifySocket:
    """The service manager's end: a datagram socket; each message is kept
    with the CLOCK_MONOTONIC time it was read (time.monotonic)."""

    def __init__(self, abstract=False):
        self.dir = short_tmpdir()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "sip-notify-test-%d-%d" % (os.getpid(), id(self))
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.address = os.path.join(self.dir, "notify.sock")
            self.sock.bind(self.address)
        self.messages = []  # (monotonic time read, {key: value}, raw text)

    def read(self, timeout):
        """The next message, or None when none came within `timeout`."""
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return None
        text = data.decode()
        fields = {}
        for line in text.split("\n"):
            assert "=" in line, "not a KEY=VALUE line: %r in %r" % (line, text)
            k, v = line.split("=", 1)
            fields[k] = v
        msg = (time.monotonic(), fields, text)
        self.messages.append(msg)
        return msg

    def wait_for(self, pred, what, timeout=harness.WAIT_TIMEOUT_S):
        """Reads until a message satisfies pred(fields); returns it. Bounded."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no %s within %.0f s; messages: %r"
                                     % (what, timeout, [m[2] for m in self.messages]))
            msg = self.read(left)
            if msg and pred(msg[1]):
                return msg

    def drain_until_exit(self, srv, timeout=harness.STOP_TIMEOUT_S):
        """Reads every message until sipd exited and the socket is empty."""
        rc = srv.wait(timeout)
        while self.read(0.05):
            pass
        return rc

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def notify(monkeypatch):
    ns = NotifySocket()
    monkeypatch.setenv("NOTIFY_SOCKET", ns.address)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    yield ns
    ns.close()


def slow_pool(name, delay_ms=LOAD_DELAY_MS):
    return {"name": name, "backend": "builtin",
            "backend_options": {"shape": "-1,4", "load_delay_ms": delay_ms}}


def start(tmp_path, pools, **kw):
    srv = SipServer(tmp_path, pools, server={"http": "127.0.0.1:0"}, **kw)
    started = time.monotonic()
    srv.start(until_ready=False)  # answering; pools still loading
    return srv, started


def test_ready_after_load_status_reload_stopping(sipd_bin, tmp_path, notify):
    srv, started = start(tmp_path, [slow_pool("slow")])
    try:
        base = K.http_base(srv)
        t_ready, ready, _ = notify.wait_for(lambda f: "READY" in f, "READY=1")
        assert ready["READY"] == "1"
        # Not before the pool has loaded: its load alone takes LOAD_DELAY_MS,
        # and at READY=1 the server is ready on every front-end.
        assert t_ready - started >= LOAD_DELAY_MS / 1000.0, t_ready - started
        assert K.get(base + "/v2/health/ready").status == 200
        info = srv.client().info(1)
        assert info["ready"] is True and info["loading"] is False, info
        before = [m[1] for m in notify.messages[:-1]]
        assert before and before[0].get("STATUS") == "loading: 0 of 1 pools READY", before
        assert all("READY" not in f for f in before), before
        assert ready["STATUS"] == "ready: 1 of 1 pools READY", ready

        # SIGHUP with a pool added: RELOADING=1 at once, READY=1 only once
        # the new pool (as slow to load) serves.
        srv.pools = [slow_pool("slow"), slow_pool("added")]
        srv.write_config()
        t_hup = time.monotonic()
        srv.send_signal(signal.SIGHUP)
        t_rel, rel, _ = notify.wait_for(lambda f: "RELOADING" in f, "RELOADING=1")
        assert rel["RELOADING"] == "1" and rel["STATUS"].startswith("reloading "), rel
        mono = int(rel["MONOTONIC_USEC"]) / 1e6  # CLOCK_MONOTONIC, as time.monotonic()
        assert t_hup <= mono <= t_rel, (t_hup, mono, t_rel)
        t_again, again, _ = notify.wait_for(lambda f: "READY" in f, "READY=1 after the reload")
        assert t_again - t_hup >= LOAD_DELAY_MS / 1000.0, t_again - t_hup
        assert again["STATUS"] == "reloaded; ready: 2 of 2 pools READY", again
        assert srv.client().info(1)["pools"] == {"slow": "READY", "added": "READY"}

        # SIGTERM: STOPPING=1 as the drain begins, exit 0.
        srv.send_signal(signal.SIGTERM)
        _, stop, _ = notify.wait_for(lambda f: "STOPPING" in f, "STOPPING=1")
        assert stop == {"STOPPING": "1", "STATUS": "SIGTERM received, draining"}, stop
        assert notify.drain_until_exit(srv) == 0, srv.log_tail()
        # No watchdog was asked for: none was sent.
        assert not [m for m in notify.messages if "WATCHDOG" in m[1]], notify.messages
    finally:
        srv.kill()


def test_reload_refused_still_ends_with_ready(sipd_bin, tmp_path, notify):
    srv, _ = start(tmp_path, [slow_pool("slow", 0)])
    try:
        notify.wait_for(lambda f: "READY" in f, "READY=1")
        srv.config_path.write_text("session_pools: [\n")  # does not parse
        srv.send_signal(signal.SIGHUP)
        notify.wait_for(lambda f: "RELOADING" in f, "RELOADING=1")
        _, again, _ = notify.wait_for(lambda f: "READY" in f, "READY=1 after the refused reload")
        assert again["STATUS"].startswith("reload refused ("), again
        assert again["STATUS"].endswith("; ready: 1 of 1 pools READY"), again
        assert "\n" not in again["STATUS"]
        srv.write_config()
    finally:
        assert srv.stop() == 0, srv.log_tail()


def test_watchdog_every_half_period(sipd_bin, tmp_path, notify, monkeypatch):
    period_us = 200000  # WATCHDOG=1 due every 100 ms
    monkeypatch.setenv("WATCHDOG_USEC", str(period_us))
    srv, started = start(tmp_path, [slow_pool("slow", 0)])
    try:
        notify.wait_for(lambda f: "READY" in f, "READY=1")
        # They keep coming, and no faster than one per 100 ms: the 11th cannot
        # have been sent, let alone read, before 1.0 s after sipd started
        # (a late read only makes the time longer).
        for i in range(11):
            last = notify.wait_for(lambda f: "WATCHDOG" in f, "WATCHDOG=1 #%d" % (i + 1))[0]
        assert last - started >= 1.0, last - started
        assert all(m[1] == {"WATCHDOG": "1"} for m in notify.messages if "WATCHDOG" in m[1])
    finally:
        assert srv.stop() == 0, srv.log_tail()


def test_watchdog_for_another_pid_is_not_ours(sipd_bin, tmp_path, notify, monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "100000")
    monkeypatch.setenv("WATCHDOG_PID", "1")  # another process's watchdog
    srv, _ = start(tmp_path, [slow_pool("slow")])
    try:
        # The whole load (LOAD_DELAY_MS, 30 half periods) passes without one.
        notify.wait_for(lambda f: "READY" in f, "READY=1")
        srv.send_signal(signal.SIGTERM)
        assert notify.drain_until_exit(srv) == 0, srv.log_tail()
        assert [m[1] for m in notify.messages if "WATCHDOG" in m[1]] == []
        assert any("STOPPING" in m[1] for m in notify.messages)
    finally:
        srv.kill()


def test_failed_pool_and_abstract_socket(sipd_bin, tmp_path, monkeypatch):
    """READY=1 also when a pool FAILED (start-up is over), its STATUS naming
    it; '@' addresses an abstract socket."""
    ns = NotifySocket(abstract=True)
    monkeypatch.setenv("NOTIFY_SOCKET", ns.address)
    corrupt = models.write_corrupt(tmp_path / "corrupt.onnx")
    srv, _ = start(tmp_path / "srv", [slow_pool("fine", 0),
                                      {"name": "broken", "model_path": str(corrupt)}])
    try:
        _, ready, _ = ns.wait_for(lambda f: "READY" in f, "READY=1")
        assert ready["STATUS"] == "not ready: 1 of 2 pools READY, FAILED: broken", ready
    finally:
        assert srv.stop() == 0, srv.log_tail()
        ns.close()


def test_bad_notify_socket_is_reported_and_serving_goes_on(sipd_bin, tmp_path, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", "relative/path")
    srv, _ = start(tmp_path, [slow_pool("fine", 0)])
    try:
        wait_until(lambda: srv.client().info(1)["ready"], what="ready")
        assert ("NOTIFY_SOCKET='relative/path' ignored: expected an absolute socket path or '@'"
                in srv.log()), srv.log_tail()
    finally:
        assert srv.stop() == 0, srv.log_tail()


def test_installed_unit_verifies(tmp_path):
    """`cmake --install` places sipd.service with ExecStart on the installed
    sipd and /etc/sip/sip.yaml; systemd-analyze verify (inside a root holding
    the install, systemd's own units and kill) finds nothing to say."""
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze not found (scripts/deps.sh installs systemd)")
    root = tmp_path / "root"
    r = subprocess.run(["cmake", "--install", str(harness.BUILD_DIR), "--prefix", "/usr"],
                       env=dict(os.environ, DESTDIR=str(root)), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    unit = root / "usr/lib/systemd/system/sipd.service"
    text = unit.read_text()
    assert "ExecStart=/usr/bin/sipd --config /etc/sip/sip.yaml\n" in text
    assert "Type=notify\n" in text and "WatchdogSec=" in text
    assert (root / "etc/sip/sip.yaml").read_text() == (harness.REPO / "packaging/sip.yaml").read_text()
    # What verify resolves inside the root: the targets the unit is ordered
    # against and the ExecReload command.
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system",
                    dirs_exist_ok=True, symlinks=True)
    kill = shutil.which("kill")
    assert kill, "kill not found (procps)"
    shutil.copy(kill, root / "usr/bin/kill")
    for link in ("bin", "lib"):
        if not (root / link).exists():
            (root / link).symlink_to("usr/" + link)
    r = subprocess.run([analyze, "verify", "--root=%s" % root, "/usr/lib/systemd/system/sipd.service"],
                       capture_output=True, text=True, timeout=60)
    # verify exits 0 even for settings it ignores: its silence is the check.
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr
    # And a unit with a wrong setting is not silent: the check can fail.
    unit.write_text(text.replace("ProtectSystem=strict", "ProtectSystem=bogus"))
    r = subprocess.run([analyze, "verify", "--root=%s" % root, "/usr/lib/systemd/system/sipd.service"],
                       capture_output=True, text=True, timeout=60)
    assert "bogus" in r.stderr, r.stdout + r.stderr


def test_installed_config_checks(sipd_bin, tmp_path):
    """packaging/sip.yaml passes --check-config once its directories exist
    (sipd.service's StateDirectory= and RuntimeDirectory= make them)."""
    var = tmp_path / "var"
    (var / "models").mkdir(parents=True)
    (var / "state").mkdir()
    text = (harness.REPO / "packaging/sip.yaml").read_text()
    assert "/var/lib/sip/models" in text and "/run/sip/" in text
    conf = tmp_path / "sip.yaml"
    conf.write_text(text.replace("/var/lib/sip", str(var)).replace("/run/sip", str(tmp_path)))
    r = subprocess.run([str(sipd_bin), "--check-config", str(conf)], capture_output=True,
                       text=True, env=harness.sipd_env(), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "http 0.0.0.0:8000, grpc 0.0.0.0:8001" in r.stdout, r.stdout
