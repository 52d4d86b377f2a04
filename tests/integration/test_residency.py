"""Residency under the memory budget (docs/elastic.md "Residency"): an
on_demand pool is listed UNLOADED and loads at its first request, which waits
in its queue; under server.memory_budget_mb idle on_demand models are evicted
least recently used first to make room; a busy or pinned model never is;
without room the request fails at once with RESOURCE_EXHAUSTED naming what
holds the memory; a deadline that passes during the cold load is answered
DEADLINE_EXCEEDED. Models are generated ONNX files of known size
(test_repository.add_model, as test_memory makes them)."""


import os

import numpy as np
import onnx
import pytest

from harness import wait_until
from cann_sip import (DeadlineExceededError, InferenceRequest, InvalidArgumentError,
                      ResourceExhaustedError)
from test_events import read_event, subscribe
from test_grpc import grpc, grpc_address, pb  # noqa: F401 (pb: the generated stubs, a fixture)
from test_memory import OPTS, metrics, sanitized
from test_repository import add_model

MIB = 1 << 20
WEIGHTS_MIB = 40  # each on_demand model


@pytest.fixture(autouse=True)
def freed_memory_goes_back(monkeypatch):
    """Under AddressSanitizer a freed block waits in its quarantine (256 MiB)
    and goes back to the system only when later frees push it out, at a
    moment no test chooses: a load's measured rise, and what the models
    hold, would then depend on what the loads before it freed. The budget
    arithmetic these tests check needs frees that return at once, as they
    do without the sanitizers; use-after-free is still caught at the free,
    and by every other test."""
    if sanitized():
        opts = os.environ.get("ASAN_OPTIONS", "")
        monkeypatch.setenv("ASAN_OPTIONS", (opts + ":" if opts else "") + "quarantine_size_mb=0")


def model_file(tmp_path, name, k, weights_mib):
    path = tmp_path / ("%s.onnx" % name)
    onnx.save(add_model(k, weights_mib), str(path))
    return path


def on_demand(name, path, **kw):
    p = {"name": name, "model_path": str(path), "pool_size": 1, "backend_options": OPTS,
         "residency": "on_demand"}
    p.update(kw)
    return p


def pinned(name, path):
    return {"name": name, "model_path": str(path), "pool_size": 1, "backend_options": OPTS}


def pools_by_name(c):
    return {p["name"]: p for p in c.status()["pools"]}


def state(c, name):
    return pools_by_name(c)[name]["state"]


def x(k=1.0):
    return np.full((2, 4), k, np.float32)


def infer(c, name, v=1.0, **kw):
    return c.infer(InferenceRequest(name, {"x": x(v)}, **kw))


def wait_ready(c, name):
    """Queued requests run as soon as a load has started the sessions, a
    moment before the pool is listed READY."""
    wait_until(lambda: state(c, name) == "READY", what="%s READY" % name)


def check_answer(c, name, k):
    """The model `name` (y = x + k) answers correctly, and is READY."""
    y = infer(c, name, 1.0).outputs["y"]
    np.testing.assert_allclose(y, x(1.0) + k)
    wait_ready(c, name)


def budget_for_two(sizes):
    """A budget (MiB) that holds the pinned anchor and two on_demand models
    (each keeps M: what this build measured; the sanitizers multiply it)
    but not three, under the room a load asks for: what the model keeps
    plus how far its load rises above that (X, measured). A model not
    loaded yet is expected to keep its file's size F and to rise E above
    it: F times the largest rise the server measured so far as a share of
    what a model was expected to keep, at least F (the three models are
    alike, so E = max(X, F) once the first has loaded). So, with the anchor
    apart: the second model's first load fits beside the first (M + F + E),
    a third's first load does not fit beside two (2M + F + E) and makes one
    go, and an evicted model's next load fits beside one other (2M + X)
    without both going. The middle of that window."""
    m, x, f = sizes["a"], sizes["a_extra"], WEIGHTS_MIB * MIB
    e = max(x, f)
    lo, hi = max(m + f + e, 2 * m + x), 2 * m + f + e
    assert lo < hi, "no budget holds two of these models but not three: %r" % sizes
    return int((sizes["anchor"] + (lo + hi) / 2) / MIB)


def measured(start_sipd, pools, on_demand_pools=()):
    """memory_bytes of each pool when `pools` load pinned, and then each of
    `on_demand_pools` at its first request, in a sipd of their own without a
    budget (the figures the budget is set from); NAME_extra: how far an
    on_demand pool's load rose above what it kept."""
    probe = start_sipd(list(pools) + list(on_demand_pools), server={"http": "127.0.0.1:0"})
    c = probe.client()
    for p in on_demand_pools:
        infer(c, p["name"])
        wait_ready(c, p["name"])
    out = {}
    for n, p in pools_by_name(c).items():
        out[n] = p["memory_bytes"]
        out[n + "_extra"] = p["load_extra_bytes"]
    # Parsing the file and building the session free what they used.
    for p in on_demand_pools:
        assert out[p["name"] + "_extra"] > 0, out
    return out


