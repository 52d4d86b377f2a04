"""Sequence batching end to end (docs/sequences.md): a real sipd serving a
generated model whose output shows the control inputs the server filled
(out = START*1000 + END*100 + READY*10 + x, corr = CORRID), driven over the
native protocol (cann_sip) and KServe HTTP."""

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper

import kserve as K
from cann_sip import FailedPreconditionError, InferenceRequest, ResourceExhaustedError
from cann_sip.errors import InvalidArgumentError
import harness
from harness import serve
from test_grpc import pb  # noqa: F401  (the generated gRPC stubs, a fixture)

LONG_IDLE_US = 10_000_000  # long enough never to expire during a test
SHORT_IDLE_US = 100_000


def seq_model(corrid_type):
    """out = START*1000 + END*100 + READY*10 + x; corr = CORRID."""
    N, V = helper.make_node, helper.make_tensor_value_info
    k = lambda n, v: helper.make_tensor(n, T.FLOAT, [1], [v])  # noqa: E731
    nodes = [N("Cast", ["START"], ["s"], to=T.FLOAT), N("Cast", ["END"], ["e"], to=T.FLOAT),
             N("Cast", ["READY"], ["r"], to=T.FLOAT),
             N("Mul", ["s", "k1000"], ["s2"]), N("Mul", ["e", "k100"], ["e2"]),
             N("Mul", ["r", "k10"], ["r2"]), N("Add", ["s2", "e2"], ["a1"]),
             N("Add", ["a1", "r2"], ["a2"]), N("Add", ["a2", "x"], ["out"]),
             N("Identity", ["CORRID"], ["corr"])]
    g = helper.make_graph(
        nodes, "seq",
        [V("x", T.FLOAT, [1]), V("START", T.INT32, [1]), V("END", T.INT32, [1]),
         V("READY", T.INT32, [1]), V("CORRID", corrid_type, [1])],
        [V("out", T.FLOAT, [1]), V("corr", corrid_type, [1])],
        initializer=[k("k1000", 1000.0), k("k100", 100.0), k("k10", 10.0)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


CONTROLS = {"start": "START", "end": "END", "ready": "READY", "corrid": "CORRID"}


def pool(name, path, sessions=1, **seq):
    return {"name": name, "model_path": str(path), "pool_size": sessions,
            "sequence_batching": dict({"idle_timeout_us": LONG_IDLE_US,
                                       "control_inputs": CONTROLS}, **seq)}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq")
    u64, s = root / "seq_u64.onnx", root / "seq_str.onnx"
    onnx.save(seq_model(T.UINT64), str(u64))
    onnx.save(seq_model(T.STRING), str(s))
    plain = root / "plain.onnx"
    V = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["out"])], "plain",
                          [V("x", T.FLOAT, [1])], [V("out", T.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(plain))
    pools = [{"name": "plain", "model_path": str(plain)},
             pool("seq", u64, sessions=2), pool("seq_str", s),
             pool("seq_idle", u64, idle_timeout_us=SHORT_IDLE_US),
             pool("seq_one", u64, max_backlog=1)]
    with serve(root, pools, server={"http": "127.0.0.1:0", "http_threads": 2,
                                    "grpc": "127.0.0.1:0"}) as server:
        server.http = K.http_base(server)
        server.grpc = K.printed_address(server, "grpc")[len("grpc://"):]
        with server.client() as c:
            server.c = c
            yield server


def x(v):
    return {"x": np.array([v], dtype=np.float32)}


def value(resp):
    return float(resp.outputs["out"][0]), resp.outputs["corr"][0]


def http_infer(srv, model, v, **params):
    return K.infer(srv.http, model, x(v), params=params)


def http_value(reply):
    assert reply.status == 200, reply
    _, out = K.decode_outputs(reply)
    return float(out["out"][0]), out["corr"][0]


def session_inferences(srv, name):
    return [s["inferences"] for s in srv.pool_status(name, srv.c)["sessions"]]


def metric(srv, name, pool_name):
    text = K.get(srv.http + "/metrics").body.decode()
    key = '%s{pool="%s",version=""} ' % (name, pool_name)
    for line in text.splitlines():
        if line.startswith(key):
            return float(line[len(key):])
    raise AssertionError("no %s for %s in /metrics" % (name, pool_name))


def wait_metric(srv, name, pool_name, want, timeout=harness.WAIT_TIMEOUT_S):
    """Waits until /metrics shows `want` for the pool's metric (a slot frees
    just after its END request was answered, an idle sequence expires on a
    timer)."""
    harness.wait_until(lambda: metric(srv, name, pool_name) == want, timeout,
                       lambda: "%s of %s to be %s (it is %s)" % (
                           name, pool_name, want, metric(srv, name, pool_name)))


def test_control_inputs_native(srv):
    seq = srv.c.sequence("seq", 42)
    assert value(seq.infer(x(1))) == (1011.0, 42)  # START, READY
    assert value(seq.infer(x(2))) == (12.0, 42)    # READY
    assert value(seq.end(x(3))) == (113.0, 42)     # END, READY
    with pytest.raises(FailedPreconditionError, match="sequence 42 is not active"):
        srv.c.infer(InferenceRequest("seq", x(4), sequence_id=42))
    # A one-request sequence: START and END at once.
    r = srv.c.infer(InferenceRequest("seq", x(5), sequence_id=43, sequence_start=True,
                                     sequence_end=True))
    assert value(r) == (1115.0, 43)


def test_control_inputs_http(srv):
    assert http_value(http_infer(srv, "seq", 1, sequence_id=77, sequence_start=True)) == (1011, 77)
    assert http_value(http_infer(srv, "seq", 2, sequence_id=77)) == (12, 77)
    assert http_value(http_infer(srv, "seq", 3, sequence_id=77, sequence_end=True)) == (113, 77)
    r = http_infer(srv, "seq", 4, sequence_id=77)
    assert r.status == 400 and "sequence 77 is not active" in r.json()["error"], r
    # String ids reach a string CORRID input as they are.
    out = http_value(http_infer(srv, "seq_str", 1, sequence_id="cam-7", sequence_start=True))
    assert out == (1011, b"cam-7")
    out = http_value(http_infer(srv, "seq_str", 2, sequence_id="cam-7", sequence_end=True))
    assert out == (112, b"cam-7")
    # ... and the native protocol too; numbers as decimal text.
    r = srv.c.infer(InferenceRequest("seq_str", x(3), sequence_id=9, sequence_start=True,
                                     sequence_end=True))
    assert value(r) == (1113.0, b"9")


def test_order_within_a_sequence(srv):
    """Requests sent back to back without waiting run one at a time, in order."""
    seq = srv.c.sequence("seq", 500)
    order, lock = [], threading.Lock()

    def note(i):
        def cb(f):
            with lock:
                order.append((i, f.result().outputs["out"][0]))
        return cb

    futs = []
    for i in range(20):
        f = seq.infer_async(x(i), end=i == 19)
        f.add_done_callback(note(i))
        futs.append(f)
    for f in futs:
        f.result(timeout=20)
    assert [i for i, _ in order] == list(range(20))
    want = [1010.0] + [10.0 + i for i in range(1, 19)] + [129.0]
    assert [float(v) for _, v in order] == want


def test_sequences_stick_to_their_sessions(srv):
    before = session_inferences(srv, "seq")
    a, b = srv.c.sequence("seq", 1001), srv.c.sequence("seq", 1002)
    a.infer(x(0))
    b.infer(x(0))
    for i in range(3):
        a.infer_async(x(i))
        b.infer_async(x(i))
    a.end(x(9))
    b.end(x(9))
    after = session_inferences(srv, "seq")
    # Two sessions, two sequences: each ran all 5 of its requests on one session.
    assert sorted(n - m for n, m in zip(after, before)) == [5, 5]


def test_idle_timeout(srv):
    expired = metric(srv, "sip_sequences_expired_total", "seq_idle")
    seq = srv.c.sequence("seq_idle", 7)
    assert value(seq.infer(x(1))) == (1011.0, 7)
    wait_metric(srv, "sip_sequences_expired_total", "seq_idle", expired + 1)
    with pytest.raises(FailedPreconditionError,
                       match="sequence 7 is not active .*idle timeout of 100000 us"):
        seq.infer(x(2))
    assert metric(srv, "sip_sequences_expired_total", "seq_idle") == expired + 1
    assert metric(srv, "sip_sequences_active", "seq_idle") == 0
    # Starting it again works.
    seq.started = False
    assert value(seq.end(x(3))) == (1113.0, 7)


def test_end_frees_the_slot_for_the_backlog(srv):
    first = srv.c.sequence("seq_one", 1)
    assert value(first.infer(x(1))) == (1011.0, 1)
    # The one slot is taken: sequence 2 waits in the backlog (max_backlog 1)...
    waiting = srv.c.sequence("seq_one", 2)
    w1 = waiting.infer_async(x(2))
    w2 = waiting.infer_async(x(3), end=True)
    # ... which is then full.
    with pytest.raises(ResourceExhaustedError, match="max_backlog"):
        srv.c.sequence("seq_one", 3).infer(x(1))
    wait_metric(srv, "sip_sequences_waiting", "seq_one", 1)
    assert not w1.done() and not w2.done()
    # END of sequence 1 frees the slot: sequence 2 starts, in order.
    assert value(first.end(x(4))) == (114.0, 1)
    assert value(w1.result(timeout=10)) == (1012.0, 2)
    assert value(w2.result(timeout=10)) == (113.0, 2)
    assert metric(srv, "sip_sequences_waiting", "seq_one") == 0
    wait_metric(srv, "sip_sequences_active", "seq_one", 0)


@pytest.mark.parametrize("params,text", [
    ({"sequence_id": 1.5}, "parameters.sequence_id is a number with a fraction; expected an integer in 0..2^63-1 or a string"),
    ({"sequence_id": -3}, "parameters.sequence_id is -3; expected an integer in 0..2^63-1"),
    ({"sequence_id": "x" * 257}, "parameters.sequence_id is a string of 257 bytes"),
    ({"sequence_id": 0}, "every request needs a sequence id"),  # 0: no sequence, as in Triton
    ({"sequence_id": "", "sequence_end": True}, "sequence_start/sequence_end need a sequence_id"),
    ({"sequence_id": 3, "sequence_start": "yes"}, "parameters.sequence_start is a string; expected true or false"),
    ({"sequence_id": 3, "sequence_end": 1}, "parameters.sequence_end is 1; expected true or false"),
    ({"sequence_start": True}, "sequence_start/sequence_end need a sequence_id"),
    ({}, "every request needs a sequence id"),
    ({"sequence_id": "abc", "sequence_start": True}, "expected a numeric sequence_id"),
])
def test_bad_parameters_http(srv, params, text):
    r = http_infer(srv, "seq", 1, **params)
    assert r.status == 400, r
    assert text in r.json()["error"], r.json()


def test_triton_conventions_http(srv):
    # sequence_id 0 means no sequence: fine on a pool without sequence_batching.
    r = K.infer(srv.http, "plain", x(1), params={"sequence_id": 0, "sequence_start": False})
    assert r.status == 200, r
    ext = K.get(srv.http + "/v2").json()["extensions"]
    assert "sequence" in ext and "sequence(string_id)" in ext


def test_bad_parameters_native(srv):
    with pytest.raises(InvalidArgumentError, match="every request needs a sequence id"):
        srv.c.infer(InferenceRequest("seq", x(1)))
    with pytest.raises(InvalidArgumentError, match="sequence_id must be"):
        srv.c.infer(InferenceRequest("seq", x(1), sequence_id=1.5))
    with pytest.raises(InvalidArgumentError, match="control input"):
        srv.c.infer(InferenceRequest("seq", dict(x(1), START=np.array([1], np.int32)),
                                     sequence_id=5, sequence_start=True))
    # Clients do not see the control inputs in the model's metadata; the
    # model config shows them as Triton does.
    meta = K.get(srv.http + "/v2/models/seq").json()
    assert [i["name"] for i in meta["inputs"]] == ["x"]
    cfg = K.get(srv.http + "/v2/models/seq/config").json()
    assert cfg["sequence_batching"]["max_sequence_idle_microseconds"] == LONG_IDLE_US
    assert cfg["sequence_batching"]["control_input"][0] == {
        "name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START"}]}
    assert [c["name"] for c in cfg["sequence_batching"]["control_input"]] == [
        "START", "END", "READY", "CORRID"]
    pools = {p["name"]: p for p in srv.c.pools()}
    assert pools["seq_one"]["sequence_batching"]["max_backlog"] == 1
    assert pools["seq"]["sequence_batching"]["control_inputs"]["corrid"] == "CORRID"
    srv.assert_alive()


