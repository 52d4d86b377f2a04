"""Session events (docs/events.md): the seed's callback snippet (seed 000,
code 5) run verbatim, the native SUBSCRIBE stream read with a raw socket,
per-pool filtering, ERROR events, and a subscriber that does not read: it
loses events, is told exactly how many, and inference is unaffected."""

import json
import socket
import struct
import threading
import time

import numpy as np
import pytest

from harness import raw_connect, read_frame, wait_until
from cann_sip import (InferenceRequest, InvalidArgumentError, SessionCallback, SessionEvent,
                      protocol as P)

F = np.float32

# Seed 000, code 5, with its whitespace restored; nothing else changed.
SEED_CODE_5 = '''
from cann_sip import SessionCallback, SessionEvent

class MySessionCallbacks(SessionCallback):
    def on_event(self, session_id, event, context):
        if event == SessionEvent.STATE_CHANGE:
            old_state = context["old_state"]
            new_state = context["new_state"]
            print(f"会话{session_id}状态变化:{old_state}->{new_state}")
        elif event == SessionEvent.INFERENCE_COMPLETE:
            latency = context["latency_ms"]
            if latency > 100:  # 记录慢请求
                with open(f"/logs/slow_requests_{session_id}.log", "a") as f:
                    f.write(f"{context['request_id']},{latency}\\n")

# 注册回调到会话池
client.register_callbacks("image_classification", MySessionCallbacks())
'''


@pytest.fixture
def srv(start_sipd, model_dir):
    return start_sipd([
        {"name": "image_classification", "model_path": str(model_dir["addmul"]), "pool_size": 1},
        {"name": "echo", "backend": "builtin", "pool_size": 1},
        {"name": "other", "backend": "builtin", "pool_size": 1},
        {"name": "flaky", "backend": "builtin", "pool_size": 1,
         "backend_options": {"fail_every": 2}},
    ])


def echo(c, rid):
    return c.infer(InferenceRequest("echo", {"input": np.array([rid], F)}, request_id=rid))


def subscribe(endpoint, pool, buffer=0):
    s = raw_connect(endpoint)
    s.sendall(P.encode_frame(P.SUBSCRIBE, 5, P.encode_subscribe(pool, buffer)))
    h, payload = read_frame(s)
    assert h.type == P.INFO_RESPONSE and h.request_id == 5
    code, body = P.decode_info_response(payload)
    assert code == 0 and body["subscribed"] == pool
    return s


def read_event(s):
    got = read_frame_any(s)
    assert got is not None, "event stream closed"
    h, payload = got
    assert h.type == P.EVENT
    return P.decode_event(payload)


def read_frame_any(s):
    """A frame of any type (EVENT is not in the client's MESSAGE_TYPES)."""
    hb = b""
    while len(hb) < P.HEADER_SIZE:
        chunk = s.recv(P.HEADER_SIZE - len(hb))
        if not chunk:
            return None
        hb += chunk
    h = P.decode_header(hb)
    payload = b""
    while len(payload) < h.length:
        chunk = s.recv(h.length - len(payload))
        assert chunk, "truncated frame"
        payload += chunk
    return h, payload


def test_seed_snippet_code_5(srv, capsys):
    client = srv.client()
    exec(compile(SEED_CODE_5, "seed000_code5", "exec"), {"client": client})
    x = np.ones((2, 4), F)
    for _ in range(3):
        client.infer(InferenceRequest(session_pool="image_classification",
                                      inputs={"lhs": x, "rhs": x}, timeout_ms=1000))
    want = ["会话image_classification/0状态变化:READY->RUNNING",
            "会话image_classification/0状态变化:RUNNING->READY"]
    printed = []

    def all_printed():
        printed.append(capsys.readouterr().out)
        return all("".join(printed).count(w) == 3 for w in want)
    wait_until(all_printed, what=lambda: "the callback's 6 lines, printed: %r" % "".join(printed))
    out = "".join(printed)
    lines = [l for l in out.splitlines() if l]
    assert lines == want * 3, out
    client.unregister_callbacks("image_classification")


