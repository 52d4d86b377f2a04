"""Transform operations (src/ops/transform_*.c) served by the `transform`
backend, each compared with a numpy reference implementation
(transform_refs.py): the image and tensor operations here, the OCR ones
(crop_and_resize, ctc_greedy_decode, db_postprocess) in
test_transforms_ocr.py.

One sipd serves every operation as a pool (`backend: transform`,
`backend_options: {operation: ..., ...}`); pools with bad options must be
FAILED with a message naming the problem, and bad requests must get
INVALID_ARGUMENT without hurting the server.
"""

import math

import numpy as np
import pytest

from cann_sip import (InferenceRequest, InvalidArgumentError, ResourceExhaustedError,
                      UnavailableError)
from harness import serve
from transform_refs import nms_ref, resize_ref, run, tf, to_u8, write_labels


@pytest.fixture(scope="module")
def labels_file(tmp_path_factory):
    return write_labels(tmp_path_factory.mktemp("labels"))


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory, labels_file):
    d = tmp_path_factory.mktemp("transforms")
    pools = [
        tf("resize_u8", "resize", size="37,53"),
        tf("resize_down", "resize", size="16,20"),
        tf("resize_f32", "resize", size="24,40", layout="nchw"),
        tf("letterbox", "letterbox", size="64,64"),
        tf("letterbox_f32", "letterbox", size="48,80", layout="nchw", pad_value="0"),
        tf("normalize", "normalize", mean="0.485,0.456,0.406", std="0.229,0.224,0.225",
           scale="1/255"),
        tf("normalize_hwc", "normalize", layout="hwc", dtype="uint8", mean="127.5", std="127.5"),
        tf("bgr2rgb", "color_convert", mode="bgr2rgb"),
        tf("rgb2gray", "color_convert", mode="rgb2gray"),
        tf("bgr2gray_f32", "color_convert", mode="bgr2gray", dtype="float32"),
        tf("to_tensor", "to_tensor", scale="1/255"),
        tf("rotate", "rotate180"),
        tf("rotate_flags", "rotate180", flags="float32", flag_index="1", flag_threshold="0.9"),
        tf("rotate_hwc", "rotate180", layout="hwc"),
        tf("cast_i32", "cast", to="int32"),
        tf("cast_u8", "cast", to="uint8"),
        tf("cast_f16", "cast", to="float16"),
        tf("cast_bool", "cast", to="bool"),
        tf("cast_i64_f32", "cast", **{"from": "int64", "to": "float32"}),
        tf("softmax", "softmax"),
        tf("softmax_ax1", "softmax", axis="1"),
        tf("topk", "topk", k="3"),
        tf("topk_ax0", "topk", k="2", axis="0"),
        tf("nms", "nms", iou_threshold="0.5"),
        tf("nms_limits", "nms", iou_threshold="0.3", score_threshold="0.2", max_output="5"),
        # pools whose options are wrong: FAILED at load, with the reason
        tf("bad_op", "warp"),
        tf("bad_size", "resize", size="32x"),
        tf("bad_opt", "softmax", k="3"),
        tf("bad_mode", "color_convert", mode="hsv"),
        tf("bad_crop", "crop_and_resize", target_size="8,8", height="48"),
        tf("bad_labels", "ctc_greedy_decode", labels_file=str(d / "missing.txt")),
        tf("bad_std", "normalize", std="0.5,0"),
        {"name": "no_op", "backend": "transform", "backend_options": {"size": "3,3"}},
    ]
    with serve(d, pools) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client()


# ---------------------------------------------------------------------------
# the pools

def test_pools_described(client):
    pools = {p["name"]: p for p in client.pools()}
    r = pools["resize_u8"]
    assert r["state"] == "READY" and r["backend"] == "transform"
    assert r["inputs"] == [{"name": "image", "dtype": "uint8", "shape": [-1, -1, -1]}]
    assert r["outputs"][0]["name"] == "output"
    lb = pools["letterbox"]
    assert [o["name"] for o in lb["outputs"]] == ["output", "scale", "offset"]
    nms = pools["nms"]
    assert [i["name"] for i in nms["inputs"]] == ["boxes", "scores"]
    assert nms["inputs"][0]["shape"] == [-1, 4]
    assert [o["name"] for o in nms["outputs"]] == ["indices", "boxes", "scores"]
    assert [i["name"] for i in pools["rotate_flags"]["inputs"]] == ["image", "flags"]
    for name, p in pools.items():
        if not name.startswith("bad_") and name != "no_op":
            assert p["state"] == "READY", p


