#!/usr/bin/python3
"""Event stream cost (issue 12): 10,000 inferences on one pool with a
subscriber that never reads its event stream, against the same 10,000 with
no subscriber, in the same run. The pool is the builtin identity backend
(no compute), so the events' share of each request is as large as it gets.
Rounds take turns (none, subscriber; subscriber, none; ...). Target: with /
without >= 0.95, the median of each round's ratio.

For scale, bench_events (bench/events_inproc.c) then measures the engine
alone: the same pool driven in-process, where a request costs a couple of
microseconds and the three events each request emits (READY -> RUNNING,
RUNNING -> READY, INFERENCE_COMPLETE) are the largest share they can be.
That figure is printed for information; the target is the server's."""
import json
import os
import socket
import subprocess

from common import BUILD, ROUNDS, Sipd, interleave, pipelined_rate, ratios, report
from cann_sip import protocol as P
from cann_sip.client import parse_endpoint

N = 10000
WINDOW = 64  # requests in flight


def run(endpoint):
    return pipelined_rate(endpoint, "echo", N, WINDOW)


def deaf_subscriber(endpoint):
    """SUBSCRIBE, read the acceptance, then never read again."""
    _, addr = parse_endpoint(endpoint)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(addr)
    s.sendall(P.encode_frame(P.SUBSCRIBE, 1, P.encode_subscribe("echo", 0)))
    hdr = s.recv(P.HEADER_SIZE, socket.MSG_WAITALL)
    s.recv(P.decode_header(hdr).length, socket.MSG_WAITALL)
    return s


with Sipd([{"name": "echo", "backend": "builtin", "pool_size": 1,
            "backend_options": {"shape": "-1,4"}}]) as srv:
    run(srv.endpoint)  # warm-up, not counted

    def with_subscriber():
        sub = deaf_subscriber(srv.endpoint)
        try:
            return run(srv.endpoint)
        finally:
            sub.close()
    r = interleave(max(ROUNDS, 5), {"none": lambda: run(srv.endpoint), "deaf": with_subscriber})
print("no subscriber           : %s inferences/s" % " ".join("%.0f" % v for v in r["none"]))
print("never-reading subscriber: %s inferences/s" % " ".join("%.0f" % v for v in r["deaf"]))
report("inferences/s with a never-reading subscriber / without", ratios(r["deaf"], r["none"]),
       ">= 0.95", "%.3f")

# The engine alone: bench_events alternates its rounds itself.
inproc = json.loads(subprocess.run([os.path.join(BUILD, "bench_events"), str(N), "7"],
                                   check=True, capture_output=True, text=True).stdout)
eng = ratios(inproc["with"], inproc["without"])
print("engine alone (in-process, no transport): %s requests/s without, %s with (%d events "
      "dropped)" % (" ".join("%.0f" % v for v in inproc["without"]),
                    " ".join("%.0f" % v for v in inproc["with"]), inproc["dropped"]))
report("engine alone: requests/s with / without a never-reading subscriber", eng, None, "%.3f")
# On a busy machine rounds of the server differ by more than 5%; the
# engine's cost per request times the server's rate says what share of the
# server's time the events take, whatever the noise.
share = [(1.0 / w - 1.0 / wo) * n for w, wo, n in zip(inproc["with"], inproc["without"],
                                                      r["none"])]
report("events' share of the server's time per request (engine cost x server rate)",
       [100 * v for v in share], None, "%.1f", "%", spread_limit=None)
