"""Every shell and Python example in README.md and docs/*.md runs, against
a real gateway, as a reader would run it: the blocks of a page in order, in
one bash (so that a variable one block sets is there in the next; a Python
block is run by python3 from that shell and sees what it exported), each
curl failing on an HTTP error, each block failing on its first failing
command.

A page says, in an HTML comment on the line before a block's fence, what a
block needs that this cannot give it, or what it is run with:

    <!-- not run: WHY -->          not run, for the reason given (listed at the end)
    <!-- run with: FLAGS -->       run against a gateway of its own, started with FLAGS
    <!-- run as root -->           run only when the tests run as root

The examples speak to 127.0.0.1:8888 with $TOKEN: the test's gateway listens
on a free port, which replaces 8888 in the block, and $TOKEN is its token:
one an operator chose, not of E2B's form (`e2b_` and hex digits), so that
an E2B Python example that works only with the generated token's form
fails here (E2B's Python SDK refuses other keys unless told not to).
`glovebox` is the build's."""
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from gbclient import BUILD, start_gateway
from mdlib import EXAMPLES, pages, read, split_fences

LANGS = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python", "py": "python"}
MARK = re.compile(r"^<!--\s*(not run|run with|run as root)\s*(?::\s*(.*?))?\s*-->$")
TOKEN = "docs-token-" + "0123456789abcdef" * 3
BLOCK_TIMEOUT = 300


def e2b_sdk():
    for path in (os.environ.get("E2B_PYTHON_SDK"),
                 os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared",
                              "e2b-python", "site"),
                 "/work/shared/e2b-python/site"):
        if path and os.path.isdir(os.path.join(path, "e2b_code_interpreter")):
            return os.path.abspath(path)
    return None


def examples(page):
    """(line, language, code, mark, argument) of each shell or Python block;
    mark is None or one of MARK's words."""
    out, last_text = [], []
    for kind, info, start, lines in split_fences(read(page)):
        if kind == "text":
            last_text = [l for l in lines if l.strip()]
            continue
        lang = LANGS.get(info.split()[0] if info else "")
        mark = arg = None
        if last_text and last_text[-1].lstrip().startswith("<!--"):
            m = MARK.match(last_text[-1].strip())
            assert m, f"{page}:{start - 1}: a comment before a block that is no marker: " \
                      f"{last_text[-1]!r} (see tests/docs/test_examples.py)"
            mark, arg = m.group(1), m.group(2)
            assert lang, f"{page}:{start - 1}: a marker on a block that is not shell or Python"
            assert mark != "not run" or arg, f"{page}:{start - 1}: say why it is not run"
        last_text = []
        if lang:
            out.append((start - 1, lang, "\n".join(lines), mark, arg))
    return out


class Shell:
    """One bash for a page's blocks, in a directory of its own."""

    def __init__(self, env, cwd):
        self.cwd = cwd
        self.proc = subprocess.Popen(["bash", "--norc", "--noprofile"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     cwd=cwd, env=env, start_new_session=True)
        self.send("set -eo pipefail\n"
                  "curl() { command curl --fail-with-body --show-error --max-time 240 \"$@\"; }\n")
        self.n = 0

    def send(self, text):
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def run(self, lang, code, timeout=BLOCK_TIMEOUT):
        """Runs one block; returns (ok, its output)."""
        self.n += 1
        done = f"__glovebox_block_{self.n}_done__"
        path = os.path.join(self.cwd, f".block-{self.n}." + ("py" if lang == "python" else "sh"))
        with open(path, "w") as f:
            f.write(code + "\n")
        line = f"source {path}" if lang == "sh" else f"/usr/bin/python3 {path}"
        self.send(f"{line}\necho {done}\n")
        out, deadline = b"", time.time() + timeout
        fd = self.proc.stdout.fileno()
        while done.encode() not in out:
            left = deadline - time.time()
            if left <= 0:
                return False, out.decode(errors="replace") + f"\n[no end within {timeout} s]"
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:  # the shell exited: a command failed (set -e)
                    return False, out.decode(errors="replace")
                out += chunk
        return True, out.decode(errors="replace").replace(done + "\n", "")

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.fixture(scope="module")
def gateway():
    gw = start_gateway(token=TOKEN)
    yield gw
    gw.stop()


def shell_env(sdk):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GLOVEBOX_", "E2B_", "JUPYTER_GATEWAY_"))}
    env["PATH"] = os.path.abspath(BUILD) + ":" + env.get("PATH", "/usr/bin:/bin")
    env["TOKEN"] = TOKEN
    if sdk:
        env["PYTHONPATH"] = sdk
    return env


def own_port(code, port):
    return code.replace("127.0.0.1:8888", f"127.0.0.1:{port}").replace(
        "localhost:8888", f"localhost:{port}")


# A page without a shell or Python example has nothing to run: it is no test
# (rather than one skipped in every run, which CI would have to list).
@pytest.mark.parametrize("page", [p for p in pages() if examples(p)])
def test_examples_run(page, gateway):
    blocks = examples(page)
    sdk = e2b_sdk()
    cwd = tempfile.mkdtemp(prefix="glovebox-docs-")
    shell = Shell(shell_env(sdk), cwd)
    failures = []
    try:
        for line, lang, code, mark, arg in blocks:
            why = None
            if mark == "not run":
                why = arg
            elif mark == "run as root" and os.geteuid() != 0:
                why = "needs root"
            elif lang == "python" and re.search(r"^\s*(from|import) e2b", code, re.M) and not sdk:
                why = "the E2B Python SDK is not here (E2B_PYTHON_SDK)"
            if why:
                EXAMPLES.append((page, line, "not run" if mark == "not run" else "skipped", why))
                continue
            own = None
            try:
                if mark == "run with":
                    flags = arg.split()
                    own = start_gateway(*flags, token=None if "--no-auth" in flags else TOKEN)
                ok, out = shell.run(lang, own_port(code, (own or gateway).port))
            finally:
                if own:
                    own.stop()
            EXAMPLES.append((page, line, "run" if ok else "failed", ""))
            if not ok:
                failures.append(f"{page}:{line}: the {lang} example failed:\n{code}\n"
                                f"--- its output ---\n{out[-6000:]}")
                break  # the blocks after it may need what it did not do
    finally:
        shell.close()
        shutil.rmtree(cwd, ignore_errors=True)
    assert not failures, "\n".join(failures) + "\n--- gateway log ---\n" + \
        gateway.read_log()[-3000:]
