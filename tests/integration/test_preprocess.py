"""Per-pool preprocess (docs/preprocess.md) and the decode_image transform,
checked against numpy/PIL references: a client sends PNG/JPEG bytes or a raw
uint8 HxWxC image to a pool whose model takes a normalised NCHW float32
tensor; the server decodes, resizes, converts and normalises on the pool's
executor before the model runs.

The models are tiny ONNX graphs (Identity, so the output is exactly what the
model received; and a per-channel mean) generated here."""

import io
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cann_sip import InferenceRequest, InvalidArgumentError
from harness import serve

Image = pytest.importorskip("PIL.Image", reason="python3-pil missing (run scripts/deps.sh)")

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
H, W = 32, 48


def model(nodes, inputs, outputs):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("pre_models")
    f = TensorProto.FLOAT
    ident = model([helper.make_node("Identity", ["x"], ["y"])],
                  [helper.make_tensor_value_info("x", f, ["N", 3, H, W])],
                  [helper.make_tensor_value_info("y", f, ["N", 3, H, W])])
    # two inputs: the image and a per-row offset added to its channel means
    means = model([helper.make_node("ReduceMean", ["img"], ["m"], axes=[2, 3], keepdims=0),
                   helper.make_node("Add", ["m", "off"], ["out"])],
                  [helper.make_tensor_value_info("img", f, ["N", 3, "H", "W"]),
                   helper.make_tensor_value_info("off", f, ["N", 1])],
                  [helper.make_tensor_value_info("out", f, ["N", 3])])
    onnx.save(ident, str(d / "ident.onnx"))
    onnx.save(means, str(d / "means.onnx"))
    return d


NORM = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


@pytest.fixture(scope="module")
def srv(sipd_bin, models_dir, tmp_path_factory):
    pre = {"decode": True, "resize": "%d,%d" % (H, W), "to_tensor": {"scale": "1/255"},
           "normalize": NORM}
    pools = [
        {"name": "cls", "model_path": str(models_dir / "ident.onnx"), "preprocess": pre},
        {"name": "cls_bgr", "model_path": str(models_dir / "ident.onnx"),
         "preprocess": dict(pre, decode="bgr")},
        {"name": "cls_batched", "model_path": str(models_dir / "ident.onnx"), "pool_size": 1,
         "dynamic_batching": {"max_batch_size": 8, "max_queue_delay_us": 200000},
         "preprocess": pre},
        # no decode: raw uint8 HxWxC only; two model inputs, preprocess names one
        {"name": "means", "model_path": str(models_dir / "means.onnx"),
         "preprocess": {"input": "img", "resize": {"limit_side_len": 40, "multiple_of": 8},
                        "to_tensor": {"scale": "1/255"}}},
        # letterbox (seed 003's step): aspect kept, padded with 114
        {"name": "boxed", "model_path": str(models_dir / "ident.onnx"),
         "preprocess": {"letterbox": "%d,%d" % (H, W), "to_tensor": {"scale": "1/255"}}},
        # does not fit the model: float32 NCHW expected, uint8 HWC given
        {"name": "misfit", "model_path": str(models_dir / "ident.onnx"),
         "preprocess": {"decode": True, "resize": "32,48"}},
    ]
    with serve(tmp_path_factory.mktemp("pre"), pools) as s:
        yield s


# ---- references --------------------------------------------------------

def taps(src, dst):
    """OpenCV INTER_LINEAR's source positions (half-pixel centres, clamped)."""
    p = (np.arange(dst) + 0.5) * (src / dst) - 0.5
    p = np.clip(p, 0, src - 1)
    i0 = np.floor(p).astype(int)
    i1 = np.minimum(i0 + 1, src - 1)
    return i0, i1, (p - i0).astype(np.float32)


