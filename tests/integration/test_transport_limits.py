"""Native transport limits: a client batch cannot pad beyond what the pool
runs in one execution, a client that never reads its answers is not read
from either (server.max_unsent_bytes), running out of file descriptors
neither spins the transport thread nor floods the log, and a frame whose
bytes stop coming closes its connection (server.frame_timeout_ms), whether
or not its client reads its answers."""

import fcntl
import os
import resource
import socket
import termios
import threading
import time

import numpy as np
import pytest

from cann_sip import (BatchInferenceRequest, InferenceRequest, InvalidArgumentError,
                      ResourceExhaustedError)
from cann_sip import protocol as P
from cann_sip.errors import code_name
from harness import raw_connect, read_frame, read_until_closed, wait_until

F = np.float32
ROW = 256  # floats per row of the echo pools


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def unread_by_server(sock):
    """Bytes sent on a unix socket that its peer has not read yet."""
    return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4), "little")


def wait_read_by_server(*socks):
    """Waits until sipd has read every byte sent on these unix sockets."""
    wait_until(lambda: all(unread_by_server(s) == 0 for s in socks),
               what="sipd reading what was sent")


def wait_progress_stops(srv, pool, client, still=0.5, timeout=20):
    """Waits until the pool's answered requests stop growing for `still`
    seconds (sipd stopped reading a connection); returns that count."""
    seen = [None, 0.0]

    def stopped():
        ok = srv.pool_status(pool, client)["requests"].get("OK", 0)
        now = time.monotonic()
        if ok != seen[0]:
            seen[:] = [ok, now]
        return ok > 0 and now - seen[1] >= still

    wait_until(stopped, timeout=timeout, what="the pool's answered requests to stop growing")
    return seen[0]


def check_echo(client, value=3.0):
    x = np.full((2, ROW), value, F)
    np.testing.assert_array_equal(client.infer(InferenceRequest("echo", {"input": x})).outputs["output"], x)


POOLS = [
    {"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,%d" % ROW}},
    {"name": "small", "backend": "builtin", "backend_options": {"shape": "-1,%d" % ROW},
     "dynamic_batching": {"max_batch_size": 4}},
]


@pytest.fixture
def srv(start_sipd):
    return start_sipd(POOLS)


# ---- a client batch's chunk size ----

def test_batch_chunk_larger_than_the_pool_is_refused(srv):
    c = srv.client()
    item = np.ones(ROW, F)
    with pytest.raises(InvalidArgumentError, match=r"max_batch_size 1000000 .*pool 'small'.*"
                       r"dynamic_batching.max_batch_size 4.*1\.\.4"):
        c.batch_infer(BatchInferenceRequest("small", [item], batch_config={
            "max_batch_size": 1000000, "padding_strategy": "zero"}))
    # Within the pool's limit it is split and padded as before.
    items = [np.full(ROW, i, F) for i in range(6)]
    r = c.batch_infer(BatchInferenceRequest("small", items, batch_config={
        "max_batch_size": 4, "padding_strategy": "zero"}))
    np.testing.assert_array_equal(r.outputs["output"], np.stack(items))
    check_echo(c)


def test_batch_chunk_larger_than_a_fixed_batch_dim_is_refused(start_sipd):
    """A model whose dim 0 is fixed at 4: larger chunks are refused; the
    default chunk (0) is the fixed dim, not the larger max_batch_size."""
    srv = start_sipd([{"name": "fixed", "backend": "builtin",
                       "backend_options": {"shape": "4,%d" % ROW},
                       "dynamic_batching": {"max_batch_size": 8}}])
    c = srv.client()
    items = [np.full(ROW, i, F) for i in range(6)]
    with pytest.raises(InvalidArgumentError, match=r"max_batch_size 8 .*fixed batch dim 4"):
        c.batch_infer(BatchInferenceRequest("fixed", items, batch_config={
            "max_batch_size": 8, "padding_strategy": "zero"}))
    r = c.batch_infer(BatchInferenceRequest("fixed", items, batch_config={
        "padding_strategy": "replicate_last"}))
    np.testing.assert_array_equal(r.outputs["output"], np.stack(items))


def test_batch_padding_is_bounded_by_the_request(srv):
    """A pool without a batch limit: one row asked to be padded to 100000
    rows (100 MB) runs as one row; sipd's memory stays where it was."""
    c = srv.client()
    before = rss_kib(srv.proc.pid)
    item = np.arange(ROW, dtype=F)
    r = c.batch_infer(BatchInferenceRequest("echo", [item], batch_config={
        "max_batch_size": 100000, "padding_strategy": "replicate_last"}))
    np.testing.assert_array_equal(r.outputs["output"], item[None])
    grew = rss_kib(srv.proc.pid) - before
    assert grew < 30 * 1024, "sipd grew by %d KiB for a one-row batch" % grew
    after = srv.pool_status("echo", c)
    assert after["batch_sizes"]["sum"] == 1  # one row reached the model, no padding
    check_echo(c)


