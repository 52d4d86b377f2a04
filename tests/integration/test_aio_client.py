"""The asyncio client (cann_sip.aio) against a real sipd: concurrent infers
gathered on one connection and checked against numpy, answers out of order,
batch requests, a sequence, errors mapped to their classes, events (an
async iterator and callbacks), timeouts and cancellation, a connection that
drops under waiting calls, and close."""

import asyncio
import shutil
import socket

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper

import models
from cann_sip import (BatchInferenceRequest, CancelledError, DeadlineExceededError,
                      InferenceRequest, InvalidArgumentError, NotFoundError, SessionCallback,
                      SessionEvent, UnauthenticatedError, UnavailableError, protocol as P)
from cann_sip.aio import SessionClient
from harness import serve, short_tmpdir, wait_until

F = np.float32
BOUND_S = 20.0  # the longest any wait on the server may take (a loaded 2-core machine)
SLOW_MS = 1500  # the slow pool's execution time


def seq_model():
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
         V("READY", T.INT32, [1]), V("CORRID", T.UINT64, [1])],
        [V("out", T.FLOAT, [1]), V("corr", T.UINT64, [1])],
        initializer=[k("k1000", 1000.0), k("k100", 100.0), k("k10", 10.0)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def srv(tmp_path_factory, model_dir):
    root = tmp_path_factory.mktemp("aio")
    seq = root / "seq.onnx"
    onnx.save(seq_model(), str(seq))
    pools = [
        {"name": "addmul", "model_path": str(model_dir["addmul"]), "pool_size": 2,
         "dynamic_batching": {"max_batch_size": 4}},
        {"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,3"}},
        {"name": "slow", "backend": "builtin", "backend_options": {"delay_ms": SLOW_MS}},
        {"name": "seq", "model_path": str(seq), "pool_size": 1,
         "sequence_batching": {"idle_timeout_us": 10_000_000,
                               "control_inputs": {"start": "START", "end": "END",
                                                  "ready": "READY", "corrid": "CORRID"}}},
    ]
    with serve(root, pools) as server:
        yield server


def run(coro):
    """Runs a test's coroutine with a bound: a hang fails the test."""
    return asyncio.run(asyncio.wait_for(coro, 3 * BOUND_S))


def executions(srv, pool):
    return srv.pool_status(pool)["stats"]["execution_count"]


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_concurrent_infers_match_numpy(srv, transport):
    endpoint = srv.unix_endpoint if transport == "unix" else srv.tcp_endpoint
    rng = np.random.default_rng(11)
    inputs = [(rng.standard_normal((1 + i % 3, 4)).astype(F),
               rng.standard_normal((1 + i % 3, 4)).astype(F)) for i in range(48)]

    async def main():
        async with SessionClient(endpoint, timeout_s=BOUND_S) as c:
            rs = await asyncio.gather(*(
                c.infer(InferenceRequest("addmul", {"lhs": lhs, "rhs": rhs}))
                for lhs, rhs in inputs))
            assert len(c._conn.pending) == 0
            return rs

    rs = run(main())
    assert len({r.request_id for r in rs}) == len(inputs)
    for r, (lhs, rhs) in zip(rs, inputs):
        np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(lhs, rhs), rtol=1e-6)
        assert r.latency_ms > 0 and r.session_pool == "addmul"
        assert set(r.timings) == {"queue_us", "compute_us", "total_us"}


def test_answers_come_back_in_any_order(srv):
    """A fast request sent after a slow one on the same connection is answered first."""
    async def main():
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S) as c:
            slow = asyncio.ensure_future(c.infer(InferenceRequest(
                "slow", {"input": np.array([7], F)})))
            fast = await c.infer(InferenceRequest("echo", {"input": np.ones((2, 3), F)}))
            assert not slow.done(), "the fast answer waited for the slow one"
            np.testing.assert_array_equal(fast.outputs["output"], np.ones((2, 3), F))
            np.testing.assert_array_equal((await slow).outputs["output"], [7])

    run(main())


