"""Helpers for the checks that run inside the User-mode Linux guest
(tests/uml/run boots it): cgroup files, the gateway's processes, code run in
a kernel. Outside the guest every test here is skipped: they change the
machine's cgroups."""
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from gbclient import expect_out_of_memory, run_cell as run, value_of as value  # noqa: E402,F401

CGROUP_ROOT = "/sys/fs/cgroup"


def in_guest():
    with open("/proc/cmdline") as f:
        return "glovebox_uml=1" in f.read().split()


only_in_guest = pytest.mark.skipif(not in_guest(), reason="runs inside tests/uml/run's guest")


def read(path):
    with open(path) as f:
        return f.read().strip()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def controllers(group, file="cgroup.subtree_control"):
    return set(read(os.path.join(group, file)).split())


def cgroup_of(pid):
    """The process's group as a directory (pure v2: one line, "0::/path")."""
    lines = read(f"/proc/{pid}/cgroup").splitlines()
    assert len(lines) == 1 and lines[0].startswith("0::"), lines
    return os.path.normpath(CGROUP_ROOT + lines[0][3:])


def children(group):
    return sorted(e.name for e in os.scandir(group) if e.is_dir())


def group_state(group):
    """What a service manager sees of a delegated group: its children, the
    controllers it hands down, and the processes directly in it."""
    return {"children": children(group), "subtree_control": read(group + "/cgroup.subtree_control"),
            "procs": read(group + "/cgroup.procs")}


def glovebox_groups():
    found = []
    for root, dirs, _ in os.walk(CGROUP_ROOT):
        found += [os.path.join(root, d) for d in dirs if d.startswith("glovebox-")]
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kernel_host_pid(gw):
    out = subprocess.run(["pgrep", "-P", str(gw.proc.pid)], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split() if "kernel-host" in cmdline(p)]
    assert len(pids) == 1, (out.stdout, [cmdline(p) for p in out.stdout.split()])
    return pids[0]


def kernel_group(parent, kernel_id):
    """The group beneath parent that holds the kernel's process (its command
    line names its connection file, /run/kernel/<id[:8]>.json)."""
    mark = f"/run/kernel/{kernel_id[:8]}.json"
    for root, _, _ in os.walk(parent):
        for pid in read(os.path.join(root, "cgroup.procs")).split():
            if mark in cmdline(pid):
                return root
    raise AssertionError(f"no group beneath {parent} holds kernel {kernel_id}")


def oom_then_restart(gw, kernel_id, limit_mb):
    """Allocates 1 GiB in a kernel limited to limit_mb: the client must get
    KernelOutOfMemory as the cell's error and reply, then dead, restarting,
    idle; the restarted kernel is fresh. Returns the model's reason."""
    ch = gw.connect(kernel_id)
    try:
        msg_id = ch.send("execute_request", {"code": "x = bytearray(1024 * 1024 * 1024)",
                                             "silent": False})
        expect_out_of_memory(ch, msg_id, limit_mb)
    finally:
        ch.close()
    status, model, _ = gw.request("GET", f"/api/kernels/{kernel_id}")
    assert status == 200, model
    return model.get("reason", "")


FORK_UNTIL_REFUSED = """
import os
children, error = [], None
for i in range(1000):
    try:
        pid = os.fork()
    except OSError as e:
        error = e.errno
        break
    if pid == 0:
        # An exec'd sleep holds a process slot without the kernel's memory.
        try:
            os.execv('/usr/bin/sleep', ['sleep', '60'])
        finally:
            os._exit(1)
    children.append(pid)
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(repr((len(children), error)))
"""

BUSY = """
import time
start = time.time()
while time.time() - start < {seconds}:
    pass
"""


def cpu_share(gw, kernel_id, group, seconds=3):
    """Busy-loops in the kernel; returns (usage / wall time, throttled
    periods), both read from the group's cpu.stat."""
    def stat():
        return dict(line.split() for line in read(group + "/cpu.stat").splitlines())
    before, t0 = stat(), time.monotonic()
    content, _, _ = run(gw, kernel_id, BUSY.format(seconds=seconds))
    after, t1 = stat(), time.monotonic()
    assert content["status"] == "ok", content
    used = (int(after["usage_usec"]) - int(before["usage_usec"])) / 1e6
    return used / (t1 - t0), int(after["nr_throttled"]) - int(before["nr_throttled"])
