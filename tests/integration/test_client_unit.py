"""Unit tests of cann_sip.SessionClient against an in-process fake server
(no sipd needed): pipelining, out-of-order answers, many threads, errors,
ERROR frames, dropped connections, timeouts, reconnects."""

import os
import shutil
import socket
import threading
import time

import numpy as np
import pytest

from cann_sip import (CancelledError, DeadlineExceededError, InferenceRequest, InternalError,
                      InvalidArgumentError, NotFoundError, ResourceExhaustedError, SessionClient,
                      UnavailableError, protocol as P)
from harness import recv_exact, short_tmpdir, wait_until


class FakeServer:
    """Speaks the native protocol. Behaviour depends on the pool name:
    echo: returns the inputs as outputs, named out_<name>;
    batchN: holds answers until N requests arrived, then answers in reverse order;
    slow: answers once `release_slow` is set (late for the client timeout),
      counting the answers sent in `slow_sent`;
    silent: never answers;
    error_frame: sends an ERROR frame (RESOURCE_EXHAUSTED) and closes;
    drop: closes the connection without answering;
    flaky: closes the connection the first time, then echoes;
    fail: answers INFER_RESPONSE with NOT_FOUND;
    garbage: answers with a bad magic."""

    def __init__(self, tcp=False, path=None):
        self.dir = short_tmpdir() if path is None else os.path.dirname(path)
        if tcp:
            self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.lsock.bind(("127.0.0.1", 0))
            self.endpoint = "tcp://127.0.0.1:%d" % self.lsock.getsockname()[1]
        else:
            path = path or os.path.join(self.dir, "fake.sock")
            self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.lsock.bind(path)
            self.endpoint = "ipc://" + path
        self.lsock.listen(64)
        self.connections = 0
        self.flaky_drops = 1
        self.release_slow = threading.Event()
        self.slow_sent = 0
        self.requests = []
        self.lock = threading.Lock()
        self.stopping = False
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.stopping = True
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.lsock.close()
        for c in list(self.conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _send(self, c, wlock, msg_type, rid, payload):
        with wlock:
            c.sendall(P.encode_frame(msg_type, rid, payload))

    def _serve(self, c):
        wlock = threading.Lock()
        held = []
        try:
            while True:
                h = recv_exact(c, P.HEADER_SIZE)
                if len(h) < P.HEADER_SIZE:
                    return
                hdr = P.check_header(P.decode_header(h))
                payload = recv_exact(c, hdr.length)
                if hdr.type == P.INFO_REQUEST:
                    kind = P.decode_info_request(payload)
                    obj = {1: {"ready": True, "live": True, "pools": {"echo": "READY"}},
                           2: {"pools": [{"name": "echo", "state": "READY"}]},
                           3: {"uptime_s": 1.0, "pools": []}}.get(kind)
                    if obj is None:
                        self._send(c, wlock, P.INFO_RESPONSE, hdr.request_id,
                                   P.encode_info_response(1, {"error": "bad kind %d" % kind}))
                    else:
                        self._send(c, wlock, P.INFO_RESPONSE, hdr.request_id,
                                   P.encode_info_response(0, obj))
                    continue
                req = P.decode_infer_request(payload, copy=True)
                with self.lock:
                    self.requests.append((hdr.request_id, req))
                outs = {"out_" + k: v for k, v in req.inputs.items()}
                ok = P.encode_infer_response(0, queue_us=5, compute_us=7, total_us=20, outputs=outs)
                if req.pool == "echo":
                    self._send(c, wlock, P.INFER_RESPONSE, hdr.request_id, ok)
                elif req.pool.startswith("batch"):
                    held.append((hdr.request_id, ok))
                    if len(held) == int(req.pool[5:]):
                        for rid, p in reversed(held):
                            self._send(c, wlock, P.INFER_RESPONSE, rid, p)
                        held = []
                elif req.pool == "slow":
                    def later(rid=hdr.request_id, p=ok):
                        if not self.release_slow.wait(30):
                            return
                        try:
                            self._send(c, wlock, P.INFER_RESPONSE, rid, p)
                        except OSError:
                            pass
                        with self.lock:
                            self.slow_sent += 1
                    threading.Thread(target=later, daemon=True).start()
                elif req.pool == "silent":
                    pass
                elif req.pool == "error_frame":
                    self._send(c, wlock, P.ERROR, hdr.request_id,
                               P.encode_error(4, "frame too large: 9000 bytes, limit 4096"))
                    return
                elif req.pool == "drop":
                    return
                elif req.pool == "flaky":
                    with self.lock:
                        drop, self.flaky_drops = self.flaky_drops > 0, self.flaky_drops - 1
                    if drop:
                        return
                    self._send(c, wlock, P.INFER_RESPONSE, hdr.request_id, ok)
                elif req.pool == "fail":
                    self._send(c, wlock, P.INFER_RESPONSE, hdr.request_id,
                               P.encode_infer_response(2, "unknown pool 'fail'"))
                elif req.pool == "garbage":
                    with wlock:
                        c.sendall(b"XXXX" + b"\0" * 20)
                    return
        except OSError:
            return
        finally:
            try:
                c.close()
            except OSError:
                pass


@pytest.fixture
def fake():
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def client(fake):
    c = SessionClient(fake.endpoint, timeout_s=10)
    yield c
    c.close()


def echo(client, x, **kw):
    return client.infer(InferenceRequest("echo", {"x": x}, **kw))


def test_echo_roundtrip(client):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    r = echo(client, x)
    np.testing.assert_array_equal(r.outputs["out_x"], x)
    assert r["out_x"].dtype == np.float32
    assert r.timings == {"queue_us": 5, "compute_us": 7, "total_us": 20}
    assert isinstance(r.latency_ms, float) and r.latency_ms > 0
    assert r.session_pool == "echo"


def test_request_fields_on_the_wire(client, fake):
    client.infer(InferenceRequest("echo", {"x": np.zeros(2, np.int8)}, timeout_ms=75,
                                  priority="low", request_id=2 ** 64 - 1, outputs=["out_x"]))
    rid, req = fake.requests[-1]
    assert rid == 2 ** 64 - 1
    assert (req.pool, req.priority, req.timeout_ms, req.outputs) == ("echo", 3, 75, ["out_x"])


def test_auto_request_ids_unique(client, fake):
    for _ in range(5):
        echo(client, 1)
    ids = [rid for rid, _ in fake.requests]
    assert len(set(ids)) == 5


def test_strings_and_scalars(client):
    s = np.array([["a", "bé"], ["", "xyz"]], dtype=object)
    r = client.infer(InferenceRequest("echo", {"s": s, "k": np.float16(2.5), "e": np.zeros((0, 3))}))
    assert r.outputs["out_s"].tolist() == [[b"a", "bé".encode()], [b"", b"xyz"]]
    assert r.outputs["out_k"].shape == () and r.outputs["out_k"].dtype == np.float16
    assert r.outputs["out_e"].shape == (0, 3)


def test_out_of_order_answers(client):
    n = 40
    # The fake holds every answer until the (n+1)th request arrives, so the
    # callbacks are all in place before the first answer can come back.
    pool = "batch%d" % (n + 1)
    futs = [client.infer_async(InferenceRequest(pool, {"x": np.full(3, i, np.int64)}))
            for i in range(n)]
    done_order = []
    lock = threading.Lock()
    for i, f in enumerate(futs):
        f.add_done_callback(lambda _f, i=i: (lock.acquire(), done_order.append(i), lock.release()))
    assert not any(f.done() for f in futs)
    last = client.infer_async(InferenceRequest(pool, {"x": np.full(3, n, np.int64)}))
    np.testing.assert_array_equal(last.result(timeout=10).outputs["out_x"], [n, n, n])
    for i, f in enumerate(futs):
        np.testing.assert_array_equal(f.result(timeout=10).outputs["out_x"], [i, i, i])
    assert done_order == list(reversed(range(n)))


def test_many_threads_one_client(client, fake):
    errors = []

    def work(t):
        try:
            for i in range(100):
                v = np.array([t, i], dtype=np.int32)
                r = echo(client, v)
                assert r.outputs["out_x"].tolist() == [t, i]
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors[:3]
    assert fake.connections == 1


def test_server_error_response(client):
    with pytest.raises(NotFoundError, match="unknown pool 'fail'") as ei:
        client.infer(InferenceRequest("fail", {"x": 1}, request_id=77))
    assert ei.value.code == "NOT_FOUND" and ei.value.request_id == 77
    echo(client, 1)  # connection still fine


def test_error_frame_fails_all_pending_and_reconnects(client, fake):
    pend = [client.infer_async(InferenceRequest("silent", {"x": i})) for i in range(5)]
    with pytest.raises(ResourceExhaustedError, match="frame too large"):
        client.infer(InferenceRequest("error_frame", {"x": 1}))
    for f in pend:
        with pytest.raises(ResourceExhaustedError):
            f.result(timeout=5)
    r = echo(client, 5)  # reconnects
    assert r.outputs["out_x"] == 5
    assert fake.connections == 2


def test_dropped_connection_then_reconnect(client, fake):
    pend = client.infer_async(InferenceRequest("silent", {"x": 0}))
    with pytest.raises(UnavailableError):
        client.infer(InferenceRequest("drop", {"x": 1}))
    with pytest.raises(UnavailableError):
        pend.result(timeout=5)
    assert echo(client, 3).outputs["out_x"] == 3
    assert fake.connections == 2


def test_bad_frame_from_server(client):
    with pytest.raises(InternalError, match="magic"):
        client.infer(InferenceRequest("garbage", {"x": 1}))
    assert echo(client, 1).outputs["out_x"] == 1


def test_client_timeout(fake):
    with SessionClient(fake.endpoint, timeout_s=0.3) as c:
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            c.infer(InferenceRequest("silent", {"x": 1}))
        assert time.monotonic() - t0 < 3
        assert echo(c, 2).outputs["out_x"] == 2  # same connection still usable
    with SessionClient(fake.endpoint, timeout_s=0.1) as c:
        # the answer arrives after the deadline: dropped, no crash
        with pytest.raises(DeadlineExceededError):
            c.infer(InferenceRequest("slow", {"x": 1}))
        fake.release_slow.set()
        wait_until(lambda: fake.slow_sent == 1, what="the late answer to be sent")
        # The echo's answer comes after the late one on the same connection.
        assert echo(c, 4).outputs["out_x"] == 4


def test_duplicate_request_id_in_flight(client):
    f = client.infer_async(InferenceRequest("silent", {"x": 1}, request_id=5))
    with pytest.raises(InvalidArgumentError, match="already in flight"):
        client.infer_async(InferenceRequest("echo", {"x": 1}, request_id=5))
    assert not f.done()


def test_encoding_errors_raise_before_sending(client, fake):
    with pytest.raises(InvalidArgumentError):
        client.infer(InferenceRequest("echo", {"x": np.zeros(2, dtype=np.complex64)}))
    with pytest.raises(InvalidArgumentError):
        client.infer(InferenceRequest("echo", {"x": 1}, priority="urgent"))
    with pytest.raises(InvalidArgumentError):
        client.infer(InferenceRequest("echo", {"x": 1}, request_id=-1))
    assert fake.requests == []


def test_info_calls(client):
    assert client.ready() is True
    assert client.pools() == [{"name": "echo", "state": "READY"}]
    assert client.status()["uptime_s"] == 1.0
    with pytest.raises(InvalidArgumentError, match="bad kind"):
        client.info(9)


def test_ready_false_without_server():
    d = short_tmpdir()
    try:
        with SessionClient("ipc://" + os.path.join(d, "none.sock"), timeout_s=1) as c:
            assert c.ready() is False
            with pytest.raises(UnavailableError, match="cannot connect"):
                c.infer(InferenceRequest("echo", {"x": 1}))
    finally:
        shutil.rmtree(d)


def test_close_cancels_pending(fake):
    c = SessionClient(fake.endpoint, timeout_s=10)
    f = c.infer_async(InferenceRequest("silent", {"x": 1}))
    c.close()
    with pytest.raises(CancelledError):
        f.result(timeout=5)
    with pytest.raises(UnavailableError):
        c.infer(InferenceRequest("echo", {"x": 1}))
    c.close()  # idempotent


def test_tcp_endpoint():
    s = FakeServer(tcp=True)
    try:
        with SessionClient(s.endpoint, timeout_s=10) as c:
            x = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
            np.testing.assert_array_equal(echo(c, x).outputs["out_x"], x)
    finally:
        s.close()


def test_large_tensor(client):
    x = np.random.default_rng(1).standard_normal((4, 1024, 1024)).astype(np.float32)  # 16 MiB
    r = echo(client, x)
    np.testing.assert_array_equal(r.outputs["out_x"], x)


def flaky_requests(fake):
    with fake.lock:
        return sum(1 for _, r in fake.requests if r.pool == "flaky")


def test_keyed_request_resent_after_drop(client, fake):
    """The connection drops under a keyed request: the client reconnects and
    sends it again (the server, not the client, makes that run once)."""
    r = client.infer(InferenceRequest("flaky", {"x": 4}, idempotency_key="k-1"))
    assert r.outputs["out_x"] == 4
    assert fake.connections == 2
    assert flaky_requests(fake) == 2


def test_unkeyed_request_fails_on_drop(client, fake):
    with pytest.raises(UnavailableError):
        client.infer(InferenceRequest("flaky", {"x": 4}))
    assert flaky_requests(fake) == 1
    assert client.infer(InferenceRequest("flaky", {"x": 5})).outputs["out_x"] == 5


def test_keyed_resend_stops_at_timeout(fake):
    fake.flaky_drops = 10 ** 6  # always drops
    c = SessionClient(fake.endpoint, timeout_s=1, backoff_s=0.01, max_backoff_s=0.05)
    try:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError):
            c.infer(InferenceRequest("flaky", {"x": 1}, idempotency_key="k-2"))
        assert 0.9 < time.monotonic() - t0 < 4
        # Resent with backoff: more than once, far fewer than without one.
        assert 3 <= flaky_requests(fake) <= 120
    finally:
        c.close()


