"""Pipelines that fail to build, on a real sipd.

A pipeline the builder cannot wire (src/pipeline/pipeline.c: build_one,
resolve_ref and what follows them) is FAILED with a reason while everything
else serves. Once, a FAILED pipeline crashed sipd on the next introspection
call; so for every error the builder can return, a sipd serving that
pipeline next to a working pool and a working pipeline is asked everything
there is to ask: the native client's pools()/status()/info(), `sip status`,
`sip pools` and `sip infer`, KServe model metadata / ready / config / stats,
/metrics and MetricsCollector. Through it all sipd stays up, the pipeline is
FAILED with a reason naming the stage and the bad name, requests to it are
UNAVAILABLE with that reason, and the working pool and pipeline answer
numpy's numbers.

Errors that the config parser already catches at startup (references to
unknown or later stages, malformed conditions, unknown transforms or
options...) never reach the builder: for those sipd must refuse the config
with file:line:column and a message naming the problem.

Also here: output_filter keeps only the outputs it lists.
"""

import contextlib
import copy
import json
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import harness
import kserve as K
import models
from cann_sip import (InferenceRequest, InvalidArgumentError, MetricsCollector,
                      UnavailableError)
from cann_sip import protocol as P

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

F = np.float32
SIP = harness.BUILD_DIR / "sip"
X = np.arange(8, dtype=F).reshape(2, 4) - 3  # negatives too: x*x and x+x differ in sign

# The working pool and pipeline every server has beside the broken one.
ECHO = {"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,4"}}
GOOD = {"name": "good", "stages": [
    {"name": "sq", "pool": "two"},                                # x -> sum = x+x, prod = x*x
    {"name": "e", "pool": "echo", "input_mapping": {"input": "sq.prod"}},
]}


# ---------------------------------------------------------------------------
# models and servers

