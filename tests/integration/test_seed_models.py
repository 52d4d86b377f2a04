"""Seed 003's model list (docs/seed-models.md), written verbatim: as the whole
config file (JSON, .om paths served from the .onnx of the same name) and as
the `models:` section of a YAML config. Images go through both pools over
HTTP and the outputs are compared with numpy running the seed's preprocess
steps in the seed's order: to_tensor, then resize (letterboxed for
face_detect: `letterbox: true`), then normalize.

The models stand in for the seed's: face_detect takes [1,3,640,640] and has
3 outputs (the tensor it received, its channel means, its max); face_quality
takes [1,3,112,112] and has 1 output (the tensor it received)."""

import json
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import harness
import kserve
from harness import SipServer, track

# Seed 003, section 3.1, as the seed writes it (its quotes restored).
SEED_LIST = """[
  {
    "model_name": "face_detect",
    "model_path": "./models/face_detect.om",
    "model_type": "detection",
    "input_shapes": [
      {"name": "input", "shape": [1, 3, 640, 640], "format": "NCHW", "dtype": "float32"}
    ],
    "output_nums": 3,
    "preprocess": {
      "to_tensor": true,
      "resize": [640, 640],
      "normalize": {"mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]},
      "letterbox": true
    },
    "max_batch_size": 1
  },
  {
    "model_name": "face_quality",
    "model_path": "./models/face_quality.om",
    "model_type": "classification",
    "input_shapes": [
      {"name": "input", "shape": [1, 3, 112, 112], "format": "NCHW", "dtype": "float32"}
    ],
    "output_nums": 1,
    "preprocess": {
      "to_tensor": true,
      "resize": [112, 112],
      "normalize": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
      "letterbox": false
    },
    "max_batch_size": 1
  }
]
"""

# float32 arithmetic in a different order than numpy's: values are O(1).
ATOL = 1e-4


def model(nodes, inputs, outputs):
    g = helper.make_graph(nodes, "g", inputs, outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def write_models(d):
    d.mkdir(parents=True, exist_ok=True)
    f = TensorProto.FLOAT
    det = model([helper.make_node("Identity", ["input"], ["image"]),
                 helper.make_node("ReduceMean", ["input"], ["mean"], axes=[2, 3], keepdims=0),
                 helper.make_node("ReduceMax", ["input"], ["max"], axes=[1, 2, 3], keepdims=0)],
                [helper.make_tensor_value_info("input", f, [1, 3, 640, 640])],
                [helper.make_tensor_value_info("image", f, [1, 3, 640, 640]),
                 helper.make_tensor_value_info("mean", f, [1, 3]),
                 helper.make_tensor_value_info("max", f, [1])])
    qual = model([helper.make_node("Identity", ["input"], ["image"])],
                 [helper.make_tensor_value_info("input", f, [1, 3, 112, 112])],
                 [helper.make_tensor_value_info("image", f, [1, 3, 112, 112])])
    onnx.save(det, str(d / "face_detect.onnx"))
    onnx.save(qual, str(d / "face_quality.onnx"))


class ListServer(SipServer):
    """sipd on a config file written as given (the seed's JSON list, which
    names no endpoints: --endpoint and --http give them)."""

    def __init__(self, workdir, text, filename):
        super().__init__(workdir, [])
        self.text = text
        self.config_path = self.workdir / filename

    def write_config(self):
        self.config_path.write_text(self.text)
        return self.config_path

    def start(self, ready_timeout=harness.READY_TIMEOUT_S, until_ready=True):
        self.write_config()
        self.http_port = harness.free_port()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(harness.require_sipd()), "--config", str(self.config_path),
             "--endpoint", self.unix_endpoint, "--http", "127.0.0.1:%d" % self.http_port],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env=harness.sipd_env(), cwd=str(self.workdir))
        track(self.proc, "sipd --config %s" % self.config_path)
        self._wait_ready(ready_timeout, until_ready)
        return self

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.http_port


