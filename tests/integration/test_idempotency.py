"""Idempotent requests on a real sipd (docs/idempotency.md): a request with
an idempotency key runs once over the native protocol, HTTP and gRPC (the
pool's execution count in /metrics says so); duplicates in flight join the
first; kept answers expire; transient failures are not kept; and a client
sending keyed requests while sipd is SIGKILLed and restarted on the same
socket gets an answer for every request; with server.state_dir none of them
runs twice (the answers kept before the kill come back from the journal)."""

import importlib
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import harness
import kserve as K
from cann_sip import DeadlineExceededError, InferenceRequest, InternalError, SessionClient

F = np.float32
REPO = Path(__file__).resolve().parents[2]


def pool(name, delay_ms=0, idem=None, **opts):
    p = {"name": name, "backend": "builtin", "pool_size": 2,
         "backend_options": dict({"delay_ms": delay_ms, "shape": "-1"}, **opts)}
    if idem is not None:
        p["idempotency"] = idem
    return p


def metric(base, name, pool_name):
    text = K.get(base + "/metrics").body.decode()
    m = re.search(r'^%s\{pool="%s"[^}]*\} ([0-9.]+)$' % (name, re.escape(pool_name)), text, re.M)
    return float(m.group(1)) if m else 0.0


def executions(base, pool_name):
    return metric(base, "sip_inference_count_total", pool_name)


def keyed(pool_name, v, key, **kw):
    return InferenceRequest(pool_name, {"input": np.full(3, v, F)}, idempotency_key=key, **kw)


@pytest.fixture
def srv(start_sipd):
    s = start_sipd([pool("count"), pool("slow", 600), pool("short", idem={"ttl_s": 1}),
                    pool("byid", idem={"enabled": True}), pool("failing", fail_every=1)],
                   server={"http": "127.0.0.1:0", "grpc": "127.0.0.1:0"})
    s.http = K.http_base(s)
    s.grpc = K.printed_address(s, "grpc")[len("grpc://"):]
    return s


def test_native_duplicates_run_once(srv):
    c = srv.client()
    first = c.infer(keyed("count", 1, "n-1"))
    assert not first.replayed
    # The same key with other inputs: the first answer, not a new execution.
    again = [c.infer(keyed("count", 2, "n-1")) for _ in range(3)]
    for r in again:
        assert r.replayed
        np.testing.assert_array_equal(r.outputs["output"], np.full(3, 1, F))
    assert len({r.request_id for r in again} | {first.request_id}) == 4
    other = c.infer(keyed("count", 5, "n-2"))
    np.testing.assert_array_equal(other.outputs["output"], np.full(3, 5, F))
    plain = c.infer(InferenceRequest("count", {"input": np.full(3, 6, F)}))
    assert not plain.replayed
    assert executions(srv.http, "count") == 3
    assert metric(srv.http, "sip_idempotency_hits_total", "count") == 3
    assert metric(srv.http, "sip_idempotency_entries", "count") == 2
    assert metric(srv.http, "sip_idempotency_bytes", "count") > 0


def test_http_duplicates_run_once(srv):
    bodies = []
    for v in (1, 2):
        r = K.infer(srv.http, "count", {"input": np.full(3, v, F)},
                    params={"idempotency_key": "h-1"})
        assert r.status == 200, r.body
        doc, out = K.decode_outputs(r)
        np.testing.assert_array_equal(out["output"], np.full(3, 1, F))
        bodies.append(doc)
    assert "parameters" not in bodies[0]
    assert bodies[1]["parameters"] == {"idempotent_replay": True}
    assert executions(srv.http, "count") == 1
    # A pool with idempotency.enabled keys requests by their "id".
    for v in (3, 4):
        r = K.infer(srv.http, "byid", {"input": np.full(3, v, F)}, id="req-7")
        assert r.status == 200
        np.testing.assert_array_equal(K.decode_outputs(r)[1]["output"], np.full(3, 3, F))
    r = K.infer(srv.http, "count", {"input": np.full(3, 1, F)}, id="req-7")  # not enabled there
    assert executions(srv.http, "byid") == 1
    assert executions(srv.http, "count") == 2
    r = K.infer(srv.http, "count", {"input": np.full(3, 1, F)}, params={"idempotency_key": 5})
    assert r.status == 400 and b"parameters.idempotency_key is 5; expected a string" in r.body


def grpc_stubs(tmp_path):
    grpc = pytest.importorskip("grpc")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO / "proto"),
                    "--python_out", str(tmp_path), "--grpc_python_out", str(tmp_path),
                    "grpc_service.proto"], check=True)
    sys.path.insert(0, str(tmp_path))
    try:
        return grpc, importlib.import_module("grpc_service_pb2"), \
            importlib.import_module("grpc_service_pb2_grpc")
    finally:
        sys.path.remove(str(tmp_path))