def test_batch_infer(srv):
    rng = np.random.default_rng(3)
    items = [{"lhs": rng.standard_normal((1, 4)).astype(F),
              "rhs": rng.standard_normal((1, 4)).astype(F)} for _ in range(7)]

    async def main():
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S) as c:
            r = await c.batch_infer(BatchInferenceRequest(
                "addmul", items, batch_config={"max_batch_size": 3,
                                               "padding_strategy": "zero"}))
            rows = await c.batch_infer(BatchInferenceRequest(
                "echo", [np.full(3, i, F) for i in range(5)], batch_config={"max_batch_size": 2}))
            with pytest.raises(NotFoundError):
                await c.batch_infer(BatchInferenceRequest("nope", [np.ones(3, F)]))
            return r, rows

    r, rows = run(main())
    lhs = np.concatenate([i["lhs"] for i in items])
    rhs = np.concatenate([i["rhs"] for i in items])
    np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(lhs, rhs), rtol=1e-6)
    assert len(r.batch_outputs) == 7
    for i, item in enumerate(items):
        np.testing.assert_allclose(r.outputs[i]["y"], models.addmul_ref(item["lhs"], item["rhs"]),
                                   rtol=1e-6)
    np.testing.assert_array_equal(rows.outputs["output"], np.stack([np.full(3, i, F)
                                                                    for i in range(5)]))


def test_sequence(srv):
    async def main():
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S) as c:
            seq = c.sequence("seq", 42)
            a = await seq.infer({"x": np.array([1], F)})
            assert seq.started
            b = await seq.infer({"x": np.array([2], F)})
            e = await seq.end({"x": np.array([3], F)})
            assert not seq.started
            again = await seq.infer({"x": np.array([4], F)})  # starts it again
            await seq.end({"x": np.array([5], F)})
            return a, b, e, again

    a, b, e, again = run(main())
    assert a.outputs["out"].tolist() == [1011.0]   # START + READY + x
    assert b.outputs["out"].tolist() == [12.0]     # READY + x
    assert e.outputs["out"].tolist() == [113.0]    # END + READY + x
    assert again.outputs["out"].tolist() == [1014.0]
    assert a.outputs["corr"].tolist() == [42]


def test_errors_map_to_their_classes(srv):
    async def main():
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S) as c:
            with pytest.raises(NotFoundError, match="nope"):
                await c.infer(InferenceRequest("nope", {"input": np.ones((1, 3), F)}))
            with pytest.raises(InvalidArgumentError) as ei:
                await c.infer(InferenceRequest("echo", {"input": np.ones((1, 5), F)},
                                               request_id=77))
            assert ei.value.code == "INVALID_ARGUMENT" and ei.value.request_id == 77
            with pytest.raises(InvalidArgumentError, match="sequence_id"):
                await c.infer(InferenceRequest("seq", {"x": np.ones(1, F)}, sequence_id=0))
            with pytest.raises(InvalidArgumentError, match="InferenceRequest"):
                await c.infer({"input": np.ones(3, F)})
            # A request error leaves the connection serving.
            conn = c._conn
            r = await c.infer(InferenceRequest("echo", {"input": np.ones((1, 3), F)}))
            assert c._conn is conn and r.outputs["output"].shape == (1, 3)

    run(main())


