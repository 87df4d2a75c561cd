"""Checkpoints and restores on a pure cgroup v2 kernel, inside the QEMU
guest tests/qemu/run boots (Debian 12's Linux, every controller on cgroup2):
a kernel paused with its memory comes back with its variables, confined
field by field as before, its v2 limits (memory.max, pids.max, cpu.max)
the same and holding; a fork's copy gets limits of its own alike. Outside
the guest every test here is skipped: the host's hierarchy is a hybrid
(tests/integration/test_pause_memory.py runs the same checks there)."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from gbclient import host_limits, run_cell, start_gateway, value_of  # noqa: E402
from test_fork import fork  # noqa: E402
from test_pause_memory import (CRIU, assert_confined_as_source, confinement,  # noqa: E402
                               criu_usable, pause, resume)


def in_guest():
    with open("/proc/cmdline") as f:
        return any(w.startswith("QEMU_OUT=") for w in f.read().split())


pytestmark = pytest.mark.skipif(not in_guest() or not criu_usable(),
                                reason="runs inside tests/qemu/run's guest, with CRIU 4.1+")

# The emulated CPU is some 10 to 20 times slower than the host's: a kernel
# takes tens of seconds to start.
SLOW = ("--kernel-start-timeout", "900")
LIMITS = {"memory_mb": 300, "pids": 77, "cpus": 1}
EXPECTED = {"memory": str(300 << 20), "pids": "77", "cpu": "100000"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = start_gateway("--state-dir", str(tmp_path_factory.mktemp("state")), "--criu", CRIU, *SLOW)
    yield g
    g.stop()


def host_group(uid_map):
    """The cgroup of the kernel whose host uid uid_map gives, as the host
    sees it."""
    host_uid = uid_map[uid_map.index("1000") + 1]
    pids = subprocess.run(["pgrep", "-u", host_uid, "-f", "ipykernel"], capture_output=True,
                          text=True).stdout.split()
    assert pids, "no kernel process of host uid " + host_uid
    with open(f"/proc/{pids[0]}/cgroup") as f:
        return f.read()


def forks_refused(gw, kid):
    """Whether the kernel's sandbox refuses forks past its pids limit."""
    reply, out, _ = run_cell(gw, kid, (
        "import os, time\nkids = []\n"
        "try:\n    for _ in range(200):\n        pid = os.fork()\n"
        "        if pid == 0:\n            time.sleep(60); os._exit(0)\n"
        "        kids.append(pid)\nexcept OSError as e:\n    print('refused', len(kids) < 77)\n"
        "for p in kids:\n    os.kill(p, 9); os.waitpid(p, 0)"), timeout=600)
    return reply["status"] == "ok" and out == "refused True\n"


def test_the_guest_is_pure_cgroup_v2():
    with open("/proc/self/cgroup") as f:
        assert f.read().startswith("0::"), "more than one hierarchy"
    with open("/sys/fs/cgroup/cgroup.controllers") as f:
        assert {"cpu", "memory", "pids"} <= set(f.read().split())


def test_a_restored_kernel_keeps_its_memory_and_is_confined_as_before(gw):
    kid = gw.start_kernel(name="python3", limits=LIMITS)
    run_cell(gw, kid, "import random\nx = 41\nseen = random.random()", timeout=600)
    before = confinement(gw, kid)
    assert before["cgroup"].startswith("0::"), before["cgroup"]
    assert host_limits(before["uid_map"]) == EXPECTED
    pause(gw, kid)
    resume(gw, kid)
    assert value_of(gw, kid, "x + 1", timeout=600) == 42
    after = confinement(gw, kid)
    for key in before:
        assert after[key] == before[key], (key, before[key], after[key])
    assert host_limits(after["uid_map"]) == EXPECTED
    # The limits hold, not only read back.
    assert forks_refused(gw, kid)


def test_a_forks_copy_is_confined_as_its_source_with_a_group_of_its_own(gw):
    src = gw.start_kernel(name="python3", limits=LIMITS)
    run_cell(gw, src, "y = 7", timeout=600)
    before = confinement(gw, src)
    kid = fork(gw, src, 1)[0]["id"]
    assert value_of(gw, kid, "y", timeout=600) == 7
    after = confinement(gw, kid)
    assert_confined_as_source(before, after)
    # Inside, each sees its own group under the same name (its cgroup
    # namespace's root); from the host, they are two groups.
    assert host_group(after["uid_map"]) != host_group(before["uid_map"])
    assert host_limits(after["uid_map"]) == host_limits(before["uid_map"]) == EXPECTED
    assert forks_refused(gw, kid)
