"""Changing a serving pool at run time (sip pool update, docs/availability.md):
its size grows on new sessions of the loaded model and shrinks as the last
sessions finish their work, without failing a request; its quotas change;
the change is a POOL_SCALED event; with server.state_dir it survives a
restart, with the sessions taken out of service, until the pool is
reloaded."""

import json

import pytest

import harness
import kserve as K
import onnx
from cann_sip import (FailedPreconditionError, InvalidArgumentError,
                      ResourceExhaustedError)
from test_events import read_event, subscribe
from test_failover import pool, req, sip_cli, status_of
from test_sequence import pool as seq_pool, seq_model
from test_state import make_repo, pool as repo_pool, infer_a



def sessions(c, name):
    return [(s["id"], s["state"]) for s in status_of(c, name)["sessions"]]


def described(c, name):
    return next(p for p in c.pools() if p["name"] == name)


def test_grow_serves_on_the_new_sessions(start_sipd):
    # Each execution takes 100 ms: with 4 sessions, 8 requests take ~200 ms
    # and every session runs two.
    srv = start_sipd([pool("p", 1, backend_options={"shape": "-1", "delay_ms": 100})])
    c = srv.client()
    ans = c.admin("update", "p", pool_size=4)
    assert ans["pool_size"] == 4
    assert sessions(c, "p") == [("p/%d" % i, "READY") for i in range(4)]
    assert described(c, "p")["pool_size"] == 4
    futs = [c.infer_async(req("p", float(i))) for i in range(8)]
    assert [f.result(timeout=10)["output"][0] for f in futs] == [float(i) for i in range(8)]
    ran = sorted(s["inferences"] for s in status_of(c, "p")["sessions"])
    assert ran == [2, 2, 2, 2], ran
    # The threads are named after their sessions, like those started at load.
    names = set()
    import os
    for tid in os.listdir("/proc/%d/task" % srv.proc.pid):
        with open("/proc/%d/task/%s/comm" % (srv.proc.pid, tid)) as f:
            names.add(f.read().strip())
    assert {"p/0", "p/1", "p/2", "p/3"} <= names


def test_shrink_under_load_fails_nothing(start_sipd):
    srv = start_sipd([pool("p", 4, backend_options={"shape": "-1", "delay_ms": 20})])
    c = srv.client()
    futs = [c.infer_async(req("p", float(i))) for i in range(60)]
    # shrunk while some have run and the rest still queue
    harness.wait_until(lambda: (lambda st: st["stats"]["inference_count"] >= 4
                                and st["queued_requests"] > 0)(status_of(c, "p")),
                       what="pool p to have run 4 requests with more queued")
    c.admin("update", "p", pool_size=1)
    got = [f.result(timeout=30)["output"][0] for f in futs]
    assert got == [float(i) for i in range(60)]
    assert sessions(c, "p") == [("p/0", "READY")]
    st = status_of(c, "p")
    assert st["requests"].get("OK") == 60 and set(st["requests"]) == {"OK"}, st["requests"]
    # Grown again: the freed slots come back as new sessions.
    c.admin("update", "p", pool_size=2)
    assert sessions(c, "p") == [("p/0", "READY"), ("p/1", "READY")]
    assert c.infer(req("p", 7.0))["output"].tolist() == [7.0] * 3


def test_scaled_event(start_sipd):
    srv = start_sipd([pool("p", 1)])
    c = srv.client()
    sub = subscribe(srv.endpoint, "p")
    c.admin("update", "p", pool_size=3, max_compute_percent=40)
    sub.settimeout(10)
    e = read_event(sub)
    while e["event"] != "POOL_SCALED":
        e = read_event(sub)
    assert e["pool"] == "p"
    assert e["message"] == "pool_size 1 -> 3, max_compute_percent 0 -> 40", e
    sub.close()


def test_quotas_change(start_sipd):
    srv = start_sipd([pool("p", 1, resource_quota={"max_compute_percent": 50})],
                     server={"http": "127.0.0.1:0"})
    c = srv.client()
    assert described(c, "p")["resource_quota"] == {"max_memory_mb": 0, "max_compute_percent": 50}
    assert c.update_pool("p", max_compute_percent=20, max_memory_mb=4096) == {
        "ok": True, "pool": "p", "pool_size": 1, "max_memory_mb": 4096, "max_compute_percent": 20}
    assert described(c, "p")["resource_quota"] == {"max_memory_mb": 4096,
                                                   "max_compute_percent": 20}
    assert described(c, "p")["pool_size"] == 1
    # Over HTTP too, and in Triton's model configuration.
    reply = K.request("POST", K.http_base(srv) + "/v2/admin",
                      body=json.dumps({"action": "update", "pool": "p",
                                       "max_compute_percent": 30}).encode())
    assert reply.status == 200, reply
    reply = K.get(K.http_base(srv) + "/v2/models/p/config")
    cfg = json.loads(reply.body)
    assert reply.status == 200 and cfg["resource_quota"]["max_compute_percent"] == 30, cfg


