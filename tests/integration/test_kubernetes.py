"""deploy/: the Kubernetes kustomizations (base, CPU and GPU overlays), the
prometheus-adapter rule, KServe's ServingRuntime and InferenceService and
ModelMesh's ServingRuntime.

Each kustomization is rendered by a real kustomize (kubectl kustomize, from
Debian's kubernetes-client, which scripts/deps.sh unpacks; a newer kubectl
on the PATH must render the same objects) and every object is validated
against its API schema by deploy/kubernetes/tools/validate.js (Kubernetes'
OpenAPI schemas from npm kubernetes-models, strict about unknown fields;
KServe's CRD schemas; prometheus-adapter's configuration). Then what the
manifests say of sipd is checked against a real sipd: each ConfigMap's
sip.yaml passes `sipd --check-config` and serves, the probes' paths answer 200
on the ports the manifests name (with a pod IP as Host, as the kubelet sends),
/metrics has the series the adapter turns into the HPA's metric, and the grace
period covers the preStop pause and the drain."""

import json
import os
import re
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import onnx
import pytest
import yaml

import harness
import models

REPO = harness.REPO
DEPLOY = REPO / "deploy"
VALIDATE = DEPLOY / "kubernetes" / "tools" / "validate.js"
KUBECTL = REPO / "third_party" / "kubernetes-client" / "usr" / "bin" / "kubectl"
NODE_MODULES = REPO / "third_party" / "k8s-validate" / "node_modules"

KUSTOMIZATIONS = ["kubernetes/base", "kubernetes/overlays/cpu", "kubernetes/overlays/gpu",
                  "kubernetes/prometheus-adapter", "kserve", "modelmesh"]
# The kustomizations that run sipd, and where (kind of the object holding the pod).
SERVING = ["kubernetes/base", "kubernetes/overlays/cpu", "kubernetes/overlays/gpu",
           "kserve", "modelmesh"]
POD_IP_HOST = "10.244.1.17:8000"  # the Host header of a kubelet probe or a Prometheus scrape
DRAIN_MARGIN_S = 3  # sipd's last second for answers after the drain, and slack


def _tools():
    missing = [str(p) for p in (KUBECTL, NODE_MODULES / "kubernetes-models") if not p.exists()]
    if missing or not shutil.which("node"):
        pytest.fail("missing %s: run scripts/deps.sh" % (", ".join(missing) or "node"))


_rendered = {}