def resize_u8(img, h, w):
    y0, y1, fy = taps(img.shape[0], h)
    x0, x1, fx = taps(img.shape[1], w)
    a = img.astype(np.float32)
    fx = fx[None, :, None]
    top = (1 - fx) * a[y0][:, x0] + fx * a[y0][:, x1]
    bot = (1 - fx) * a[y1][:, x0] + fx * a[y1][:, x1]
    v = (1 - fy[:, None, None]) * top + fy[:, None, None] * bot
    return np.clip(np.floor(v + 0.5), 0, 255).astype(np.uint8)


def prepared(img_rgb):
    r = resize_u8(img_rgb, H, W).astype(np.float32) / 255
    return ((r - MEAN) / STD).transpose(2, 0, 1)[None]


def encode(img, fmt, **kw):
    b = io.BytesIO()
    Image.fromarray(img).save(b, fmt, **kw)
    return np.frombuffer(b.getvalue(), np.uint8)


def rand_image(seed, h=50, w=70):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


# ---- tests -------------------------------------------------------------

def test_pool_describes_the_raw_input(srv):
    pools = {p["name"]: p for p in srv.client().pools()}
    p = pools["cls"]
    assert p["state"] == "READY", p
    # bytes [N] or an image [H,W,C]: any rank
    assert p["inputs"] == [{"name": "x", "dtype": "uint8", "shape": None}], p["inputs"]
    assert p["preprocess"] == "decode_image, resize, to_tensor, normalize"
    assert pools["means"]["inputs"][0] == {"name": "img", "dtype": "uint8",
                                           "shape": [-1, -1, -1]}
    assert pools["misfit"]["state"] == "FAILED"
    assert "preprocess" in pools["misfit"]["error"] and "float32" in pools["misfit"]["error"]


def test_png_bytes_equal_numpy(srv):
    c = srv.client()
    img = rand_image(1)
    y = c.infer(InferenceRequest("cls", {"x": encode(img, "PNG")})).outputs["y"]
    assert y.shape == (1, 3, H, W) and y.dtype == np.float32
    np.testing.assert_allclose(y, prepared(img), atol=1e-5)
    # BGR decoding: the channels come reversed
    y = c.infer(InferenceRequest("cls_bgr", {"x": encode(img, "PNG")})).outputs["y"]
    r = resize_u8(img[..., ::-1], H, W).astype(np.float32) / 255
    np.testing.assert_allclose(y, ((r - MEAN) / STD).transpose(2, 0, 1)[None], atol=1e-5)


def test_jpeg_bytes_equal_pil_decode(srv):
    c = srv.client()
    img = rand_image(2)
    data = encode(img, "JPEG", quality=90)
    ref = np.asarray(Image.open(io.BytesIO(data.tobytes())).convert("RGB"))  # libjpeg too
    y = c.infer(InferenceRequest("cls", {"x": data})).outputs["y"]
    np.testing.assert_allclose(y, prepared(ref), atol=1e-5)


def test_raw_image_skips_decoding(srv):
    c = srv.client()
    img = rand_image(3, 20, 90)
    y = c.infer(InferenceRequest("cls", {"x": img})).outputs["y"]
    np.testing.assert_allclose(y, prepared(img), atol=1e-5)


def test_limit_side_and_second_input(srv):
    c = srv.client()
    img = rand_image(4, 100, 30)
    off = np.array([[10.0]], np.float32)
    out = c.infer(InferenceRequest("means", {"img": img, "off": off})).outputs["out"]
    # limit 40: 100x30 -> 40x12 -> multiples of 8 (ties to even): 40x16
    r = resize_u8(img, 40, 16).astype(np.float32) / 255
    np.testing.assert_allclose(out, r.mean(axis=(0, 1))[None] + 10, rtol=1e-5)


def test_concurrent_requests_batch_after_preprocess(srv):
    c = srv.client(timeout_s=30)
    before = srv.pool_status("cls_batched", c)
    imgs = [rand_image(10 + i, 30 + 7 * i, 40 + 5 * i) for i in range(8)]
    # PNGs of different sizes share batches: each is decoded and resized to
    # 32x48 on the executor, then batched (raw images batch among themselves)
    datas = [encode(im, "PNG") for im in imgs]
    results = [None] * 8

    def one(i):
        results[i] = c.infer(InferenceRequest("cls_batched", {"x": datas[i]})).outputs["y"]

    ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    for im, y in zip(imgs, results):
        np.testing.assert_allclose(y, prepared(im), atol=1e-5)
    after = srv.pool_status("cls_batched", c)["stats"]
    before = before["stats"]
    assert after["inference_count"] - before["inference_count"] == 8
    assert after["execution_count"] - before["execution_count"] < 8  # some were batched