@pytest.mark.parametrize("name, words", [
    ("bad_op", ["unknown transform operation 'warp'", "resize", "db_postprocess"]),
    ("bad_size", ["option size", "'32x'", "H,W"]),
    ("bad_opt", ["transform softmax has no option 'k'", "axis"]),
    ("bad_mode", ["option mode", "'hsv'", "bgr2rgb"]),
    ("bad_crop", ["exactly one of target_size", "height"]),
    ("bad_labels", ["labels_file", "missing.txt"]),
    ("bad_std", ["option std", "non-zero"]),
    ("no_op", ["operation", "expected one of"]),
])
def test_bad_options_fail_the_pool(client, name, words):
    p = {p["name"]: p for p in client.pools()}[name]
    assert p["state"] == "FAILED"
    for w in words:
        assert w in p["error"], p["error"]
    with pytest.raises(UnavailableError):
        run(client, name, input=np.zeros(3, np.float32))


# ---- resize / letterbox --------------------------------------------------

@pytest.mark.parametrize("pool, shape", [("resize_u8", (37, 53)), ("resize_down", (16, 20))])
def test_resize_uint8(client, pool, shape):
    rng = np.random.default_rng(1)
    for src in [(20, 30, 3), (64, 48, 3), (7, 5, 1), (1, 1, 3)]:
        img = rng.integers(0, 256, size=src, dtype=np.uint8)
        out = run(client, pool, image=img)["output"]
        assert out.dtype == np.uint8 and out.shape == shape + (src[2],)
        ref = to_u8(resize_ref(img, *shape))
        assert np.abs(out.astype(int) - ref.astype(int)).max() <= 1


def test_resize_float_nchw(client):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 17, 29)).astype(np.float32)
    out = run(client, "resize_f32", image=x)["output"]
    assert out.shape == (2, 3, 24, 40) and out.dtype == np.float32
    for n in range(2):
        ref = resize_ref(x[n].transpose(1, 2, 0), 24, 40).transpose(2, 0, 1)
        np.testing.assert_allclose(out[n], ref, atol=1e-4)


def test_resize_identity_and_constant(client):
    img = np.full((37, 53, 3), 77, np.uint8)
    assert (run(client, "resize_u8", image=img)["output"] == 77).all()
    img = np.random.default_rng(3).integers(0, 256, (37, 53, 2), dtype=np.uint8)
    np.testing.assert_array_equal(run(client, "resize_u8", image=img)["output"], img)


def letterbox_ref(img, H, W, pad):
    h, w = img.shape[:2]
    r = min(H / h, W / w)
    nh = min(max(int(math.floor(h * r + 0.5)), 1), H)
    nw = min(max(int(math.floor(w * r + 0.5)), 1), W)
    top, left = (H - nh) // 2, (W - nw) // 2
    out = np.full((H, W, img.shape[2]), float(pad))
    out[top:top + nh, left:left + nw] = resize_ref(img, nh, nw)
    return out, r, (top, left)


def test_letterbox_uint8(client):
    rng = np.random.default_rng(4)
    for src in [(30, 60, 3), (90, 45, 3), (64, 64, 3), (10, 13, 3)]:
        img = rng.integers(0, 256, size=src, dtype=np.uint8)
        o = run(client, "letterbox", image=img)
        ref, r, off = letterbox_ref(img, 64, 64, 114)
        assert o["output"].shape == (64, 64, 3) and o["output"].dtype == np.uint8
        assert np.abs(o["output"].astype(int) - to_u8(ref).astype(int)).max() <= 1
        assert o["scale"].shape == (1,) and o["scale"][0] == pytest.approx(r, rel=1e-6)
        np.testing.assert_array_equal(o["offset"], np.array(off, np.float32))


