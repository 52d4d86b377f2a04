"""The real proof: examples/ocr.yaml's `ocr` pipeline (PP-OCRv4 det -> DB ->
crops -> angle classifier -> rotate180 -> rec -> CTC) on rendered text.

Known lines, Latin and Chinese, one of them upside down, are drawn on a
white image, sent as PNG bytes, and must come back exactly (word gaps,
capital I against lowercase l, digits and punctuation included), in reading
order; an image without text must end after detection (early exit) without
recognition ever running.
The pipeline is the shipped examples/ocr.yaml, with only its endpoints (and
relative paths) adapted to the test's server."""

import io
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import harness
from cann_sip import InferenceRequest
from harness import OCR_DIR, REPO

Image = pytest.importorskip("PIL.Image", reason="python3-pil missing (run scripts/deps.sh)")
from PIL import ImageDraw, ImageFont  # noqa: E402

DEJAVU = Path("/usr/share/fonts/truetype/dejavu")
LATIN = DEJAVU / "DejaVuSans-Bold.ttf"
CJK = Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc")
MODELS = [OCR_DIR / f for f in ("ch_PP-OCRv4_det_infer.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx",
                                "ch_PP-OCRv4_rec_infer.onnx", "ppocr_keys_v1.txt")]

pytestmark = [
    pytest.mark.skipif(not all(p.is_file() for p in MODELS),
                       reason="third_party/models/ocr missing (run scripts/deps.sh)"),
    pytest.mark.skipif(not all(p.is_file() for p in (LATIN, DEJAVU / "DejaVuSans.ttf",
                                                     DEJAVU / "DejaVuSerif.ttf", CJK)),
                       reason="fonts-dejavu-core / fonts-wqy-zenhei missing (run scripts/deps.sh)"),
]

# (text, font, pixel size, upside down), drawn as typeset (ordinary word gaps).
LINES = [
    ("Hello sip 2026", LATIN, 40, False),
    ("你好世界", CJK, 40, False),
    ("Pipelines exit early", LATIN, 40, True),
    ("深度学习推理服务", CJK, 36, False),
]

# A printed document's lines: word gaps next to punctuation, a capital I
# (which a crop without margin above the letters reads as l), digits.
INVOICE = ["Invoice No. 123", "Total due: 45.60 EUR", "Pay by 2026-01-31, thanks!"]


def line_tile(text, font, px, flip):
    """One line on a white tile with a 12 px border."""
    f = ImageFont.truetype(str(font), px)
    ascent, descent = f.getmetrics()
    tile = Image.new("RGB", (int(f.getlength(text)) + 24, ascent + descent + 24), "white")
    ImageDraw.Draw(tile).text((12, 12), text, font=f, fill="black")
    return tile.rotate(180) if flip else tile


def render(lines, size=(760, 460), left=40, top=30, gap=40):
    """A white RGB image with the lines one under the other (upside-down
    ones turned 180 degrees); returns (PNG bytes, image)."""
    img = Image.new("RGB", size, "white")
    y = top
    for text, font, px, flip in lines:
        tile = line_tile(text, font, px, flip)
        img.paste(tile, (left, y))
        y += tile.size[1] + gap
    b = io.BytesIO()
    img.save(b, "PNG")
    return b.getvalue(), img


def config_from_example(srv):
    """examples/ocr.yaml with the test server's endpoints and absolute paths."""
    text = (REPO / "examples" / "ocr.yaml").read_text(encoding="utf-8")
    endpoints = "\n".join("    - " + e for e in (srv.unix_endpoint, srv.tcp_endpoint))
    text, n = re.subn(r"(?m)^  endpoints:\n(?:    - .*\n)+", "  endpoints:\n" + endpoints + "\n",
                      text)
    assert n == 1, "examples/ocr.yaml: no server.endpoints list to replace"
    text = text.replace("../third_party/", str(REPO / "third_party") + "/")
    return text


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    s = harness.SipServer(tmp_path_factory.mktemp("ocr_pl"), [], server={})
    s.write_config = lambda: (s.config_path.write_text(config_from_example(s)), s.config_path)[1]
    s.start(ready_timeout=60)
    yield s
    assert s.stop() == 0, s.log_tail()


@pytest.fixture(scope="module")
def client(srv):
    return srv.client(timeout_s=120)


def ocr(client, png):
    return client.infer(InferenceRequest("ocr", {"image": np.frombuffer(png, np.uint8)}))


def texts(r):
    return [t.decode("utf-8") for t in r.outputs["text"]]


def test_pipeline_is_ready(client):
    info = client.info(2)  # pools and pipelines
    pl = {p["name"]: p for p in info["pipelines"]}["ocr"]
    assert pl["state"] == "READY", pl
    # PNG/JPEG bytes in (decode_image's input); lines, scores, 4-point boxes out.
    assert pl["inputs"] == [{"name": "image", "dtype": "uint8", "shape": [-1]}]
    outs = {o["name"]: o for o in pl["outputs"]}
    assert set(outs) == {"text", "scores", "boxes"}
    assert outs["text"]["dtype"] == "string" and outs["scores"]["dtype"] == "float32"
    assert outs["boxes"]["dtype"] == "float32"


