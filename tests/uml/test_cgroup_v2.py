"""Glovebox on a pure cgroup v2 host, as Debian 12, Ubuntu 22.04+, RHEL 9
and Kubernetes nodes run it: the gateway in the root group, then in a
delegated service group (systemd's Delegate=yes), with memory, process and
CPU limits and nothing left behind. Runs inside the User-mode Linux guest
that tests/uml/run boots; the tests run in the order written and share the
gateways of their module."""
import errno
import os
import signal
import subprocess
import time

import pytest

from umllib import (CGROUP_ROOT, FORK_UNTIL_REFUSED, cgroup_of, children, cmdline, controllers,
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
    starts, even in a new session, is killed with it), the sandbox's init in
    a leaf beside it, so that the sandbox's group can hand memory down and
    the kernel's group be one that an out-of-memory kill takes whole."""
    process = kernel_group(parent, kernel_id)
    group = os.path.dirname(process)
    assert os.path.basename(process).startswith("p-"), process
    assert os.path.dirname(group) == parent, group
    # One directory each, on this one hierarchy. A sandbox made ahead may be
    # in the making as this looks (its group made, its init's leaf not yet):
    # the stock refills once a kernel claims one of it.
    deadline = time.time() + 10
    while children(parent) != sorted(os.path.basename(g) for g in sandbox_groups(parent)):
        assert time.time() < deadline, (children(parent), sandbox_groups(parent))
        time.sleep(0.05)
    assert "init" in children(group), children(group)
    assert all(c == "init" or c.startswith("p-") for c in children(group)), children(group)
    assert read(group + "/cgroup.procs") == ""
    init = read(group + "/init/cgroup.procs").split()
    assert len(init) == 1 and cmdline(init[0]).startswith("glovebox-init"), \
        [cmdline(p) for p in init]
    assert controllers(group) == {"memory"}
    assert read(process + "/memory.oom.group") == "1"
    assert read(process + "/memory.max") == "max"
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


def sandbox_groups(parent):
    """The sandbox groups beneath a kernel-host's parent group: those holding
    a glovebox-init."""
    return [g for g in (os.path.join(parent, c) for c in children(parent))
            if os.path.isdir(g + "/init")]


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
    # One group for the three controllers of the one hierarchy.
    assert gw.read_log().count(f"limits of memory pids cpu: cgroup v2 at {parent}\n") == 1
    assert WANTED <= controllers(parent)
    gw.group = check_kernel_group(gw, gw.kernel, parent)


def wait_for_stock(parent, n):
    """Until n sandboxes made ahead (their groups keep their stock-N names
    on v2) wait beneath parent."""
    deadline = time.time() + 30
    while len([g for g in sandbox_groups(parent)
               if os.path.basename(g).startswith("stock-")]) < n:
        assert time.time() < deadline, children(parent)
        time.sleep(0.1)


def assert_metrics_read_the_group(gw, kernel_id):
    """The metrics route reads the sandbox's group (not its init's leaf
    beneath it): the memory a cell holds is counted."""
    blob = "(globals().__setitem__('blob', bytearray(40 << 20)), len(blob))[1]"
    assert value(gw, kernel_id, blob) == 40 << 20
    status, metrics, _ = gw.request("GET", f"/api/kernels/{kernel_id}/metrics")
    assert status == 200, metrics
    assert metrics["memTotal"] == 128 << 20, metrics
    assert 40 << 20 < metrics["memUsed"] < metrics["memTotal"], metrics


def test_root_metrics_read_the_sandboxs_group(root_gateway):
    assert_metrics_read_the_group(root_gateway, root_gateway.kernel)


def test_root_a_sandbox_made_ahead_is_a_kernels_like_any(root_gateway):
    """On v2 a sandbox made ahead keeps its group's name when claimed (v2
    renames no group) and the gateway is told it: the group holds the
    request's limits and is the one the metrics read
    (docs/performance.md#sandboxes-made-ahead)."""
    gw = root_gateway
    parent = f"{CGROUP_ROOT}/glovebox-{gw.host_pid}"
    wait_for_stock(parent, 4)
    kid = gw.start_kernel(name="python3", limits=LIMITS)
    try:
        group = check_kernel_group(gw, kid, parent)
        assert os.path.basename(group).startswith("stock-"), group
        assert_metrics_read_the_group(gw, kid)
    finally:
        assert gw.request("DELETE", f"/api/kernels/{kid}")[0] == 204


