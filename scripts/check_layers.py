#!/usr/bin/python3
"""Checks the engine's layers (docs/architecture.md) and the file-size limit.

Takes the include graph from the compiler: every translation unit in the
build's compile_commands.json is run again with -MM (same flags), and each
header it pulls in from this repository is mapped to its layer by folder.
A file may include its own layer and the layers below it; front-ends
(transport, http, grpc) sit side by side and include none of each other;
include/sip/ (the public API) is open to all. Front-ends include none of
the engine's internals (backend, sched, session, pipeline), and
src/server/server_impl.h is private to src/server. A subfolder of a layer
(src/server/observe/, src/session/isolation/, ...) is in its parent's
layer. The daemon and the tools may include only include/sip/ and their
own folder.

The same rule at link level: the symbols each of the engine's objects
(CMakeFiles/sip_obj.dir, the objects named in compile_commands.json) defines
and references, read with nm. An object that references a symbol defined in
a higher layer, or in a sibling front-end, calls up or across even when no
header says so (a declaration copied by hand, a prototype in a shared header).

The shared libraries export the public API and nothing else: every symbol
`nm -D --defined-only` lists in libsip.so is a function declared in
include/sip/*.h, and each of those but the client's is there; libsipclient.so
exports include/sip/client.h's functions and those of the headers it
includes (error.h, tensor.h), nothing more. Everything else is built hidden
(-fvisibility=hidden; SIP_API in include/sip/export.h marks the public
declarations).

struct sip__pool is private to the files that implement the pool: only
those POOL_IMPL_USERS names include src/session/pool_impl.h (any file in
the repository's own folders is looked at, tests too); everything else
reads a pool through session/pool_view.h, session/observe/counters.h and the model
vtable.

And no source file in the repository's own folders (FOLDERS; generated
files live in the build tree, third-party code in third_party/) is longer
than MAX_LINES.

usage: check_layers.py BUILD_DIR   (exit 1 with one line per bad include,
                                    bad call, pool_impl.h user and long file)
"""
import glob
import json
import os
import re
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
# The pool's internals (struct sip__pool, its sessions) and the files that
# implement the pool, the only ones that may include that header. No header
# of src/ may be among them: whatever includes it would see the struct too.
POOL_IMPL = "src/session/pool_impl.h"
POOL_IMPL_USERS = (
    "src/session/admission.c",             # admission, deadlines, completion
    "src/session/autoscale.c",             # the autoscaler's sampler and step
    "src/session/availability.c",          # watchdog, faults, failover, drain
    "src/session/observe/counters.c",      # the typed counters (session/observe/counters.h)
    "src/session/observe/events.c",        # pool and session events
    "src/session/executor.c",              # the sessions' executor loop
    "src/session/isolation/isolation.c",   # isolation: process
    "src/session/isolation/isolation_exec.c",
    "src/session/pool.c",                  # life cycle: new, load, shutdown
    "src/session/pool_model.c",            # the pool behind the model vtable
    "src/session/pool_open.c",             # the pool's model: store, worker, wrapper
    "src/session/pool_view.c",             # the typed view (session/pool_view.h)
    "src/session/residency.c",             # on-demand pools: UNLOADED, eviction's view
    "src/session/observe/profile.c",       # operator profiling of a session
    "src/session/scale.c",                 # run-time pool_size and quotas
    "src/session/sequence.c",              # sequence batching
    "src/session/session.c",               # the session state machine
    "src/session/split.c",                 # client batches split into chunks
    # White-box tests of the pool (tests/unit/session).
    "tests/unit/session/pool_helpers.h",
    "tests/unit/session/test_session.c",
)
_POOL_IMPL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*["<](?:[\w./]*/)?pool_impl\.h[">]',
                                re.M)

# One file, one job: no source file longer than this.
MAX_LINES = 700
FOLDERS = ("src", "include", "tools", "clients", "tests", "bench", "scripts", "docs/gen")
SOURCE_EXT = (".c", ".h", ".cc", ".py", ".js", ".css", ".html")
# Not the project's own text: vendored code, build trees, caches, fuzz corpora.
SKIP_DIRS = ("third_party", "__pycache__", "node_modules", "corpus")


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


def call_check(src, dst, public=True):
    """None when an object built from `src` may reference a symbol defined
    in `dst`, else why not (the include rule at link level). `public`: the
    symbol is a function include/sip declares."""
    s, d = layer_of(src), layer_of(dst)
    if s is None or d is None or s[0] != "src" or d[0] != "src" or s[1] == d[1]:
        return None
    if s[1] not in RANK or d[1] not in RANK:
        return None  # the include check names the unknown folder
    if s[1] in FRONTENDS and d[1] in ENGINE_INTERNALS and not public:
        return "a front-end uses the public calls, not the engine's %s internals" % d[1]
    if RANK[d[1]] > RANK[s[1]]:
        return "%s is above %s" % (d[1], s[1])
    if RANK[d[1]] == RANK[s[1]]:
        return "%s and %s are sibling front-ends" % (d[1], s[1])
    return None