def test_native_stream_order_and_contexts(srv):
    c = srv.client()
    s = subscribe(srv.endpoint, "echo")
    for rid in (11, 12, 13):
        echo(c, rid)
    c.infer(InferenceRequest("other", {"input": np.ones(1, F)}))  # not echo's: filtered
    echo(c, 14)  # its events come right after 13's: nothing of pool "other" between
    for rid in (11, 12, 13, 14):
        a, b, done = read_event(s), read_event(s), read_event(s)
        assert (a["event"], a["old_state"], a["new_state"]) == ("STATE_CHANGE", "READY", "RUNNING")
        assert (b["event"], b["old_state"], b["new_state"]) == ("STATE_CHANGE", "RUNNING", "READY")
        assert done["event"] == "INFERENCE_COMPLETE" and done["request_id"] == rid
        assert done["session"] == "echo/0" and done["pool"] == "echo"
        assert done["batch_size"] == 1 and done["latency_ms"] >= done["queue_ms"] >= 0
        assert a["dropped"] == b["dropped"] == done["dropped"] == 0
        assert a["pool"] == b["pool"] == "echo"
    s.close()
    srv.assert_alive()


class Probe(SessionCallback):
    """Sets `completed` when request 99 completes."""

    def __init__(self):
        self.completed = threading.Event()

    def on_event(self, session_id, event, context):
        if event == SessionEvent.INFERENCE_COMPLETE and context.get("request_id") == 99:
            self.completed.set()


def test_error_events_and_all_pools(srv):
    c = srv.client()
    seen = []
    got = threading.Event()

    class Rec(SessionCallback):
        def on_event(self, session_id, event, context):
            seen.append((session_id, event, dict(context)))
            if event == SessionEvent.ERROR:
                got.set()

    cb, probe = Rec(), Probe()
    c.register_callbacks(None, cb)  # every pool
    for rid in (1, 2):
        try:
            c.infer(InferenceRequest("flaky", {"input": np.ones(1, F)}, request_id=rid))
        except Exception:
            pass
    assert got.wait(10)
    errors = [x for x in seen if x[1] == SessionEvent.ERROR]
    assert len(errors) == 1
    sid, _, ctx = errors[0]
    assert sid == "flaky/0" and ctx["pool"] == "flaky" and ctx["code"] == "INTERNAL"
    assert ctx["request_id"] == 2 and ctx["message"]
    assert threading.current_thread().name != "cann_sip-events"
    # The probe keeps the subscription open; cb leaves it. The subscription
    # calls its callbacks event by event: once the probe has echo 99's
    # completion, cb would have had it too.
    c.register_callbacks(None, probe)
    c.unregister_callbacks(None, cb)
    n = len(seen)
    echo(c, 99)
    assert probe.completed.wait(20), "the probe callback had no event of request 99"
    assert len(seen) == n  # unregistered: nothing more
    c.unregister_callbacks(None, probe)


def test_slow_subscriber_loses_events_and_is_told(srv):
    c = srv.client()
    s = subscribe(srv.endpoint, "echo", buffer=16)  # never read while inference runs
    n = 1500
    t0 = time.monotonic()
    futs = []
    for rid in range(1, n + 1):
        futs.append(c.infer_async(InferenceRequest("echo", {"input": np.array([rid], F)},
                                                   request_id=rid)))
        if len(futs) >= 64:
            for f in futs:
                assert f.result(timeout=30).outputs["output"].shape == (1,)
            futs = []
    for f in futs:
        f.result(timeout=30)
    assert time.monotonic() - t0 < 60
    # Read what the server kept; events dropped at the very end are told
    # with the next event, which one more request brings.
    received, dropped = 0, 0
    s.settimeout(1.0)
    try:
        while True:
            ev = read_event(s)
            received += 1
            dropped += ev["dropped"]
    except socket.timeout:
        pass
    s.settimeout(10)
    echo(c, n + 1)
    while True:
        ev = read_event(s)
        received += 1
        dropped += ev["dropped"]
        if ev["event"] == "INFERENCE_COMPLETE" and ev["request_id"] == n + 1:
            break
    assert dropped > 0
    assert received + dropped == 3 * (n + 1)  # every event delivered or counted
    s.close()
    srv.assert_alive()


