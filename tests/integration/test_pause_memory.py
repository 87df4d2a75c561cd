"""Pause that keeps a kernel's memory: with CRIU (4.1 or newer; scripts/test
builds it), POST /api/kernels/{id}/pause checkpoints the kernel's whole
sandbox under --state-dir and frees it, and POST .../resume restores it: the
same kernel with its variables, execution count, the processes it started,
its /tmp and home, confined as before. test_pause.py has the files-only
pause of hosts without CRIU."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

import signal
import threading

from gbclient import (THREAD_CORES_IN_KERNEL, assert_pids_limit_holds, checkpoint_dirs, cmdline,
                      host_limits, kernel_host, kernel_pids, run_cell, start_gateway, thread_cores,
                      value_of)

CRIU = os.environ.get("GLOVEBOX_CRIU", "/usr/local/sbin/criu")


def criu_usable():
    try:
        out = subprocess.run([CRIU, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return False
    m = re.search(r"Version: (\d+)\.(\d+)", out)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (4, 1)


pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not criu_usable(),
                                reason=f"memory pause needs root and CRIU 4.1+ at {CRIU} "
                                       "(scripts/test builds it)")


@pytest.fixture
def state(tmp_path):
    return str(tmp_path / "state")


@pytest.fixture
def gw(state):
    g = start_gateway("--state-dir", state, "--criu", CRIU)
    yield g
    g.stop()


def wait_gone(path, timeout=10):
    deadline = time.time() + timeout
    while os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(path), path


def pause(gw, kid):
    status, model, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
    assert status == 200, model
    assert model["execution_state"] == "paused" and model["paused"] == {"memory_kept": True}, model
    return model


def resume(gw, kid):
    status, model, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
    assert status == 200, model
    assert model["id"] == kid and model["execution_state"] == "idle", model
    return model


def test_pause_and_resume_keep_variables_count_processes_and_files(gw, state):
    kid = gw.start_kernel()
    ch = gw.connect(kid)
    try:
        reply, _ = ch.execute("import subprocess, os, random\n"
                              "x = 41\n"
                              "data = bytes(random.getrandbits(8) for _ in range(1 << 16))\n"
                              "child = subprocess.Popen(['sleep', '1000'])\n"
                              "open('/tmp/t.txt', 'w').write('tmp')\n"
                              "open('/home/user/h.txt', 'w').write('home')")
        assert reply["content"]["status"] == "ok", reply
        count = reply["content"]["execution_count"]
    finally:
        ch.close()
    digest = value_of(gw, kid, "__import__('hashlib').sha256(data).hexdigest()")
    child_pid = value_of(gw, kid, "child.pid")

    pause(gw, kid)
    paused_dir = os.path.join(state, "paused", kid)
    assert os.listdir(paused_dir) == ["meta.json"]
    meta = json.load(open(os.path.join(paused_dir, "meta.json")))
    assert meta["memoryKept"] is True and meta["kind"] == "kernel"
    checkpoint = os.path.join(state, "checkpoints", meta["checkpoint"])
    assert {"box.json", "files.tar", "inventory.img"} <= set(os.listdir(checkpoint))
    # Its memory is freed: no process of the kernel's user is left.
    assert not subprocess.run(["pgrep", "-f", kid], capture_output=True).stdout
    status, listed, _ = gw.request("GET", "/api/kernels")
    assert [(k["id"], k["execution_state"], k.get("paused")) for k in listed] == \
        [(kid, "paused", {"memory_kept": True})]

    resume(gw, kid)
    assert not os.path.exists(paused_dir)
    # The kernel-host removes the checkpoint once the gateway has it back.
    wait_gone(checkpoint)
    ch = gw.connect(kid)
    try:
        reply, outputs = ch.execute(
            "print(x + 1, child.poll(), child.pid, open('/tmp/t.txt').read(),"
            " open('/home/user/h.txt').read())")
        assert reply["content"]["status"] == "ok", reply
        # The count goes on from where it was, as in one kernel.
        assert reply["content"]["execution_count"] == count + 3, reply
    finally:
        ch.close()
    out = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
    assert out == f"42 None {child_pid} tmp home\n"
    assert value_of(gw, kid, "__import__('hashlib').sha256(data).hexdigest()") == digest
    # Paused and resumed again: a restored sandbox checkpoints as a made one.
    pause(gw, kid)
    resume(gw, kid)
    assert value_of(gw, kid, "x") == 41


def confinement(gw, kid):
    """What confines the kernel, as it sees it."""
    return value_of(gw, kid, (
        "{'status': {l.split(':')[0]: l.split(':', 1)[1].strip()"
        "  for l in open('/proc/self/status') if l.split(':')[0] in"
        "  ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb',"
        "   'NoNewPrivs', 'Seccomp', 'Seccomp_filters')},"
        " 'uid_map': open('/proc/self/uid_map').read().split(),"
        " 'gid_map': open('/proc/self/gid_map').read().split(),"
        " 'mounts': sorted((l.split()[4], l.split(' - ')[1].split()[0],"
        "   ','.join(o for o in l.split()[5].split(',') if o in ('ro', 'rw', 'nosuid', 'nodev',"
        "   'noexec'))) for l in open('/proc/self/mountinfo')),"
        " 'cgroup': open('/proc/self/cgroup').read(),"
        " 'limits': open('/proc/self/limits').read(),"
        " 'hostname': __import__('socket').gethostname(),"
        " 'links': sorted(__import__('os').listdir('/sys/class/net')) if"
        "   __import__('os').path.exists('/sys/class/net') else None,"
        " 'pid1': open('/proc/1/cmdline').read()}"))


def assert_confined_as_source(before, after):
    """A copy's confinement (a fork's) against its source's: every field
    the same but the host ids and the cgroup, which are its own."""
    for key in before:
        if key in ("uid_map", "gid_map", "cgroup"):
            continue
        assert after[key] == before[key], (key, before[key], after[key])
    assert after["uid_map"] != before["uid_map"]
    assert after["gid_map"] != before["gid_map"]

def test_shared_anonymous_memory_and_memfds_are_kept_through_a_pause(gw):
    """Memory mapped shared and anonymous (mmap(-1)) or from a memfd is
    the kernel's own, not a file of the host: the dump takes its contents,
    and the restore gives them back (a zygote kernel's report on its start
    is such memory, kernel-host/zygote_pages.h)."""
    kid = gw.start_kernel()
    run_cell(gw, kid, "import mmap, os\n"
                      "anon = mmap.mmap(-1, 8192)\n"
                      "anon[:6] = b'shared'\n"
                      "fd = os.memfd_create('cells')\n"
                      "os.ftruncate(fd, 4096)\n"
                      "mf = mmap.mmap(fd, 4096)\n"
                      "mf[:5] = b'memfd'")
    pause(gw, kid)
    resume(gw, kid)
    assert value_of(gw, kid, "(anon[:6], mf[:5], os.pread(fd, 5, 0))") == \
        (b"shared", b"memfd", b"memfd")


def test_a_restored_kernel_is_confined_exactly_as_before(gw):
    limits = {"memory_mb": 300, "pids": 77, "cpus": 0.5}
    kid = gw.start_kernel(name="python3", limits=limits)
    before = confinement(gw, kid)
    before_limits = host_limits(before["uid_map"])
    assert before_limits == {"memory": str(300 << 20), "pids": "77", "cpu": "50000"}, \
        before_limits
    pause(gw, kid)
    resume(gw, kid)
    after = confinement(gw, kid)
    for key in before:
        assert after[key] == before[key], (key, before[key], after[key])
    assert host_limits(after["uid_map"]) == before_limits
    # The limits hold, not only read back: past its pids limit a fork fails.
    assert_pids_limit_holds(gw, kid, 77)


def test_a_memory_paused_kernel_outlives_the_gateway(state):
    gw = start_gateway("--state-dir", state, "--criu", CRIU)
    try:
        kid = gw.start_kernel()
        run_cell(gw, kid, "secret = 'kept across gateways'")
        pause(gw, kid)
    finally:
        gw.stop()
    gw = start_gateway("--state-dir", state, "--criu", CRIU)
    try:
        status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        assert status == 200 and model["paused"] == {"memory_kept": True}, model
        resume(gw, kid)
        assert value_of(gw, kid, "secret") == "kept across gateways"
    finally:
        gw.stop()


def clear_cgroups_of(host):
    """What a reboot clears of a killed kernel-host beyond its runtime
    directory: its glovebox-<pid> cgroups (left in place, they are a leak
    that a later kernel-host given the same pid would find)."""
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if f"glovebox-{host}" not in dirs:
            continue
        dirs.remove(f"glovebox-{host}")
        for group, _, _ in sorted(os.walk(os.path.join(root, f"glovebox-{host}")),
                                  key=lambda w: -len(w[0])):
            for _ in range(100):  # killed processes leave a moment later
                try:
                    os.rmdir(group)
                    break
                except OSError:
                    time.sleep(0.05)
            assert not os.path.exists(group), group


def test_a_memory_paused_kernel_outlives_a_reboot(state):
    """What a reboot leaves is the state directory alone: every process of
    Glovebox killed at once (no chance to save anything then), its runtime
    directory gone (a tmpfs at boot). A new gateway on the same state
    directory still lists the paused kernel and resumes it with its memory
    and files."""
    # Where sandboxes can reach, as /tmp is (pytest's tmp_path is 0700).
    first_run, second_run = (tempfile.mkdtemp(prefix="glovebox-run-") for _ in range(2))
    for d in (first_run, second_run):
        os.chmod(d, 0o755)
    gw = start_gateway("--state-dir", state, "--criu", CRIU, "--runtime-dir", str(first_run))
    try:
        kid = gw.start_kernel()
        run_cell(gw, kid, "secret = 'kept across a reboot'\n"
                          "open('/tmp/t.txt', 'w').write('tmp too')")
        pause(gw, kid)
        host = kernel_host(gw)
        os.kill(host, signal.SIGKILL)
        gw.proc.kill()
        gw.proc.wait()
        for _ in range(100):  # the kernel-host's zombie is reaped by init
            if not os.path.exists(f"/proc/{host}"):
                break
            time.sleep(0.05)
    finally:
        gw.stop()
    shutil.rmtree(first_run, ignore_errors=True)
    clear_cgroups_of(host)
    gw = start_gateway("--state-dir", state, "--criu", CRIU, "--runtime-dir", str(second_run))
    try:
        status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        assert status == 200 and model["paused"] == {"memory_kept": True}, model
        resume(gw, kid)
        assert value_of(gw, kid, "(secret, open('/tmp/t.txt').read())") == \
            ("kept across a reboot", "tmp too")
    finally:
        gw.stop()
        shutil.rmtree(second_run, ignore_errors=True)


def test_a_deleted_paused_kernel_leaves_no_checkpoint(gw, state):
    kid = gw.start_kernel()
    pause(gw, kid)
    assert len(checkpoint_dirs(state)) == 1
    assert gw.request("DELETE", f"/api/kernels/{kid}")[0] == 204
    deadline = time.time() + 10
    while checkpoint_dirs(state) and time.time() < deadline:
        time.sleep(0.1)
    assert checkpoint_dirs(state) == []
    assert gw.request("POST", f"/api/kernels/{kid}/resume")[0] == 404


def test_a_checkpoint_that_cannot_be_restored_leaves_the_kernel_paused(gw, state):
    kid = gw.start_kernel()
    run_cell(gw, kid, "y = 7")
    pause(gw, kid)
    meta = json.load(open(os.path.join(state, "paused", kid, "meta.json")))
    archive = os.path.join(state, "checkpoints", meta["checkpoint"], "files.tar")
    os.rename(archive, archive + ".away")
    status, body, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
    assert status == 500 and "stays paused" in body["message"], body
    status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
    assert status == 200 and model["execution_state"] == "paused", model
    # Nothing of the failed restore is left to block the next one.
    os.rename(archive + ".away", archive)
    resume(gw, kid)
    assert value_of(gw, kid, "y") == 7


def test_a_checkpoint_changed_on_disk_is_refused(gw, state):
    """Every file of a checkpoint but the pages' contents is sealed at the
    dump (manifest.json, HMAC-SHA256 under the kernel-host's key): one
    changed, added or removed is refused, and the kernel stays paused."""
    kid = gw.start_kernel()
    run_cell(gw, kid, "y = 7")
    pause(gw, kid)
    meta = json.load(open(os.path.join(state, "paused", kid, "meta.json")))
    cp = os.path.join(state, "checkpoints", meta["checkpoint"])
    core = sorted(n for n in os.listdir(cp) if n.startswith("core-"))[0]

    def flip(name):
        path = os.path.join(cp, name)
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2] ^= 1
        open(path, "wb").write(data)

    def added():
        open(os.path.join(cp, "extra.img"), "wb").write(b"\0" * 16)

    def removed_extra():
        os.unlink(os.path.join(cp, "extra.img"))

    def resealed():
        # A manifest rewritten without the key does not pass either.
        path = os.path.join(cp, "manifest.json")
        m = json.load(open(path))
        m["files"]["box.json"] = "0" * 64
        open(path, "w").write(json.dumps(m))
        return m

    original_manifest = open(os.path.join(cp, "manifest.json")).read()
    for change, undo in ((lambda: flip(core), lambda: flip(core)),
                         (lambda: flip("box.json"), lambda: flip("box.json")),
                         (lambda: flip("files.tar"), lambda: flip("files.tar")),
                         (added, removed_extra),
                         (resealed, lambda: open(os.path.join(cp, "manifest.json"), "w")
                          .write(original_manifest))):
        change()
        status, body, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
        assert status == 500 and "sealed" in body["message"], body
        assert gw.request("GET", f"/api/kernels/{kid}")[1]["execution_state"] == "paused"
        undo()
    resume(gw, kid)
    assert value_of(gw, kid, "y") == 7


def test_a_busy_kernel_is_paused_mid_cell_and_finishes_it_after(gw):
    kid = gw.start_kernel()
    ch = gw.connect(kid)
    try:
        ch.send("execute_request", {"code": "import time\nfor i in range(30):\n"
                                            "    time.sleep(0.1)\nz = i", "silent": False,
                                    "store_history": True, "user_expressions": {},
                                    "allow_stdin": False, "stop_on_error": True})
        time.sleep(0.5)
    finally:
        ch.close()
    pause(gw, kid)
    resume(gw, kid)
    deadline = time.time() + 30
    while time.time() < deadline:
        ch = gw.connect(kid)
        try:
            reply, outputs = ch.execute("print(globals().get('z'))")
        finally:
            ch.close()
        out = "".join(m["content"].get("text", "") for m in outputs
                      if m["msg_type"] == "stream")
        if out == "29\n":
            break
        time.sleep(0.5)
    assert out == "29\n"


def test_a_zygote_kernel_is_paused_with_its_memory(state):
    """A kernel forked from a zygote maps the zygote's interpreter and
    modules, loaded from the host's /usr before the fork, on mounts that are
    not its sandbox's: the kernel-host names each to CRIU as external and
    hands it back, the same host file, at the restore. Variables, the
    modules the zygote preloaded and files are kept, through a fork too; a
    host file that changed meanwhile fails the resume, saying which, and the
    kernel stays paused."""
    gw = start_gateway("--state-dir", state, "--criu", CRIU, "--zygote", "python3:json,decimal")
    try:
        kid = gw.start_kernel()
        run_cell(gw, kid, "open('/home/user/z.txt', 'w').write('zygote')\nv = 5\n"
                          "import json, decimal\nd = decimal.Decimal('1.5')")
        before = confinement(gw, kid)
        status, model, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
        assert status == 200 and model["paused"] == {"memory_kept": True}, model
        [ckpt] = checkpoint_dirs(state)
        with open(os.path.join(state, "checkpoints", ckpt, "box.json")) as f:
            foreign = json.load(f)["foreign"]
        # The zygote's own interpreter and the libraries it loaded, its
        # module among them.
        paths = [rec["path"] for rec in foreign.values()]
        assert any(p.endswith("glovebox-zygote.so") for p in paths), paths
        assert any("_decimal" in p for p in paths), paths
        # A host file that is not as it was (here the zygote's module,
        # touched): the resume fails naming it, and the kernel stays paused.
        program = next(p for p in paths if p.endswith("glovebox-zygote.so"))
        st = os.stat(program)
        os.utime(program, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        try:
            status, body, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
            assert status == 500 and program in body["message"], body
            assert gw.request("GET", f"/api/kernels/{kid}")[1]["execution_state"] == "paused"
        finally:
            os.utime(program, ns=(st.st_atime_ns, st.st_mtime_ns))
        resume(gw, kid)
        probe = "(open('/home/user/z.txt').read(), v, str(d * 2), json.dumps([v]))"
        assert value_of(gw, kid, probe) == ("zygote", 5, "3.0", "[5]")
        # Confined exactly as before, field by field.
        after = confinement(gw, kid)
        for key in before:
            assert after[key] == before[key], (key, before[key], after[key])
        status, body, _ = gw.request("POST", f"/api/kernels/{kid}/fork", {"count": 1})
        assert status == 201, body
        copy = body["kernels"][0]["id"]
        assert value_of(gw, copy, probe) == ("zygote", 5, "3.0", "[5]")
        gw.request("DELETE", f"/api/kernels/{copy}")
    finally:
        gw.stop()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_a_zygote_kernel_paused_as_it_started_has_every_core_at_its_first_cell(state):
    """A zygote kernel that started on a quiet machine keeps its threads on
    one core until a request could run code (docs/performance.md#zygotes).
    Paused so, before its first cell: CRIU does not keep a thread's
    affinity, so it resumes on every core, and its first cell finds every
    thread there (the hold's release, restored with the kernel's memory,
    sets what it was started with)."""
    gw = start_gateway("--state-dir", state, "--criu", CRIU, "--zygote", "python3:json")
    every = set(thread_cores(gw.proc.pid))
    try:
        for _ in range(6):
            running = kernel_pids()
            kid = gw.start_kernel()
            (pid,) = kernel_pids() - running
            if set(thread_cores(pid)) != every:
                break
            gw.request("DELETE", f"/api/kernels/{kid}")
            time.sleep(0.2)
        else:
            pytest.fail("no kernel of six serial starts was held on its core")
        pause(gw, kid)
        resume(gw, kid)
        (pid,) = kernel_pids() - running
        assert set(thread_cores(pid)) == every
        assert value_of(gw, kid, THREAD_CORES_IN_KERNEL) == sorted(every)
    finally:
        gw.stop()


def in_background(fn):
    """Runs fn in a thread; returns a getter of its result."""
    box = {}

    def run():
        try:
            box["r"] = fn()
        except Exception as e:  # noqa: BLE001 (said by result())
            box["e"] = e
    t = threading.Thread(target=run)
    t.start()

    def result():
        t.join(120)
        assert not t.is_alive(), "the request hung"
        assert "e" not in box, f"the request failed: {box['e']!r}"
        return box["r"]
    return result


def wait_for(cond, timeout=20):
    """Whether cond held at some look within timeout: what that look saw,
    not a look after it (a helper seen can be gone by then)."""
    deadline = time.time() + timeout
    while True:
        if cond():
            return True
        if time.time() >= deadline:
            return False
        time.sleep(0.005)


def test_the_kernel_host_killed_during_a_dump_leaves_nothing_half_paused(gw, state):
    kid = gw.start_kernel()
    run_cell(gw, kid, "x = 3")
    host = kernel_host(gw)
    checkpoints = os.path.join(state, "checkpoints")
    answer = in_background(lambda: gw.request("POST", f"/api/kernels/{kid}/pause"))
    # The dump has begun: its directory is there under its .new name.
    assert wait_for(lambda: any(n.endswith(".new") for n in os.listdir(checkpoints)))
    os.kill(host, signal.SIGKILL)
    status, body, _ = answer()
    assert status == 500 and "keeps running" in body["message"], body
    # Not paused: no record, and what the dead kernel-host left is removed
    # by the next one.
    assert not os.path.exists(os.path.join(state, "paused", kid))
    assert wait_for(lambda: kernel_host_other(gw, host))
    assert wait_for(lambda: checkpoint_dirs(state) == []), checkpoint_dirs(state)
    # The kernel is there (its sandbox died with the kernel-host, as every
    # one does: it restarts), and pauses with its memory again.
    assert wait_for(lambda: gw.request("GET", f"/api/kernels/{kid}")[1].get(
        "execution_state") == "idle", 60)
    run_cell(gw, kid, "x = 4")
    pause(gw, kid)
    resume(gw, kid)
    assert value_of(gw, kid, "x") == 4


def kernel_host_other(gw, old):
    try:
        return kernel_host(gw) != old
    except AssertionError:
        return False


def proc_children(pid):
    """pid's children, read from /proc: no subprocess, so a poll every few
    milliseconds sees a child that lives a few tens of them."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return out


def test_the_kernel_host_killed_during_a_restore_leaves_the_kernel_paused(gw, state):
    kid = gw.start_kernel()
    # 64 MiB that CRIU must read back (random: no page of it is skipped),
    # so that the restore lasts long enough to be seen (a fresh kernel's
    # can be over between two looks, and once was in CI).
    run_cell(gw, kid, "x = 5\nballast = __import__('os').urandom(1 << 26)")
    pause(gw, kid)
    host = kernel_host(gw)
    own, before = cmdline(host), set(proc_children(host))
    answer = in_background(lambda: gw.request("POST", f"/api/kernels/{kid}/resume"))
    # The restore has begun: the kernel-host forked for it (its worker, then
    # criu; a fresh kernel's whole restore can be over in tens of ms). Each
    # helper seen is kept: one can be gone by the next look (CI once saw
    # one, then failed on a second look that did not).
    seen = set()

    def forked():
        seen.update(c for c in set(proc_children(host)) - before
                    if cmdline(c) == own or b"criu" in cmdline(c))
        return seen

    assert wait_for(forked)
    helpers = seen | (set(proc_children(host)) - before)
    os.kill(host, signal.SIGKILL)
    # Nothing it forked for the restore outlives it (a helper that did kept
    # its link to the gateway open, and the resume was never answered).
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{p}") and cmdline(p) for p in helpers))
    status, body, _ = answer()
    assert status == 500 and "stays paused" in body["message"], body
    status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
    assert status == 200 and model["execution_state"] == "paused", model
    # Its checkpoint is whole: the next kernel-host restores it.
    assert wait_for(lambda: kernel_host_other(gw, host))
    resume(gw, kid)
    assert value_of(gw, kid, "x") == 5


def test_a_full_disk_during_a_dump_fails_the_pause_and_the_kernel_runs_on(tmp_path):
    """The state directory on a filesystem too small for the checkpoint (a
    fresh kernel's is about 50 MiB): the pause fails, nothing is left, and
    the kernel runs on with its variables."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(small)], check=True)
    try:
        state = str(small / "state")
        gw = start_gateway("--state-dir", state, "--criu", CRIU)
        try:
            kid = gw.start_kernel()
            run_cell(gw, kid, "x = 6")
            status, body, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
            assert status == 500 and "keeps running" in body["message"], body
            assert checkpoint_dirs(state) == []
            assert not os.path.exists(os.path.join(state, "paused", kid))
            assert value_of(gw, kid, "x") == 6
        finally:
            gw.stop()
    finally:
        subprocess.run(["umount", "-l", str(small)])


def test_checkpoints_count_against_the_pause_quota(tmp_path):
    """A checkpoint's size is recorded with its paused kernel and counted in
    its key's --pause-quota-mb; a kernel whose memory and files in use would
    not fit in what is left is paused with its files, saying why, before
    anything is written; deleting a paused kernel gives its room back."""
    state = str(tmp_path / "state")
    g = start_gateway("--state-dir", state, "--criu", CRIU, "--pause-quota-mb", "100")
    try:
        first = g.start_kernel()
        g.connect(first).execute("x = 1")
        pause(g, first)
        with open(os.path.join(state, "paused", first, "meta.json")) as f:
            recorded = json.load(f)["checkpointBytes"]
        cp = os.path.join(state, "checkpoints", checkpoint_dirs(state)[0])
        on_disk = sum(os.stat(os.path.join(cp, n)).st_blocks * 512 for n in os.listdir(cp)
                      if os.path.isfile(os.path.join(cp, n)))
        assert 10 << 20 < recorded == on_disk, (recorded, on_disk)

        # What the first left (100 MiB less its checkpoint) holds no kernel.
        second = g.start_kernel()
        g.connect(second).execute("y = 2")
        status, model, _ = g.request("POST", f"/api/kernels/{second}/pause")
        assert status == 200, model
        assert model["paused"]["memory_kept"] is False, model
        assert "--pause-quota-mb" in model["paused"]["notice"], model
        assert len(checkpoint_dirs(state)) == 1

        # The first deleted, its room is back.
        assert g.request("DELETE", f"/api/kernels/{first}")[0] == 204
        wait_gone(cp)
        third = g.start_kernel()
        g.connect(third).execute("z = 3")
        pause(g, third)
        resume(g, third)
        assert value_of(g, third, "z") == 3
    finally:
        g.stop()


def yard_names():
    """The kernel-host's cgroup hierarchies (the gateway's, which it
    inherits) as CRIU names them in a cgroup yard."""
    names = set()
    with open("/proc/self/cgroup") as f:
        for line in f:
            controllers = line.rstrip("\n").split(":", 2)[1]
            names.add(controllers.removeprefix("name=") or "unified")
    return names


def test_criu_keeps_what_it_learns_of_the_kernel_between_runs(tmp_path):
    """CRIU learns what the kernel can do at each run unless it finds
    /run/criu.kdat from an earlier one, which it keeps only on a tmpfs; and
    it mounts every cgroup hierarchy again at each run unless given a yard
    that has them. Each criu runs with the kernel-host's own tmpfs as /run:
    the first run leaves criu.kdat there, the later ones find it; each dump
    and restore is given the yard on it, where every hierarchy's root is
    bound; and the host's /run gets nothing."""
    seen = tmp_path / "seen"
    wrapper = tmp_path / "criu"
    yard = "/run/glovebox-cgroup-yard"
    wrapper.write_text("#!/bin/sh\n"
                       "told=no\n"
                       f"case \" $* \" in *\" --cgroup-yard {yard} \"*) told=yes;; esac\n"
                       f"bound=$(for d in {yard}/*; do [ -e \"$d/cgroup.procs\" ] && "
                       "basename \"$d\"; done | tr '\\n' ,)\n"
                       "echo \"$1 $(stat -f -c %T /run) $told ${bound:-none} "
                       f"$(ls /run | tr '\\n' ' ')\" >> {seen}\n"
                       f"exec {CRIU} \"$@\"\n")
    wrapper.chmod(0o755)
    host_had = os.path.exists("/run/criu.kdat")
    g = start_gateway("--state-dir", str(tmp_path / "state"), "--criu", str(wrapper))
    try:
        kid = g.start_kernel()
        run_cell(g, kid, "x = 41")
        for _ in range(2):
            pause(g, kid)
            resume(g, kid)
        assert value_of(g, kid, "x + 1") == 42
    finally:
        g.stop()
    runs = [(line.split(maxsplit=4) + [""])[:5] for line in seen.read_text().splitlines()]
    runs = [r for r in runs if r[0] in ("dump", "restore")]
    assert [r[0] for r in runs] == ["dump", "restore"] * 2, runs
    assert all(r[1] == "tmpfs" for r in runs), runs
    # Every dump and restore told of the yard, with each hierarchy there.
    assert all(r[2] == "yes" for r in runs), runs
    assert all(set(r[3].strip(",").split(",")) == yard_names() for r in runs), runs
    # The first run made criu.kdat; every later one had it to read.
    assert all("criu.kdat" in r[4].split() for r in runs[1:]), runs
    # Nothing of the host's /run is in criu's.
    assert all(set(r[4].split()) <= {"criu.kdat", "glovebox-cgroup-yard"} for r in runs), runs
    assert os.path.exists("/run/criu.kdat") == host_had
    assert not os.path.exists(yard)


def test_a_restore_puts_each_thread_with_its_process(tmp_path):
    """CRIU 4.2 recorded a set of cgroups for every thread of a process
    other than the sandbox's init (the kernel), each compared with the
    process's before its cgroup namespace prefix was set, so none matched,
    and the restore moved every thread into its cgroups again, which waits
    out an RCU grace period (about 15 ms of every resume here). With
    deploy/criu's fix, the kernel's threads share its set, and the restore
    moves none of them."""
    wrapper = tmp_path / "criu"
    dirs = tmp_path / "dirs"
    # criu restore must be exec'd (--restore-sibling): its work directory
    # is written down, and its log read there while the kernel lives.
    wrapper.write_text("#!/bin/sh\n"
                       "for a; do shift; [ \"$a\" = -v2 ] && a=-v4; set -- \"$@\" \"$a\"; done\n"
                       "[ \"$1\" = restore ] && echo \"$@\" | "
                       f"sed -n 's/.* -W \\([^ ]*\\) .*/\\1/p' >> {dirs}\n"
                       f"exec {CRIU} \"$@\"\n")
    wrapper.chmod(0o755)
    g = start_gateway("--state-dir", str(tmp_path / "state"), "--criu", str(wrapper))
    try:
        kid = g.start_kernel()
        run_cell(g, kid, "x = 41")
        pause(g, kid)
        resume(g, kid)
        assert value_of(g, kid, "x + 1") == 42
        (work,) = dirs.read_text().split()
        with open(os.path.join(work, "restore.log")) as f:
            log = f.read()
    finally:
        g.stop()
    assert "Restore finished successfully" in log
    # The kernel has threads (ipykernel's: heartbeat, iopub, control...),
    # each restored by the process's restorer, none moved on its own.
    assert log.count("Using clone3 to restore the process") >= 3, log[-2000:]
    assert "Restore cg_set in thread" not in log


def test_loopback_servers_and_connections_outlive_a_pause(gw):
    """A sandbox without egress is checkpointed without its network
    namespace (lo alone, as made): the resume gets a new one whose lo is up
    before any socket comes back. A server bound to 127.0.0.1, one bound to
    ::1, and a TCP connection open across the pause all work after it."""
    kid = gw.start_kernel()
    setup = """
import socket, threading
def serve(family, host):
    s = socket.socket(family)
    s.bind((host, 0))
    s.listen()
    def loop():
        while True:
            c, _ = s.accept()
            c.sendall(b'hello ' + c.recv(16))
            c.close()
    threading.Thread(target=loop, daemon=True).start()
    return s.getsockname()[1]
p4 = serve(socket.AF_INET, '127.0.0.1')
p6 = serve(socket.AF_INET6, '::1')
listener = socket.socket(); listener.bind(('127.0.0.1', 0)); listener.listen()
held = socket.create_connection(listener.getsockname())
peer, _ = listener.accept()
held.sendall(b'before ')
"""
    reply, _, _ = run_cell(gw, kid, setup)
    assert reply["status"] == "ok", reply
    pause(gw, kid)
    resume(gw, kid)
    check = """
import socket
def ask(family, host, port):
    c = socket.create_connection((host, port), timeout=5)
    c.sendall(b'x')
    return c.recv(64)
held.sendall(b'after')
got = b''
peer.settimeout(5)
while len(got) < len(b'before after'):
    got += peer.recv(64)
print(ask(socket.AF_INET, '127.0.0.1', p4), ask(socket.AF_INET6, '::1', p6), got)
"""
    reply, out, _ = run_cell(gw, kid, check)
    assert reply["status"] == "ok", (reply, out)
    assert out.strip() == "b'hello x' b'hello x' b'before after'", out
