"""The live dashboard (docs/dashboard.md) in a real browser: Debian's
chromium, headless, driven by chromedriver through python3-selenium
(scripts/deps.sh installs them). The page loads with no console error,
shows every pool of the config, and shows a failed repository load and a
drained session within 2 s of the change; a screenshot is written to the
test's directory. The Export button's report and `sip report --html` are
self-contained (nothing fetched from elsewhere, every pool in them), and
server.dashboard serves the dashboard, and only it, on a port of its own."""

import html.parser
import http.client
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse

import pytest

import harness
import kserve as K
import models

SIP = harness.BUILD_DIR / "sip"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOW_WITHIN_S = 2.0


def builtin(name, pool_size=1):
    return {"name": name, "backend": "builtin", "pool_size": pool_size,
            "backend_options": {"shape": "-1"}}


def sip(endpoint, *args):
    return subprocess.run([str(SIP), "-e", endpoint, *args], capture_output=True, text=True,
                          timeout=60)


def broken_repository(tmp_path):
    """A repository with one model whose file is not ONNX."""
    repo = tmp_path / "repo"
    d = repo / "brokenm" / "1"
    d.mkdir(parents=True)
    models.write_corrupt(d / "model.onnx")
    return repo


# ---------------------------------------------------------------------------
# the browser

def browser(download_dir):
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="python3-selenium is not installed (scripts/deps.sh)")
    from selenium.webdriver.chrome.service import Service
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not os.access(exe, os.X_OK):
            pytest.skip("%s is not installed (scripts/deps.sh installs chromium and "
                        "chromium-driver)" % exe)
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1800", "--no-first-run", "--disable-extensions"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    o.add_experimental_option("prefs", {"download.default_directory": str(download_dir),
                                        "download.prompt_for_download": False})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=o)
    d.execute_cdp_cmd("Browser.setDownloadBehavior",
                      {"behavior": "allow", "downloadPath": str(download_dir)})
    return d


class Console:
    """The browser's console, read as the test goes (reading empties it)."""

    def __init__(self, driver):
        self.driver = driver
        self.entries = []

    def read(self):
        self.entries += self.driver.get_log("browser")
        return self.entries

    def errors(self):
        return [e for e in self.read() if e.get("level") == "SEVERE"]


def wait_for(what, fn, timeout=harness.WAIT_TIMEOUT_S):
    """fn() until it is truthy; (value, seconds it took)."""
    t0 = time.monotonic()
    v = harness.wait_until(fn, timeout, "shown on the page: " + what)
    return v, time.monotonic() - t0