class ModelsSectionServer(SipServer):
    """sipd on sip's YAML config whose pools come from a `models:` section."""

    def __init__(self, workdir, models):
        super().__init__(workdir, [], server={"http": "127.0.0.1:%d" % harness.free_port()})
        self.models = models

    def config(self):
        cfg = super().config()
        del cfg["session_pools"]
        cfg["models"] = self.models
        return cfg


class harness_serving:
    def __init__(self, srv):
        self.srv = srv

    def __enter__(self):
        self.srv.start()
        return self.srv

    def __exit__(self, *exc):
        if exc[0] is not None:
            self.srv.kill()
            return False
        rc = self.srv.stop()
        assert rc == 0, self.srv.log_tail()
        return False


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("seed003")
    write_models(d / "models")
    return d


@pytest.fixture(scope="module")
def srv(sipd_bin, seed_dir):
    with harness_serving(ListServer(seed_dir, SEED_LIST, "models.json")) as s:
        yield s


# ---- numpy reference of the seed's steps ----------------------------------

def taps(src, dst):
    """OpenCV INTER_LINEAR's source positions (half-pixel centres, clamped)."""
    p = (np.arange(dst) + 0.5) * (src / dst) - 0.5
    p = np.clip(p, 0, src - 1)
    i0 = np.floor(p).astype(int)
    i1 = np.minimum(i0 + 1, src - 1)
    return i0, i1, (p - i0).astype(np.float32)


def resize_planes(x, h, w):
    """Bilinear resize of a float NCHW tensor, plane by plane (no rounding)."""
    y0, y1, fy = taps(x.shape[2], h)
    x0, x1, fx = taps(x.shape[3], w)
    top = (1 - fx) * x[:, :, y0][:, :, :, x0] + fx * x[:, :, y0][:, :, :, x1]
    bot = (1 - fx) * x[:, :, y1][:, :, :, x0] + fx * x[:, :, y1][:, :, :, x1]
    fy = fy[None, None, :, None]
    return ((1 - fy) * top + fy * bot).astype(np.float32)


def to_tensor(img):
    """HWC uint8 -> [1,C,H,W] float32, scale 1 (sip's default)."""
    return img.astype(np.float32).transpose(2, 0, 1)[None]


def letterbox_planes(x, h, w, pad=114.0):
    r = min(h / x.shape[2], w / x.shape[3])
    nh, nw = int(np.floor(x.shape[2] * r + 0.5)), int(np.floor(x.shape[3] * r + 0.5))
    top, left = (h - nh) // 2, (w - nw) // 2
    out = np.full((x.shape[0], x.shape[1], h, w), pad, np.float32)
    out[:, :, top:top + nh, left:left + nw] = resize_planes(x, nh, nw)
    return out


def normalize(x, mean, std, scale=1.0):
    mean = np.array(mean, np.float32)[None, :, None, None]
    std = np.array(std, np.float32)[None, :, None, None]
    return (x * np.float32(scale) - mean) / std


def face_detect_ref(img):
    x = letterbox_planes(to_tensor(img), 640, 640)
    return normalize(x, [123.675, 116.28, 103.53], [58.395, 57.12, 57.375])


def face_quality_ref(img):
    # mean/std in 0..1: the seed means (x / 255 - 0.5) / 0.5
    x = resize_planes(to_tensor(img), 112, 112)
    return normalize(x, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5], 1 / 255)


def rand_image(seed, h, w):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def infer(base, pool, img, outputs):
    r = kserve.infer(base, pool, {"input": img}, binary_inputs=["input"],
                     outputs=[(o, {"binary_data": True}) for o in outputs])
    assert r.status == 200, r
    return kserve.decode_outputs(r)[1]


# ---- tests ---------------------------------------------------------------

