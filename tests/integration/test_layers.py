"""scripts/check_layers.py: its rules on made-up includes, calls, files and
libraries (so the ctest that runs it over the real build can fail), and a
clean bill for the tree as built."""
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


def test_a_subfolder_is_in_its_parents_layer():
    # Subfolders of a layer (one job each) keep the layer's place in the order.
    assert why("src/server/observe/prometheus.c", "src/server/server_impl.h") is None
    assert why("src/server/state/replay.c", "src/server/cache/response_cache.h") is None
    assert why("src/server/repository/repository.c", "src/session/observe/events.h") is None
    assert why("src/session/isolation/worker.c", "src/session/pool_impl.h") is None
    assert "above" in why("src/session/isolation/worker.c", "src/server/observe/tracing.h")
    assert "above" in why("src/session/observe/sla.c", "src/pipeline/pipeline.h")
    assert "public calls" in why("src/http/metrics.c", "src/session/observe/counters.h")
    assert "private" in why("src/grpc/infer.c", "src/server/server_impl.h")
    assert why("src/http/metrics.c", "src/server/observe/prometheus.h") is None


def test_daemon_and_tools_see_only_the_public_api():
    assert why("src/daemon/sipd.c", "include/sip/server.h") is None
    assert "only include/sip/" in why("src/daemon/sipd.c", "src/config/config.h")
    assert "only include/sip/" in why("tools/sip.c", "src/core/core.h")


def test_unknown_folder_must_be_placed():
    assert "not a known layer" in why("src/newthing/a.c", "src/core/core.h")


def test_the_tree_as_built_has_no_include_or_call_pointing_up():
    build = harness.BUILD_DIR
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check_layers.py"), str(build)],
                       capture_output=True, text=True)
    # (the file-size limit is the `layers` test's, which fails on any part)
    assert ", 0 pointing up or across" in r.stdout, r.stdout + r.stderr
    assert ", 0 calls pointing up or across" in r.stdout, r.stdout + r.stderr
    assert "0 symbols exported against include/sip" in r.stdout, r.stdout + r.stderr


# ---- link level: calls, not includes -----------------------------------------

def calls(src, dst, public=False):
    return CL.call_check(os.path.join(ROOT, src), os.path.join(ROOT, dst), public)


def test_calls_down_and_within_a_layer_are_allowed():
    assert calls("src/session/split.c", "src/session/request/request.c") is None
    assert calls("src/server/server.c", "src/session/pool.c") is None
    assert calls("src/pipeline/run.c", "src/core/error.c") is None


def test_calls_up_or_across_are_refused():
    assert "above" in calls("src/session/split.c", "src/server/server.c")
    assert "above" in calls("src/core/log.c", "src/config/config.c")
    assert "sibling" in calls("src/http/infer.c", "src/grpc/codec.c")
    # a front-end calls the engine's public functions only
    assert calls("src/http/infer.c", "src/session/request/response.c", public=True) is None
    assert "public calls" in calls("src/http/infer.c", "src/session/pool.c")


def test_nm_reads_defined_and_referenced_symbols(tmp_path):
    src = tmp_path / "a.c"
    src.write_text("int up(void);\nstatic int hidden(void) { return 1; }\n"
                   "int mine(void) { return up() + hidden(); }\n")
    obj = tmp_path / "a.o"
    subprocess.run(["cc", "-c", "-o", str(obj), str(src)], check=True)
    defined, undefined = CL.nm_symbols(str(obj))
    assert "mine" in defined and "hidden" not in defined
    assert undefined == {"up"}


# ---- file size ---------------------------------------------------------------

def test_the_pools_private_header_is_for_its_own_files(tmp_path):
    (tmp_path / "src" / "server").mkdir(parents=True)
    (tmp_path / "src" / "session").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    inc = '#include "session/pool_impl.h"\n'
    (tmp_path / "src" / "server" / "status.c").write_text(inc)
    (tmp_path / "src" / "session" / "view.h").write_text('  #  include "pool_impl.h"\n')
    (tmp_path / "tests" / "t.c").write_text("/* " + inc + " */ int x;\n")
    (tmp_path / "src" / "session" / "pool.c").write_text(inc)
    (tmp_path / "src" / "session" / "pool_impl.h").write_text("struct sip__pool { int n; };\n")
    bad = CL.pool_impl_violations(str(tmp_path), users=("src/session/pool.c",))
    assert sorted(b.split(" ")[0] for b in bad) == ["src/server/status.c", "src/session/view.h"], bad
    assert all("private to the pool's own files" in b for b in bad)
    # The tree as it is: only the files the check lists include it.
    assert CL.pool_impl_violations() == []
    # ... and the list names no file that does not (it stays the pool's own files).
    for u in CL.POOL_IMPL_USERS:
        with open(os.path.join(ROOT, u)) as f:
            assert CL._POOL_IMPL_INCLUDE.search(f.read()), u


