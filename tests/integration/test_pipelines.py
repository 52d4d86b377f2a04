"""Pipelines (pipeline_sessions): DAGs of model and transform stages on a real
sipd, checked against numpy: wiring, stage_outputs, conditions, early exit
(per pipeline and per request), parallel branches, stage timeouts, errors."""

import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import harness
from harness import wait_until as wait_for
import kserve as K
from cann_sip import protocol as P
from cann_sip import (DeadlineExceededError, InferenceRequest, InvalidArgumentError,
                      NotFoundError, UnavailableError)

F = np.float32


def unary(op_nodes, in_name, out_name, extra_inits=()):
    g = helper.make_graph(op_nodes, "g",
                          [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["N", 4])],
                          list(extra_inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def const(name, value):
    return helper.make_tensor(name, TensorProto.FLOAT, [1], [value])


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pl_models")
    plus1 = unary([helper.make_node("Add", ["x", "one"], ["y"])], "x", "y", [const("one", 1.0)])
    times2 = unary([helper.make_node("Mul", ["y", "two"], ["z"])], "y", "z", [const("two", 2.0)])
    neg = unary([helper.make_node("Neg", ["a"], ["b"])], "a", "b")
    for name, m in (("plus1", plus1), ("times2", times2), ("neg", neg)):
        onnx.save(m, str(d / (name + ".onnx")))
    return d


@pytest.fixture(scope="module")
def srv(sipd_bin, models_dir, tmp_path_factory):
    pools = [
        {"name": "plus1", "model_path": str(models_dir / "plus1.onnx")},
        {"name": "times2", "model_path": str(models_dir / "times2.onnx")},
        {"name": "slow_a", "backend": "builtin",
         "backend_options": {"shape": "-1,4", "delay_ms": 300}},
        {"name": "slow_b", "backend": "builtin",
         "backend_options": {"shape": "-1,4", "delay_ms": 300}},
        # One session, 400 ms an execution: a queue the tests can fill.
        {"name": "gate", "backend": "builtin",
         "backend_options": {"shape": "-1,4", "delay_ms": 400}},
        {"name": "after", "model_path": str(models_dir / "plus1.onnx")},
        {"name": "plus1b", "model_path": str(models_dir / "plus1.onnx"),
         "dynamic_batching": {"max_batch_size": 2}},
    ]
    pipelines = [
        {"name": "chain", "stages": [
            {"name": "first", "pool": "plus1"},
            {"name": "second", "pool": "times2"},
            {"name": "third", "model_path": str(models_dir / "neg.onnx"),
             "input_mapping": {"a": "second.z"}},
        ]},
        {"name": "gated", "early_exit_condition": "max(first.y) > 100", "stages": [
            {"name": "first", "pool": "plus1"},
            {"name": "second", "pool": "times2", "when": "sum(first.y) > 0"},
            {"name": "soft", "type": "transform", "operation": "softmax",
             "input_mapping": {"input": "first.y"}},
        ]},
        # A fast stage, then the slow gate: priority and deadline must reach
        # the second stage's queue.
        {"name": "to_gate", "stages": [
            {"name": "first", "pool": "plus1"},
            {"name": "slow", "pool": "gate", "input_mapping": {"input": "first.y"}},
        ]},
        {"name": "then_after", "stages": [
            {"name": "a", "pool": "slow_a", "input_mapping": {"input": "pipeline.input"}},
            {"name": "b", "pool": "after", "input_mapping": {"x": "a.output"}},
        ]},
        # N rows made by a transform reach a max_batch_size-2 pool.
        {"name": "fan", "stages": [
            {"name": "soft", "type": "transform", "operation": "softmax",
             "input_mapping": {"input": "pipeline.x"}},
            {"name": "inc", "pool": "plus1b", "input_mapping": {"x": "soft.output"}},
        ]},
        {"name": "fork", "stages": [
            {"name": "a", "pool": "slow_a", "input_mapping": {"input": "pipeline.input"}},
            {"name": "b", "pool": "slow_b", "input_mapping": {"input": "pipeline.input"}},
        ]},
    ]
    w = tmp_path_factory.mktemp("pl")
    s = harness.SipServer(w, pools, server={"http": "127.0.0.1:0"})
    cfg = s.config()
    cfg["pipeline_sessions"] = pipelines
    s.config = lambda: cfg
    s.start()
    try:
        s.http = K.http_base(s)
        yield s
    except BaseException:
        s.kill()
        raise
    assert s.stop() == 0, s.log_tail()


def test_chain_equals_numpy(srv):
    c = srv.client()
    x = np.arange(12, dtype=F).reshape(3, 4)
    r = c.infer(InferenceRequest("chain", {"x": x}))
    np.testing.assert_allclose(r.outputs["b"], -((x + 1) * 2))
    np.testing.assert_allclose(r.stage_outputs["first"]["y"], x + 1)
    np.testing.assert_allclose(r.stage_outputs["second"]["z"], (x + 1) * 2)
    assert set(r.stages) == {"first", "second", "third"}
    assert all(s["status"] == "ran" for s in r.stages.values())
    assert all(s["us"] >= 0 for s in r.stages.values())
    assert r.early_exit is None


def test_condition_skips_and_transform_runs(srv):
    c = srv.client()
    x = np.full((2, 4), -5, F)  # sum(first.y) < 0: second is skipped
    r = c.infer(InferenceRequest("gated", {"x": x}))
    assert r.stages["second"]["status"] == "skipped"
    assert "second" not in r.stage_outputs
    y = x + 1
    e = np.exp(y - y.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(r.stage_outputs["soft"]["output"], e / e.sum(-1, keepdims=True),
                               rtol=1e-5)
    x = np.ones((2, 4), F)
    r = c.infer(InferenceRequest("gated", {"x": x}))
    assert r.stages["second"]["status"] == "ran"
    np.testing.assert_allclose(r.stage_outputs["second"]["z"], (x + 1) * 2)


def test_early_exit_pipeline_and_request(srv):
    c = srv.client()
    r = c.infer(InferenceRequest("gated", {"x": np.full((1, 4), 500, F)}))
    assert r.early_exit == "first"
    assert r.stages["second"]["status"] == "not_reached"
    assert "second" not in r.stage_outputs and "first" in r.stage_outputs
    # Per request: exit after `first` whatever the data.
    r = c.infer(InferenceRequest("chain", {"x": np.ones((1, 4), F)},
                                 pipeline_config={"early_exit_condition": "len(first.y) >= 1"}))
    assert r.early_exit == "first"
    assert r.stages["second"]["status"] == "not_reached"
    assert r.stages["third"]["status"] == "not_reached"
    st = [p for p in c.status()["pipelines"] if p["name"] == "chain"][0]
    assert st["early_exits"] >= 1


def test_independent_branches_run_concurrently(srv):
    c = srv.client()
    t0 = time.monotonic()
    r = c.infer(InferenceRequest("fork", {"input": np.ones((1, 4), F)}))
    took = time.monotonic() - t0
    assert r.stages["a"]["status"] == r.stages["b"]["status"] == "ran"
    assert took < 0.55, took  # two 300 ms stages side by side, not one after the other


def test_stage_timeout_names_the_stage(srv):
    c = srv.client()
    with pytest.raises(DeadlineExceededError, match="stage 'a'"):
        c.infer(InferenceRequest("fork", {"input": np.ones((1, 4), F)},
                                 pipeline_config={"stage_timeout_ms": [100, 0]}))
    with pytest.raises(InvalidArgumentError, match="stage_timeout_ms"):
        c.infer(InferenceRequest("fork", {"input": np.ones((1, 4), F)},
                                 pipeline_config={"stage_timeout_ms": "fast"}))
    with pytest.raises(InvalidArgumentError, match="early_exit_condition"):
        c.infer(InferenceRequest("chain", {"x": np.ones((1, 4), F)},
                                 pipeline_config={"early_exit_condition": "len(nope.x) > 0"}))


def test_pipeline_input_errors(srv):
    c = srv.client()
    with pytest.raises(InvalidArgumentError, match="missing input 'x'"):
        c.infer(InferenceRequest("chain", {"q": np.ones((1, 4), F)}))
    with pytest.raises(InvalidArgumentError, match="input 'x' of pool 'plus1'"):
        c.infer(InferenceRequest("chain", {"x": np.ones((1, 3), F)}))
    with pytest.raises(NotFoundError):
        c.infer(InferenceRequest("no_such_pipeline", {"x": np.ones((1, 4), F)}))


def test_pipelines_in_pools_and_status(srv):
    c = srv.client()
    info = c.info(2)
    pl = {p["name"]: p for p in info["pipelines"]}
    assert pl["chain"]["state"] == "READY"
    # Typed like a pool's: from the stage that consumes or makes each one.
    assert pl["chain"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 4]}]
    assert pl["chain"]["outputs"] == [{"name": "b", "dtype": "float32", "shape": [-1, 4]}]
    # A transform's output has a dtype but any shape.
    assert pl["fan"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": None}]
    assert [s["name"] for s in pl["gated"]["stages"]] == ["first", "second", "soft"]
    status = {p["name"]: p for p in c.status()["pipelines"]}
    chain = {s["name"]: s for s in status["chain"]["stages"]}
    assert chain["first"]["ran"] >= 1


def check_config(tmp_path, text):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return subprocess.run([str(harness.SIPD), "--check-config", str(p)], capture_output=True,
                          text=True, timeout=30)


def test_config_errors(tmp_path):
    base = "session_pools:\n  - {name: p, backend: builtin}\npipeline_sessions:\n"
    r = check_config(tmp_path, base + "  - name: x\n    stages:\n"
                     "      - {name: a, pool: p, input_mapping: {input: b.output}}\n"
                     "      - {name: b, pool: p}\n")
    assert r.returncode == 1 and "bad.yaml:6:" in r.stderr and "no earlier stage" in r.stderr
    r = check_config(tmp_path, base + "  - name: x\n    stages:\n"
                     "      - {name: a, pool: p, when: 'len(a.output) >'}\n")
    assert r.returncode == 1 and "when" in r.stderr and "column" in r.stderr
    r = check_config(tmp_path, base + "  - name: x\n    stages:\n      - {name: a, pool: q}\n")
    assert r.returncode == 1 and "'q' is not a pool" in r.stderr
    r = check_config(tmp_path, base + "  - name: x\n    stages:\n"
                     "      - {name: a, type: transform, operation: softmax, axiz: 1}\n")
    assert r.returncode == 1 and "axiz" in r.stderr
    r = check_config(tmp_path, base + "  - name: p\n    stages:\n      - {name: a, pool: p}\n")
    assert r.returncode == 1 and "also the name of a pool" in r.stderr


def test_register_postprocess(srv):
    """Seed 003's client-side hook: fn(raw_outputs, config) replaces the outputs."""
    c = srv.client()
    calls = []

    def top1(outputs, config):
        calls.append(config)
        return {"best": np.argmax(outputs["b"], axis=-1) + config["offset"]}

    c.register_postprocess("chain", top1, {"offset": 100})
    x = np.array([[0, 5, 1, 2]], F)
    r = c.infer(InferenceRequest("chain", {"x": x}))
    np.testing.assert_array_equal(r.outputs["best"], np.argmax(-((x + 1) * 2), axis=-1) + 100)
    assert calls == [{"offset": 100}]
    # Other pools are untouched, and the hook can be removed.
    r = c.infer(InferenceRequest("plus1", {"x": x}))
    np.testing.assert_allclose(r.outputs["y"], x + 1)
    c.register_postprocess("chain", None)
    assert "b" in c.infer(InferenceRequest("chain", {"x": x})).outputs

    def broken(outputs, config):
        raise ValueError("bad hook")

    c.register_postprocess("plus1", broken)
    with pytest.raises(ValueError, match="bad hook"):
        c.infer(InferenceRequest("plus1", {"x": x}))
    c.register_postprocess("plus1", None)


def stats(c, pool):
    return [p for p in c.status()["pools"] if p["name"] == pool][0]


def running(c, pool):
    """The pool's one session is executing (active_sessions counts idle READY ones too)."""
    return stats(c, pool)["sessions"][0]["state"] == "RUNNING"


def test_priority_reaches_later_stages(srv):
    """The blocker holds the gate; low, medium and high pipeline requests
    pass `first` and queue at the gate, which takes them by priority."""
    c = srv.client()
    order, lock = [], threading.Lock()
    blocker = c.infer_async(InferenceRequest("to_gate", {"x": np.zeros((1, 4), F)},
                                             priority="low"))
    wait_for(lambda: running(c, "gate"), what="the blocker at the gate")
    futs = {}
    for i, name in enumerate(("low", "medium", "high")):
        x = np.full((1, 4), i, F)
        futs[name] = (x, c.infer_async(InferenceRequest("to_gate", {"x": x}, priority=name)))
        futs[name][1].add_done_callback(
            lambda _f, name=name: (lock.acquire(), order.append(name), lock.release()))
    wait_for(lambda: stats(c, "gate")["queued_requests"] == 3, what="three queued at the gate")
    blocker.result(timeout=10)
    for name, (x, f) in futs.items():
        np.testing.assert_allclose(f.result(timeout=10).outputs["output"], x + 1)
    assert order == ["high", "medium", "low"]


def test_deadline_reaches_later_stages(srv):
    """The request's deadline (not a stage timeout) expires while it waits at
    the second stage: DEADLINE_EXCEEDED, and the gate never runs it."""
    c = srv.client()
    before = stats(c, "gate")["stats"]["inference_count"]
    blocker = c.infer_async(InferenceRequest("to_gate", {"x": np.zeros((1, 4), F)}))
    wait_for(lambda: running(c, "gate"), what="the blocker at the gate")
    with pytest.raises(DeadlineExceededError):
        c.infer(InferenceRequest("to_gate", {"x": np.ones((1, 4), F)}, timeout_ms=200))
    blocker.result(timeout=10)
    # One more through the gate (one session, first come first served): it
    # runs after the expired request would have.
    c.infer(InferenceRequest("to_gate", {"x": np.ones((1, 4), F)}))
    assert stats(c, "gate")["stats"]["inference_count"] - before == 2
    assert stats(c, "gate")["requests"].get("DEADLINE_EXCEEDED", 0) >= 1


def test_disconnect_cancels_before_the_next_stage(srv):
    """A client that goes away while stage a runs: stage b never starts."""
    c = srv.client()
    after0 = stats(c, "after")["stats"]["inference_count"]
    a0 = stats(c, "slow_a")["stats"]["inference_count"]
    sock = harness.raw_connect(srv.unix_endpoint)
    try:
        payload = P.encode_infer_request("then_after", {"input": np.ones((1, 4), F)})
        sock.sendall(P.encode_frame(P.INFER_REQUEST, 1, payload))
        wait_for(lambda: running(c, "slow_a"), what="stage a running")
    finally:
        sock.close()
    wait_for(lambda: stats(c, "slow_a")["stats"]["inference_count"] == a0 + 1,
             what="stage a to end")
    wait_for(lambda: [p for p in c.status()["pipelines"] if p["name"] == "then_after"][0][
        "requests"].get("CANCELLED", 0) == 1, what="the pipeline request CANCELLED")
    # Connected clients still get both stages. Its stage b comes after a
    # wrongly started one of the cancelled request (one session each, first
    # come first served): once it is answered, that would have run.
    r = c.infer(InferenceRequest("then_after", {"input": np.ones((1, 4), F)}))
    np.testing.assert_allclose(r.outputs["y"], np.full((1, 4), 2, F))
    assert stats(c, "after")["stats"]["inference_count"] == after0 + 1


def test_fan_out_in_max_batch_size_chunks(srv):
    """Five rows made by a transform go to a pool with max_batch_size 2 as
    chunks of 2, 2 and 1, and come back in their rows' order."""
    c = srv.client()
    before = stats(c, "plus1b")
    x = np.arange(20, dtype=F).reshape(5, 4) * np.array([1, -1, 0.5, 2], F)
    r = c.infer(InferenceRequest("fan", {"x": x}))
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(r.outputs["y"], e / e.sum(-1, keepdims=True) + 1, rtol=1e-5)
    after = stats(c, "plus1b")
    assert after["stats"]["execution_count"] - before["stats"]["execution_count"] == 3
    assert after["batch_sizes"]["sum"] - before["batch_sizes"]["sum"] == 5


def test_pipelines_over_kserve_http(srv):
    """A pipeline is a model to KServe v2 clients: metadata (platform
    "ensemble"), readiness, config with one step per stage, infer with JSON
    or binary tensors, statistics; it has no versions."""
    base = srv.http
    r = K.get(base + "/v2/models/chain")
    assert r.status == 200, r
    assert r.json() == {"name": "chain", "versions": [], "platform": "ensemble",
                        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
                        "outputs": [{"name": "b", "datatype": "FP32", "shape": [-1, 4]}]}
    assert K.get(base + "/v2/models/chain/ready").status == 200
    cfg = K.get(base + "/v2/models/gated/config").json()
    assert cfg["platform"] == "ensemble"
    assert cfg["ensemble_scheduling"]["step"] == [
        {"stage": "first", "model_name": "plus1", "model_version": -1},
        {"stage": "second", "model_name": "times2", "model_version": -1},
        {"stage": "soft", "transform": "softmax"}]
    x = np.arange(8, dtype=F).reshape(2, 4)
    for binary in ((), ("x",)):
        r = K.infer(base, "chain", {"x": x}, outputs=["b"], binary_inputs=binary)
        assert r.status == 200, r
        doc, out = K.decode_outputs(r)
        assert [o["name"] for o in doc["outputs"]] == ["b"]
        np.testing.assert_allclose(out["b"], -((x + 1) * 2))
    # Without an outputs list, every stage's outputs come too, as <stage>/<output>.
    doc, out = K.decode_outputs(K.infer(base, "chain", {"x": x}))
    np.testing.assert_allclose(out["first/y"], x + 1)
    # A raw binary body: the pipeline's one input, shaped by its metadata.
    r = K.request("POST", base + "/v2/models/chain/infer", body=x.tobytes(),
                  headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    doc, out = K.decode_outputs(r)
    np.testing.assert_allclose(out["b"], -((x + 1) * 2))
    st = K.get(base + "/v2/models/chain/stats").json()["model_stats"]
    assert [m["name"] for m in st] == ["chain"]
    ok = st[0]["inference_stats"]["success"]
    assert ok["count"] >= 4 and ok["ns"] > 0
    # As Triton counts: inference and execution counts are successful requests.
    assert ok["count"] == st[0]["inference_count"] == st[0]["execution_count"]
    for path in ("", "/ready", "/stats"):
        r = K.get(base + "/v2/models/chain/versions/1" + path)
        assert r.status == 404 and "is a pipeline and has no version '1'" in r.json()["error"]
    # Inference with a version is refused the same way, not run unversioned.
    r = K.infer(base, "chain", {"x": x}, version="1")
    assert r.status == 404 and "is a pipeline and has no version '1'" in r.json()["error"]
    with pytest.raises(NotFoundError, match="is a pipeline and has no version '1'"):
        srv.client().infer(InferenceRequest("chain:1", {"x": x}))
    assert K.get(base + "/v2/models/nope").status == 404


def test_pipeline_metrics(srv):
    """/metrics has each pipeline's requests by code, early exits and each
    stage's outcomes; the counters move by exactly what the requests did."""
    parser = pytest.importorskip("prometheus_client.parser")

    def scrape():
        text = K.get(srv.http + "/metrics").body.decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for fam in parser.text_string_to_metric_families(text) for s in fam.samples}

    def val(m, name, **labels):
        return m.get((name, tuple(sorted(labels.items()))), 0)

    c = srv.client()
    before = scrape()
    c.infer(InferenceRequest("gated", {"x": np.full((1, 4), -5, F)}))   # second skipped
    c.infer(InferenceRequest("gated", {"x": np.full((1, 4), 500, F)}))  # exits after first
    c.infer(InferenceRequest("gated", {"x": np.ones((1, 4), F)}))       # all three run
    with pytest.raises(InvalidArgumentError):
        c.infer(InferenceRequest("gated", {"x": np.ones((1, 3), F)}))
    after = scrape()

    def moved(name, **labels):
        return val(after, name, **labels) - val(before, name, **labels)

    assert moved("sip_pipeline_requests_total", pipeline="gated", code="OK") == 3
    assert moved("sip_pipeline_requests_total", pipeline="gated", code="INVALID_ARGUMENT") == 1
    assert moved("sip_pipeline_early_exits_total", pipeline="gated") == 1
    assert moved("sip_pipeline_stage_runs_total", pipeline="gated", stage="second",
                 outcome="ran") == 1
    # Not run: its condition was false, the request exited early, or `first` failed.
    assert moved("sip_pipeline_stage_runs_total", pipeline="gated", stage="second",
                 outcome="skipped") == 3
    assert moved("sip_pipeline_stage_runs_total", pipeline="gated", stage="first",
                 outcome="failed") == 1
    assert moved("sip_pipeline_stage_duration_us_total", pipeline="gated", stage="first") > 0
    assert moved("sip_pipeline_request_duration_us_total", pipeline="gated") > 0


def test_cli_lists_pipelines(srv):
    r = subprocess.run([str(harness.BUILD_DIR / "sip"), "-e", srv.endpoint, "pools"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = lines.index("gated  state=READY pipeline stages=first(plus1),second(times2),soft(softmax)")
    assert lines[i + 1].split() == ["input", "x", "float32", "[-1,", "4]"]
    # The sinks' outputs: times2's z, and softmax's output of any shape.
    assert lines[i + 2].split() == ["output", "z", "float32", "[-1,", "4]"]
    assert lines[i + 3].split() == ["output", "output", "float32", "(any)"]


def test_pipeline_while_its_pools_load(sipd_bin, tmp_path):
    """Before the pools have loaded, a pipeline request is UNAVAILABLE
    (still loading), not an unknown name; afterwards it runs."""
    srv = harness.SipServer(tmp_path, [{"name": "slow_load", "backend": "builtin",
                                        "backend_options": {"shape": "-1,4",
                                                            "load_delay_ms": 1500}}])
    cfg = srv.config()
    cfg["pipeline_sessions"] = [{"name": "later", "stages": [{"name": "a", "pool": "slow_load"}]}]
    srv.config = lambda: cfg
    srv.start(until_ready=False)
    try:
        c = srv.client(timeout_s=10)
        assert c.ready() is False
        with pytest.raises(UnavailableError, match="pipeline 'later' is not ready: the server is "
                                                   "still loading"):
            c.infer(InferenceRequest("later", {"input": np.ones((1, 4), F)}))
        wait_for(c.ready, what="sipd to become ready")
        r = c.infer(InferenceRequest("later", {"input": np.ones((1, 4), F)}))
        np.testing.assert_array_equal(r.outputs["output"], np.ones((1, 4), F))
    finally:
        assert srv.stop() == 0, srv.log_tail()
