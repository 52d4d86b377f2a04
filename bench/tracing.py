#!/usr/bin/python3
"""Request tracing (docs/tracing.md): what it costs. Four sipd, each with the
same builtin pool (identity, 1 KiB input), the Python client sending N
requests one at a time over the unix socket: no tracing block (baseline);
tracing configured with sample_ratio 0 (the exporter runs, no request is
traced: the cost of tracing off); every request traced, spans POSTed to a
collector on a thread of this process; every request traced with the
collector down (spans dropped). Every round measures the four in turn (the
order turning each round). Prints each rate and the medians of each round's
ratio to the baseline."""
import socket
import threading
import time

import http.server

import numpy as np

from common import ROUNDS, Sipd, interleave, ratios, report
from cann_sip import InferenceRequest, SessionClient

N = 2000
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
servers = []
try:
    for _, extra in modes:
        servers.append(Sipd(POOL, pipelines=extra))
    clients = [SessionClient(s.endpoint, timeout_s=30) for s in servers]
    r = interleave(ROUNDS, {name: (lambda c=c: rate(c)) for (name, _), c in zip(modes, clients)})
    for c in clients:
        c.close()
finally:
    for s in servers:
        s.close()
    httpd.shutdown()
print("requests/s, one at a time over the unix socket, N=%d:" % N)
base = r[modes[0][0]]
for name, _ in modes:
    print("  %-32s: %s" % (name, " ".join("%8.0f" % v for v in r[name])))
for name, _ in modes[1:]:
    report("requests/s, %s / no tracing" % name, ratios(r[name], base), None, "%.3f")
rounds = len(base)
print("spans the collector received: %d (6 per traced request: %d expected)"
      % (Collector.spans, 6 * rounds * (N + 1)))
