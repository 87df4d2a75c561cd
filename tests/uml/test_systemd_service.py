"""The installed glovebox.service under a real systemd: the guest's init
runs the other checks first, then becomes systemd (PID 1), which runs this
module as a oneshot service. What it proves: the unit's Delegate=yes gives
the gateway a group it can use, its hardening leaves the sandbox working,
the options and the token come from its configuration file, Restart=on-failure restarts a
killed gateway, and a stop leaves no process and no group behind."""
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from umllib import (CGROUP_ROOT, cgroup_of, cmdline, controllers, in_guest, kernel_group, read,
                    value)
from gbclient import Gateway
from test_install import DESTDIR, PREFIX, make_variable

pytestmark = pytest.mark.skipif(not in_guest() or read("/proc/1/comm") != "systemd",
                                reason="runs under systemd in tests/uml/run's guest")

TOKEN = "uml-service-token-4f1c"
PORT = 8888
SERVICE = CGROUP_ROOT + "/system.slice/glovebox.service"
LIMITS = {"memory_mb": 128, "pids": 32, "cpus": 0.5}


def systemctl(*args, check=True):
    return subprocess.run(["systemctl", "--no-pager", *args], capture_output=True, text=True,
                          check=check).stdout


def show(prop):
    return systemctl("show", "-P", prop, "glovebox.service").strip()


class ServiceGateway(Gateway):
    """A client of the gateway systemd runs (not started by us)."""

    def __init__(self):
        self.port, self.token = PORT, TOKEN
        self.base = f"http://127.0.0.1:{PORT}"
        self.proc = None


def wait_until_serving(gw, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            status, _, _ = gw.request("GET", "/api")
            if status == 200:
                return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.2)
    raise AssertionError("glovebox.service does not answer: " +
                         systemctl("status", "glovebox.service", check=False))


@pytest.fixture(scope="module")
def service():
    """The DESTDIR install at its prefix (a writable copy: the configuration
    file goes beside it), its token in the configuration file, the unit started.
    The drop-in only drops the unit's default dependencies: this guest
    boots none of a real system's units (its root is the host's, read-only)."""
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", PREFIX], check=True)
    subprocess.run(["cp", "-a", DESTDIR + PREFIX + "/.", PREFIX + "/"], check=True)
    env_dir = make_variable("sysconfdir") + "/glovebox"
    os.makedirs(env_dir)
    with open(env_dir + "/glovebox.json", "w") as f:
        json.dump({"token": TOKEN, "listen": f"127.0.0.1:{PORT}", "max-kernels": 50}, f)
    os.chmod(env_dir + "/glovebox.json", 0o600)
    os.makedirs("/run/systemd/system/glovebox.service.d", exist_ok=True)
    with open("/run/systemd/system/glovebox.service.d/uml.conf", "w") as f:
        f.write("[Unit]\nDefaultDependencies=no\n")
    systemctl("daemon-reload")
    systemctl("start", "glovebox.service")
    gw = ServiceGateway()
    wait_until_serving(gw)
    yield gw
    systemctl("stop", "glovebox.service", check=False)


def test_service_runs_in_its_delegated_group(service):
    assert show("Delegate") == "yes"
    assert show("ControlGroup") == "/system.slice/glovebox.service"
    main = int(show("MainPID"))
    # The options come from the configuration file.
    assert cmdline(main) == (f"{make_variable('bindir')}/glovebox --config "
                             f"{make_variable('sysconfdir')}/glovebox/glovebox.json "
                             "--runtime-dir /run/glovebox ")
    # The token is in that file, not on the command line or in the
    # environment, and the journal never shows it.
    assert TOKEN not in cmdline(main)
    with open(f"/proc/{main}/environ", "rb") as f:
        assert TOKEN.encode() not in f.read()
    if shutil.which("journalctl"):
        journal = subprocess.run(["journalctl", "-u", "glovebox.service", "--no-pager"],
                                 capture_output=True, text=True).stdout
        assert TOKEN not in journal
    # The gateway moved itself into a leaf of the service's group.
    assert cgroup_of(main) == SERVICE + "/glovebox-supervisor"
    assert read(SERVICE + "/cgroup.procs") == ""
    assert {"cpu", "memory", "pids"} <= controllers(SERVICE)


def test_service_sandboxes_kernels_with_limits(service):
    kid = service.start_kernel(name="python3", limits=LIMITS)
    hosts = [e.name for e in os.scandir(SERVICE) if e.name.startswith("glovebox-") and
             e.name != "glovebox-supervisor"]
    assert len(hosts) == 1, hosts
    # The limits are on the kernel's sandbox group; the kernel runs in a
    # group of its own inside it.
    group = os.path.dirname(kernel_group(f"{SERVICE}/{hosts[0]}", kid))
    assert read(group + "/memory.max") == str(128 * 1024 * 1024)
    assert read(group + "/pids.max") == "32"
    assert read(group + "/cpu.max") == "50000 100000"
    # The unit's hardening left the sandbox whole.
    status = value(service, kid, "open('/proc/self/status').read()")
    assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status
    assert "CapEff:\t0000000000000000" in status
    assert value(service, kid, "(__import__('os').getuid(), "
                 "__import__('socket').if_nameindex())") == (1000, [(1, "lo")])


def test_service_restarts_after_a_crash(service):
    before = int(show("MainPID"))
    systemctl("kill", "--signal=SIGKILL", "--kill-whom=main", "glovebox.service")
    deadline = time.time() + 60
    while time.time() < deadline and show("MainPID") in ("0", str(before)):
        time.sleep(0.2)
    assert show("MainPID") not in ("0", str(before)), systemctl("status", "glovebox.service",
                                                                check=False)
    assert int(show("NRestarts")) >= 1
    wait_until_serving(service)
    kid = service.start_kernel(name="python3", limits=LIMITS)
    assert value(service, kid, "6 * 7") == 42


def test_service_stop_leaves_nothing(service):
    status, listing, _ = service.request("GET", "/api/kernels")
    assert status == 200 and len(listing) == 1, listing
    systemctl("stop", "glovebox.service")
    # A clean exit on SIGTERM: inactive, not failed.
    assert show("ActiveState") == "inactive" and show("Result") == "success"
    assert not os.path.exists(SERVICE)
    left = subprocess.run(["pgrep", "-f", "bin/glovebox|glovebox-kernel-host"],
                          capture_output=True, text=True).stdout
    assert left == "", left
    with open("/proc/self/mountinfo") as f:
        assert "/run/glovebox" not in f.read()