def test_long_files_are_listed(tmp_path):
    (tmp_path / "src" / "core").mkdir(parents=True)
    (tmp_path / "src" / "core" / "ok.c").write_text("x\n" * CL.MAX_LINES)
    (tmp_path / "src" / "core" / "long.c").write_text("x\n" * (CL.MAX_LINES + 1))
    (tmp_path / "src" / "core" / "data.bin").write_text("x\n" * 2000)
    (tmp_path / "tests" / "fuzz" / "corpus").mkdir(parents=True)
    (tmp_path / "tests" / "fuzz" / "corpus" / "seed.c").write_text("x\n" * 2000)
    (tmp_path / "third_party").mkdir()
    (tmp_path / "third_party" / "big.c").write_text("x\n" * 2000)
    assert CL.long_files(str(tmp_path)) == ["src/core/long.c: %d lines (limit %d)"
                                            % (CL.MAX_LINES + 1, CL.MAX_LINES)]


# ---- exports -----------------------------------------------------------------

def test_public_declarations_are_read_from_the_headers(tmp_path):
    h = tmp_path / "x.h"
    h.write_text("/* sip_not_this(void); */\n"
                 "typedef void (*sip_fn_t)(int);\n"
                 "#define sip_macro(x) (x)\n"
                 "SIP_API sip_error_t *sip_a(int x);\n"
                 "SIP_API const char *sip_b(const sip_error_t *e,\n"
                 "                          int y);\n"
                 "SIP_API void *sip_c(void) __attribute__((malloc));\n")
    assert CL.public_functions(str(h)) == {"sip_a", "sip_b", "sip_c"}


def test_an_undeclared_export_and_a_missing_one_are_found(tmp_path):
    inc = tmp_path / "include" / "sip"
    inc.mkdir(parents=True)
    (inc / "a.h").write_text("SIP_API int sip_a(void);\nSIP_API int sip_gone(void);\n")
    (inc / "client.h").write_text("SIP_API int sip_client_x(void);\n")
    (tmp_path / "a.c").write_text("int sip_a(void) { return 1; }\n"
                                  "int sip__inner(void) { return 2; }\n"
                                  "__attribute__((visibility(\"hidden\"))) int sip__hid(void) "
                                  "{ return 3; }\n")
    (tmp_path / "c.c").write_text("int sip_client_x(void) { return 1; }\n")
    for lib, c in (("libsip.so", "a.c"), ("libsipclient.so", "c.c")):
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / lib), str(tmp_path / c)],
                       check=True)
    assert CL.export_violations(str(tmp_path), str(tmp_path)) == [
        "libsip.so exports sip__inner, which include/sip does not declare for it",
        "libsip.so does not export sip_gone, declared in include/sip",
    ]


def test_every_public_declaration_carries_the_export_macro():
    """Each public declaration without SIP_API is a function libsip would
    not export (built with -fvisibility=hidden)."""
    inc = os.path.join(ROOT, "include", "sip")
    missing = []
    for name in sorted(os.listdir(inc)):
        with open(os.path.join(inc, name)) as f:
            text = f.read()
        for fn in CL.public_functions(os.path.join(inc, name)):
            if not any(line.lstrip().startswith("SIP_API") and fn + "(" in line
                       for line in text.splitlines()):
                missing.append("%s: %s" % (name, fn))
    assert missing == []


def test_the_libraries_export_exactly_the_public_api():
    build = str(harness.BUILD_DIR)
    assert CL.export_violations(build) == []
    names = CL.exported(os.path.join(build, "libsip.so"))
    assert "sip_server_new" in names
    assert not [n for n in names if n.startswith(("sip__", "protobuf", "grpc__", "inference__"))]
    client = CL.exported(os.path.join(build, "libsipclient.so"))
    assert "sip_client_connect" in client
    assert not [n for n in client if not n.startswith("sip_")]
