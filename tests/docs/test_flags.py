"""docs/flags.md is what `glovebox --help-markdown` prints, and says what
`glovebox --help` says: both come from the one option table in
gateway/core/config.c, and a page edited by hand, or not regenerated after the
table changed, fails here. The pages name no flag glovebox does not take."""
import os
import re
import subprocess

from gbclient import BINARY
from mdlib import ROOT, code_spans, pages, read

# Flags of other programs that the pages name on their own, as `--resolve`.
OTHERS = {"allow-http", "enable-fuzzing", "enable-sanitizers", "enable-werror", "external",
          "gateway-url", "nftset", "no-ident", "only", "prefix", "resolve", "stop-dns-rebind",
          "sysconfdir", "user", "with-systemdsystemunitdir", "zmq-external"}


def run(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=30)


def test_page_is_generated():
    """scripts/gen-flags-doc --check: the page as the binary prints it."""
    env = dict(os.environ, GLOVEBOX_BUILD=os.path.dirname(BINARY))
    p = subprocess.run([os.path.join(ROOT, "scripts", "gen-flags-doc"), "--check"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr[-4000:]


def help_options():
    """{flag: (argument, default, help)} as --help prints them."""
    p = run("--help")
    assert p.returncode == 0, p.stderr
    out, name = {}, None
    for line in p.stdout.splitlines():
        m = re.match(r"^  --([a-z0-9-]+) ?(.*)$", line)
        if m:
            name = m.group(1)
            out[name] = [m.group(2), ""]
        elif name and line.startswith("      "):
            out[name][1] += " " + line.strip()
    result = {}
    for name, (arg, text) in out.items():
        text = text.strip()
        m = re.match(r"^(.*) \[default: (.*)\]$", text)
        result[name] = (arg, m.group(2) if m else "", m.group(1) if m else text)
    return result


def unmarkdown(cell):
    cell = re.sub(r"\[([^\]]*)\]\(([^)]*)\)", lambda m: m.group(1) + (
        "#" + m.group(2).split("#", 1)[1] if "#" in m.group(2) else ""), cell)
    cell = cell.replace("`", "").replace("&lt;", "<").replace("&gt;", ">")
    return re.sub(r"\\(.)", r"\1", cell.replace("&amp;", "&")).strip()


def page_options():
    """{flag: (argument, default, help)} as docs/flags.md has them."""
    out = {}
    for line in read("docs/flags.md").splitlines():
        if not line.startswith("| `--"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        flag = unmarkdown(cells[0])[2:]
        name, _, arg = flag.partition(" ")
        out[name] = (arg, unmarkdown(cells[1]), unmarkdown(cells[2]))
    return out


def test_help_and_page_agree():
    shown, page = help_options(), page_options()
    assert list(shown) == list(page), "the same options, in the same order"
    for name, (arg, dflt, text) in shown.items():
        parg, pdflt, ptext = page[name]
        assert (arg, text) == (parg, ptext), name
        # The page says "none" or "off" where --help says nothing.
        assert dflt == pdflt or (not dflt and pdflt in ("none", "off", "")), \
            (name, dflt, pdflt)
    assert len(shown) > 90 and "listen" in shown and "help-markdown" in shown


def fleet_config_options():
    """The flags deploy/haproxy/fleet-config takes, as its --help prints
    them: docs/several-hosts.md names them beside glovebox's."""
    p = subprocess.run([os.path.join(ROOT, "deploy", "haproxy", "fleet-config"), "--help"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return set(re.findall(r"--([a-z][a-z0-9-]*)", p.stdout))


def test_pages_name_only_flags_glovebox_takes():
    known = set(help_options()) | fleet_config_options()
    bad = []
    for page in pages():
        if page in ("docs/e2b-protocol.md", "docs/flags.md"):
            continue
        for line, span in code_spans(page):
            lone = re.match(r"^--([a-z][a-z0-9-]*)", span)
            names = [lone.group(1)] if lone else []
            if span.startswith(("glovebox ", "scripts/serve ")):
                names += re.findall(r"\s--([a-z][a-z0-9-]*)", span)
            bad += [f"{page}:{line}: --{n} (in `{span}`)" for n in names
                    if n not in known and n not in OTHERS]
    assert not bad, "flags glovebox does not take:\n" + "\n".join(bad)


def test_help_markdown_is_a_page_of_its_own():
    p = run("--help-markdown")
    assert p.returncode == 0 and p.stdout.startswith("# Flags\n"), p.stderr
    assert p.stdout.count("\n| `--") == len(help_options())
