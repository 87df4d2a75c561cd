"""A kernel forked from a zygote is confined exactly as an exec'd one
(kernel-host/confine.c holds the one copy of the steps both take): same
ids, capability sets, securebits, no_new_privs, seccomp, rlimits, session,
stdio and cgroup, compared side by side with a cold kernel of the same
gateway, and each checked against the values the sandbox must give."""
import os
import re
import shutil
import tempfile

import pytest

from conftest import ZYGOTE_ARGS, assert_from_zygote, run, start_gateway, value

# Run inside the kernel: what confinement leaves visible to the process.
PROBE = r"""
import ctypes, os, re


def _fd_kinds():
    kinds = set()
    for fd in os.listdir('/proc/self/fd'):
        try:
            target = os.readlink('/proc/self/fd/' + fd)
        except FileNotFoundError:
            continue  # listdir's own descriptor, closed by now
        # SQLite's rollback journal is open only while IPython's history
        # thread writes: there or not, as it happens, in either kernel.
        if not target.endswith('-journal'):
            kinds.add(re.sub(r'\[\d+\]|\d+', 'N', target))
    return sorted(kinds)


def _probe():
    libc = ctypes.CDLL(None, use_errno=True)
    status = dict(l.partition(':')[::2] for l in open('/proc/self/status').read().splitlines())
    keep = ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb',
            'NoNewPrivs', 'Seccomp', 'Seccomp_filters')
    return {
        'status': {k: status[k].strip() for k in keep},
        'securebits': libc.prctl(27, 0, 0, 0, 0),  # PR_GET_SECUREBITS
        'dumpable': libc.prctl(3, 0, 0, 0, 0),     # PR_GET_DUMPABLE
        'limits': open('/proc/self/limits').read(),
        'session_leader': os.getsid(0) == os.getpid() == os.getpgid(0),
        # A child of the sandbox's init, named as such inside: the whole
        # sandbox is one tree under it (what a checkpoint takes).
        'parent': (os.getppid(), open('/proc/1/cmdline').read()),
        'stdin': os.readlink('/proc/self/fd/0'),
        # ipykernel puts pipes of its own on 1 and 2 (it captures them).
        'stdout': os.readlink('/proc/self/fd/1').split(':')[0],
        'stderr': os.readlink('/proc/self/fd/2').split(':')[0],
        'fds': _fd_kinds(),
        'cgroup': open('/proc/self/cgroup').read(),
        # Inside ids and counts; the host ids are each sandbox's own.
        'uid_map': [l.split()[::2] for l in open('/proc/self/uid_map').read().splitlines()],
        'cwd': os.getcwd(),
    }
"""

# SECBIT_NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE and every lock but
# KEEP_CAPS's own bit: the sandbox's user can never regain a capability.
USER_SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80


@pytest.fixture(scope="module")
def gw():
    # At debug level the kernel-host says which kernels it forked from a
    # zygote.
    g = start_gateway(*ZYGOTE_ARGS, "--log-level", "debug")
    yield g
    g.stop()


def probe(gw, **start):
    kid = gw.start_kernel(name="python3", **start)
    try:
        # Before the probe imports anything: the zygote's preload is there
        # only in a kernel forked from it.
        preloaded = value(gw, kid, "'numpy' in __import__('sys').modules")
        content, _, _ = run(gw, kid, PROBE)
        assert content["status"] == "ok", content
        found = value(gw, kid, "_probe()")
        # The kernel's own id names its cgroup; the shape is what counts.
        found["cgroup"] = found["cgroup"].replace(kid, "KID")
        return kid, found, preloaded
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


def test_forked_and_exec_kernels_are_confined_alike(gw):
    kid, forked, forked_preloaded = probe(gw)
    # PYTHON* is read only as an interpreter starts: this one starts cold.
    cold_kid, cold, cold_preloaded = probe(gw, env={"PYTHONDONTWRITEBYTECODE": "1"})
    # The two really came by the two paths: the kernel-host forked the one
    # from the zygote, which left its preload in it, and exec'd the other.
    log = gw.read_log()
    assert f"[{kid[:8]}] forked from zygote python3" in log, log[-3000:]
    assert f"[{cold_kid[:8]}] forked from zygote" not in log, log[-3000:]
    assert forked_preloaded is True and cold_preloaded is False
    assert forked == cold
    # Neither copy is vacuous: each is the sandbox's user without privilege.
    assert forked["status"]["Uid"].split() == ["1000"] * 4, forked
    assert forked["status"]["Gid"].split() == ["1000"] * 4, forked
    assert forked["status"]["Groups"] == "", forked
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert forked["status"][caps] == "0000000000000000", (caps, forked)
    assert forked["status"]["NoNewPrivs"] == "1"
    assert forked["status"]["Seccomp"] == "2" and int(forked["status"]["Seccomp_filters"]) == 1
    assert forked["securebits"] == USER_SECUREBITS, hex(forked["securebits"])
    assert re.search(r"Max core file size\s+0\s+0", forked["limits"]), forked["limits"]
    assert re.search(r"Max open files\s+4096\s+4096", forked["limits"]), forked["limits"]
    assert forked["session_leader"] is True
    assert forked["parent"] == (1, "glovebox-init\0"), forked["parent"]
    assert forked["stdin"] == "/dev/null", forked["stdin"]
    assert forked["stdout"] == forked["stderr"] == "pipe", forked
    # No descriptor of the zygote's request (its memfd) or of the host.
    assert not any("memfd" in f or f.startswith("/tmp") for f in forked["fds"]), forked["fds"]
    assert "/p-KID" in forked["cgroup"], forked["cgroup"]
    assert forked["cwd"] == "/home/user"
    assert forked["uid_map"] == [["0", "1"], ["1000", "1"]], forked["uid_map"]


def test_the_comparison_sees_the_zygote(gw):
    # The probe above relies on a default kernel coming from the zygote and
    # a PYTHON* one not; if either changed, the comparison would compare a
    # path with itself.
    kid = gw.start_kernel(name="python3")
    cold = gw.start_kernel(name="python3", env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        assert_from_zygote(gw, kid)
        assert_from_zygote(gw, cold, expected=False)
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")
        gw.request("DELETE", f"/api/kernels/{cold}")


@pytest.mark.skipif(not os.path.exists("/dev/loop-control")
                    or not shutil.which("mkfs.ext4", path="/sbin:/usr/sbin"),
                    reason="disk homes need loop devices and mkfs.ext4")
def test_a_forked_kernel_works_in_a_disk_home():
    # The disk home is mounted in the sandbox's mount namespace, which the
    # zygote's child joins: its kernel's /home/user is that filesystem.
    state = tempfile.mkdtemp(prefix="glovebox-state-")
    g = start_gateway(*ZYGOTE_ARGS, "--home-storage", "disk", "--state-dir", state)
    try:
        kid = g.start_kernel()
        assert_from_zygote(g, kid)
        mounts = value(g, kid, "[l.split(' - ')[1].split()[0] for l in "
                       "open('/proc/self/mountinfo').read().splitlines() if ' /home/user ' in l]")
        assert mounts == ["ext4"], mounts
        assert value(g, kid, "(open('/home/user/f', 'w').write('x'), "
                     "__import__('os').stat('/home/user/f').st_uid)") == (1, 1000)
    finally:
        g.stop()
        shutil.rmtree(state, ignore_errors=True)
