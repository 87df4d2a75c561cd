"""Reading the Markdown of README.md and docs/*.md as GitHub renders it:
headings and their anchors, links, code spans and fenced blocks. Shared by
the tests of this directory."""
import glob
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# (page, line, outcome, why) of every shell and Python example, filled in by
# test_examples.py and summed up by conftest.py at the end of the run.
EXAMPLES = []


def pages():
    """README.md and every docs/*.md, as paths relative to the root."""
    return ["README.md"] + sorted(os.path.relpath(p, ROOT)
                                  for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def read(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


FENCE = re.compile(r"^(```+|~~~+)(.*)$")


def split_fences(text):
    """Yields (kind, info, start_line, lines): kind "text" or "code"; for
    code, info is the fence's info string and start_line the line of its
    first content line (1-based)."""
    lines = text.split("\n")
    i, buf, buf_start = 0, [], 1
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            buf.append(lines[i])
            i += 1
            continue
        yield "text", "", buf_start, buf
        fence, info = m.group(1), m.group(2).strip()
        body, j = [], i + 1
        while j < len(lines) and not lines[j].startswith(fence):
            body.append(lines[j])
            j += 1
        yield "code", info, i + 2, body
        i = j + 1
        buf, buf_start = [], i + 1
    yield "text", "", buf_start, buf


CODE_SPAN = re.compile(r"(`+)([^`][\s\S]*?)\1")


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page):
    """Every anchor a link may name in page: its headings' (with GitHub's
    -1, -2 for repeats) and explicit id="..." attributes."""
    seen, out = {}, set()
    for kind, _, _, lines in split_fences(read(page)):
        if kind != "text":
            continue
        for line in lines:
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                out.add(base if n == 0 else f"{base}-{n}")
            out.update(re.findall(r'\bid="([^"]+)"', line))
    return out


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_LINK = re.compile(r'<(?:a|img)\b[^>]*\b(?:href|src)="([^"]+)"')


def _blocks(page):
    """(first line number, text) of each stretch of page outside code."""
    for kind, _, start, lines in split_fences(read(page)):
        if kind == "text":
            yield start, "\n".join(lines)


def _line(start, text, offset):
    return start + text.count("\n", 0, offset)


def links(page):
    """(line number, target) of every link and image in page's text (not
    in code); a link's text may run over lines."""
    out = []
    for start, text in _blocks(page):
        bare = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), text)
        for rx in (LINK, HTML_LINK):
            out += [(_line(start, bare, m.start()), m.group(1)) for m in rx.finditer(bare)]
    return sorted(out)


def code_spans(page):
    """(line number, text) of every inline code span in page's text."""
    out = []
    for start, text in _blocks(page):
        out += [(_line(start, text, m.start()), " ".join(m.group(2).split()))
                for m in CODE_SPAN.finditer(text)]
    return out
