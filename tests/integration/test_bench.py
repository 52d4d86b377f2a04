"""`sip bench`, the load generator, against a real sipd: the modes, the JSON
report, errors by code, HTTP and gRPC, and latency measured from the intended send
time (a slow server cannot hide behind a generator that waits for it)."""

import json
import subprocess

import pytest

import harness

SIP = harness.BUILD_DIR / "sip"


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    pools = [{"name": "echo", "backend": "builtin", "pool_size": 2,
              "backend_options": {"shape": "-1,4"}},
             {"name": "slow", "backend": "builtin", "pool_size": 1,
              "backend_options": {"shape": "-1,4", "delay_ms": 50}}]
    with harness.serve(tmp_path_factory.mktemp("bench"), pools,
                       server={"http": "127.0.0.1:0", "grpc": "127.0.0.1:0"}) as s:
        yield s


def bench(endpoint, pool, *args):
    r = subprocess.run([str(SIP), "-e", endpoint, "--json", "bench", pool,
                        "-i", "input:float32:1,4=ones", "--window-ms", "400",
                        "--max-windows", "4", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1), r.stderr
    assert "window 1:" in r.stderr  # the progress line
    return json.loads(r.stdout)


def logged_endpoint(srv, scheme):
    with open(srv.log_path) as f:
        for line in f:
            if "listening on %s://" % scheme in line:
                return line.split("listening on ")[1].strip()
    raise AssertionError("no %s endpoint in the log" % scheme)


def http_endpoint(srv):
    return logged_endpoint(srv, "http")


def test_concurrency_mode(srv):
    r = bench(srv.endpoint, "echo", "--concurrency", "4")
    assert r["requests"] > 100 and r["errors"] == 0
    assert r["mode"] == "concurrency 4"
    lat = r["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"]
    assert r["server_us"]["queue_mean"] >= 0 and 3 <= r["windows"] <= 4  # --max-windows 4


@pytest.mark.parametrize("dist", ["constant", "poisson"])
def test_rate_mode_holds_the_rate(srv, dist):
    r = bench(srv.endpoint, "echo", "--rate", "200", "--distribution", dist)
    assert r["errors"] == 0
    assert 160 <= r["throughput_rps"] <= 240, r


def test_spike_pattern_stays_between_rates(srv):
    r = bench(srv.endpoint, "echo", "--pattern", "spike", "--min-rate", "50", "--max-rate",
              "200", "--spike-probability", "0.5")
    assert 40 <= r["throughput_rps"] <= 220, r


def test_errors_by_code(srv):
    r = bench(srv.endpoint, "nope", "--concurrency", "1")
    assert r["errors"] == r["requests"] > 0
    assert set(r["errors_by_code"]) == {"NOT_FOUND"}


def test_latency_counts_from_the_intended_send_time(srv):
    """The slow pool serves 20 req/s. Asked for 40 req/s with one request
    outstanding at most, the generator itself holds requests back: each is
    sent ~50 ms after the last, but its latency counts from when it should
    have left, so it grows far beyond the 50 ms it took once sent."""
    r = bench(srv.endpoint, "slow", "--rate", "40", "--max-outstanding", "1")
    assert r["latency_ms"]["p99"] > 300, r
    assert r["throughput_rps"] < 25, r


def test_http_transport(srv):
    ep = http_endpoint(srv)
    for fmt in ("binary", "json"):
        r = bench(ep, "echo", "--concurrency", "2", "--http-format", fmt)
        assert r["requests"] > 50 and r["errors"] == 0, (fmt, r)


def test_http_errors_by_code(srv):
    """A pool the server does not have: every request answered 404, counted
    as NOT_FOUND (the response parsed, its body skipped, the connection
    kept)."""
    r = bench(http_endpoint(srv), "nope", "--concurrency", "1")
    assert r["errors"] == r["requests"] > 50
    assert set(r["errors_by_code"]) == {"NOT_FOUND"}


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_connection_refused_is_unavailable(srv, scheme):
    port = harness.free_port()  # nothing listens there
    r = subprocess.run([str(SIP), "-e", "%s://127.0.0.1:%d" % (scheme, port), "--json", "bench",
                        "echo", "-i", "input:float32:1,4=ones", "--window-ms", "200",
                        "--max-windows", "3"], capture_output=True, text=True, timeout=60)
    assert "cannot connect to 127.0.0.1:%d" % port in r.stderr, r.stderr
    out = json.loads(r.stdout)
    assert out["errors"] == out["requests"] > 0
    assert set(out["errors_by_code"]) == {"UNAVAILABLE"}


def test_http_body_file(srv, tmp_path):
    """--http-body sends a file's bytes as the JSON body, as they are."""
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"inputs": [{"name": "input", "shape": [1, 4],
                                            "datatype": "FP32", "data": [1, 2, 3, 4]}]}))
    r = subprocess.run([str(SIP), "-e", http_endpoint(srv), "--json", "bench", "echo",
                        "--http-body", str(body), "--concurrency", "2", "--window-ms", "300",
                        "--max-windows", "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requests"] > 50 and out["errors"] == 0, out
    bad = subprocess.run([str(SIP), "-e", http_endpoint(srv), "bench", "echo", "--http-body",
                          str(tmp_path / "missing.json")], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "expected a readable file" in bad.stderr, bad.stderr


def test_grpc_transport(srv):
    """grpc://: ModelInfer calls over kept HTTP/2 connections, one per
    outstanding request; a deadline and a priority travel with them."""
    ep = logged_endpoint(srv, "grpc")
    r = bench(ep, "echo", "--concurrency", "2")
    assert r["requests"] > 50 and r["errors"] == 0, r
    assert r["endpoint"] == ep and r["mode"] == "concurrency 2"
    r = bench(ep, "echo", "--concurrency", "1", "--timeout-ms", "5000", "--priority", "high")
    assert r["requests"] > 50 and r["errors"] == 0, r


def test_grpc_errors_by_code(srv):
    """Each call's grpc-status, counted by sip's code (the table of
    docs/grpc.md read backwards), the server's message said once."""
    ep = logged_endpoint(srv, "grpc")
    r = subprocess.run([str(SIP), "-e", ep, "--json", "bench", "nope", "-i",
                        "input:float32:1,4=ones", "--window-ms", "300", "--max-windows", "3"],
                       capture_output=True, text=True, timeout=60)
    out = json.loads(r.stdout)
    assert out["errors"] == out["requests"] > 50, out
    assert set(out["errors_by_code"]) == {"NOT_FOUND"}
    assert r.stderr.count("gRPC status 5") == 1 and "'nope' is not found" in r.stderr, r.stderr
    r = bench(ep, "echo", "--concurrency", "1", "-i", "input:float32:1,3=ones")
    assert r["errors"] == r["requests"] > 50 and set(r["errors_by_code"]) == {"INVALID_ARGUMENT"}
    # The slow pool takes 50 ms; a 10 ms deadline (grpc-timeout) expires first.
    r = bench(ep, "slow", "--concurrency", "1", "--timeout-ms", "10")
    assert r["errors"] == r["requests"] > 0, r
    assert set(r["errors_by_code"]) == {"DEADLINE_EXCEEDED"}, r


def test_grpc_bad_endpoints_and_options(srv):
    ep = logged_endpoint(srv, "grpc")
    for args, said in ((["-e", "grpc://127.0.0.1", "bench", "echo"], "expected grpc://HOST:PORT"),
                       (["-e", ep + "/x", "bench", "echo"], "expected grpc://HOST:PORT"),
                       (["-e", ep, "bench", "echo", "--http-format", "json"],
                        "need an http:// endpoint"),
                       (["-e", ep, "bench", "echo", "-i", "s:string:1=a"],
                        "expected numeric inputs")):
        r = subprocess.run([str(SIP), *args, "-i", "input:float32:1,4=ones"] if "-i" not in args
                           else [str(SIP), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and said in r.stderr, (args, r.stderr)


@pytest.mark.parametrize("mode", ["separate", "in-place"])
def test_shm_on_the_unix_socket(srv, mode):
    """--shm: the input travels by reference to a region, the output is
    written into it; the server counts no error."""
    r = bench(srv.unix_endpoint, "echo", "--concurrency", "2", "-o", "output", "--shm", mode)
    assert r["requests"] > 50 and r["errors"] == 0, r


def test_shm_needs_a_unix_socket(srv):
    for ep in (http_endpoint(srv), srv.tcp_endpoint):
        r = subprocess.run([str(SIP), "-e", ep, "bench", "echo", "-i", "input:float32:1,4=ones",
                            "-o", "output", "--shm", "separate", "--window-ms", "200",
                            "--max-windows", "3"], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, (ep, r.stdout)
        assert "unix" in r.stderr, (ep, r.stderr)


def test_bench_inproc_runs_one_session_per_thread(tmp_path):
    """bench_inproc throughput with a session count (bench/batching.py's ceiling):
    it reports the count it ran and a rate, and refuses a count out of range."""
    model = tmp_path / "tiny.onnx"
    subprocess.check_call(["/usr/bin/python3", str(harness.REPO / "examples" / "make_tiny_model.py"),
                           str(model)])
    tool = str(harness.BUILD_DIR / "bench_inproc")
    r = subprocess.run([tool, "throughput", str(model), "x", "2,4", "0.2", "0", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["sessions"] == 2 and out["batch"] == 2 and out["items_per_s"] > 0, out
    r = subprocess.run([tool, "throughput", str(model), "x", "2,4", "0.2", "0", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "sessions must be 1..64, got 0" in r.stderr, r.stderr
