"""make install, checked: what a DESTDIR install holds (tests/uml/run makes
one in build/uml/destdir before it boots the guest), and the installed
gateway run at its prefix, where it must use its installed kernel-host and
page, not the build tree's. Runs inside the guest: there the prefix can be
covered by the DESTDIR copy without touching the host."""
import os
import re
import signal
import subprocess
import urllib.request

import pytest

from umllib import kernel_host_pid, only_in_guest, value
from gbclient import BUILD, Gateway

pytestmark = only_in_guest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DESTDIR = os.path.join(os.path.abspath(BUILD), "uml", "destdir")
# The page's files, vendor/ (xterm.js) included.
STATIC = sorted(os.path.relpath(os.path.join(d, f), os.path.join(SRC, "static"))
                for d, _, files in os.walk(os.path.join(SRC, "static")) for f in files)
# Glovebox's own kernels (kernels/NAME/*) and what they share (kernels/*),
# installed as they are.
KERNELS = sorted(os.path.relpath(os.path.join(d, f), os.path.join(SRC, "kernels"))
                 for d, _, files in os.walk(os.path.join(SRC, "kernels")) for f in files
                 if "__pycache__" not in d)
PROGRAMS = ["bin/glovebox", "libexec/glovebox/glovebox-kernel-host",
            "libexec/glovebox/glovebox-kernel-bridge", "libexec/glovebox/glovebox-sudo",
            "libexec/glovebox/glovebox-init", "libexec/glovebox/glovebox-criu-action"]
# The zygote's fork server, an extension module of the kernelspec's Python,
# is built where Python's headers are (python3-config --embed), and then
# installed beside the kernel-host, which runs it with that Python.
MODULES = (["libexec/glovebox/glovebox-zygote.so"]
           if os.path.exists(os.path.join(BUILD, "glovebox-zygote.so")) else [])


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


PREFIX = make_variable("prefix")


def test_install_puts_everything_in_the_usual_places():
    installed = sorted(os.path.relpath(os.path.join(d, f), DESTDIR + PREFIX)
                       for d, _, files in os.walk(DESTDIR) for f in files)
    assert installed == sorted(PROGRAMS + MODULES + ["lib/systemd/system/glovebox.service"] +
                               [f"share/glovebox/static/{f}" for f in STATIC] +
                               [f"share/glovebox/kernels/{f}" for f in KERNELS])
    for program in PROGRAMS:
        assert os.access(os.path.join(DESTDIR + PREFIX, program), os.X_OK), program
    for module in MODULES:
        assert os.access(os.path.join(DESTDIR + PREFIX, module), os.R_OK), module
    for tree, files in (("static", STATIC), ("kernels", KERNELS)):
        for f in files:
            with open(os.path.join(SRC, tree, f), "rb") as a, \
                    open(os.path.join(DESTDIR + PREFIX, "share/glovebox", tree, f), "rb") as b:
                assert a.read() == b.read(), f


def unit_settings():
    path = os.path.join(DESTDIR + make_variable("systemdsystemunitdir"), "glovebox.service")
    settings = {}
    with open(path) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                key, val = line.rstrip("\n").split("=", 1)
                settings.setdefault(key, []).append(val)
    return settings


def test_systemd_unit():
    s = unit_settings()
    exec_start = s["ExecStart"][0].split()
    assert exec_start[0] == make_variable("bindir") + "/glovebox"
    # The options, the token among them, come from the configuration file,
    # never the command line; an older install's environment file is
    # optional.
    assert not any("token" in arg for arg in exec_start), exec_start
    assert exec_start[1:3] == ["--config", make_variable("sysconfdir") + "/glovebox/glovebox.json"]
    assert not any("$" in arg for arg in exec_start), exec_start
    assert s["EnvironmentFile"] == ["-" + make_variable("sysconfdir") + "/glovebox/glovebox.env"]
    assert s["Delegate"] == ["yes"] and s["KillMode"] == ["mixed"]
    assert s["Restart"] == ["on-failure"]
    # What would break the sandbox (the unit's comment says why).
    for key in ("ProtectControlGroups", "ProtectKernelTunables", "ProtectKernelLogs",
                "ProtectProc", "RestrictNamespaces", "PrivateUsers", "CapabilityBoundingSet",
                "SystemCallFilter", "MemoryDenyWriteExecute", "DynamicUser", "User"):
        assert key not in s, key


@pytest.fixture
def installed():
    """The DESTDIR install, seen at its prefix."""
    subprocess.run(["mount", "--bind", DESTDIR + PREFIX, PREFIX], check=True)
    yield PREFIX
    subprocess.run(["umount", PREFIX], check=True)


def test_systemd_unit_verifies(installed):
    """systemd's own check of the installed unit: its keys, sections and
    the programs it starts."""
    path = make_variable("systemdsystemunitdir") + "/glovebox.service"
    out = subprocess.run(["systemd-analyze", "verify", path], capture_output=True, text=True)
    assert out.returncode == 0 and (out.stdout + out.stderr).strip() == "", out


def test_installed_gateway_uses_installed_files(installed):
    libexec = make_variable("libexecdir") + "/glovebox/glovebox-kernel-host"
    static = make_variable("pkgdatadir") + "/static"
    gw = Gateway(make_variable("bindir") + "/glovebox")
    try:
        assert f"web page from {static}\n" in gw.read_log()
        assert os.readlink(f"/proc/{kernel_host_pid(gw)}/exe") == libexec
        with urllib.request.urlopen(gw.base + "/", timeout=30) as resp, \
                open(os.path.join(static, "index.html"), "rb") as f:
            assert resp.read() == f.read()
        kid = gw.start_kernel()
        assert value(gw, kid, "6 * 7") == 42
    finally:
        assert gw.stop(signal.SIGTERM) == 0, gw.read_log()
