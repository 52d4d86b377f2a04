"""The runtime state checkpoint (server.state_dir) of a real sipd: repository
loads (with their Triton model config) and unloads survive a restart; a
state file that cannot be used is moved aside with a log line and sipd starts
from its config; a write cut short leaves the previous state in force."""

import json
import re
import subprocess

import numpy as np
import pytest

import harness
from cann_sip import InferenceRequest
from test_repository import X, add_version

STATE = "state.json"


def make_repo(tmp_path):
    repo = tmp_path / "repo"
    add_version(repo, "a", 1)   # y = x + 1
    add_version(repo, "b", 1)
    return repo


def start(start_sipd, repo, state_dir, control):
    return start_sipd([], server={"model_repository": str(repo), "model_control": control,
                                  "state_dir": str(state_dir)})


def index(srv):
    """{name: (state, reason)} of the repository index, versions aside."""
    out = {}
    for e in srv.client().repository_index():
        if "version" not in e or e.get("default"):
            out[e["name"]] = (e["state"], e.get("reason", ""))
    return out


def pool(srv, name):
    for p in srv.client().pools():
        if p["name"] == name:
            return p
    return None


def infer_a(srv):
    r = srv.client().infer(InferenceRequest("a", {"x": X}))
    np.testing.assert_array_equal(r.outputs["y"], X + 1)


def restart(start_sipd, srv, repo, state_dir, control):
    assert srv.stop() == 0, srv.log_tail()
    return start(start_sipd, repo, state_dir, control)


def test_explicit_load_with_config_restored(start_sipd, tmp_path):
    repo, state_dir = make_repo(tmp_path), tmp_path / "state"
    srv = start(start_sipd, repo, state_dir, "explicit")
    assert pool(srv, "a") is None
    srv.client().load_model("a", config={"instance_group": [{"count": 2}]})
    infer_a(srv)
    doc = json.loads((state_dir / STATE).read_text())
    assert doc["format"] == "sip-state" and doc["version"] == 1
    entry = doc["repository"]["models"]["a"]
    assert entry["loaded"] is True
    assert json.loads(entry["config"]) == {"instance_group": [{"count": 2}]}
    assert "b" not in doc["repository"]["models"]
    assert not (state_dir / (STATE + ".tmp")).exists()

    srv = restart(start_sipd, srv, repo, state_dir, "explicit")
    p = pool(srv, "a")
    assert p is not None and p["state"] == "READY", srv.log_tail()
    assert p["pool_size"] == 2  # the load's model config came back too
    assert pool(srv, "b") is None  # never loaded: still not loaded
    infer_a(srv)
    assert "state restored" in srv.log()


def test_startup_unload_restored(start_sipd, tmp_path):
    repo, state_dir = make_repo(tmp_path), tmp_path / "state"
    srv = start(start_sipd, repo, state_dir, "startup")
    assert pool(srv, "a") and pool(srv, "b")
    srv.client().unload_model("b")
    doc = json.loads((state_dir / STATE).read_text())
    assert doc["repository"]["models"]["b"] == {"loaded": False}

    srv = restart(start_sipd, srv, repo, state_dir, "startup")
    assert pool(srv, "b") is None, "b was loaded again after a restart"
    assert index(srv)["b"] == ("UNAVAILABLE", "unloaded")
    infer_a(srv)
    # Loading it again is recorded too.
    srv.client().load_model("b")
    srv = restart(start_sipd, srv, repo, state_dir, "startup")
    assert pool(srv, "b") is not None


@pytest.mark.parametrize("content", [
    '{"format": "sip-state", "version": 1, "repository": {"models": {"b": {"loa',  # truncated
    "\x00\x01 not json at all",
    '{"format": "sip-state", "version": 99, "repository": {"models": {}}}',
    '{"format": "something-else", "version": 1}',
], ids=["truncated", "garbage", "foreign-version", "foreign-format"])
def test_unusable_state_moved_aside(start_sipd, tmp_path, content):
    repo, state_dir = make_repo(tmp_path), tmp_path / "state"
    state_dir.mkdir()
    (state_dir / STATE).write_text(content)
    srv = start(start_sipd, repo, state_dir, "startup")
    # Started from the config: every repository model loaded.
    assert pool(srv, "a") and pool(srv, "b")
    infer_a(srv)
    aside = [p for p in state_dir.iterdir() if p.name.startswith(STATE + ".corrupt-")]
    assert len(aside) == 1
    assert re.fullmatch(r"state\.json\.corrupt-\d+", aside[0].name)
    assert aside[0].read_text() == content
    assert not (state_dir / STATE).exists()
    log = srv.log()
    assert "state file unusable, moved aside" in log, srv.log_tail()
    assert aside[0].name in log
    # The next change writes a fresh file.
    srv.client().unload_model("b")
    doc = json.loads((state_dir / STATE).read_text())
    assert doc["repository"]["models"] == {"b": {"loaded": False}}


def test_write_cut_short_leaves_previous_state(start_sipd, tmp_path):
    """A crash during a write leaves state.json.tmp beside the previous
    state.json (the file is replaced by rename): the previous state holds."""
    repo, state_dir = make_repo(tmp_path), tmp_path / "state"
    srv = start(start_sipd, repo, state_dir, "startup")
    srv.client().unload_model("b")
    srv.kill()  # no drain, no final write
    srv.returncode = -9
    (state_dir / (STATE + ".tmp")).write_text('{"format": "sip-state", "vers')
    srv = start(start_sipd, repo, state_dir, "startup")
    assert pool(srv, "b") is None
    assert pool(srv, "a") is not None
    assert not (state_dir / (STATE + ".tmp")).exists()
    assert not [p for p in state_dir.iterdir() if "corrupt" in p.name]


def test_state_dir_not_writable_refused(sipd_bin, tmp_path):
    repo = make_repo(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    srv = harness.SipServer(tmp_path / "srv", [], server={
        "model_repository": str(repo), "state_dir": str(blocker)})
    try:
        srv.write_config()
        r = subprocess.run([str(sipd_bin), "--config", str(srv.config_path)],
                           capture_output=True, text=True, timeout=30, env=harness.sipd_env())
    finally:
        srv.kill()
    assert r.returncode == 1
    assert "server.state_dir %s is not a writable directory" % blocker in r.stderr, r.stderr
