"""HTTP front-end limits: request framing checked as RFC 9112 asks (400,
413, 501 where libmicrohttpd let a request through or hung), slow clients
that cannot lock others out (a header deadline, per-address and total
connection limits, the connection waiting longest for its headers closed to
make room at the total), and requests cancelled when their client goes
away."""

import http.client
import json
import re
import resource
import signal
import socket
import threading
import time

import numpy as np
import pytest

import kserve as K
from cann_sip import InferenceRequest
from harness import wait_until

BODY = json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "FP32",
                               "data": [1]}]}).encode()
POST = b"POST /v2/models/echo/infer HTTP/1.1\r\n"


def port_of(base):
    return int(base.rsplit(":", 1)[1])


def exchange(base, raw, timeout=10, source=None):
    """Sends raw bytes; returns (status, body) of the answer, asserting the
    server then closes the connection."""
    s = socket.create_connection(("127.0.0.1", port_of(base)), timeout,
                                 source_address=(source, 0) if source else None)
    s.sendall(raw)
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        except socket.timeout:
            raise AssertionError("no answer and no close within %d s; got %r" % (timeout, data))
        if not chunk:
            break
        data += chunk
        assert time.monotonic() < deadline, "the server kept the connection open: %r" % data
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data
    return int(head.split()[1]), body


