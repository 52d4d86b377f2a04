"""Native transport limits: a client batch cannot pad beyond what the pool
runs in one execution, a client that never reads its answers is not read
from either (server.max_unsent_bytes), and running out of file descriptors
neither spins the transport thread nor floods the log."""

import os
import resource
import socket
import threading
import time

import numpy as np
import pytest

from cann_sip import BatchInferenceRequest, InferenceRequest, InvalidArgumentError
from cann_sip import protocol as P
from harness import raw_connect, read_frame

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
    time.sleep(1.5)
    # sipd stopped reading: the requests wait in the socket, not in sipd.
    assert not sent, "sipd read every request of a client that reads no answers"
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
        time.sleep(0.3)
        cpu0 = cpu_seconds(pid)
        time.sleep(1.0)
        used = cpu_seconds(pid) - cpu0
        assert used < 0.3, "sipd used %.2f s of CPU in 1 s while out of descriptors" % used
        lines = srv.log().count(log_line) - log_before
        assert 1 <= lines <= 5, "%d '%s' lines in ~1.3 s" % (lines, log_line)
    finally:
        for h in held:
            h.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    time.sleep(0.2)


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
