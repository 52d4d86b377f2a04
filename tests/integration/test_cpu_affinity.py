"""cpu_affinity: a pool's session threads and its own intra-op threads run
only on the CPUs it names; every other thread keeps the process's CPUs; a
CPU the process may not use fails that pool alone, with a reason."""

import os

import numpy as np
import pytest

from cann_sip import InferenceRequest, UnavailableError
from harness import serve
import models

ALLOWED = sorted(os.sched_getaffinity(0))
PIN = ALLOWED[-1]
OUTSIDE = next(k for k in range(1024) if k not in ALLOWED)


def cpu_list(text):
    """'0-2,5' -> {0, 1, 2, 5}"""
    cpus = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def threads(pid):
    """[(name, allowed CPUs)] of every thread of process pid."""
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        base = "/proc/%d/task/%s/" % (pid, tid)
        with open(base + "comm") as f:
            name = f.read().strip()
        with open(base + "status") as f:
            allowed = [ln.split(":", 1)[1] for ln in f if ln.startswith("Cpus_allowed_list:")][0]
        out.append((name, cpu_list(allowed)))
    return out


@pytest.fixture(scope="module")
def srv(sipd_bin, model_dir, tmp_path_factory):
    pools = [
        # own_intra_op_threads 3: ONNX Runtime starts 2 threads of its own
        # for this pool (the session thread is the third).
        {"name": "pinned", "model_path": str(model_dir["addmul"]), "pool_size": 2,
         "cpu_affinity": [PIN], "backend_options": {"own_intra_op_threads": 3}},
        {"name": "free", "model_path": str(model_dir["addmul"]), "pool_size": 1},
        {"name": "outside", "model_path": str(model_dir["addmul"]), "pool_size": 1,
         "cpu_affinity": "%d" % OUTSIDE},
    ]
    with serve(tmp_path_factory.mktemp("affinity"), pools) as s:
        yield s


def test_session_threads_are_named_and_pinned(srv):
    ts = dict(threads(srv.proc.pid))
    assert ts["pinned/0"] == {PIN} and ts["pinned/1"] == {PIN}, ts
    assert ts["free/0"] == set(ALLOWED), ts


@pytest.mark.skipif(len(ALLOWED) < 2, reason="one CPU: a pinned set equals the whole set")
def test_only_the_pools_threads_are_pinned(srv):
    ts = threads(srv.proc.pid)
    pinned = sorted(name for name, cpus in ts if cpus == {PIN})
    # The two sessions and ONNX Runtime's two threads for the pool (named
    # after the thread that created them); everything else, the loading
    # thread included, has the process's CPUs.
    assert pinned == ["pinned/0", "pinned/1", "sipd", "sipd"], ts
    assert all(cpus == set(ALLOWED) for _, cpus in ts if cpus != {PIN}), ts


def test_pinned_pool_serves(srv):
    rng = np.random.default_rng(3)
    with srv.client() as c:
        for _ in range(20):
            lhs = rng.standard_normal((3, 4)).astype(np.float32)
            rhs = rng.standard_normal((3, 4)).astype(np.float32)
            r = c.infer(InferenceRequest("pinned", {"lhs": lhs, "rhs": rhs}))
            np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(lhs, rhs), rtol=1e-6)


def test_status_shows_the_cpus(srv):
    with srv.client() as c:
        pools = {p["name"]: p for p in c.pools()}
    assert pools["pinned"]["cpu_affinity"] == [PIN]
    assert "cpu_affinity" not in pools["free"]


def test_unavailable_cpu_fails_only_that_pool(srv):
    with srv.client() as c:
        pools = {p["name"]: p for p in c.pools()}
        assert pools["outside"]["state"] == "FAILED"
        err = pools["outside"]["error"]
        assert "cpu_affinity names CPU %d, which this process may not run on" % OUTSIDE in err
        assert "expected CPUs among" in err
        assert pools["pinned"]["state"] == "READY" and pools["free"]["state"] == "READY"
        with pytest.raises(UnavailableError):
            c.infer(InferenceRequest("outside", {"lhs": np.ones((1, 4), np.float32),
                                                 "rhs": np.ones((1, 4), np.float32)}))
