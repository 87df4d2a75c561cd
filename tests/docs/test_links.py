"""Every relative link and anchor in README.md and docs/*.md resolves, and
every file of the repository they name in code (`gateway/config.c`) is
there: a page moved or renamed, a heading reworded or a file moved fails
here, not in a reader's browser."""
import os

import pytest

from mdlib import ROOT, anchors, code_spans, links, pages

# The folders issue 23's move of the gateway makes, which docs/layout.md
# describes ahead of it. Remove them from here once they exist (the last
# test fails then, so that the exemption cannot outlive its reason).
PLANNED = {"gateway/core/", "gateway/kernels/", "gateway/jupyter/", "gateway/e2b/",
           "gateway/mcp/", "gateway/terminals/", "gateway/ports/", "gateway/ops/",
           "gateway/routes.c"}

# Where code names a file of the repository by its path.
TOP = ("bench/", "deploy/", "dist/", "docs/", "gateway/", "kernel-host/", "kernels/",
       "protocol/", "scripts/", "static/", "tests/")


def external(target):
    return target.startswith(("http://", "https://", "mailto:"))


@pytest.mark.parametrize("page", pages())
def test_links_resolve(page):
    bad = []
    for line, target in links(page):
        if external(target):
            continue
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(ROOT, dest)):
            bad.append(f"{page}:{line}: {target}: no file {dest}")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            bad.append(f"{page}:{line}: {target}: no heading #{anchor} in {dest}")
    assert not bad, "\n".join(bad)


def planned(path):
    return any(path == p or path.startswith(p) for p in PLANNED)


# docs/e2b-protocol.md names the files of E2B's SDK packages, not ours.
@pytest.mark.parametrize("page", [p for p in pages() if p != "docs/e2b-protocol.md"])
def test_named_files_exist(page):
    bad = []
    for line, span in code_spans(page):
        for word in span.split():
            path = word.rstrip(".,;:)").split("#")[0]
            if (not path.startswith(TOP) or any(c in path for c in "{}*<>$[]|=")
                    or planned(path)):
                continue
            if not os.path.exists(os.path.join(ROOT, path)):
                bad.append(f"{page}:{line}: `{span}` names {path}, which is not there")
    assert not bad, "\n".join(bad)


def test_planned_folders_not_made_yet():
    made = [p for p in PLANNED if os.path.exists(os.path.join(ROOT, p))]
    assert not made, f"{made} exist now: check them in docs/layout.md and drop them from PLANNED"