def test_grpc_duplicates_run_once(srv, tmp_path):
    grpc, pb, svc = grpc_stubs(tmp_path)
    with grpc.insecure_channel(srv.grpc) as ch:
        stub = svc.GRPCInferenceServiceStub(ch)

        def call(v, key=None, rid=""):
            req = pb.ModelInferRequest(model_name="count" if key else "byid", id=rid)
            if key:
                req.parameters["idempotency_key"].string_param = key
            t = req.inputs.add(name="input", datatype="FP32", shape=[3])
            t.contents.fp32_contents.extend([float(v)] * 3)
            r = stub.ModelInfer(req)
            out = np.frombuffer(r.raw_output_contents[0], dtype=F)
            replay = "idempotent_replay" in r.parameters and r.parameters[
                "idempotent_replay"].bool_param
            return out, replay
        assert call(1, key="g-1") == (pytest.approx(np.full(3, 1, F)), False)
        out, replay = call(2, key="g-1")
        np.testing.assert_array_equal(out, np.full(3, 1, F))
        assert replay
        out, replay = call(8, rid="g-id")
        out2, replay2 = call(9, rid="g-id")
        np.testing.assert_array_equal(out2, np.full(3, 8, F))
        assert not replay and replay2
    assert executions(srv.http, "count") == 1
    assert executions(srv.http, "byid") == 1


def test_concurrent_duplicates_join(srv):
    c = srv.client()
    futs = [c.infer_async(keyed("slow", v, "j-1")) for v in range(5)]
    res = [f.result(timeout=30) for f in futs]
    for r in res:
        np.testing.assert_array_equal(r.outputs["output"], np.full(3, 0, F))
    assert [r.replayed for r in res] == [False] + [True] * 4
    assert executions(srv.http, "slow") == 1
    assert metric(srv.http, "sip_idempotency_joins_total", "slow") == 4


def test_expiry_and_transient_failures(srv):
    c = srv.client()
    c.infer(keyed("short", 1, "e-1"))
    assert c.infer(keyed("short", 2, "e-1")).replayed
    time.sleep(1.2)  # not a wait: ttl_s (1) passes
    r = c.infer(keyed("short", 3, "e-1"))
    assert not r.replayed
    np.testing.assert_array_equal(r.outputs["output"], np.full(3, 3, F))
    assert executions(srv.http, "short") == 2
    assert metric(srv.http, "sip_idempotency_evictions_total", "short") == 1
    # INTERNAL (the backend's injected failure) is not kept: a retry runs.
    for _ in range(2):
        with pytest.raises(InternalError):
            c.infer(keyed("failing", 1, "f-1"))
    assert srv.pool_status("failing")["requests"].get("INTERNAL") == 2
    assert metric(srv.http, "sip_idempotency_entries", "failing") == 0


class KeyedLoad:
    """Threads sending keyed requests (value v, key "w-v") through one
    client; results[v] is the answer's output, errors what failed."""

    def __init__(self, client, n_threads=4, per_thread=40):
        self.client, self.total = client, n_threads * per_thread
        self.results, self.errors, self.replayed = {}, [], []
        self.threads = [threading.Thread(target=self._work, args=(t, per_thread))
                        for t in range(n_threads)]
        for th in self.threads:
            th.start()

    def _work(self, t, per_thread):
        for i in range(per_thread):
            v = t * 1000 + i
            try:
                r = self.client.infer(keyed("work", v, "w-%d" % v))
                self.results[v] = r.outputs["output"].copy()
                if r.replayed:
                    self.replayed.append(v)
            except Exception as e:  # recorded: the test fails on any
                self.errors.append((v, repr(e)))

    def wait_for(self, n, timeout=30):
        def answered():
            assert not self.errors, self.errors[:5]
            return len(self.results) >= n
        harness.wait_until(answered, timeout, "%d answers" % n)

    def finish(self):
        """Joins the threads; asserts every request got its own answer."""
        for th in self.threads:
            th.join(60)
        assert not self.errors, self.errors[:5]
        assert len([v for v in self.results if v < 99999]) == self.total
        for v, out in self.results.items():
            np.testing.assert_array_equal(out, np.full(3, v, F))


def test_sigkill_restart_under_load_loses_nothing(start_sipd, tmp_path):
    """sipd is SIGKILLed while a client sends keyed requests from 4 threads,
    then restarted on the same socket: the client reconnects by itself and
    every request gets its own correct answer. Requests that were answered
    before the kill are not in the new process's memory: a resend of one
    whose answer was lost with the connection runs again there."""
    pools = [pool("work", 20)]
    srv = start_sipd(pools)
    client = SessionClient(srv.unix_endpoint, timeout_s=30, reconnect_timeout_s=10)
    load = KeyedLoad(client)
    load.wait_for(20)
    srv.proc.kill()
    srv.returncode = srv.proc.wait(10)
    before = len(load.results)
    # Not a wait: sipd stays down a while, so requests fail to connect and
    # back off meanwhile.
    time.sleep(0.3)
    srv2 = harness.SipServer(tmp_path / "restarted", pools, sockdir=srv.sockdir)
    try:
        srv2.start()
        load.finish()
        st = srv2.pool_status("work")
        ran_after = st["requests"].get("OK", 0)
        # Every request not answered before the kill ran in the new process
        # at most once (an answer lost with the old connection runs again).
        left = load.total - before
        assert left - len(load.threads) <= ran_after <= left
        print("answered before the kill: %d, executions after the restart: %d"
              % (before, ran_after))
    finally:
        client.close()
        assert srv2.stop() == 0


