"""Fork of a running kernel with its memory: POST /api/kernels/{id}/fork
{"count": N} checkpoints the kernel's sandbox in place (the kernel runs on
with its id) and restores N copies beside it with CRIU, each a kernel of its
own: its own id, sandbox, host ids, cgroup and files, and for Python its own
HMAC key and random seeds."""
import os

import pytest

from gbclient import checkpoint_dirs, run_cell, start_gateway, value_of
from test_pause_memory import CRIU, criu_usable, gw, state  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not criu_usable(),
                                reason=f"fork needs root and CRIU 4.1+ at {CRIU} "
                                       "(scripts/test builds it)")


def fork(gw, kid, count):
    status, body, _ = gw.request("POST", f"/api/kernels/{kid}/fork", {"count": count})
    assert status == 201, body
    assert len(body["kernels"]) == count, body
    return body["kernels"]


def ok(gw, kid, code):
    content, stdout, _ = run_cell(gw, kid, code)
    assert content["status"] == "ok", content
    return stdout


def test_forks_start_with_the_memory_and_files_and_go_their_own_ways(gw, state):
    src = gw.start_kernel()
    ok(gw, src, "import random, os, subprocess\n"
                "x = 41\n"
                "data = list(range(1000))\n"
                "child = subprocess.Popen(['sleep', '1000'])\n"
                "open('/home/user/shared.txt', 'w').write('before')\n"
                "open('/tmp/t.txt', 'w').write('tmp')")
    src_key = value_of(gw, src, "get_ipython().kernel.session.key.decode()")
    src_map = value_of(gw, src, "open('/proc/self/uid_map').read().split()")
    copies = fork(gw, src, 2)
    ids = [c["id"] for c in copies]
    assert len(set(ids + [src])) == 3, ids
    draws, keys, maps = set(), set(), []
    for kid in ids:
        # The memory, the processes and the files as they were at the fork.
        assert value_of(gw, kid, "(x, len(data), child.poll())") == (41, 1000, None)
        assert value_of(gw, kid, "open('/home/user/shared.txt').read()") == "before"
        assert value_of(gw, kid, "open('/tmp/t.txt').read()") == "tmp"
        # Its files are its own, and writable as before (owners shifted).
        ok(gw, kid, f"open('/home/user/shared.txt', 'w').write({kid!r})")
        assert value_of(gw, kid, "open('/home/user/shared.txt').read()") == kid
        draws.add(value_of(gw, kid, "random.random()"))
        keys.add(value_of(gw, kid, "get_ipython().kernel.session.key.decode()"))
        keys.add(value_of(gw, kid, "__import__('json').load(open("
                                   "__import__('ipykernel.kernelapp').kernelapp.IPKernelApp"
                                   ".instance().abs_connection_file))['key']"))
        maps.append(value_of(gw, kid, "open('/proc/self/uid_map').read().split()"))
    draws.add(value_of(gw, src, "random.random()"))
    # Three generators seeded apart, two new keys (each in its session and
    # its connection file), and three sets of host ids.
    assert len(draws) == 3, draws
    assert len(keys) == 2 and src_key not in keys, keys
    host_ids = [m[1] for m in maps] + [src_map[1]]
    assert len(set(host_ids)) == 3, (maps, src_map)
    # The source runs on, with its own files, and the checkpoint is gone.
    assert value_of(gw, src, "(x, open('/home/user/shared.txt').read())") == (41, "before")
    assert checkpoint_dirs(state) == []
    # A fork is a kernel like any: listed, forked again, deleted.
    listed = {k["id"] for k in gw.request("GET", "/api/kernels")[1]}
    assert set(ids) <= listed
    again = fork(gw, ids[0], 1)
    assert value_of(gw, again[0]["id"], "x + 1") == 42
    for kid in ids + [again[0]["id"]]:
        assert gw.request("DELETE", f"/api/kernels/{kid}")[0] == 204
    assert value_of(gw, src, "x") == 41


def test_a_fork_is_confined_as_its_source(gw):
    from test_pause_memory import assert_confined_as_source, confinement, host_limits
    src = gw.start_kernel(name="python3", limits={"memory_mb": 300, "pids": 77, "cpus": 0.5})
    before = confinement(gw, src)
    kid = fork(gw, src, 1)[0]["id"]
    after = confinement(gw, kid)
    # Everything but the host ids and the cgroup's name (its own), and its
    # own cgroup holds the source's limits.
    assert_confined_as_source(before, after)
    assert host_limits(after["uid_map"]) == host_limits(before["uid_map"]) == {
        "memory": str(300 << 20), "pids": "77", "cpu": "50000"}