def test_bad_subscribe_is_refused(srv):
    s = raw_connect(srv.endpoint)
    s.sendall(P.encode_frame(P.SUBSCRIBE, 3, b"\x00\x00" + struct.pack("<I", 10**6)))
    h, payload = read_frame(s)
    assert h.type == P.ERROR
    code, msg = P.decode_error(payload)
    assert "buffer" in msg and "65536" in msg
    s.close()
    with pytest.raises(P.ProtocolError):
        P.encode_subscribe("echo", 10**6)
    with pytest.raises(InvalidArgumentError):
        srv.client().register_callbacks("echo", object())
    srv.assert_alive()


class SSEReader:
    """Server-Sent Events from a raw HTTP/1.1 socket: checks the status and
    Content-Type, undoes the chunked transfer-encoding, and returns events
    as (event name, data dict)."""

    def __init__(self, sock):
        self.f = sock.makefile("rb")
        status = self.f.readline()
        assert b" 200 " in status, status
        self.headers = {}
        while True:
            line = self.f.readline().strip()
            if not line:
                break
            k, _, v = line.decode().partition(":")
            self.headers[k.strip().lower()] = v.strip()
        assert self.headers["content-type"] == "text/event-stream"
        assert self.headers["cache-control"] == "no-cache"
        self.text = b""

    def read(self, n):
        out = []
        while len(out) < n:
            while b"\n\n" in self.text and len(out) < n:
                msg, self.text = self.text.split(b"\n\n", 1)
                fields = dict(l.split(": ", 1) for l in msg.decode().split("\n"))
                out.append((fields["event"], json.loads(fields["data"])))
            if len(out) == n:
                break
            size = int(self.f.readline().strip(), 16)  # chunk size line
            assert size > 0, "stream ended"
            self.text += self.f.read(size)
            self.f.readline()
        return out


def test_http_server_sent_events(start_sipd):
    import kserve as K
    srv = start_sipd([{"name": "echo", "backend": "builtin", "pool_size": 1},
                      {"name": "other", "backend": "builtin", "pool_size": 1}],
                     server={"http": "127.0.0.1:0"})
    host, port = K.http_base(srv).split("//")[1].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(b"GET /v2/events?pool=echo HTTP/1.1\r\nHost: x\r\n\r\n")
    r = SSEReader(s)  # headers come at once, before any event
    c = srv.client()
    c.infer(InferenceRequest("other", {"input": np.ones(1, F)}))  # filtered out
    echo(c, 21)
    evs = r.read(3)
    assert [e[0] for e in evs] == ["STATE_CHANGE", "STATE_CHANGE", "INFERENCE_COMPLETE"]
    assert evs[0][1]["new_state"] == "RUNNING" and evs[1][1]["new_state"] == "READY"
    assert evs[2][1]["request_id"] == 21 and evs[2][1]["pool"] == "echo"
    # Quiet, then more: the suspended stream wakes up. Not a wait: the stream
    # must stay quiet a while (sipd suspends it with nothing to send, which
    # shows nowhere outside).
    time.sleep(0.3)
    echo(c, 22)
    evs = r.read(3)
    assert evs[2][1]["request_id"] == 22 and evs[2][1]["dropped"] == 0
    s.close()
    srv.assert_alive()


