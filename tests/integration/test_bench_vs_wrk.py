"""`sip bench` over HTTP measures sipd, not itself: one request at a time
(--concurrency 1) against wrk with one connection and one thread (-c1 -t1,
the same single keep-alive connection), both driving the same sipd in the
same run, taking turns (sip bench, wrk, sip bench, wrk, ...). The medians of
their p50 latencies agree within 15%, for a JSON body and for a binary
(Inference-Header-Content-Length) body. sipd and both generators share one
CPU, so a round trip costs what the client and the server do for it: a
generator doing more per request than wrk (libcurl's easy interface, a
timer sleep per request) read 5x wrk's p50 here.

wrk is the Debian package `wrk` (scripts/deps.sh installs it)."""

import json
import os
import re
import shutil
import statistics
import subprocess

import pytest

import harness

SIP = harness.BUILD_DIR / "sip"
ROUNDS = 6          # turns of each generator
SECONDS = 1         # each turn's measuring time (wrk takes whole seconds)
TOLERANCE = 0.15    # |sip bench - wrk| / max(sip bench, wrk), medians of p50
X = [1.0, 2.0, 3.0, 4.0]
CPU = max(os.sched_getaffinity(0))  # sipd and both generators run there


def pinned():
    os.sched_setaffinity(0, {CPU})


@pytest.fixture(scope="module")
def wrk():
    path = shutil.which("wrk")
    if not path:
        pytest.skip("wrk is not installed (the Debian package `wrk`; scripts/deps.sh)")
    return path


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    """sipd on one CPU, the one the generators run on, its threads sleeping
    when idle (SIP_IDLE_SPIN_US=0: a thread polling for work on the only CPU
    would hold it from the threads it waits for). Everything on one CPU, a
    round trip costs what the client and the server do for it, and no
    wake-up crosses CPUs: on a shared virtual machine where threads land
    decides a cross-CPU wake-up's cost (20 or 70 us here, changing from
    second to second), which would drown the difference measured."""
    pools = [{"name": "echo", "backend": "builtin", "pool_size": 1,
              "backend_options": {"shape": "-1,4"}}]
    mask, spin = os.sched_getaffinity(0), os.environ.get("SIP_IDLE_SPIN_US")

    def restore():
        os.sched_setaffinity(0, mask)
        if spin is None:
            os.environ.pop("SIP_IDLE_SPIN_US", None)
        else:
            os.environ["SIP_IDLE_SPIN_US"] = spin
    os.sched_setaffinity(0, {CPU})  # sipd inherits both
    os.environ["SIP_IDLE_SPIN_US"] = "0"
    try:
        with harness.serve(tmp_path_factory.mktemp("benchwrk"), pools,
                           server={"http": "127.0.0.1:0"}, log_level="warn") as s:
            restore()  # sipd has started: this process runs anywhere again
            yield s
    finally:
        restore()


def http_endpoint(srv):
    def find():
        with open(srv.log_path) as f:
            for line in f:
                if "listening on http://" in line:
                    return line.split("listening on ")[1].strip()
        return None
    return harness.wait_until(find, what="sipd's HTTP address in its log")


def bodies():
    """The request bodies `sip bench -i input:float32:1,4=1,2,3,4` sends, with
    their headers: (body bytes, {header: value})."""
    import struct
    head = json.dumps({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 16}}],
                       "parameters": {"binary_data_output": True}},
                      separators=(",", ":")).encode()
    binary = (head + struct.pack("<4f", *X),
              {"Content-Type": "application/octet-stream",
               "Inference-Header-Content-Length": str(len(head))})
    js = (json.dumps({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "FP32",
                                  "data": X}]}, separators=(",", ":")).encode(),
          {"Content-Type": "application/json"})
    return {"binary": binary, "json": js}


def lua_script(tmp_path, fmt):
    """A wrk script POSTing the body read from a file (binary-safe)."""
    body, headers = bodies()[fmt]
    bf = tmp_path / ("%s.body" % fmt)
    bf.write_bytes(body)
    lines = ['wrk.method = "POST"',
             'local f = assert(io.open("%s", "rb"))' % bf,
             "wrk.body = f:read(\"*a\")",
             "f:close()"]
    lines += ['wrk.headers["%s"] = "%s"' % kv for kv in headers.items()]
    sf = tmp_path / ("%s.lua" % fmt)
    sf.write_text("\n".join(lines) + "\n")
    return sf


_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def wrk_p50_us(wrk, url, script):
    r = subprocess.run([wrk, "-t1", "-c1", "-d%ds" % SECONDS, "--latency", "-s", str(script),
                        url], capture_output=True, text=True, timeout=60, preexec_fn=pinned)
    assert r.returncode == 0, r.stderr + r.stdout
    assert "Non-2xx" not in r.stdout and "Socket errors" not in r.stdout, r.stdout
    m = re.search(r"^\s*50%\s+([\d.]+)(us|ms|s)\s*$", r.stdout, re.M)
    assert m, "no 50%% line in wrk's latency distribution:\n" + r.stdout
    return float(m.group(1)) * _UNITS[m.group(2)]


def sip_p50_us(endpoint, fmt):
    r = subprocess.run([str(SIP), "-e", endpoint, "--json", "bench", "echo",
                        "-i", "input:float32:1,4=1,2,3,4", "--concurrency", "1",
                        "--http-format", fmt, "--window-ms", str(int(SECONDS * 1000 / 3)),
                        "--max-windows", "3"],
                       capture_output=True, text=True, timeout=60, preexec_fn=pinned)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["errors"] == 0 and out["requests"] > 100, out
    return out["latency_ms"]["p50"] * 1000.0


@pytest.mark.parametrize("fmt", ["binary", "json"])
def test_sip_bench_p50_matches_wrk(srv, wrk, tmp_path, fmt):
    endpoint = http_endpoint(srv)
    url = endpoint + "/v2/models/echo/infer"
    script = lua_script(tmp_path, fmt)
    sip_bench, wrk_ = [], []
    for _ in range(ROUNDS):  # taking turns: load on the machine falls on both alike
        sip_bench.append(sip_p50_us(endpoint, fmt))
        wrk_.append(wrk_p50_us(wrk, url, script))
    a, b = statistics.median(sip_bench), statistics.median(wrk_)
    what = ("%s body: sip bench p50 %s us (median %.1f), wrk p50 %s us (median %.1f)"
            % (fmt, ["%.1f" % v for v in sip_bench], a, ["%.1f" % v for v in wrk_], b))
    print(what)
    assert abs(a - b) <= TOLERANCE * max(a, b), what
