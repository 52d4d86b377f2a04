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

from harness import raw_connect, read_frame
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
    out = ""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out += capsys.readouterr().out
        if all(out.count(w) == 3 for w in want):
            break
        time.sleep(0.05)
    lines = [l for l in out.splitlines() if l]
    assert lines == want * 3, out
    client.unregister_callbacks("image_classification")


def test_native_stream_order_and_contexts(srv):
    c = srv.client()
    s = subscribe(srv.endpoint, "echo")
    for rid in (11, 12, 13):
        echo(c, rid)
    c.infer(InferenceRequest("other", {"input": np.ones(1, F)}))  # not echo's: filtered
    for rid in (11, 12, 13):
        a, b, done = read_event(s), read_event(s), read_event(s)
        assert (a["event"], a["old_state"], a["new_state"]) == ("STATE_CHANGE", "READY", "RUNNING")
        assert (b["event"], b["old_state"], b["new_state"]) == ("STATE_CHANGE", "RUNNING", "READY")
        assert done["event"] == "INFERENCE_COMPLETE" and done["request_id"] == rid
        assert done["session"] == "echo/0" and done["pool"] == "echo"
        assert done["batch_size"] == 1 and done["latency_ms"] >= done["queue_ms"] >= 0
        assert a["dropped"] == b["dropped"] == done["dropped"] == 0
    s.settimeout(0.3)
    with pytest.raises(socket.timeout):
        s.recv(1)  # nothing of pool "other"
    s.close()
    srv.assert_alive()


def test_error_events_and_all_pools(srv):
    c = srv.client()
    seen = []
    got = threading.Event()

    class Rec(SessionCallback):
        def on_event(self, session_id, event, context):
            seen.append((session_id, event, dict(context)))
            if event == SessionEvent.ERROR:
                got.set()

    cb = Rec()
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
    c.unregister_callbacks(None, cb)
    n = len(seen)
    echo(c, 99)
    time.sleep(0.3)
    assert len(seen) == n  # unregistered: nothing more


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
