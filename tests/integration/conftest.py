"""Fixtures for the sip integration tests.

Run from the repository root:  PYTHONPATH=clients/python python3 -m pytest -q tests/integration
sipd comes from $SIP_BUILD_DIR (default <repo>/build); tests that need it are
skipped when it is missing (SIP_REQUIRE_SIPD=1 turns that into a failure).
"""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_CLIENT = _HERE.parents[1] / "clients" / "python"
for p in (str(_CLIENT), str(_HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import pytest  # noqa: E402

import harness  # noqa: E402
import models  # noqa: E402


@pytest.fixture(scope="session")
def sipd_bin():
    return harness.require_sipd()


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """Every generated test model, written once per session."""
    d = tmp_path_factory.mktemp("models")
    return models.write_all(d)


@pytest.fixture
def start_sipd(sipd_bin, tmp_path):
    """Factory: start_sipd(pools, server={...}) -> a ready SipServer with a
    unix socket and a TCP port of its own. At teardown each server is sent
    SIGTERM and must exit 0."""
    started = []

    def start(pools, **kw):
        srv = harness.SipServer(tmp_path / ("sipd%d" % len(started)), pools, **kw)
        started.append(srv)
        srv.start()
        return srv

    yield start
    failures = []
    for srv in started:
        if srv.returncode is not None:  # the test stopped it itself
            srv.kill()
            continue
        if srv.proc is not None and srv.proc.poll() is not None:
            failures.append("sipd died during the test (exit %s):\n%s"
                            % (srv.proc.returncode, srv.log_tail()))
            srv.kill()
            continue
        rc = srv.stop()
        if rc != 0:
            failures.append("sipd exited with %s after SIGTERM:\n%s" % (rc, srv.log_tail()))
    assert not failures, "\n\n".join(failures)


@pytest.fixture
def sip_server(start_sipd, model_dir):
    """A ready sipd serving the addmul model (function scoped)."""
    return start_sipd([{"name": "addmul", "model_path": str(model_dir["addmul"]),
                        "pool_size": 1}])
