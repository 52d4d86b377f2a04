#!/usr/bin/python3
"""Event stream cost (issue 12): 10,000 inferences on one pool with a
subscriber that never reads its event stream, against the same 10,000 with
no subscriber, in the same run. The pool is the builtin identity backend
(no compute), so the events' share of each request is as large as it gets.
Rounds alternate (none, subscriber, none, ...); other work on the machine
only ever slows a round down, so the best round of each is compared (the
medians are printed too). Target: with / without >= 0.95.

For scale, bench_events (bench/events_inproc.c) then measures the engine
alone: the same pool driven in-process, where a request costs a couple of
microseconds and the three events each request emits (READY -> RUNNING,
RUNNING -> READY, INFERENCE_COMPLETE) are the largest share they can be.
That figure is printed for information; the target is the server's."""
import json
import os
import socket
import statistics
import subprocess

from common import BUILD, Sipd, pipelined_rate
from cann_sip import protocol as P
from cann_sip.client import parse_endpoint

N = 10000
WINDOW = 64  # requests in flight
ROUNDS = 7


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
    without, with_sub = [], []
    run(srv.endpoint)  # warm-up, not counted
    for _ in range(ROUNDS):
        without.append(run(srv.endpoint))
        sub = deaf_subscriber(srv.endpoint)
        with_sub.append(run(srv.endpoint))
        sub.close()
    load = open("/proc/loadavg").read().split()[:3]
a, b = max(without), max(with_sub)
print("machine load (1/5/15 min): %s" % " ".join(load))
print("no subscriber           : best %6.0f  median %6.0f inferences/s  (rounds: %s)" %
      (a, statistics.median(without), " ".join("%.0f" % v for v in without)))
print("never-reading subscriber: best %6.0f  median %6.0f inferences/s  (rounds: %s)" %
      (b, statistics.median(with_sub), " ".join("%.0f" % v for v in with_sub)))
print("median ratio = %.3f" % (statistics.median(with_sub) / statistics.median(without)))
r = b / a
print("with / without = %.3f   target >= 0.95: %s" % (r, "PASS" if r >= 0.95 else "FAIL"))

inproc = json.loads(subprocess.run([os.path.join(BUILD, "bench_events"), str(N), "7"],
                                   check=True, capture_output=True, text=True).stdout)
ia, ib = max(inproc["without"]), max(inproc["with"])
print("engine alone (in-process, no transport): best %.0f vs %.0f requests/s, ratio %.3f "
      "(%.2f us per request for its 3 events; %d events dropped)" %
      (ib, ia, ib / ia, 1e6 / ib - 1e6 / ia, inproc["dropped"]))
# On a busy machine rounds of the server run differ by more than 5%; the
# engine's cost per request times the server's rate says what share of the
# server's time the events take, whatever the noise.
share = (1.0 / ib - 1.0 / ia) * max(a, b)
print("events' share of the server's time per request (engine cost x server rate): %.1f%%"
      % (100 * share))