@pytest.fixture
def three_models(tmp_path):
    return {n: model_file(tmp_path, n, k, WEIGHTS_MIB) for n, k in (("a", 1), ("b", 2), ("c", 3))}


def test_on_demand_model_is_unloaded_until_its_first_request(start_sipd, tmp_path):
    path = model_file(tmp_path, "m", 5, 1)
    srv = start_sipd([on_demand("m", path)], server={"http": "127.0.0.1:0"})
    c = srv.client()
    # Listed, not loaded: the server is ready (an on_demand model is ready to
    # serve: its first request loads it).
    assert state(c, "m") == "UNLOADED"
    assert c.info(1)["ready"] is True
    before = metrics(srv)
    assert before[("sip_residency_cold_starts_total", "")] == 0
    events = subscribe(srv.endpoint, "m")
    check_answer(c, "m", 5.0)
    assert state(c, "m") == "READY"
    check_answer(c, "m", 5.0)
    m = metrics(srv)
    assert m[("sip_residency_cold_starts_total", "")] == 1
    assert m[("sip_residency_hits_total", "")] == 1
    assert m[("sip_residency_cold_start_seconds_count", "")] == 1
    assert m[("sip_residency_cold_start_seconds_sum", "")] > 0
    assert m[("sip_residency_evictions_total", "")] == 0
    # POOL_LOADED, then MODEL_LOADED; the sessions' STATE_CHANGEs and the
    # first request's own events may come before them (queued requests run
    # as soon as the sessions start).
    kinds = []
    while "MODEL_LOADED" not in kinds and len(kinds) < 16:
        ev = read_event(events)
        kinds.append(ev["event"])
        if ev["event"] == "MODEL_LOADED":
            assert ev["pool"] == "m" and "loaded on demand" in ev["message"], ev
    assert kinds.count("MODEL_LOADED") == 1 and kinds.count("POOL_LOADED") == 1, kinds
    assert kinds.index("POOL_LOADED") < kinds.index("MODEL_LOADED"), kinds
    events.close()


def test_lru_eviction_under_a_budget_that_holds_two(start_sipd, tmp_path, three_models):
    # A pinned model without weights takes the runtime's one-time set-up, so
    # each on_demand model measures about its weights.
    anchor = model_file(tmp_path, "anchor", 9, 0)
    sizes = measured(start_sipd, [pinned("anchor", anchor)], [on_demand("a", three_models["a"])])
    pools = [pinned("anchor", anchor)] + [on_demand(n, p) for n, p in three_models.items()]
    srv = start_sipd(pools, server={"http": "127.0.0.1:0",
                                    "memory_budget_mb": budget_for_two(sizes)})
    c = srv.client()
    check_answer(c, "a", 1.0)
    check_answer(c, "b", 2.0)
    st = pools_by_name(c)
    assert (st["a"]["state"], st["b"]["state"], st["c"]["state"]) == ("READY", "READY",
                                                                      "UNLOADED")
    check_answer(c, "a", 1.0)  # a is now used more recently than b
    events = subscribe(srv.endpoint, "b")
    check_answer(c, "c", 3.0)  # room for c: b, the least recently used, goes
    for _ in range(20):  # b's sessions end (STATE_CHANGE), then MODEL_EVICTED
        ev = read_event(events)
        if ev["event"] == "MODEL_EVICTED":
            break
    assert ev["event"] == "MODEL_EVICTED", ev
    assert ev["pool"] == "b" and "to make room for 'c'" in ev["message"], ev
    events.close()
    st = pools_by_name(c)
    assert (st["a"]["state"], st["b"]["state"], st["c"]["state"]) == ("READY", "UNLOADED",
                                                                      "READY")
    assert st["anchor"]["state"] == "READY"
    check_answer(c, "b", 2.0)  # b loads again; a is now the least recently used
    st = pools_by_name(c)
    assert (st["a"]["state"], st["b"]["state"], st["c"]["state"]) == ("UNLOADED", "READY",
                                                                      "READY")
    m = metrics(srv)
    assert m[("sip_residency_evictions_total", "")] == 2
    assert m[("sip_residency_cold_starts_total", "")] == 4
    assert m[("sip_memory_models_bytes", "")] <= m[("sip_memory_budget_bytes", "")]