def test_call_waits_for_the_server(tmp_path):
    """With reconnect_timeout_s a call waits (retrying with backoff) for a
    server that is not there yet; a closed client never reconnects."""
    d = short_tmpdir()
    path = os.path.join(d, "late.sock")
    c = SessionClient("ipc://" + path, timeout_s=5, reconnect_timeout_s=5, backoff_s=0.02)
    servers = []
    timer = threading.Timer(0.3, lambda: servers.append(FakeServer(path=path)))
    try:
        t0 = time.monotonic()
        timer.start()
        assert echo(c, 7).outputs["out_x"] == 7
        assert time.monotonic() - t0 >= 0.25
        c.close()
        with pytest.raises(UnavailableError, match="closed"):
            echo(c, 8)
        assert servers[0].connections == 1
    finally:
        timer.cancel()
        c.close()
        for s in servers:
            s.close()
        shutil.rmtree(d, ignore_errors=True)


def test_reconnect_arguments_checked():
    with pytest.raises(InvalidArgumentError):
        SessionClient("ipc:///tmp/x.sock", backoff_s=0)
    with pytest.raises(InvalidArgumentError):
        SessionClient("ipc:///tmp/x.sock", backoff_s=1, max_backoff_s=0.5)
    c = SessionClient("ipc:///tmp/x.sock")
    with pytest.raises(InvalidArgumentError, match="idempotency_key"):
        c.infer_async(InferenceRequest("echo", {"x": 1}, idempotency_key=""))
    c.close()