def test_seed_list_serves_both_pools(srv):
    assert ".om model path is served from the model of the same name" in srv.log()
    assert "face_detect.onnx" in srv.log() and "face_quality.onnx" in srv.log()
    meta = json.loads(kserve.get(srv.base + "/v2/models/face_detect").body)
    assert [o["name"] for o in meta["outputs"]] == ["image", "mean", "max"]
    img = rand_image(1, 300, 400)  # wider than tall: letterbox pads top and bottom
    out = infer(srv.base, "face_detect", img, ["image", "mean", "max"])
    ref = face_detect_ref(img)
    assert out["image"].shape == (1, 3, 640, 640) and out["image"].dtype == np.float32
    np.testing.assert_allclose(out["image"], ref, atol=ATOL)
    # the model's float32 mean of 409600 values: summation error ~1e-4
    np.testing.assert_allclose(out["mean"], ref.astype(np.float64).mean(axis=(2, 3)), atol=1e-3)
    np.testing.assert_allclose(out["max"], ref.max(axis=(1, 2, 3)), atol=ATOL)
    # the padding rows are 114 normalised, exactly as the seed's numbers say
    np.testing.assert_allclose(out["image"][0, :, 0, 0],
                               (114 - np.array([123.675, 116.28, 103.53])) /
                               np.array([58.395, 57.12, 57.375]), atol=1e-5)

    img = rand_image(2, 90, 70)
    q = infer(srv.base, "face_quality", img, ["image"])["image"]
    assert q.shape == (1, 3, 112, 112)
    np.testing.assert_allclose(q, face_quality_ref(img), atol=ATOL)
    assert q.min() >= -1 - 1e-6 and q.max() <= 1 + 1e-6  # 0..1 units: [-1, 1]


def test_tall_image_letterboxed_left_and_right(srv):
    img = rand_image(3, 500, 120)
    out = infer(srv.base, "face_detect", img, ["image"])["image"]
    np.testing.assert_allclose(out, face_detect_ref(img), atol=ATOL)


def test_models_section_of_yaml_config(sipd_bin, seed_dir, tmp_path):
    """The same list as sip's `models:` section, next to a server section."""
    (tmp_path / "models").symlink_to(seed_dir / "models")
    s = ModelsSectionServer(tmp_path, json.loads(SEED_LIST))
    with harness_serving(s):
        base = kserve.http_base(s)
        img = rand_image(4, 200, 260)
        np.testing.assert_allclose(infer(base, "face_quality", img, ["image"])["image"],
                                   face_quality_ref(img), atol=ATOL)
        np.testing.assert_allclose(infer(base, "face_detect", img, ["image"])["image"],
                                   face_detect_ref(img), atol=ATOL)


def check_config(sipd_bin, path):
    r = subprocess.run([str(sipd_bin), "--check-config", str(path)], capture_output=True,
                       text=True, env=harness.sipd_env(), timeout=30)
    return r.returncode, r.stdout + r.stderr