def test_bad_forks_are_refused(gw):
    src = gw.start_kernel()
    for count in (0, 33, "2", 1.5):
        status, body, _ = gw.request("POST", f"/api/kernels/{src}/fork", {"count": count})
        assert status == 400 and "count" in body["message"], (count, body)
    assert gw.request("GET", f"/api/kernels/{src}/fork")[0] == 405
    assert gw.request("POST", "/api/kernels/nope/fork", {"count": 1})[0] == 404
    assert value_of(gw, src, "1 + 1") == 2


def test_fork_without_criu_says_why(tmp_path):
    g = start_gateway("--state-dir", str(tmp_path / "s"), "--criu", "/nonexistent/criu")
    try:
        src = g.start_kernel()
        status, body, _ = g.request("POST", f"/api/kernels/{src}/fork", {"count": 1})
        assert status == 400 and "cannot be forked" in body["message"], body
    finally:
        g.stop()


def test_the_kernel_host_killed_during_a_fork_fails_it_and_nothing_hangs(gw, state):
    from test_pause_memory import in_background, kernel_host, kernel_host_other, wait_for
    import signal
    src = gw.start_kernel()
    ok(gw, src, "x = 5")
    host = kernel_host(gw)
    answer = in_background(lambda: gw.request("POST", f"/api/kernels/{src}/fork",
                                              {"count": 3}))
    # The copies are being restored: their image directories are there. A
    # checkpoint's directory is renamed from its .new name when its dump
    # ends, so one listed can be gone by the time it is looked into.
    cps = os.path.join(state, "checkpoints")

    def copies_restoring():
        for c in checkpoint_dirs(state):
            try:
                if any(n.startswith("copy-") for n in os.listdir(os.path.join(cps, c))):
                    return True
            except (FileNotFoundError, NotADirectoryError):
                pass
        return False

    assert wait_for(copies_restoring, 30)
    os.kill(host, signal.SIGKILL)
    status, body, _ = answer()
    # Answered: each copy that did not start says why, on its own.
    assert status == 201, body
    failed = [c for c in body["kernels"] if "error" in c]
    assert failed and all(c["error"] for c in failed), body
    assert wait_for(lambda: kernel_host_other(gw, host))
    # The source comes back (its sandbox died with the kernel-host, as every
    # one does), and forks again.
    assert wait_for(lambda: gw.request("GET", f"/api/kernels/{src}")[1].get(
        "execution_state") == "idle", 60)
    ok(gw, src, "x = 6")
    copy = fork(gw, src, 1)[0]
    assert value_of(gw, copy["id"], "x") == 6
    # Neither fork's checkpoint is left behind.
    assert wait_for(lambda: checkpoint_dirs(state) == [], 20), checkpoint_dirs(state)


def test_copies_that_come_and_go_beside_a_checkpoint_do_not_fail_its_restore(gw, state):
    """A fork's copies each restore from an image directory of their own
    (copy-ID) beside the checkpoint's sealed files, and remove it once
    restored, while the other copies' restores are checking those files.
    A copy's directory that goes between the check's listing and its look
    at it is one that went, not a tampered checkpoint. Here directories
    come and go beside a paused kernel's checkpoint while it resumes."""
    import threading
    kid = gw.start_kernel()
    ok(gw, kid, "x = 7")
    stop = threading.Event()

    def churn(dir_):
        while not stop.is_set():
            for i in range(64):
                path = os.path.join(dir_, f"copy-churn{i}")
                try:
                    os.mkdir(path)
                    os.rmdir(path)
                except OSError:
                    pass

    for _ in range(12):
        # The checkpoint the last resume used may still be on its way out.
        before = set(checkpoint_dirs(state))
        status, model, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
        assert status == 200 and model["paused"]["memory_kept"], model
        cps = os.path.join(state, "checkpoints")
        (name,) = set(checkpoint_dirs(state)) - before
        stop.clear()
        thread = threading.Thread(target=churn, args=(os.path.join(cps, name),))
        thread.start()
        try:
            status, model, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
        finally:
            stop.set()
            thread.join()
        assert status == 200, model
        assert value_of(gw, kid, "x") == 7
