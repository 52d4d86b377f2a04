"""The real PP-OCR models (third_party/models/ocr, fetched by scripts/deps.sh)
through sipd and ONNX Runtime."""

import numpy as np
import pytest

from cann_sip import InferenceRequest, InvalidArgumentError
from harness import OCR_DIR, serve

REC = OCR_DIR / "ch_PP-OCRv4_rec_infer.onnx"
CLS = OCR_DIR / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
DET = OCR_DIR / "ch_PP-OCRv4_det_infer.onnx"
REC_OUT = "softmax_11.tmp_0"
CLS_OUT = "softmax_0.tmp_0"

pytestmark = pytest.mark.skipif(not (REC.is_file() and CLS.is_file()),
                                reason="third_party/models/ocr missing (run scripts/deps.sh)")


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    pools = [
        {"name": "ocr_rec", "model_path": str(REC), "pool_size": 1},
        {"name": "ocr_cls", "model_path": str(CLS), "pool_size": 2},
    ]
    with serve(tmp_path_factory.mktemp("ocr"), pools, server={"intra_op_threads": 2}) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client(timeout_s=120)


def test_pools_describe_models(client):
    pools = {p["name"]: p for p in client.pools()}
    rec = pools["ocr_rec"]
    assert rec["state"] == "READY", rec
    assert rec["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 3, 48, -1]}]
    assert rec["outputs"][0]["name"] == REC_OUT
    assert rec["outputs"][0]["dtype"] == "float32"
    assert rec["outputs"][0]["shape"][-1] == 6625
    cls = pools["ocr_cls"]
    assert cls["state"] == "READY", cls
    assert cls["inputs"][0]["name"] == "x" and cls["inputs"][0]["shape"][:2] == [-1, 3]
    assert cls["outputs"][0]["name"] == CLS_OUT


def test_recognition(client):
    x = np.random.default_rng(0).random((1, 3, 48, 320), dtype=np.float32) * 2 - 1
    r = client.infer(InferenceRequest("ocr_rec", {"x": x}))
    y = r.outputs[REC_OUT]
    assert y.shape == (1, 40, 6625) and y.dtype == np.float32
    assert np.all(np.isfinite(y)) and np.all(y >= 0)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, atol=1e-3)  # softmax over the alphabet
    # deterministic: the same input gives the same answer
    again = client.infer(InferenceRequest("ocr_rec", {"x": x})).outputs[REC_OUT]
    np.testing.assert_allclose(again, y, rtol=1e-5, atol=1e-6)


def test_recognition_variable_width(client):
    for w, steps in ((160, 20), (640, 80)):
        x = np.random.default_rng(w).random((1, 3, 48, w), dtype=np.float32)
        y = client.infer(InferenceRequest("ocr_rec", {"x": x})).outputs[REC_OUT]
        assert y.shape == (1, steps, 6625)


def test_classifier(client):
    rng = np.random.default_rng(1)
    xs = rng.random((4, 3, 48, 192), dtype=np.float32) * 2 - 1
    batch = client.infer(InferenceRequest("ocr_cls", {"x": xs})).outputs[CLS_OUT]
    assert batch.shape == (4, 2) and batch.dtype == np.float32
    np.testing.assert_allclose(batch.sum(axis=1), 1.0, atol=1e-5)
    assert np.all(batch >= 0)
    # batching does not change the answer: each row equals its own run
    for i in range(4):
        one = client.infer(InferenceRequest("ocr_cls", {"x": xs[i:i + 1]})).outputs[CLS_OUT]
        np.testing.assert_allclose(one[0], batch[i], rtol=1e-4, atol=1e-5)


def test_classifier_concurrent(client):
    rng = np.random.default_rng(2)
    xs = [rng.random((1, 3, 48, 192), dtype=np.float32) for _ in range(16)]
    ref = [client.infer(InferenceRequest("ocr_cls", {"x": x})).outputs[CLS_OUT] for x in xs[:4]]
    futs = [client.infer_async(InferenceRequest("ocr_cls", {"x": x})) for x in xs]
    outs = [f.result(timeout=120).outputs[CLS_OUT] for f in futs]
    for o in outs:
        assert o.shape == (1, 2)
        np.testing.assert_allclose(o.sum(), 1.0, atol=1e-5)
    for a, b in zip(outs[:4], ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_wrong_channel_count(client):
    with pytest.raises(InvalidArgumentError) as ei:
        client.infer(InferenceRequest("ocr_rec", {"x": np.zeros((1, 4, 48, 320), np.float32)}))
    assert "x" in ei.value.message
