"""BatchInferenceRequest (seed 000): the server splits a client-side batch into
hardware-sized chunks, pads the last one, and answers in input order."""

import time

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


def test_outputs_one_result_per_item(srv):
    """len(outputs) is the number of items; outputs[i] is item i's dict and
    outputs["name"] every item's rows in order."""
    c = srv.client()
    items = [np.full((3,), i, F) for i in range(7)]
    r = c.batch_infer(BatchInferenceRequest("echo", items, batch_config={"max_batch_size": 3}))
    assert len(r.outputs) == 7
    for i in range(7):
        np.testing.assert_array_equal(r.outputs[i]["output"], items[i][np.newaxis])
    np.testing.assert_array_equal(r["output"], np.stack(items))
    assert list(r.outputs.keys()) == ["output"] and "output" in r.outputs
    assert [k for k, _ in r.outputs.items()] == ["output"]


@pytest.fixture
def slow_srv(start_sipd):
    return start_sipd([
        # Each execution takes 200 ms; a batch waits up to 3 s to fill.
        {"name": "slow", "backend": "builtin",
         "backend_options": {"shape": "-1,3", "delay_ms": 200},
         "dynamic_batching": {"max_batch_size": 4, "max_queue_delay_us": 3000000}},
    ])


def test_timeout_ms_is_the_wait_to_fill_a_batch(slow_srv):
    """batch_config.timeout_ms bounds the batcher's wait (instead of the
    pool's 3 s max_queue_delay) and is no deadline: chunks that compute for
    longer than it still answer."""
    c = slow_srv.client()
    t0 = time.monotonic()
    r = c.batch_infer(BatchInferenceRequest("slow", [np.ones(3, F)] * 6, batch_config={
        "max_batch_size": 2, "timeout_ms": 50}))
    took = time.monotonic() - t0
    assert len(r.outputs) == 6
    assert took < 2.0, took  # three chunks of 2 rows, none waiting 3 s
    # Without it the pool's wait applies: one row waits for the batch to fill.
    t0 = time.monotonic()
    c.batch_infer(BatchInferenceRequest("slow", [np.ones(3, F)], batch_config={"max_batch_size": 1}))
    assert time.monotonic() - t0 >= 2.5


def test_batch_timeout_checked(slow_srv):
    c = slow_srv.client()
    with pytest.raises(InvalidArgumentError, match="batch_timeout_ms"):
        c.batch_infer(BatchInferenceRequest("slow", [np.ones(3, F)],
                                            batch_config={"timeout_ms": -5}))
    with pytest.raises(InvalidArgumentError, match="batch_timeout_ms"):
        c.batch_infer(BatchInferenceRequest("slow", [np.ones(3, F)],
                                            batch_config={"timeout_ms": "soon"}))