def test_timeout_and_cancellation(srv):
    """A call past timeout_s raises DeadlineExceededError and a cancelled one
    raises asyncio.CancelledError; neither leaves anything pending, the
    connection keeps serving, and the late answers are dropped."""
    before = executions(srv, "slow")

    async def main():
        async with SessionClient(srv.endpoint, timeout_s=0.2) as c:
            with pytest.raises(DeadlineExceededError, match="within 0.2 s"):
                await c.infer(InferenceRequest("slow", {"input": np.array([1], F)}))
            assert c._conn.pending == {}
            c.timeout_s = BOUND_S
            task = asyncio.ensure_future(c.infer(InferenceRequest(
                "slow", {"input": np.array([2], F)}, request_id=900)))
            while not c._conn.pending:  # sent: its answer is awaited
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert c._conn.pending == {}
            # wait_for cancels the same way.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(c.infer(InferenceRequest(
                    "slow", {"input": np.array([3], F)})), 0.05)
            assert c._conn.pending == {}
            conn = c._conn
            # The three slow requests finish on the server; their answers are dropped.
            await asyncio.get_running_loop().run_in_executor(None, lambda: wait_until(
                lambda: executions(srv, "slow") >= before + 3, BOUND_S,
                "the slow pool ran the 3 abandoned requests"))
            r = await c.infer(InferenceRequest("echo", {"input": np.full((1, 3), 5, F)}))
            np.testing.assert_array_equal(r.outputs["output"], np.full((1, 3), 5, F))
            assert c._conn is conn

    run(main())


def test_idempotent_request(srv):
    async def main():
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S) as c:
            req = InferenceRequest("echo", {"input": np.ones((1, 3), F)},
                                   idempotency_key="aio-key-1")
            first = await c.infer(req)
            second = await c.infer(req)
            return first, second

    first, second = run(main())
    np.testing.assert_array_equal(first.outputs["output"], np.ones((1, 3), F))
    np.testing.assert_array_equal(second.outputs["output"], np.ones((1, 3), F))


class Collector(SessionCallback):
    """Keeps every event; its on_event is a coroutine (the client awaits it)."""

    def __init__(self):
        self.events = []
        self.changed = asyncio.Event()

    async def on_event(self, session_id, event, context):
        self.events.append((session_id, event, context))
        self.changed.set()

    async def wait_for(self, pred):
        while True:
            found = [e for e in self.events if pred(*e)]
            if found:
                return found[0]
            self.changed.clear()
            await self.changed.wait()


def completes(rid):
    return lambda session_id, event, ctx: (event == SessionEvent.INFERENCE_COMPLETE
                                           and ctx["request_id"] == rid)


def test_events(srv):
    async def main():
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S) as c:
            sub = await c.subscribe("echo")
            cb, every = Collector(), Collector()
            await c.register_callbacks("echo", cb)
            await c.register_callbacks(None, every)  # every pool
            await c.infer(InferenceRequest("echo", {"input": np.ones((1, 3), F)},
                                           request_id=4242))
            await c.infer(InferenceRequest("addmul", {"lhs": np.ones((1, 4), F),
                                                      "rhs": np.ones((1, 4), F)},
                                           request_id=4243))
            # The iterator sees the request's events, in order.
            seen = []
            async for session_id, event, ctx in sub:
                assert ctx["pool"] == "echo"
                seen.append(event)
                if completes(4242)(session_id, event, ctx):
                    assert session_id.startswith("echo/") and ctx["latency_ms"] >= 0
                    break
            assert SessionEvent.STATE_CHANGE in seen and sub.dropped == 0
            # The callbacks get them too: the pool's only its own.
            session_id, _, _ = await asyncio.wait_for(cb.wait_for(completes(4242)), BOUND_S)
            assert session_id.startswith("echo/")
            await asyncio.wait_for(every.wait_for(completes(4243)), BOUND_S)
            assert not [e for e in cb.events if e[2]["pool"] != "echo"]
            await c.unregister_callbacks("echo", cb)
            await c.unregister_callbacks(None)
            assert c._subs == {}
            await sub.close()
            assert await sub.get() is None  # a closed stream ends

    run(main())