def test_a_kept_kernel_in_a_sandbox_made_ahead_keeps_its_group():
    """Its group's name (not its id, on v2) is in the record of a restart
    that keeps kernels: the new image reads that group's metrics."""
    from test_restart_keep import finish, keep_gateway, restart_keeping
    gw = keep_gateway()
    try:
        parent = f"{CGROUP_ROOT}/glovebox-{kernel_host_pid(gw)}"
        gw.start_kernel(name="python3", limits=LIMITS)
        wait_for_stock(parent, 4)
        kid = gw.start_kernel(name="python3", limits=LIMITS)
        assert os.path.basename(os.path.dirname(kernel_group(parent, kid))).startswith("stock-")
        restart_keeping(gw)
        assert_metrics_read_the_group(gw, kid)
    finally:
        finish(gw)


def traced_start(gw, pid, tmp_path):
    """Starts a kernel (and has it answer) while strace follows pid and
    all it starts; returns the kernel's id and strace's lines (the calls
    that start processes and open files)."""
    trace = tmp_path / f"{pid}.strace"
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=clone3,openat,open",
                               "-o", str(trace), "-p", str(pid)])
    try:
        deadline = time.time() + 10
        while "TracerPid:\t0" in read(f"/proc/{pid}/status"):
            assert time.time() < deadline, "strace did not attach"
            time.sleep(0.05)
        kernel = gw.start_kernel(name="python3", limits=LIMITS)
        assert value(gw, kernel, "1 + 1") == 2
    finally:
        tracer.terminate()
        tracer.wait(10)
    return kernel, trace.read_text().splitlines()


def test_root_a_zygote_kernel_starts_in_its_group(tmp_path):
    """On v2 the zygote starts each kernel in its group (clone3 with
    CLONE_INTO_CGROUP) instead of moving a process there: a move, a write
    to a cgroup.procs, waits for an RCU grace period on a host with more
    than one CPU, and the zygote waits with it. strace of the zygote and
    all it starts, over one start: the clone3 into a group, no cgroup.procs
    opened; the kernel is in its group with its limits, and (as every
    kernel) holds no descriptor of the host's groups."""
    # No stock: a sandbox made ahead would hold the kernel's process forked
    # ahead (the next test), and the zygote start nothing on request.
    gw = start_gateway("--zygote", "python3:json", "--sandbox-stock", "0")
    try:
        zygote_kernel_starts_in_its_group(gw, tmp_path)
    finally:
        gw.stop()


def forked_ahead(group):
    """The one process in a sandbox group's p-ahead, once it waits there
    (its command line says so; it is the zygote's until then)."""
    procs = read(group + "/p-ahead/cgroup.procs").split() \
        if os.path.isdir(group + "/p-ahead") else []
    if len(procs) == 1 and cmdline(procs[0]).strip() == "glovebox-kernel-ahead":
        return procs[0]
    return None


def test_root_a_kernel_forked_ahead_keeps_its_groups_name(tmp_path):
    """A sandbox made ahead holds a kernel's process the zygote forked
    into it ahead, waiting in a group of its own (p-ahead) in the
    sandbox's, started there as a zygote kernel is (clone3 into the group).
    v2 renames no group: the kernel it becomes keeps that group's name, as
    its sandbox keeps stock-N, with the request's limits."""
    gw = start_gateway("--zygote", "python3:json", "--sandbox-stock", "2")
    try:
        gw.host_pid = kernel_host_pid(gw)
        parent = f"{CGROUP_ROOT}/glovebox-{gw.host_pid}"
        first = gw.start_kernel(name="python3", limits=LIMITS)
        assert value(gw, first, "1 + 1") == 2
        wait_for_stock(parent, 2)
        deadline = time.time() + 30
        while True:
            waiting = [g for g in sandbox_groups(parent)
                       if os.path.basename(g).startswith("stock-") and forked_ahead(g)]
            if len(waiting) == 2:
                break
            assert time.time() < deadline, \
                {os.path.basename(g): children(g) for g in sandbox_groups(parent)}
            time.sleep(0.1)
        kid = gw.start_kernel(name="python3", limits=LIMITS)
        group = check_kernel_group(gw, kid, parent)
        assert kernel_group(parent, kid) in [g + "/p-ahead" for g in waiting]
        assert os.path.basename(group).startswith("stock-"), group
        assert read(group + "/memory.max") == str(LIMITS["memory_mb"] << 20)
        assert value(gw, kid, "6 * 7") == 42
        gw.request("DELETE", f"/api/kernels/{kid}")
    finally:
        gw.stop()


