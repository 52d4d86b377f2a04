"""The OCR transform operations (crop_and_resize in
src/ops/transform_crop.c, db_postprocess in transform_db.c,
ctc_greedy_decode) served by the `transform` backend, each compared with a
numpy reference implementation (transform_refs.py); the other operations
are test_transforms.py.
"""

import math

import numpy as np
import pytest

from cann_sip import InvalidArgumentError
from harness import serve
from transform_refs import (KEYS, SMALL_LABELS, bilinear, box_quad, ctc_ref, draw_rect,
                            homography, order_clockwise, resize_ref, run, tf, to_u8,
                            unclipped_rect, warp_ref, write_labels)


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("transforms_ocr")
    labels_file = write_labels(d)
    pools = [
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
    ]
    if KEYS.is_file():
        pools.append(tf("ctc_ppocr", "ctc_greedy_decode", labels_file=str(KEYS)))
    with serve(d, pools) as s:
        yield s


@pytest.fixture(scope="module")
def client(srv):
    return srv.client()


def test_pools_described(client):
    pools = {p["name"]: p for p in client.pools()}
    crop = pools["crop_rec"]
    assert crop["outputs"][0]["shape"] == [-1, -1, 48, -1]
    assert [o["dtype"] for o in crop["outputs"]] == ["float32", "int64"]
    db = pools["db"]
    assert [i["name"] for i in db["inputs"]] == ["probs", "src_size"]
    assert db["inputs"][0]["shape"] == [1, 1, -1, -1]
    assert [i["name"] for i in pools["db_fixed"]["inputs"]] == ["probs"]
    assert pools["ctc_small"]["outputs"][0] == {"name": "text", "dtype": "string", "shape": [-1]}
    for p in pools.values():
        assert p["state"] == "READY", p


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
