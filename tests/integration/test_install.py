"""`make install` and `make deb` (README "Install"): the installed tree and the
package's payload run on their own, with nothing pointing back into the source
or build tree.

Both install what SIP_BUILD_DIR already holds (`make install-only`, `make
deb-only`: the targets `make install` and `make deb` run after building), so
the tests build nothing."""

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import harness

REPO = harness.REPO
BUILD = harness.BUILD_DIR
DEB_LIBS = ("libyaml-0-2", "libjansson4", "libmicrohttpd12", "libgrpc29", "libprotobuf-c1",
            "libcurl4", "libpng16-16", "libjpeg62-turbo", "zlib1g", "libc6", "libhiredis0.14",
            "libssl3")

LIBSIP_PROG = r"""
#include <stdio.h>
#include <sip/sip.h>
int main(void) {
  sip_error_t *e = sip_error_new(SIP_NOT_FOUND, "model %s", "x");
  printf("libsip %s %s: %s\n", sip_version(), sip_code_name(sip_error_code(e)), sip_error_message(e));
  sip_error_free(e);
  return 0;
}
"""

SIPCLIENT_PROG = r"""
#include <stdio.h>
#include <sip/client.h>
int main(int argc, char **argv) {
  sip_client_t *c = NULL;
  char *json = NULL;
  sip_error_t *e = argc == 2 ? sip_client_connect(argv[1], &c) : NULL;
  if (!e) e = sip_client_info(c, 1, &json);
  if (e) { fprintf(stderr, "%s\n", sip_error_message(e)); sip_error_free(e); sip_client_free(c); return 1; }
  printf("%s\n", json);
  sip_client_free_string(json);
  sip_client_free(c);
  return 0;
}
"""


def need(tool):
    path = shutil.which(tool)
    if not path:
        pytest.skip("%s not found (scripts/deps.sh installs it)" % tool)
    return path


def project_version():
    cache = (BUILD / "CMakeCache.txt").read_text()
    m = re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(\S+)$", cache, re.M)
    assert m, "no CMAKE_PROJECT_VERSION in %s/CMakeCache.txt" % BUILD
    return m.group(1)


def clean_env(**extra):
    """The environment without anything pointing at the build: no
    LD_LIBRARY_PATH, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(extra)
    return env


def run(cmd, timeout=120, **kw):
    kw.setdefault("env", clean_env())
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, "%s exited %d:\n%s%s" % (" ".join(map(str, cmd)), r.returncode,
                                                       r.stdout, r.stderr)
    return r.stdout


def dynamic(path):
    """(NEEDED libraries, RPATH/RUNPATH entries) of an ELF file."""
    out = run(["readelf", "-d", path])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    paths = []
    for p in re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", out):
        paths.extend(p.split(":"))
    return needed, paths


def check_elf(root, rel):
    """rel (a file under root) has only $ORIGIN-relative search paths, and
    every library of the project it needs resolves inside root."""
    path = root / rel
    _, paths = dynamic(path)
    for p in paths:
        assert p.startswith("$ORIGIN"), "%s: search path %r is not relative to $ORIGIN" % (rel, p)
        assert str(REPO) not in p and str(BUILD) not in p, "%s: search path %r" % (rel, p)
    resolved = dict(re.findall(r"^\s*(\S+) => (\S+)", run(["ldd", path]), re.M))
    for lib, where in resolved.items():
        if lib.startswith(("libsip", "libonnxruntime")):
            assert os.path.realpath(where).startswith(str(root) + "/"), \
                "%s: %s resolves to %s, outside %s" % (rel, lib, where, root)
        assert where != "not", "%s: %s not found" % (rel, lib)


def sanitizer_flags(libsip):
    """A sanitizer build's libsip needs the sanitizer runtime in the program."""
    needed, _ = dynamic(libsip)
    return ["-fsanitize=address,undefined"] if any(n.startswith("libasan") for n in needed) else []


