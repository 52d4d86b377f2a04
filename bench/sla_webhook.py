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
at concurrency 1 over the native protocol, the servers taking turns round by
round (the order turning each round) so that the machine's other load falls
on all alike; each figure is the median of each round's ratio to the
baseline of the same round. "sla off" (no sla block at all)
shows the cost of the per-request accounting itself.
Target: p50 with a dead or blackholed webhook within 1.2 x of none. p99 is
reported, not judged: read it against the spread of two identical servers
("none again" / "none", the noise floor measured in the same run).
"""
import socket
import time

from common import ROUNDS, Sipd, interleave, median, ratios, report, sip_bench
from cann_sip import SessionClient
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
    # Every server runs at once and the measurements take turns, so the
    # machine's other load falls on all of them alike.
    servers = {}
    hooks = {}
    try:
        for k in kinds:
            servers[k] = start(k, blackhole_url, dead_url)
        for k in ("none", "blackholed", "dead", "none again"):
            wait_alerts(servers[k])

        def measure(k):
            def run():
                r = sip_bench(servers[k].endpoint, "p", INPUT, "--concurrency", "1",
                              window_ms=300, max_windows=3)
                return (r["latency_ms"]["p50"], r["latency_ms"]["p99"], r["throughput_rps"])
            return run
        res = interleave(max(ROUNDS, 7), {k: measure(k) for k in kinds})
        for k in ("blackholed", "dead"):
            with SessionClient(servers[k].endpoint) as c:
                hooks[k] = c.status()["alerts"]["webhooks"][0]
    finally:
        for s in servers.values():
            s.close()
        hole.close()
    for k in kinds:
        p50, p99, rps = (median(x[i] for x in res[k]) for i in range(3))
        print("%-11s p50 %7.3f ms  p99 %7.3f ms  %8.0f req/s   (medians of %d turns)"
              % (k, p50, p99, rps, len(res[k])))
    for k in ("blackholed", "dead"):
        h = hooks[k]
        print("  %-10s webhook after the runs: attempts %d, delivered %d, queued %d"
              % (k, h["attempts"], h["delivered"], h["queued"]))

    def col(k, i):
        return [x[i] for x in res[k]]
    for k in ("blackholed", "dead", "none again"):
        report("p50 with %s / none" % (k if k == "none again" else "a %s webhook" % k),
               ratios(col(k, 0), col("none", 0)), None if k == "none again" else "<= 1.2",
               "%.3f")
        report("p99 with %s / none" % (k if k == "none again" else "a %s webhook" % k),
               ratios(col(k, 1), col("none", 1)), None, "%.3f")
    report("p50 sla on (no webhook) / sla off", ratios(col("none", 0), col("sla off", 0)), None,
           "%.3f")
    print("(p99 is judged against 'none again / none', two identical servers: on a loaded "
          "machine it is the scheduler's noise)")


if __name__ == "__main__":
    main()
