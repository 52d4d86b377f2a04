"""The backend owns its formats: no file under src/ outside src/backend/
mentions onnx (model.onnx, the .onnx extension, the platform string, the
runtime's name), so every model format reaches the rest of the server
through the backend interface (probe, default file names, platform, option
table: include/sip/backend.h)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
WORD = re.compile(rb"onnx", re.IGNORECASE)


def offenders():
    found = []
    for path in sorted(SRC.rglob("*")):
        if not path.is_file() or path.is_relative_to(SRC / "backend"):
            continue
        for no, line in enumerate(path.read_bytes().splitlines(), 1):
            if WORD.search(line):
                found.append(f"{path.relative_to(ROOT)}:{no}: {line.decode(errors='replace').strip()}")
    return found


def test_no_onnx_outside_the_backend():
    found = offenders()
    assert not found, ("files outside src/backend/ mention onnx; go through the backend "
                       "(sip__backend_files, the catalogue's probe/formats/platform_of):\n"
                       + "\n".join(found))


def test_the_check_sees_the_backend():
    # The check is not vacuous: the backend itself does name its format.
    hits = [p for p in (SRC / "backend").rglob("*.c") if WORD.search(p.read_bytes())]
    assert hits, "src/backend/ should hold the onnxruntime backend"