def seed_with(tmp_path, seed_dir, edit):
    """The seed's list with `edit` applied to its first entry, written
    under tmp_path next to the models."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "models").symlink_to(seed_dir / "models")
    lst = json.loads(SEED_LIST)
    edit(lst[0])
    p = tmp_path / "models.json"
    p.write_text(json.dumps(lst, indent=2))
    return p


def test_preprocess_order_is_the_written_order(sipd_bin, seed_dir, tmp_path):
    """resize before to_tensor (the uint8 image is resized and rounded) and
    to_tensor before resize (the float tensor is resized) both run, each as
    written: numpy does the same steps in the same order."""
    lst = json.loads(SEED_LIST)
    q = lst[1]
    uint8_first = dict(q, model_name="quality_u8",
                       preprocess={"resize": [112, 112], "to_tensor": True,
                                   "normalize": q["preprocess"]["normalize"]})
    lst.append(uint8_first)
    s = ListServer(tmp_path, json.dumps(lst), "models.json")
    (tmp_path / "models").symlink_to(seed_dir / "models")
    with harness_serving(s):
        img = rand_image(5, 37, 53)
        got_f = infer(s.base, "face_quality", img, ["image"])["image"]
        got_u = infer(s.base, "quality_u8", img, ["image"])["image"]
        np.testing.assert_allclose(got_f, face_quality_ref(img), atol=ATOL)
        # uint8 resize rounds to whole pixel values before to_tensor
        r = np.clip(np.floor(resize_planes(to_tensor(img), 112, 112) + 0.5), 0, 255)
        np.testing.assert_allclose(got_u, normalize(r, [0.5] * 3, [0.5] * 3, 1 / 255), atol=ATOL)
        assert np.abs(got_f - got_u).max() > 1e-3  # the order shows in the result


def test_orders_that_cannot_work_say_why(sipd_bin, seed_dir, tmp_path):
    def pre(p):
        p["preprocess"] = {"to_tensor": True, "cast": {"to": "int64"}, "resize": [640, 640]}
    rc, out = check_config(sipd_bin, seed_with(tmp_path / "a", seed_dir, pre))
    assert rc != 0 and "[0].preprocess.resize" in out and "the step before (cast)" in out, out
    assert "int64" in out, out

    def no_resize(p):
        p["preprocess"] = {"to_tensor": True, "letterbox": True}
    rc, out = check_config(sipd_bin, seed_with(tmp_path / "b", seed_dir, no_resize))
    assert rc != 0 and "[0].preprocess.letterbox" in out and "there is none" in out, out


def test_list_errors_name_the_place(sipd_bin, seed_dir, tmp_path):
    def unknown(p):
        p["model_format"] = "om"
    rc, out = check_config(sipd_bin, seed_with(tmp_path / "a", seed_dir, unknown))
    assert rc != 0 and "models.json:" in out and "[0].model_format: unknown key" in out, out
    assert "model_name, model_path" in out, out

    def missing(p):
        p["model_path"] = "./models/absent.om"
    rc, out = check_config(sipd_bin, seed_with(tmp_path / "b", seed_dir, missing))
    assert rc != 0 and "absent.om does not exist" in out and "no file beside it of the same name" in out, out

    def shape(p):
        p["input_shapes"][0]["shape"] = [1, 3, "x", 640]
    rc, out = check_config(sipd_bin, seed_with(tmp_path / "c", seed_dir, shape))
    assert rc != 0 and "[0].input_shapes[0].shape[2]" in out and "not a dim" in out, out


def test_declared_io_checked_at_load(sipd_bin, seed_dir, tmp_path):
    lst = json.loads(SEED_LIST)
    lst[0]["input_shapes"][0]["shape"] = [1, 3, 320, 320]
    s = ListServer(tmp_path, json.dumps(lst), "models.json")
    (tmp_path / "models").symlink_to(seed_dir / "models")
    with harness_serving(s):
        pools = {p["name"]: p for p in s.client().pools()}
        assert pools["face_quality"]["state"] == "READY"
        assert pools["face_detect"]["state"] == "FAILED"
        err = pools["face_detect"]["error"]
        assert "input_shapes[0]" in err and "1, 3, 320, 320" in err and "1, 3, 640, 640" in err


def test_output_nums_and_shapes_checked_without_preprocess(sipd_bin, seed_dir, tmp_path):
    """output_nums and input_shapes are compared with the loaded model
    whether or not the entry has preprocess steps."""
    lst = json.loads(SEED_LIST)
    del lst[0]["preprocess"]
    lst[0]["output_nums"] = 2          # the model has 3
    del lst[1]["preprocess"]
    lst[1]["input_shapes"][0]["dtype"] = "uint8"  # the model takes float32
    s = ListServer(tmp_path, json.dumps(lst), "models.json")
    (tmp_path / "models").symlink_to(seed_dir / "models")
    with harness_serving(s):
        pools = {p["name"]: p for p in s.client().pools()}
        assert pools["face_detect"]["state"] == "FAILED"
        err = pools["face_detect"]["error"]
        assert "output_nums is 2" in err and "3 outputs" in err, err
        assert pools["face_quality"]["state"] == "FAILED"
        err = pools["face_quality"]["error"]
        assert "input_shapes[0]" in err and "uint8" in err and "float32" in err, err