def attr_rows(driver, css):
    """The elements matching `css` as {"text", attribute: value...}, read in
    one script run: the page redraws its tables, so element handles go stale."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(function (e) {"
        "  var o = {text: e.textContent};"
        "  for (var i = 0; i < e.attributes.length; i++) o[e.attributes[i].name] = e.attributes[i].value;"
        "  return o; });", css)


def text_of(driver, css):
    return " ".join(e["text"] for e in attr_rows(driver, css))


# ---------------------------------------------------------------------------
# report checks

EXTERNAL = re.compile(r"""(?:\b(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//)"""
                      r"""|url\(\s*["']?\s*(?:https?:)?//|@import|\bfetch\(\s*["']https?:""",
                      re.I)


class _Refs(html.parser.HTMLParser):
    """Every element that would load something: <script src>, <link href>,
    <img src>, <iframe src>..."""

    def __init__(self):
        super().__init__()
        self.loads, self.scripts = [], {}
        self._in = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("src", "href", "data", "poster"):
            v = a.get(k)
            if v is not None and not (tag == "link" and a.get("rel") == "icon" and v == "data:,") \
                    and not (tag == "a"):
                self.loads.append((tag, k, v))
        if tag == "script":
            self._in = a.get("id")
            self.scripts[self._in] = ""

    def handle_data(self, data):
        if self._in is not None:
            self.scripts[self._in] += data

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None


def check_self_contained(doc, pools):
    """The report loads nothing (no src/href/url() to anywhere), carries its
    data, and names every pool. Returns the snapshot."""
    p = _Refs()
    p.feed(doc)
    assert p.loads == [], "the report loads %r" % p.loads
    assert not EXTERNAL.search(doc), EXTERNAL.search(doc).group(0)
    snap = json.loads(p.scripts["sip-snapshot"])
    assert {x["name"] for x in snap["pools"]} == set(pools)
    for name in pools:
        assert name in doc
    # The styles and scripts are inlined: uPlot and the page's own code.
    assert "uPlot" in doc and "<style>" in doc
    return snap, p.scripts.get("sip-history")


# ---------------------------------------------------------------------------
# tests

def test_dashboard_in_browser(start_sipd, tmp_path):
    repo = broken_repository(tmp_path)
    pools = [builtin("alpha", 2), builtin("beta"),
             {"name": "cracked", "model_path": str(models.write_corrupt(tmp_path / "c.onnx")),
              "pool_size": 1}]
    srv = harness.SipServer(tmp_path / "sipd", pools,
                            server={"http": "127.0.0.1:0", "model_repository": str(repo),
                                    "model_control": "explicit"})
    cfg = srv.config()
    cfg["pipeline_sessions"] = [{"name": "chain", "stages": [{"name": "first", "pool": "beta"}]}]
    srv.config = lambda: cfg
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver = None
    srv.start()
    try:
        base = K.http_base(srv)
        driver = browser(downloads)
        console = Console(driver)
        driver.get(base + "/dashboard")
        # Every pool of the config, with its state (the broken one FAILED).
        wait_for("every pool", lambda: len(attr_rows(driver, "#pools tr[data-pool]")) == 3)
        states = {r["data-pool"]: r["data-state"] for r in attr_rows(driver, "#pools tr[data-pool]")}
        assert states == {"alpha": "READY", "beta": "READY", "cracked": "FAILED"}, states
        assert "alpha/1" in text_of(driver, "#sessions")
        chain = attr_rows(driver, '#pipelines tr[data-pipeline="chain"]')
        assert len(chain) == 1 and chain[0]["data-state"] == "READY", chain
        assert "first (beta)" in chain[0]["text"]
        wait_for("the event stream open", lambda: driver.find_element("id", "link").text == "live")
        c = srv.client()
        from cann_sip import InferenceRequest
        import numpy as np
        for i in range(20):
            c.infer(InferenceRequest("alpha", {"input": np.array([i], np.float32)}))

        # A session drained: shown within 2 s of the drain's answer.
        r = sip(srv.endpoint, "session", "drain", "alpha/1")
        assert r.returncode == 0, r.stderr
        _, took = wait_for("alpha/1 drained", lambda: attr_rows(
            driver, '#sessions [data-session="alpha/1"][data-drained="true"]'))
        assert took < SHOW_WITHIN_S, "the drain took %.2f s to show" % took
        drain_took = took

        # A repository load that fails: the model's entry with the reason,
        # and the POOL_FAILED event, within 2 s of the load's answer.
        before = text_of(driver, '#repository tr[data-model="brokenm"]')
        assert "cannot load" not in before, before
        reply = K.request("POST", base + "/v2/repository/models/brokenm/load", body=b"{}",
                          headers={"Content-Type": "application/json"})
        assert reply.status >= 400, reply
        _, took = wait_for("brokenm's failure", lambda: [
            e for e in attr_rows(driver, '#repository tr[data-model="brokenm"]')
            if e["data-state"] == "UNAVAILABLE" and "cannot load" in e["text"]])
        assert took < SHOW_WITHIN_S, "the failed load took %.2f s to show" % took
        _, took2 = wait_for("POOL_FAILED event", lambda: [
            e for e in attr_rows(driver, '#events tr[data-event="POOL_FAILED"]')
            if "brokenm" in e["text"]])
        assert took + took2 < SHOW_WITHIN_S
        print("dashboard: drain shown after %.3f s, failed load after %.3f s, its event after "
              "%.3f s" % (drain_took, took, took + took2))

        # The charts are uPlot's, and got data.
        assert len(attr_rows(driver, ".uplot")) >= 5
        shot = tmp_path / "dashboard.png"
        assert driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        # Export: the report with this page's samples and events in it.
        driver.find_element("id", "export").click()
        files, _ = wait_for("the exported report", lambda: [
            f for f in downloads.iterdir() if f.suffix == ".html"])
        doc = files[0].read_text()
        snap, hist = check_self_contained(doc, ["alpha", "beta", "cracked"])
        hist = json.loads(hist)
        assert len(hist["samples"]) >= 2
        assert any(e["event"] == "POOL_FAILED" and e["pool"] == "brokenm" for e in hist["events"])
        assert [s["drained"] for p in snap["pools"] if p["name"] == "alpha"
                for s in p["sessions"]] == [False, True]
        assert console.errors() == [], console.errors()

        # The report opened from a file: it shows the same, fetching nothing.
        driver.get("file://" + str(files[0]))
        wait_for("the report's pools", lambda: len(attr_rows(driver, "#pools tr[data-pool]")) == 3)
        assert attr_rows(driver, '#sessions [data-session="alpha/1"][data-drained="true"]')
        assert attr_rows(driver, '#events tr[data-event="POOL_FAILED"]')
        assert driver.find_element("id", "link").text.startswith("report of")
        assert not driver.find_element("id", "export").is_displayed()
        assert console.errors() == [], console.errors()
        driver.save_screenshot(str(tmp_path / "report.png"))
    finally:
        if driver:
            driver.quit()
        rc = srv.stop()
    assert rc == 0, srv.log_tail()


def test_sip_report_html(start_sipd, tmp_path):
    srv = start_sipd([builtin("one"), builtin("two", 2)], server={"http": "127.0.0.1:0"})
    base = K.http_base(srv)
    out = tmp_path / "report.html"
    # From the native endpoint: the server's status names its HTTP address.
    r = sip(srv.endpoint, "report", "--html", str(out))
    assert r.returncode == 0, r.stderr
    assert "report written to" in r.stderr
    doc = out.read_text()
    assert doc.startswith("<!doctype html>")
    snap, hist = check_self_contained(doc, ["one", "two"])
    assert hist == "null"  # no history: the page was not open
    assert [s["id"] for p in snap["pools"] if p["name"] == "two" for s in p["sessions"]] == \
        ["two/0", "two/1"]
    assert snap["ready"] is True and snap["time_us"] > 0
    # The same report from the HTTP address itself, to standard output.
    r = sip(base, "report", "--html", "-")
    assert r.returncode == 0, r.stderr
    check_self_contained(r.stdout, ["one", "two"])
    # Bad use: what was expected is said.
    r = sip(srv.endpoint, "report")
    assert r.returncode == 2 and "--html FILE" in r.stderr
    r = sip(srv.endpoint, "report", "--pdf", "x")
    assert r.returncode == 2 and "unknown option '--pdf'" in r.stderr


def test_sip_report_needs_an_http_address(start_sipd, tmp_path):
    srv = start_sipd([builtin("one")])
    r = sip(srv.endpoint, "report", "--html", str(tmp_path / "r.html"))
    assert r.returncode == 1
    assert "no HTTP address" in r.stderr and "server.dashboard" in r.stderr
    assert not (tmp_path / "r.html").exists()


def sse_first_event(base, query, act):
    """Opens /v2/events?QUERY, runs act(), returns the first event's JSON."""
    u = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    conn.request("GET", "/v2/events?" + query)
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    act()
    try:
        while True:
            line = resp.fp.readline().decode()
            if line.startswith("data: "):
                return json.loads(line[6:])
    finally:
        conn.close()


def test_dashboard_port(start_sipd, tmp_path):
    """server.dashboard alone: the dashboard, its data and report, the event
    stream, /metrics and health on a port of its own; nothing else."""
    srv = start_sipd([builtin("solo", 2)], server={"dashboard": "127.0.0.1:0"})
    addr = K.printed_address(srv, "http")
    assert addr.endswith("/dashboard"), addr
    base = addr[:-len("/dashboard")]
    page = K.get(addr)
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    # The live page: everything inlined too, but no snapshot (it reads the data).
    refs = _Refs()
    refs.feed(page.body.decode())
    assert refs.loads == [] and "sip-snapshot" not in refs.scripts
    data = K.get(base + "/v2/dashboard/data").json()
    assert [p["name"] for p in data["pools"]] == ["solo"]
    assert data["pools"][0]["pool_size"] == 2 and data["pools"][0]["backend"] == "builtin"
    assert data["connections"]["dashboard"] >= 1
    assert K.get(base + "/metrics").status == 200
    assert K.get(base + "/v2/health/live").status == 200
    rep = K.get(base + "/v2/dashboard/report")
    assert rep.status == 200
    check_self_contained(rep.body.decode(), ["solo"])
    # Nothing but the dashboard's routes: inference, admin and model routes
    # are not there (404, as for a path that does not exist).
    for method, path in (("GET", "/v2/models/solo"), ("POST", "/v2/models/solo/infer"),
                         ("POST", "/v2/admin"), ("GET", "/v2"),
                         ("POST", "/v2/repository/index")):
        r = K.request(method, base + path, body=b"{}" if method == "POST" else None)
        assert r.status == 404, (method, path, r)
    # The event stream: a drain's STATE_CHANGE, with the executions left out.
    c = srv.client()
    ev = sse_first_event(base, "exclude=INFERENCE_COMPLETE&executions=0",
                         lambda: sip(srv.endpoint, "session", "drain", "solo/0"))
    assert ev["event"] == "STATE_CHANGE" and ev["session"] == "solo/0", ev
    assert {ev["old_state"], ev["new_state"]} != {"READY", "RUNNING"}
    c.close()
    # Bad stream parameters say what was expected.
    r = K.get(base + "/v2/events?exclude=INFERENCE_COMPLETE,NOPE")
    assert r.status == 400
    msg = r.json()["error"]
    assert "unknown event type 'NOPE'" in msg and "STATE_CHANGE" in msg
    r = K.get(base + "/v2/events?executions=maybe")
    assert r.status == 400 and "executions" in r.json()["error"]


def test_event_stream_filters(start_sipd):
    """exclude= leaves out whole types; executions=0 the READY <-> RUNNING
    changes of sessions taking work, and nothing else."""
    import numpy as np
    from cann_sip import InferenceRequest
    srv = start_sipd([builtin("f")], server={"http": "127.0.0.1:0"})
    base = K.http_base(srv)
    c = srv.client()

    def infer_then_drain():
        c.infer(InferenceRequest("f", {"input": np.array([1], np.float32)}))
        assert sip(srv.endpoint, "session", "drain", "f/0").returncode == 0

    # Without the filters the first event is the request's own.
    ev = sse_first_event(base, "", infer_then_drain)
    assert ev["event"] == "STATE_CHANGE" and ev["new_state"] == "RUNNING", ev
    assert sip(srv.endpoint, "session", "resume", "f/0").returncode == 0
    ev = sse_first_event(base, "executions=0", infer_then_drain)
    assert ev["event"] == "INFERENCE_COMPLETE", ev
    assert sip(srv.endpoint, "session", "resume", "f/0").returncode == 0
    ev = sse_first_event(base, "exclude=INFERENCE_COMPLETE&executions=0", infer_then_drain)
    assert ev["event"] == "STATE_CHANGE" and ev["session"] == "f/0", ev
    assert {ev["old_state"], ev["new_state"]} != {"READY", "RUNNING"}, ev


def test_dashboard_shows_sla_and_alerts(start_sipd, tmp_path):
    """A pool's status "sla" object (the SLA monitor's) and ALERT events are
    shown when present: the report of a server, its snapshot given an "sla"
    on one pool and its history an ALERT event, opened in the browser. The
    other pool, without one, shows none."""
    srv = start_sipd([builtin("fast"), builtin("slow")], server={"http": "127.0.0.1:0"})
    r = sip(srv.endpoint, "report", "--html", "-")
    assert r.returncode == 0, r.stderr
    refs = _Refs()
    refs.feed(r.stdout)
    snap = json.loads(refs.scripts["sip-snapshot"])
    now = snap["time_us"]
    for p in snap["pools"]:
        if p["name"] == "slow":
            p["sla"] = {"targets": {"latency_p99_ms": 5}, "window_s": 10, "compliance": 0.625,
                        "last_window": {"p99_ms": 40.0, "availability": 1.0,
                                        "throughput_rps": 3.0, "ok": False},
                        "alert": {"level": "critical", "since_us": now - 5000000,
                                  "reason": "p99 40 ms over the 5 ms target"}}
    history = {"samples": [], "events": [
        {"event": "ALERT", "time_us": now - 5000000, "pool": "slow", "session": "",
         "level": "critical", "state": "firing", "reason": "p99 40 ms over the 5 ms target"}]}
    doc = r.stdout.replace(refs.scripts["sip-snapshot"],
                           json.dumps(snap).replace("<", "\\u003c"))
    doc = doc.replace('<script type="application/json" id="sip-history">null</script>',
                      '<script type="application/json" id="sip-history">%s</script>'
                      % json.dumps(history))
    page = tmp_path / "sla.html"
    page.write_text(doc)
    driver = browser(tmp_path)
    try:
        console = Console(driver)
        driver.get("file://" + str(page))
        wait_for("the pools", lambda: len(attr_rows(driver, "#pools tr[data-pool]")) == 2)
        assert driver.find_element("id", "alerts").is_displayed()
        alerts = attr_rows(driver, "#alert-list li")
        assert [a["data-alert"] for a in alerts] == ["slow"]
        assert "critical" in alerts[0]["text"] and "over the 5 ms target" in alerts[0]["text"]
        rows = {x["data-pool"]: x["text"] for x in attr_rows(driver, "#pools tr[data-pool]")}
        assert "62.5%" in rows["slow"] and "critical" in rows["slow"]
        assert "%" not in rows["fast"]
        ev = attr_rows(driver, '#events tr[data-event="ALERT"]')
        assert len(ev) == 1 and "critical firing" in ev[0]["text"]
        assert driver.find_element("id", "sla-chart-box").is_displayed()
        assert console.errors() == [], console.errors()
        driver.save_screenshot(str(tmp_path / "sla.png"))
    finally:
        driver.quit()


def test_sip_report_from_a_wildcard_address(start_sipd, tmp_path):
    """server.dashboard on 0.0.0.0: `sip report` over tcp:// reaches it at the
    endpoint's host."""
    srv = start_sipd([builtin("w")], server={"dashboard": "0.0.0.0:0"}, unix=False)
    assert srv.endpoint.startswith("tcp://127.0.0.1:")
    addr = K.printed_address(srv, "http")
    assert addr.startswith("http://0.0.0.0:") and addr.endswith("/dashboard"), addr
    out = tmp_path / "w.html"
    r = sip(srv.endpoint, "report", "--html", str(out))
    assert r.returncode == 0, r.stderr
    check_self_contained(out.read_text(), ["w"])


def test_profile_heatmap_in_browser(start_sipd, tmp_path, model_dir):
    """The Profile button runs sip profile on the chosen pool while it
    serves, and the page shows its operators and an operator x time heatmap
    (the model's Mul and Add), with no console error."""
    import threading
    import numpy as np
    from cann_sip import InferenceRequest
    srv = start_sipd([builtin("alpha"),
                      {"name": "m", "model_path": str(model_dir["addmul"]), "pool_size": 1}],
                     server={"http": "127.0.0.1:0"})
    stop = threading.Event()

    def traffic():
        with srv.client() as c:
            x = np.ones((2, 4), np.float32)
            while not stop.is_set():
                c.infer(InferenceRequest("m", {"lhs": x, "rhs": x}))

    t = threading.Thread(target=traffic)
    t.start()
    driver = None
    try:
        driver = browser(tmp_path)
        console = Console(driver)
        driver.get(K.http_base(srv) + "/dashboard")
        wait_for("the pools to profile", lambda: len(attr_rows(driver, "#profile-pool option")) == 2)
        from selenium.webdriver.support.ui import Select
        Select(driver.find_element("id", "profile-pool")).select_by_value("m")
        seconds = driver.find_element("id", "profile-seconds")
        seconds.clear()
        seconds.send_keys("0.5")
        driver.find_element("id", "profile-run").click()
        rows, _ = wait_for("the heatmap", lambda: attr_rows(driver, "#profile-heatmap tr[data-op]"),
                           20)
        assert sorted(r["data-op"] for r in rows) == ["Add", "Mul"], rows
        cells = attr_rows(driver, "#profile-heatmap td.cell")
        assert len(cells) == 2 * 24
        assert any("rgba(13, 63, 122, 1" in c["style"] for c in cells)  # the busiest cell
        assert {r["data-op"] for r in attr_rows(driver, "#profile-ops tr[data-op]")} == {"Add", "Mul"}
        assert driver.save_screenshot(str(tmp_path / "profile.png"))
        assert console.errors() == [], console.errors()
    finally:
        stop.set()
        t.join(10)
        if driver:
            driver.quit()