@pytest.fixture
def srv(start_sipd):
    s = start_sipd([{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"}}],
                   server={"http": "127.0.0.1:0", "http_max_body_bytes": 1 << 20})
    s.http = K.http_base(s)
    return s


FRAMING = [
    # (what, headers after the request line, status, words of the message)
    ("length 2^63", b"Host: x\r\nContent-Length: 9223372036854775808\r\n", 413,
     "9223372036854775808 bytes"),
    ("length 2^64-1", b"Host: x\r\nContent-Length: 18446744073709551615\r\n", 413,
     "server.http_max_body_bytes"),
    ("differing lengths", b"Host: x\r\nContent-Length: %d\r\nContent-Length: 5\r\n" % len(BODY),
     400, "different values"),
    ("chunked and length", b"Host: x\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n"
     % len(BODY), 400, "both Transfer-Encoding and Content-Length"),
    ("no Host", b"Content-Length: %d\r\n" % len(BODY), 400, "without a Host"),
    ("two Host", b"Host: x\r\nHost: y\r\nContent-Length: %d\r\n" % len(BODY), 400,
     "Host is given 2 times"),
    ("gzip coding", b"Host: x\r\nTransfer-Encoding: gzip\r\n", 501,
     "Transfer-Encoding 'gzip' is not supported"),
    ("gzip then chunked", b"Host: x\r\nTransfer-Encoding: gzip, chunked\r\n", 501,
     "'gzip' is not supported"),
    ("chunked not last", b"Host: x\r\nTransfer-Encoding: chunked, gzip\r\n", 400,
     "final transfer coding"),
]


@pytest.mark.parametrize("what,headers,status,words", FRAMING, ids=[f[0] for f in FRAMING])
def test_framing_is_checked(srv, what, headers, status, words):
    got, body = exchange(srv.http, POST + headers + b"\r\n" + BODY)
    assert got == status, (what, body)
    assert words in json.loads(body)["error"], body
    # Sound requests are served as before, the same length twice included.
    assert exchange(srv.http, POST + b"Host: x\r\nConnection: close\r\nContent-Length: %d\r\n"
                    b"Content-Length: %d\r\n\r\n" % (len(BODY), len(BODY)) + BODY)[0] == 200
    assert exchange(srv.http, b"POST /v2/models/echo/infer HTTP/1.0\r\nContent-Length: %d\r\n\r\n"
                    % len(BODY) + BODY)[0] == 200  # HTTP/1.0 needs no Host
    assert exchange(srv.http, POST + b"Host: x\r\nConnection: close\r\n"
                    b"Transfer-Encoding: Chunked\r\n\r\n%x\r\n" % len(BODY) + BODY
                    + b"\r\n0\r\n\r\n")[0] == 200


def test_framing_of_get_requests(srv):
    assert exchange(srv.http, b"GET /v2/health/ready HTTP/1.1\r\n\r\n")[0] == 400
    assert exchange(srv.http, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n"
                    b"Connection: close\r\n\r\n")[0] == 200


# ---- slow clients ----

def ready_status(base, source=None, timeout=5):
    return exchange(base, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    timeout=timeout, source=source)


def raise_nofile(need):
    """Raises this process's descriptor limit (sipd inherits it) to hold
    `need` descriptors, or skips the test when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip("%d descriptors needed, over the hard limit %d" % (need, hard))
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (min(hard, 2 * need) if hard != resource.RLIM_INFINITY else 2 * need,
                            hard))


def half_sent(base, source=None):
    """A connection that sent a request line and nothing more."""
    c = socket.create_connection(("127.0.0.1", port_of(base)), 10,
                                 source_address=(source, 0) if source else None)
    c.sendall(b"GET /v2/health/ready HTTP/1.1\r\n")
    return c


def closed_by_server(c, timeout=10):
    """Whether the server closed c (an end of stream or a reset) within
    `timeout` seconds; what it sent first, if anything, is read past."""
    c.settimeout(timeout)
    try:
        while c.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_slow_headers_do_not_lock_out_other_clients(start_sipd):
    """1000 connections sending their headers a byte at a time fill the
    connection limit; a new client is served at once (the slow connection
    waiting longest is closed to make room), and every slow one is closed
    at the header deadline although bytes keep coming (before, MHD's idle
    timeout restarted with every byte: locked out for good)."""
    raise_nofile(2200)
    s = start_sipd([{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"}}],
                   server={"http": "127.0.0.1:0", "http_header_timeout_ms": 2000,
                           "http_max_connections_per_ip": 0})
    base = K.http_base(s)
    slow = [half_sent(base) for _ in range(1000)]
    t0 = time.monotonic()
    wait_until(lambda: open_http(s) == 1000, what="sipd counting the 1000 slow connections")
    assert ready_status(base)[0] == 200  # the limit is full: the oldest made room
    assert "http connection evicted" in s.log()
    assert closed_by_server(slow[0]), "the connection waiting longest was not closed"
    open_ = set(range(1, len(slow)))
    while open_ and time.monotonic() - t0 < 15:
        for i in list(open_):
            try:
                slow[i].sendall(b"X")  # a byte of a header line, again and again
                slow[i].setblocking(False)
                if slow[i].recv(1) == b"":
                    open_.discard(i)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                open_.discard(i)
            finally:
                slow[i].setblocking(True)
        time.sleep(0.2)  # the slow clients' pace: a byte each every 0.2 s
    elapsed = time.monotonic() - t0
    assert not open_, "%d slow connections still open after %.1f s" % (len(open_), elapsed)
    assert elapsed < 10, elapsed
    assert ready_status(base)[0] == 200
    assert "http header timeout" in s.log()
    for c in slow:
        c.close()


@pytest.mark.parametrize("threads", [1, 2])
def test_half_sent_requests_from_a_few_addresses_do_not_lock_out_others(start_sipd, threads):
    """256 connections from each of 127.0.0.2..6 (the per-address limit)
    send a request line and nothing more: 1000 of them fill the total limit
    (server.http_max_connections, default 1000). A client from a sixth
    address is served on every try, while the others keep opening such
    connections: the one waiting longest for its headers is closed to make
    room (before: 503 on every try until the header deadline, 30 s, and
    again as soon as the half-sent connections were reopened). With one
    HTTP thread, libmicrohttpd's own limit must leave room for the
    connections being closed, or it drops the new ones unanswered."""
    raise_nofile(2800)
    s = start_sipd([{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"}}],
                   server={"http": "127.0.0.1:0", "http_threads": threads})
    base = K.http_base(s)
    sources = ["127.0.0.%d" % a for a in range(2, 7)]
    held = [half_sent(base, src) for src in sources for _ in range(256)]
    try:
        wait_until(lambda: open_http(s) == 1000, what="sipd at its 1000 HTTP connections")
        statuses = []
        for i in range(50):
            statuses.append(ready_status(base, source="127.0.0.7")[0])
            held.append(half_sent(base, sources[i % len(sources)]))  # reopened at once
        assert statuses.count(200) == 50, "503 on %d of 50 tries" % statuses.count(503)
        assert closed_by_server(held[0]), "the connection waiting longest was not closed"
        assert "http connection evicted" in s.log()
        assert "http connection refused" in s.log()  # the per-address limit still holds
    finally:
        for c in held:
            c.close()


def test_one_address_holds_at_most_half_the_connections(start_sipd):
    """A per-address limit at or over the total is held to half the total:
    one address cannot fill it (before: 8 of 8)."""
    s = start_sipd([{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"}}],
                   server={"http": "127.0.0.1:0", "http_max_connections": 8,
                           "http_max_connections_per_ip": 100})
    base = K.http_base(s)
    held = [half_sent(base, "127.0.0.2") for _ in range(4)]
    try:
        wait_until(lambda: open_http(s) == 4, what="sipd counting 4 connections")
        status, body = ready_status(base, source="127.0.0.2")
        assert status == 503, body
        assert b"server.http_max_connections_per_ip, held to half of " \
               b"server.http_max_connections" in body, body
        assert ready_status(base, source="127.0.0.3")[0] == 200
    finally:
        for c in held:
            c.close()


def test_connections_per_address_are_limited(start_sipd):
    s = start_sipd([{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"}}],
                   server={"http": "127.0.0.1:0", "http_max_connections_per_ip": 8})
    base = K.http_base(s)
    held = [socket.create_connection(("127.0.0.1", port_of(base)), 10) for _ in range(8)]
    wait_until(lambda: open_http(s) == 8, what="sipd counting the 8 held connections")
    status, body = ready_status(base)
    assert status == 503 and b"server.http_max_connections_per_ip" in body, body
    assert ready_status(base, source="127.0.0.2")[0] == 200  # another address is served
    held.pop().close()
    # The close reaches the server soon after.
    wait_until(lambda: ready_status(base)[0] == 200,
               what="a connection from 127.0.0.1 admitted after one closed")
    for c in held:
        c.close()


def open_http(s):
    """sipd's count of open HTTP connections (the one its limits use)."""
    return s.client().status()["connections"]["http"]


def wait_no_http(s, timeout=5.0):
    """Waits until sipd counts no open HTTP connection; returns the count
    (0, or what it still was at the end)."""
    deadline = time.monotonic() + timeout
    while True:
        n = open_http(s)
        if n == 0 or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


CUT = [  # requests whose client hangs up before they are complete
    b"POST /v2/models/echo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{",
    b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n",
]


def test_connections_cut_before_the_server_reads_them_are_closed(start_sipd):
    """Connections whose client sent part of a request and hung up before
    sipd read anything (sipd stopped meanwhile: the request and the end of
    the stream wait together in the socket) are closed and no longer
    counted (before: libmicrohttpd read the bytes, missed the end of the
    stream and kept each one for its 300 s idle timeout; they counted
    against the per-address limit until every new connection was refused)."""
    s = start_sipd([{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"}}],
                   server={"http": "127.0.0.1:0"})
    base = K.http_base(s)
    assert open_http(s) == 0
    s.send_signal(signal.SIGSTOP)
    try:
        for i in range(48):
            c = socket.create_connection(("127.0.0.1", port_of(base)), 10)
            c.sendall(CUT[i % len(CUT)])
            c.close()
    finally:
        s.send_signal(signal.SIGCONT)
    left = wait_no_http(s)
    assert left == 0, "%d connections whose client hung up are still counted" % left
    assert ready_status(base)[0] == 200
    assert "http connection refused" not in s.log()


def test_connection_count_returns_to_zero_under_load(start_sipd):
    """HTTP clients opening keep-alive connections and cutting requests
    short, all at once and beside native clients loading the engine: no
    connection is refused, a fresh one is served after, and the count of
    open HTTP connections is back to 0 when every client is gone (before,
    libmicrohttpd kept many of the connections cut mid-request open for its
    300 s idle timeout, and they filled the per-address limit)."""
    s = start_sipd([{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1"},
                     "pool_size": 2}],
                   server={"http": "127.0.0.1:0", "http_max_connections_per_ip": 128})
    base = K.http_base(s)
    port = port_of(base)
    stop = threading.Event()
    errors, refused, rounds = [], [], [0]

    def native():
        with s.client() as c:
            x = np.ones(64, np.float32)
            while not stop.is_set():
                c.infer(InferenceRequest("echo", {"input": x}))

    def web():
        try:
            while not stop.is_set():
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                for _ in range(5):
                    conn.request("POST", "/v2/models/echo/infer", BODY)
                    r = conn.getresponse()
                    r.read()
                    if r.status == 503:
                        refused.append(r.status)
                        break
                conn.close()
                for raw in CUT:
                    c = socket.create_connection(("127.0.0.1", port), 10)
                    c.sendall(raw)
                    c.close()
                rounds[0] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=native) for _ in range(3)]
    threads += [threading.Thread(target=web) for _ in range(6)]
    for t in threads:
        t.start()
    try:  # a volume of rounds (each: 5 requests, 2 cut short), or a failure
        wait_until(lambda: rounds[0] >= 1000 or errors or refused, timeout=90,
                   what=lambda: "1000 rounds of the web clients (%d)" % rounds[0])
    finally:
        stop.set()
    for t in threads:
        t.join(30)
    log = s.log()
    assert "http connection refused" not in log, (
        "after %d rounds: %s" % (rounds[0], [ln for ln in log.splitlines() if "refused" in ln][:1]))
    assert not errors, errors[:3]
    assert not refused, "%d connections refused after %d rounds" % (len(refused), rounds[0])
    assert rounds[0] >= 1000, rounds[0]
    left = wait_no_http(s)
    assert left == 0, "%d HTTP connections still counted after %d rounds" % (left, rounds[0])
    assert ready_status(base)[0] == 200


# ---- clients that go away ----

def executions(base, pool):
    text = K.get(base + "/metrics").body.decode()
    m = re.search(r'^sip_inference_count_total\{pool="%s"[^}]*\} ([0-9.]+)$' % pool, text, re.M)
    return float(m.group(1)) if m else 0.0


def test_requests_of_clients_that_hang_up_are_cancelled(start_sipd):
    """100 requests to a one-session pool taking 100 ms each, their clients
    gone at once: at most a handful run (before: all 100, for 10 s)."""
    s = start_sipd([{"name": "slow", "backend": "builtin",
                     "backend_options": {"shape": "-1", "delay_ms": 100}}],
                   server={"http": "127.0.0.1:0"})
    base = K.http_base(s)
    body = BODY
    req = (b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body) + body)
    for _ in range(100):
        c = socket.create_connection(("127.0.0.1", port_of(base)), 10)
        c.sendall(req)
        c.close()

    def settled():  # every abandoned request ran or was cancelled
        p = s.pool_status("slow")
        return (open_http(s) == 0 and p["queued_requests"] == 0
                and all(x["state"] != "RUNNING" for x in p["sessions"]))

    wait_until(settled, what="the 100 abandoned requests run or cancelled")
    ran = executions(base, "slow")
    assert ran <= 5, "%d of 100 abandoned requests ran" % ran
    # A client that waits gets its answer.
    r = K.request("POST", base + "/v2/models/slow/infer", body,
                  {"Content-Type": "application/json"})
    assert r.status == 200, r
    assert executions(base, "slow") == ran + 1