def test_memory_quota_refuses_growth(start_sipd, model_dir):
    srv = start_sipd([{"name": "m", "model_path": str(model_dir["addmul"]), "pool_size": 1}])
    c = srv.client()
    used = status_of(c, "m")["memory_bytes"]
    # A quota below what the pool holds now is refused, and nothing changes.
    if used >= 1 << 20:
        with pytest.raises(ResourceExhaustedError) as ei:
            c.admin("update", "m", max_memory_mb=1)
        assert "its quota (max_memory_mb) allows 1 MiB" in str(ei.value)
        assert described(c, "m")["resource_quota"]["max_memory_mb"] == 0
    c.admin("update", "m", pool_size=2)
    assert len(sessions(c, "m")) == 2


def test_bad_updates(start_sipd):
    srv = start_sipd([pool("p", 1)])
    c = srv.client()
    with pytest.raises(InvalidArgumentError, match=r"pool_size\" must be an integer 1\.\.256"):
        c.admin("update", "p", pool_size=0)
    with pytest.raises(InvalidArgumentError, match=r"pool_size\" must be an integer 1\.\.256"):
        c.admin("update", "p", pool_size=300)
    with pytest.raises(InvalidArgumentError, match="nothing to change"):
        c.admin("update", "p")
    with pytest.raises(InvalidArgumentError, match=r"max_compute_percent\" must be an integer"):
        c.admin("update", "p", max_compute_percent=101)
    assert described(c, "p")["pool_size"] == 1


def test_sequence_pool_keeps_its_size(start_sipd, tmp_path):
    path = tmp_path / "seq.onnx"
    onnx.save(seq_model(onnx.TensorProto.UINT64), str(path))
    srv = start_sipd([seq_pool("s", path)])
    c = srv.client()
    with pytest.raises(FailedPreconditionError, match="batches sequences"):
        c.admin("update", "s", pool_size=2)
    # Its quotas may change.
    c.admin("update", "s", max_compute_percent=50)


def test_cli_pool_update(start_sipd):
    srv = start_sipd([pool("p", 1)])
    r = sip_cli(srv, "--json", "pool", "update", "p", "--size", "2", "--max-compute-percent", "60")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pool_size"] == 2
    r = sip_cli(srv, "pool", "update", "p", "--size")
    assert r.returncode == 2 and "usage" in r.stderr
    r = sip_cli(srv, "pool", "update", "nope", "--size", "2")
    assert r.returncode != 0 and "nope" in r.stderr


def test_checkpoint_restores_size_and_drained_sessions(start_sipd, tmp_path):
    state = tmp_path / "state"
    pools = [pool("p", 1), pool("q", 2)]
    srv = start_sipd(pools, server={"state_dir": str(state)})
    c = srv.client()
    c.admin("update", "p", pool_size=3, max_compute_percent=25)
    c.admin("drain", "p", session=2)
    doc = json.loads((state / "state.json").read_text())
    assert doc["pools"] == {"p": {"pool_size": 3, "max_compute_percent": 25, "drained": [2]}}
    assert srv.stop() == 0
    srv = start_sipd(pools, server={"state_dir": str(state)})
    c = srv.client()
    assert [s for _, s in sessions(c, "p")] == ["READY", "READY", "SUSPENDED"]
    assert described(c, "p")["resource_quota"]["max_compute_percent"] == 25
    assert len(sessions(c, "q")) == 2
    assert "state restored" in srv.log() and "pool=p pool_size=3" in srv.log()
    # Back to the config's values: nothing is recorded any more.
    c.admin("resume", "p", session=2)
    c.admin("update", "p", pool_size=1, max_compute_percent=0)
    assert json.loads((state / "state.json").read_text()).get("pools") == {}


def test_repository_model_size_restored_until_reloaded(start_sipd, tmp_path):
    repo, state = make_repo(tmp_path), tmp_path / "state"
    server = {"model_repository": str(repo), "model_control": "explicit",
              "state_dir": str(state)}
    srv = start_sipd([], server=server)
    c = srv.client()
    c.load_model("a")
    c.admin("update", "a", pool_size=3)
    assert srv.stop() == 0
    srv = start_sipd([], server=server)
    assert repo_pool(srv, "a")["pool_size"] == 3, srv.log_tail()
    infer_a(srv)
    # Loaded again with its files unchanged, the serving pool stays as it is.
    srv.client().load_model("a")
    assert repo_pool(srv, "a")["pool_size"] == 3
    assert json.loads((state / "state.json").read_text())["pools"]["a"] == {"pool_size": 3}
    # Loaded with another config, it serves that config: the change is forgotten.
    srv.client().load_model("a", config={"instance_group": [{"count": 2}]})
    assert repo_pool(srv, "a")["pool_size"] == 2
    assert "a" not in json.loads((state / "state.json").read_text()).get("pools", {})


def test_unusable_pool_entry_moves_the_state_aside(start_sipd, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text(json.dumps(
        {"format": "sip-state", "version": 1, "pools": {"p": {"pool_size": 999}}}))
    srv = start_sipd([pool("p", 1)], server={"state_dir": str(state)})
    assert described(srv.client(), "p")["pool_size"] == 1
    assert "state file unusable" in srv.log() and "setting out of range" in srv.log()
    assert list(state.glob("state.json.corrupt-*"))