def test_shutdown_with_open_streams(start_sipd):
    """A server with a quiet (suspended) SSE stream and a native
    subscription stops cleanly and ends both streams."""
    import kserve as K
    srv = start_sipd([{"name": "echo", "backend": "builtin", "pool_size": 1}],
                     server={"http": "127.0.0.1:0"})
    host, port = K.http_base(srv).split("//")[1].rsplit(":", 1)
    h = socket.create_connection((host, int(port)), timeout=10)
    h.sendall(b"GET /v2/events HTTP/1.1\r\nHost: x\r\n\r\n")
    SSEReader(h)
    n = subscribe(srv.endpoint, "")  # both streams are open once these return
    # Not a wait: the SSE stream stays quiet a while, so sipd has it suspended
    # (which shows nowhere outside) when it stops.
    time.sleep(0.3)
    assert srv.stop() == 0, srv.log_tail()
    # Both streams end (EOF, not a timeout); what came before were events.
    n.settimeout(5)
    while True:
        got = read_frame_any(n)
        if got is None:
            break
        assert got[0].type == P.EVENT
    h.settimeout(5)
    while h.recv(1 << 16):
        pass
    h.close()
    n.close()


def test_pool_events_on_reload(start_sipd):
    """A pool a reload adds reports its sessions' INIT -> READY and
    POOL_LOADED; one it removes reports its sessions DESTROYED."""
    import signal
    pools = [{"name": "echo", "backend": "builtin", "pool_size": 1},
             {"name": "gone", "backend": "builtin", "pool_size": 2}]
    srv = start_sipd(pools)
    added = subscribe(srv.endpoint, "added")
    gone = subscribe(srv.endpoint, "gone")
    srv.pools = [pools[0], {"name": "added", "backend": "builtin", "pool_size": 2}]
    srv.write_config()
    srv.send_signal(signal.SIGHUP)
    evs = [read_event(added) for _ in range(3)]
    ready = sorted(e["session"] for e in evs if e["event"] == "STATE_CHANGE")
    assert ready == ["added/0", "added/1"]
    assert all((e["old_state"], e["new_state"], e["reason"]) == ("INIT", "READY", "loaded")
               for e in evs if e["event"] == "STATE_CHANGE")
    assert evs[-1]["event"] == "POOL_LOADED" and evs[-1]["pool"] == "added"
    evs = [read_event(gone) for _ in range(2)]
    assert sorted(e["session"] for e in evs) == ["gone/0", "gone/1"]
    assert all((e["event"], e["new_state"]) == ("STATE_CHANGE", "DESTROYED") for e in evs)
    added.close()
    gone.close()
    srv.assert_alive()


def test_subscribe_pool_name_not_utf8(srv):
    s = raw_connect(srv.endpoint)
    s.sendall(P.encode_frame(P.SUBSCRIBE, 4, struct.pack("<H", 2) + b"\xff\xfe" +
                             struct.pack("<I", 0)))
    h, payload = read_frame(s)
    assert h.type == P.INFO_RESPONSE and h.request_id == 4
    code, body = P.decode_info_response(payload)
    assert code != 0 and "UTF-8" in body["error"], body
    s.close()
    srv.assert_alive()


def test_pool_failover_events(start_sipd):
    """A request whose session failed and that was retried, then sent to
    the fallback pool, shows up as POOL_FAILOVER events of its pool, saying
    what took it and why."""
    pools = [{"name": "p", "backend": "builtin", "pool_size": 1,
              "failover": {"strategy": "immediate_retry", "max_retries": 1,
                           "fallback_pool": "b"}},
             {"name": "b", "backend": "builtin", "pool_size": 1}]
    srv = start_sipd(pools, server={"allow_fault_injection": True})
    sub = subscribe(srv.endpoint, "p")
    with srv.client() as c:
        c.admin("fault", "p", kind="crash", count=2)
        r = c.infer(InferenceRequest("p", {"input": np.ones(3, np.float32)}))
        assert (r.retries, r.served_by) == (2, "b/0")
    sub.settimeout(10)
    fo = []
    while len(fo) < 2:
        e = read_event(sub)
        if e["event"] == "POOL_FAILOVER":
            fo.append(e)
    assert [e["pool"] for e in fo] == ["p", "p"]
    assert fo[0]["message"].startswith("retried on another session of the pool: ")
    assert fo[1]["message"].startswith("b: ") and "injected crash" in fo[1]["message"]
