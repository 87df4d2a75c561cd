"""Glovebox on a pure cgroup v2 host, as Debian 12, Ubuntu 22.04+, RHEL 9
and Kubernetes nodes run it: the gateway in the root group, then in a
delegated service group (systemd's Delegate=yes), with memory, process and
CPU limits and nothing left behind. Runs inside the User-mode Linux guest
that tests/uml/run boots; the tests run in the order written and share the
gateways of their module."""
import errno
import os
import signal

import pytest

from umllib import (CGROUP_ROOT, FORK_UNTIL_REFUSED, cgroup_of, children, controllers,
                    cpu_share, glovebox_groups, group_state, kernel_group, kernel_host_pid,
                    only_in_guest, oom_then_restart, read, run, value, write)
from gbclient import start_gateway

pytestmark = only_in_guest

LIMITS = {"memory_mb": 128, "pids": 32, "cpus": 0.5}
WANTED = {"cpu", "memory", "pids"}
SLICE = CGROUP_ROOT + "/system.slice"
SERVICE = SLICE + "/glovebox.service"


def test_the_hierarchy_is_pure_v2():
    with open("/proc/mounts") as f:
        mounts = [line.split()[1:3] for line in f]
    assert [m for m in mounts if m[1] in ("cgroup", "cgroup2")] == \
        [["/sys/fs/cgroup", "cgroup2"]], mounts
    # No controller is bound to a v1 hierarchy (its hierarchy id would not be 0).
    with open("/proc/cgroups") as f:
        rows = [line.split() for line in f if not line.startswith("#")]
    assert rows and all(r[1] == "0" for r in rows), rows
    assert read("/proc/self/cgroup") == "0::/"
    assert {"cpu", "io", "memory", "pids"} <= controllers(CGROUP_ROOT, "cgroup.controllers")


def check_kernel_group(gw, kernel_id, parent):
    """The kernel's sandbox group lies beneath parent and holds the asked
    limits; the kernel itself runs in a group of its own inside it (what it
    starts, even in a new session, is killed with it)."""
    process = kernel_group(parent, kernel_id)
    group = os.path.dirname(process)
    assert os.path.basename(process).startswith("p-"), process
    assert os.path.dirname(group) == parent, group
    assert read(group + "/memory.max") == str(128 * 1024 * 1024)
    if os.path.exists(group + "/memory.swap.max"):
        assert read(group + "/memory.swap.max") == "0"
    assert read(group + "/pids.max") == "32"
    assert read(group + "/cpu.max") == "50000 100000"
    # The sandbox's cgroup namespace shows the kernel its sandbox's group as
    # the root: nothing of the host's tree.
    assert value(gw, kernel_id, "open('/proc/self/cgroup').read()") in (
        "0::/\n", f"0::/{os.path.basename(process)}\n")
    return group


# --- the gateway in the root group ---------------------------------------

@pytest.fixture(scope="module")
def root_gateway():
    found = read(CGROUP_ROOT + "/cgroup.subtree_control")
    gw = start_gateway()
    gw.found = found
    gw.host_pid = kernel_host_pid(gw)
    gw.kernel = gw.start_kernel(name="python3", limits=LIMITS)
    yield gw
    gw.stop()


def test_root_kernel_group_and_limits(root_gateway):
    gw = root_gateway
    assert cgroup_of(gw.proc.pid) == CGROUP_ROOT
    parent = f"{CGROUP_ROOT}/glovebox-{gw.host_pid}"
    for name in ("memory", "pids", "cpu"):
        assert f"{name} limits: cgroup v2 at {parent}\n" in gw.read_log()
    assert WANTED <= controllers(parent)
    gw.group = check_kernel_group(gw, gw.kernel, parent)


def test_root_pids_limit(root_gateway):
    gw = root_gateway
    events = lambda: int(read(gw.group + "/pids.events").split()[1])  # noqa: E731
    refused = events()
    content, stdout = run(gw, gw.kernel, FORK_UNTIL_REFUSED)
    started, error = eval(stdout)
    assert error == errno.EAGAIN, (content, stdout)
    # The kernel, its threads and the sandbox's init count too.
    assert 5 < started < 32, started
    # The group refused them, not some rlimit.
    assert events() > refused
    # Positive control: with the children gone, fork works again.
    assert value(gw, gw.kernel, "__import__('os').waitpid(__import__('os').fork() or "
                 "__import__('os')._exit(0), 0)[1]") == 0


