#!/usr/bin/python3
"""Checks that no include points up the engine's layers (docs/architecture.md).

Takes the include graph from the compiler: every translation unit in the
build's compile_commands.json is run again with -MM (same flags), and each
header it pulls in from this repository is mapped to its layer by folder.
A file may include its own layer and the layers below it; front-ends
(transport, http, grpc) sit side by side and include none of each other;
include/sip/ (the public API) is open to all. Front-ends include none of
the engine's internals (backend, sched, session, pipeline), and
src/server/server_impl.h is private to src/server. The daemon and the tools may
include only include/sip/ and their own folder.

usage: check_layers.py BUILD_DIR   (exit 1 with one line per bad include)
"""
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lowest first. Layers on one rank are siblings and may not include each other.
ORDER = [
    ("core",),
    ("ops",),
    ("config",),
    ("backend",),
    ("sched",),
    ("session",),
    ("pipeline",),
    ("server",),
    ("transport", "http", "grpc"),
    ("compose",),
]
RANK = {name: i for i, names in enumerate(ORDER) for name in names}
# Front-ends reach the engine through the public calls only: of the layers
# below them they may include core, config and the server's introspection,
# never the engine's internals.
FRONTENDS = ("transport", "http", "grpc")
ENGINE_INTERNALS = ("backend", "sched", "session", "pipeline")
PRIVATE_HEADERS = ("src/server/server_impl.h",)
# Folders outside src/ with their own rules.
PUBLIC_ONLY = ("src/daemon", "tools")


def layer_of(path):
    """('src', name) for a file under src/NAME/, ('public', None) for
    include/sip, (top-level folder, None) otherwise; None when outside."""
    rel = os.path.relpath(os.path.realpath(path), ROOT)
    if rel.startswith(".."):
        return None
    parts = rel.split(os.sep)
    if parts[0] == "include":
        return ("public", None)
    if parts[0] == "src" and len(parts) > 2:
        return ("src", parts[1])
    if parts[0] == "third_party" or parts[0].startswith("build"):
        return None
    return (parts[0], None)


def deps_of(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = []
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a in ("-c",) or a.startswith("-fsanitize") or a == entry["file"]:
            continue
        out.append(a)
    cmd = [args[0], "-MM", "-MG"] + out + [entry["file"]]
    r = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit("check_layers: %s failed:\n%s" % (" ".join(cmd), r.stderr))
    text = r.stdout.replace("\\\n", " ")
    files = text.split(":", 1)[1].split()
    return [os.path.join(entry["directory"], f) if not os.path.isabs(f) else f for f in files[1:]]


def check(src, dep):
    """None when `src` may include `dep`, else why not."""
    s, d = layer_of(src), layer_of(dep)
    if d is None or s is None:
        return None
    rel_src = os.path.relpath(os.path.realpath(src), ROOT)
    if d[0] == "public":
        return None
    if any(rel_src.startswith(p + os.sep) for p in PUBLIC_ONLY):
        same = os.path.dirname(os.path.realpath(src)) == os.path.dirname(os.path.realpath(dep))
        return None if same else "only include/sip/ is open to it"
    if s[0] != "src":
        return None  # tests, clients: may use internals
    if d[0] != "src":
        return "src/ includes a file outside src/ and include/"
    if s[1] not in RANK:
        return "src/%s is not a known layer (add it to ORDER and docs/architecture.md)" % s[1]
    if d[1] not in RANK:
        return "src/%s is not a known layer" % d[1]
    if s[1] == d[1]:
        return None
    rel_dep = os.path.relpath(os.path.realpath(dep), ROOT)
    if rel_dep in PRIVATE_HEADERS:
        return "%s is private to src/%s" % (rel_dep, d[1])
    if s[1] in FRONTENDS and d[1] in ENGINE_INTERNALS:
        return "a front-end uses the public calls, not the engine's %s internals" % d[1]
    if RANK[d[1]] > RANK[s[1]]:
        return "%s is above %s" % (d[1], s[1])
    if RANK[d[1]] == RANK[s[1]]:
        return "%s and %s are sibling front-ends" % (d[1], s[1])
    return None


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    db = os.path.join(sys.argv[1], "compile_commands.json")
    with open(db) as f:
        entries = json.load(f)
    seen, bad, checked = set(), [], 0
    for e in entries:
        f = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if f in seen or layer_of(f) is None:
            continue
        seen.add(f)
        deps = deps_of(e)
        # -MM lists headers reached through other headers too; check each
        # header's own includes by attributing them to the header.
        for d in deps:
            why = check(f, d) if d in direct_includes(f) else None
            checked += 1
            if why:
                bad.append("%s includes %s: %s" % (os.path.relpath(f, ROOT),
                                                    os.path.relpath(os.path.realpath(d), ROOT), why))
        for h in deps:
            hr = os.path.realpath(h)
            if hr in seen or layer_of(hr) is None or not hr.endswith((".h", ".inc")):
                continue
            seen.add(hr)
            for d in deps:
                if d in direct_includes(hr):
                    why = check(hr, d)
                    if why:
                        bad.append("%s includes %s: %s" % (os.path.relpath(hr, ROOT),
                                                            os.path.relpath(os.path.realpath(d), ROOT), why))
    for b in sorted(set(bad)):
        print(b)
    print("check_layers: %d files, %d includes, %d pointing up or across"
          % (len(seen), checked, len(set(bad))))
    return 1 if bad else 0


_direct = {}


def direct_includes(path):
    """The headers `path` names itself (resolved against the -MM list by
    basename and relative path), so that a header included through another
    is attributed to the one that includes it."""
    if path not in _direct:
        names = set()
        with open(path, errors="replace") as f:
            for line in f:
                t = line.strip()
                if t.startswith("#") and "include" in t and '"' in t:
                    names.add(t.split('"')[1])
        _direct[path] = names
    names = _direct[path]

    class M:
        def __contains__(self, dep):
            dr = os.path.realpath(dep)
            return any(dr.endswith(os.sep + n) or os.path.basename(dr) == n for n in names)
    return M()


if __name__ == "__main__":
    sys.exit(main())
