"""An installed glovebox reads its installed files only, never the source
tree it was built in, even where that tree remains beside it (issue 25,
item 9). The build is installed with DESTDIR into a temporary directory,
and the installed gateway runs at its real prefix in a mount namespace of
its own, where that directory is laid over the prefix: the machine's own
prefix is left as it is. (tests/uml/test_install.py checks what the
install holds, in a guest.)"""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from gbclient import BUILD, Gateway, run_cell

SRC = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Glovebox's own kernels, as kernels/ in the source tree holds them.
OWN_KERNELS = sorted(n for n in os.listdir(os.path.join(SRC, "kernels"))
                     if os.path.isfile(os.path.join(SRC, "kernels", n, "kernel.json")))


def make_variable(name, depth=0):
    """A directory variable of the build's Makefile, expanded as make would."""
    with open(os.path.join(BUILD, "Makefile")) as f:
        for line in f:
            m = re.match(rf"{name} = (.*)$", line.rstrip("\n"))
            if m:
                assert depth < 10
                return re.sub(r"\$[({](\w+)[)}]", lambda v: make_variable(v.group(1), depth + 1),
                              m.group(1).strip())
    raise KeyError(name)


@pytest.fixture(scope="module")
def installed():
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) to lay the install over its prefix")
    prefix = make_variable("prefix")
    destdir = tempfile.mkdtemp(prefix="glovebox-destdir-")
    os.chmod(destdir, 0o755)
    try:
        subprocess.run(["make", "-C", BUILD, "-s", "install", f"DESTDIR={destdir}"], check=True,
                       stdout=subprocess.DEVNULL)
        state = tempfile.mkdtemp(prefix="glovebox-state-")
        # The install laid over the top directory of the prefix (/usr for
        # /usr/local), whose own files are still seen under it: a sandbox
        # binds /usr whole, without the mounts beneath it.
        top = "/" + prefix.strip("/").split("/")[0]
        lay_over = (f'mount -t overlay overlay -o "lowerdir={destdir}{top}:{top}" '
                    f'"{top}" && exec "$0" "$@"')
        gw = Gateway(os.path.join(prefix, "bin", "glovebox"), ["--state-dir", state],
                     runner=["unshare", "--mount", "--propagation", "private",
                             "sh", "-c", lay_over])
        try:
            yield gw, prefix
        finally:
            gw.stop()
            shutil.rmtree(state, ignore_errors=True)
    finally:
        shutil.rmtree(destdir, ignore_errors=True)


def test_an_installed_gateway_finds_its_own_kernels_where_they_are_installed(installed):
    gw, prefix = installed
    own = os.path.join(prefix, "share", "glovebox", "kernels")
    found = dict(re.findall(r"kernelspec (\S+) in (\S+)", gw.read_log()))
    assert found.get("bash") == os.path.join(own, "bash"), gw.read_log()
    for name, where in found.items():
        assert not where.startswith(SRC + "/"), (name, where)
    # Each of its own kernels that was found came from the installed copy.
    for name in OWN_KERNELS:
        if name in found:
            assert found[name] == os.path.join(own, name), (name, found[name])
    status, specs, _ = gw.request("GET", "/api/kernelspecs")
    assert status == 200, specs
    assert SRC not in repr(specs), specs


def test_an_installed_bash_kernel_runs_the_installed_program(installed):
    gw, prefix = installed
    kid = gw.start_kernel(name="bash")
    try:
        # The bash kernel's own process is the shell's parent.
        reply, out, _ = run_cell(gw, kid, "tr '\\0' ' ' </proc/$PPID/cmdline")
        assert reply["status"] == "ok", reply
        assert os.path.join(prefix, "share", "glovebox", "kernels", "bash") in out, out
        assert SRC not in out, out
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")
