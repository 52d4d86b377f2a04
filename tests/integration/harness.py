"""Starting and stopping a real sipd for the integration tests.

Everything here is bounded in time: a server that does not become ready,
does not answer or does not exit fails the test instead of hanging it.
"""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from cann_sip import SessionClient, protocol as P

REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("SIP_BUILD_DIR") or REPO / "build")
SIPD = BUILD_DIR / "sipd"
OCR_DIR = REPO / "third_party" / "models" / "ocr"
ORT_LIB = REPO / "third_party" / "onnxruntime" / "lib"

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 20.0
WAIT_TIMEOUT_S = 20.0  # wait_until's default bound: generous for a loaded 2-core machine


# ---------------------------------------------------------------------------
# waiting for a condition

def wait_until(cond, timeout=WAIT_TIMEOUT_S, what=None, interval=0.02):
    """Polls cond() until it returns something truthy and returns that value;
    fails the test after `timeout` seconds, naming `what` (a string, or a
    callable returning one, evaluated only on failure) and cond's last value.
    Exceptions from cond() propagate: catch them in cond if they mean "not
    yet"."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            desc = what() if callable(what) else (what or getattr(cond, "__name__", "condition"))
            raise AssertionError("not within %.0f s: %s (last value: %r)" % (timeout, desc, value))
        time.sleep(interval)
        interval = min(interval * 1.5, 0.05)


def build_compiles(source):
    """1 when the build under test compiled `source` (a path from the
    repository's root), read from its compile_commands.json: e.g. whether a
    backend that is built only when its library was found is there."""
    try:
        with open(BUILD_DIR / "compile_commands.json") as f:
            return any(e["file"].endswith("/" + source) for e in json.load(f))
    except OSError:
        return False


def sanitized():
    """True when the build under test runs under the sanitizers (SIP_SANITIZE)."""
    cache = BUILD_DIR / "CMakeCache.txt"
    return cache.exists() and "SIP_SANITIZE:BOOL=ON" in cache.read_text(errors="replace")


def require_sipd():
    """Skips (or fails, with SIP_REQUIRE_SIPD=1) when build/sipd is missing."""
    if SIPD.is_file() and os.access(SIPD, os.X_OK):
        return SIPD
    msg = "%s not built (set SIP_BUILD_DIR or build first)" % SIPD
    if os.environ.get("SIP_REQUIRE_SIPD") == "1":
        pytest.fail(msg)
    pytest.skip(msg)


def sipd_env():
    env = dict(os.environ)
    if ORT_LIB.is_dir():
        env["LD_LIBRARY_PATH"] = str(ORT_LIB) + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


# ---------------------------------------------------------------------------
# YAML

def _scalar(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a YAML double-quoted scalar


def to_yaml(obj, indent=0):
    """Block-style YAML for dicts, lists and scalars (enough for sip configs)."""
    pad = " " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                lines.append("%s%s:" % (pad, k))
                lines.append(to_yaml(v, indent + 2))
            elif isinstance(v, dict):
                lines.append("%s%s: {}" % (pad, k))
            elif isinstance(v, list):
                lines.append("%s%s: []" % (pad, k))
            else:
                lines.append("%s%s: %s" % (pad, k, _scalar(v)))
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, dict) and item:
                sub = to_yaml(item, indent + 2).split("\n")
                sub[0] = pad + "- " + sub[0][indent + 2:]
                lines.extend(sub)
            elif isinstance(item, (dict, list)):
                lines.append("%s- %s" % (pad, "{}" if isinstance(item, dict) else "[]"))
            else:
                lines.append("%s- %s" % (pad, _scalar(item)))
    else:
        lines.append(pad + _scalar(obj))
    return "\n".join(lines)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def short_tmpdir():
    """A directory with a short path: unix socket paths must stay under 107 bytes."""
    return tempfile.mkdtemp(prefix="sip", dir="/tmp")


# ---------------------------------------------------------------------------
# every sipd the tests start, for the end-of-run check (conftest.py)

_started = []  # (subprocess.Popen, description)


def track(proc, what):
    """Records a sipd process a test started (SipServer does this itself): the
    end-of-run check fails the run if it is still running then."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    _started.append((proc, "%s (pid %d, started by %s)" % (what, proc.pid, test or "?")))
    return proc


def _proc_table():
    """{pid: (comm, state, ppid)} of every process /proc shows."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(d)] = (comm, fields[0], int(fields[1]))
    return table


def leftover_sipds():
    """[(pid, description)] of the sipd processes still running that the tests
    started: those SipServer or track() recorded, and any other sipd among
    this process's descendants (a sipd started through a shell or the CLI)."""
    table = _proc_table()
    found = {}
    for proc, what in _started:
        if proc.poll() is None:
            found[proc.pid] = what
    children = {}
    for pid, (_, _, ppid) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        comm, state, _ = table[pid]
        if comm == "sipd" and state != "Z" and pid not in found:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    cmd = f.read().replace(b"\0", b" ")
            except OSError:
                cmd = b"sipd"
            found[pid] = "%s (pid %d, untracked)" % (cmd.decode(errors="replace").strip(), pid)
    return sorted(found.items())


def kill_leftovers(leftovers):
    """SIGKILLs the processes leftover_sipds() listed and reaps the tracked ones."""
    for pid, _ in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for proc, _ in _started:
        if proc.pid in dict(leftovers):
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


# ---------------------------------------------------------------------------
# server

class SipServer:
    """One sipd process on a unix socket and a TCP port of its own."""

    def __init__(self, workdir, pools, server=None, tcp=True, unix=True, log_level="info",
                 sockdir=None, tcp_host="127.0.0.1"):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pools = pools
        self.server_opts = dict(server or {})
        self.log_level = log_level
        # sockdir: reuse a directory (and socket path) of an earlier server; it
        # is then left in place at cleanup.
        self._own_sockdir = sockdir is None
        self.sockdir = short_tmpdir() if sockdir is None else str(sockdir)
        self.sock_path = os.path.join(self.sockdir, "sipd.sock")
        assert len(self.sock_path) < 107
        self.unix_endpoint = "ipc://" + self.sock_path if unix else None
        self.use_tcp = tcp
        self.tcp_host = tcp_host  # "0.0.0.0": every address (clients use 127.0.0.1)
        self.port = None
        self.tcp_endpoint = None
        self.proc = None
        self.config_path = self.workdir / "sipd.yaml"
        self.log_path = self.workdir / "sipd.log"
        self._log = None
        self._clients = []
        self.returncode = None

    @property
    def endpoint(self):
        return self.unix_endpoint or self.tcp_endpoint

    def config(self):
        endpoints = []
        if self.unix_endpoint:
            endpoints.append(self.unix_endpoint)
        if self.tcp_endpoint:
            endpoints.append(self.tcp_endpoint)
        server = {"endpoints": endpoints, "log_level": self.log_level}
        server.update(self.server_opts)
        return {"server": server, "session_pools": self.pools}

    def write_config(self):
        self.config_path.write_text(to_yaml(self.config()) + "\n")
        return self.config_path

    def start(self, ready_timeout=READY_TIMEOUT_S, until_ready=True):
        """Starts sipd and waits until it is ready, or (until_ready=False)
        only until it answers on its endpoint (pools may still load)."""
        sipd = require_sipd()
        for attempt in range(3):
            if self.use_tcp:
                self.port = free_port()
                self.tcp_endpoint = "tcp://%s:%d" % (self.tcp_host, self.port)
            self.write_config()
            self._log = open(self.log_path, "ab")
            self.proc = subprocess.Popen([str(sipd), "--config", str(self.config_path)],
                                         stdin=subprocess.DEVNULL, stdout=self._log,
                                         stderr=subprocess.STDOUT, env=sipd_env(),
                                         cwd=str(self.workdir))
            track(self.proc, "sipd --config %s" % self.config_path)
            try:
                self._wait_ready(ready_timeout, until_ready)
                return self
            except _ExitedEarly:
                # a port taken between free_port() and bind: try another one
                if attempt < 2 and "in use" in self.log().lower():
                    self._log.close()
                    continue
                self.returncode = self.proc.returncode  # reported here, not again at teardown
                raise AssertionError("sipd exited with %s during startup:\n%s"
                                     % (self.proc.returncode, self.log_tail()))
        raise AssertionError("unreachable")

    def _wait_ready(self, timeout, until_ready=True):
        probe = SessionClient(self.endpoint, timeout_s=5)

        def ready():
            if self.proc.poll() is not None:
                raise _ExitedEarly()
            return _loaded(probe) if until_ready else _answers(probe)
        try:
            wait_until(ready, timeout, "sipd ready" if until_ready else "sipd answering")
        except AssertionError:
            self.kill()
            raise AssertionError("sipd not ready within %.0f s:\n%s" % (timeout, self.log_tail()))
        finally:
            probe.close()

    def client(self, endpoint=None, timeout_s=CLIENT_TIMEOUT_S):
        c = SessionClient(endpoint or self.endpoint, timeout_s=timeout_s)
        self._clients.append(c)
        return c

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def assert_alive(self):
        assert self.alive(), "sipd died (exit %s):\n%s" % (self.proc.returncode, self.log_tail())

    def send_signal(self, sig):
        if self.alive():
            self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT_S):
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("sipd did not exit within %.0f s after the signal:\n%s"
                                 % (timeout, self.log_tail()))
        return self.returncode

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT_S):
        """Signals sipd and returns its exit status (kills it after `timeout`)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.wait(timeout)
        self._cleanup()
        return rc

    def kill(self):
        """Ends sipd at once (SIGKILL); a fixture's teardown then takes it as
        stopped on purpose, not as a server that died during the test."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            if self.returncode is None:
                self.returncode = self.proc.returncode
        self._cleanup()

    def _cleanup(self):
        for c in self._clients:
            c.close()
        self._clients = []
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_sockdir:
            shutil.rmtree(self.sockdir, ignore_errors=True)

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, n=60):
        return "\n".join(self.log().splitlines()[-n:])

    def pool_status(self, name, client=None):
        c = client or self.client()
        for p in c.status().get("pools", []):
            if p.get("name") == name:
                return p
        raise AssertionError("pool %r not in status" % name)


