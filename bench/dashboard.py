#!/usr/bin/python3
"""What an open dashboard costs inference (docs/dashboard.md): 10,000
inferences on one pool with a dashboard open, against the same 10,000 with
none, in the same run. "Open" is what the page does: the event stream
GET /v2/events?exclude=INFERENCE_COMPLETE&executions=0 read as it comes, and
GET /v2/dashboard/data once a second. The pool is the builtin identity
backend (no compute), so the dashboard's share of each request is as large
as it gets. Rounds take turns (none, open; open, none; ...): the figure is
the median of each round's ratio open / none."""

import http.client
import socket
import threading

from common import ROUNDS, Sipd, interleave, pipelined_rate, ratios, report

N = 10000
WINDOW = 64  # requests in flight


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(endpoint):
    return pipelined_rate(endpoint, "echo", N, WINDOW)


class Dashboard:
    """The page's traffic: the filtered event stream and a read a second."""

    def __init__(self, port):
        self.port, self.stop, self.events, self.reads = port, threading.Event(), 0, 0
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self.stream, self.poll)]
        for t in self.threads:
            t.start()

    def stream(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
        c.request("GET", "/v2/events?exclude=INFERENCE_COMPLETE&executions=0")
        r = c.getresponse()
        while not self.stop.is_set():
            try:
                if r.fp.readline().startswith(b"data: "):
                    self.events += 1
            except socket.timeout:
                pass
        c.close()

    def poll(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        while not self.stop.is_set():
            c.request("GET", "/v2/dashboard/data")
            c.getresponse().read()
            self.reads += 1
            self.stop.wait(1.0)
        c.close()

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join()


port = free_port()
reads = 0
with Sipd([{"name": "echo", "backend": "builtin", "pool_size": 1,
            "backend_options": {"shape": "-1,4"}}],
          server_extra="  http: '127.0.0.1:%d'\n" % port) as srv:
    run(srv.endpoint)  # warm-up, not counted

    def with_dashboard():
        global reads
        d = Dashboard(port)
        try:
            return run(srv.endpoint)
        finally:
            d.close()
            reads += d.reads
    r = interleave(max(ROUNDS, 5), {"none": lambda: run(srv.endpoint), "open": with_dashboard})
print("no dashboard  : %s inferences/s" % " ".join("%.0f" % v for v in r["none"]))
print("dashboard open: %s inferences/s (%d data reads)" % (" ".join("%.0f" % v for v in r["open"]),
                                                          reads))
report("inferences/s with a dashboard open / with none", ratios(r["open"], r["none"]), None,
       "%.3f")
