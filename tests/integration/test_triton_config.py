"""Triton's config.pbtxt in a model repository (docs/triton.md): read with
libprotobuf's text format parser, mapped onto the model's settings (sessions
from instance_group, dynamic batching, queue policy, sequence batching,
version policy, backend options), inputs and outputs checked against the
model, every field sip does not act on named in a warning; config.yaml
beside it wins; `sip import-triton DIR` prints the config.yaml it amounts
to. The models mirror Triton's own examples (simple, simple_string,
simple_sequence, an ensemble) with ONNX models made here."""

import json
import subprocess

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto as T, helper

import harness
import kserve as K
import models

SIP = harness.BUILD_DIR / "sip"
I32 = np.int32

SIMPLE = """
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_CPU } ]
dynamic_batching {
  preferred_batch_size: [ 8, 4 ]
  max_queue_delay_microseconds: 100
  default_queue_policy { max_queue_size: 64 default_timeout_microseconds: 2500 }
}
parameters { key: "graph_optimization_level" value: { string_value: "basic" } }
response_cache { enable: true }
parameters { key: "no_such_option" value: { string_value: "x" } }
model_warmup [ { name: "zeros" batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] zero_data: true } } } ]
optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" } ] } }
"""

SIMPLE_STRING = """
name: "simple_string"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
"""

