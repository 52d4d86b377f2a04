"""Batching as observed from outside: /metrics batch-size histogram, compute
seconds and elastic level; the HTTP model configuration shows the batcher."""

import json
import threading

import numpy as np
import pytest

import kserve as K
from cann_sip import InferenceRequest
from harness import serve, wait_until

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

F = np.float32


@pytest.fixture(scope="module")
def srv(sipd_bin, tmp_path_factory):
    pools = [
        {"name": "b", "backend": "builtin", "pool_size": 1,
         "backend_options": {"shape": "-1,2", "delay_ms": 200},
         "dynamic_batching": {"max_batch_size": 8, "max_queue_delay_us": 100000,
                              "preferred_batch_sizes": [1, 4, 8]}},
        {"name": "e", "backend": "builtin",
         "backend_options": {"shape": "-1,2"},
         "batch_strategies": {"low": {"max_batch": 2, "timeout": 1},
                              "medium": {"max_batch": 4, "timeout": 2},
                              "high": {"max_batch": 8, "timeout": 4}}},
    ]
    with serve(tmp_path_factory.mktemp("bm"), pools,
               server={"http": "127.0.0.1:0"}) as s:
        s.http = K.http_base(s)
        yield s


def samples(base):
    text = K.get(base + "/metrics").body.decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_batch_histogram_in_metrics(srv):
    c = srv.client()
    # Occupy the session, queue 4 one-row requests: they run as one batch of 4.
    first = c.infer_async(InferenceRequest("b", {"input": np.zeros((1, 2), F)}))
    # A lone row is a preferred size: it runs at once; the next four queue behind it.
    wait_until(lambda: srv.pool_status("b", c)["sessions"][0]["state"] == "RUNNING",
               what="the first request to run")
    futs = [c.infer_async(InferenceRequest("b", {"input": np.full((1, 2), i, F)})) for i in range(4)]
    first.result(timeout=10)
    for i, f in enumerate(futs):
        np.testing.assert_array_equal(f.result(timeout=10).outputs["output"], np.full((1, 2), i, F))
    m = samples(srv.http)
    labels = [k for k in m if k[0] == "sip_batch_size_count"]
    assert labels, sorted(set(k[0] for k in m))
    pool_b = [k for k in labels if ("pool", "b") in k[1]][0][1]
    get = lambda name, **extra: m[(name, tuple(sorted(dict(pool_b, **extra).items())))]  # noqa: E731
    assert get("sip_batch_size_count") == 2          # two executions
    assert get("sip_batch_size_sum") == 5            # 1 + 4 rows
    assert get("sip_batch_size_bucket", le="1") == 1
    assert get("sip_batch_size_bucket", le="4") == 2
    assert get("sip_batch_size_bucket", le="+Inf") == 2
    assert get("sip_execution_count_total") == 2
    assert get("sip_inference_count_total") == 5
    assert get("sip_compute_seconds_total") >= 0.35  # two 200 ms executions


def test_elastic_level_metric_and_config(srv):
    m = samples(srv.http)
    levels = {dict(k[1])["level"]: v for k, v in m.items()
              if k[0] == "sip_batch_level" and ("pool", "e") in k[1]}
    assert levels == {"low": 1.0, "medium": 0.0, "high": 0.0}
    cfg = K.get(srv.http + "/v2/models/b/config").json()
    assert cfg["max_batch_size"] == 8
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [1, 4, 8]
    assert cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 100000
    # A burst of traffic raises the level (rate thresholds default to 50/200 req/s).
    c = srv.client()
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            c.infer(InferenceRequest("e", {"input": np.ones((1, 2), F)}))

    ts = [threading.Thread(target=hammer) for _ in range(4)]
    [t.start() for t in ts]
    try:
        level = wait_until(lambda: srv.pool_status("e", c).get("batch_level") == "high"
                           and "high", 30, "pool e's batch_level to reach high")
    finally:
        stop.set()
        [t.join() for t in ts]
    assert json.dumps(level)