@pytest.fixture(scope="module")
def prefix():
    harness.require_sipd()
    need("make")
    d = Path(tempfile.mkdtemp(prefix="sip-prefix-"))
    try:
        out = run(["make", "--no-print-directory", "install-only", "BUILD=%s" % BUILD,
                   "PREFIX=%s" % d], cwd=str(REPO), timeout=300)
        assert "install: %s" % d in out, out
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_install_prefix_serves(prefix, tmp_path):
    need("readelf")
    version = project_version()
    for rel in ("bin/sipd", "bin/sip", "lib/libsip.so", "lib/libsip.so.0", "lib/libsipclient.so",
                "lib/libsipclient.so.0", "lib/sip/libonnxruntime.so.1", "include/sip/sip.h",
                "include/sip/client.h", "lib/pkgconfig/sip.pc", "lib/pkgconfig/sipclient.pc",
                "share/doc/sip/LICENSE", "share/doc/sip/LICENSE.onnxruntime",
                "share/doc/sip/ThirdPartyNotices.onnxruntime.txt"):
        assert (prefix / rel).exists(), "%s not installed in %s" % (rel, prefix)
    for rel in ("bin/sipd", "bin/sip", "lib/libsip.so.0", "lib/libsipclient.so.0"):
        check_elf(prefix, rel)

    assert run([prefix / "bin/sipd", "--version"]).strip() == "sipd " + version
    assert run([prefix / "bin/sip", "--version"]).strip() == "sip " + version

    sockdir = harness.short_tmpdir()
    proc = log = None
    try:
        endpoint = "ipc://" + os.path.join(sockdir, "sipd.sock")
        config = tmp_path / "sipd.yaml"
        config.write_text(harness.to_yaml({
            "server": {"endpoints": [endpoint], "log_level": "info"},
            "session_pools": [{"name": "tiny", "backend": "builtin",
                               "backend_options": {"shape": "-1,4"}}]}) + "\n")
        log = open(tmp_path / "sipd.log", "wb")
        proc = harness.track(subprocess.Popen(
            [str(prefix / "bin/sipd"), "--config", str(config)], stdin=subprocess.DEVNULL,
            stdout=log, stderr=subprocess.STDOUT, env=clean_env(), cwd=str(tmp_path)),
            "installed sipd --config %s" % config)
        sip = [str(prefix / "bin/sip"), "-e", endpoint]

        def ready():
            assert proc.poll() is None, "installed sipd exited %s:\n%s" % (
                proc.returncode, (tmp_path / "sipd.log").read_text(errors="replace"))
            r = subprocess.run(sip + ["ready"], capture_output=True, text=True, timeout=30,
                               env=clean_env())
            return r.returncode == 0 and r.stdout.strip() == "ready"
        harness.wait_until(ready, what="the installed sipd ready (sip ready)")

        out = run(sip + ["infer", "tiny", "-i", "input:float32:2,4=1,2,3,4,5,6,7,8"])
        line = [l for l in out.splitlines() if l.startswith("output:")]
        assert line and "float32 [2, 4]" in line[0], out
        assert [float(v) for v in line[0].split("=")[1].split("(")[0].split()[:8]] == \
            [1, 2, 3, 4, 5, 6, 7, 8], out

        # The Python client installed beside them, alone on the path.
        pydir = [p for p in prefix.glob("lib/python3*/dist-packages") if (p / "cann_sip").is_dir()]
        assert pydir, "cann_sip not installed under %s/lib/python3*/dist-packages" % prefix
        out = run(["/usr/bin/python3", "-c",
                   "import cann_sip, sys; c = cann_sip.SessionClient(sys.argv[1]); "
                   "print(cann_sip.__file__, cann_sip.__version__, c.info(1)['ready']); c.close()",
                   endpoint], env=clean_env(PYTHONPATH=str(pydir[0])))
        assert out.split() == [str(pydir[0] / "cann_sip/__init__.py"), version, "True"], out

        # pkg-config and a program built against each installed library.
        need("pkg-config")
        cc = need("cc")
        pc_env = clean_env(PKG_CONFIG_PATH=str(prefix / "lib/pkgconfig"))
        assert run(["pkg-config", "--modversion", "sip", "sipclient"], env=pc_env).split() == \
            [version, version]
        flags = run(["pkg-config", "--cflags", "--libs", "sip"], env=pc_env).split()
        assert flags == ["-I%s/include" % prefix, "-L%s/lib" % prefix, "-lsip"], flags
        outs = {}
        for name, src, lib, args in (("libsip", LIBSIP_PROG, "sip", []),
                                     ("sipclient", SIPCLIENT_PROG, "sipclient", [endpoint])):
            (tmp_path / (name + ".c")).write_text(src)
            flags = run(["pkg-config", "--cflags", "--libs", lib], env=pc_env).split()
            run([cc, "-std=c11", "-Wall", "-Werror", "-o", tmp_path / name, tmp_path / (name + ".c")]
                + flags + sanitizer_flags(prefix / "lib/libsip.so.0"))
            outs[name] = run([tmp_path / name] + args,
                             env=clean_env(LD_LIBRARY_PATH=str(prefix / "lib")))
        assert outs["libsip"].strip() == "libsip %s NOT_FOUND: model x" % version, outs["libsip"]
        assert json.loads(outs["sipclient"]).get("ready") is True, outs["sipclient"]
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(harness.STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        if log is not None:
            log.close()
        shutil.rmtree(sockdir, ignore_errors=True)
    assert proc.returncode == 0, "installed sipd exited %s after SIGTERM:\n%s" % (
        proc.returncode, (tmp_path / "sipd.log").read_text(errors="replace"))


def test_deb_package(tmp_path):
    harness.require_sipd()
    for tool in ("make", "dpkg-deb", "dpkg-shlibdeps", "readelf"):
        need(tool)
    version = project_version()
    out = run(["make", "--no-print-directory", "deb-only", "BUILD=%s" % BUILD,
               "DEB_DIR=%s" % (tmp_path / "stage")], cwd=str(REPO), timeout=300)
    m = re.search(r"^deb: (\S+\.deb)$", out, re.M)
    assert m, "make deb-only named no package:\n" + out
    deb = Path(m.group(1))
    if not deb.is_absolute():
        deb = REPO / deb
    arch = run(["dpkg", "--print-architecture"]).strip()
    try:
        assert deb == BUILD / ("sip_%s_%s.deb" % (version, arch)), deb
        info = run(["dpkg-deb", "--info", deb])
        fields = dict(re.findall(r"^ (Package|Version|Architecture|Depends): (.*)$", info, re.M))
        assert fields.get("Package") == "sip" and fields.get("Version") == version, info
        assert fields.get("Architecture") == arch, info
        depends = {d.split()[0] for d in fields.get("Depends", "").split(", ")}
        assert set(DEB_LIBS) <= depends, "Depends lacks %s:\n%s" % (sorted(set(DEB_LIBS) - depends), info)

        contents = run(["dpkg-deb", "--contents", deb])
        for rel in ("./usr/bin/sipd", "./usr/bin/sip", "./usr/lib/libsip.so.0.1.0",
                    "./usr/lib/sip/libonnxruntime.so.1", "./usr/include/sip/sip.h",
                    "./usr/lib/pkgconfig/sip.pc", "./usr/lib/python3/dist-packages/cann_sip/__init__.py",
                    "./usr/share/doc/sip/copyright", "./usr/share/doc/sip/LICENSE.onnxruntime"):
            assert re.search(r" %s( |$)" % re.escape(rel), contents, re.M), "%s not in the package" % rel

        root = tmp_path / "root"
        run(["dpkg-deb", "-x", deb, root])
        for rel in ("usr/bin/sipd", "usr/bin/sip", "usr/lib/libsip.so.0"):
            check_elf(root, rel)
        assert run([root / "usr/bin/sipd", "--version"]).strip() == "sipd " + version
        assert run([root / "usr/bin/sip", "--version"]).strip() == "sip " + version
        assert "prefix=/usr\n" in (root / "usr/lib/pkgconfig/sip.pc").read_text()
    finally:
        deb.unlink(missing_ok=True)
