#!/usr/bin/python3
"""SLA alert webhooks never slow inference (docs/sla.md).

A builtin pool whose SLA can never be met (min_throughput_rps far above what
it serves) fires a warning and a critical alert within 2 s of starting; the
alerts are posted to a webhook that is
  - none:       no webhook configured (the baseline),
  - blackholed: a socket that listens and never accepts or answers (every
                POST waits timeout_ms, then is retried: the delivery thread is
                stuck for the whole run),
  - dead:       a port nothing listens on (every POST is refused at once and
                retried with backoff).
The servers run at once. Once both alerts are sent (and, with a
webhook, its delivery is failing), `sip bench` measures each pool's latency
at concurrency 1 over the native protocol, the servers taking turns ROUNDS
times so that the machine's other load falls on all alike; the medians are
compared with the baseline of the same run. "sla off" (no sla block at all)
shows the cost of the per-request accounting itself.
Target: p50 with a dead or blackholed webhook within 1.2 x of none, and p99
within the spread of two identical servers ("none again" / "none", the noise
floor measured in the same run).
"""
import os
import socket
import statistics
import time

from common import Sipd, sip_bench
from cann_sip import SessionClient

ROUNDS = 15
INPUT = ["input:float32:4=ones"]


def config(endpoint_dummy, webhook, sla=True):
    pool = ('  - {name: p, backend: builtin, backend_options: {shape: "-1"}%s}\n'
            % (", sla: {min_throughput_rps: 1000000000, window_s: 1}" if sla else ""))
    hooks = ("  webhooks: ['%s']\n  timeout_ms: 3000\n  retries: 100\n  backoff_ms: 20\n"
             % webhook) if webhook else ""
    return ("server:\n  endpoints:\n    - %s\n  log_level: error\n"
            "alerts:\n  warning_after: 1\n  critical_after: 2\n%s"
            "session_pools:\n%s" % (endpoint_dummy, hooks, pool))


def start(kind, blackhole_url, dead_url):
    url = {"blackholed": blackhole_url, "dead": dead_url}.get(kind)
    return Sipd(None, config=config("ipc:///unused", url, sla=kind != "sla off"))


def wait_alerts(s):
    """Until both alerts are sent and the webhook (if any) has failed once."""
    with SessionClient(s.endpoint) as c:
        deadline = time.time() + 30
        while True:
            a = c.status()["alerts"]
            h = a["webhooks"][0] if a["webhooks"] else None
            if a["sent"] >= 2 and (h is None or h["attempts"] >= 1 and h["delivered"] == 0):
                return
            assert time.time() < deadline, a
            time.sleep(0.05)


def main():
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(1)  # never accepted: connections hang, then time out
    blackhole_url = "http://127.0.0.1:%d/hook" % hole.getsockname()[1]
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    dead_url = "http://127.0.0.1:%d/hook" % probe.getsockname()[1]
    probe.close()  # nothing listens there any more

    # "none again" is a second baseline: how far two identical servers
    # differ on this machine now (the noise floor of the ratios).
    kinds = ["none", "blackholed", "dead", "none again", "sla off"]
    load0 = os.getloadavg()[0]
    # Every server runs at once and the measurements take turns, so the
    # machine's other load falls on all of them alike.
    servers = {k: start(k, blackhole_url, dead_url) for k in kinds}
    res = {k: [] for k in kinds}
    hooks = {}
    try:
        for k in ("none", "blackholed", "dead", "none again"):
            wait_alerts(servers[k])
        for _ in range(ROUNDS):
            for k in kinds:
                r = sip_bench(servers[k].endpoint, "p", INPUT, "--concurrency", "1",
                              window_ms=300, max_windows=3)
                res[k].append((r["latency_ms"]["p50"], r["latency_ms"]["p99"],
                               r["throughput_rps"]))
        for k in ("blackholed", "dead"):
            with SessionClient(servers[k].endpoint) as c:
                hooks[k] = c.status()["alerts"]["webhooks"][0]
    finally:
        for s in servers.values():
            s.close()
        hole.close()
    print("machine load (1 min): %.2f before, %.2f after; %d cores"
          % (load0, os.getloadavg()[0], os.cpu_count()))
    med = {k: tuple(statistics.median(x[i] for x in res[k]) for i in range(3)) for k in kinds}
    for k in kinds:
        p50, p99, rps = med[k]
        print("%-11s p50 %7.3f ms  p99 %7.3f ms  %8.0f req/s   (median of %d turns)"
              % (k, p50, p99, rps, ROUNDS))
    for k in ("blackholed", "dead"):
        h = hooks[k]
        print("  %-10s webhook after the runs: attempts %d, delivered %d, queued %d"
              % (k, h["attempts"], h["delivered"], h["queued"]))
    ok = True
    for k in ("blackholed", "dead", "none again"):
        r50, r99 = med[k][0] / med["none"][0], med[k][1] / med["none"][1]
        # Per turn, the servers ran one right after the other: the median of
        # those paired ratios cancels the load drifting between turns.
        pr99 = statistics.median(a[1] / b[1] for a, b in zip(res[k], res["none"]))
        if k != "none again":
            ok = ok and r50 <= 1.2
        print("%-10s / none: p50 x%.3f  p99 x%.3f  (paired p99 x%.3f)" % (k, r50, r99, pr99))
    print("sla on (no webhook) / sla off: p50 x%.3f  p99 x%.3f"
          % (med["none"][0] / med["sla off"][0], med["none"][1] / med["sla off"][1]))
    print("p50 with a dead or blackholed webhook within 1.2 x of none: %s"
          % ("PASS" if ok else "FAIL"))
    print("(p99 is judged against 'none again / none', two identical servers: on a loaded "
          "machine it is the scheduler's noise)")


if __name__ == "__main__":
    main()