def test_bad_input_fails_alone(srv):
    c = srv.client()
    with pytest.raises(InvalidArgumentError, match="not a PNG or JPEG image"):
        c.infer(InferenceRequest("cls", {"x": np.frombuffer(b"GIF89a\x01\x00", np.uint8)}))
    png = encode(rand_image(5), "PNG")
    with pytest.raises(InvalidArgumentError, match="corrupt PNG"):
        c.infer(InferenceRequest("cls", {"x": png[:len(png) // 2]}))
    jpg = encode(rand_image(6), "JPEG")
    with pytest.raises(InvalidArgumentError, match="corrupt JPEG"):
        c.infer(InferenceRequest("cls", {"x": jpg[:200]}))
    with pytest.raises(InvalidArgumentError, match="rank"):
        c.infer(InferenceRequest("cls", {"x": np.zeros((2, 3), np.uint8)}))
    with pytest.raises(InvalidArgumentError, match="dtype"):
        c.infer(InferenceRequest("cls", {"x": np.zeros((4, 4, 3), np.float32)}))
    # the pool still serves
    img = rand_image(7)
    y = c.infer(InferenceRequest("cls", {"x": encode(img, "PNG")})).outputs["y"]
    np.testing.assert_allclose(y, prepared(img), atol=1e-5)


def test_config_errors(sipd_bin, models_dir, tmp_path):
    import subprocess
    import harness

    def check(pre):
        s = harness.SipServer(tmp_path / "c", [{"name": "p", "model_path":
                                                 str(models_dir / "ident.onnx"),
                                                 "preprocess": pre}])
        path = s.write_config()
        r = subprocess.run([str(sipd_bin), "--check-config", str(path)],
                           capture_output=True, text=True, env=harness.sipd_env(), timeout=30)
        return r.returncode, r.stdout + r.stderr

    rc, out = check({"decode": True, "resize": "32x"})
    assert rc != 0 and "preprocess.resize" in out and "option size" in out, out
    # to_tensor then resize runs (the float NCHW tensor is resized: test_seed_models.py);
    # an int64 tensor fits no image step
    rc, out = check({"to_tensor": True, "cast": {"to": "int64"}, "resize": "32,48"})
    assert rc != 0 and "the step before (cast)" in out, out
    rc, out = check({"resize": "32,48", "decode": True})
    assert rc != 0 and "first step" in out, out
    rc, out = check({"blur": 3})
    assert rc != 0 and "not a preprocess step" in out, out
    rc, out = check({"decode": True, "resize": "32,48", "to_tensor": {"scale": "1/255"}})
    assert rc == 0, out


def test_letterbox_step(srv):
    """preprocess.letterbox: scaled to fit H x W keeping the aspect ratio,
    centred, the rest 114 (numpy reference)."""
    img = rand_image(21, 50, 70)
    out = srv.client().infer(InferenceRequest("boxed", {"x": img})).outputs["y"]
    r = min(H / 50, W / 70)
    nh, nw = int(np.floor(50 * r + 0.5)), int(np.floor(70 * r + 0.5))
    top, left = (H - nh) // 2, (W - nw) // 2
    ref = np.full((H, W, 3), 114, np.uint8)
    ref[top:top + nh, left:left + nw] = resize_u8(img, nh, nw)
    assert out.shape == (1, 3, H, W)
    got = out[0].transpose(1, 2, 0) * 255
    np.testing.assert_allclose(got, ref, atol=1.01)  # rounding of exact halves may differ
    assert (np.abs(got[:, :left] - 114) < 1e-3).all()  # the padding itself is exact