# ---- backpressure ----

def test_client_that_does_not_read_is_not_read_from(start_sipd):
    srv = start_sipd(POOLS, server={"max_unsent_bytes": 65536})
    n = 32000  # 32000 answers of ~1 KiB: 32 MB unsent without backpressure
    req = P.encode_frame(P.INFER_REQUEST, 0, P.encode_infer_request(
        "echo", {"input": np.ones((1, ROW), F)}))
    blob = b"".join(req[:16] + i.to_bytes(8, "little") + req[24:] for i in range(n))
    s = raw_connect(srv.unix_endpoint)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    before = rss_kib(srv.proc.pid)
    sent = []

    def sender():
        try:
            s.sendall(blob)
            sent.append(True)
        except OSError as e:  # pragma: no cover - reported below
            sent.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    answered = wait_progress_stops(srv, "echo", srv.client())
    # sipd stopped reading: the requests wait in the socket, not in sipd.
    assert not sent, "sipd read every request of a client that reads no answers"
    assert answered < n, answered
    grew = rss_kib(srv.proc.pid) - before
    # Bounded: what sipd holds is its queue and allocator slack (4-6 MB
    # measured), far below the 32 MB the answers would take unbounded.
    assert grew < 8 * 1024, "sipd grew by %d KiB for a client that does not read" % grew
    # Other clients are served meanwhile.
    check_echo(srv.client())
    # Reading resumes the client: every answer arrives, in order.
    s.settimeout(30)
    for i in range(n):
        hdr, payload = read_frame(s)
        assert hdr.type == P.INFER_RESPONSE and hdr.request_id == i
    t.join(10)
    assert sent == [True]
    s.close()


# ---- out of file descriptors ----

def flood_out_of_descriptors(srv, connect, headroom, log_line):
    """Lowers sipd's descriptor limit to what it has open plus `headroom`,
    opens 40 connections with connect() and holds them: sipd must stay
    nearly idle and log `log_line` once or a few times, not per attempt.
    The limit is restored and the connections closed afterwards."""
    pid = srv.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE,
                     (len(os.listdir("/proc/%d/fd" % pid)) + headroom, hard))
    log_before = srv.log().count(log_line)
    held = []
    try:
        for _ in range(40):  # more than sipd can take: the rest stay pending or are shed
            try:
                held.append(connect())
            except OSError:
                break
        wait_until(lambda: srv.log().count(log_line) > log_before,
                   what="sipd running out of descriptors (%s)" % log_line)
        cpu0 = cpu_seconds(pid)
        time.sleep(1.0)  # the window sipd's CPU time is measured over
        used = cpu_seconds(pid) - cpu0
        assert used < 0.3, "sipd used %.2f s of CPU in 1 s while out of descriptors" % used
        lines = srv.log().count(log_line) - log_before
        assert 1 <= lines <= 5, "%d '%s' lines in ~1.3 s" % (lines, log_line)
    finally:
        for h in held:
            h.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


def test_out_of_descriptors_backs_off(srv):
    flood_out_of_descriptors(srv, lambda: raw_connect(srv.unix_endpoint, timeout=2), 4,
                             'msg="accept failed"')
    assert "suppressed=" in srv.log()
    check_echo(srv.client())
    assert srv.alive()


def test_http_out_of_descriptors_backs_off(start_sipd):
    """The HTTP front-end with one thread, out of descriptors before its
    first connection (libmicrohttpd's own accept busy-waited there)."""
    import urllib.request
    from harness import free_port
    port = free_port()
    srv = start_sipd(POOLS, server={"http": "127.0.0.1:%d" % port, "http_threads": 1})
    flood_out_of_descriptors(
        srv, lambda: socket.create_connection(("127.0.0.1", port), timeout=2), 0,
        'msg="http accept failed"')
    with urllib.request.urlopen("http://127.0.0.1:%d/v2/health/ready" % port, timeout=5) as r:
        assert r.status == 200
    check_echo(srv.client())


# ---- frames announced but not sent; stalled frames; connection limit ----