def test_letterbox_float_nchw(client):
    x = np.random.default_rng(5).random((1, 3, 40, 30)).astype(np.float32)
    o = run(client, "letterbox_f32", image=x)
    ref, r, off = letterbox_ref(x[0].transpose(1, 2, 0), 48, 80, 0)
    np.testing.assert_allclose(o["output"][0], ref.transpose(2, 0, 1), atol=1e-4)
    assert o["scale"][0] == pytest.approx(1.2) and tuple(o["offset"]) == off == (0, 22)


# ---- normalize / color / to_tensor / rotate ------------------------------

def test_normalize(client):
    x = np.random.default_rng(6).integers(0, 256, (2, 3, 5, 7)).astype(np.float32)
    out = run(client, "normalize", input=x)["output"]
    mean = np.array([0.485, 0.456, 0.406])[None, :, None, None]
    std = np.array([0.229, 0.224, 0.225])[None, :, None, None]
    np.testing.assert_allclose(out, (x / 255.0 - mean) / std, atol=1e-4)
    img = np.random.default_rng(7).integers(0, 256, (4, 6, 3), dtype=np.uint8)
    out = run(client, "normalize_hwc", input=img)["output"]
    assert out.dtype == np.float32 and out.shape == img.shape
    np.testing.assert_allclose(out, (img - 127.5) / 127.5, atol=1e-5)


def test_normalize_channel_mismatch(client):
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "normalize", input=np.zeros((1, 4, 2, 2), np.float32))
    assert "4 channels" in ei.value.message and "mean has 3 values" in ei.value.message


def test_color_convert(client):
    img = np.random.default_rng(8).integers(0, 256, (9, 11, 3), dtype=np.uint8)
    np.testing.assert_array_equal(run(client, "bgr2rgb", image=img)["output"], img[..., ::-1])
    gray = run(client, "rgb2gray", image=img)["output"]
    ref = img[..., 0] * 0.299 + img[..., 1] * 0.587 + img[..., 2] * 0.114
    assert gray.shape == (9, 11, 1) and gray.dtype == np.uint8
    assert np.abs(gray[..., 0].astype(int) - to_u8(ref).astype(int)).max() <= 1
    f = img.astype(np.float32)
    gray = run(client, "bgr2gray_f32", image=f)["output"]
    ref = f[..., 2] * 0.299 + f[..., 1] * 0.587 + f[..., 0] * 0.114
    np.testing.assert_allclose(gray[..., 0], ref, atol=1e-3)
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "rgb2gray", image=np.zeros((4, 4, 2), np.uint8))
    assert "2 channels" in ei.value.message


def test_to_tensor(client):
    img = np.random.default_rng(9).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    out = run(client, "to_tensor", image=img)["output"]
    assert out.shape == (1, 3, 5, 7) and out.dtype == np.float32
    np.testing.assert_allclose(out[0], img.transpose(2, 0, 1) / 255.0, atol=1e-6)
    batch = np.random.default_rng(10).integers(0, 256, (2, 4, 6, 3), dtype=np.uint8)
    out = run(client, "to_tensor", image=batch)["output"]
    np.testing.assert_allclose(out, batch.transpose(0, 3, 1, 2) / 255.0, atol=1e-6)
    with pytest.raises(InvalidArgumentError):
        run(client, "to_tensor", image=np.zeros((4, 4), np.uint8))


def test_rotate180(client):
    x = np.random.default_rng(11).random((3, 2, 4, 5)).astype(np.float32)
    np.testing.assert_array_equal(run(client, "rotate", image=x)["output"], x[:, :, ::-1, ::-1])
    # PP-OCR's angle classifier: rotate where P(180) > 0.9
    cls = np.array([[0.99, 0.01], [0.05, 0.95], [0.2, 0.8]], np.float32)
    out = run(client, "rotate_flags", image=x, flags=cls)["output"]
    np.testing.assert_array_equal(out[0], x[0])
    np.testing.assert_array_equal(out[1], x[1, :, ::-1, ::-1])
    np.testing.assert_array_equal(out[2], x[2])
    img = np.random.default_rng(12).integers(0, 256, (4, 6, 3), dtype=np.uint8)
    np.testing.assert_array_equal(run(client, "rotate_hwc", image=img)["output"],
                                  img[::-1, ::-1])
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "rotate_flags", image=x, flags=np.zeros(3, np.float32))  # K=1, index 1
    assert "flags" in ei.value.message


