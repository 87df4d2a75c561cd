"""Every relative link and anchor in README.md and docs/*.md resolves, and
every file of the repository they name in code (`gateway/core/config.c`) is
there: a page moved or renamed, a heading reworded or a file moved fails
here, not in a reader's browser."""
import os

import pytest

from mdlib import ROOT, anchors, code_spans, links, pages

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


# docs/e2b-protocol.md names the files of E2B's SDK packages, not ours.
@pytest.mark.parametrize("page", [p for p in pages() if p != "docs/e2b-protocol.md"])
def test_named_files_exist(page):
    bad = []
    for line, span in code_spans(page):
        for word in span.split():
            path = word.rstrip(".,;:)").split("#")[0]
            if not path.startswith(TOP) or any(c in path for c in "{}*<>$[]|="):
                continue
            if not os.path.exists(os.path.join(ROOT, path)):
                bad.append(f"{page}:{line}: `{span}` names {path}, which is not there")
    assert not bad, "\n".join(bad)
