"""Well-formed requests that cannot be served: wrong dtype, shape, rank,
missing or unknown inputs, unknown pool. Each gets an INFER_RESPONSE with the
error code and a message naming the input and what was expected vs received;
the connection stays open and the server keeps serving. Every test runs on
both backends (the `backend` fixture: ONNX models on onnxruntime, their
TorchScript twins on torchscript) but the one about strings."""

import re

import numpy as np
import pytest

from cann_sip import (InferenceRequest, InternalError, InvalidArgumentError, NotFoundError,
                      SessionClient, SipError)
from harness import serve
import models
import torch_pools


@pytest.fixture(scope="module")
def srv(sipd_bin, backend, model_dir, torch_model_dir, tmp_path_factory):
    names = ["addmul", "id_int32", "scalar"] + (["id_string"] if backend == "onnxruntime" else [])
    pools = [torch_pools.pool(n, backend, model_dir, torch_model_dir, pool_size=1) for n in names]
    with serve(tmp_path_factory.mktemp("errors_" + backend), pools) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client()


F = np.float32
GOOD_A = np.arange(8, dtype=F).reshape(2, 4)
GOOD_B = np.full((2, 4), 3, dtype=F)


def norm(msg):
    return re.sub(r"\s+", "", msg).lower()


def mentions_shape(msg, dims):
    """True when the message shows the dims as a list, in any common style:
    [3, 5] / [3,5] / (3, 5) / 3x5; -1 may be written -1, ?, N or None."""
    m = norm(msg)
    wild = r"(?:-1|\?|n|none|dyn\w*)"
    parts = [wild if d == -1 else str(d) for d in dims]
    return bool(re.search(r"[\[(]" + r",".join(parts) + r"[\])]", m) or
                re.search(r"x".join(parts), m))


def check_serving(client, srv):
    r = client.infer(InferenceRequest("addmul", {"lhs": GOOD_A, "rhs": GOOD_B}))
    np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(GOOD_A, GOOD_B))
    srv.assert_alive()


def expect_error(client, srv, cls, pool, inputs, **kw):
    conn_before = client._conn
    with pytest.raises(cls) as ei:
        client.infer(InferenceRequest(pool, inputs, **kw))
    err = ei.value
    assert err.message, "error without a message"
    check_serving(client, srv)
    if conn_before is not None:
        assert client._conn is conn_before, "the server closed the connection on a request error"
    return err


def test_wrong_dtype(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul",
                       {"lhs": GOOD_A.astype(np.int32), "rhs": GOOD_B})
    m = err.message.lower()
    assert "lhs" in m, err.message
    assert "float32" in m and re.search(r"(?<!u)int32", m), err.message


def test_wrong_dtype_float64(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul",
                       {"lhs": GOOD_A, "rhs": GOOD_B.astype(np.float64)})
    m = err.message.lower()
    assert "rhs" in m and "float32" in m and "float64" in m, err.message


def test_wrong_dtype_float16(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul",
                       {"lhs": GOOD_A.astype(np.float16), "rhs": GOOD_B})
    m = err.message.lower()
    assert "lhs" in m and "float32" in m and "float16" in m, err.message


def test_string_for_numeric(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "id_int32",
                       {"data": np.array([["1"]], dtype=object), "scalar": np.int32(1)})
    m = err.message.lower()
    assert "data" in m and "int32" in m and "string" in m, err.message


def test_unsigned_for_signed(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "id_int32",
                       {"data": np.zeros((1, 1), np.uint32), "scalar": np.int32(1)})
    m = err.message.lower()
    assert "data" in m and "uint32" in m and re.search(r"(?<!u)int32", m), err.message


@pytest.mark.parametrize("backend", ["onnxruntime"], indirect=True, scope="module")
def test_numeric_for_string(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "id_string",
                       {"data": np.zeros((1, 1), np.int64), "scalar": "s"})
    m = err.message.lower()
    assert "data" in m and "int64" in m and "string" in m, err.message


def test_wrong_shape(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul",
                       {"lhs": np.zeros((3, 5), F), "rhs": np.zeros((3, 4), F)})
    assert "lhs" in err.message, err.message
    assert mentions_shape(err.message, [3, 5]), err.message
    assert mentions_shape(err.message, [-1, 4]), err.message


