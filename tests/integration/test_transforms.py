"""Transform operations (src/ops/transform_*.c) served by the `transform`
backend, each compared with a numpy reference implementation written here.

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
from harness import OCR_DIR, serve

KEYS = OCR_DIR / "ppocr_keys_v1.txt"
SMALL_LABELS = ["a", "b", "c", "\u4e2d", "\u6587", "1"]


def tf(name, operation, **opts):
    return {"name": name, "backend": "transform", "pool_size": 1,
            "backend_options": dict(operation=operation, **opts)}


@pytest.fixture(scope="module")
def labels_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("labels") / "labels.txt"
    p.write_text("\n".join(SMALL_LABELS) + "\n", encoding="utf-8")
    return p


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
        tf("crop_fixed", "crop_and_resize", target_size="[24, 32]"),
        tf("crop_rec", "crop_and_resize", height="48", max_width="320", min_width="64",
           scale="1/255", mean="0.5", std="0.5"),
        tf("crop_f32", "crop_and_resize", target_size="16,16", layout="nchw"),
        tf("crop_board", "crop_and_resize", target_size="64,128"),
        tf("ctc_small", "ctc_greedy_decode", labels_file=str(labels_file)),
        tf("ctc_nospace", "ctc_greedy_decode", labels_file=str(labels_file),
           use_space_char="false"),
        tf("db", "db_postprocess"),
        tf("db_fixed", "db_postprocess", src_size="400,300", box_thresh="0.5"),
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
    if KEYS.is_file():
        pools.append(tf("ctc_ppocr", "ctc_greedy_decode", labels_file=str(KEYS)))
    with serve(d, pools) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client()


def run(client, pool, **inputs):
    return client.infer(InferenceRequest(pool, inputs)).outputs


# ---------------------------------------------------------------------------
# numpy references

def lin_axis(p, size):
    """OpenCV INTER_LINEAR taps for source positions p (pixel-index
    coordinates): positions left of pixel 0 / right of the last pixel take
    that pixel."""
    p = np.asarray(p, np.float64)
    i0 = np.floor(p)
    f = p - i0
    lo = ~(p > 0)
    hi = p >= size - 1
    i0 = np.where(lo, 0, np.where(hi, size - 1, i0)).astype(np.int64)
    f = np.where(lo | hi, 0.0, f)
    i1 = np.minimum(i0 + 1, size - 1)
    return i0, i1, f


def bilinear(img, X, Y):
    """img [H,W,C] float64 sampled at pixel-index coordinates X, Y (same shape)."""
    h, w = img.shape[:2]
    y0, y1, fy = lin_axis(Y, h)
    x0, x1, fx = lin_axis(X, w)
    fx = fx[..., None]
    fy = fy[..., None]
    top = (1 - fx) * img[y0, x0] + fx * img[y0, x1]
    bot = (1 - fx) * img[y1, x0] + fx * img[y1, x1]
    return (1 - fy) * top + fy * bot


def resize_ref(img, H, W):
    """Bilinear resize with half-pixel centres of an [h,w,c] image (float64)."""
    h, w = img.shape[:2]
    ys = (np.arange(H) + 0.5) * (h / H) - 0.5
    xs = (np.arange(W) + 0.5) * (w / W) - 0.5
    X, Y = np.meshgrid(xs, ys)
    return bilinear(img.astype(np.float64), X, Y)


def to_u8(x):
    return np.clip(np.floor(x + 0.5), 0, 255).astype(np.uint8)


def nms_ref(boxes, scores, iou_thr, score_thr=-np.inf, max_output=0):
    b = boxes.astype(np.float64)
    x1, x2 = np.minimum(b[:, 0], b[:, 2]), np.maximum(b[:, 0], b[:, 2])
    y1, y2 = np.minimum(b[:, 1], b[:, 3]), np.maximum(b[:, 1], b[:, 3])
    area = (x2 - x1) * (y2 - y1)
    order = [i for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i))
             if scores[i] > score_thr]
    keep, dead = [], set()
    for a in order:
        if a in dead:
            continue
        keep.append(a)
        if max_output and len(keep) == max_output:
            break
        for c in order:
            if c in dead or c in keep:
                continue
            iw = min(x2[a], x2[c]) - max(x1[a], x1[c])
            ih = min(y2[a], y2[c]) - max(y1[a], y1[c])
            if iw <= 0 or ih <= 0:
                continue
            inter = iw * ih
            if inter / (area[a] + area[c] - inter) > iou_thr:
                dead.add(c)
    return np.array(keep, np.int64)


def homography(quad, w, h):
    """3x3 matrix mapping crop coordinates (0,0),(w,0),(w,h),(0,h) onto quad
    (4x2, continuous image coordinates), by solving the 8x8 linear system."""
    src = [(0, 0), (w, 0), (w, h), (0, h)]
    A, b = [], []
    for (u, v), (x, y) in zip(src, np.asarray(quad, np.float64)):
        A.append([u, v, 1, 0, 0, 0, -u * x, -v * x])
        b.append(x)
        A.append([0, 0, 0, u, v, 1, -u * y, -v * y])
        b.append(y)
    m = np.linalg.solve(np.array(A, np.float64), np.array(b, np.float64))
    return np.append(m, 1.0).reshape(3, 3)


def warp_ref(img, quad, ho, wo):
    """[ho,wo,C] crop of img [H,W,C]: crop pixel centres mapped through the
    homography, then -0.5 into pixel-index coordinates, sampled bilinearly."""
    M = homography(quad, wo, ho)
    u, v = np.meshgrid(np.arange(wo) + 0.5, np.arange(ho) + 0.5)
    den = M[2, 0] * u + M[2, 1] * v + M[2, 2]
    X = (M[0, 0] * u + M[0, 1] * v + M[0, 2]) / den - 0.5
    Y = (M[1, 0] * u + M[1, 1] * v + M[1, 2]) / den - 0.5
    return bilinear(img.astype(np.float64), X, Y)


def box_quad(b):
    x1, y1, x2, y2 = [float(v) for v in b]
    return np.array([[x1, y1], [x2, y1], [x2, y2], [x1, y2]])


def ctc_ref(probs, labels, use_space=True):
    chars = [""] + list(labels) + ([" "] if use_space else [])
    texts, scores = [], []
    for seq in probs:
        idx = seq.argmax(axis=1)
        prob = seq.max(axis=1)
        sel = np.ones(len(idx), bool)
        sel[1:] = idx[1:] != idx[:-1]
        sel &= idx != 0
        texts.append("".join(chars[i] for i in idx[sel]))
        scores.append(float(prob[sel].mean()) if sel.any() else 0.0)
    return texts, np.array(scores, np.float32)


def order_clockwise(pts):
    """PaddleOCR's get_mini_boxes order: top-left, top-right, bottom-right,
    bottom-left."""
    p = sorted([tuple(q) for q in pts], key=lambda q: q[0])
    tl, bl = (p[0], p[1]) if p[0][1] <= p[1][1] else (p[1], p[0])
    tr, br = (p[2], p[3]) if p[2][1] <= p[3][1] else (p[3], p[2])
    return np.array([tl, tr, br, bl])


def unclipped_rect(cx, cy, w, h, angle_deg, ratio=1.5):
    """Corners of a w x h rectangle (pixel-centre extents) turned by angle,
    expanded as DB's unclip does: by area * ratio / perimeter on each side."""
    d = w * h * ratio / (2 * (w + h))
    W, H = w + 2 * d, h + 2 * d
    a = math.radians(angle_deg)
    u = np.array([math.cos(a), math.sin(a)])
    v = np.array([-math.sin(a), math.cos(a)])
    c = np.array([cx, cy])
    return np.array([c + s * W / 2 * u + t * H / 2 * v
                     for s, t in ((-1, -1), (1, -1), (1, 1), (-1, 1))])


