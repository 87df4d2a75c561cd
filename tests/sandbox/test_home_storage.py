"""--home-storage disk: each sandbox's /home/user is an ext4 image of its
disk limit on a loop device under --state-dir, not memory."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import run, start_gateway, value
from test_host_faults import stock_inits, wait_for
# The escape battery's /home/user checks, run again here against a gateway
# whose homes are disks (pytest collects them in this module, with its
# gateway fixture).
from test_escape import (  # noqa: F401
    test_disk_quota,
    test_host_file_canary_unreadable,
    test_kernels_cannot_see_each_other,
    test_read_only_system,
    test_restart_is_not_fooled_by_what_the_kernel_left,
)

MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/loop-control")
                                or not shutil.which("mkfs.ext4", path="/sbin:/usr/sbin"),
                                reason="disk homes need root, loop devices and mkfs.ext4")


class DiskGateway:
    def __init__(self, mode, *args):
        self.state = tempfile.mkdtemp(prefix="glovebox-state-")
        self.gw = start_gateway("--home-storage", mode, "--state-dir", self.state, *args)

    def host_pid(self):
        out = subprocess.run(["pgrep", "-P", str(self.gw.proc.pid), "-f", "kernel-host"],
                             capture_output=True, text=True).stdout.split()
        return int(out[0])

    def stop(self):
        self.gw.stop()
        shutil.rmtree(self.state, ignore_errors=True)


@pytest.fixture(scope="module")
def disk():
    d = DiskGateway("disk")
    yield d
    d.stop()


@pytest.fixture(scope="module")
def gateway(disk):
    return disk.gw


@pytest.fixture
def kernel(gateway):
    kid = gateway.start_kernel()
    yield kid
    gateway.request("DELETE", f"/api/kernels/{kid}")


def memory_group(host_pid):
    """The memory cgroup holding every sandbox of this kernel-host: beneath
    the kernel-host's own (another run's group of a recycled pid may lie
    elsewhere)."""
    with open(f"/proc/{host_pid}/cgroup") as f:
        lines = [line.rstrip("\n").split(":", 2) for line in f]
    for _, controllers, path in lines:
        if "memory" in controllers.split(","):
            group = f"/sys/fs/cgroup/memory{path.rstrip('/')}/glovebox-{host_pid}"
            if os.path.exists(os.path.join(group, "memory.stat")):
                return group
    for hid, _, path in lines:
        group = f"/sys/fs/cgroup{path.rstrip('/')}/glovebox-{host_pid}"
        if hid == "0" and os.path.exists(os.path.join(group, "memory.current")):
            return group
    raise AssertionError(f"no memory cgroup of kernel-host {host_pid}")


def unevictable_bytes(group):
    """What the group's memory holds that reclaim cannot give back: its
    anonymous and shared memory (a tmpfs file's pages are shared memory)."""
    stat = {}
    with open(os.path.join(group, "memory.stat")) as f:
        for line in f:
            key, val = line.split()
            stat[key] = int(val)
    if "total_shmem" in stat:  # cgroup v1, hierarchical
        return stat["total_shmem"] + stat["total_rss"]
    return stat["shmem"] + stat["anon"]


def backing_files():
    found = []
    for path in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(path) as f:
                found.append(f.read().strip())
        except OSError:
            pass
    return found


WRITE_BIG = """
import os
with open({path!r}, 'wb') as f:
    chunk = b'x' * (1024 * 1024)
    for _ in range(200):
        f.write(chunk)
    f.flush()
    os.fsync(f.fileno())
    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
print(os.stat({path!r}).st_size)
"""


def growth_after_write(gw, group, kid, path, settle):
    """How much the group's unevictable memory grew by writing 200 MiB to
    path. The kernel's per-cgroup statistics are flushed lazily (every 2 s
    at most), so a growth is waited for up to settle seconds."""
    before = unevictable_bytes(group)
    _, stdout, _ = run(gw, kid, WRITE_BIG.format(path=path), timeout=120)
    assert stdout.strip() == str(200 * MIB)
    deadline = time.monotonic() + settle
    grown = unevictable_bytes(group) - before
    while grown < 190 * MIB and time.monotonic() < deadline:
        time.sleep(0.25)
        grown = unevictable_bytes(group) - before
    return grown


def test_large_file_does_not_count_against_memory(disk):
    kid = disk.gw.start_kernel(name="python3", limits={"disk_mb": 300})
    try:
        group = memory_group(disk.host_pid())
        # Waited for long enough for the statistics to show it, were it there.
        grown = growth_after_write(disk.gw, group, kid, "/home/user/big", 5)
        assert grown < 50 * MIB, grown // MIB
        # Positive control, same sandbox, same measure: /tmp is a tmpfs, and
        # there the same file is 200 MiB of the sandbox's memory.
        grown = growth_after_write(disk.gw, group, kid, "/tmp/big", 30)
        assert grown >= 190 * MIB, grown // MIB
    finally:
        disk.gw.request("DELETE", f"/api/kernels/{kid}")
    # And so is it in /home/user with --home-storage memory.
    mem = DiskGateway("memory")
    try:
        kid = mem.gw.start_kernel(name="python3", limits={"disk_mb": 300})
        grown = growth_after_write(mem.gw, memory_group(mem.host_pid()), kid,
                                   "/home/user/big", 30)
        assert grown >= 190 * MIB, grown // MIB
    finally:
        mem.stop()


def test_home_is_its_own_filesystem_of_the_disk_limit(gateway):
    kid = gateway.start_kernel(name="python3", limits={"disk_mb": 100})
    try:
        code = """
import os
mnt = [l.split() for l in open('/proc/self/mountinfo') if l.split()[4] == '/home/user']
st = os.statvfs('/home/user')
print(repr((mnt[0][mnt[0].index('-') + 1], 'nosuid' in mnt[0][5], 'nodev' in mnt[0][5],
            st.f_blocks * st.f_frsize // 2**20, sorted(os.listdir('/home/user')),
            oct(os.stat('/home/user').st_mode & 0o7777), os.stat('/home/user').st_uid)))
"""
        _, stdout, _ = run(gateway, kid, code)
        fstype, nosuid, nodev, size_mb, entries, mode, uid = eval(stdout)
        assert (fstype, nosuid, nodev) == ("ext4", True, True)
        assert 80 <= size_mb <= 100, size_mb
        assert "lost+found" not in entries
        assert (mode, uid) == ("0o700", 1000)
    finally:
        gateway.request("DELETE", f"/api/kernels/{kid}")


def test_enospc_at_the_quota_and_nothing_outside(gateway):
    kid = gateway.start_kernel(name="python3", limits={"disk_mb": 64})
    try:
        code = """
import errno, os
written = 0
try:
    with open('/home/user/fill', 'wb') as f:
        while written < 512 * 2**20:
            f.write(b'y' * 2**20)
            f.flush()
            written += 2**20
        os.fsync(f.fileno())
    err = None
except OSError as e:
    err = errno.errorcode[e.errno]
print(repr((written // 2**20, err, open('/tmp/other', 'w').write('tmp still writable'))))
"""
        _, stdout, _ = run(gateway, kid, code, timeout=120)
        mb, err, tmp = eval(stdout.strip().splitlines()[-1])
        assert err == "ENOSPC" and 40 <= mb <= 64, (mb, err)
        assert tmp == len("tmp still writable")
        # Positive control: removing the file frees the space again.
        assert value(gateway, kid, "(__import__('os').unlink('/home/user/fill'), "
                     "open('/home/user/small', 'w').write('ok'))[1]") == 2
    finally:
        gateway.request("DELETE", f"/api/kernels/{kid}")


def test_files_survive_a_kernel_restart(gateway):
    kid = gateway.start_kernel()
    try:
        run(gateway, kid, "open('/home/user/kept', 'w').write('across restarts'); x = 1")
        status, _, _ = gateway.request("POST", f"/api/kernels/{kid}/restart")
        assert status == 200
        # A new kernel process (its variables are gone), the same home.
        assert value(gateway, kid, "'x' in dir()") is False
        assert value(gateway, kid, "open('/home/user/kept').read()") == "across restarts"
    finally:
        gateway.request("DELETE", f"/api/kernels/{kid}")


def test_gateway_file_calls_reach_the_disk_home(gateway, kernel):
    # The gateway's file API (through the sandbox's root) and the kernel
    # see the same files, owned by the sandbox's user.
    status, body, _ = gateway.request("PUT", f"/api/kernels/{kernel}/files/notes/a.txt",
                                      raw=b"from the API")
    assert status == 201, body
    assert value(gateway, kernel, "(open('/home/user/notes/a.txt').read(), "
                 "__import__('os').stat('/home/user/notes/a.txt').st_uid)") == (
                     "from the API", 1000)
    run(gateway, kernel, "open('/home/user/b.txt', 'w').write('from code')")
    status, listing, _ = gateway.request("GET", f"/api/kernels/{kernel}/files")
    assert status == 200
    assert ("b.txt", "file", 9) in [(e["name"], e["type"], e.get("size"))
                                    for e in listing["entries"]]


def test_e2b_file_metadata_on_a_disk_home(gateway):
    """E2B's file metadata (user.e2b.* attributes, set through the upload's
    descriptor) is kept by an ext4 home as by a tmpfs one."""
    import json
    import urllib.request

    from gbclient import e2b_create, e2b_kill, envd_headers, envd_rpc, envd_sh
    sb = e2b_create(gateway)
    try:
        code, out, err = envd_sh(gateway, sb, "stat -f -c %T /home/user")
        assert code == 0 and out.strip() in ("ext2/ext3", "ext4"), (out, err)
        req = urllib.request.Request(f"{gateway.base}/e2b/files?path=m.txt", data=b"x",
                                     method="POST",
                                     headers={**envd_headers(sb), "X-Metadata-k": "disk",
                                              "Content-Type": "application/octet-stream"})
        with urllib.request.urlopen(req) as resp:
            assert json.loads(resp.read())[0]["metadata"] == {"k": "disk"}
        status, reply = envd_rpc(gateway, sb, "filesystem.Filesystem/Stat", {"path": "m.txt"})
        assert status == 200 and reply["entry"]["metadata"] == {"k": "disk"}, reply
    finally:
        e2b_kill(gateway, sb)


def test_nothing_left_on_the_host_after_the_sandbox():
    # A gateway of its own: no other test's sandbox is ending meanwhile, and
    # none made ahead (each would hold an image of its own: the next test).
    d = DiskGateway("disk", "--sandbox-stock", "0")
    homes = os.path.join(d.state, "homes")
    try:
        kid = d.gw.start_kernel()
        run(d.gw, kid, "open('/home/user/data', 'wb').write(b'z' * 2**20)")
        # While the sandbox lives its image backs a loop device, and has no
        # name in the state directory.
        live = [b for b in backing_files() if b.startswith(homes + "/")]
        assert len(live) == 1 and live[0].endswith("(deleted)"), live
        assert os.listdir(homes) == []
        status, _, _ = d.gw.request("DELETE", f"/api/kernels/{kid}")
        assert status == 204
        deadline = time.monotonic() + 15
        left = live
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [b for b in backing_files() if b.startswith(homes + "/")]
        assert left == []
        assert os.listdir(homes) == []
    finally:
        d.stop()


def test_a_killed_kernel_host_leaves_no_image():
    # Killed hard it cleans nothing up: its sandboxes die with it (their
    # init's parent-death signal), and with them their homes' images,
    # which never had a name.
    # (No automatic restart: its kernel's new sandbox would get a new image.)
    # Sandboxes made ahead have their homes' images too: theirs go as well.
    d = DiskGateway("disk", "--no-autorestart", "--sandbox-stock", "2")
    homes = os.path.join(d.state, "homes")
    try:
        kid = d.gw.start_kernel()
        run(d.gw, kid, "open('/home/user/data', 'wb').write(b'z' * 2**20)")
        wait_for(lambda: len(stock_inits(d.host_pid())) == 2, 30, "2 sandboxes made ahead")
        old = [b for b in backing_files() if b.startswith(homes + "/")]
        assert len(old) == 3, old
        os.kill(d.host_pid(), 9)
        deadline = time.monotonic() + 20
        left = old
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [b for b in backing_files() if b.startswith(homes + "/")]
        assert left == []
        assert os.listdir(homes) == []
        # Positive control: the gateway goes on, on a new kernel-host, whose
        # sandboxes get new disk homes.
        kid2 = d.gw.start_kernel()
        assert value(d.gw, kid2, "open('/home/user/new', 'w').write('new')") == 3
    finally:
        d.stop()


def test_refused_without_what_it_needs(tmp_path):
    # A state directory that cannot be made: the gateway does not start.
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(RuntimeError, match="state directory .*: Not a directory"):
        start_gateway("--home-storage", "disk", "--state-dir", str(blocker / "state"))
    with pytest.raises(RuntimeError, match="--home-storage must be"):
        start_gateway("--home-storage", "ssd")


def test_template_sandbox_gets_a_disk_home_too(tmp_path):
    from gbtemplate import MARKER, make_tree

    tree = tmp_path / "tree"
    tree.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(tree, 0o755)
    make_tree(str(tree))
    state = tempfile.mkdtemp(prefix="glovebox-state-")
    gw = start_gateway("--home-storage", "disk", "--state-dir", state, "--template",
                       f"tpl={tree}")
    try:
        status, model, _ = gw.request("POST", "/api/kernels",
                                      {"template": "tpl", "limits": {"disk_mb": 32}})
        assert status == 201, model
        kid = model["id"]
        code = """
import os
fs = [l.split() for l in open('/proc/self/mountinfo') if l.split()[4] == '/home/user']
open('/home/user/w', 'w').write('home')
print(repr((fs[0][fs[0].index('-') + 1], open('/etc/template-marker').read(),
            open('/home/user/w').read(), os.stat('/home/user').st_uid)))
"""
        content, stdout, outputs = run(gw, kid, code)
        assert content["status"] == "ok", (content, outputs)
        assert eval(stdout) == ("ext4", MARKER, "home", 1000)
        # The tree itself is never written.
        assert not os.path.exists(tree / "home" / "user" / "w")
        gw.request("DELETE", f"/api/kernels/{kid}")
    finally:
        gw.stop()
        shutil.rmtree(state, ignore_errors=True)


def test_pause_and_fork_keep_the_memory_with_a_disk_home(tmp_path):
    """(Issue 24.) A kernel whose home is a disk pauses with its memory: the
    home's files go into the checkpoint (home.tar, sparse), the resume
    makes a new disk of the same size and puts them back, and a file the
    kernel holds open there is written on; a fork gets a disk home of its
    own with the same files, owned by its own user."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "integration"))
    from test_pause_memory import CRIU, criu_usable
    if not criu_usable():
        pytest.skip(f"memory pause needs CRIU 4.1+ at {CRIU}")
    d = DiskGateway("disk", "--criu", CRIU)
    gw = d.gw
    kids = []
    try:
        kid = gw.start_kernel(name="python3", limits={"disk_mb": 100})
        kids.append(kid)
        run(gw, kid, "x = 3\nheld = open('/home/user/log.txt', 'a')\n"
                     "held.write('one\\n'); held.flush()\n"
                     "with open('/home/user/sparse', 'wb') as f: f.truncate(50 * 2**20)")
        status, body, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
        assert status == 200 and body["paused"] == {"memory_kept": True}, body
        ckpt = [os.path.join(d.state, "checkpoints", n)
                for n in os.listdir(os.path.join(d.state, "checkpoints"))
                if not n.startswith(".")]
        assert len(ckpt) == 1 and os.path.exists(os.path.join(ckpt[0], "home.tar"))
        # The 50 MiB hole is not written out.
        assert os.stat(os.path.join(ckpt[0], "home.tar")).st_blocks * 512 < 5 * MIB
        assert gw.request("POST", f"/api/kernels/{kid}/resume")[0] == 200
        probe = """
import os
held.write('two\\n'); held.flush()
mnt = [l.split() for l in open('/proc/self/mountinfo') if l.split()[4] == '/home/user'][0]
st = os.statvfs('/home/user')
print(repr((x, open('/home/user/log.txt').read(), mnt[mnt.index('-') + 1],
            st.f_blocks * st.f_frsize // 2**20, os.stat('/home/user/sparse').st_size,
            os.stat('/home/user/log.txt').st_uid)))
"""
        _, stdout, _ = run(gw, kid, probe)
        got = eval(stdout)
        assert got[:3] == (3, "one\ntwo\n", "ext4") and 80 <= got[3] <= 100, got
        assert got[4:] == (50 * MIB, 1000), got
        status, body, _ = gw.request("POST", f"/api/kernels/{kid}/fork", {"count": 1})
        assert status == 201, body
        copy = body["kernels"][0]["id"]
        kids.append(copy)
        _, stdout, _ = run(gw, copy, probe)
        got = eval(stdout)
        assert got[:3] == (3, "one\ntwo\ntwo\n", "ext4") and got[4:] == (50 * MIB, 1000), got
        # Its own disk: what it wrote is not in the source's.
        assert value(gw, kid, "open('/home/user/log.txt').read()") == "one\ntwo\n"
    finally:
        for k in kids:
            gw.request("DELETE", f"/api/kernels/{k}")
        d.stop()