def stop_all(servers):
    """Stops every server a fixture started: SIGTERM, which must end each with
    exit 0. Returns the failures (a server that died during the test, or exited
    otherwise than 0), each with the end of its log."""
    failures = []
    for srv in servers:
        if srv.returncode is not None:  # the test stopped it itself
            srv.kill()
            continue
        if srv.proc is not None and srv.proc.poll() is not None:
            failures.append("sipd died during the test (exit %s):\n%s"
                            % (srv.proc.returncode, srv.log_tail()))
            srv.kill()
            continue
        try:
            rc = srv.stop()
        except AssertionError as e:  # did not exit in time: killed
            failures.append(str(e))
            continue
        if rc not in (0, None):
            failures.append("sipd exited with %s after SIGTERM:\n%s" % (rc, srv.log_tail()))
    return failures


def _loaded(client):
    """Start-up loading is over: the server is ready or, when a pool failed
    (server.strict_readiness), says it is no longer loading."""
    try:
        info = client.info(1)
    except Exception:
        return False
    return bool(info) and (bool(info.get("ready")) or info.get("loading") is False)


def _answers(client):
    """The server answers an INFO request (ready or still loading)."""
    try:
        client.info(1)
        return True
    except Exception:
        return False


class _ExitedEarly(Exception):
    pass