def test_root_cpu_limit(root_gateway, record_property):
    gw = root_gateway
    share, throttled = cpu_share(gw, gw.kernel, gw.group)
    record_property("cpu_share_at_0.5", round(share, 3))
    # Half a CPU, with room for the guest's clock and scheduler.
    assert 0.25 < share < 0.62, share
    assert throttled > 0
    # Positive control: the same loop, the limit lifted, takes more.
    write(gw.group + "/cpu.max", "max 100000")
    try:
        unlimited, _ = cpu_share(gw, gw.kernel, gw.group, seconds=2)
    finally:
        write(gw.group + "/cpu.max", "50000 100000")
    record_property("cpu_share_unlimited", round(unlimited, 3))
    assert unlimited > 0.75 and unlimited > share + 0.2, (unlimited, share)


def test_root_out_of_memory(root_gateway):
    gw = root_gateway
    reason = oom_then_restart(gw, gw.kernel, 128)
    assert "memory" in reason, reason
    events = dict(line.split() for line in read(gw.group + "/memory.events").splitlines())
    assert int(events["oom_kill"]) >= 1, events
    # Same sandbox, same group, same limit after the restart.
    assert os.path.dirname(kernel_group(os.path.dirname(gw.group), gw.kernel)) == gw.group
    assert read(gw.group + "/memory.max") == str(128 * 1024 * 1024)


def test_root_stop_leaves_nothing(root_gateway):
    gw = root_gateway
    assert gw.stop(signal.SIGTERM) == 0
    assert glovebox_groups() == []
    assert read(CGROUP_ROOT + "/cgroup.subtree_control") == gw.found


# --- the gateway in a delegated service group -----------------------------

@pytest.fixture(scope="module")
def service():
    """A group as systemd leaves a Delegate=yes service: the controllers
    enabled down to its slice, none in the service's own group (its processes
    live there: cgroup v2's no-internal-process rule)."""
    root_found = controllers(CGROUP_ROOT)
    write(CGROUP_ROOT + "/cgroup.subtree_control", "+cpu +io +memory +pids")
    os.mkdir(SLICE)
    write(SLICE + "/cgroup.subtree_control", "+cpu +io +memory +pids")
    os.mkdir(SERVICE)
    found = group_state(SERVICE)
    assert found == {"children": [], "subtree_control": "", "procs": ""}
    yield found
    os.rmdir(SERVICE)
    os.rmdir(SLICE)
    for name in ("pids", "memory", "io", "cpu"):
        if name not in root_found:
            write(CGROUP_ROOT + "/cgroup.subtree_control", "-" + name)


def start_in_service():
    """A gateway whose process starts in the service's group, as systemd
    starts a service's main process."""
    return start_gateway(runner=["/bin/sh", "-c",
                                 f'echo $$ >{SERVICE}/cgroup.procs && exec "$@"', "sh"])


@pytest.fixture(scope="module")
def service_gateway(service):
    gw = start_in_service()
    gw.host_pid = kernel_host_pid(gw)
    yield gw
    gw.stop()


def test_service_gateway_moves_into_a_leaf(service, service_gateway):
    gw = service_gateway
    leaf = cgroup_of(gw.proc.pid)
    # The gateway and kernel-host left the service's own group for a leaf in
    # it, so that it may hand controllers down.
    assert os.path.dirname(leaf) == SERVICE, leaf
    assert cgroup_of(gw.host_pid) == leaf
    assert read(SERVICE + "/cgroup.procs") == ""
    assert WANTED <= controllers(SERVICE)
    parent = f"{SERVICE}/glovebox-{gw.host_pid}"
    for name in ("memory", "pids", "cpu"):
        assert f"{name} limits: cgroup v2 at {parent}\n" in gw.read_log()


def test_service_kernel_limits_and_out_of_memory(service_gateway):
    gw = service_gateway
    kid = gw.start_kernel(name="python3", limits=LIMITS)
    group = check_kernel_group(gw, kid, f"{SERVICE}/glovebox-{gw.host_pid}")
    reason = oom_then_restart(gw, kid, 128)
    assert "memory" in reason, reason
    events = dict(line.split() for line in read(group + "/memory.events").splitlines())
    assert int(events["oom_kill"]) >= 1, events


def test_service_stop_leaves_the_group_as_found(service, service_gateway):
    gw = service_gateway
    assert gw.stop(signal.SIGTERM) == 0, gw.read_log()
    assert glovebox_groups() == []
    assert group_state(SERVICE) == service


def test_service_restart_in_the_same_group(service):
    """What a service manager's restart does: the next gateway starts in the
    same group, works, and leaves it as found again."""
    gw = start_in_service()
    try:
        host_pid = kernel_host_pid(gw)
        kid = gw.start_kernel(name="python3", limits=LIMITS)
        check_kernel_group(gw, kid, f"{SERVICE}/glovebox-{host_pid}")
        assert value(gw, kid, "6 * 7") == 42
    finally:
        assert gw.stop(signal.SIGTERM) == 0, gw.read_log()
    assert glovebox_groups() == []
    assert group_state(SERVICE) == service
    assert children(SLICE) == ["glovebox.service"]
