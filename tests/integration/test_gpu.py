"""ONNX Runtime execution providers and device memory.

On every machine: a config asking for a provider this ONNX Runtime build
lacks is refused at config check, naming the providers the build has
(OrtGetAvailableProviders), and a CPU pool copies nothing between host and
device (sip_memory_copies_total stays 0). On a machine with an NVIDIA GPU
and the GPU build of ONNX Runtime (SIP_ORT_GPU=1 scripts/deps.sh), a pool
with execution_providers [{name: cuda, device_id: 0}, cpu] serves through
device memory: its inputs are copied to the device and its outputs back,
each copy counted; without them those tests skip, saying which is missing."""

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kserve as K
import models
from cann_sip import InferenceRequest

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FLAVOUR = ROOT / "third_party" / "onnxruntime" / ".flavour"


def ort_gpu_build():
    return FLAVOUR.is_file() and FLAVOUR.read_text().strip() == "gpu"


def gpu_present():
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


def gpu_skip_reason():
    if not gpu_present():
        return "no NVIDIA GPU on this machine (no /dev/nvidia0, no nvidia-smi)"
    if not ort_gpu_build():
        return "ONNX Runtime is the CPU build; SIP_ORT_GPU=1 scripts/deps.sh fetches the GPU build"
    return None


needs_gpu = pytest.mark.skipif(gpu_skip_reason() is not None, reason=gpu_skip_reason() or "")


def copies(base):
    out = {}
    for fam in text_string_to_metric_families(K.get(base + "/metrics").body.decode()):
        for s in fam.samples:
            if s.name in ("sip_memory_copies_total", "sip_memory_copy_bytes_total"):
                out[(s.name, s.labels["pool"], s.labels["direction"])] = s.value
    return out


def check_config(sipd_bin, tmp_path, model, providers):
    cfg = tmp_path / "gpu.yaml"
    items = ", ".join(providers)
    cfg.write_text("session_pools:\n"
                   f"  - name: m\n    model_path: {model}\n"
                   f"    backend_options:\n      execution_providers: [{items}]\n")
    return subprocess.run([str(sipd_bin), "--check-config", str(cfg)],
                          capture_output=True, text=True, timeout=60)


def test_missing_provider_refused_with_the_list(sipd_bin, tmp_path, model_dir):
    r = check_config(sipd_bin, tmp_path, model_dir["addmul"],
                     ["{name: cuda, device_id: 0}", "cpu"])
    if ort_gpu_build():
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode != 0
    assert "backend_options: onnxruntime: execution provider 'cuda' is not in this build of " \
           "ONNX Runtime; available: " in r.stderr, r.stderr
    assert "cpu (CPUExecutionProvider)" in r.stderr
    assert "SIP_ORT_GPU=1 scripts/deps.sh" in r.stderr


def test_unknown_provider_refused(sipd_bin, tmp_path, model_dir):
    r = check_config(sipd_bin, tmp_path, model_dir["addmul"], ["{name: warp_drive}"])
    assert r.returncode != 0
    assert "execution provider 'warp_drive' is not in this build" in r.stderr, r.stderr


def test_cpu_provider_serves_and_copies_nothing(start_sipd, model_dir):
    srv = start_sipd([{"name": "cpu", "model_path": str(model_dir["addmul"]),
                       "backend_options": {"execution_providers": ["cpu"]}}],
                     server={"http": "127.0.0.1:0"})
    base = K.http_base(srv)
    c = srv.client()
    lhs = np.arange(8, dtype=np.float32).reshape(2, 4)
    rhs = np.full((2, 4), 3, np.float32)
    for _ in range(3):
        y = c.infer(InferenceRequest("cpu", {"lhs": lhs, "rhs": rhs})).outputs["y"]
        np.testing.assert_allclose(y, models.addmul_ref(lhs, rhs))
    m = copies(base)
    for name in ("sip_memory_copies_total", "sip_memory_copy_bytes_total"):
        for d in ("host_to_device", "device_to_host"):
            assert m[(name, "cpu", d)] == 0


@needs_gpu
def test_cuda_pool_copies_through_the_device(start_sipd, model_dir):
    srv = start_sipd([{"name": "gpu", "model_path": str(model_dir["addmul"]),
                       "backend_options": {"execution_providers": [
                           {"name": "cuda", "device_id": 0}, "cpu"]}}],
                     server={"http": "127.0.0.1:0"})
    base = K.http_base(srv)
    c = srv.client()
    rng = np.random.default_rng(7)
    n = 4
    for k in range(n):
        lhs = rng.standard_normal((k + 1, 4)).astype(np.float32)
        rhs = rng.standard_normal((k + 1, 4)).astype(np.float32)
        y = c.infer(InferenceRequest("gpu", {"lhs": lhs, "rhs": rhs})).outputs["y"]
        np.testing.assert_allclose(y, models.addmul_ref(lhs, rhs), rtol=1e-5, atol=1e-6)
    m = copies(base)
    rows = sum(k + 1 for k in range(n))
    # Two inputs in, one output out, per request; 16 bytes a row each.
    assert m[("sip_memory_copies_total", "gpu", "host_to_device")] == 2 * n
    assert m[("sip_memory_copies_total", "gpu", "device_to_host")] == n
    assert m[("sip_memory_copy_bytes_total", "gpu", "host_to_device")] == 2 * 16 * rows
    assert m[("sip_memory_copy_bytes_total", "gpu", "device_to_host")] == 16 * rows