def draw_rect(prob, cx, cy, w, h, angle_deg, value):
    """Sets pixels whose centres lie in the rotated rectangle (extents
    measured between pixel centres)."""
    H, W = prob.shape
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float64)
    a = math.radians(angle_deg)
    du = (xx - cx) * math.cos(a) + (yy - cy) * math.sin(a)
    dv = -(xx - cx) * math.sin(a) + (yy - cy) * math.cos(a)
    prob[(np.abs(du) <= w / 2 + 1e-9) & (np.abs(dv) <= h / 2 + 1e-9)] = value


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
    crop = pools["crop_rec"]
    assert crop["outputs"][0]["shape"] == [-1, -1, 48, -1]
    assert [o["dtype"] for o in crop["outputs"]] == ["float32", "int64"]
    db = pools["db"]
    assert [i["name"] for i in db["inputs"]] == ["probs", "src_size"]
    assert db["inputs"][0]["shape"] == [1, 1, -1, -1]
    assert [i["name"] for i in pools["db_fixed"]["inputs"]] == ["probs"]
    assert pools["ctc_small"]["outputs"][0] == {"name": "text", "dtype": "string", "shape": [-1]}
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


# ---- crop_and_resize -------------------------------------------------------

def test_crop_axis_aligned(client):
    rng = np.random.default_rng(17)
    img = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    boxes = np.array([[0, 0, 80, 60], [10.5, 5.25, 50, 40], [70, 50, 90, 70], [30, 20, 31, 21]],
                     np.float32)
    o = run(client, "crop_fixed", image=img, boxes=boxes)
    assert o["output"].shape == (4, 3, 24, 32) and o["output"].dtype == np.float32
    np.testing.assert_array_equal(o["widths"], [32] * 4)
    for i, b in enumerate(boxes):
        ref = warp_ref(img, box_quad(b), 24, 32).transpose(2, 0, 1)
        np.testing.assert_allclose(o["output"][i], ref, atol=1e-3)
    # the whole image as a box is a plain resize
    np.testing.assert_allclose(o["output"][0], resize_ref(img, 24, 32).transpose(2, 0, 1),
                               atol=1e-3)