def test_wrong_rank(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul",
                       {"lhs": np.zeros(8, F), "rhs": GOOD_B})
    assert "lhs" in err.message
    assert mentions_shape(err.message, [8]), err.message
    assert mentions_shape(err.message, [-1, 4]), err.message


def test_scalar_expected(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "scalar",
                       {"scale": np.array([2.0], F), "vec": np.ones(3, F)})
    assert "scale" in err.message
    assert mentions_shape(err.message, [1]), err.message


def test_scalar_given_for_vector(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "scalar",
                       {"scale": np.float32(2), "vec": np.float32(1)})
    assert "vec" in err.message


def test_missing_input(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul", {"lhs": GOOD_A})
    assert "rhs" in err.message, err.message


def test_no_inputs(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul", {})
    assert "lhs" in err.message or "rhs" in err.message, err.message


def test_unknown_input(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul",
                       {"lhs": GOOD_A, "rhs": GOOD_B, "bogus_input": GOOD_A})
    assert "bogus_input" in err.message


def test_unknown_input_instead_of_known(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul",
                       {"lhs": GOOD_A, "RHS": GOOD_B})
    assert "RHS" in err.message or "rhs" in err.message, err.message


def test_duplicate_input(client, srv):
    err = expect_error(client, srv, InvalidArgumentError, "addmul",
                       [("lhs", GOOD_A), ("lhs", GOOD_A), ("rhs", GOOD_B)])
    assert "lhs" in err.message


def test_unknown_pool(client, srv):
    err = expect_error(client, srv, NotFoundError, "no_such_pool", {"lhs": GOOD_A})
    assert "no_such_pool" in err.message


def test_unknown_output(client, srv):
    err = expect_error(client, srv, (InvalidArgumentError, NotFoundError), "addmul",
                       {"lhs": GOOD_A, "rhs": GOOD_B}, outputs=["zzz"])
    assert "zzz" in err.message


def test_batch_mismatch_between_inputs(client, srv):
    """Both inputs are [N, 4] but with different N: the model itself fails
    (or the server catches it first). Either way a clean error."""
    expect_error(client, srv, (InvalidArgumentError, InternalError), "addmul",
                 {"lhs": np.zeros((2, 4), F), "rhs": np.zeros((3, 4), F)})


def test_errors_are_counted(client, srv):
    before = srv.pool_status("addmul", client)["requests"].get("INVALID_ARGUMENT", 0)
    for _ in range(3):
        with pytest.raises(InvalidArgumentError):
            client.infer(InferenceRequest("addmul", {"lhs": GOOD_A}))
    after = srv.pool_status("addmul", client)["requests"].get("INVALID_ARGUMENT", 0)
    assert after - before == 3


def test_error_among_pipelined_requests(client, srv):
    """Good and bad requests interleaved on one connection: each gets its
    own answer."""
    futs = []
    for i in range(60):
        if i % 3 == 1:
            futs.append(("bad", client.infer_async(InferenceRequest(
                "addmul", {"lhs": GOOD_A.astype(np.float64), "rhs": GOOD_B}))))
        elif i % 3 == 2:
            futs.append(("nf", client.infer_async(InferenceRequest("nope%d" % i,
                                                                    {"lhs": GOOD_A}))))
        else:
            a = np.full((1, 4), i, F)
            futs.append((a, client.infer_async(InferenceRequest("addmul",
                                                                {"lhs": a, "rhs": a}))))
    for kind, f in futs:
        if isinstance(kind, str):
            with pytest.raises(InvalidArgumentError if kind == "bad" else NotFoundError):
                f.result(timeout=30)
        else:
            np.testing.assert_allclose(f.result(timeout=30).outputs["y"],
                                       models.addmul_ref(kind, kind))


def test_other_clients_unaffected(srv):
    """A client sending bad requests does not disturb another's."""
    with SessionClient(srv.endpoint, timeout_s=20) as bad, \
            SessionClient(srv.tcp_endpoint, timeout_s=20) as good:
        for i in range(20):
            with pytest.raises(SipError):
                bad.infer(InferenceRequest("addmul", {"lhs": np.zeros((1, 3), F),
                                                      "rhs": np.zeros((1, 3), F)}))
            a = np.full((1, 4), i, F)
            r = good.infer(InferenceRequest("addmul", {"lhs": a, "rhs": a}))
            np.testing.assert_allclose(r.outputs["y"], models.addmul_ref(a, a))
