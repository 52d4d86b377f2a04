"""The README's examples run as printed against the bundled example.

Every ```sh and ```python block of README.md is taken from the file when the
tests run (so the README cannot drift from what works) and run against a sipd
serving examples/sip.yaml, the server `make run` starts.

Markers (an HTML comment alone on the line right before a block's fence):
- `<!-- quickstart: skip (WHY) -->`: the block is not run (it builds or starts
  the server itself, needs something the example does not have, or acts on
  the machine); WHY is required.
- `<!-- quickstart: continues (WHY) -->` (python only): the block continues
  the first runnable python block, whose code runs before it in the same
  interpreter (its `client`, imports).
Any other `<!-- quickstart: ... -->` marker is an error. Other languages (c,
yaml, plain) are fragments or file layouts and are not run.

How a block runs, as a reader at the repository's root would run it:
- in one scratch directory holding `build` (a link to the build directory),
  `examples` (a link to the repository's examples/) and `clients/python` (a
  copy, so an install leaves the repository alone), with HOME there too;
- sh blocks with `bash -e -o pipefail`, curl failing on HTTP errors
  (--fail-with-body) so an error answer cannot pass as printed output;
  python blocks with /usr/bin/python3 and PYTHONPATH=clients/python;
- the example's fixed addresses (ipc:///tmp/sip_service.sock,
  tcp://127.0.0.1:8500, HTTP localhost:8000) are replaced by the test
  server's, which sipd takes from --endpoint/--http instead of the config's,
  and SIP_ENDPOINT points the `sip` CLI's default at it.
Each block must exit 0 within BLOCK_TIMEOUT_S; where its comments say what it
prints, EXPECTED names a key piece of that output.
"""

import os
import re
import shutil
import struct
import subprocess

import pytest

import harness
from harness import OCR_DIR, REPO

README = REPO / "README.md"
EXAMPLE = REPO / "examples" / "sip.yaml"
TINY_MODEL = REPO / "examples" / "models" / "tiny" / "1" / "model.onnx"
BLOCK_TIMEOUT_S = 120
DEFAULT_IPC = "ipc:///tmp/sip_service.sock"
DEFAULT_TCP = "tcp://127.0.0.1:8500"
DEFAULT_HTTP = re.compile(r"\b(?:localhost|127\.0\.0\.1):8000\b")

MARKER = re.compile(r"^<!--\s*quickstart:\s*(\w+)\s*(?:\((.*)\))?\s*-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")
RUN_LANGS = ("sh", "python")

# {a line of the block: [what its output (stdout and stderr) must contain]}.
# Each key must be in some runnable block, so a check cannot silently lapse.
EXPECTED = {
    "build/sip infer ocr --image examples/page.png": [
        '"Invoice No. 123"', "y: float32 [2, 4] = 3 5 7 9 11 13 15 17",
        "report written to report.html"],
    "curl localhost:8000/v2/health/ready": ['{"ready":true}', '"datatype":"FP32"',
                                            '"shape":[1,4]', "sip_ready 1"],
    'client.subscribe("tiny")': ["INFERENCE_COMPLETE"],
    'region.ndarray((1024, 4)': ["[ 9. 11. 13. 15.]"],
    "pip install": ["Successfully installed cann-sip"],
}