def test_crop_quads_height_mode(client):
    """PP-OCR rec style: height 48, width from each quad's aspect ratio, padded
    right to the batch's widest crop (at least min_width), normalised."""
    rng = np.random.default_rng(18)
    img = rng.integers(0, 256, (120, 200, 3), dtype=np.uint8)
    quads = np.array([
        [[10, 10], [110, 14], [108, 38], [9, 34]],     # slightly rotated line
        [[50, 60], [90, 60], [90, 80], [50, 80]],      # axis-aligned, 40x20
        [[150, 100], [199, 95], [199, 119], [151, 118]],
        [[5, 5], [15, 5], [15, 45], [5, 45]],          # tall: 10x40
        [[0, 0], [300, 0], [300, 10], [0, 10]],        # very wide: capped at 320
    ], np.float32)
    o = run(client, "crop_rec", image=img, boxes=quads)
    widths = []
    for q in quads.astype(np.float64):
        w = max(np.linalg.norm(q[0] - q[1]), np.linalg.norm(q[2] - q[3]))
        h = max(np.linalg.norm(q[0] - q[3]), np.linalg.norm(q[1] - q[2]))
        widths.append(int(min(320, max(1, math.ceil(48 * w / h - 1e-6)))))
    np.testing.assert_array_equal(o["widths"], widths)
    assert widths[1] == 96 and widths[3] == 12 and widths[4] == 320
    out = o["output"]
    assert out.shape == (5, 3, 48, max(max(widths), 64))
    for i, q in enumerate(quads):
        ref = warp_ref(img, q, 48, widths[i]).transpose(2, 0, 1)
        ref = (ref / 255.0 - 0.5) / 0.5
        np.testing.assert_allclose(out[i, :, :, :widths[i]], ref, atol=1e-4)
        assert (out[i, :, :, widths[i]:] == 0).all()  # padding, after normalisation


def test_crop_float_nchw(client):
    x = np.random.default_rng(19).random((1, 2, 30, 40)).astype(np.float32)
    quad = np.array([[[3, 4], [30, 2], [35, 25], [5, 28]]], np.float32)
    o = run(client, "crop_f32", image=x, boxes=quad)
    ref = warp_ref(x[0].transpose(1, 2, 0), quad[0], 16, 16).transpose(2, 0, 1)
    np.testing.assert_allclose(o["output"][0], ref, atol=1e-5)
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "crop_f32", image=np.zeros((2, 2, 8, 8), np.float32), boxes=quad)
    assert "one" in ei.value.message