SIMPLE_SEQUENCE = """
name: "simple_sequence"
platform: "onnxruntime_onnx"
max_batch_size: 1
version_policy: { latest: { num_versions: 1 } }
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
  oldest { max_candidate_sequences: 4 }
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

# The sequence config under the name the bad-config cases rename.
SEQUENCE_AS_SIMPLE = SIMPLE_SEQUENCE.replace('name: "simple_sequence"', 'name: "simple"')


def save(model, path):
    model.ir_version = models.IR_VERSION
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))


def simple_model(dtype=T.INT32):
    V = helper.make_tensor_value_info
    io = [V("INPUT0", dtype, ["N", 16]), V("INPUT1", dtype, ["N", 16])]
    outs = [V("OUTPUT0", dtype, ["N", 16]), V("OUTPUT1", dtype, ["N", 16])]
    if dtype == T.STRING:
        nodes = [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"]),
                 helper.make_node("Identity", ["INPUT1"], ["OUTPUT1"])]
    else:
        nodes = [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                 helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])]
    g = helper.make_graph(nodes, "simple", io, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", models.OPSET)])


def sequence_model():
    """OUTPUT = START * 1000 + READY * 10 + INPUT: each answer shows the
    controls the server filled."""
    V = helper.make_tensor_value_info
    k = lambda n, v: helper.make_tensor(n, T.INT32, [1], [v])  # noqa: E731
    nodes = [helper.make_node("Mul", ["START", "k1000"], ["s"]),
             helper.make_node("Mul", ["READY", "k10"], ["r"]),
             helper.make_node("Add", ["s", "r"], ["sr"]),
             helper.make_node("Add", ["sr", "INPUT"], ["OUTPUT"])]
    g = helper.make_graph(nodes, "seq", [V("INPUT", T.INT32, ["N", 1]), V("START", T.INT32, ["N", 1]),
                                         V("READY", T.INT32, ["N", 1])],
                          [V("OUTPUT", T.INT32, ["N", 1])],
                          initializer=[k("k1000", 1000), k("k10", 10)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", models.OPSET)])


def make_repo(root):
    repo = root / "repo"
    save(simple_model(), repo / "simple" / "1" / "model.onnx")
    (repo / "simple" / "config.pbtxt").write_text(SIMPLE)
    save(simple_model(T.STRING), repo / "simple_string" / "1" / "model.onnx")
    (repo / "simple_string" / "config.pbtxt").write_text(SIMPLE_STRING)
    save(sequence_model(), repo / "simple_sequence" / "1" / "model.onnx")
    (repo / "simple_sequence" / "config.pbtxt").write_text(SIMPLE_SEQUENCE)
    return repo


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("triton")
    repo = make_repo(root)
    srv = harness.SipServer(root / "sipd", [], server={
        "model_repository": str(repo), "http": "127.0.0.1:0", "model_control": "explicit"})
    try:
        srv.start()
        base = K.http_base(srv)
        for m in ("simple", "simple_string", "simple_sequence"):
            r = K.request("POST", base + "/v2/repository/models/%s/load" % m, body=b"{}")
            assert r.status == 200, (m, r, srv.log_tail())
        yield srv, base, repo
    finally:
        assert srv.stop() == 0, srv.log_tail()


def config_of(base, name):
    r = K.get(base + "/v2/models/%s/config" % name)
    assert r.status == 200, r
    return r.json()


def test_simple_loads_with_its_sessions_and_batching(served):
    srv, base, _ = served
    cfg = config_of(base, "simple")
    assert sum(g["count"] for g in cfg["instance_group"]) == 3  # 2 + 1 instances
    assert cfg["max_batch_size"] == 8
    db = cfg["dynamic_batching"]
    assert db["preferred_batch_size"] == [4, 8]  # sorted, as sip keeps them
    assert int(db["max_queue_delay_microseconds"]) == 100
    a = np.arange(32, dtype=I32).reshape(2, 16)
    b = np.full((2, 16), 3, I32)
    r = K.infer(base, "simple", {"INPUT0": a, "INPUT1": b})
    assert r.status == 200, r
    out = K.decode_outputs(r)[1]
    np.testing.assert_array_equal(out["OUTPUT0"], a + b)
    np.testing.assert_array_equal(out["OUTPUT1"], a - b)


def test_unused_fields_are_named_in_warnings(served):
    srv, _, _ = served
    log = srv.log()
    for field in ("optimization", "model_warmup", "parameters.no_such_option",
                  "allow_timeout_override", "max_batch_size 8 without dynamic_batching",
                  "sequence_batching.oldest"):
        assert field in log, "no warning names %s:\n%s" % (field, srv.log_tail(40))
    # parameters that are options of the backend are taken, without a warning
    assert "parameters.graph_optimization_level" not in log


def test_simple_string_passes_strings(served):
    _, base, _ = served
    cfg = config_of(base, "simple_string")
    # nothing is merged without dynamic_batching: sip's config reports no batching
    assert cfg["max_batch_size"] == 0 and "dynamic_batching" not in cfg
    words = np.array([["w%d" % (i + j) for j in range(16)] for i in range(2)], dtype=object)
    r = K.infer(base, "simple_string", {"INPUT0": words, "INPUT1": words})
    assert r.status == 200, r
    got = K.decode_outputs(r)[1]["OUTPUT0"]
    assert [x.decode() if isinstance(x, bytes) else x for x in np.asarray(got).ravel()] == \
        list(words.ravel())


def test_simple_sequence_fills_its_controls(served):
    _, base, _ = served
    cfg = config_of(base, "simple_sequence")
    sb = cfg["sequence_batching"]
    assert int(sb["max_sequence_idle_microseconds"]) == 5000000
    kinds = {c["name"]: c["control"][0]["kind"] for c in sb["control_input"]}
    assert kinds == {"START": "CONTROL_SEQUENCE_START", "READY": "CONTROL_SEQUENCE_READY"}
    assert sum(g["count"] for g in cfg["instance_group"]) == 2
    outs = []
    for i, v in enumerate((5, 6, 7)):
        params = {"sequence_id": 42, "sequence_start": i == 0, "sequence_end": i == 2}
        r = K.infer(base, "simple_sequence", {"INPUT": np.array([[v]], I32)}, params=params)
        assert r.status == 200, r
        outs.append(int(K.decode_outputs(r)[1]["OUTPUT"].ravel()[0]))
    assert outs == [1000 + 10 + 5, 10 + 6, 10 + 7]


def import_triton(model_dir):
    r = subprocess.run([str(SIP), "import-triton", str(model_dir)], capture_output=True,
                       text=True, timeout=60, env=harness.sipd_env())
    return r


def test_import_triton_prints_the_config_it_loads_with(served, tmp_path):
    _, base, repo = served
    r = import_triton(repo / "simple")
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert doc["backend"] == "onnxruntime" and doc["pool_size"] == 3
    assert doc["dynamic_batching"] == {"max_batch_size": 8, "max_queue_delay_us": 100,
                                       "preferred_batch_sizes": [4, 8]}
    assert doc["queue"] == {"max_size": 64, "default_timeout_ms": 3}  # 2500 us, rounded up
    assert doc["backend_options"] == {"graph_optimization_level": "basic"}
    assert doc["response_cache"] is True  # Triton's response_cache.enable: the server's cache
    assert not [ln for ln in r.stdout.splitlines()
                if ln.startswith("# not used:") and "response_cache" in ln], r.stdout
    assert "# not used: " in r.stdout and "model_warmup" in r.stdout
    assert "field(s) of config.pbtxt not used" in r.stderr
    seq = yaml.safe_load(import_triton(repo / "simple_sequence").stdout)
    assert seq["sequence_batching"] == {"idle_timeout_us": 5000000,
                                        "control_inputs": {"start": "START", "ready": "READY"}}
    assert seq["version_policy"] == {"latest": 1} and seq["pool_size"] == 2


def load(base, name):
    return K.request("POST", base + "/v2/repository/models/%s/load" % name, body=b"{}")


def test_config_yaml_beside_it_wins(served):
    srv, base, repo = served
    d = repo / "simple"
    (d / "config.yaml").write_text("pool_size: 1\n")
    try:
        assert load(base, "simple").status == 200
        cfg = config_of(base, "simple")
        assert sum(g["count"] for g in cfg["instance_group"]) == 1
        assert "dynamic_batching" not in cfg
        assert "config.pbtxt not read: config.yaml beside it wins" in srv.log()
    finally:
        (d / "config.yaml").unlink()
    assert load(base, "simple").status == 200  # back to config.pbtxt
    assert sum(g["count"] for g in config_of(base, "simple")["instance_group"]) == 3


@pytest.mark.parametrize("text,status,wanted", [
    # dims that do not fit the model: the load fails and says which
    (SIMPLE.replace("dims: [ 16 ] },\n  { name: \"INPUT1\"", "dims: [ 15 ] },\n  { name: \"INPUT1\""),
     400, "INPUT0"),
    (SIMPLE.replace('name: "simple"', 'name: "other"'), 400, "name 'other' is not the model's"),
    (SIMPLE.replace("onnxruntime_onnx", "tensorflow_graphdef"), 400,
     "platform 'tensorflow_graphdef' is not served here"),
    (SIMPLE.replace("max_batch_size: 8", "max_batch_size: 8 max_batch_size: {"), 400,
     "config.pbtxt:4:"),
    (SIMPLE.replace("count: 2", "count: 300"), 400, "instance_group[0].count"),
    # sequence controls: one input per kind, a different input for each
    (SEQUENCE_AS_SIMPLE.replace("CONTROL_SEQUENCE_READY", "CONTROL_SEQUENCE_START"), 400,
     "CONTROL_SEQUENCE_START is given to both 'START' and 'READY'"),
    (SEQUENCE_AS_SIMPLE.replace('{ name: "READY"', '{ name: "START"'), 400,
     "'START' is given both CONTROL_SEQUENCE_START and CONTROL_SEQUENCE_READY"),
])
def test_bad_configs_fail_the_load_and_say_why(served, tmp_path, text, status, wanted):
    srv, base, repo = served
    d = repo / "broken"
    save(simple_model(), d / "1" / "model.onnx")
    (d / "config.pbtxt").write_text(text.replace('name: "simple"', 'name: "broken"'))
    r = load(base, "broken")
    assert r.status == status, r
    assert wanted in r.json()["error"], r.json()
    # the server keeps serving
    assert K.get(base + "/v2/health/live").status == 200


def test_an_ensemble_is_refused_with_the_way_to_write_it(tmp_path):
    d = tmp_path / "ensemble"
    d.mkdir()
    (d / "config.pbtxt").write_text("""
name: "ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "simple" model_version: -1 input_map { key: "INPUT0" value: "IN" }
    input_map { key: "INPUT1" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
""")
    r = import_triton(d)
    assert r.returncode != 0
    assert "platform 'ensemble'" in r.stderr and "pipeline" in r.stderr, r.stderr


def test_import_triton_errors_are_clear(tmp_path):
    r = import_triton(tmp_path / "nothing")
    assert r.returncode != 0 and "config.pbtxt" in r.stderr, r.stderr
    r = subprocess.run([str(SIP), "import-triton"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "usage: sip import-triton DIR" in r.stderr