def test_busy_model_is_not_evicted(start_sipd, tmp_path, three_models):
    anchor = model_file(tmp_path, "anchor", 9, 0)
    sizes = measured(start_sipd, [pinned("anchor", anchor)], [on_demand("a", three_models["a"])])
    pools = [pinned("anchor", anchor)] + [on_demand(n, p) for n, p in three_models.items()]
    srv = start_sipd(pools, server={"http": "127.0.0.1:0", "allow_fault_injection": True,
                                    "memory_budget_mb": budget_for_two(sizes)})
    c = srv.client()
    check_answer(c, "a", 1.0)
    check_answer(c, "b", 2.0)
    # A request on a that runs long; then b is used after it arrived, so a
    # is the least recently used but busy.
    c.admin("fault", "a", kind="slow", count=1, delay_ms=3000)
    slow = c.infer_async(InferenceRequest("a", {"x": x(1.0)}))
    wait_until(lambda: pools_by_name(c)["a"]["sessions"][0]["state"] == "RUNNING",
               what="a's request running")
    check_answer(c, "b", 2.0)
    check_answer(c, "c", 3.0)  # room for c: not a (busy), b goes
    st = pools_by_name(c)
    assert (st["a"]["state"], st["b"]["state"], st["c"]["state"]) == ("READY", "UNLOADED",
                                                                      "READY")
    np.testing.assert_allclose(slow.result(timeout=60).outputs["y"], x(1.0) + 1.0)


def test_no_room_fails_at_once_naming_the_holders(start_sipd, tmp_path):
    big = model_file(tmp_path, "big", 1, WEIGHTS_MIB)
    other = model_file(tmp_path, "other", 2, WEIGHTS_MIB)
    # The pinned model alone takes most of the budget (what this build
    # measures for it, plus half the other's file); it is never evicted.
    big_bytes = measured(start_sipd, [pinned("big", big)])["big"]
    srv = start_sipd([pinned("big", big), on_demand("other", other)],
                     server={"http": "127.0.0.1:0",
                             "memory_budget_mb": int(big_bytes / MIB + WEIGHTS_MIB / 2)})
    c = srv.client()
    with pytest.raises(ResourceExhaustedError) as ei:
        infer(c, "other")
    msg = str(ei.value)
    assert "no room to load model 'other'" in msg, msg
    assert "server.memory_budget_mb" in msg and "'big'" in msg and "pinned" in msg, msg
    st = pools_by_name(c)
    assert (st["big"]["state"], st["other"]["state"]) == ("READY", "UNLOADED")
    check_answer(c, "big", 1.0)
    # Asked again, it is refused again (the load is tried each time).
    with pytest.raises(ResourceExhaustedError, match="no room"):
        infer(c, "other")
    assert metrics(srv)[("sip_residency_evictions_total", "")] == 0


def test_deadline_passing_during_a_cold_load(start_sipd, tmp_path):
    path = model_file(tmp_path, "m", 4, WEIGHTS_MIB)
    srv = start_sipd([on_demand("m", path)], server={"http": "127.0.0.1:0"})
    c = srv.client()
    # Reading and parsing 40 MiB of weights takes far longer than 1 ms.
    with pytest.raises(DeadlineExceededError, match="past its timeout of 1 ms"):
        infer(c, "m", timeout_ms=1)
    wait_ready(c, "m")
    check_answer(c, "m", 4.0)


def test_requests_queued_during_a_cold_load_all_answer(start_sipd, tmp_path):
    path = model_file(tmp_path, "m", 6, WEIGHTS_MIB)
    srv = start_sipd([on_demand("m", path)], server={"http": "127.0.0.1:0"})
    c = srv.client()
    futures = [c.infer_async(InferenceRequest("m", {"x": x(float(i))})) for i in range(8)]
    # One with an input the model does not have, queued while its inputs are
    # not known yet, is refused once they are.
    wrong = c.infer_async(InferenceRequest("m", {"z": x(1.0)}))
    for i, f in enumerate(futures):
        np.testing.assert_allclose(f.result(timeout=60).outputs["y"], x(float(i)) + 6.0)
    with pytest.raises(InvalidArgumentError, match="pool 'm' has no input 'z'"):
        wrong.result(timeout=60)
    wait_ready(c, "m")
    # Each waited for the load (a cold start) unless it came once the
    # model's inputs were known (a hit).
    m = metrics(srv)
    cold = m[("sip_residency_cold_starts_total", "")]
    assert cold >= 1 and cold + m[("sip_residency_hits_total", "")] == 9, m


