"""The bundled examples serve as shipped: examples/sip.yaml (what `make run`
starts) and examples/ocr.yaml load with every pool and pipeline READY, and
answer over the native protocol and HTTP. Only the endpoints and relative
paths are adapted to the test's server."""

import re
import subprocess

import numpy as np
import pytest

import harness
import kserve as K
from cann_sip import InferenceRequest
from harness import OCR_DIR, REPO

pytestmark = pytest.mark.skipif(
    not (OCR_DIR / "ch_PP-OCRv4_rec_infer.onnx").is_file(),
    reason="third_party/models/ocr missing (run scripts/deps.sh)")


def adapted(name, srv, tiny_dir):
    text = (REPO / "examples" / name).read_text(encoding="utf-8")
    endpoints = "\n".join("    - " + e for e in (srv.unix_endpoint, srv.tcp_endpoint))
    text, n = re.subn(r"(?m)^  endpoints:\n(?:    - .*\n)+", "  endpoints:\n" + endpoints + "\n",
                      text)
    assert n == 1, "examples/%s: no server.endpoints list to replace" % name
    text = re.sub(r'(?m)^  http: .*$', '  http: "127.0.0.1:0"', text)
    text = text.replace("../third_party/", str(REPO / "third_party") + "/")
    return text.replace("model_path: models/tiny", "model_path: " + str(tiny_dir))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    subprocess.check_call(["/usr/bin/python3", str(REPO / "examples" / "make_tiny_model.py"),
                           str(d / "1" / "model.onnx")])
    return d


def serve_example(name, tmp_path, tiny_dir):
    s = harness.SipServer(tmp_path, [], server={})
    s.write_config = lambda: (s.config_path.write_text(adapted(name, s, tiny_dir)),
                              s.config_path)[1]
    return s


@pytest.mark.parametrize("name", ["sip.yaml", "ocr.yaml"])
def test_example_checks(name, sipd_bin, tmp_path, tiny_dir):
    # --check-config reads the model files too: the tiny model `make run`
    # makes is the test's own copy here (a fresh clone has none).
    text = (REPO / "examples" / name).read_text(encoding="utf-8")
    text = text.replace("../third_party/", str(REPO / "third_party") + "/")
    cfg = tmp_path / name
    cfg.write_text(text.replace("model_path: models/tiny", "model_path: " + str(tiny_dir)))
    r = subprocess.run([str(sipd_bin), "--check-config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_make_run_example_serves(sipd_bin, tmp_path, tiny_dir):
    s = serve_example("sip.yaml", tmp_path, tiny_dir)
    s.start(ready_timeout=90)
    try:
        c = s.client(timeout_s=60)
        info = c.info(2)
        assert {p["name"]: p["state"] for p in info["pools"]} == {
            "ocr_det": "READY", "ocr_cls": "READY", "ocr_rec": "READY", "tiny": "READY"}
        assert {p["name"]: p["state"] for p in info["pipelines"]} == {"ocr": "READY"}
        x = np.arange(8, dtype=np.float32).reshape(2, 4)
        np.testing.assert_allclose(c.infer(InferenceRequest("tiny", {"x": x})).outputs["y"],
                                   2 * x + 1)
        # The README's curl examples: HTTP is on in the shipped example.
        base = K.http_base(s)
        assert K.get(base + "/v2/health/ready").status == 200
        assert K.get(base + "/v2/models/ocr").json()["platform"] == "ensemble"
        r = K.infer(base, "tiny", {"x": x})
        assert r.status == 200, r
        np.testing.assert_allclose(K.decode_outputs(r)[1]["y"], 2 * x + 1)
    finally:
        assert s.stop() == 0, s.log_tail()