@contextlib.contextmanager
def serve(workdir, pools, **kw):
    """Starts sipd, yields it, then SIGTERMs it and asserts a clean exit 0."""
    srv = SipServer(workdir, pools, **kw)
    srv.start()
    try:
        yield srv
    except BaseException:
        srv.kill()
        raise
    rc = srv.stop()
    assert rc == 0, "sipd exited with %s after SIGTERM:\n%s" % (rc, srv.log_tail())


# ---------------------------------------------------------------------------
# raw sockets (for malformed-input tests)

def raw_connect(endpoint, timeout=10.0):
    from cann_sip.client import parse_endpoint
    family, addr = parse_endpoint(endpoint)
    if family == "tcp":
        s = socket.create_connection(addr, timeout=timeout)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(addr)
    s.settimeout(timeout)
    return s


def recv_exact(sock, n):
    """n bytes, or fewer if the peer closed first (a reset counts as closed)."""
    buf = b""
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except (ConnectionResetError, BrokenPipeError):
            break
        if not chunk:
            break
        buf += chunk
    return buf


def read_frame(sock):
    """(FrameHeader, payload) or None on EOF before a header."""
    h = recv_exact(sock, P.HEADER_SIZE)
    if not h:
        return None
    assert len(h) == P.HEADER_SIZE, "truncated header from server: %r" % h
    hdr = P.check_header(P.decode_header(h))
    payload = recv_exact(sock, hdr.length)
    assert len(payload) == hdr.length, "truncated payload from server"
    return hdr, payload


def read_until_closed(sock, timeout=10.0):
    """Reads until EOF; returns the bytes (asserting the peer closes in time)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return data
        except socket.timeout:
            raise AssertionError("server did not close the connection within %.0f s" % timeout)
        if not chunk:
            return data
        data += chunk


def send_quietly(sock, data):
    """sendall that tolerates the server hanging up (it may reject early)."""
    try:
        sock.sendall(data)
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False
