"""The sip and sipd command lines without a server: --version prints the
project's version (CMakeLists.txt), and every --help works with no sipd to
talk to (exit 0, the usage on stdout)."""

import re
import subprocess
from pathlib import Path

import pytest

from harness import BUILD_DIR, require_sipd

REPO = Path(__file__).resolve().parents[2]
NOWHERE = "ipc:///nonexistent/sip-test.sock"


def project_version():
    m = re.search(r"project\(sip VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text())
    return m.group(1)


def run(*argv):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=30)


def test_versions():
    sipd = require_sipd()
    v = project_version()
    for argv, want in (([sipd, "--version"], "sipd " + v), ([BUILD_DIR / "sip", "--version"], "sip " + v),
                       ([BUILD_DIR / "sip", "-V"], "sip " + v)):
        r = run(*argv)
        assert r.returncode == 0 and r.stdout.strip() == want, (argv, r)


@pytest.mark.parametrize("words", [["--help"], ["status", "--help"], ["infer", "--help"],
                                   ["bench", "--help"], ["bench", "tiny", "--help"],
                                   ["fault", "-h"], ["pool", "--help"], ["models", "--help"],
                                   ["report", "--help"]])
def test_help_needs_no_server(words):
    require_sipd()
    r = run(BUILD_DIR / "sip", "-e", NOWHERE, *words)
    assert r.returncode == 0, r
    assert r.stdout.startswith("usage: sip"), r.stdout[:200]
    assert "cannot connect" not in r.stderr


def test_sipd_help():
    r = run(require_sipd(), "--help")
    assert r.returncode == 0 and "usage" in r.stdout.lower() and "--config" in r.stdout, r
