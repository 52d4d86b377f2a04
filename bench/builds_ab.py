#!/usr/bin/python3
"""Two builds of sipd side by side (issue 18): the engine-boundary rework,
which began at 79bc9e4, against its parent c71f076 ("before") and the
current tree ("after").

"after" is the build this bench is given (SIP_BUILD_DIR, argv[1], or
build/). "before" is the build directory in SIP_BUILD_DIR_BEFORE; when that
is unset, this script builds it: the before commit's files
(`git archive REV | tar -x`, no git state left behind) with third_party
linked from this tree, configured RelWithDebInfo without the sanitizers,
sipd only, kept under ~/.cache/sip/bench-before-REV/ so that later runs
reuse it (SIP_BENCH_BEFORE_REV names another commit).

Both sipds run at once with the same config (the tiny model, one session;
the PP-OCR angle classifier as a `batched` pool and a `plain` one, as
bench/batching.py has them), which the before sipd is first asked to accept
(`sipd --check-config`), so that it holds only keys both builds know. The
same client binary, the current build's `sip bench`, drives both, before and after taking turns, the order
turning each round (A B, B A, A B, ...; common.interleave, at least 3 rounds
per figure), one figure after another:

  native p50   the tiny model over the unix socket, one request at a time
  HTTP p50     the same over KServe v2 HTTP, binary tensors (`sip bench`'s
               light client)
  gRPC p50     the same over KServe v2 gRPC (`sip bench`'s light client)
  batching     batched / plain throughput of the classifier at concurrency 32
               with single-item requests (bench/batching.py's "batched / plain")

Per figure it prints the before and after medians over the rounds and
reports (common.report) after / before, the median of each round's ratio,
with its spread and the machine's load; the target is "within ±10%"
(0.9 to 1.1). Every sipd and temporary directory is removed on the way
out, on an error or SIGTERM too.
"""
import json
import os
import shutil
import socket
import subprocess
import tempfile

from common import (BUILD, CLS, ROOT, ROUNDS, Sipd, ensure_tiny, interleave, median, ratios,
                    report, sip_bench)

BEFORE_REV = os.environ.get("SIP_BENCH_BEFORE_REV", "c71f076")
TARGET = "within ±10%"
CONC = 32  # the batching figure's concurrency, as bench/batching.py


