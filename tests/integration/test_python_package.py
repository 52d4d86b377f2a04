"""cann_sip as an installable package: pip installs clients/python offline
into a fresh virtual environment (no build isolation, no index: Debian's
setuptools and numpy), the package imports from outside the repository
with a clean PYTHONPATH, its version is the project's (CMakeLists.txt), and
mypy passes on the installed package and on a program that uses it (and
catches a wrong call in one). No server needed."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import REPO

CLIENT = REPO / "clients" / "python"
INSTALL_TIMEOUT_S = 300
MYPY_TIMEOUT_S = 300


def clean_env():
    """The environment without anything that would find the repository's copy."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "MYPYPATH", "PYTHONSTARTUP")}
    env.update(PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONNOUSERSITE="1")
    return env


def run(cmd, cwd, timeout):
    p = subprocess.run([str(c) for c in cmd], cwd=str(cwd), env=clean_env(),
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace")


def project_version():
    m = re.search(r"project\(\s*sip\s+VERSION\s+([0-9][0-9.]*)", (REPO / "CMakeLists.txt").read_text())
    assert m, "CMakeLists.txt has no project(sip VERSION ...)"
    return m.group(1)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv (system site packages: numpy) with the package installed
    from a copy of clients/python (the build writes next to its sources)."""
    root = tmp_path_factory.mktemp("pkg")
    src = root / "src"
    shutil.copytree(CLIENT, src, ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "build", "*.egg-info", ".mypy_cache"))
    env_dir = root / "venv"
    rc, out = run([sys.executable, "-m", "venv", "--system-site-packages", env_dir], root, 120)
    if rc != 0 and "ensurepip" in out:
        pytest.skip("python3 -m venv cannot make a venv with pip here (Debian: python3-venv): "
                    + out[-500:])
    assert rc == 0, "python3 -m venv failed:\n" + out
    py = env_dir / "bin" / "python"
    rc, out = run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", src], root,
                  INSTALL_TIMEOUT_S)
    assert rc == 0, "pip install --no-build-isolation --no-index clients/python failed:\n" + out
    away = root / "elsewhere"  # outside the repository: nothing there to import
    away.mkdir()
    return {"root": root, "python": py, "cwd": away}


def test_installs_and_imports_outside_the_repository(venv):
    code = textwrap.dedent("""
        import json, sys, importlib.metadata as md
        import cann_sip, cann_sip.aio
        from cann_sip import protocol as P
        payload = P.encode_infer_request("p", {"x": [1.0, 2.0]})
        msg = P.decode_infer_request(payload)
        print(json.dumps({
            "file": cann_sip.__file__, "aio": cann_sip.aio.__file__,
            "version": cann_sip.__version__, "dist_version": md.version("cann-sip"),
            "aio_client": cann_sip.aio.SessionClient.__name__,
            "roundtrip": msg.inputs["x"].tolist(), "path": sys.path,
        }))
    """)
    rc, out = run([venv["python"], "-c", code], venv["cwd"], 60)
    assert rc == 0, "importing the installed package failed:\n" + out
    info = json.loads(out.strip().splitlines()[-1])
    site = str(venv["root"] / "venv")
    assert info["file"].startswith(site), "cann_sip came from %s, not the venv" % info["file"]
    assert info["aio"].startswith(site)
    assert not any(p.startswith(str(REPO)) for p in info["path"] if p), info["path"]
    assert info["aio_client"] == "SessionClient"
    assert info["roundtrip"] == [1.0, 2.0]
    installed = Path(info["file"]).parent
    assert (installed / "py.typed").is_file(), "py.typed is not installed (PEP 561)"
    assert {"client.py", "aio.py", "protocol.py", "messages.py"} <= {
        p.name for p in installed.glob("*.py")}


def test_version_is_the_projects(venv):
    want = project_version()
    rc, out = run([venv["python"], "-c",
                   "import cann_sip, importlib.metadata as md; "
                   "print(cann_sip.__version__, md.version('cann-sip'))"], venv["cwd"], 60)
    assert rc == 0, out
    module_version, dist_version = out.split()
    assert module_version == want, ("cann_sip.__version__ is %s; CMakeLists.txt says %s"
                                    % (module_version, want))
    assert dist_version == want, "the installed distribution says %s, not %s" % (dist_version,
                                                                                want)


def mypy_command():
    exe = shutil.which("mypy")
    if exe is None:
        # A skip fails in CI (conftest.py): scripts/deps.sh installs Debian's mypy.
        pytest.skip("mypy is not installed (Debian package mypy; scripts/deps.sh installs it)")
    return [exe, "--no-incremental", "--cache-dir", os.devnull]


def test_mypy_passes_on_the_installed_package(venv):
    rc, out = run(mypy_command() + ["--python-executable", venv["python"], "--strict",
                                    "-p", "cann_sip"], venv["cwd"], MYPY_TIMEOUT_S)
    assert rc == 0 and "Success" in out, "mypy --strict -p cann_sip:\n" + out


USER_PROGRAM = '''
import asyncio
from typing import List

import numpy as np

from cann_sip import InferenceRequest, InferenceResponse, SessionClient, SipError
from cann_sip.aio import SessionClient as AsyncClient


def threaded(endpoint: str) -> float:
    with SessionClient(endpoint, timeout_s=5) as c:
        r: InferenceResponse = c.infer(InferenceRequest("tiny", {"x": np.ones((1, 4), np.float32)}))
        return r.latency_ms


async def gathered(endpoint: str) -> List[InferenceResponse]:
    async with AsyncClient(endpoint, timeout_s=5) as c:
        try:
            return list(await asyncio.gather(*(
                c.infer(InferenceRequest("tiny", {"x": np.ones((1, 4), np.float32)}))
                for _ in range(4))))
        except SipError as e:
            print(e.code, e.message)
            raise
'''


def test_mypy_checks_programs_that_use_it(venv):
    prog = venv["cwd"] / "prog.py"
    prog.write_text(USER_PROGRAM)
    bad = venv["cwd"] / "bad.py"
    bad.write_text(USER_PROGRAM + '''

async def wrong(c: AsyncClient) -> int:
    r = await c.infer("tiny")
    return r.latency_ms
''')
    base = mypy_command() + ["--python-executable", venv["python"], "--strict"]
    rc, out = run(base + [prog], venv["cwd"], MYPY_TIMEOUT_S)
    assert rc == 0, "mypy on a program using cann_sip:\n" + out
    rc, out = run(base + [bad], venv["cwd"], MYPY_TIMEOUT_S)
    assert rc == 1, "mypy did not catch the wrong calls:\n" + out
    assert 'Argument 1 to "infer" of "SessionClient" has incompatible type "str"' in out, out
    assert 'Incompatible return value type (got "float", expected "int")' in out, out