def zygote_kernel_starts_in_its_group(gw, tmp_path):
    gw.host_pid = kernel_host_pid(gw)
    # The zygote is up once a first kernel has answered.
    first = gw.start_kernel(name="python3", limits=LIMITS)
    assert value(gw, first, "1 + 1") == 2
    gw.request("DELETE", f"/api/kernels/{first}")
    out = subprocess.run(["pgrep", "-P", str(gw.host_pid)], capture_output=True, text=True)
    (zygote,) = [int(p) for p in out.stdout.split() if "glovebox-zygote" in cmdline(p)]
    kernel, lines = traced_start(gw, zygote, tmp_path)
    text = "\n".join(lines)
    assert "CLONE_INTO_CGROUP" in text, text[-3000:]
    assert "cgroup.procs" not in text, text[-3000:]
    group = check_kernel_group(gw, kernel, f"{CGROUP_ROOT}/glovebox-{gw.host_pid}")
    assert read(group + "/memory.max") == str(LIMITS["memory_mb"] << 20)
    run(gw, kernel, "import os\nheld = []\nfor d in os.listdir('/proc/self/fd'):\n"
                    "    try:\n        held.append(os.readlink(f'/proc/self/fd/{d}'))\n"
                    "    except OSError:\n        pass")
    held = value(gw, kernel, "held")
    assert held and not [d for d in held if "cgroup" in d], held
    gw.request("DELETE", f"/api/kernels/{kernel}")


def test_root_a_started_process_starts_in_its_group(root_gateway, tmp_path):
    """The same for a process the kernel-host starts by executing it (a
    kernel without a zygote here; E2B's commands and terminals alike): its
    starter, which the kernel-host waits for, starts it in its group. Of all
    the kernel-host starts, only the kernel-host itself writes a
    cgroup.procs (making a sandbox's init, ahead of requests)."""
    gw = root_gateway
    wait_for_stock(f"{CGROUP_ROOT}/glovebox-{gw.host_pid}", 4)
    kernel, lines = traced_start(gw, gw.host_pid, tmp_path)
    assert [line for line in lines if "CLONE_INTO_CGROUP" in line], lines[-40:]
    others = [line for line in lines
              if "cgroup.procs" in line and line.split()[0] != str(gw.host_pid)]
    assert not others, others
    check_kernel_group(gw, kernel, f"{CGROUP_ROOT}/glovebox-{gw.host_pid}")
    gw.request("DELETE", f"/api/kernels/{kernel}")


def test_root_a_sandboxs_init_starts_in_its_group(tmp_path):
    """On v2 the kernel-host starts a sandbox's init in the sandbox's group
    (clone3 with CLONE_INTO_CGROUP) rather than moving it there: each move
    waits for an RCU grace period, and the kernel-host with it. strace of
    the kernel-host and all it starts over one start with a sandbox made
    for it (no stock): the init's clone3 into a group; one cgroup.procs
    written (it was two), the init's move into its leaf once its cgroup
    namespace is rooted at the group; the sandbox as every one."""
    gw = start_gateway("--sandbox-stock", "0")
    try:
        gw.host_pid = kernel_host_pid(gw)
        first = gw.start_kernel(name="python3", limits=LIMITS)
        assert value(gw, first, "1 + 1") == 2
        kernel, lines = traced_start(gw, gw.host_pid, tmp_path)
        inits = [line for line in lines
                 if "clone3" in line and "CLONE_NEWUSER" in line and "CLONE_INTO_CGROUP" in line]
        assert len(inits) == 1, lines[-40:]
        moves = [line for line in lines if "cgroup.procs" in line]
        assert len(moves) == 1 and "/init/cgroup.procs" in moves[0], moves
        check_kernel_group(gw, kernel, f"{CGROUP_ROOT}/glovebox-{gw.host_pid}")
    finally:
        gw.stop()