def _full_backlog(path):
    """A unix socket listening with a full backlog: (listener, the pending
    connections filling it)."""
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(0)
    pending = []
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect(path)
        except BlockingIOError:
            s.close()
            return lsock, pending
        pending.append(s)


def test_connect_retries_while_the_backlog_is_full():
    """A burst of clients can fill the server's listen backlog: a connect
    refused with EAGAIN is retried with a backoff until the server accepts,
    instead of failing (it failed at once)."""
    from cann_sip.client import _open_socket
    d = short_tmpdir()
    path = os.path.join(d, "s.sock")
    lsock, pending = _full_backlog(path)
    accepted, stop = [], threading.Event()

    def acceptor():
        # Not a wait: the server accepts nothing for 0.3 s, so the client's
        # first connects find the backlog full and must be retried.
        time.sleep(0.3)
        lsock.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(lsock.accept()[0])
            except socket.timeout:
                pass

    t = threading.Thread(target=acceptor, daemon=True)
    t.start()
    try:
        s = _open_socket("ipc://" + path, 10)
        s.close()
        assert accepted, "connected before the server accepted anything"
    finally:
        stop.set()
        t.join(5)
        for s in pending + accepted + [lsock]:
            s.close()
        shutil.rmtree(d, ignore_errors=True)


def test_connect_gives_up_when_the_backlog_stays_full():
    from cann_sip.client import _open_socket
    d = short_tmpdir()
    path = os.path.join(d, "s.sock")
    lsock, pending = _full_backlog(path)
    try:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError, match="listen backlog stayed full"):
            _open_socket("ipc://" + path, 0.5)
        assert time.monotonic() - t0 >= 0.5
    finally:
        for s in pending + [lsock]:
            s.close()
        shutil.rmtree(d, ignore_errors=True)
