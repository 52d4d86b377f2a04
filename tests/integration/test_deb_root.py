"""The Debian package installs and runs on a fresh Debian 12 (issue 20,
point 1; README "Install"): `make deb-only` packages the build, and the
package is installed with apt — its Depends and Recommends fetched from
Debian's archive — into a root made here from Debian's packages
(packaging/debian-base.sh: `mmdebstrap --variant=minbase`, the same base
the container image uses). In that root, with nothing else of sip's: sipd
and sip report their version, the packaged /etc/sip/sip.yaml passes
`sipd --check-config`, sipd serves a builtin model, the installed Python
client (cann_sip, from the package) gets the right answer over the unix
socket, and SIGTERM ends sipd with 0.

How it runs: `buildah from` the base, `buildah copy` the package in,
`buildah run --isolation chroot` (what works inside this sandbox; `podman
run` cannot raise rlimits here). apt needs Debian's archive, as the
machine's own apt does."""

import os
import re
import shutil
import subprocess
import time

import pytest

import harness
from harness import REPO

BUILD = harness.BUILD_DIR
APT_TIMEOUT_S = 900

CHECK = r"""
set -e
sipd --version
sip --version
# The unit's StateDirectory=sip sip/models, as systemd makes it before ExecStartPre.
mkdir -p /var/lib/sip/models /var/lib/sip/state
sipd --check-config /etc/sip/sip.yaml
test -f /lib/systemd/system/sipd.service || test -f /usr/lib/systemd/system/sipd.service
cat > /tmp/sip.yaml <<'EOF'
server: {endpoints: ["ipc:///tmp/sip.sock"]}
session_pools:
  - {name: echo, backend: builtin, backend_options: {shape: "-1,4"}}
EOF
sipd --config /tmp/sip.yaml > /tmp/sipd.log 2>&1 &
pid=$!
# Until sipd says it listens (bounded; its log if it stops instead).
for i in $(seq 600); do
  grep -q "sipd: listening on unix:///tmp/sip.sock" /tmp/sipd.log && break
  kill -0 $pid 2>/dev/null || { cat /tmp/sipd.log; exit 1; }
  sleep 0.1
done
grep -q "sipd: listening on unix:///tmp/sip.sock" /tmp/sipd.log || { echo "sipd did not listen in 60 s"; cat /tmp/sipd.log; exit 1; }
python3 - <<'EOF'
import numpy as np
from cann_sip import InferenceRequest, SessionClient
c = SessionClient(endpoint="ipc:///tmp/sip.sock")
x = np.arange(8, dtype=np.float32).reshape(2, 4)
y = c.infer(InferenceRequest("echo", {"input": x})).outputs["output"]
np.testing.assert_array_equal(y, x)
print("inference ok", y.shape)
c.close()
EOF
kill -TERM $pid
wait $pid
echo "sipd exit $?"
"""


def need(tool):
    if not shutil.which(tool):
        pytest.skip("%s not found (scripts/deps.sh installs it)" % tool)


def run(argv, timeout=300, **kw):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                       **kw)
    assert r.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(map(str, argv)), r.returncode, r.stdout[-4000:], r.stderr[-4000:])
    return r.stdout


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    harness.require_sipd()
    for tool in ("make", "dpkg-deb", "dpkg-shlibdeps"):
        need(tool)
    stage = tmp_path_factory.mktemp("deb")
    out = run(["make", "--no-print-directory", "deb-only", "BUILD=%s" % BUILD,
               "DEB_DIR=%s" % (stage / "stage")], cwd=str(REPO))
    m = re.search(r"^deb: (\S+\.deb)$", out, re.M)
    assert m, "make deb-only named no package:\n" + out
    deb = m.group(1) if os.path.isabs(m.group(1)) else str(REPO / m.group(1))
    copy = stage / os.path.basename(deb)
    shutil.copy(deb, copy)  # the build's copy is replaced by other tests
    return copy


@pytest.fixture
def fresh_root():
    for tool in ("buildah", "podman", "mmdebstrap"):
        need(tool)
    base = run([REPO / "packaging" / "debian-base.sh", "bookworm-slim"], timeout=900).split()[-1]
    name = "sip-deb-%d-%d" % (os.getpid(), time.monotonic_ns() % 10**9)
    run(["buildah", "from", "--name", name, base], timeout=120)
    try:
        yield name
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True, timeout=120)


def test_package_installs_and_serves_on_fresh_debian(package, fresh_root):
    ctr = fresh_root
    run(["buildah", "copy", ctr, package, "/tmp/sip.deb"])
    # Nothing of sip's is in the fresh root before the install.
    r = subprocess.run(["buildah", "run", "--isolation", "chroot", ctr, "--", "sh", "-c",
                        "command -v sipd || test -e /usr/lib/sip"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0, "the base already has sip:\n" + r.stdout
    out = run(["buildah", "run", "--isolation", "chroot", ctr, "--", "sh", "-c",
               "apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
               "apt-get install -y -qq /tmp/sip.deb > /tmp/apt.log 2>&1 || "
               "{ tail -40 /tmp/apt.log; exit 1; }"], timeout=APT_TIMEOUT_S)
    version = re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(\S+)$",
                        (BUILD / "CMakeCache.txt").read_text(), re.M).group(1)
    out = run(["buildah", "run", "--isolation", "chroot", ctr, "--", "bash", "-c", CHECK],
              timeout=300)
    assert "sipd %s" % version in out and "sip %s" % version in out, out
    assert "inference ok (2, 4)" in out, out
    assert "sipd exit 0" in out, out
