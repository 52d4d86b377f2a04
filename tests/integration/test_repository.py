"""The model repository (server.model_repository): index, load and unload over
HTTP, the native protocol and the CLI; version policies and explicit versions;
the `current` link; names that try to leave the repository; a failed load
that leaves the old version serving (a live version switch under load:
test_repository_switch.py).

Models are generated: version V of a model computes y = x + V, so every
answer tells which version served it."""

import json
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import harness
import kserve as K
import models
from cann_sip import (InferenceRequest, InvalidArgumentError, NotFoundError, SipError,
                      UnavailableError)

SIP = harness.BUILD_DIR / "sip"
X = np.arange(8, dtype=np.float32).reshape(2, 4)


# ---------------------------------------------------------------------------
# models and repositories

def add_model(k, weights_mib=0):
    """y = x + k for x float32 [N, 4]. With weights_mib, the model also holds
    a float32 weight tensor of that size whose element 0 (zero) is added, so
    the weights stay in memory while it is loaded (with graph optimization
    off, ONNX Runtime cannot fold them away)."""
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.array([k], np.float32), "k")]
    if weights_mib:
        n = weights_mib * (1 << 20) // 4
        w = np.random.default_rng(int(k)).random(n, dtype=np.float32)
        w[0] = 0
        inits += [numpy_helper.from_array(w, "w"),
                  numpy_helper.from_array(np.array([0], np.int64), "i0")]
        nodes = [helper.make_node("Gather", ["w", "i0"], ["w0"]),
                 helper.make_node("Add", ["k", "w0"], ["kw"]),
                 helper.make_node("Add", ["x", "kw"], ["y"])]
    else:
        nodes = [helper.make_node("Add", ["x", "k"], ["y"])]
    g = helper.make_graph(nodes, "add_%g" % k, [helper.make_tensor_value_info("x", f, ["N", 4])],
                          [helper.make_tensor_value_info("y", f, ["N", 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", models.OPSET)])
    m.ir_version = models.IR_VERSION
    return m


def add_version(repo, name, version, k=None, weights_mib=0):
    d = repo / name / str(version)
    d.mkdir(parents=True, exist_ok=True)
    # Written aside, then renamed: a model file appears whole or not at all.
    tmp = d / "model.onnx.tmp"
    onnx.save(add_model(version if k is None else k, weights_mib), str(tmp))
    os.replace(tmp, d / "model.onnx")
    return d


def set_current(repo, name, version):
    link = repo / name / "current"
    tmp = repo / name / "current.tmp"
    os.symlink(str(version), str(tmp))
    os.replace(tmp, link)


def start(start_sipd, repo, pools=(), **server):
    opts = {"model_repository": str(repo), "http": "127.0.0.1:0"}
    opts.update(server)
    return start_sipd(list(pools), server=opts)


def infer(c, pool, x=X):
    return c.infer(InferenceRequest(pool, {"x": x})).outputs["y"]


def served(index, name):
    """{version: entry} of a model's READY entries."""
    return {e.get("version"): e for e in index if e["name"] == name and e["state"] == "READY"}


def sip(srv, *args):
    return subprocess.run([str(SIP), "-e", srv.endpoint, *args], capture_output=True, text=True,
                          timeout=60)


def post(base, path, body=b"{}"):
    return K.request("POST", base + path, body=body,
                     headers={"Content-Type": "application/json"})


def error_of(reply, status):
    assert reply.status == status, reply
    doc = json.loads(reply.body)
    assert list(doc) == ["error"] and doc["error"], doc
    return doc["error"]


# ---------------------------------------------------------------------------
# index, load, unload from every front-end

def test_index_load_unload_everywhere(start_sipd, tmp_path):
    repo = tmp_path / "repo"
    add_version(repo, "addk", 1)
    add_version(repo, "other", 3)
    srv = start(start_sipd, repo)
    base = K.http_base(srv)
    c = srv.client()

    idx = c.repository_index()
    assert set(served(idx, "addk")) == {"1"} and set(served(idx, "other")) == {"3"}
    assert all(e["source"] == "repository" for e in idx)
    np.testing.assert_array_equal(infer(c, "addk"), X + 1)

    # HTTP: index (Triton's array), unload, load.
    r = post(base, "/v2/repository/index")
    assert r.status == 200
    doc = json.loads(r.body)
    assert isinstance(doc, list) and {"name": "addk", "version": "1", "state": "READY"}.items() \
        <= next(e for e in doc if e["name"] == "addk").items()
    assert "model_repository" in K.get(base + "/v2").json()["extensions"]
    assert post(base, "/v2/repository/models/addk/unload").status == 200
    with pytest.raises(UnavailableError, match="unloaded"):
        infer(c, "addk")
    assert "unloaded" in error_of(K.infer(base, "addk", {"x": X}), 503)
    entry = [e for e in c.repository_index() if e["name"] == "addk"]
    assert entry == [{"name": "addk", "state": "UNAVAILABLE", "reason": "unloaded",
                      "source": "repository"}]
    ready_only = json.loads(post(base, "/v2/repository/index", b'{"ready": true}').body)
    assert {e["name"] for e in ready_only} == {"other"}
    assert post(base, "/v2/repository/models/addk/load").status == 200
    np.testing.assert_array_equal(infer(c, "addk"), X + 1)
    assert K.get(base + "/v2/repository/index").status == 405

    # Triton's client sends {"parameters": {"unload_dependents": false}} on
    # every unload; other unload parameters are refused and the model stays.
    bad = json.dumps({"parameters": {"unload_dependents": "no"}}).encode()
    assert "unload_dependents is not a boolean" in error_of(
        post(base, "/v2/repository/models/addk/unload", bad), 400)
    bad = json.dumps({"parameters": {"cascade": True}}).encode()
    assert "unknown unload parameter 'cascade'" in error_of(
        post(base, "/v2/repository/models/addk/unload", bad), 400)
    np.testing.assert_array_equal(infer(c, "addk"), X + 1)
    triton = json.dumps({"parameters": {"unload_dependents": False}}).encode()
    assert post(base, "/v2/repository/models/addk/unload", triton).status == 200
    assert post(base, "/v2/repository/models/addk/load").status == 200
    np.testing.assert_array_equal(infer(c, "addk"), X + 1)

    # CLI.
    r = sip(srv, "unload", "addk")
    assert r.returncode == 0, r.stderr
    assert "addk: unloaded" in r.stdout
    r = sip(srv, "models")
    assert r.returncode == 0, r.stderr
    assert "addk" in r.stdout and "unloaded" in r.stdout and "other" in r.stdout
    r = sip(srv, "load", "addk")
    assert r.returncode == 0, r.stderr
    r = sip(srv, "--json", "models")
    assert served(json.loads(r.stdout)["models"], "addk").keys() == {"1"}

    # Native.
    c.unload_model("addk")
    with pytest.raises(UnavailableError):
        infer(c, "addk")
    c.load_model("addk")
    np.testing.assert_array_equal(infer(c, "addk"), X + 1)
    c.unload_model("addk")
    c.unload_model("addk")  # unloading an unloaded model is fine

    # A model that is not in the repository.
    with pytest.raises(NotFoundError, match="not in the model repository"):
        c.load_model("nope")
    msg = error_of(post(base, "/v2/repository/models/nope/load"), 404)
    assert msg.startswith("Request for unknown model: 'nope' is not found"), msg
    assert str(repo) not in msg and "not in the model repository" in msg, msg
    r = sip(srv, "load", "nope")
    assert r.returncode != 0 and "NOT_FOUND" in r.stderr

    # A model added to the repository while serving.
    add_version(repo, "late", 5)
    c.load_model("late")
    np.testing.assert_array_equal(infer(c, "late"), X + 5)
    srv.assert_alive()


def test_explicit_model_control_and_config_pools(start_sipd, tmp_path, model_dir):
    repo = tmp_path / "repo"
    add_version(repo, "addk", 2)
    srv = start(start_sipd, repo,
                pools=[{"name": "addmul", "model_path": str(model_dir["addmul"])}],
                model_control="explicit")
    c = srv.client()
    idx = c.repository_index()
    assert {(e["name"], e["state"], e["source"]) for e in idx} == {
        ("addk", "UNAVAILABLE", "repository"), ("addmul", "READY", "config")}
    assert next(e for e in idx if e["name"] == "addk")["reason"] == "not loaded"
    with pytest.raises(UnavailableError, match="not loaded"):
        infer(c, "addk")
    c.load_model("addk")
    np.testing.assert_array_equal(infer(c, "addk"), X + 2)
    # Config pools keep working and are not the repository's to (un)load.
    a = np.ones((1, 4), np.float32)
    r = c.infer(InferenceRequest("addmul", {"lhs": a, "rhs": a}))
    np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(a, a))
    with pytest.raises(SipError, match="session_pools entry"):
        c.unload_model("addmul")
    assert {p["name"]: p["source"] for p in c.pools()} == {"addmul": "config", "addk": "repository"}


# ---------------------------------------------------------------------------
# versions

def test_version_policies_and_explicit_versions(start_sipd, tmp_path):
    repo = tmp_path / "repo"
    for name in ("latest1", "latest2", "specific", "every"):
        for v in (1, 2, 3):
            add_version(repo, name, v)
    add_version(repo, "latest1", 10)  # numeric order: 10 > 3
    (repo / "latest2" / "config.yaml").write_text("version_policy: {latest: 2}\npool_size: 2\n")
    (repo / "specific" / "config.yaml").write_text("version_policy: {specific: [1, 3, 7]}\n")
    (repo / "every" / "config.yaml").write_text("version_policy: all\n")
    srv = start(start_sipd, repo)
    base = K.http_base(srv)
    c = srv.client()
    idx = c.repository_index()
    assert set(served(idx, "latest1")) == {"10"}
    assert set(served(idx, "latest2")) == {"2", "3"}
    assert set(served(idx, "specific")) == {"1", "3"}
    assert set(served(idx, "every")) == {"1", "2", "3"}
    # The version the policy names but the repository lacks is reported.
    missing = [e for e in idx if e["name"] == "specific" and e["state"] != "READY"]
    assert [(e["version"], e["state"]) for e in missing] == [("7", "UNAVAILABLE")]
    assert "version_policy.specific" in missing[0]["reason"]
    # Defaults: the highest served version.
    assert served(idx, "latest2")["3"]["default"] and not served(idx, "latest2")["2"]["default"]
    np.testing.assert_array_equal(infer(c, "latest1"), X + 10)
    np.testing.assert_array_equal(infer(c, "latest2"), X + 3)
    np.testing.assert_array_equal(infer(c, "every"), X + 3)
    # Versions by name: native "model:version", HTTP /versions/V.
    for v in (1, 2, 3):
        np.testing.assert_array_equal(infer(c, "every:%d" % v), X + v)
        out = K.decode_outputs(K.infer(base, "every", {"x": X}, version=str(v)))[0]
        assert out["model_version"] == str(v)
    np.testing.assert_array_equal(infer(c, "specific:1"), X + 1)
    with pytest.raises(NotFoundError, match="Request for unknown model: '[^']*' version 2 is not found"):
        infer(c, "specific:2")
    assert "'specific' version 2 is not found; it serves versions '1', '3'" in error_of(K.get(base + "/v2/models/specific/versions/2"), 404)
    error_of(K.infer(base, "specific", {"x": X}, version="2"), 404)
    with pytest.raises(InvalidArgumentError):
        infer(c, "every:")
    # Each version is a pool of its own, with its own sessions.
    pools = [p for p in c.pools() if p["name"] == "latest2"]
    assert sorted(p["version"] for p in pools) == ["2", "3"]
    assert all(p["pool_size"] == 2 for p in pools)
    meta = K.get(base + "/v2/models/every").json()
    assert sorted(meta["versions"]) == ["1", "2", "3"]
    assert K.get(base + "/v2/models/every/versions/2/ready").status == 200
    stats = K.get(base + "/v2/models/every/versions/2/stats").json()["model_stats"]
    assert [s["version"] for s in stats] == ["2"] and stats[0]["inference_count"] >= 2


def test_current_link_names_the_default(start_sipd, tmp_path):
    repo = tmp_path / "repo"
    for v in (1, 2):
        add_version(repo, "pin", v)
    set_current(repo, "pin", 1)
    srv = start(start_sipd, repo)
    base = K.http_base(srv)
    c = srv.client()
    s = served(c.repository_index(), "pin")
    # latest: 1 serves 2; the link adds 1 and makes it the default.
    assert set(s) == {"1", "2"} and s["1"]["default"] and not s["2"]["default"]
    np.testing.assert_array_equal(infer(c, "pin"), X + 1)
    assert K.decode_outputs(K.infer(base, "pin", {"x": X}))[0]["model_version"] == "1"
    np.testing.assert_array_equal(infer(c, "pin:2"), X + 2)

    # Moving the link and reloading moves the default (no version reloads).
    set_current(repo, "pin", 2)
    c.load_model("pin")
    s = served(c.repository_index(), "pin")
    assert set(s) == {"2"} and s["2"]["default"]
    np.testing.assert_array_equal(infer(c, "pin"), X + 2)
    assert K.decode_outputs(K.infer(base, "pin", {"x": X}))[0]["model_version"] == "2"

    # A link to something that is not a version: the load fails, 2 stays.
    set_current(repo, "pin", 9)
    with pytest.raises(NotFoundError, match="current"):
        c.load_model("pin")
    np.testing.assert_array_equal(infer(c, "pin"), X + 2)


# ---------------------------------------------------------------------------
# names and links that leave the repository

BAD_NAMES = ["..", ".", "../repo2", "a/b", "/etc", "/etc/passwd", ".hidden", "x/../addk",
             "a b", "a\\b"]


def test_traversal_names_rejected(start_sipd, tmp_path):
    repo = tmp_path / "repo"
    add_version(repo, "addk", 1)
    outside = tmp_path / "outside"
    add_version(outside, "evil", 1)
    add_version(outside, "file", 1)
    os.symlink(str(outside / "evil"), str(repo / "evil"))  # a model dir outside
    (repo / "sneaky" / "1").mkdir(parents=True)           # a model file outside
    os.symlink(str(outside / "file" / "1" / "model.onnx"), str(repo / "sneaky" / "1" / "model.onnx"))
    add_version(repo, "sneaky", 2)
    (repo / "sneaky" / "config.yaml").write_text("version_policy: all\n")
    srv = start(start_sipd, repo)
    base = K.http_base(srv)
    c = srv.client()

    for name in BAD_NAMES:
        with pytest.raises(InvalidArgumentError, match="expected a model directory name"):
            c.load_model(name)
        with pytest.raises(InvalidArgumentError):
            c.unload_model(name)
        r = sip(srv, "load", name)
        assert r.returncode != 0 and "INVALID_ARGUMENT" in r.stderr, (name, r.stdout, r.stderr)
    for path in ("..", "%2e%2e", "..%2Fetc", "a%2Fb", "%2Fetc", ".hidden"):
        # http.client sends the path as is (no normalisation of "..").
        r = post(base, "/v2/repository/models/%s/load" % path)
        assert "expected a model directory name" in error_of(r, 400), (path, r)
    with pytest.raises(InvalidArgumentError, match="NUL"):
        c._repo("load", "add\0k")

    # Links that resolve outside the repository.
    with pytest.raises(InvalidArgumentError, match="outside the model repository"):
        c.load_model("evil")
    with pytest.raises(UnavailableError, match="outside the model repository"):
        infer(c, "evil")
    idx = c.repository_index()
    assert [e["state"] for e in idx if e["name"] == "evil"] == ["UNAVAILABLE"]
    sneaky = {e.get("version"): e for e in idx if e["name"] == "sneaky"}
    assert sneaky["2"]["state"] == "READY"
    assert sneaky["1"]["state"] == "UNAVAILABLE" and "outside" in sneaky["1"]["reason"]
    with pytest.raises(NotFoundError):
        infer(c, "sneaky:1")
    np.testing.assert_array_equal(infer(c, "addk"), X + 1)
    srv.assert_alive()


# ---------------------------------------------------------------------------
# a failed load

def test_failed_load_keeps_old_version(start_sipd, tmp_path):
    repo = tmp_path / "repo"
    add_version(repo, "fragile", 1)
    srv = start(start_sipd, repo)
    base = K.http_base(srv)
    c = srv.client()
    np.testing.assert_array_equal(infer(c, "fragile"), X + 1)

    # A corrupt new version: the load fails, 1 keeps serving, the index says why.
    (repo / "fragile" / "2").mkdir()
    models.write_corrupt(repo / "fragile" / "2" / "model.onnx")
    with pytest.raises(SipError, match="version '2' failed to load"):
        c.load_model("fragile")
    np.testing.assert_array_equal(infer(c, "fragile"), X + 1)
    idx = {e.get("version"): e for e in c.repository_index() if e["name"] == "fragile"}
    assert idx["1"]["state"] == "READY" and idx["1"]["default"]
    assert idx["2"]["state"] == "UNAVAILABLE" and idx["2"]["reason"]
    r = post(base, "/v2/repository/models/fragile/load")
    assert r.status >= 400 and "failed to load" in json.loads(r.body)["error"]
    r = sip(srv, "load", "fragile")
    assert r.returncode != 0 and "failed to load" in r.stderr
    r = sip(srv, "models")
    assert "fragile" in r.stdout and "UNAVAILABLE" in r.stdout
    np.testing.assert_array_equal(infer(c, "fragile"), X + 1)

    # A config.yaml with an error: reported with file:line:col, 1 stays.
    (repo / "fragile" / "config.yaml").write_text("pool_size: 2\npriority: urgent\n")
    with pytest.raises(InvalidArgumentError, match=r"config.yaml:2:11: priority"):
        c.load_model("fragile")
    entry = [e for e in c.repository_index() if e["name"] == "fragile" and "version" not in e]
    assert entry and "config.yaml:2:11" in entry[0]["reason"]
    np.testing.assert_array_equal(infer(c, "fragile"), X + 1)

    # Fixed: the next load switches to 2.
    (repo / "fragile" / "config.yaml").unlink()
    add_version(repo, "fragile", 2)
    c.load_model("fragile")
    np.testing.assert_array_equal(infer(c, "fragile"), X + 2)
    assert set(served(c.repository_index(), "fragile")) == {"2"}
    assert all(e["state"] == "READY" for e in c.repository_index() if e["name"] == "fragile")


def test_repository_model_cannot_take_a_pipeline_name(sipd_bin, tmp_path):
    """Requests name pools and pipelines alike: a repository model named like
    a pipeline of the config is refused (at start and on load), and the
    pipeline keeps the name."""
    repo = tmp_path / "repo"
    add_version(repo, "addk", 1)
    add_version(repo, "twice", 3)  # also the pipeline's name
    srv = harness.SipServer(tmp_path / "srv", [], server={"model_repository": str(repo)})
    cfg = srv.config()
    cfg["pipeline_sessions"] = [{"name": "twice", "stages": [
        {"name": "a", "pool": "addk"}, {"name": "b", "pool": "addk",
                                        "input_mapping": {"x": "a.y"}}]}]
    srv.config = lambda: cfg
    srv.start()
    try:
        c = srv.client()
        with pytest.raises(SipError, match="'twice' is a pipeline \\(pipeline_sessions\\) of the "
                                           "config file"):
            c.load_model("twice")
        assert "twice" not in {p["name"] for p in c.pools()}
        # The name still reaches the pipeline: x + 1 + 1.
        np.testing.assert_array_equal(infer(c, "twice"), X + 2)
    finally:
        assert srv.stop() == 0, srv.log_tail()


def renamed_output_model(k, out="y2", width=4):
    """out = x + k for x float32 [N, width]: add_model with another output
    name, or another width."""
    f = TensorProto.FLOAT
    g = helper.make_graph([helper.make_node("Add", ["x", "k"], [out])], "ren",
                          [helper.make_tensor_value_info("x", f, ["N", width])],
                          [helper.make_tensor_value_info(out, f, ["N", width])],
                          [numpy_helper.from_array(np.array([k], np.float32), "k")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", models.OPSET)])
    m.ir_version = models.IR_VERSION
    return m


def test_pipeline_follows_or_refuses_a_reload(sipd_bin, tmp_path):
    """A pipeline whose stages run on a repository model is checked again when
    that model is reloaded or unloaded: a new version with the same inputs
    and outputs is followed at once; one whose outputs no longer fit is
    refused with the pipeline and stage named, and the old version serves
    on; unloading the model is refused while the pipeline uses it."""
    repo = tmp_path / "repo"
    add_version(repo, "addk", 1)
    srv = harness.SipServer(tmp_path / "srv", [], server={"model_repository": str(repo)})
    cfg = srv.config()
    cfg["pipeline_sessions"] = [{"name": "twice", "stages": [
        {"name": "a", "pool": "addk"}, {"name": "b", "pool": "addk",
                                        "input_mapping": {"x": "a.y"}}]}]
    srv.config = lambda: cfg
    srv.start()
    try:
        c = srv.client()
        np.testing.assert_array_equal(infer(c, "twice"), X + 2)

        # Compatible: version 2 (y = x + 2) serves the pipeline at once.
        add_version(repo, "addk", 2)
        c.load_model("addk")
        np.testing.assert_array_equal(infer(c, "addk"), X + 2)
        np.testing.assert_array_equal(infer(c, "twice"), X + 4)

        # Incompatible: version 3 names its output y2, which stage a must give.
        d = repo / "addk" / "3"
        d.mkdir()
        onnx.save(renamed_output_model(3), str(d / "model.onnx"))
        with pytest.raises(SipError) as ei:
            c.load_model("addk")
        msg = str(ei.value)
        assert "pipeline 'twice' stage 'a'" in msg and "output 'y'" in msg, msg
        assert ei.value.code == "FAILED_PRECONDITION", ei.value.code
        np.testing.assert_array_equal(infer(c, "addk"), X + 2)
        np.testing.assert_array_equal(infer(c, "twice"), X + 4)
        assert set(served(c.repository_index(), "addk")) == {"2"}

        # Incompatible: version 4 takes x [N, 8] where the stage feeds [N, 4].
        (repo / "addk" / "3" / "model.onnx").unlink()
        (repo / "addk" / "3").rmdir()
        d = repo / "addk" / "4"
        d.mkdir()
        onnx.save(renamed_output_model(4, out="y", width=8), str(d / "model.onnx"))
        with pytest.raises(SipError) as ei:
            c.load_model("addk")
        msg = str(ei.value)
        assert "pipeline 'twice' stage 'a'" in msg and "input 'x' has shape [-1, 8]" in msg, msg
        assert "[-1, 4]" in msg, msg
        np.testing.assert_array_equal(infer(c, "twice"), X + 4)
        assert set(served(c.repository_index(), "addk")) == {"2"}

        # Unloading what the pipeline runs on is refused; the model serves on.
        with pytest.raises(SipError) as ei:
            c.unload_model("addk")
        assert "pipeline 'twice' stage 'a' runs on it" in str(ei.value)
        np.testing.assert_array_equal(infer(c, "twice"), X + 4)
        r = sip(srv, "unload", "addk")
        assert r.returncode != 0 and "pipeline 'twice'" in r.stderr
    finally:
        assert srv.stop() == 0, srv.log_tail()


# ---------------------------------------------------------------------------
# load with a Triton model config (tritonclient's load_model(config=...))

def model_config(base, name):
    r = K.get(base + "/v2/models/%s/config" % name)
    assert r.status == 200, r
    return r.json()


def load_with(base, name, config):
    text = config if isinstance(config, str) else json.dumps(config)
    return post(base, "/v2/repository/models/%s/load" % name,
                json.dumps({"parameters": {"config": text}}).encode())


def test_load_with_a_triton_config(start_sipd, tmp_path):
    repo = tmp_path / "repo"
    add_version(repo, "addk", 1)
    srv = start(start_sipd, repo)
    base = K.http_base(srv)
    c = srv.client()
    cfg = model_config(base, "addk")
    assert cfg["instance_group"][0]["count"] == 1 and cfg["max_batch_size"] == 0
    assert cfg["platform"] == "onnxruntime_onnx"

    # What Triton's client sends: instance count, batching, declared I/O.
    triton = {"name": "addk", "platform": "onnxruntime_onnx", "max_batch_size": 8,
              "dynamic_batching": {"preferred_batch_size": [2, 4],
                                   "max_queue_delay_microseconds": "500"},
              "instance_group": [{"count": 2, "kind": "KIND_CPU"},
                                 {"count": 1, "kind": "KIND_AUTO"}],
              "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [4]}],
              "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1, 4]}],
              "optimization": {}, "parameters": {}, "model_warmup": []}
    r = load_with(base, "addk", triton)
    assert r.status == 200, r.body
    cfg = model_config(base, "addk")
    assert cfg["instance_group"][0]["count"] == 3
    assert cfg["max_batch_size"] == 8
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [2, 4]
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 500
    np.testing.assert_array_equal(infer(c, "addk"), X + 1)

    # The config the server reports loads back as it is (a round trip).
    assert load_with(base, "addk", model_config(base, "addk")).status == 200
    assert model_config(base, "addk")["instance_group"][0]["count"] == 3

    # Refused with a clear 400, and what serves stays.
    cases = [
        ({"name": "other"}, "name is not the model's"),
        ({"platform": "tensorrt_plan"}, "platform is not onnxruntime_onnx"),
        ({"instance_group": [{"count": 1, "kind": "KIND_GPU"}]}, "KIND_GPU cannot be served"),
        ({"instance_group": [{"count": 0}]}, "instance_group count 0 is out of range"),
        ({"max_batch_size": -1}, "max_batch_size -1 is out of range"),
        ({"max_batch_size": 0, "dynamic_batching": {}}, "dynamic_batching needs max_batch_size"),
        ({"max_batch_size": 2, "dynamic_batching": {"preferred_batch_size": [4]}},
         "preferred_batch_size 4 is larger than max_batch_size 2"),
        ({"sequence_batching": {"max_sequence_idle_microseconds": 5}},
         "field 'sequence_batching' is not supported"),
        ({"colour": "blue"}, "unknown field 'colour'"),
        ({"backend_options": {"custom_op_library": "/tmp/x.so"}},
         "backend_options cannot be changed"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
    ]
    for body, want in cases:
        err = error_of(load_with(base, "addk", body), 400)
        assert want in err and err.startswith("model config: "), (body, err)
    r = post(base, "/v2/repository/models/addk/load",
             json.dumps({"parameters": {"config": {"max_batch_size": 1}}}).encode())
    assert "config is not a string" in error_of(r, 400)
    r = post(base, "/v2/repository/models/addk/load",
             json.dumps({"parameters": {"file:1/model.onnx": "AAAA"}}).encode())
    assert "model files in a load request" in error_of(r, 400)
    assert model_config(base, "addk")["instance_group"][0]["count"] == 3

    # Declared I/O that does not fit the model: the load fails, 1 stays.
    for io, want in [({"input": [{"name": "z", "data_type": "TYPE_FP32"}]},
                      "input 'z' is not an input of the model"),
                     ({"input": [{"name": "x", "data_type": "TYPE_INT64"}]},
                      "data_type is TYPE_INT64, but the model's is TYPE_FP32"),
                     ({"output": [{"name": "y", "dims": [5]}]}, "dims [5] do not fit")]:
        r = load_with(base, "addk", io)
        assert r.status == 400 and want in json.loads(r.body)["error"], (io, r.body)
        np.testing.assert_array_equal(infer(c, "addk"), X + 1)
        assert model_config(base, "addk")["instance_group"][0]["count"] == 3

    # The native client takes a dict; a later load without one goes back to
    # the repository's own settings.
    c.load_model("addk", config={"instance_group": [{"count": 2}], "max_batch_size": 4})
    cfg = model_config(base, "addk")
    assert cfg["instance_group"][0]["count"] == 2 and cfg["max_batch_size"] == 4
    with pytest.raises(InvalidArgumentError, match="unknown field 'colour'"):
        c.load_model("addk", config='{"colour": 1}')
    c.load_model("addk")
    cfg = model_config(base, "addk")
    assert cfg["instance_group"][0]["count"] == 1 and cfg["max_batch_size"] == 0
    np.testing.assert_array_equal(infer(c, "addk"), X + 1)

    # version_policy: serve every version.
    add_version(repo, "addk", 2)
    assert load_with(base, "addk", {"version_policy": {"all": {}}}).status == 200
    assert set(served(c.repository_index(), "addk")) == {"1", "2"}
    assert load_with(base, "addk", {"version_policy": {"specific": {"versions": ["1"]}}}
                     ).status == 200
    assert set(served(c.repository_index(), "addk")) == {"1"}