def test_on_demand_with_sequence_batching_is_refused(start_sipd, tmp_path):
    from harness import SipServer
    path = model_file(tmp_path, "m", 1, 0)
    srv = SipServer(tmp_path / "bad", [on_demand("m", path, sequence_batching={})])
    srv.write_config()
    import subprocess
    import harness
    r = subprocess.run([str(harness.require_sipd()), "--check-config", str(srv.config_path)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "residency" in r.stderr and "sequence_batching" in r.stderr, r.stderr


def test_repository_models_are_on_demand_under_a_budget(start_sipd, tmp_path):
    from test_repository import add_version
    repo = tmp_path / "repo"
    add_version(repo, "lazy", 1, k=7)
    (repo / "kept").mkdir(parents=True)
    add_version(repo, "kept", 1, k=8)
    (repo / "kept" / "config.yaml").write_text("residency: pinned\n")
    srv = start_sipd([], server={"model_repository": str(repo), "http": "127.0.0.1:0",
                                 "memory_budget_mb": 4096})
    c = srv.client()
    assert (state(c, "lazy"), state(c, "kept")) == ("UNLOADED", "READY")
    check_answer(c, "lazy", 7.0)
    assert state(c, "lazy") == "READY"
    check_answer(c, "kept", 8.0)


def test_repository_models_are_pinned_without_a_budget(start_sipd, tmp_path):
    from test_repository import add_version
    repo = tmp_path / "repo"
    add_version(repo, "m", 1, k=7)
    srv = start_sipd([], server={"model_repository": str(repo), "http": "127.0.0.1:0"})
    assert state(srv.client(), "m") == "READY"


def test_http_and_grpc_see_an_on_demand_model_ready_and_serve_it(start_sipd, tmp_path):
    import kserve as K
    path = model_file(tmp_path, "m", 3, 1)
    srv = start_sipd([on_demand("m", path)], server={"http": "127.0.0.1:0"})
    base = K.http_base(srv)
    assert K.get(base + "/v2/models/m/ready").status == 200
    reply = K.infer(base, "m", {"x": x(1.0)})
    assert reply.status == 200, reply
    _, out = K.decode_outputs(reply)
    np.testing.assert_allclose(out["y"], x(1.0) + 3.0)


def test_grpc_model_ready_for_an_on_demand_model(start_sipd, tmp_path, pb):
    path = model_file(tmp_path, "m", 3, 1)
    srv = start_sipd([on_demand("m", path)], server={"grpc": "127.0.0.1:0"})
    ch = grpc.insecure_channel(grpc_address(srv))
    try:
        stub = pb.svc.GRPCInferenceServiceStub(ch)
        assert stub.ModelReady(pb.pb.ModelReadyRequest(name="m")).ready is True
        assert state(srv.client(), "m") == "UNLOADED"  # asking does not load it
    finally:
        ch.close()


def test_reload_makes_a_pool_on_demand(start_sipd, tmp_path):
    import signal
    path = model_file(tmp_path, "m", 2, 1)
    srv = start_sipd([pinned("m", path)])
    c = srv.client()
    assert state(c, "m") == "READY"
    srv.pools = [on_demand("m", path)]
    srv.write_config()
    srv.send_signal(signal.SIGHUP)
    wait_until(lambda: state(c, "m") == "UNLOADED", what="m UNLOADED after the reload")
    check_answer(c, "m", 2.0)


def test_quotas_changed_at_run_time_survive_an_eviction(start_sipd, tmp_path):
    a, b = model_file(tmp_path, "a", 1, WEIGHTS_MIB), model_file(tmp_path, "b", 2, WEIGHTS_MIB)
    anchor = model_file(tmp_path, "anchor", 9, 0)
    sizes = measured(start_sipd, [pinned("anchor", anchor)], [on_demand("a", a)])
    f = WEIGHTS_MIB * MIB
    # Room for one of the two beside the anchor: b's first load (its file
    # and a rise of at least its file) does not fit beside a.
    budget = int((sizes["anchor"] + f + max(sizes["a_extra"], f) + sizes["a"] / 2) / MIB)
    srv = start_sipd([pinned("anchor", anchor), on_demand("a", a), on_demand("b", b)],
                     server={"http": "127.0.0.1:0", "memory_budget_mb": budget})
    c = srv.client()
    check_answer(c, "a", 1.0)
    quota = {"max_memory_mb": 4096, "max_compute_percent": 30}
    c.update_pool("a", **quota)
    check_answer(c, "b", 2.0)  # a goes to make room
    assert state(c, "a") == "UNLOADED"
    described = {p["name"]: p for p in c.pools()}
    assert described["a"]["resource_quota"] == quota, described["a"]
    check_answer(c, "a", 1.0)  # loaded again, b goes, with the quota it was given
    described = {p["name"]: p for p in c.pools()}
    assert described["a"]["resource_quota"] == quota, described["a"]
    assert metrics(srv)[("sip_residency_evictions_total", "")] == 2