def test_cli_sequence(srv):
    """sip infer --sequence ID --repeat N: one sequence of N requests."""
    import subprocess
    from harness import BUILD_DIR

    def cli(*args):
        r = subprocess.run([str(BUILD_DIR / "sip"), "-e", srv.endpoint, "infer", "seq",
                            "-i", "x:float32:1=5", "-o", "out", *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout

    before = session_inferences(srv, "seq")
    out = cli("--sequence", "900", "--repeat", "3")
    assert "115" in out, out  # the last request: END + READY + 5
    assert sorted(n - m for n, m in zip(session_inferences(srv, "seq"), before)) == [0, 3]
    assert "1115" in cli("--sequence", "900"), out  # START and END at once
    r = subprocess.run([str(BUILD_DIR / "sip"), "-e", srv.endpoint, "infer", "seq",
                        "-i", "x:float32:1=5"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "needs a sequence id" in r.stderr, r


def test_client_sequence_parameters():
    """cann_sip checks sequence parameters before sending (no server needed)."""
    from cann_sip.client import sequence_parameters
    assert sequence_parameters(None) == {}
    assert sequence_parameters(5, True) == {"sequence_id": 5, "sequence_start": True,
                                            "sequence_end": False}
    assert sequence_parameters("a", end=True)["sequence_id"] == "a"
    for bad in [(None, True), (0,), (True,), (2 ** 63,), ("",), ("x" * 257,), (1.5,),
                (3, 1), (3, False, "yes")]:
        with pytest.raises(InvalidArgumentError):
            sequence_parameters(*bad)


def test_bench_sequences(srv):
    """sip bench --sequence-length: closed-loop chains of sequences, no errors."""
    import json
    import subprocess
    from harness import BUILD_DIR
    before = sum(session_inferences(srv, "seq"))
    r = subprocess.run([str(BUILD_DIR / "sip"), "-e", srv.endpoint, "--json", "bench", "seq",
                        "-i", "x:float32:1=1", "--concurrency", "2", "--sequence-length", "5",
                        "--window-ms", "100", "--max-windows", "3"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["errors"] == 0 and out["requests"] > 0, out
    assert sum(session_inferences(srv, "seq")) - before >= out["requests"]
    # Chains finish their sequence before the bench stops: no slot stays taken.
    wait_metric(srv, "sip_sequences_active", "seq", 0)
    bad = subprocess.run([str(BUILD_DIR / "sip"), "-e", srv.endpoint, "bench", "seq",
                          "-i", "x:float32:1=1", "--rate", "10", "--sequence-length", "5"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--sequence-length needs" in bad.stderr


# ---------------------------------------------------------------------------
# gRPC: the same parameters (int64, uint64 or string sequence_id; bool
# start/end) on ModelInfer and on a ModelStreamInfer stream.

def grpc_seq_request(pb, model, v, sid=None, start=None, end=None, id=""):
    req = pb.pb.ModelInferRequest(model_name=model, id=id)
    req.inputs.add(name="x", datatype="FP32", shape=[1])
    req.raw_input_contents.append(np.array([v], np.float32).tobytes())
    if isinstance(sid, str):
        req.parameters["sequence_id"].string_param = sid
    elif sid is not None:
        req.parameters["sequence_id"].uint64_param = sid
    if start is not None:
        req.parameters["sequence_start"].bool_param = start
    if end is not None:
        req.parameters["sequence_end"].bool_param = end
    return req


def grpc_value(resp):
    outs = {t.name: (t, raw) for t, raw in zip(resp.outputs, resp.raw_output_contents)}
    out = float(np.frombuffer(outs["out"][1], np.float32)[0])
    t, raw = outs["corr"]
    corr = (raw[4:].decode() if t.datatype == "BYTES"
            else int(np.frombuffer(raw, np.uint64)[0]))
    return out, corr


def test_sequences_over_grpc(srv, pb):
    grpc = pytest.importorskip("grpc")
    with grpc.insecure_channel(srv.grpc) as ch:
        stub = pb.svc.GRPCInferenceServiceStub(ch)
        # ModelInfer: START, a middle request, END; the server fills the controls.
        r = stub.ModelInfer(grpc_seq_request(pb, "seq", 1, sid=4242, start=True), timeout=10)
        assert grpc_value(r) == (1011.0, 4242)
        r = stub.ModelInfer(grpc_seq_request(pb, "seq", 2, sid=4242), timeout=10)
        assert grpc_value(r) == (12.0, 4242)
        r = stub.ModelInfer(grpc_seq_request(pb, "seq", 3, sid=4242, end=True), timeout=10)
        assert grpc_value(r) == (113.0, 4242)
        wait_metric(srv, "sip_sequences_active", "seq", 0)
        # Ended: a later request without START is refused with the reason.
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelInfer(grpc_seq_request(pb, "seq", 4, sid=4242), timeout=10)
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "sequence 4242 is not active" in ei.value.details()
        # String ids.
        r = stub.ModelInfer(grpc_seq_request(pb, "seq_str", 5, sid="user-7", start=True,
                                             end=True), timeout=10)
        assert grpc_value(r) == (1115.0, "user-7")
        # Wrong types name the parameter.
        bad = grpc_seq_request(pb, "seq", 1, sid=9, start=True)
        bad.parameters["sequence_start"].string_param = "yes"
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelInfer(bad, timeout=10)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "parameters.sequence_start is a string; expected true or false" in ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            stub.ModelInfer(grpc_seq_request(pb, "seq", 1, start=True), timeout=10)
        assert "need a sequence_id" in ei.value.details()
        # A stream carrying one sequence: answers in order with the controls.
        reqs = [grpc_seq_request(pb, "seq", i, sid=77, start=i == 0, end=i == 4, id=str(i))
                for i in range(5)]
        got = [r for r in stub.ModelStreamInfer(iter(reqs), timeout=30)]
        assert [g.error_message for g in got] == [""] * 5
        vals = {g.infer_response.id: grpc_value(g.infer_response) for g in got}
        assert vals == {"0": (1010.0, 77), "1": (11.0, 77), "2": (12.0, 77), "3": (13.0, 77),
                        "4": (114.0, 77)}