def build_before(rev):
    """The build directory of commit `rev`'s sipd, built once and cached."""
    full = subprocess.run(["git", "-C", ROOT, "rev-parse", "--verify", "-q", rev + "^{commit}"],
                          capture_output=True, text=True)
    if full.returncode != 0:
        raise RuntimeError("cannot resolve commit %r in %s (a git checkout is needed to build the "
                           "before sipd); set SIP_BUILD_DIR_BEFORE to a build directory of that "
                           "commit instead" % (rev, ROOT))
    home = os.path.join(os.path.expanduser("~"), ".cache", "sip", "bench-before-" + rev)
    src, build, stamp = (os.path.join(home, n) for n in ("src", "build", "built"))
    if os.path.exists(stamp) and os.path.exists(os.path.join(build, "sipd")):
        return build
    os.makedirs(home, exist_ok=True)
    if not os.path.isdir(src):
        tmp = tempfile.mkdtemp(prefix="src.", dir=home)
        try:
            archive = subprocess.Popen(["git", "-C", ROOT, "archive", full.stdout.strip()],
                                       stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", tmp], stdin=archive.stdout, check=True)
            archive.stdout.close()
            if archive.wait() != 0:
                raise RuntimeError("git archive %s exited with %d" % (rev, archive.returncode))
            os.symlink(os.path.join(ROOT, "third_party"), os.path.join(tmp, "third_party"))
            os.rename(tmp, src)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log = os.path.join(home, "build.log")
    print("building sipd of %s in %s (log: %s)" % (rev, build, log), flush=True)
    with open(log, "w") as out:
        for cmd in (["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                     "-DSIP_SANITIZE=OFF"],
                    ["cmake", "--build", build, "-j%d" % (os.cpu_count() or 2), "--target",
                     "sipd"]):
            if subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                with open(log) as fh:
                    tail = fh.read()[-3000:]
                raise RuntimeError("%s failed; expected it to build %s's sipd:\n%s"
                                   % (" ".join(cmd), rev, tail))
    open(stamp, "w").close()
    return build


def free_port():
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def config(tiny):
    """The config both sipds run; their endpoints are filled in per server."""
    pools = [{"name": "tiny", "model_path": tiny, "pool_size": 1},
             {"name": "batched", "model_path": CLS, "pool_size": 2,
              "dynamic_batching": {"max_batch_size": 8, "max_queue_delay_us": 2000}},
             {"name": "plain", "model_path": CLS, "pool_size": 2}]
    return ("server:\n  endpoints:\n    - ipc:///tmp/unused.sock\n  log_level: warn\n"
            "  http: 127.0.0.1:%d\n  grpc: 127.0.0.1:%d\nsession_pools:\n"
            + "".join("  - %s\n" % json.dumps(p) for p in pools))


def check_config(build, text):
    """Fails unless `build`'s sipd accepts the config `text`."""
    d = tempfile.mkdtemp(prefix="sipab", dir="/tmp")
    try:
        path = os.path.join(d, "sip.yaml")
        with open(path, "w") as f:
            f.write(text % (free_port(), free_port()))
        r = subprocess.run([os.path.join(build, "sipd"), "--check-config", path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("%s/sipd --check-config refused the shared config; expected both "
                               "builds to accept it:\n%s" % (build, (r.stderr + r.stdout)[-2000:]))
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Server:
    """One build's sipd on the shared config: its unix socket, HTTP and gRPC."""

    def __init__(self, build, text):
        self.hport, self.gport = free_port(), free_port()
        self.sipd = Sipd(None, config=text % (self.hport, self.gport), build=build)
        self.endpoint = self.sipd.endpoint

    def close(self):
        self.sipd.close()


def p50_native(s):
    r = sip_bench(s.endpoint, "tiny", ["x:float32:1,4=ones"], "--concurrency", "1",
                  window_ms=700, max_windows=3)
    return r["latency_ms"]["p50"] * 1000


def p50_http(s):
    r = sip_bench("http://127.0.0.1:%d" % s.hport, "tiny", ["x:float32:1,4=ones"],
                  "--concurrency", "1", "--http-format", "binary", window_ms=700, max_windows=3)
    return r["latency_ms"]["p50"] * 1000


def p50_grpc(s):
    r = sip_bench("grpc://127.0.0.1:%d" % s.gport, "tiny", ["x:float32:1,4=ones"],
                  "--concurrency", "1", window_ms=700, max_windows=3)
    return r["latency_ms"]["p50"] * 1000


def batching(s):
    def rps(pool):
        return sip_bench(s.endpoint, pool, ["x:float32:1,3,48,192=random"], "--concurrency",
                         str(CONC), window_ms=1000, max_windows=3)["throughput_rps"]
    return rps("batched") / rps("plain")


FIGURES = (("native unix p50", p50_native, "%.1f", " us"),
           ("HTTP binary p50", p50_http, "%.1f", " us"),
           ("gRPC p50", p50_grpc, "%.1f", " us"),
           ("batching: batched / plain throughput", batching, "%.3f", ""))


def main():
    after = BUILD
    before = os.environ.get("SIP_BUILD_DIR_BEFORE") or build_before(BEFORE_REV)
    for b in (before, after):
        if not os.access(os.path.join(b, "sipd"), os.X_OK):
            raise RuntimeError("no sipd in %s; expected a build directory" % b)
    text = config(ensure_tiny())
    for b in (before, after):
        check_config(b, text)
    print("before: %s/sipd (%s)\nafter:  %s/sipd\nclient: %s/sip"
          % (before, BEFORE_REV if not os.environ.get("SIP_BUILD_DIR_BEFORE") else
             "SIP_BUILD_DIR_BEFORE", after, after), flush=True)
    servers = {}
    try:
        servers["before"] = Server(before, text)
        servers["after"] = Server(after, text)
        results = []
        for name, fn, fmt, unit in FIGURES:
            r = interleave(ROUNDS, {k: (lambda s=s: fn(s)) for k, s in servers.items()})
            results.append((name, fmt, unit, r))
    finally:
        for s in servers.values():
            s.close()
    for name, fmt, unit, r in results:
        f = fmt + unit
        print("%s: before %s (rounds %s), after %s (rounds %s)"
              % (name, f % median(r["before"]), " ".join(fmt % v for v in r["before"]),
                 f % median(r["after"]), " ".join(fmt % v for v in r["after"])))
        report("%s: after / before" % name, ratios(r["after"], r["before"]), TARGET, "%.3f")


main()