def wide_model(n):
    """n inputs i0..i{n-1}; y = i0 (the others are unused)."""
    f = TensorProto.FLOAT
    g = helper.make_graph(
        [helper.make_node("Identity", ["i0"], ["y"])], "wide",
        [helper.make_tensor_value_info("i%d" % i, f, ["N", 4]) for i in range(n)],
        [helper.make_tensor_value_info("y", f, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", models.OPSET)])
    m.ir_version = models.IR_VERSION
    return m


@pytest.fixture(scope="module")
def mdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pbe_models")
    onnx.save(models.two_out(), str(d / "two.onnx"))
    onnx.save(models.addmul(), str(d / "addmul.onnx"))
    onnx.save(wide_model(65), str(d / "wide65.onnx"))
    models.write_corrupt(d / "corrupt.onnx")
    (d / "empty_repo").mkdir()
    return d


def base_pools(mdir):
    return [ECHO, {"name": "two", "model_path": str(mdir / "two.onnx")}]


class PipelineServer(harness.SipServer):
    """A SipServer whose config also has pipeline_sessions."""

    def __init__(self, workdir, pools, pipelines, **kw):
        super().__init__(workdir, pools, **kw)
        self.pipelines = pipelines

    def config(self):
        cfg = super().config()
        cfg["pipeline_sessions"] = self.pipelines
        return cfg


@contextlib.contextmanager
def serving(workdir, pools, pipelines, server=None):
    """A ready sipd with HTTP on; SIGTERM at the end must exit 0."""
    opts = {"http": "127.0.0.1:0"}
    opts.update(server or {})
    srv = PipelineServer(workdir, pools, pipelines, server=opts)
    srv.start()
    try:
        srv.http = K.http_base(srv)
        yield srv
    except BaseException:
        srv.kill()
        raise
    rc = srv.stop()
    assert rc == 0, "sipd exited with %s after SIGTERM:\n%s" % (rc, srv.log_tail())


def sip_cli(srv, *args):
    return subprocess.run([str(SIP), "-e", srv.endpoint, *args], capture_output=True, text=True,
                          timeout=30)


def metrics(base):
    r = K.get(base + "/metrics")
    assert r.status == 200 and r.headers["content-type"].startswith("text/plain"), r
    out = {}
    for fam in text_string_to_metric_families(r.body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def http_error(reply, status):
    assert reply.status == status, reply
    doc = reply.json()
    assert list(doc) == ["error"] and doc["error"], doc
    return doc["error"]


def by_name(entries):
    return {e["name"]: e for e in entries}


# ---------------------------------------------------------------------------
# every error the builder returns, one broken pipeline each

# A stage after the one that fails: introspection reads every stage's config,
# built or not (the crash this file guards against was one never assigned).
AFTER = {"name": "after", "pool": "echo", "input_mapping": {"input": "pipeline.x"}}


def chain(n):
    return [{"name": "s%d" % i, "pool": "echo"} for i in range(n)]


# id, the broken pipeline's stages and keys, extra pools, server options,
# fragments its reason must contain (the stage and the bad name first).
BUILD_ERRORS = [
    # A stage's pool does not exist. The parser refuses that outright unless
    # a model repository could still provide the pool, so it needs one.
    pytest.param({"stages": [{"name": "a", "pool": "ghost"}, AFTER]}, [],
                 lambda d: {"model_repository": str(d / "empty_repo")},
                 ["stage 'a'", "'ghost'", "no pool named"], id="pool_missing_with_repository"),
    pytest.param({"stages": [{"name": "a", "pool": "rotten"}, AFTER]},
                 [{"name": "rotten", "backend": "builtin", "backend_options": {"dtype": "nope"}}],
                 None, ["stage 'a'", "'rotten'", "is FAILED", "dtype"], id="pool_failed"),
    # model_path: the stage's implicit pool "<pipeline>.<stage>" fails to load.
    pytest.param({"stages": [{"name": "a", "model_path": "corrupt.onnx"}, AFTER]}, [], None,
                 ["stage 'a'", "'broken.a'", "is FAILED"], id="implicit_pool_failed"),
    pytest.param({"stages": [{"name": "a", "pool": "two", "output_filter": ["sum", "nope"]},
                             AFTER]},
                 [], None, ["stage 'a'", "'nope'", "output_filter", "does not produce"],
                 id="output_filter_unknown"),
    pytest.param({"stages": [{"name": "t", "type": "transform", "operation": "softmax",
                              "output_filter": ["probs"]}, AFTER]},
                 [], None, ["stage 't'", "'probs'", "output_filter", "does not produce"],
                 id="output_filter_unknown_transform"),
    pytest.param({"stages": [{"name": "a", "pool": "two", "input_mapping": {"q": "pipeline.x"}},
                             AFTER]},
                 [], None, ["stage 'a'", "'q'", "not an input of the stage"],
                 id="input_mapping_not_an_input"),
    pytest.param({"stages": [{"name": "a", "pool": "two"},
                             {"name": "b", "pool": "echo", "input_mapping": {"input": "a.nope"}}]},
                 [], None, ["stage 'b'", "stage 'a'", "no output 'nope'", "'sum', 'prod'"],
                 id="input_mapping_unknown_output"),
    pytest.param({"stages": [{"name": "a", "pool": "two", "output_filter": ["sum"]},
                             {"name": "b", "pool": "echo", "input_mapping": {"input": "a.prod"}}]},
                 [], None, ["stage 'b'", "stage 'a'", "no output 'prod'", "it keeps: 'sum')"],
                 id="input_mapping_filtered_output"),
    # Default wiring: addmul's second input (rhs) has no output of the
    # previous stage to take, neither by name nor by position.
    pytest.param({"stages": [{"name": "a", "pool": "echo"}, {"name": "b", "pool": "addmul"}]},
                 [{"name": "addmul", "model_path": "addmul.onnx"}], None,
                 ["stage 'b'", "input 'rhs'", "previous stage 'a'", "add an input_mapping"],
                 id="previous_stage_no_output"),
    pytest.param({"stages": [{"name": "a", "pool": "two", "output_filter": ["sum"]},
                             {"name": "b", "pool": "addmul"}]},
                 [{"name": "addmul", "model_path": "addmul.onnx"}], None,
                 ["stage 'b'", "input 'rhs'", "previous stage 'a'", "name or position"],
                 id="previous_stage_output_filtered"),
    pytest.param({"stages": [{"name": "a", "pool": "echo"},
                             {"name": "b", "pool": "echo", "when": "len(a.nope) > 0",
                              "input_mapping": {"input": "a.output"}}]},
                 [], None, ["stage 'b' when", "stage 'a'", "no output 'nope'"],
                 id="when_unknown_output"),
    pytest.param({"stages": [{"name": "a", "pool": "two", "output_filter": ["sum"]},
                             {"name": "b", "pool": "echo", "when": "max(a.prod) > 0",
                              "input_mapping": {"input": "a.sum"}}]},
                 [], None, ["stage 'b' when", "stage 'a'", "no output 'prod'"],
                 id="when_filtered_output"),
    pytest.param({"stages": [{"name": "a", "pool": "two"}], "outputs": ["a.sum", "a.nope"]},
                 [], None, ["outputs", "stage 'a'", "no output 'nope'"],
                 id="outputs_unknown_output"),
    pytest.param({"stages": chain(65)}, [], None, ["65 stages", "at most 64"],
                 id="too_many_stages"),
    pytest.param({"stages": [{"name": "a", "pool": "wide"}, AFTER]},
                 [{"name": "wide", "model_path": "wide65.onnx"}], None,
                 ["stage 'a'", "65 inputs", "at most 64"], id="too_many_stage_inputs"),
    # The early-exit condition's references are resolved like when:'s.
    pytest.param({"early_exit_condition": "len(a.nope) == 0",
                  "stages": [{"name": "a", "pool": "echo"}]},
                 [], None, ["early_exit_condition", "stage 'a'", "'nope'"],
                 id="early_exit_unknown_output"),
]


def resolve(mdir, pools):
    out = []
    for p in pools:
        p = dict(p)
        if "model_path" in p:
            p["model_path"] = str(mdir / p["model_path"])
        out.append(p)
    return out


@pytest.mark.parametrize("spec,extra_pools,server,reason", BUILD_ERRORS)
def test_failed_pipeline_is_reported_and_everything_else_serves(
        sipd_bin, mdir, tmp_path, spec, extra_pools, server, reason):
    broken = dict(copy.deepcopy(spec), name="broken")
    for st in broken["stages"]:
        if "model_path" in st:
            st["model_path"] = str(mdir / st["model_path"])
    pools = base_pools(mdir) + resolve(mdir, extra_pools)
    # Past MAX_STAGES the builder refuses the pipeline before wiring any stage.
    stages = [st["name"] for st in broken["stages"]] if len(broken["stages"]) <= 64 else []
    with serving(tmp_path, pools, [GOOD, broken], server=server(mdir) if server else None) as srv:
        check_everything(srv, reason, stages)


def assert_reason(text, reason):
    for frag in reason:
        assert frag in text, "%r not in the reason: %s" % (frag, text)


def check_everything(srv, reason, stages):
    c = srv.client()
    x = X

    # --- native introspection
    pools = by_name(c.pools())
    assert pools["echo"]["state"] == "READY" and pools["two"]["state"] == "READY"
    info = c.info(P.INFO_POOLS)
    pls = by_name(info["pipelines"])
    assert pls["good"]["state"] == "READY" and pls["good"]["error"] is None
    assert pls["broken"]["state"] == "FAILED", pls["broken"]
    err = pls["broken"]["error"]
    assert isinstance(err, str)
    assert_reason(err, reason)
    # A pipeline that never built has no typed inputs or outputs to list.
    assert pls["broken"]["inputs"] == [] and pls["broken"]["outputs"] == []
    assert [s["name"] for s in pls["broken"]["stages"]] == stages
    # strict readiness (the default): a FAILED pipeline keeps the server unready
    assert c.info(P.INFO_READY)["ready"] is False and c.ready() is False
    assert c.info(P.INFO_READY)["loading"] is False
    status = c.status()
    st = by_name(status["pipelines"])
    assert st["broken"]["state"] == "FAILED" and st["broken"]["error"] == err
    assert [s["name"] for s in st["broken"]["stages"]] == stages
    assert all(s["ran"] == s["failed"] == s["skipped"] == 0 for s in st["broken"]["stages"])
    assert by_name(status["pools"])["echo"]["state"] == "READY"

    # --- inference: the working pool and pipeline, then the broken one
    r = c.infer(InferenceRequest("echo", {"input": x}))
    np.testing.assert_array_equal(r.outputs["output"], x)
    r = c.infer(InferenceRequest("good", {"x": x}))
    np.testing.assert_allclose(r.outputs["output"], x * x)
    np.testing.assert_allclose(r.stage_outputs["sq"]["sum"], x + x)
    np.testing.assert_allclose(r.stage_outputs["sq"]["prod"], x * x)
    for inputs in ({"x": x}, {"input": x}, {}):
        with pytest.raises(UnavailableError) as ei:
            c.infer(InferenceRequest("broken", inputs))
        assert "pipeline 'broken' failed to build" in ei.value.message, ei.value.message
        assert_reason(ei.value.message, reason)

    # --- the sip CLI
    r = sip_cli(srv, "status")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^echo\s+READY", r.stdout, re.M), r.stdout
    r = sip_cli(srv, "pools")
    assert r.returncode == 0, r.stderr
    m = re.search(r"^broken\s+state=FAILED pipeline stages=.*\n\s+error: (.*)$", r.stdout, re.M)
    assert m, r.stdout
    assert m.group(1) == err
    assert re.search(r"^good\s+state=READY pipeline stages=sq\(two\),e\(echo\)$", r.stdout, re.M)
    r = sip_cli(srv, "--json", "status")
    assert r.returncode == 0, r.stderr
    assert by_name(json.loads(r.stdout)["pipelines"])["broken"]["error"] == err
    r = sip_cli(srv, "infer", "broken", "-i", "x:float32:2,4=ones")
    assert r.returncode != 0 and "UNAVAILABLE" in r.stderr, (r.returncode, r.stderr)
    assert_reason(r.stderr, reason)
    r = sip_cli(srv, "infer", "good", "-i", "x:float32:1,4=1,2,3,4")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^output: float32 \[1, 4\] = 1 4 9 16\b", r.stdout, re.M), r.stdout

    # --- KServe HTTP
    base = srv.http
    msg = http_error(K.get(base + "/v2/models/broken"), 503)
    assert "failed to load" in msg
    assert_reason(msg, reason)
    msg = http_error(K.get(base + "/v2/models/broken/ready"), 503)
    assert "FAILED" in msg
    assert_reason(msg, reason)
    assert_reason(http_error(K.get(base + "/v2/models/broken/config"), 503), reason)
    r = K.get(base + "/v2/models/broken/stats")
    assert r.status == 200, r
    (entry,) = r.json()["model_stats"]
    assert entry["name"] == "broken" and entry["inference_stats"]["success"]["count"] == 0
    assert_reason(http_error(K.infer(base, "broken", {"x": x}), 503), reason)
    http_error(K.get(base + "/v2/models/broken/versions/1"), 404)
    for model in ("echo", "good"):
        assert K.get(base + "/v2/models/" + model).status == 200
        r = K.get(base + "/v2/models/%s/ready" % model)
        assert r.status == 200 and r.json() == {"name": model, "ready": True}
        assert K.get(base + "/v2/models/%s/config" % model).status == 200
        assert K.get(base + "/v2/models/%s/stats" % model).status == 200
    assert K.get(base + "/v2/models/good").json()["platform"] == "ensemble"
    everyone = {s["name"] for s in K.get(base + "/v2/models/stats").json()["model_stats"]}
    assert {"echo", "two", "good", "broken"} <= everyone
    r = K.get(base + "/v2/health/ready")
    assert r.status == 503 and "'broken' FAILED" in r.json()["error"], r
    assert K.get(base + "/v2/health/live").status == 200
    r = K.infer(base, "good", {"x": x})
    assert r.status == 200, r
    np.testing.assert_allclose(K.decode_outputs(r)[1]["output"], x * x)
    r = K.infer(base, "echo", {"input": x})
    assert r.status == 200, r
    np.testing.assert_array_equal(K.decode_outputs(r)[1]["output"], x)

    # --- /metrics and the metrics collector
    mt = metrics(base)
    # three native, one CLI and one HTTP request were refused
    def requests(pipeline, code):
        return mt[("sip_pipeline_requests_total", (("code", code), ("pipeline", pipeline)))]

    assert requests("broken", "UNAVAILABLE") == 5
    assert requests("broken", "OK") == 0
    assert requests("good", "OK") == 3
    assert mt[("sip_pool_state", (("pool", "echo"), ("state", "READY"), ("version", "")))] == 1
    with MetricsCollector(client=c) as mc:
        snap = mc.collect()
        assert snap.session_pools["echo"].state == "READY"
        assert snap.session_pools["echo"].requests.get("OK", 0) >= 2
        assert by_name(snap.raw["pipelines"])["broken"]["state"] == "FAILED"

    # --- still the same answers afterwards, from a live sipd
    r = c.infer(InferenceRequest("good", {"x": x + 1}))
    np.testing.assert_allclose(r.outputs["output"], (x + 1) * (x + 1))
    srv.assert_alive()
    assert re.search(r'msg="pipeline failed to build" pipeline=broken reason=', srv.log())


# ---------------------------------------------------------------------------
# errors the config parser catches before any pipeline is built

def refused(tmp_path, cfg):
    """Runs sipd --check-config, then sipd --config on `cfg`: both must refuse it
    (stderr of each)."""
    path = tmp_path / "sipd.yaml"
    path.write_text(harness.to_yaml(cfg) + "\n")
    out = []
    for flag in ("--check-config", "--config"):
        proc = subprocess.Popen([str(harness.SIPD), flag, str(path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=harness.sipd_env(),
                                cwd=str(tmp_path))
        try:
            stdout, stderr = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise AssertionError("sipd %s accepted the config and kept running" % flag)
        assert proc.returncode == 1, (flag, proc.returncode, stdout, stderr)
        out.append(stderr)
    return out


def parse_cfg(tmp_path, pipelines, extra_pools=()):
    sock = tmp_path / "s.sock"
    return {"server": {"endpoints": ["ipc://" + str(sock)]},
            "session_pools": [ECHO] + list(extra_pools), "pipeline_sessions": pipelines}


ST = "pipeline_sessions[0].stages"
CONFIG_ERRORS = [
    pytest.param([{"name": "a", "pool": "ghost"}], {},
                 ST + "[0].pool", ["'ghost' is not a pool"], id="pool_unknown"),
    pytest.param([{"name": "a", "pool": "echo", "input_mapping": {"input": "zz.output"}}], {},
                 ST + "[0].input_mapping.input", ['"zz.output" names no earlier stage'],
                 id="input_mapping_unknown_stage"),
    pytest.param([{"name": "a", "pool": "echo", "input_mapping": {"input": "b.output"}},
                  {"name": "b", "pool": "echo"}], {},
                 ST + "[0].input_mapping.input", ['"b.output" names no earlier stage'],
                 id="input_mapping_later_stage"),
    pytest.param([{"name": "a", "pool": "echo", "input_mapping": {"input": "a.output"}}], {},
                 ST + "[0].input_mapping.input", ['"a.output" names no earlier stage'],
                 id="input_mapping_itself"),
    pytest.param([{"name": "a", "pool": "echo", "input_mapping": {"input": "output"}}], {},
                 ST + "[0].input_mapping.input", ['"output" names no earlier stage'],
                 id="input_mapping_not_a_reference"),
    pytest.param([{"name": "a", "pool": "echo", "when": "len(zz.output) > 0"}], {},
                 ST + "[0].when", ["'zz.output' names no earlier stage"], id="when_unknown_stage"),
    pytest.param([{"name": "a", "pool": "echo", "when": "len(a.output) > 0"}], {},
                 ST + "[0].when", ["'a.output' names no earlier stage"], id="when_itself"),
    pytest.param([{"name": "a", "pool": "echo", "when": "len(a.output) >"}], {},
                 ST + "[0].when", ["expected a condition"], id="when_syntax"),
    pytest.param([{"name": "a", "pool": "echo"}], {"early_exit_condition": "len(zz.x) == 0"},
                 "pipeline_sessions[0].early_exit_condition", ["'zz.x' names no stage"],
                 id="early_exit_unknown_stage"),
    pytest.param([{"name": "a", "pool": "echo"}], {"early_exit_condition": "len(a.output) =="},
                 "pipeline_sessions[0].early_exit_condition", ["expected a condition"],
                 id="early_exit_syntax"),
    pytest.param([{"name": "a", "pool": "echo"}], {"outputs": ["zz.output"]},
                 "pipeline_sessions[0].outputs", ["'zz.output' names no stage"],
                 id="outputs_unknown_stage"),
    pytest.param([{"name": "t", "type": "transform", "operation": "frobnicate"}], {},
                 ST + "[0]", ["frobnicate", "softmax"], id="transform_unknown_operation"),
    pytest.param([{"name": "t", "type": "transform", "operation": "softmax", "axiz": 1}], {},
                 ST + "[0]", ["axiz"], id="transform_unknown_option"),
    pytest.param([{"name": "t", "type": "transform", "operation": "topk", "k": "many"}], {},
                 ST + "[0]", ["option k", "'many'"], id="transform_bad_option_value"),
    pytest.param([{"name": "t", "type": "transform"}], {},
                 ST + "[0].operation", ["missing"], id="transform_without_operation"),
    pytest.param([{"name": "a", "pool": "echo", "model_path": "m.onnx"}], {},
                 ST + "[0].pool", ["both pool and model_path"], id="pool_and_model_path"),
    pytest.param([{"name": "a"}], {},
                 ST + "[0].pool", ["neither pool nor model_path"], id="no_pool"),
    pytest.param([{"name": "a", "pool": "echo"}, {"name": "a", "pool": "echo"}], {},
                 ST + "[1].name", ["already the name of stages[0]"], id="duplicate_stage"),
    pytest.param([{"name": "a.b", "pool": "echo"}], {},
                 ST + "[0].name", ["no dots"], id="stage_name_with_dot"),
    pytest.param([{"name": "a", "pool": "echo", "output_filter": "output"}], {},
                 ST + "[0].output_filter", ["expected a list of output names"],
                 id="output_filter_not_a_list"),
    pytest.param([], {}, "pipeline_sessions[0].stages", ["non-empty list"], id="no_stages"),
]


@pytest.mark.parametrize("stages,keys,key,fragments", CONFIG_ERRORS)
def test_config_parser_refuses(sipd_bin, tmp_path, stages, keys, key, fragments):
    pl = dict(keys, name="broken", stages=stages)
    for stderr in refused(tmp_path, parse_cfg(tmp_path, [pl])):
        # FILE:LINE:COL: key: what was wrong
        assert re.search(r"sipd\.yaml:\d+:\d+: %s: " % re.escape(key), stderr), stderr
        for frag in fragments:
            assert frag in stderr, (frag, stderr)


def test_pipeline_named_like_a_pool_is_refused(sipd_bin, tmp_path):
    (stderr, _) = refused(tmp_path, parse_cfg(tmp_path, [
        {"name": "echo", "stages": [{"name": "a", "pool": "echo"}]}]))
    assert "pipeline_sessions[0].name" in stderr and "also the name of a pool" in stderr


def test_implicit_pool_name_clash_is_refused(sipd_bin, mdir, tmp_path):
    cfg = parse_cfg(tmp_path, [{"name": "broken", "stages": [
        {"name": "a", "model_path": str(mdir / "two.onnx")}]}],
        extra_pools=[dict(ECHO, name="broken.a")])
    (stderr, _) = refused(tmp_path, cfg)
    assert "broken.a" in stderr


def test_section_order_does_not_matter(sipd_bin, mdir, tmp_path):
    pools = base_pools(mdir)
    pipelines = [GOOD, {"name": "broken", "stages": [
        {"name": "a", "model_path": str(mdir / "two.onnx")}]}]
    srv = PipelineServer(tmp_path, pools, pipelines)
    # The same config with its top-level keys in the other order.
    srv.config = lambda: {"server": {"endpoints": [srv.unix_endpoint]},
                          "pipeline_sessions": pipelines, "session_pools": pools}
    srv.start(ready_timeout=20)
    try:
        r = srv.client().infer(InferenceRequest("broken", {"x": X}))
        np.testing.assert_allclose(r.outputs["sum"], X + X)
    finally:
        srv.kill()


# ---------------------------------------------------------------------------
# output_filter

@pytest.fixture(scope="module")
def fsrv(sipd_bin, mdir, tmp_path_factory):
    pipelines = [
        GOOD,
        # keeps prod only: it is the pipeline's output, sum is nowhere
        {"name": "only_prod", "stages": [{"name": "a", "pool": "two", "output_filter": ["prod"]}]},
        {"name": "both", "stages": [{"name": "a", "pool": "two",
                                     "output_filter": ["prod", "sum"]}]},
        # default wiring after a filter: position 0 of what `a` keeps is sum
        {"name": "filtered_then_echo", "stages": [
            {"name": "a", "pool": "two", "output_filter": ["sum"]},
            {"name": "b", "pool": "echo"}]},
        # a filter on a transform stage, and on the last stage
        {"name": "filtered_transform", "stages": [
            {"name": "a", "pool": "two", "output_filter": ["prod"]},
            {"name": "soft", "type": "transform", "operation": "softmax",
             "input_mapping": {"input": "a.prod"}, "output_filter": ["output"]}]},
        {"name": "bad_filter", "stages": [
            {"name": "a", "pool": "two"},
            {"name": "b", "pool": "echo", "input_mapping": {"input": "a.sum"},
             "output_filter": ["output", "outptu"]}]},
    ]
    w = tmp_path_factory.mktemp("pbe_filter")
    with serving(w, base_pools(mdir), pipelines) as s:
        yield s


def test_output_filter_keeps_only_listed_outputs(fsrv):
    c = fsrv.client()
    r = c.infer(InferenceRequest("only_prod", {"x": X}))
    assert set(r.outputs) == {"prod"}
    np.testing.assert_allclose(r.outputs["prod"], X * X)
    assert set(r.stage_outputs) == {"a"} and set(r.stage_outputs["a"]) == {"prod"}
    np.testing.assert_allclose(r.stage_outputs["a"]["prod"], X * X)

    r = c.infer(InferenceRequest("both", {"x": X}))
    assert set(r.outputs) == {"sum", "prod"} and set(r.stage_outputs["a"]) == {"sum", "prod"}
    np.testing.assert_allclose(r.outputs["sum"], X + X)
    np.testing.assert_allclose(r.outputs["prod"], X * X)

    r = c.infer(InferenceRequest("filtered_then_echo", {"x": X}))
    assert set(r.stage_outputs["a"]) == {"sum"}
    np.testing.assert_allclose(r.outputs["output"], X + X)  # b took sum, by position
    assert set(r.outputs) == {"output"}

    r = c.infer(InferenceRequest("filtered_transform", {"x": X}))
    e = np.exp(X * X - (X * X).max(axis=-1, keepdims=True))
    np.testing.assert_allclose(r.outputs["output"], e / e.sum(-1, keepdims=True), rtol=1e-5)
    assert set(r.stage_outputs) == {"a", "soft"} and set(r.stage_outputs["a"]) == {"prod"}


def test_output_filter_in_introspection_and_http(fsrv):
    c = fsrv.client()
    pls = by_name(c.info(P.INFO_POOLS)["pipelines"])
    assert pls["only_prod"]["outputs"] == [{"name": "prod", "dtype": "float32", "shape": [-1, 4]}]
    assert [o["name"] for o in pls["both"]["outputs"]] == ["prod", "sum"] or \
        [o["name"] for o in pls["both"]["outputs"]] == ["sum", "prod"]
    assert [o["name"] for o in pls["filtered_then_echo"]["outputs"]] == ["output"]
    doc = K.get(fsrv.http + "/v2/models/only_prod").json()
    assert doc["outputs"] == [{"name": "prod", "datatype": "FP32", "shape": [-1, 4]}]
    r = K.infer(fsrv.http, "only_prod", {"x": X})
    assert r.status == 200, r
    out = K.decode_outputs(r)[1]
    assert "prod" in out and "sum" not in out and "a/sum" not in out
    np.testing.assert_allclose(out["prod"], X * X)


def test_output_filter_bad_name_is_a_build_error(fsrv):
    c = fsrv.client()
    pls = by_name(c.info(P.INFO_POOLS)["pipelines"])
    bad = pls["bad_filter"]
    assert bad["state"] == "FAILED"
    assert bad["error"] == ("stage 'b': output_filter names 'outptu', which the stage does not "
                            "produce")
    with pytest.raises(UnavailableError, match="outptu"):
        c.infer(InferenceRequest("bad_filter", {"x": X}))
    # every other pipeline of that server built and serves
    assert all(p["state"] == "READY" for n, p in pls.items() if n != "bad_filter")
    r = c.infer(InferenceRequest("good", {"x": X}))
    np.testing.assert_allclose(r.outputs["output"], X * X)
    fsrv.assert_alive()


def test_asking_for_a_filtered_output_is_refused(fsrv):
    c = fsrv.client()
    with pytest.raises(InvalidArgumentError, match="sum"):
        c.infer(InferenceRequest("only_prod", {"x": X}, outputs=["a/sum"]))


def test_refused_requests_are_not_counted_as_executions(fsrv):
    c = fsrv.client()
    with pytest.raises(UnavailableError):
        c.infer(InferenceRequest("bad_filter", {"x": X}))
    (entry,) = K.get(fsrv.http + "/v2/models/bad_filter/stats").json()["model_stats"]
    assert entry["inference_stats"]["fail"]["count"] >= 1
    assert entry["inference_count"] == 0 and entry["execution_count"] == 0, entry
