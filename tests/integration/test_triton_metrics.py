"""Triton's metric families on /metrics (metrics.triton_names, docs/metrics.md):
a real sipd with builtin pools and a pipeline answers requests that succeed
and fail; each nv_* sample equals the sip_* sample it is computed from
(labels model and version, an unversioned model being version "1"), and
metrics: {triton_names: false} leaves them out."""

import contextlib
import re

import numpy as np
import pytest

import harness
import kserve as K
from cann_sip import InferenceRequest, SipError

F = np.float32

POOLS = [
    {"name": "echo", "backend": "builtin", "pool_size": 1},
    {"name": "flaky", "backend": "builtin", "pool_size": 1,
     "backend_options": {"fail_every": 2}},
]
PIPELINES = [{"name": "chain", "stages": [{"name": "first", "pool": "echo"}]}]

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def scrape(base):
    """{(name, frozenset of labels): value} of the page; each sample once."""
    reply = K.get(base + "/metrics")
    assert reply.status == 200, reply.body
    out = {}
    for line in reply.body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, "sample line does not parse: %r" % line
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        key = (m.group(1), labels)
        assert key not in out, "sample twice: %r" % line
        out[key] = float(m.group(3))
    return out


def select(page, name, **labels):
    """{labels as a dict: value} of the samples of `name` that have `labels`."""
    want = set(labels.items())
    return {lb: v for (n, lb), v in page.items() if n == name and want <= lb}


def one(page, name, **labels):
    got = select(page, name, **labels)
    assert len(got) == 1, "%s%r: %r" % (name, labels, got)
    return next(iter(got.values()))


@contextlib.contextmanager
def sipd(workdir, **top):
    """sipd with POOLS, PIPELINES and HTTP; `top` added to the config's top
    level. Stopped (killed when the test fails) whatever happens."""
    srv = harness.SipServer(workdir, POOLS, server={"http": "127.0.0.1:0"})
    base_config = srv.config
    srv.config = lambda: dict(base_config(), pipeline_sessions=PIPELINES, **top)
    srv.start()
    try:
        srv.http = K.http_base(srv)
        yield srv
    except BaseException:
        srv.kill()
        raise
    rc = srv.stop()
    assert rc == 0, "sipd exited with %s after SIGTERM:\n%s" % (rc, srv.log_tail())


def traffic(srv):
    """echo: 3 OK; flaky: 2 OK, 2 failed; chain: 2 OK, 1 failed (a wrong
    input name). Returns the counts answered per model and outcome."""
    c = srv.client()
    for i in range(3):
        c.infer(InferenceRequest("echo", {"input": np.array([i], F)}))
    flaky = {"ok": 0, "failed": 0}
    for i in range(4):
        try:
            c.infer(InferenceRequest("flaky", {"input": np.array([i], F)}))
            flaky["ok"] += 1
        except SipError:
            flaky["failed"] += 1
    assert flaky == {"ok": 2, "failed": 2}, flaky
    for i in range(2):
        c.infer(InferenceRequest("chain", {"input": np.array([i], F)}))
    with pytest.raises(SipError):
        c.infer(InferenceRequest("chain", {"other": np.array([1], F)}))


# nv_* family -> the sip_* family of pools it is computed from.
POOL_MAP = {
    "nv_inference_count": "sip_inference_count_total",
    "nv_inference_exec_count": "sip_execution_count_total",
    "nv_inference_request_duration_us": "sip_request_duration_us_total",
    "nv_inference_queue_duration_us": "sip_queue_duration_us_total",
    "nv_inference_compute_input_duration_us": "sip_compute_input_duration_us_total",
    "nv_inference_compute_infer_duration_us": "sip_compute_infer_duration_us_total",
    "nv_inference_compute_output_duration_us": "sip_compute_output_duration_us_total",
    "nv_inference_pending_request_count": "sip_pending_requests",
}


def sip_codes(page, family, **labels):
    """OK and failed (every other code) answers of one pool or pipeline."""
    got = select(page, family, **labels)
    ok = sum(v for lb, v in got.items() if ("code", "OK") in lb)
    return ok, sum(got.values()) - ok


def test_nv_samples_equal_sip_samples(tmp_path):
    with sipd(tmp_path / "on") as srv:
        traffic(srv)
        page = scrape(srv.http)

        pools = {dict(lb)["pool"]: dict(lb)["version"]
                 for lb in select(page, "sip_inference_count_total")}
        assert set(pools) == {"echo", "flaky"}, pools
        for pool, version in pools.items():
            nv = {"model": pool, "version": version or "1"}
            ok, failed = sip_codes(page, "sip_requests_total", pool=pool, version=version)
            assert one(page, "nv_inference_request_success", **nv) == ok
            assert one(page, "nv_inference_request_failure", **nv) == failed
            for nv_name, sip_name in POOL_MAP.items():
                want = one(page, sip_name, pool=pool, version=version)
                assert one(page, nv_name, **nv) == want, (nv_name, pool)
        # The traffic is there to be compared: echo ran its 3 and the
        # pipeline's 2 (and the refused one never reached it).
        assert sip_codes(page, "sip_requests_total", pool="echo") == (5, 0)
        assert sip_codes(page, "sip_requests_total", pool="flaky") == (2, 2)
        assert one(page, "nv_inference_request_duration_us", model="echo", version="1") > 0

        # The pipeline, as Triton reports an ensemble: requests and their
        # end-to-end time; queue and compute are its stages' pools'.
        ok, failed = sip_codes(page, "sip_pipeline_requests_total", pipeline="chain")
        assert (ok, failed) == (2, 1)
        nv = {"model": "chain", "version": "1"}
        assert one(page, "nv_inference_request_success", **nv) == ok
        assert one(page, "nv_inference_request_failure", **nv) == failed
        assert one(page, "nv_inference_request_duration_us", **nv) == \
            one(page, "sip_pipeline_request_duration_us_total", pipeline="chain")
        assert not select(page, "nv_inference_queue_duration_us", model="chain")

        # Triton's labels only: model and version.
        for (name, labels) in page:
            if name.startswith("nv_"):
                assert {k for k, _ in labels} == {"model", "version"}, (name, labels)


def test_triton_names_false_removes_them(tmp_path):
    with sipd(tmp_path / "off", metrics={"triton_names": False}) as srv:
        traffic(srv)
        page = scrape(srv.http)
        assert one(page, "sip_inference_count_total", pool="echo") == 5
        nv = sorted({name for name, _ in page if name.startswith("nv_")})
        assert nv == [], nv
        text = K.get(srv.http + "/metrics").body.decode()
        assert "nv_inference" not in text