def render(kust, kubectl=None):
    """The objects kustomize renders from deploy/<kust>, as text."""
    key = (kust, str(kubectl or KUBECTL))
    if key not in _rendered:
        _tools()
        r = subprocess.run([str(kubectl or KUBECTL), "kustomize", str(DEPLOY / kust)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, "kubectl kustomize %s: %s" % (kust, r.stderr)
        _rendered[key] = r.stdout
    return _rendered[key]


def objects(kust):
    return [d for d in yaml.safe_load_all(render(kust)) if d]


def one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, "expected one %s%s, got %d" % (kind, " " + name if name else "", len(found))
    return found[0]


def validate(text):
    r = subprocess.run(["node", str(VALIDATE), "--node-modules", str(NODE_MODULES), "-"],
                       input=text, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def pod_of(kust):
    """(pod spec, its sipd container, the sip.yaml it runs) of a kustomization."""
    objs = objects(kust)
    if kust.startswith("kubernetes/"):
        spec = one(objs, "Deployment", "sip")["spec"]["template"]["spec"]
        c = [c for c in spec["containers"] if c["name"] == "sipd"][0]
    else:
        spec = one(objs, "ServingRuntime")["spec"]
        c = spec["containers"][0]
    args = c["args"]
    conf = Path(args[args.index("--config") + 1])
    mount = [m for m in c["volumeMounts"] if conf.parent == Path(m["mountPath"])]
    assert mount, "the config %s is on no volume mount of %s" % (conf, c["name"])
    vol = [v for v in spec["volumes"] if v["name"] == mount[0]["name"]][0]
    cm = one(objs, "ConfigMap", vol["configMap"]["name"])
    return spec, c, yaml.safe_load(cm["data"][conf.name])


def port_number(container, port):
    if isinstance(port, int):
        return port
    named = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert named, "port %r is not a port of container %s" % (port, container["name"])
    return named[0]


def listen_port(addr):
    return int(addr.rsplit(":", 1)[1])


# ---------------------------------------------------------------------------
# rendering and schemas

def test_every_kustomization_is_checked():
    found = sorted(str(p.parent.relative_to(DEPLOY)) for p in DEPLOY.rglob("kustomization.yaml"))
    assert found == sorted(KUSTOMIZATIONS)


@pytest.mark.parametrize("kust", KUSTOMIZATIONS)
def test_renders_and_validates(kust):
    text = render(kust)
    rc, out = validate(text)
    n = len([d for d in yaml.safe_load_all(text) if d])
    assert rc == 0, out
    assert "%d objects, 0 invalid" % n in out, out
    assert out.count("\nok ") + out.startswith("ok ") == n, out


def _normal(text):
    """Rendered objects with generated ConfigMap suffixes (whose hash
    differs between kustomize versions) and empty metadata maps (kustomize 2
    writes an empty annotations: {} on a replaced ConfigMap) taken off, sorted."""
    text = re.sub(r"\b(sip-config)-[a-z0-9]{10}\b", r"\1", text)
    docs = [d for d in yaml.safe_load_all(text) if d]
    for d in docs:
        for k in ("annotations", "labels"):
            if d["metadata"].get(k) == {}:
                del d["metadata"][k]
    return sorted(json.dumps(d, sort_keys=True) for d in docs)


@pytest.mark.parametrize("kust", KUSTOMIZATIONS)
def test_a_newer_kustomize_renders_the_same(kust):
    """The kustomizations use the form every kustomize reads; the machine's
    own kubectl (a kustomize 4 or 5), where there is one, renders the
    same objects as Debian's."""
    other = shutil.which("kubectl")
    if other and Path(other).resolve() != KUBECTL.resolve():
        assert _normal(render(kust, other)) == _normal(render(kust))
    else:
        # Only Debian's kubectl here: its rendering is checked above.
        assert _normal(render(kust))


def _mutate(kust, kind, fn):
    objs = objects(kust)
    fn([o for o in objs if o["kind"] == kind][0])
    return yaml.safe_dump_all(objs)


def _sipd(o):
    return o["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("kust,kind,change,expect", [
    ("kubernetes/overlays/cpu", "Deployment",
     lambda o: _sipd(o)["ports"][0].update(containerPort="8000"),
     "/spec/template/spec/containers/0/ports/0/containerPort: must be integer"),
    ("kubernetes/overlays/cpu", "Deployment",
     lambda o: _sipd(o).update(readinessProbes=_sipd(o).pop("readinessProbe")),
     'containers/0/readinessProbes: unknown field "readinessProbes"'),
    ("kubernetes/overlays/gpu", "Deployment", lambda o: _sipd(o).pop("name"),
     'containers/0: must have the required field "name"'),
    ("kubernetes/base", "HorizontalPodAutoscaler",
     lambda o: o["spec"]["metrics"][0]["pods"]["target"].pop("type"),
     'target: must have the required field "type"'),
    ("kubernetes/base", "PodDisruptionBudget", lambda o: o["spec"].update(maxUnavailabe=1),
     'unknown field "maxUnavailabe"'),
    ("kubernetes/base", "Service", lambda o: o["spec"]["ports"][0].update(protocol="HTTP"),
     "/spec/ports/0/protocol: must be one of"),
    ("kserve", "ServingRuntime",
     lambda o: o["spec"]["supportedModelFormats"][0].update(priority=0),
     "/spec/supportedModelFormats/0/priority: must be >= 1"),
    ("kserve", "ServingRuntime", lambda o: o["spec"].update(protocolVersion=["v2"]),
     'unknown field "protocolVersion"'),
    ("kserve", "InferenceService",
     lambda o: o["spec"]["predictor"]["model"].update(storageUri=["pvc://x"]),
     "/spec/predictor/model/storageUri: must be string"),
    ("kserve", "InferenceService", lambda o: o["spec"]["predictor"]["model"].pop("modelFormat"),
     "modelFormat"),
    ("modelmesh", "ServingRuntime", lambda o: o["spec"].update(multiModel="true"),
     "/spec/multiModel: must be boolean"),
    ("kubernetes/prometheus-adapter", "ConfigMap",
     lambda o: o["data"].update({"config.yaml": o["data"]["config.yaml"].replace("metricsQuery", "metricQuery")}),
     'unknown field "metricQuery"'),
])
def test_the_validator_rejects(kust, kind, change, expect):
    rc, out = validate(_mutate(kust, kind, change))
    assert rc == 1, out
    assert expect in out, out


def test_a_kind_without_schema_is_an_error():
    rc, out = validate("apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\n"
                       "metadata: {name: sip}\nspec: {}\n")
    assert rc == 1 and "no schema for monitoring.coreos.com/v1 ServiceMonitor" in out, out


# ---------------------------------------------------------------------------
# what the manifests say of sipd

@pytest.mark.parametrize("kust", ["kubernetes/base", "kubernetes/overlays/cpu", "kubernetes/overlays/gpu"])
def test_deployment_shape(kust):
    objs = objects(kust)
    dep = one(objs, "Deployment", "sip")
    spec = dep["spec"]["template"]["spec"]
    pod, c, conf = pod_of(kust)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    # Non-root (the image's user), read-only root filesystem, no privileges.
    uid = int(re.search(r"--uid (\d+)", (REPO / "Containerfile").read_text()).group(1))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == uid
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    # What sipd writes is on a writable volume: the state directory and
    # the unix sockets (the root filesystem is read-only).
    writable = [Path(m["mountPath"]) for m in c["volumeMounts"] if not m.get("readOnly")]
    paths = [Path(conf["server"]["state_dir"])]
    paths += [Path(e[len("unix://"):]).parent for e in conf["server"].get("endpoints", [])
              if e.startswith("unix://")]
    for p in paths:
        assert any(p == w or w in p.parents for w in writable), "%s is on no writable volume" % p
    assert Path(conf["server"]["model_repository"]) in [Path(m["mountPath"]) for m in c["volumeMounts"]]
    # Ports: the container's http/grpc are sipd's listening ports.
    assert port_number(c, "http") == listen_port(conf["server"]["http"])
    assert port_number(c, "grpc") == listen_port(conf["server"]["grpc"])
    # Service: http, grpc and metrics, onto the container's ports, selecting the pods.
    svc = one(objs, "Service", "sip")
    by_name = {p["name"]: p for p in svc["spec"]["ports"]}
    assert set(by_name) == {"http", "grpc", "metrics"}
    assert port_number(c, by_name["http"]["targetPort"]) == listen_port(conf["server"]["http"])
    assert port_number(c, by_name["grpc"]["targetPort"]) == listen_port(conf["server"]["grpc"])
    assert port_number(c, by_name["metrics"]["targetPort"]) == listen_port(conf["server"]["http"])
    for o in (svc["spec"]["selector"], one(objs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
              dep["spec"]["selector"]["matchLabels"]):
        assert o.items() <= labels.items()
    # Prometheus scrape annotations name sipd's HTTP port and /metrics.
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == listen_port(conf["server"]["http"])
    assert ann["prometheus.io/path"] == "/metrics"
    # GPU: the overlay asks for nvidia.com/gpu, the others do not.
    gpu = c["resources"].get("limits", {}).get("nvidia.com/gpu")
    assert (gpu == "1") == (kust.endswith("gpu")), c["resources"]


@pytest.mark.parametrize("kust", ["kubernetes/base", "kubernetes/overlays/cpu", "kubernetes/overlays/gpu"])
def test_grace_period_covers_the_drain(kust):
    spec, c, conf = pod_of(kust)
    cmd = c["lifecycle"]["preStop"]["exec"]["command"]
    assert cmd[0] == "sleep"
    pre_stop = float(cmd[1])
    drain = conf["server"].get("drain_timeout_ms", 30000) / 1000.0
    assert spec["terminationGracePeriodSeconds"] >= pre_stop + drain + DRAIN_MARGIN_S, \
        (spec["terminationGracePeriodSeconds"], pre_stop, drain)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"].startswith("/v2/health/"), probe


def test_hpa_reads_the_metric_the_adapter_serves():
    objs = objects("kubernetes/base")
    hpa = one(objs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sip"}
    metric = hpa["spec"]["metrics"][0]
    assert metric["type"] == "Pods"
    adapter = yaml.safe_load(one(objects("kubernetes/prometheus-adapter"), "ConfigMap")["data"]["config.yaml"])
    served = {}
    for rule in adapter["rules"]:
        series = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["seriesQuery"]).group(0)
        m = re.match(rule["name"]["matches"], series)
        assert m, (series, rule["name"])
        served[m.expand(rule["name"]["as"].replace("$", "\\"))] = series
        assert set(rule["resources"]["overrides"]) >= {"namespace", "pod"}
    assert metric["pods"]["metric"]["name"] in served
    assert served[metric["pods"]["metric"]["name"]] == "sip_pending_requests"
    gpu = one(objects("kubernetes/overlays/gpu"), "HorizontalPodAutoscaler")
    assert gpu["spec"]["metrics"] == hpa["spec"]["metrics"]


def test_kserve_runtime_and_inference_service():
    objs = objects("kserve")
    sr = one(objs, "ServingRuntime")
    isvc = one(objs, "InferenceService")
    spec, c, conf = pod_of("kserve")
    assert "onnx" in [f["name"] for f in sr["spec"]["supportedModelFormats"]]
    assert {"v2", "grpc-v2"} <= set(sr["spec"]["protocolVersions"])
    model = isvc["spec"]["predictor"]["model"]
    assert model["runtime"] == sr["metadata"]["name"]
    assert model["modelFormat"]["name"] == "onnx" and model["protocolVersion"] in sr["spec"]["protocolVersions"]
    assert conf["server"]["model_repository"] == "/mnt/models"  # KServe's model mount
    assert c["ports"][0]["containerPort"] == listen_port(conf["server"]["http"])
    assert c["readinessProbe"]["httpGet"]["port"] == listen_port(conf["server"]["http"])
    assert int(sr["spec"]["annotations"]["prometheus.kserve.io/port"]) == listen_port(conf["server"]["http"])
    assert c["securityContext"]["runAsNonRoot"] is True


def test_modelmesh_runtime():
    sr = one(objects("modelmesh"), "ServingRuntime")
    spec, c, conf = pod_of("modelmesh")
    assert sr["spec"]["multiModel"] is True
    assert "builtInAdapter" not in sr["spec"]  # sip is a native ModelMesh runtime
    grpc = listen_port(conf["server"]["grpc"])
    assert sr["spec"]["grpcEndpoint"] == "port:%d" % grpc
    assert sr["spec"]["grpcDataEndpoint"] == "port:%d" % grpc
    assert conf["server"]["model_control"] == "explicit"
    assert "onnx" in [f["name"] for f in sr["spec"]["supportedModelFormats"]]


# ---------------------------------------------------------------------------
# against a real sipd

def _local(conf, tmp_path):
    """sip.yaml with the pod's paths moved under tmp_path (a model repository
    with one model) and the ports on loopback: the rest as the manifest has it."""
    repo = tmp_path / "models"
    (repo / "addmul" / "1").mkdir(parents=True)
    onnx.save(models.addmul(), str(repo / "addmul" / "1" / "model.onnx"))
    s = dict(conf["server"])
    s["model_repository"] = str(repo)
    if "state_dir" in s:
        (tmp_path / "state").mkdir()
        s["state_dir"] = str(tmp_path / "state")
    short = harness.short_tmpdir()
    s["endpoints"] = ["unix://%s/sipd.sock" % short]
    ports = {"http": harness.free_port(), "grpc": harness.free_port()}
    s["http"] = "127.0.0.1:%d" % ports["http"]
    s["grpc"] = "127.0.0.1:%d" % ports["grpc"]
    out = dict(conf, server=s)
    path = tmp_path / "sip.yaml"
    path.write_text(yaml.safe_dump(out))
    return path, ports, short


def _get(port, path, host=POD_IP_HOST):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers={"Host": host})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


@pytest.mark.parametrize("kust", SERVING)
def test_the_config_serves_what_the_manifests_probe(kust, tmp_path):
    sipd = harness.require_sipd()
    spec, c, conf = pod_of(kust)
    path, ports, short = _local(conf, tmp_path)
    r = subprocess.run([str(sipd), "--check-config", str(path)], capture_output=True, text=True,
                       env=harness.sipd_env(), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # container port -> the local port sipd listens on for it
    local = {listen_port(conf["server"]["http"]): ports["http"],
             listen_port(conf["server"]["grpc"]): ports["grpc"]}
    log = open(tmp_path / "sipd.log", "w+")
    proc = harness.track(subprocess.Popen([str(sipd), "--config", str(path)], stdout=log,
                                          stderr=subprocess.STDOUT, env=harness.sipd_env()),
                         "sipd for %s" % kust)
    try:
        probes = [c[p]["httpGet"] for p in ("startupProbe", "readinessProbe", "livenessProbe") if p in c]
        if kust == "modelmesh":
            # ModelMesh asks the runtime API, not HTTP, whether the runtime is
            # ready; the health paths answer all the same.
            assert not probes
            probes = [{"path": "/v2/health/ready", "port": listen_port(conf["server"]["http"])}]
        for probe in probes:
            port = local[port_number(c, probe["port"])]
            harness.wait_until(lambda: _get(port, probe["path"])[0] == 200,
                               what=lambda: "%s on port %s: %r\n%s" % (
                                   probe["path"], probe["port"], _get(port, probe["path"]),
                                   (tmp_path / "sipd.log").read_text()[-2000:]))
        status, metrics = _get(ports["http"], "/metrics")
        assert status == 200
        # The HPA's series, once the model is loaded (under ModelMesh: loaded
        # on request only).
        if conf["server"].get("model_control") != "explicit":
            assert re.search(r'^sip_pending_requests\{pool="addmul",version="1"\} 0$', metrics, re.M), \
                metrics[:2000]
        else:
            assert "# TYPE sip_pending_requests gauge" in metrics
        proc.send_signal(signal.SIGTERM)
        drain = conf["server"].get("drain_timeout_ms", 30000) / 1000.0
        assert proc.wait(timeout=drain + DRAIN_MARGIN_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
        shutil.rmtree(short, ignore_errors=True)
