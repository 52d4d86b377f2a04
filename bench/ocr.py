#!/usr/bin/python3
"""OCR pipeline benchmark (issue 5): examples/ocr.yaml's `ocr` pipeline
(decode -> resize -> normalise -> PP-OCRv4 det -> DB -> crops -> angle cls ->
rotate180 -> rec -> CTC) on a rendered page of four text lines, sent as PNG
bytes with `sip bench -i image:uint8:N=@page.png`.

Two placements of the same pipeline, each measured in this run:

  shared      examples/ocr.yaml as shipped: every model runs on the one global
              intra-op thread pool, so each stage alone already uses every
              core and stages of different requests compete for them.
  partitioned each model stage gets CPUs of its own: det and cls on the
              first half (cpu_affinity, with own_intra_op_threads pinned
              there), one rec session on the other half, the way stages are
              placed on separate devices: while det works on one request, rec
              works on another.

For each placement it prints:
  - each model stage alone at concurrency 8, fed the very tensor it receives
    inside the pipeline (captured from one pipeline run's stage_outputs),
    in that placement's configuration;
  - the pipeline at concurrency 8 and one request at a time;
  - pipeline / slowest stage (target >= 0.8 x) and pipelined / one at a time;
  - for `shared`, pipeline / the machine's bound: with every stage on the
    same cores the pipeline cannot run faster than 1 / (sum of each stage's
    time per request when alone at full load); with fewer cores than stages
    this bound, not the slowest stage, is the ceiling, and the ratio tells
    overhead from saturation.
"""
import io
import os

import numpy as np

from common import ROOT, SessionClient, Sipd, sip_bench

try:
    from PIL import Image, ImageDraw, ImageFont
except ImportError:  # pragma: no cover
    raise SystemExit("bench/ocr.py needs python3-pil (scripts/deps.sh installs it)")

from cann_sip import InferenceRequest  # noqa: E402  (path set by common)

FONTS = ["/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
         "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc"]
LINES = [("Hello sip 2026", 0, False), ("你好世界", 1, False), ("Pipelines exit early", 0, True),
         ("深度学习推理服务", 1, False)]


def page():
    img = Image.new("RGB", (760, 460), "white")
    y = 30
    for text, fi, flip in LINES:
        f = ImageFont.truetype(FONTS[fi], 40)
        l, t, r, b = f.getbbox(text)
        tile = Image.new("RGB", (r - l + 24, b - t + 24), "white")
        ImageDraw.Draw(tile).text((12 - l, 12 - t), text, font=f, fill="black")
        img.paste(tile.rotate(180) if flip else tile, (40, y))
        y += tile.size[1] + 40
    b = io.BytesIO()
    img.save(b, "PNG")
    return b.getvalue()


def partitioned(text):
    """det and cls on the first half of the CPUs, rec (one session) on the
    other half, each with intra-op threads of its own pinned there."""
    cpus = sorted(os.sched_getaffinity(0))
    half = max(1, len(cpus) // 2)
    first, second = cpus[:half], cpus[half:] or cpus[:half]

    def place(pool_file, size, where, new_size=None):
        old = "%s\n    pool_size: %d\n" % (pool_file, size)
        assert old in text, "examples/ocr.yaml's pools changed; update bench/ocr.py"
        return text.replace(old, "%s\n    pool_size: %d\n    cpu_affinity: %s\n"
                            "    backend_options: {own_intra_op_threads: %d}\n"
                            % (pool_file, new_size or size, where, len(where)))
    text = place("ch_PP-OCRv4_det_infer.onnx", 1, first)
    text = place("ch_ppocr_mobile_v2.0_cls_infer.onnx", 1, first)
    return place("ch_PP-OCRv4_rec_infer.onnx", 2, second, 1)


def measure(text, png):
    with Sipd(None, config=text) as s:
        f = os.path.join(s.dir, "page.png")
        with open(f, "wb") as fh:
            fh.write(png)
        with SessionClient(s.endpoint, timeout_s=120) as c:
            r = c.infer(InferenceRequest("ocr", {"image": np.frombuffer(png, np.uint8)}))
        got = [t.decode() for t in r.outputs["text"]]
        want = [t for t, _, _ in LINES]
        if got != want:
            raise SystemExit("recognised %r; expected %r" % (got, want))
        # The tensors each model stage receives inside the pipeline.
        feeds = {"ocr_det": r.stage_outputs["norm"]["output"],
                 "ocr_cls": r.stage_outputs["cls_crop"]["output"],
                 "ocr_rec": r.stage_outputs["rotate"]["output"]}
        alone = {}
        for pool, x in feeds.items():
            path = os.path.join(s.dir, pool + ".bin")
            np.ascontiguousarray(x, np.float32).tofile(path)
            spec = "x:float32:%s=@%s" % (",".join(map(str, x.shape)), path)
            alone[pool] = sip_bench(s.endpoint, pool, [spec], "--concurrency", "8")
        img = ["image:uint8:%d=@%s" % (len(png), f)]
        piped = sip_bench(s.endpoint, "ocr", img, "--concurrency", "8", "-o", "text")
        serial = sip_bench(s.endpoint, "ocr", img, "--concurrency", "1", "-o", "text")
    return feeds, alone, piped, serial


def report(name, feeds, alone, piped, serial):
    print("== %s ==" % name)
    for pool, res in alone.items():
        print("%-8s alone (conc 8)      : %7.1f req/s  p50 %7.1f ms  (input %s)"
              % (pool, res["throughput_rps"], res["latency_ms"]["p50"],
                 "x".join(map(str, feeds[pool].shape))))
    slowest = min(alone, key=lambda k: alone[k]["throughput_rps"])
    rs = alone[slowest]["throughput_rps"]
    print("ocr pipeline (conc 8)       : %7.1f req/s  p50 %7.1f ms"
          % (piped["throughput_rps"], piped["latency_ms"]["p50"]))
    print("ocr pipeline one at a time  : %7.1f req/s  p50 %7.1f ms"
          % (serial["throughput_rps"], serial["latency_ms"]["p50"]))
    r1 = piped["throughput_rps"] / rs
    print("pipeline / slowest stage (%s) = %.2f   target >= 0.8: %s"
          % (slowest, r1, "PASS" if r1 >= 0.8 else "FAIL"))
    print("pipelined / one at a time = %.2f" % (piped["throughput_rps"] / serial["throughput_rps"]))
    return r1


def main():
    text = open(os.path.join(ROOT, "examples", "ocr.yaml"), encoding="utf-8").read()
    text = text.replace("../third_party/", os.path.join(ROOT, "third_party") + "/")
    text = text.replace("log_level: info", "log_level: warn")
    png = page()
    shared = measure(text, png)
    split = measure(partitioned(text), png)
    print("recognised:", [t for t, _, _ in LINES])
    report("shared: every model on the global thread pool (examples/ocr.yaml)", *shared)
    alone, piped = shared[1], shared[2]
    bound = 1.0 / sum(1.0 / a["throughput_rps"] for a in alone.values())
    print("pipeline / shared-CPU bound (%.1f req/s, %d cores) = %.2f"
          % (bound, os.cpu_count() or 0, piped["throughput_rps"] / bound))
    report("partitioned: det+cls on CPUs of their own, rec on the others", *split)


if __name__ == "__main__":
    main()
