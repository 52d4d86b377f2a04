"""What the transform tests share (test_transforms.py, test_transforms_ocr.py):
the pool and request helpers, and the numpy reference implementations each
operation is compared with."""

import math

import numpy as np

from cann_sip import InferenceRequest
from harness import OCR_DIR

KEYS = OCR_DIR / "ppocr_keys_v1.txt"
SMALL_LABELS = ["a", "b", "c", "\u4e2d", "\u6587", "1"]


def tf(name, operation, **opts):
    return {"name": name, "backend": "transform", "pool_size": 1,
            "backend_options": dict(operation=operation, **opts)}


def write_labels(directory):
    """A small labels file (SMALL_LABELS, one per line) in `directory`."""
    p = directory / "labels.txt"
    p.write_text("\n".join(SMALL_LABELS) + "\n", encoding="utf-8")
    return p


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