def readme_blocks(text):
    """[(line number of the fence, lang, code, marker kind or None, reason)]"""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        assert j < len(lines), "README.md:%d: a code block that is never closed" % (start + 1)
        kind = reason = None
        if start > 0:
            mm = MARKER.match(lines[start - 1])
            if mm:
                kind, reason = mm.group(1), (mm.group(2) or "").strip()
        blocks.append((start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", kind, reason))
        i = j + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
RUNNABLE = [b for b in BLOCKS if b[1] in RUN_LANGS and b[3] != "skip"]


def test_markers_are_known_and_say_why():
    text = README.read_text(encoding="utf-8").splitlines()
    fences = {line - 1 for line, *_ in BLOCKS}  # 0-based index of each fence line
    for n, line in enumerate(text):
        if line.startswith("<!--") and "quickstart:" in line:
            m = MARKER.match(line)
            assert m, "README.md:%d: %r: expected <!-- quickstart: skip|continues (why) -->" % (
                n + 1, line)
            assert m.group(1) in ("skip", "continues"), (
                "README.md:%d: marker %r: expected skip or continues" % (n + 1, m.group(1)))
            assert (m.group(2) or "").strip(), "README.md:%d: a marker must say why" % (n + 1)
            assert n + 1 in fences, (
                "README.md:%d: a marker must be the line right before a block's ```" % (n + 1))
    for line, lang, _, kind, _ in BLOCKS:
        if kind == "continues":
            assert lang == "python", "README.md:%d: only python blocks continue" % line
    assert len(RUNNABLE) >= 5, "expected the README's sh and python examples to run, found %d" % (
        len(RUNNABLE))
    for key in EXPECTED:
        assert any(key in code for _, _, code, _, _ in RUNNABLE), (
            "no runnable README block has %r any more: update EXPECTED" % key)


class ExampleServer(harness.SipServer):
    """sipd on examples/sip.yaml itself, its addresses replaced by the
    command line's --endpoint and --http (so nothing collides with `make run`
    or another test)."""

    def __init__(self, workdir):
        super().__init__(workdir, [])
        self.config_path = EXAMPLE
        self.http_port = None

    def write_config(self):
        return self.config_path

    def start(self, ready_timeout=90):
        sipd = harness.require_sipd()
        for attempt in range(3):
            self.port, self.http_port = harness.free_port(), harness.free_port()
            self.tcp_endpoint = "tcp://127.0.0.1:%d" % self.port
            self._log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [str(sipd), "--config", str(EXAMPLE), "--endpoint", self.unix_endpoint,
                 "--endpoint", self.tcp_endpoint, "--http", "127.0.0.1:%d" % self.http_port],
                stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                env=harness.sipd_env(), cwd=str(self.workdir))
            harness.track(self.proc, "sipd --config %s" % EXAMPLE)
            try:
                self._wait_ready(ready_timeout)
                return self
            except harness._ExitedEarly:
                if attempt < 2 and "in use" in self.log().lower():
                    self._log.close()
                    continue
                self.returncode = self.proc.returncode
                raise AssertionError("sipd exited with %s during startup:\n%s"
                                     % (self.proc.returncode, self.log_tail()))
        raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def example_server(sipd_bin, tmp_path_factory):
    if not (OCR_DIR / "ch_PP-OCRv4_rec_infer.onnx").is_file():
        pytest.skip("third_party/models/ocr missing (run scripts/deps.sh)")
    if not TINY_MODEL.is_file():  # what `make run` makes first
        subprocess.check_call(["/usr/bin/python3", str(REPO / "examples" / "make_tiny_model.py"),
                               str(TINY_MODEL)], timeout=60)
    srv = ExampleServer(tmp_path_factory.mktemp("readme_sipd"))
    srv.start()
    yield srv
    failures = harness.stop_all([srv])
    assert not failures, "\n\n".join(failures)


@pytest.fixture(scope="module")
def scratch(sipd_bin, tmp_path_factory):
    """The directory the blocks run in, laid out like the repository's root."""
    d = tmp_path_factory.mktemp("readme_run")
    os.symlink(harness.BUILD_DIR, d / "build")
    os.symlink(REPO / "examples", d / "examples")
    shutil.copytree(REPO / "clients" / "python", d / "clients" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    (d / "home").mkdir()
    return d


def localise(code, srv):
    """The block with the example's addresses replaced by the test server's."""
    code = code.replace(DEFAULT_IPC, srv.unix_endpoint).replace(DEFAULT_TCP, srv.tcp_endpoint)
    code = DEFAULT_HTTP.sub("127.0.0.1:%d" % srv.http_port, code)
    for default in ("sip_service.sock", ":8500", ":8000"):
        assert default not in code, "the block still names %s after the rewrite:\n%s" % (
            default, code)
    return code


def first_python_block():
    for b in RUNNABLE:
        if b[1] == "python" and b[3] is None:
            return b
    raise AssertionError("README.md has no runnable python block for a block to continue")


@pytest.mark.parametrize("block", RUNNABLE, ids=["README.md:%d-%s" % (b[0], b[1])
                                                 for b in RUNNABLE])
def test_readme_block_runs_as_printed(block, example_server, scratch):
    line, lang, code, kind, _ = block
    env = harness.sipd_env()
    env.update(HOME=str(scratch / "home"), SIP_ENDPOINT=example_server.unix_endpoint,
               PATH="/usr/bin:/bin:" + env.get("PATH", ""),
               PYTHONPATH=str(scratch / "clients" / "python"))
    env.pop("PYTHONHOME", None)
    if lang == "sh":
        script = scratch / ("block%d.sh" % line)
        script.write_text("curl() { command curl -sS --fail-with-body \"$@\"; }\n"
                          + localise(code, example_server))
        argv = ["bash", "-e", "-o", "pipefail", str(script)]
    else:
        if kind == "continues":
            code = first_python_block()[2] + code
        script = scratch / ("block%d.py" % line)
        script.write_text(localise(code, example_server))
        argv = ["/usr/bin/python3", str(script)]
    try:
        r = subprocess.run(argv, cwd=str(scratch), env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        # The partial output comes as bytes even with text=True.
        out = b"".join(x if isinstance(x, bytes) else x.encode()
                       for x in (e.stdout or b"", e.stderr or b""))
        pytest.fail("README.md:%d: the %s block did not finish within %d s; output (last 4000 "
                    "bytes):\n%s" % (line, lang, BLOCK_TIMEOUT_S,
                                     out[-4000:].decode("utf-8", "replace")))
    out = r.stdout + r.stderr
    assert r.returncode == 0, (
        "README.md:%d: the %s block exited %d; expected 0. Output:\n%s\nserver log:\n%s"
        % (line, lang, r.returncode, out[-4000:], example_server.log_tail(20)))
    for key, wanted in EXPECTED.items():
        if key in code:
            for w in wanted:
                assert w in out, "README.md:%d: expected %r in the output:\n%s" % (
                    line, w, out[-4000:])
    if "--data-binary @x.bin -o y.bin" in code:
        # The raw-body answer: the JSON header, then y = 2x + 1 for x = 1..8.
        body = (scratch / "y.bin").read_bytes()
        assert b'"shape":[2,4]' in body, body[:300]
        assert body.endswith(struct.pack("<8f", *(2 * v + 1 for v in range(1, 9)))), body[-32:]