# ---- cast / softmax / topk -----------------------------------------------

def test_cast(client):
    x = np.array([[-2.7, -0.5, 0.0, 0.49], [1.5, 2.5, 100.9, -100.9]], np.float32)
    out = run(client, "cast_i32", input=x)["output"]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, x.astype(np.int32))
    u = np.array([0, 1.9, 254.5, 255], np.float32)
    np.testing.assert_array_equal(run(client, "cast_u8", input=u)["output"], u.astype(np.uint8))
    h = np.random.default_rng(13).standard_normal(1000).astype(np.float32) * 1000
    h = np.concatenate([h, np.array([1e-7, 6e-8, 70000, -70000, np.inf, 0.0], np.float32)])
    out = run(client, "cast_f16", input=h)["output"]
    assert out.dtype == np.float16
    with np.errstate(over="ignore"):  # 70000 overflows to inf, as it should
        ref = h.astype(np.float16)
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))
    b = run(client, "cast_bool", input=np.array([0, 0.1, -3, 0], np.float32))["output"]
    np.testing.assert_array_equal(b, [False, True, True, False])
    i = np.array([1, -5, 2**40, 7], np.int64)
    np.testing.assert_array_equal(run(client, "cast_i64_f32", input=i)["output"],
                                  i.astype(np.float32))


def softmax_ref(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_softmax(client):
    x = (np.random.default_rng(14).standard_normal((3, 5, 7)) * 10).astype(np.float32)
    np.testing.assert_allclose(run(client, "softmax", input=x)["output"], softmax_ref(x, -1),
                               atol=1e-6)
    np.testing.assert_allclose(run(client, "softmax_ax1", input=x)["output"],
                               softmax_ref(x, 1), atol=1e-6)
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "softmax_ax1", input=np.zeros(4, np.float32))
    assert "axis 1" in ei.value.message


def test_topk(client):
    x = np.random.default_rng(15).standard_normal((4, 10)).astype(np.float32)
    x[0, 3] = x[0, 7] = 5.0  # a tie: the lower index first
    o = run(client, "topk", input=x)
    idx = np.argsort(-x, axis=-1, kind="stable")[:, :3]
    np.testing.assert_array_equal(o["indices"], idx)
    assert o["indices"].dtype == np.int64
    np.testing.assert_array_equal(o["values"], np.take_along_axis(x, idx, -1))
    assert list(o["indices"][0][:2]) == [3, 7]
    o = run(client, "topk_ax0", input=x)
    idx = np.argsort(-x, axis=0, kind="stable")[:2]
    np.testing.assert_array_equal(o["indices"], idx)
    np.testing.assert_array_equal(o["values"], np.take_along_axis(x, idx, 0))
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "topk", input=np.zeros((2, 2), np.float32))
    assert "k=3" in ei.value.message


# ---- nms ------------------------------------------------------------------

def random_boxes(rng, n):
    xy = rng.random((n, 2)) * 100
    wh = rng.random((n, 2)) * 30 + 5
    return np.concatenate([xy, xy + wh], axis=1).astype(np.float32)


def test_nms(client):
    rng = np.random.default_rng(16)
    for n in [0, 1, 8, 60, 300]:
        boxes = random_boxes(rng, n)
        scores = rng.random(n).astype(np.float32)
        o = run(client, "nms", boxes=boxes, scores=scores)
        keep = nms_ref(boxes, scores, 0.5)
        np.testing.assert_array_equal(o["indices"], keep)
        np.testing.assert_array_equal(o["boxes"], boxes[keep].reshape(-1, 4))
        np.testing.assert_array_equal(o["scores"], scores[keep])
        o = run(client, "nms_limits", boxes=boxes, scores=scores)
        np.testing.assert_array_equal(o["indices"], nms_ref(boxes, scores, 0.3, 0.2, 5))


def test_nms_known(client):
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [10, 10, 0, 0]],
                     np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.95], np.float32)
    o = run(client, "nms", boxes=boxes, scores=scores)
    # box 3 is box 0 with its corners swapped: it wins and suppresses 0 and 1
    assert list(o["indices"]) == [3, 2]


