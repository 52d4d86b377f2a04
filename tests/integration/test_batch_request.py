"""BatchInferenceRequest (seed 000): the server splits a client-side batch into
hardware-sized chunks, pads the last one, and answers in input order."""

import numpy as np
import pytest

import models
from cann_sip import (BatchInferenceRequest, InferenceRequest, InvalidArgumentError,
                      NotFoundError)

F = np.float32


@pytest.fixture
def srv(start_sipd, model_dir):
    return start_sipd([
        {"name": "addmul", "model_path": str(model_dir["addmul"]), "pool_size": 2,
         "dynamic_batching": {"max_batch_size": 4}},
        {"name": "echo", "backend": "builtin", "backend_options": {"shape": "-1,3"}},
    ])


@pytest.mark.parametrize("padding", ["none", "replicate_last", "zero"])
def test_outputs_in_input_order(srv, padding):
    c = srv.client()
    rng = np.random.default_rng(7)
    items = [{"lhs": rng.standard_normal((1, 4)).astype(F), "rhs": rng.standard_normal((1, 4)).astype(F)}
             for _ in range(11)]
    r = c.batch_infer(BatchInferenceRequest(
        "addmul", items, batch_config={"max_batch_size": 4, "timeout_ms": 5000,
                                       "padding_strategy": padding}))
    lhs = np.concatenate([i["lhs"] for i in items])
    rhs = np.concatenate([i["rhs"] for i in items])
    np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(lhs, rhs), rtol=1e-6)
    assert len(r.batch_outputs) == 11
    for i, item in enumerate(items):
        np.testing.assert_allclose(r.batch_outputs[i]["y"],
                                   models.addmul_ref(item["lhs"], item["rhs"]), rtol=1e-6)


def test_chunks_and_padding_reach_the_model(srv):
    """11 items in chunks of 4 with padding: three executions of 4 rows."""
    c = srv.client()
    before = srv.pool_status("echo", c)
    items = [np.full((3,), i, F) for i in range(11)]  # rank - 1: one row each
    r = c.batch_infer(BatchInferenceRequest("echo", items, batch_config={
        "max_batch_size": 4, "padding_strategy": "replicate_last"}))
    np.testing.assert_array_equal(r.outputs["output"], np.stack(items))
    after = srv.pool_status("echo", c)
    assert after["stats"]["execution_count"] - before["stats"]["execution_count"] == 3
    rows = after["batch_sizes"]["sum"] - before["batch_sizes"]["sum"]
    assert rows == 12  # 4 + 4 + (3 + 1 replicated row)


def test_items_with_several_rows(srv):
    c = srv.client()
    items = [np.arange(6, dtype=F).reshape(2, 3) + 10 * i for i in range(5)]
    r = c.batch_infer(BatchInferenceRequest("echo", items, batch_config={"max_batch_size": 3}))
    np.testing.assert_array_equal(r.outputs["output"], np.concatenate(items))
    for i, item in enumerate(items):
        np.testing.assert_array_equal(r.batch_outputs[i]["output"], item)


def test_batch_errors(srv):
    c = srv.client()
    with pytest.raises(NotFoundError):
        c.batch_infer(BatchInferenceRequest("nope", [np.ones(3, F)]))
    with pytest.raises(InvalidArgumentError, match="padding_strategy"):
        c.batch_infer(BatchInferenceRequest("echo", [np.ones(3, F)],
                                            batch_config={"padding_strategy": "mirror"}))
    with pytest.raises(InvalidArgumentError, match="batch_config"):
        c.batch_infer(BatchInferenceRequest("echo", [np.ones(3, F)], batch_config={"size": 2}))
    with pytest.raises(InvalidArgumentError, match=r"\[-1,3\]"):
        c.batch_infer(BatchInferenceRequest("echo", [np.ones((1, 5), F)] * 5,
                                            batch_config={"max_batch_size": 2}))
    # The server keeps serving.
    assert c.infer(InferenceRequest("echo", {"input": np.ones((1, 3), F)})).outputs["output"].shape == (1, 3)