def recorded(path):
    """{value: times executed} from a builtin pool's record_file."""
    counts = {}
    for line in path.read_text().splitlines():
        v = float(line.split()[0])
        counts[v] = counts.get(v, 0) + 1
    return counts


def test_sigkill_restart_with_state_dir_runs_nothing_twice(start_sipd, tmp_path):
    """As above, with server.state_dir: every answer kept before the kill is
    in the idempotency journal, so a request whose answer was lost with the
    connection is answered from it after the restart instead of running
    again. Counted by the builtin backend's record of what it executed, in
    both processes: every request ran exactly once."""
    record = tmp_path / "executed.txt"
    pools = [pool("work", 15, record_file=str(record))]
    server = {"state_dir": str(tmp_path / "state")}
    srv = start_sipd(pools, server=server)
    client = SessionClient(srv.unix_endpoint, timeout_s=30, reconnect_timeout_s=10)
    load = KeyedLoad(client)
    load.wait_for(20)
    # One that surely ran before the kill, as a request whose answer was
    # lost with the connection would have.
    with srv.client() as other:
        other.infer(keyed("work", 99999, "orphan"))
    srv.proc.kill()
    srv.returncode = srv.proc.wait(10)
    time.sleep(0.3)  # not a wait: sipd stays down a while (requests back off meanwhile)
    srv2 = harness.SipServer(tmp_path / "restarted", pools, server=server, sockdir=srv.sockdir)
    try:
        srv2.start()
        again = client.infer(keyed("work", 99999, "orphan"))
        assert again.replayed and again.outputs["output"].tolist() == [99999.0] * 3
        load.results[99999] = again.outputs["output"].copy()
        load.finish()
        counts = recorded(record)
        twice = {v: n for v, n in counts.items() if n != 1}
        assert not twice, "ran more than once: %r" % twice
        assert sorted(counts) == sorted(float(v) for v in load.results)
        assert "idempotency journal read" in srv2.log()
        print("answers replayed from the journal after the restart: %d" % len(load.replayed))
    finally:
        client.close()
        assert srv2.stop() == 0


def test_journal_survives_restart_and_expires(start_sipd, tmp_path):
    """A kept answer comes back after a clean restart (replayed, not run);
    one whose TTL passed does not; a journal cut short keeps what it holds."""
    record = tmp_path / "executed.txt"
    pools = [pool("work", 1, record_file=str(record)),
             pool("short", 1, idem={"ttl_s": 1}, record_file=str(record))]
    state = tmp_path / "state"
    server = {"state_dir": str(state)}
    srv = start_sipd(pools, server=server)
    c = srv.client()
    assert not c.infer(keyed("work", 1, "k1")).replayed
    assert not c.infer(keyed("work", 2, "k2")).replayed
    assert not c.infer(keyed("short", 3, "k3")).replayed
    c.close()
    assert srv.stop() == 0
    time.sleep(1.1)  # not a wait: k3's TTL (1 s) passes while sipd is down
    srv = start_sipd(pools, server=server)
    c = srv.client()
    r = c.infer(keyed("work", 1, "k1"))
    assert r.replayed and r.outputs["output"].tolist() == [1.0] * 3
    assert not c.infer(keyed("short", 3, "k3")).replayed
    assert recorded(record) == {1.0: 1, 2.0: 1, 3.0: 2}
    c.close()
    assert srv.stop() == 0
    # Cut the journal inside its last record: the records before it stay.
    j = state / "idempotency.journal"
    data = j.read_bytes()
    j.write_bytes(data[:-5])
    srv = start_sipd(pools, server=server)
    c = srv.client()
    assert c.infer(keyed("work", 1, "k1")).replayed
    assert "idempotency journal damaged" in srv.log() and "cut short" in srv.log()
    c.close()


def test_deadlines_expire_while_replays_flow(srv):
    """Kept answers are delivered by the housekeeping thread, which also
    expires queued requests at their deadline: a stream of replays must not
    hold an expiry back (the queued request would run instead)."""
    c = srv.client()
    c.infer(keyed("count", 1, "flow"))
    busy = [c.infer_async(InferenceRequest("slow", {"input": np.full(3, v, F)})) for v in (1, 2)]
    # both sessions are busy for 600 ms
    harness.wait_until(lambda: [x["state"] for x in srv.pool_status("slow", c)["sessions"]]
                       == ["RUNNING"] * 2, what="both sessions of pool slow to run")
    queued = c.infer_async(InferenceRequest("slow", {"input": np.full(3, 3, F)}, timeout_ms=100))
    stop = time.monotonic() + 0.4
    while time.monotonic() < stop:
        assert c.infer(keyed("count", 2, "flow")).replayed
    with pytest.raises(DeadlineExceededError):
        queued.result(timeout=10)
    for f in busy:
        f.result(timeout=10)
    assert executions(srv.http, "slow") == 2