def test_nms_mismatch(client):
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "nms", boxes=np.zeros((3, 4), np.float32), scores=np.zeros(2, np.float32))
    assert "3 boxes but 2 scores" in ei.value.message
    with pytest.raises(InvalidArgumentError):
        run(client, "nms", boxes=np.zeros((3, 5), np.float32), scores=np.zeros(3, np.float32))


# ---- bad requests ------------------------------------------------------------

def test_wrong_dtype(client):
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "resize_u8", image=np.zeros((4, 4, 3), np.float32))
    assert "float32" in ei.value.message and "uint8" in ei.value.message
    with pytest.raises(InvalidArgumentError):
        run(client, "softmax", input=np.zeros(4, np.float64))
    with pytest.raises(InvalidArgumentError):
        run(client, "nms", boxes=np.zeros((3, 4), np.float64), scores=np.zeros(3, np.float32))


def test_wrong_rank_and_names(client):
    with pytest.raises(InvalidArgumentError):
        run(client, "resize_u8", image=np.zeros((4, 4), np.uint8))
    with pytest.raises(InvalidArgumentError):
        run(client, "resize_u8", input=np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "resize_u8", image=np.zeros((0, 4, 3), np.uint8))
    assert "0x4" in ei.value.message


def test_hostile_sizes(client, srv):
    # an output that would take 3 GiB is refused; the server lives on
    with pytest.raises(ResourceExhaustedError) as ei:
        run(client, "letterbox_f32", image=np.zeros((70000, 3, 1, 1), np.float32))
    assert "bytes" in ei.value.message
    srv.assert_alive()
    assert run(client, "softmax", input=np.zeros(3, np.float32))["output"].shape == (3,)


def test_outputs_subset(client):
    o = client.infer(InferenceRequest("letterbox", {"image": np.zeros((8, 16, 3), np.uint8)},
                                      outputs=["offset"])).outputs
    assert list(o) == ["offset"] and tuple(o["offset"]) == (16, 0)


# ---------------------------------------------------------------------------
# dynamic batching on transform pools

def batched(name, operation, **opts):
    p = tf(name, operation, **opts)
    p["dynamic_batching"] = {"max_batch_size": 8, "max_queue_delay_us": 20000}
    return p


def test_dynamic_batching_only_where_rows_are_items(start_sipd, labels_file):
    """Requests are concatenated along dim 0 only for transforms that work
    row by row (images of nhwc/nchw, CTC rows); the others fail to load
    with the reason instead of mixing up requests."""
    srv = start_sipd([
        batched("resize_b", "resize", size="8,12", layout="nchw"),
        batched("ctc_b", "ctc_greedy_decode", labels_file=str(labels_file)),
        batched("resize_hwc_b", "resize", size="8,12"),
        batched("nms_b", "nms", iou_threshold="0.5"),
        batched("db_b", "db_postprocess"),
        batched("decode_b", "decode_image"),
    ])
    with srv.client() as c:
        pools = {p["name"]: p for p in c.pools()}
        assert pools["resize_b"]["state"] == pools["ctc_b"]["state"] == "READY"
        for name, why in (("resize_hwc_b", "transform resize: its images have no batch axis"),
                          ("nms_b", "transform nms: its outputs are not one row per input row"),
                          ("db_b", "transform db_postprocess: its outputs are not one row"),
                          ("decode_b", "transform decode_image: its outputs are not one row")):
            assert pools[name]["state"] == "FAILED"
            assert "dynamic_batching cannot merge requests for " + why in pools[name]["error"]
        # The batchable one merges concurrent requests and answers each its own images.
        rng = np.random.default_rng(11)
        xs = [rng.random((1, 3, 5, 7), dtype=np.float32) for _ in range(12)]
        futs = [c.infer_async(InferenceRequest("resize_b", {"image": x})) for x in xs]
        for x, f in zip(xs, futs):
            out = f.result(timeout=30).outputs["output"]
            ref = resize_ref(x[0].transpose(1, 2, 0), 8, 12).transpose(2, 0, 1)
            np.testing.assert_allclose(out[0], ref, atol=1e-4)
        st = [p for p in c.status()["pools"] if p["name"] == "resize_b"][0]
        assert st["stats"]["execution_count"] < 12, st["stats"]