def vm_kib(pid, key="VmSize"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for %d" % (key, pid))


def infer_frame(rid, rows=1, pool="echo"):
    return P.encode_frame(P.INFER_REQUEST, rid, P.encode_infer_request(
        pool, {"input": np.ones((rows, ROW), F)}))


def test_announced_frames_are_not_allocated_before_their_bytes(srv):
    """32 connections each announce a 256 MiB frame (the default
    max_frame_bytes) and send nothing more: sipd allocates as bytes arrive,
    so neither its virtual nor its resident memory grows by the announced
    8 GiB (it did: +8 GiB of VmSize)."""
    pid = srv.proc.pid
    vm0, rss0 = vm_kib(pid), vm_kib(pid, "VmRSS")
    socks = []
    try:
        for i in range(32):
            s = raw_connect(srv.unix_endpoint)
            s.sendall(P.encode_header(P.INFER_REQUEST, 256 << 20, i + 1) + b"\x00" * 100)
            socks.append(s)
        wait_read_by_server(*socks)  # every header and its first bytes
        vm_grew = vm_kib(pid) - vm0
        rss_grew = vm_kib(pid, "VmRSS") - rss0
        assert vm_grew < 256 * 1024, "VmSize grew by %d KiB for 32 announced frames" % vm_grew
        assert rss_grew < 64 * 1024, "VmRSS grew by %d KiB for 32 announced frames" % rss_grew
        check_echo(srv.client())
    finally:
        for s in socks:
            s.close()


def test_frames_past_the_receive_budgets_are_refused_and_skipped(start_sipd):
    """A frame that would take more than the connection's or all
    connections' receive budget is answered RESOURCE_EXHAUSTED naming the
    setting; its bytes are skipped and the connection goes on."""
    srv = start_sipd(POOLS, server={"max_frame_bytes": 8 << 20,
                                    "max_connection_receive_bytes": 1 << 20,
                                    "max_receive_bytes": 2 << 20})
    s = raw_connect(srv.unix_endpoint)
    big = infer_frame(1, rows=1536)  # 1.5 MiB of floats: over the connection's 1 MiB
    s.sendall(big + infer_frame(2))
    hdr, payload = read_frame(s)
    assert hdr.type == P.INFER_RESPONSE and hdr.request_id == 1
    r = P.decode_infer_response(payload)
    assert code_name(r.code) == "RESOURCE_EXHAUSTED"
    assert "server.max_connection_receive_bytes" in r.message, r.message
    hdr, payload = read_frame(s)  # the next frame on the connection is served
    assert hdr.request_id == 2 and P.decode_infer_response(payload).code == 0
    # Three connections each holding 0.9 MiB of a frame pass the 2 MiB total.
    part = infer_frame(10, rows=900)
    held = [raw_connect(srv.unix_endpoint) for _ in range(3)]
    for h in held[:2]:
        h.sendall(part[:-10])
    wait_read_by_server(*held[:2])  # 1.8 MiB charged to the total
    held[2].sendall(part)
    hdr, payload = read_frame(held[2])
    r = P.decode_infer_response(payload)
    assert code_name(r.code) == "RESOURCE_EXHAUSTED" and "server.max_receive_bytes" in r.message, \
        r.message
    for h in held[:2]:  # finishing their frames: served
        h.sendall(part[-10:])
        hdr, payload = read_frame(h)
        assert hdr.request_id == 10 and P.decode_infer_response(payload).code == 0
    held[2].sendall(part)  # the budget was given back
    hdr, payload = read_frame(held[2])
    assert P.decode_infer_response(payload).code == 0
    for h in held + [s]:
        h.close()
    check_echo(srv.client())


def test_stalled_frame_closes_the_connection(start_sipd):
    srv = start_sipd(POOLS, server={"frame_timeout_ms": 1000})
    whole = infer_frame(7)
    half_header = raw_connect(srv.unix_endpoint)
    half_header.sendall(whole[:10])
    half_payload = raw_connect(srv.unix_endpoint)
    half_payload.sendall(whole[:-100])
    steady = raw_connect(srv.unix_endpoint)  # slow but making progress: kept
    steady.sendall(whole[:200])
    t0 = time.monotonic()
    for chunk in range(200, len(whole), (len(whole) - 200) // 4 + 1):
        time.sleep(0.3)  # the steady client's pace: 1.2 s in all, each gap under the timeout
        steady.sendall(whole[chunk:chunk + (len(whole) - 200) // 4 + 1])
    hdr, payload = read_frame(steady)
    assert hdr.request_id == 7 and P.decode_infer_response(payload).code == 0
    for s in (half_header, half_payload):
        data = read_until_closed(s, timeout=10)
        hdr = P.decode_header(data[:P.HEADER_SIZE])
        assert hdr.type == P.ERROR
        code, msg = P.decode_error(data[P.HEADER_SIZE:])
        assert code_name(code) == "DEADLINE_EXCEEDED" and "server.frame_timeout_ms" in msg, msg
    assert time.monotonic() - t0 < 8
    assert srv.log().count("frame stalled") == 2
    check_echo(srv.client())


def info_answered(sock):
    """Sends an INFO request on a raw connection and reads its answer."""
    sock.sendall(P.encode_frame(P.INFO_REQUEST, 1, P.encode_info_request(P.INFO_READY)))
    hdr, _ = read_frame(sock)
    assert hdr.type == P.INFO_RESPONSE, hdr


def test_connections_past_the_limit_are_refused(start_sipd):
    srv = start_sipd(POOLS, server={"max_connections": 4})
    held = [raw_connect(srv.unix_endpoint) for _ in range(4)]
    for h in held:  # each one accepted by now
        info_answered(h)
    extra = raw_connect(srv.unix_endpoint)
    data = read_until_closed(extra, timeout=5)
    assert P.decode_header(data[:P.HEADER_SIZE]).type == P.ERROR
    code, msg = P.decode_error(data[P.HEADER_SIZE:])
    assert code_name(code) == "RESOURCE_EXHAUSTED"
    assert "4 connections" in msg and "server.max_connections" in msg, msg
    c = srv.client()
    with pytest.raises(ResourceExhaustedError, match="server.max_connections"):
        c.infer(InferenceRequest("echo", {"input": np.ones((1, ROW), F)}))
    held.pop().close()

    def accepted():  # the close is seen by the server's loop soon after
        try:
            check_echo(srv.client())
            return True
        except ResourceExhaustedError:
            return False

    wait_until(accepted, what="a connection accepted after one closed")
    for h in held:
        h.close()


@pytest.mark.parametrize("sent", ["half the frame", "10 bytes of its header"])
def test_half_sent_frame_of_a_client_that_does_not_read_is_timed_out(start_sipd, sent):
    """A client sends four requests with 100 KB answers, then half of a
    fifth frame (or only the first 10 bytes of its header, which sipd reads
    with the end of the fourth), and reads nothing: its answers fill the
    socket, then sipd's queue, and sipd stops reading it (max_unsent_bytes).
    The half-sent frame still times out: the connection is closed about
    frame_timeout_ms after the frame's last byte came (before: open and
    silent for good, the ERROR frame queued behind answers never taken, or
    the connection not even looked at while not read from)."""
    srv = start_sipd(POOLS + [{"name": "slow", "backend": "builtin",
                               "backend_options": {"shape": "-1,%d" % ROW, "delay_ms": 100}}],
                     server={"frame_timeout_ms": 1000, "max_unsent_bytes": 4096})
    c = srv.client()
    assert c.status()["connections"]["unix"] == 1  # this client's
    frame = infer_frame(1, rows=100, pool="slow")
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(frame * 4 + frame[:len(frame) // 2 if sent == "half the frame" else 10])
        t0 = time.monotonic()
        wait_until(lambda: c.status()["connections"]["unix"] == 1, timeout=10,
                   what="sipd closing the connection holding half a frame")
        open_s = time.monotonic() - t0
        assert 0.9 < open_s < 5, open_s
        assert srv.log().count("frame stalled") == 1, srv.log_tail()
        read_until_closed(s, timeout=10)  # the answers it took, then the end
        check_echo(c)
    finally:
        s.close()


def test_next_header_read_with_a_frame_is_not_timed_out_while_paused(start_sipd):
    """sipd reads the end of a frame together with the first bytes of the
    next one. When that frame then stops the connection being read (its
    request holds more than a connection may have in flight, here over
    1 MiB for 2.5 s) those bytes are no frame half sent: the connection
    outlives frame_timeout_ms (1 s) and the next frame is answered."""
    srv = start_sipd([{"name": "slow", "backend": "builtin",
                       "backend_options": {"shape": "-1,%d" % ROW, "delay_ms": 2500}}],
                     server={"frame_timeout_ms": 1000, "max_unsent_bytes": "64KiB"})
    big = infer_frame(1, rows=1200, pool="slow")  # 1.2 MB
    nxt = P.encode_frame(P.INFO_REQUEST, 2, P.encode_info_request(P.INFO_READY))
    s = raw_connect(srv.unix_endpoint)
    try:
        s.sendall(big[:-1])
        wait_read_by_server(s)
        s.sendall(big[-1:] + nxt)  # one read takes the last byte and the next header's start
        s.settimeout(10)
        hdr, payload = read_frame(s)
        assert hdr.request_id == 1 and P.decode_infer_response(payload).code == 0
        hdr, _ = read_frame(s)
        assert hdr.request_id == 2 and hdr.type == P.INFO_RESPONSE, hdr
        assert "frame stalled" not in srv.log()
    finally:
        s.close()
