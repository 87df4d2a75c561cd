"""The install command of docs/operations.md and scripts/serve's build work
in one checkout, each after the other (issue 25, item 7: the install's
./configure in the source tree made scripts/serve's configure in build/ stop
with "source directory already configured").

In a copy of the source tree: the documented command as written, then
scripts/serve's build (scripts/lib.sh), then the documented command again.
autoreconf and configure run for real; make and sudo are shell functions
that note where make ran, so the check takes seconds, not a build's minutes.
The checkout's own build, as the test runs, is untouched."""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from mdlib import ROOT, read, split_fences


def install_command():
    """The shell line of the Install as a service section that runs make install."""
    for kind, info, _, lines in split_fences(read("docs/operations.md")):
        if kind == "code" and info == "sh":
            for line in lines:
                if "make install" in line:
                    return line
    raise AssertionError("docs/operations.md has no command that runs make install")


@pytest.fixture
def checkout():
    d = tempfile.mkdtemp(prefix="glovebox-install-")
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src, dst = os.path.join(ROOT, name), os.path.join(d, name)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(src, dst, follow_symlinks=False)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# make notes its working directory (after -C) and its targets; sudo runs its
# command. Both as functions of the shell that runs the command: configure's
# own probes of make, in processes of their own, get the real one.
STUBS = r'''
make() {
    local dir=$PWD
    [ "${1:-}" = -C ] && { dir=$(cd "$2" && pwd); shift 2; }
    echo "make $dir $*" >>"$MAKE_LOG"
}
sudo() { "$@"; }
'''


def run_in(tree, script):
    log = os.path.join(tree, ".make-log")
    r = subprocess.run(["bash", "-c", "set -euo pipefail\n" + STUBS + script],
                       cwd=tree, env=dict(os.environ, MAKE_LOG=log), capture_output=True,
                       text=True, timeout=600)
    made = []
    if os.path.exists(log):
        with open(log) as f:
            made = f.read().splitlines()
        os.unlink(log)
    return r.returncode, r.stdout + r.stderr, made


def test_install_then_serve_then_install_again(checkout):
    command = install_command()
    build = os.path.join(checkout, "build")
    rc, out, made = run_in(checkout, command)
    assert rc == 0, f"{command}\n{out[-3000:]}"
    assert made == [f"make {build} ", f"make {build} install"], made

    # scripts/serve's build step, as scripts/serve runs it.
    rc, out, made = run_in(checkout, '. scripts/lib.sh\nbuild')
    assert rc == 0, out[-3000:]
    assert "already configured" not in out, out[-3000:]
    assert made and all(re.match(rf"make {re.escape(build)} -s", m) for m in made), made

    rc, out, made = run_in(checkout, command)
    assert rc == 0, f"{command}\n{out[-3000:]}"
    assert made == [f"make {build} ", f"make {build} install"], made


def test_a_tree_configured_in_place_is_named_with_the_way_out(checkout):
    rc, out, _ = run_in(checkout, "autoreconf -fi >/dev/null 2>&1 && ./configure -q")
    assert rc == 0, out[-3000:]
    rc, out, made = run_in(checkout, '. scripts/lib.sh\nbuild')
    assert rc != 0 and not made, out
    assert "configured in place" in out and "make distclean" in out, out
