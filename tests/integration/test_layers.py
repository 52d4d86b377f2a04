"""scripts/check_layers.py: its rules on made-up includes (so the ctest that
runs it over the real include graph can fail), and a clean bill for the
tree as built."""
import importlib.util
import os
import subprocess
import sys

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("check_layers",
                                              os.path.join(ROOT, "scripts", "check_layers.py"))
CL = importlib.util.module_from_spec(spec)
spec.loader.exec_module(CL)


def why(src, dep):
    return CL.check(os.path.join(ROOT, src), os.path.join(ROOT, dep))


def test_down_and_same_layer_are_allowed():
    assert why("src/session/pool.c", "src/core/core.h") is None
    assert why("src/session/pool.c", "src/session/engine.h") is None
    assert why("src/server/server.c", "src/pipeline/pipeline.h") is None
    assert why("src/config/config.c", "src/ops/expr.h") is None
    assert why("src/core/tensor.c", "include/sip/tensor.h") is None


def test_up_is_refused():
    assert "above" in why("src/core/log.c", "src/session/engine.h")
    assert "above" in why("src/config/config.c", "src/backend/x.h")
    assert "above" in why("src/session/pool.c", "src/http/http.h")
    assert "above" in why("src/server/server.c", "src/transport/listener.h")


def test_front_ends_are_siblings_and_keep_out_of_the_engine():
    assert "sibling" in why("src/http/http.c", "src/transport/frame.h")
    assert "public calls" in why("src/transport/listener.c", "src/session/engine.h")
    assert "public calls" in why("src/http/http.c", "src/pipeline/pipeline.h")
    assert why("src/http/http.c", "src/server/introspect.h") is None
    assert "private" in why("src/http/http.c", "src/server/server_impl.h")


def test_daemon_and_tools_see_only_the_public_api():
    assert why("src/daemon/sipd.c", "include/sip/server.h") is None
    assert "only include/sip/" in why("src/daemon/sipd.c", "src/config/config.h")
    assert "only include/sip/" in why("tools/sip.c", "src/core/core.h")


def test_unknown_folder_must_be_placed():
    assert "not a known layer" in why("src/newthing/a.c", "src/core/core.h")


def test_the_tree_as_built_has_no_include_pointing_up():
    build = harness.BUILD_DIR if hasattr(harness, "BUILD_DIR") else os.environ["SIP_BUILD_DIR"]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check_layers.py"), str(build)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 pointing up or across" in r.stdout