def test_calls_fail_when_the_connection_drops():
    """A server that closes the connection with calls waiting: they fail with
    UnavailableError, and the next call opens a new connection."""
    d = short_tmpdir()
    path = d + "/fake.sock"

    async def main():
        accepted = []
        got_request = asyncio.Event()

        async def serve_once(reader, writer):
            accepted.append(writer)
            await reader.readexactly(P.HEADER_SIZE)
            got_request.set()
            if len(accepted) == 1:
                writer.close()  # the first connection: dropped with the call waiting

        server = await asyncio.start_unix_server(serve_once, path)
        try:
            async with SessionClient("ipc://" + path, timeout_s=BOUND_S) as c:
                call = asyncio.ensure_future(c.info(P.INFO_READY))
                with pytest.raises(UnavailableError, match="closed by the server"):
                    await call
                got_request.clear()
                call = asyncio.ensure_future(c.info(P.INFO_READY))
                await asyncio.wait_for(got_request.wait(), BOUND_S)
                assert len(accepted) == 2  # a new connection
                await c.close()
                with pytest.raises(CancelledError, match="client closed"):
                    await call
                with pytest.raises(UnavailableError, match="closed"):
                    await c.info(P.INFO_READY)
        finally:
            for w in accepted:
                w.close()
            server.close()
            await server.wait_closed()

    try:
        run(main())
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_unreachable_server():
    d = short_tmpdir()

    async def main():
        c = SessionClient("ipc://%s/none.sock" % d, timeout_s=1)
        with pytest.raises(UnavailableError, match="cannot connect"):
            await c.infer(InferenceRequest("echo", {"input": np.ones((1, 3), F)}))
        assert await c.ready() is False
        await c.close()
        with pytest.raises(InvalidArgumentError, match="tcp://host:port"):
            SessionClient("tcp://nowhere", timeout_s=1)

    try:
        run(main())
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_introspection(srv):
    async def main():
        async with SessionClient(srv.tcp_endpoint, timeout_s=BOUND_S) as c:
            assert await c.ready()
            names = {p["name"] for p in await c.pools()}
            status = await c.status()
            return names, status

    names, status = run(main())
    assert {"addmul", "echo", "slow", "seq"} <= names
    assert {p["name"] for p in status["pools"]} >= names


def test_socket_errors_are_not_leaked_as_oserror(srv):
    """A TCP port nothing listens on: UnavailableError, not ConnectionRefusedError."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()

    async def main():
        async with SessionClient("tcp://127.0.0.1:%d" % port, timeout_s=1) as c:
            with pytest.raises(UnavailableError, match="cannot connect"):
                await c.status()

    run(main())


def test_tokens(start_sipd):
    """server.auth: the token goes first on every connection (and on a
    subscription's); a request the server refuses with an ERROR frame fails
    with its class, and the next call reconnects with the token."""
    inf, met = "inference-token-aio-1", "metrics-token-aio-2"
    srv = start_sipd([{"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,3"}}],
                     server={"auth": {"inference_tokens": [inf], "metrics_tokens": [met]}})
    x = np.arange(6, dtype=F).reshape(2, 3)

    async def main():
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S) as anon:
            assert await anon.ready()  # readiness stays open
            with pytest.raises(UnauthenticatedError, match="AUTH"):
                await anon.infer(InferenceRequest("echo", {"input": x}))
            with pytest.raises(UnauthenticatedError):
                await anon.subscribe("echo")
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S, token="wrong-token") as bad:
            with pytest.raises(UnauthenticatedError, match="not valid"):
                await bad.ready()
        async with SessionClient(srv.tcp_endpoint, timeout_s=BOUND_S, token=inf) as c:
            r = await c.infer(InferenceRequest("echo", {"input": x}))
            np.testing.assert_array_equal(r.outputs["output"], x)
            with pytest.raises(UnauthenticatedError):
                await c.status()  # the metrics group: the server closes the connection
            r = await c.infer(InferenceRequest("echo", {"input": x}))
            np.testing.assert_array_equal(r.outputs["output"], x)
        async with SessionClient(srv.endpoint, timeout_s=BOUND_S, token=met) as m:
            sub = await m.subscribe("echo")
            assert sub.error is None
            assert any(p["name"] == "echo" for p in (await m.status())["pools"])

    run(main())