def test_root_pids_limit(root_gateway):
    gw = root_gateway
    events = lambda: int(read(gw.group + "/pids.events").split()[1])  # noqa: E731
    refused = events()
    content, stdout, _ = run(gw, gw.kernel, FORK_UNTIL_REFUSED)
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


SUBPROCESSES = """
import subprocess
kept = [subprocess.Popen(['sleep', '1000']),
        subprocess.Popen(['sleep', '1001'], start_new_session=True)]
print(repr([p.pid for p in kept]))
"""


def sleepers(group):
    """Host pids of the sleeps beneath group."""
    found = []
    for root, _, _ in os.walk(group):
        found += [int(p) for p in read(os.path.join(root, "cgroup.procs")).split()
                  if cmdline(p).startswith(("sleep 1000", "sleep 1001"))]
    return sorted(found)


def test_root_out_of_memory_takes_the_kernels_subprocesses(root_gateway):
    """What a kernel started, in its session or a new one, dies with it when
    the memory limit kills it (memory.oom.group on its group); the client
    still hears of the out-of-memory death, and the sandbox lives on."""
    gw = root_gateway
    process = kernel_group(f"{CGROUP_ROOT}/glovebox-{gw.host_pid}", gw.kernel)
    group = os.path.dirname(process)
    content, _, _ = run(gw, gw.kernel, SUBPROCESSES)
    assert content["status"] == "ok", content
    deadline = time.monotonic() + 10
    while len(sleepers(process)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    started = sleepers(process)
    assert len(started) == 2, (started, read(process + "/cgroup.procs"),
                               [cmdline(p) for p in read(process + "/cgroup.procs").split()])
    before = dict(line.split() for line in read(group + "/memory.events").splitlines())
    init = read(group + "/init/cgroup.procs")
    reason = oom_then_restart(gw, gw.kernel, 128)
    assert "memory" in reason, reason
    assert [p for p in started if os.path.exists(f"/proc/{p}")] == [], \
        [cmdline(p) for p in started]
    assert sleepers(group) == []
    after = dict(line.split() for line in read(group + "/memory.events").splitlines())
    # The memory limit's kill took the whole group, not the kernel-host's
    # cleanup after it (Linux 5.17 and later count that).
    assert int(after["oom_group_kill"]) > int(before["oom_group_kill"]), (before, after)
    # Same sandbox: its init was not in the killed group.
    assert read(group + "/init/cgroup.procs") == init
    assert value(gw, gw.kernel, "6 * 7") == 42


def test_root_stop_leaves_nothing(root_gateway):
    gw = root_gateway
    assert gw.stop(signal.SIGTERM) == 0
    assert glovebox_groups() == []
    assert read(CGROUP_ROOT + "/cgroup.subtree_control") == gw.found


def test_a_pooled_kernel_takes_the_limits_of_the_request_that_claims_it():
    gw = start_gateway("--pool", "python3=1")
    try:
        parent = f"{CGROUP_ROOT}/glovebox-{kernel_host_pid(gw)}"
        pool = lambda: gw.request("GET", "/api/status")[1]["pool"]["kernelspecs"]["python3"]  # noqa
        deadline = time.time() + 120
        while pool()["ready"] != 1:
            assert time.time() < deadline, pool()
            time.sleep(0.2)
        code, model, _ = gw.request("POST", "/api/kernels", {
            "name": "python3", "limits": {"memory_mb": 300, "pids": 77, "cpus": 0.5}})
        assert code == 201 and pool()["taken"] == 1, (code, model)
        group = os.path.dirname(kernel_group(parent, model["id"]))
        assert read(group + "/memory.max") == str(300 << 20)
        assert read(group + "/pids.max") == "77"
        assert read(group + "/cpu.max") == "50000 100000"
        assert value(gw, model["id"], "6 * 7") == 42
    finally:
        gw.stop()
    assert glovebox_groups() == []


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
    assert gw.read_log().count(f"limits of memory pids cpu: cgroup v2 at {parent}\n") == 1


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


# --- a group without the cpu controller -----------------------------------

NOCPU = CGROUP_ROOT + "/nocpu.slice"
NOCPU_SERVICE = NOCPU + "/glovebox.service"


@pytest.fixture
def nocpu_service():
    """A service group whose slice hands down memory and pids but not cpu,
    as systemd leaves a service without Delegate=yes whose slice has no
    cpu controller."""
    root_found = controllers(CGROUP_ROOT)
    write(CGROUP_ROOT + "/cgroup.subtree_control", "+memory +pids")
    os.mkdir(NOCPU)
    write(NOCPU + "/cgroup.subtree_control", "+memory +pids")
    os.mkdir(NOCPU_SERVICE)
    assert "cpu" not in controllers(NOCPU_SERVICE, "cgroup.controllers")
    yield ["/bin/sh", "-c", f'echo $$ >{NOCPU_SERVICE}/cgroup.procs && exec "$@"', "sh"]
    os.rmdir(NOCPU_SERVICE)
    os.rmdir(NOCPU)
    for name in ("pids", "memory"):
        if name not in root_found:
            write(CGROUP_ROOT + "/cgroup.subtree_control", "-" + name)


def test_a_limit_without_its_controller_is_refused(nocpu_service):
    gw = start_gateway(runner=nocpu_service)
    try:
        log = gw.read_log()
        assert "cpu limits are not enforced" in log, log
        assert "default limits not enforced here (the kernel-host has no cgroup controller " \
            "for them): cpus; a request naming one gets 400" in log, log
        status, body, _ = gw.request("POST", "/api/kernels",
                                     {"name": "python3", "limits": {"cpus": 0.5}})
        assert status == 400, (status, body)
        assert body["message"] == "cpus limit needs the cgroup cpu controller, which this " \
            "host does not delegate to Glovebox", body
        # Positive control: the limits it can enforce are served, and the
        # model says which of the kernel's are not.
        status, model, _ = gw.request("POST", "/api/kernels", {
            "name": "python3", "limits": {"memory_mb": 128, "pids": 32, "disk_mb": 64}})
        assert status == 201, (status, model)
        assert model["limits_not_enforced"] == ["cpus"], model
        group = os.path.dirname(kernel_group(NOCPU_SERVICE, model["id"]))
        assert read(group + "/memory.max") == str(128 * 1024 * 1024)
        assert read(group + "/pids.max") == "32"
        assert not os.path.exists(group + "/cpu.max")
        assert value(gw, model["id"], "6 * 7") == 42
        # An E2B sandbox asks for no limit by name: served with the defaults.
        status, sb, _ = gw.request("POST", "/e2b/v2/sandboxes", {"timeout": 60}, token="",
                                   headers={"X-API-KEY": gw.token})
        assert status == 201, (status, sb)
    finally:
        assert gw.stop(signal.SIGTERM) == 0, gw.read_log()

    gw = start_gateway("--allow-unenforced-limits", runner=nocpu_service)
    try:
        assert "a request naming one gets it unenforced (--allow-unenforced-limits)" in \
            gw.read_log()
        status, model, _ = gw.request("POST", "/api/kernels",
                                      {"name": "python3", "limits": {"cpus": 0.5}})
        assert status == 201, (status, model)
        assert model["limits_not_enforced"] == ["cpus"], model
        status, model, _ = gw.request("GET", f"/api/kernels/{model['id']}")
        assert model["limits_not_enforced"] == ["cpus"], model
    finally:
        assert gw.stop(signal.SIGTERM) == 0, gw.read_log()
    assert glovebox_groups() == []
