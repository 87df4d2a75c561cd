#!/usr/bin/python3
"""The house rules of the sources, checked (TAP): which folder may use which.

    gateway/core/      the loop, the HTTP/WebSocket server, request helpers,
                       configuration: knows no kernel and no family
    gateway/kernels/   every kernel's life and the services families share:
                       knows core/, never a family
    gateway/<family>/  jupyter, e2b, mcp, terminals, ports, ops: know core/,
                       kernels/ and protocol/, never another family
    gateway/routes.c   the one route table; with gateway/main.c the only
                       files that know the families
    protocol/, kernel-host/  never the gateway

Two readings of each rule: the #include lines of every source, and the
undefined symbols of every object file (nm), each of which must be defined
by an object the rule allows (or by no object of ours: a library's). Also:
no C file over 900 lines.

    tests/unit/layers.py [SRCDIR [BUILDDIR]]
(make check gives them as GLOVEBOX_SRCDIR and GLOVEBOX_BUILDDIR)
"""
import os
import re
import subprocess
import sys

FAMILIES = ("jupyter", "e2b", "mcp", "terminals", "ports", "ops")
MAX_LINES = 900
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer(path):
    """The layer of a source or header path relative to the tree's root."""
    parts = path.split("/")
    if parts[0] in ("protocol", "kernel-host"):
        return parts[0]
    if parts[0] != "gateway":
        return None
    if len(parts) == 2:
        return "top" if parts[1] in ("routes.c", "routes.h", "main.c") else "flat"
    return parts[1] if parts[1] in ("core", "kernels") + FAMILIES else "flat"


def allowed(src, dst):
    """Whether layer src may use layer dst."""
    if dst is None or src == dst:
        return True
    if src == "top":
        return True
    if src in FAMILIES:
        return dst in ("core", "kernels", "protocol")
    if src == "kernels":
        return dst in ("core", "protocol")
    if src == "core":
        return dst == "protocol"
    if src in ("protocol", "kernel-host"):
        return dst in ("protocol",)
    return False  # "flat": a gateway file in no folder of the house


def sources(srcdir):
    out = []
    for top in ("protocol", "gateway", "kernel-host"):
        for root, _, files in os.walk(os.path.join(srcdir, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(root, f), srcdir))
    return sorted(out)


def include_problems(srcdir, files):
    problems = []
    for path in files:
        with open(os.path.join(srcdir, path), errors="replace") as f:
            text = f.read()
        src = layer(path)
        if src == "flat":
            problems.append(f"{path}: in gateway/ but in no folder of the house")
            continue
        for inc in INCLUDE.findall(text):
            if inc == "autoconf.h" or "/" not in inc:
                continue
            dst = layer(inc)
            # A family's or routes' header is for routes.c and main.c.
            if dst == "top" and src != "top":
                problems.append(f"{path}: includes {inc} (only main.c may)")
            elif not allowed(src, dst):
                problems.append(f"{path}: {src} includes {inc} ({dst})")
    return problems


def nm(path, *flags):
    done = subprocess.run(["nm", *flags, path], capture_output=True, text=True)
    return done.stdout.split() if done.returncode == 0 else []


def object_source(obj, srcdir, files):
    """The source an object file was built from: automake names it
    DIR/PROGRAM-NAME.o beside where DIR/NAME.c lies."""
    d, base = os.path.split(obj)
    name = base[:-2]
    for cand in [name] + [name.split("-", i)[-1] for i in range(1, name.count("-") + 1)]:
        rel = os.path.join(d, cand + ".c")
        if rel in files:
            return rel
    return None


def symbol_problems(srcdir, builddir, files):
    objects = {}
    for root, _, names in os.walk(builddir):
        for n in names:
            if n.endswith(".o"):
                rel = os.path.relpath(os.path.join(root, n), builddir)
                src = object_source(rel, srcdir, files)
                if src and layer(src) not in (None,):
                    objects[rel] = src
    defined = {}
    for obj, src in objects.items():
        for sym in nm(os.path.join(builddir, obj), "--defined-only", "-g", "--format=just-symbols"):
            defined.setdefault(sym, set()).add(layer(src))
    problems = []
    for obj, src in sorted(objects.items()):
        here = layer(src)
        if here == "flat":
            continue
        for sym in nm(os.path.join(builddir, obj), "-u", "--format=just-symbols"):
            where = defined.get(sym)
            # Defined by no object of ours (a library's), or by several
            # layers (a program's own copy): nothing to say.
            if not where or len(where) > 1:
                continue
            dst = next(iter(where))
            if dst == "top" and here != "top":
                problems.append(f"{src}: calls {sym} of routes.c or main.c")
            elif not allowed(here, dst):
                problems.append(f"{src}: {here} calls {sym} ({dst})")
    return problems, len(objects)


def main():
    srcdir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                             os.environ.get("GLOVEBOX_SRCDIR") or
                             os.path.join(os.path.dirname(__file__), "..", ".."))
    builddir = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else
                               os.environ.get("GLOVEBOX_BUILDDIR") or os.path.join(srcdir, "build"))
    files = sources(srcdir)
    tests = []
    tests.append(("found sources under " + srcdir, [] if files else ["none"]))
    tests.append(("includes follow the house's rules", include_problems(srcdir, files)))
    problems, nobjects = symbol_problems(srcdir, builddir, files)
    if nobjects == 0:
        problems = [f"no object files under {builddir}: build first"]
    tests.append((f"calls follow the house's rules ({nobjects} objects)", problems))
    long = []
    for path in files:
        if path.endswith(".c"):
            with open(os.path.join(srcdir, path), errors="replace") as f:
                n = sum(1 for _ in f)
            if n > MAX_LINES:
                long.append(f"{path}: {n} lines")
    tests.append((f"no C file over {MAX_LINES} lines", long))
    print(f"1..{len(tests)}")
    failed = 0
    for i, (name, problems) in enumerate(tests, 1):
        if problems:
            failed += 1
            print(f"not ok {i} - {name}")
            for p in problems:
                print(f"#   {p}")
        else:
            print(f"ok {i} - {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
