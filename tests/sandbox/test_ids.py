"""Each kernel-host's sandboxes get host ids no other kernel-host's get. As
root it holds a range of them for its whole life, a lock (flock) on
/run/glovebox/ids/<range> that holds its pid, and takes the first range
no other holds, from its pid's (kernel-host/spawn_sandbox.c). Before, the
range was its pid modulo 16384: two kernel-hosts whose pids were alike
modulo 16384 gave their sandboxes the same host ids. (The lock files stay:
one removed while a kernel-host opens it could be held twice.)"""
import fcntl
import os
import random
import resource

import pytest

from conftest import start_gateway, value
from gbclient import kernel_host
from test_host_faults import IDS_DIR, SANDBOX_ID_BASE, SLOTS

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ranges are held as root")

RANGES = 16384


def lock(path):
    """A descriptor of path holding its lock, or None when another does."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def test_a_kernel_host_takes_a_range_no_other_holds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, RANGES + 1024), hard))
    os.makedirs(IDS_DIR, mode=0o700, exist_ok=True)
    held = {}
    try:
        # Every range but one held here (or by a kernel-host still running):
        # the new kernel-host can only take that one, whatever its pid.
        for r in range(RANGES):
            fd = lock(f"{IDS_DIR}/{r}")
            if fd is not None:
                held[r] = fd
        free = random.choice(sorted(held))
        os.close(held.pop(free))
        gw = start_gateway()
        try:
            host = kernel_host(gw)
            with open(f"{IDS_DIR}/{free}") as f:
                assert f.read().strip() == str(host)
            assert lock(f"{IDS_DIR}/{free}") is None, "held while it runs"
            kid = gw.start_kernel()
            uid_map = value(gw, kid, "open('/proc/self/uid_map').read().split()")
            root_uid, user_uid = int(uid_map[1]), int(uid_map[uid_map.index("1000") + 1])
            base = SANDBOX_ID_BASE + free * 2 * SLOTS
            assert base <= root_uid < user_uid < base + 2 * SLOTS, (free, uid_map)
        finally:
            assert gw.stop() == 0
        # Let go when it ends.
        fd = lock(f"{IDS_DIR}/{free}")
        assert fd is not None
        os.close(fd)
    finally:
        for fd in held.values():
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