def test_crop_perspective_checkerboard(client):
    """A checkerboard warped into a larger image by a known homography is
    recovered by cropping its quad."""
    bh, bw, sq = 64, 128, 16
    yy, xx = np.mgrid[0:bh, 0:bw]
    board = np.where(((yy // sq) + (xx // sq)) % 2 == 0, 230, 20).astype(np.float64)
    board = np.stack([board, 255 - board, board * 0.5], axis=-1)
    quad = np.array([[40, 30], [200, 50], [185, 150], [30, 120]], np.float64)
    # forward-warp: every image pixel centre pulled back into board coordinates
    Hi, Wi = 180, 240
    M = homography(quad, bw, bh)
    Minv = np.linalg.inv(M)
    u, v = np.meshgrid(np.arange(Wi) + 0.5, np.arange(Hi) + 0.5)
    den = Minv[2, 0] * u + Minv[2, 1] * v + Minv[2, 2]
    bx = (Minv[0, 0] * u + Minv[0, 1] * v + Minv[0, 2]) / den
    by = (Minv[1, 0] * u + Minv[1, 1] * v + Minv[1, 2]) / den
    img = bilinear(board, bx - 0.5, by - 0.5)
    inside = (bx >= 0) & (bx < bw) & (by >= 0) & (by < bh)
    img[~inside] = 128
    img = to_u8(img)
    o = run(client, "crop_board", image=img, boxes=quad[None].astype(np.float32))
    crop = o["output"][0].transpose(1, 2, 0)
    assert crop.shape == (bh, bw, 3)
    np.testing.assert_allclose(crop, warp_ref(img, quad, bh, bw), atol=1e-3)
    # away from the squares' edges the board comes back
    edge = ((yy % sq) < 2) | ((yy % sq) > sq - 3) | ((xx % sq) < 2) | ((xx % sq) > sq - 3)
    diff = np.abs(crop - board)[~edge]
    assert diff.max() < 30, diff.max()


def test_crop_bad_boxes(client):
    img = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "crop_fixed", image=img, boxes=np.zeros((2, 3), np.float32))
    assert "[N,4]" in ei.value.message
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "crop_fixed", image=img,
            boxes=np.array([[0, 0, np.nan, 4]], np.float32))
    assert "non-finite" in ei.value.message
    # a degenerate box is answered (a crop of padding), not a crash
    o = run(client, "crop_fixed", image=img + 9, boxes=np.array([[3, 3, 3, 3]], np.float32))
    assert (o["output"] == 0).all()
    # no boxes: an empty batch
    o = run(client, "crop_rec", image=img, boxes=np.zeros((0, 4, 2), np.float32))
    assert o["output"].shape == (0, 3, 48, 64) and o["widths"].shape == (0,)


# ---- ctc_greedy_decode -----------------------------------------------------

def peaks(seqs, classes, T, rng):
    """Probabilities [N,T,C] whose argmax per step follows seqs."""
    probs = rng.random((len(seqs), T, classes)).astype(np.float32) * 0.1
    for n, s in enumerate(seqs):
        for t, c in enumerate(s):
            probs[n, t, c] = 0.5 + 0.5 * rng.random()
    return probs


def test_ctc_small(client):
    rng = np.random.default_rng(20)
    C = 1 + len(SMALL_LABELS) + 1
    seqs = [
        [1, 1, 0, 1, 2, 2, 3, 0, 0, 7, 4, 5],   # a a _ a b b c _ _ space 中 文 -> "aabc 中文"
        [0] * 12,                               # nothing
        [6, 6, 6, 0, 6, 7, 7, 1, 0, 0, 0, 2],   # "11 ab"
    ]
    probs = peaks(seqs, C, 12, rng)
    o = run(client, "ctc_small", probs=probs)
    texts, scores = ctc_ref(probs, SMALL_LABELS)
    assert texts == ["aabc \u4e2d\u6587", "", "11 ab"]
    assert [t.decode("utf-8") for t in o["text"]] == texts
    np.testing.assert_allclose(o["scores"], scores, atol=1e-6)
    assert o["scores"][1] == 0
    o = run(client, "ctc_nospace", probs=probs[:, :, :-1])
    texts, scores = ctc_ref(probs[:, :, :-1], SMALL_LABELS, use_space=False)
    assert [t.decode("utf-8") for t in o["text"]] == texts
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "ctc_small", probs=probs[:, :, :-1])
    assert "expected 8" in ei.value.message


