#!/usr/bin/python3
"""Request tracing (docs/tracing.md): what it costs. Four sipd, each with the
same builtin pool (identity, 1 KiB input), the Python client sending N
requests one at a time over the unix socket: no tracing block (baseline);
tracing configured with sample_ratio 0 (the exporter runs, no request is
traced: the cost of tracing off); every request traced, spans POSTed to a
collector on a thread of this process; every request traced with the
collector down (spans dropped). Rounds interleave and the best rate of each
counts (the machine is shared). Prints each rate and its ratio to the
baseline measured in this run."""
import socket
import threading
import time

import http.server

import numpy as np

from common import Sipd
from cann_sip import InferenceRequest, SessionClient

N = 2000
ROUNDS = 5
X = np.arange(256, dtype=np.float32)
POOL = [{"name": "p", "backend": "builtin", "pool_size": 1, "backend_options": {"shape": "-1"}}]


class Collector(http.server.BaseHTTPRequestHandler):
    spans = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        Collector.spans += body.count(b'"spanId"')
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def rate(client):
    client.infer(InferenceRequest("p", {"input": X}))  # warm
    t0 = time.perf_counter()
    for _ in range(N):
        client.infer(InferenceRequest("p", {"input": X}))
    return N / (time.perf_counter() - t0)


httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
live = "http://127.0.0.1:%d/v1/traces" % httpd.server_address[1]
with socket.socket() as sk:
    sk.bind(("127.0.0.1", 0))
    dead = "http://127.0.0.1:%d/v1/traces" % sk.getsockname()[1]

modes = [("no tracing (baseline)", ""),
         ("tracing, sample_ratio 0", "tracing: {otlp_endpoint: '%s', sample_ratio: 0}\n" % live),
         ("every request, collector", "tracing: {otlp_endpoint: '%s', sample_ratio: 1}\n" % live),
         ("every request, dead collector",
          "tracing: {otlp_endpoint: '%s', sample_ratio: 1, timeout_ms: 100}\n" % dead)]
servers = [Sipd(POOL, pipelines=extra) for _, extra in modes]
try:
    clients = [SessionClient(s.endpoint, timeout_s=30) for s in servers]
    best = [0.0] * len(modes)
    for _ in range(ROUNDS):
        for i, c in enumerate(clients):
            best[i] = max(best[i], rate(c))
    for c in clients:
        c.close()
finally:
    for s in servers:
        s.close()
httpd.shutdown()
print("requests/s, one at a time over the unix socket, N=%d, best of %d:" % (N, ROUNDS))
for (name, _), r in zip(modes, best):
    print("  %-32s: %8.0f   ratio %.3f" % (name, r, r / best[0]))
print("spans the collector received: %d (6 per traced request: %d expected)"
      % (Collector.spans, 6 * ROUNDS * (N + 1)))