def test_recognises_rendered_lines(client):
    png, _ = render(LINES)
    r = ocr(client, png)
    assert r.early_exit is None
    got = texts(r)
    assert got == [line[0] for line in LINES], got
    assert np.all(r.outputs["scores"] > 0.8), r.outputs["scores"]
    boxes = r.outputs["boxes"]
    assert boxes.shape == (len(LINES), 4, 2)
    # boxes are in the source image's pixels, top to bottom, inside it
    assert np.all(np.diff(boxes[:, 0, 1]) > 0)
    assert boxes[..., 0].max() <= 760 and boxes[..., 1].max() <= 460
    # the classifier called the third line upside down, and only that one
    cls = r.stage_outputs["cls"]["softmax_0.tmp_0"]
    assert list(cls[:, 1] > 0.9) == [line[3] for line in LINES], cls


@pytest.mark.parametrize("variant", range(6))
def test_robust_to_placement(client, variant):
    # the same lines at other font sizes, offsets and image sizes (some
    # beyond 960 px: detection then runs on a scaled-down image)
    rng = np.random.default_rng(variant)
    lines = [(t, f, int(px + rng.integers(-2, 3)), flip) for t, f, px, flip in LINES]
    png, _ = render(lines, size=(int(rng.integers(700, 1300)), int(rng.integers(460, 800))),
                    left=int(rng.integers(10, 80)), top=int(rng.integers(10, 60)),
                    gap=int(rng.integers(30, 60)))
    assert texts(ocr(client, png)) == [line[0] for line in LINES]


@pytest.mark.parametrize("font,px", [("DejaVuSans.ttf", 32), ("DejaVuSans.ttf", 38),
                                     ("DejaVuSans-Bold.ttf", 34), ("DejaVuSans-Bold.ttf", 42),
                                     ("DejaVuSerif.ttf", 31)])
def test_keeps_word_gaps_and_capital_i(client, font, px):
    # The invoice lines, and the second one again upside down, come back
    # exactly: spaces kept, "Invoice" not "lnvoice". With PaddleOCR's
    # unclip_ratio 1.5 the boxes hug the ink, and every one of these pages
    # lost a word gap ("Totaldue:45.60EUR", "Total due:45.60 EUR").
    lines = [(t, DEJAVU / font, px, False) for t in INVOICE]
    lines.append((INVOICE[1], DEJAVU / font, px, True))
    png, _ = render(lines, size=(820, 520))
    r = ocr(client, png)
    assert texts(r) == [line[0] for line in lines], (font, px, texts(r))
    assert np.all(r.outputs["scores"] > 0.8), r.outputs["scores"]


def test_words_of_one_line_read_left_to_right(client):
    # Two columns of one row, the right cell 2 px higher than the left, are
    # read left to right (PaddleOCR's sorted_boxes), not in the order the
    # detector met them (the higher one first).
    f = ImageFont.truetype(str(DEJAVU / "DejaVuSans.ttf"), 40)
    img = Image.new("RGB", (900, 240), "white")
    draw = ImageDraw.Draw(img)
    for y, left, right in ((60, "Date:", "31.01.2026"), (150, "Total", "45.60")):
        draw.text((40, y), left, font=f, fill="black")
        draw.text((520, y - 2), right, font=f, fill="black")
    b = io.BytesIO()
    img.save(b, "PNG")
    r = ocr(client, b.getvalue())
    assert texts(r) == ["Date:", "31.01.2026", "Total", "45.60"], texts(r)
    assert np.all(np.diff(r.outputs["boxes"][:, 0, 0].reshape(2, 2), axis=1) > 0)


def test_jpeg_too(client):
    _, img = render(LINES)
    b = io.BytesIO()
    img.save(b, "JPEG", quality=92)
    assert texts(ocr(client, b.getvalue())) == [line[0] for line in LINES]


def rec_counters(client):
    st = client.status()
    pl = {p["name"]: p for p in st["pipelines"]}["ocr"]
    stages = {s["name"]: s for s in pl["stages"]}
    pools = {p["name"]: p for p in st["pools"]}
    return stages["rec"]["ran"], pools["ocr_rec"]["stats"]["inference_count"], pl["early_exits"]


def test_no_text_exits_after_detection(client):
    ran0, rec0, exits0 = rec_counters(client)
    png, _ = render([])
    r = ocr(client, png)
    assert r.early_exit == "db"
    assert set(r.stage_outputs) == {"decode", "resize", "tensor", "norm", "det", "db"}
    assert r.stage_outputs["db"]["boxes"].shape == (0, 4, 2)
    for s in ("cls_crop", "cls", "rec_crop", "rotate", "rec", "ctc"):
        assert r.stages[s]["status"] == "not_reached", r.stages
    ran1, rec1, exits1 = rec_counters(client)
    assert (ran1, rec1) == (ran0, rec0)  # recognition never ran
    assert exits1 == exits0 + 1


def test_cli_prints_lines(srv, tmp_path):
    png, _ = render(LINES)
    f = tmp_path / "lines.png"
    f.write_bytes(png)
    out = subprocess.run([str(harness.BUILD_DIR / "sip"), "-e", srv.endpoint, "infer", "ocr",
                          "--image", str(f)], capture_output=True, timeout=60,
                         env=harness.sipd_env())
    text = out.stdout.decode("utf-8")
    assert out.returncode == 0, text + out.stderr.decode()
    assert "%d lines" % len(LINES) in text
    for line in LINES:
        row = [ln for ln in text.splitlines() if '"%s"' % line[0] in ln]
        assert row, text
        assert "score" in row[0] and row[0].count("(") == 4  # four corners