def object_of(entry):
    """The object file an entry of compile_commands.json writes (its -o)."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    for i, a in enumerate(args[:-1]):
        if a == "-o":
            return os.path.join(entry["directory"], args[i + 1])
    return None


def nm_symbols(obj):
    """(defined, undefined) global symbol names of one object file."""
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit("check_layers: nm %s failed:\n%s" % (obj, r.stderr))
    defined, undefined = set(), set()
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRVWGSC":  # upper case: global (local ones are static)
            defined.add(name)
    return defined, undefined


def link_violations(entries):
    """One line per symbol an engine object references from a layer it may
    not call: 'caller -> symbol (defining file): why'. Objects are those of
    sip_obj named in compile_commands.json (a stale object of a deleted
    source is never read)."""
    objs = {}
    for e in entries:
        o = object_of(e)
        if not o or os.sep + "sip_obj.dir" + os.sep not in o:
            continue
        src = os.path.realpath(os.path.join(e["directory"], e["file"]))
        if not os.path.exists(o):
            raise SystemExit("check_layers: %s is not built (build before the check)" % o)
        objs[src] = nm_symbols(o)
    public = set().union(*(public_functions(h) for h in
                            glob.glob(os.path.join(ROOT, "include", "sip", "*.h"))))
    where = {}
    for src, (defined, _) in objs.items():
        for name in defined:
            where[name] = src
    bad = []
    for src, (_, undefined) in objs.items():
        for name in sorted(undefined):
            dst = where.get(name)
            why = call_check(src, dst, name in public) if dst else None
            if why:
                bad.append("%s -> %s (%s): %s" % (os.path.relpath(src, ROOT), name,
                                                 os.path.relpath(dst, ROOT), why))
    return bad, len(objs)


_DECL = re.compile(r"^(?!typedef\b)(?:SIP_API\s+)?[A-Za-z_][\w \t*]*?[\s*]\(?(sip_\w+)\s*\(", re.M)


def public_functions(header):
    """The sip_* functions a public header declares (comments and
    preprocessor lines aside; typedefs of function pointers are not
    functions)."""
    with open(header) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"^[ \t]*#[^\n]*", "", text, flags=re.M)
    return set(_DECL.findall(text))


# The client library's public headers; every other include/sip header is the
# engine's (libsip).
CLIENT_HEADERS = ("client.h", "error.h", "tensor.h")


def exported(lib):
    """The names of the symbols a shared library defines in its dynamic
    symbol table."""
    r = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit("check_layers: nm -D %s failed:\n%s" % (lib, r.stderr))
    return {line.split()[-1].split("@")[0] for line in r.stdout.splitlines() if line.strip()}


def export_violations(build, root=ROOT):
    """One line per symbol a shared library exports that include/sip does
    not declare for it, and per public function it lacks."""
    inc = os.path.join(root, "include", "sip")
    decl = {os.path.basename(h): public_functions(h) for h in sorted(glob.glob(os.path.join(inc, "*.h")))}
    engine = set().union(*(v for k, v in decl.items() if k != "client.h"))
    client = set().union(*(decl.get(k, set()) for k in CLIENT_HEADERS))
    bad = []
    for lib, allowed, required in (("libsip.so", engine, engine),
                                   ("libsipclient.so", client, decl.get("client.h", set()))):
        path = os.path.join(build, lib)
        if not os.path.exists(path):
            raise SystemExit("check_layers: %s is not built (build before the check)" % path)
        names = exported(path)
        for n in sorted(names - allowed):
            bad.append("%s exports %s, which include/sip does not declare for it" % (lib, n))
        for n in sorted(required - names):
            bad.append("%s does not export %s, declared in include/sip" % (lib, n))
    return bad


def pool_impl_violations(root=ROOT, users=POOL_IMPL_USERS):
    """'path includes src/session/pool_impl.h: ...' for each source file
    in FOLDERS that includes the pool's private header and is not one of
    `users`."""
    out = []
    for top in FOLDERS:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
            for name in sorted(files):
                if not name.endswith((".c", ".h", ".cc", ".inc")):
                    continue
                p = os.path.join(d, name)
                rel = os.path.relpath(p, root)
                if rel == POOL_IMPL or rel in users:
                    continue
                with open(p, errors="replace") as f:
                    if _POOL_IMPL_INCLUDE.search(f.read()):
                        out.append("%s includes %s: it is private to the pool's own files "
                                   "(POOL_IMPL_USERS in scripts/check_layers.py); use "
                                   "session/pool_view.h, session/observe/counters.h or the model "
                                   "vtable" % (rel, POOL_IMPL))
    return out


def long_files(root=ROOT):
    """'path: N lines (limit MAX_LINES)' for each source file over the limit."""
    out = []
    for top in FOLDERS:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("build"))
            for name in sorted(files):
                if not name.endswith(SOURCE_EXT):
                    continue
                p = os.path.join(d, name)
                with open(p, "rb") as f:
                    n = sum(1 for _ in f)
                if n > MAX_LINES:
                    out.append("%s: %d lines (limit %d)" % (os.path.relpath(p, root), n, MAX_LINES))
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__[__doc__.index("usage:"):].strip())
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
    calls, nobj = link_violations(entries)
    for c in sorted(set(calls)):
        print(c)
    print("check_layers: %d objects, %d calls pointing up or across" % (nobj, len(set(calls))))
    exports = export_violations(sys.argv[1])
    for x in exports[:50]:
        print(x)
    if len(exports) > 50:
        print("... and %d more" % (len(exports) - 50))
    print("check_layers: %d symbols exported against include/sip" % len(exports))
    pool_impl = pool_impl_violations()
    for p in pool_impl:
        print(p)
    print("check_layers: %d files including %s outside the pool's own" % (len(pool_impl), POOL_IMPL))
    longs = long_files()
    for l in longs:
        print(l)
    print("check_layers: %d files over %d lines" % (len(longs), MAX_LINES))
    return 1 if bad or calls or exports or pool_impl or longs else 0


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