@pytest.mark.skipif(not KEYS.is_file(), reason="third_party/models/ocr missing")
def test_ctc_ppocr_keys(client):
    labels = KEYS.read_text(encoding="utf-8").split("\n")
    if labels and labels[-1] == "":
        labels.pop()
    C = 1 + len(labels) + 1
    assert C == 6625  # the PP-OCRv4 rec model's output classes
    rng = np.random.default_rng(21)
    want = "\u4f60\u597dWorld 2024"
    idx = {ch: i + 1 for i, ch in reversed(list(enumerate(labels)))}
    idx[" "] = C - 1
    seq = []
    for ch in want:
        seq += [idx[ch], idx[ch], 0]
    seq = seq[:40] + [0] * (40 - len(seq))
    probs = peaks([seq, [0] * 40], C, 40, rng)
    o = run(client, "ctc_ppocr", probs=probs)
    texts, scores = ctc_ref(probs, labels)
    assert texts[0] == want
    assert [t.decode("utf-8") for t in o["text"]] == texts
    np.testing.assert_allclose(o["scores"], scores, atol=1e-6)


# ---- db_postprocess --------------------------------------------------------

def match(boxes, want):
    """Pairs each expected box with the output box of the nearest centre."""
    got = list(boxes)
    pairs = []
    for w in want:
        i = int(np.argmin([np.linalg.norm(g.mean(0) - w.mean(0)) for g in got]))
        pairs.append((got.pop(i), w))
    return pairs


def test_db_postprocess(client):
    H, W = 200, 240
    prob = np.full((H, W), 0.05, np.float32)
    rects = [(80, 40, 79, 29, 0), (150, 130, 100, 30, 30), (60, 150, 40, 16, -15)]
    for cx, cy, w, h, a in rects:
        draw_rect(prob, cx, cy, w, h, a, 0.9)
    prob[5:7, 200:202] = 0.9        # too small (min_size 3)
    prob[180:195, 10:60] = 0.45     # above thresh, below box_thresh
    src = (400, 360)                # the source image was larger
    o = run(client, "db", probs=prob[None, None], src_size=np.array(src, np.int64))
    boxes, scores = o["boxes"], o["scores"]
    assert boxes.shape == (3, 4, 2) and boxes.dtype == np.float32
    assert np.all(scores > 0.85) and np.all(scores <= 0.9 + 1e-6)
    fy, fx = src[0] / H, src[1] / W
    want = []
    for cx, cy, w, h, a in rects:
        c = unclipped_rect(cx, cy, w, h, a)
        c[:, 0] = np.clip(c[:, 0] * fx, 0, src[1])
        c[:, 1] = np.clip(c[:, 1] * fy, 0, src[0])
        want.append(order_clockwise(c))
    for got, w in match(boxes, want):
        # 2 px in the map, scaled to the source image
        assert np.abs(got - w).max() <= 2 * max(fx, fy), (got, w)
    # corners clockwise from the top-left (image coordinates, y down)
    for b in boxes:
        assert b[0][0] <= b[1][0] and b[3][0] <= b[2][0]
        assert b[0][1] <= b[3][1] and b[1][1] <= b[2][1]
        cross = np.cross(b[1] - b[0], b[2] - b[1])
        assert cross > 0  # clockwise on screen is positive with y pointing down


def test_db_postprocess_axis_aligned_exact(client):
    H, W = 100, 300
    prob = np.zeros((H, W), np.float32)
    prob[20:41, 50:251] = 0.8   # pixel centres x 50..250, y 20..40: 200 x 20
    o = run(client, "db_fixed", probs=prob[None, None])
    assert o["boxes"].shape == (1, 4, 2)
    d = 200 * 20 * 1.5 / (2 * 220)
    want = np.array([[50 - d, 20 - d], [250 + d, 20 - d], [250 + d, 40 + d], [50 - d, 40 + d]])
    want[:, 0] *= 300 / W
    want[:, 1] *= 400 / H
    np.testing.assert_allclose(o["boxes"][0], want, atol=1e-3)
    assert o["scores"][0] == pytest.approx(0.8)


def test_db_postprocess_empty_and_errors(client):
    o = run(client, "db_fixed", probs=np.zeros((1, 1, 32, 32), np.float32))
    assert o["boxes"].shape == (0, 4, 2) and o["scores"].shape == (0,)
    o = run(client, "db_fixed", probs=np.zeros((1, 1, 0, 0), np.float32))
    assert o["boxes"].shape == (0, 4, 2)
    with pytest.raises(InvalidArgumentError) as ei:
        run(client, "db", probs=np.zeros((1, 1, 8, 8), np.float32),
            src_size=np.array([0, 5], np.int64))
    assert "src_size" in ei.value.message
    with pytest.raises(InvalidArgumentError):
        run(client, "db_fixed", probs=np.zeros((2, 1, 8, 8), np.float32))


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
