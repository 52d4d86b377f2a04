"""Fixtures for the sip integration tests.

Run from the repository root:  PYTHONPATH=clients/python python3 -m pytest -q tests/integration
sipd comes from $SIP_BUILD_DIR (default <repo>/build); tests that need it are
skipped when it is missing (SIP_REQUIRE_SIPD=1 turns that into a failure).

Two checks hold for the whole run:
- every sipd the tests start is stopped: a sipd still running when the run
  ends (one the harness started, or any sipd below this process) fails the
  run, is named with the test that started it, and is killed;
- in CI (CI set in the environment, as CI services do) a test skipped for a
  missing dependency, model or binary fails instead: only the skips listed in
  CI_ALLOWED_SKIPS below, each with why, stay skips.
"""

import os
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


@pytest.fixture(scope="session")
def torch_model_dir(tmp_path_factory):
    """The TorchScript twins of model_dir's models (tests/integration/torch_models.py)."""
    pytest.importorskip("torch", reason="python3-torch makes the TorchScript test models")
    import torch_models
    return torch_models.write_all(tmp_path_factory.mktemp("torch_models"))


@pytest.fixture(scope="module", params=["onnxruntime", "torchscript"])
def backend(request):
    """The backend a backend-agnostic test runs on: every such test runs once
    with each (tests pin one with @pytest.mark.parametrize("backend", [...],
    indirect=True) where the other has no equivalent model). A build without
    libtorch has no torchscript backend: its half is a skip (a failure in CI)."""
    if request.param == "torchscript" and not harness.build_compiles("src/backend/torchscript.cc"):
        pytest.skip("this build has no torchscript backend (libtorch was not found)")
    return request.param


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
    failures = harness.stop_all(started)
    assert not failures, "\n\n".join(failures)


@pytest.fixture
def sip_server(start_sipd, model_dir):
    """A ready sipd serving the addmul model (function scoped)."""
    return start_sipd([{"name": "addmul", "model_path": str(model_dir["addmul"]),
                        "pool_size": 1}])


# ---------------------------------------------------------------------------
# no sipd outlives the run

def pytest_configure(config):
    # A sipd whose parent went away (started through a shell that exited, or a
    # worker process whose sipd was killed) is re-parented to this process
    # instead of init, so the end-of-run check below still finds it.
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def pytest_sessionfinish(session, exitstatus):
    leftovers = harness.leftover_sipds()
    if not leftovers:
        return
    harness.kill_leftovers(leftovers)
    lines = ["%d sipd process(es) started by the tests were still running when the run "
             "ended (each test must stop every server it starts); killed now:" % len(leftovers)]
    lines += ["  " + what for _, what in leftovers]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write("\n")
        reporter.write_sep("=", "leftover sipd", red=True)
        for line in lines:
            reporter.write_line(line)
    else:
        sys.stderr.write("\n".join(lines) + "\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---------------------------------------------------------------------------
# in CI, a skip for something missing is a failure

# (test file::test name, text in the skip's reason, why the skip is right even in CI)
CI_ALLOWED_SKIPS = [
    ("test_gpu.py::test_cuda_pool_copies_through_the_device",
     "no NVIDIA GPU on this machine",
     "CI machines have no GPU (nor the GPU build of ONNX Runtime, SIP_ORT_GPU=1); the test "
     "runs on a machine that has both"),
    ("test_gpu.py::test_cuda_pool_copies_through_the_device",
     "ONNX Runtime is the CPU build",
     "a machine with a GPU but the CPU build of ONNX Runtime (scripts/deps.sh without "
     "SIP_ORT_GPU=1) cannot run the CUDA provider"),
    ("test_seed_snippets.py::test_scenario_2_as_written",
     "a sanitizer build exceeds the seed's stage timeouts",
     "the seed's 20 ms crop timeout is below what an ASan+UBSan build takes on "
     "a 2-core machine; the RelWithDebInfo run of the same CI job checks it"),
    ("test_bench_vs_wrk.py::test_sip_bench_grpc_p50_matches_h2load",
     "a sanitizer build's sip bench is instrumented",
     "the comparison is of the client's own cost, which instrumentation changes in sip bench "
     "and not in Debian's h2load; the RelWithDebInfo run of the same CI job checks it"),
    ("test_security.py::test_default_",
     "this host has no address other than loopback",
     "a runner without a network (only loopback, no route) has no second address "
     "from which to be a remote peer; the tests only run where one exists"),
]


def in_ci():
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _skip_reason(rep):
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2])
    return str(lr)


def _allowed(nodeid, reason):
    test = nodeid.rsplit("/", 1)[-1]  # node ids are relative to a rootdir that varies
    return any(test.startswith(prefix) and text in reason
               for prefix, text, _ in CI_ALLOWED_SKIPS)


def _fail_skip(rep, nodeid):
    reason = _skip_reason(rep)
    if hasattr(rep, "wasxfail") or _allowed(nodeid, reason):
        return
    rep.outcome = "failed"
    rep.longrepr = ("skipped in CI (CI=%s): %s\nIn CI every dependency, model and binary "
                    "the tests use must be present (scripts/deps.sh installs them); a skip "
                    "that is right even there belongs in CI_ALLOWED_SKIPS in "
                    "tests/integration/conftest.py, with why." % (os.environ.get("CI"), reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and in_ci():
        _fail_skip(rep, item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and in_ci():  # a module-level importorskip
        _fail_skip(rep, collector.nodeid)
