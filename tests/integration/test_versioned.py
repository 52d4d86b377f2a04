"""Versioned model directories: model_path may name <dir>/<version>/model.onnx
trees; the highest numeric version is served unless a `current` link says
otherwise, and pools() reports the version and the file."""

import os

import numpy as np
import onnx
import pytest

from cann_sip import InferenceRequest
from harness import serve
import models


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    highest = root / "highest"
    for v, build in (("1", models.addmul), ("2", models.scalar), ("10", models.two_out)):
        (highest / v).mkdir(parents=True)
        onnx.save(build(), str(highest / v / "model.onnx"))
    pinned = root / "pinned"
    for v, build in (("1", models.addmul), ("2", models.two_out)):
        (pinned / v).mkdir(parents=True)
        onnx.save(build(), str(pinned / v / "model.onnx"))
    os.symlink("1", str(pinned / "current"))
    pools = [{"name": "highest", "model_path": str(highest)},
             {"name": "pinned", "model_path": str(pinned)}]
    with serve(root, pools) as s:
        yield s, root


def test_highest_numeric_version(srv):
    s, root = srv
    c = s.client()
    p = {p["name"]: p for p in c.pools()}["highest"]
    assert p["state"] == "READY" and p["version"] == "10"  # numeric order: 10 > 2
    assert p["model_path"].endswith(os.path.join("10", "model.onnx"))
    x = np.ones((2, 4), np.float32)
    r = c.infer(InferenceRequest("highest", {"x": x}))
    np.testing.assert_array_equal(r.outputs["sum"], x + x)


def test_current_link(srv):
    s, root = srv
    c = s.client()
    p = {p["name"]: p for p in c.pools()}["pinned"]
    assert p["state"] == "READY" and p["version"] == "1"
    a = np.full((1, 4), 2, np.float32)
    r = c.infer(InferenceRequest("pinned", {"lhs": a, "rhs": a}))
    np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(a, a))
