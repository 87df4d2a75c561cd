"""Restart and keep: SIGUSR2 makes the gateway record its kernels in
--state-dir and exec itself; the new image takes them over (same ids, same
keys, same processes), and clients carry on. SIGTERM still ends everything,
and a kill -9 at any point leaves no sandbox behind. Real gateway, real
sandboxed kernels, real WebSocket clients; every wait has a deadline."""
import concurrent.futures
import os
import pathlib
import shutil
import signal
import stat
import subprocess
import tempfile
import time

from gbclient import BINARY, KERNEL_HOST, Gateway, start_gateway, value_of
from test_host_faults import (alive, cmdline, kernel_host, sandbox_inits,
                              sandbox_processes, wait_for)

# Issue 15: "20 kernels with state, restart the gateway, every kernel
# answers with its variables".
KERNELS = 20
TOKEN = "test-token-0123456789"  # gbclient's --token
E2B = {"X-API-Key": TOKEN}


def keep_gateway(*args):
    state = tempfile.mkdtemp(prefix="glovebox-keep-")
    gw = start_gateway("--state-dir", state, "--max-kernels", "64", *args)
    gw.state_dir = state
    return gw


def no_record(state):
    """Neither the record nor its temporary file is left (keys)."""
    return not [n for n in os.listdir(state) if n.startswith("kernels.json")]


def finish(gw):
    gw.stop(signal.SIGKILL)
    shutil.rmtree(gw.state_dir, ignore_errors=True)


def restart_keeping(gw, timeout=60):
    """SIGUSR2, then the new image's URL line on the same stdout."""
    pid = gw.proc.pid
    gw.proc.send_signal(signal.SIGUSR2)
    deadline = time.time() + timeout
    line = gw.proc.stdout.readline()
    assert "serving at" in line, (line, gw.read_log()[-3000:])
    assert time.time() < deadline
    # The same process: a supervisor sees no exit.
    assert gw.proc.poll() is None and gw.proc.pid == pid


def kernel_process(host, kid):
    """The kernel's own process (its connection file is named after it)."""
    name = f"/run/kernel/{kid[:8]}.json".encode()
    procs = [p for p in sandbox_processes(host) if name in cmdline(p)]
    assert len(procs) == 1, procs
    return procs[0]


def start_many(gw, n):
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda _: gw.start_kernel(), range(n)))


def test_kernels_keep_their_variables_across_a_restart():
    gw = keep_gateway()
    try:
        host = kernel_host(gw)
        ids = start_many(gw, KERNELS - 1)
        # A notebook's /api/sessions entry, with a kernel of its own.
        status, nb, _ = gw.request("POST", "/api/sessions", {
            "path": "work/kept.ipynb", "name": "kept.ipynb", "type": "notebook",
            "kernel": {"name": "python3"}})
        assert status == 201, nb
        ids.append(nb["kernel"]["id"])
        for i, kid in enumerate(ids):
            assert value_of(gw, kid, f"(globals().__setitem__('kept', {i * 31}), kept)[1]") \
                == i * 31
        inits = set(sandbox_inits(host))
        assert len(inits) == KERNELS
        # A client with a session of its own, connected when the restart
        # comes.
        ch = gw.connect(ids[0])
        session = ch.session
        reply, _ = ch.execute("before = 'yes'")
        assert reply["content"]["status"] == "ok"

        restart_keeping(gw)

        # Nothing of the record (it holds the kernels' keys) is left.
        assert no_record(gw.state_dir), os.listdir(gw.state_dir)
        # The same kernel-host and the same sandboxes: nothing restarted.
        assert kernel_host(gw) == host
        assert set(sandbox_inits(host)) == inits
        status, models, _ = gw.request("GET", "/api/kernels")
        assert status == 200
        assert sorted(m["id"] for m in models) == sorted(ids)
        for i, kid in enumerate(ids):
            assert value_of(gw, kid, "kept") == i * 31, kid
        status, sessions, _ = gw.request("GET", "/api/sessions")
        assert status == 200
        assert [(s["id"], s["path"], s["kernel"]["id"]) for s in sessions] == \
            [(nb["id"], "work/kept.ipynb", nb["kernel"]["id"])], sessions
        states = {m["id"]: m["execution_state"] for m in gw.request("GET", "/api/kernels")[1]}
        assert set(states.values()) == {"idle"}, states

        # The old connection ended with the old image; the client comes
        # back with its session_id and is answered.
        try:
            ch.close()
        except Exception:
            pass
        ch = gw.connect(ids[0], session_id=session)
        reply, outputs = ch.execute("print(before)")
        assert reply["content"]["status"] == "ok"
        assert reply["parent_header"]["session"] == session
        assert any(m["msg_type"] == "stream" and m["content"]["text"] == "yes\n"
                   for m in outputs), outputs
        ch.close()
        assert "re-adopting %d kernel(s)" % KERNELS in gw.read_log()
        # A kept kernel is a kernel like any other: it restarts (fresh) and
        # interrupts on request.
        status, _, _ = gw.request("POST", f"/api/kernels/{ids[1]}/restart")
        assert status == 200
        assert value_of(gw, ids[1], "'kept' in globals()") is False
        assert gw.request("POST", f"/api/kernels/{ids[2 % KERNELS]}/interrupt")[0] == 204

        # The new image restarts and keeps as well as the first.
        restart_keeping(gw)
        assert sorted(m["id"] for m in gw.request("GET", "/api/kernels")[1]) == sorted(ids)
        assert value_of(gw, ids[0], "kept") == 0
        assert value_of(gw, ids[-1], "kept") == (KERNELS - 1) * 31

        # SIGTERM after a kept restart still ends every kernel and sandbox.
        assert gw.stop(signal.SIGTERM, timeout=60) == 0
        wait_for(lambda: not alive(host), 20, "the kernel-host exits")
        wait_for(lambda: not sandbox_processes(host), 20, "no sandbox process is left")
        assert not any(alive(p) for p in inits)
    finally:
        finish(gw)


def test_a_cell_running_through_the_restart_reaches_its_client():
    """What a kernel sends a client's session after the new image took the
    kernel over is queued for it: the client that comes back with its
    session_id gets its cell's output and reply."""
    gw = keep_gateway()
    try:
        kid = gw.start_kernel()
        ch = gw.connect(kid)
        session = ch.session
        reply, _ = ch.execute("import time")
        assert reply["content"]["status"] == "ok"
        msg_id = ch.send("execute_request", {
            "code": "time.sleep(2); print('after the restart')", "silent": False,
            "store_history": True, "user_expressions": {}, "allow_stdin": False,
            "stop_on_error": True})
        # Running: its busy status came before the restart.
        while True:
            m = ch.recv(timeout=30)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "busy" and \
                    m["parent_header"].get("msg_id") == msg_id:
                break
        restart_keeping(gw)
        try:
            ch.close()
        except Exception:
            pass
        # Back well after the cell ended: all of it waited here.
        time.sleep(3)
        ch = gw.connect(kid, session_id=session)
        got = {}
        deadline = time.time() + 30
        while "execute_reply" not in got:
            assert time.time() < deadline, got
            m = ch.recv(timeout=30)
            if m["parent_header"].get("msg_id") == msg_id:
                got.setdefault(m["msg_type"], m["content"])
        assert got["execute_reply"]["status"] == "ok", got
        assert got["stream"]["text"] == "after the restart\n", got
        ch.close()
    finally:
        finish(gw)


def test_a_kernel_not_readopted_within_the_grace_is_killed():
    gw = keep_gateway("--keep-grace", "3")
    try:
        host = kernel_host(gw)
        good = gw.start_kernel()
        assert value_of(gw, good, "(globals().__setitem__('v', 5), v)[1]") == 5
        frozen = gw.start_kernel()
        pid = kernel_process(host, frozen)
        # Stopped, it cannot answer kernel_info when the new image asks.
        os.kill(pid, signal.SIGSTOP)
        try:
            restart_keeping(gw)
            model = wait_for(
                lambda: [m for m in gw.request("GET", "/api/kernels")[1]
                         if m["id"] == frozen and m["execution_state"] == "dead"],
                30, "the frozen kernel is reported dead")
            assert "keep-grace" in model[0].get("reason", "") or "keep-grace" in gw.read_log()
            wait_for(lambda: not alive(pid), 20, "the frozen kernel's process is killed")
        finally:
            if alive(pid):
                os.kill(pid, signal.SIGCONT)
        # Never started afresh under its old id: it stays dead.
        time.sleep(1)
        states = {m["id"]: m["execution_state"] for m in gw.request("GET", "/api/kernels")[1]}
        assert states[frozen] == "dead", states
        assert value_of(gw, good, "v") == 5
    finally:
        finish(gw)


def test_kill_9_during_the_grace_leaves_no_sandbox():
    gw = keep_gateway("--keep-grace", "60")
    host = None
    try:
        host = kernel_host(gw)
        kids = start_many(gw, 2)
        for kid in kids:
            assert value_of(gw, kid, "1 + 1") == 2
        inits = sandbox_inits(host)
        assert len(inits) == 2
        pid = kernel_process(host, kids[0])
        # One kernel cannot answer: the new image waits for it, within the
        # grace, when the whole service is killed hard.
        os.kill(pid, signal.SIGSTOP)
        restart_keeping(gw)
        assert any(m["id"] in kids for m in gw.request("GET", "/api/kernels")[1])
        assert sandbox_processes(host)
        gw.proc.kill()
        gw.proc.wait(20)
        wait_for(lambda: not alive(host), 20, "the kernel-host dies with the gateway")
        wait_for(lambda: not sandbox_processes(host), 20, "no sandbox process is left")
        assert not any(alive(p) for p in inits)
    finally:
        finish(gw)


def test_without_sigusr2_a_record_is_not_trusted():
    """A record left behind (a gateway killed after writing it) is never
    taken over by a fresh start: its descriptors and pids are not ours."""
    state = tempfile.mkdtemp(prefix="glovebox-keep-")
    with open(os.path.join(state, "kernels.json"), "w") as f:
        f.write('{"version": 1, "runtime_dir": "/tmp", "lock_fd": 3, "host_fd": 4, '
                '"host_pid": 1, "controllers": 0, "kernels": []}')
    gw = start_gateway("--state-dir", state)
    try:
        assert no_record(state), os.listdir(state)
        assert "a record of kernels that no gateway takes over" in gw.read_log()
        kid = gw.start_kernel()
        assert value_of(gw, kid, "6 * 7") == 42
    finally:
        gw.stop()
        shutil.rmtree(state, ignore_errors=True)


def test_sigusr2_whose_record_cannot_be_written_is_refused_and_serving_goes_on():
    """A record that cannot be written changes nothing: the kernels keep
    running under the same gateway, and a later SIGUSR2 still works."""
    gw = keep_gateway()
    try:
        host = kernel_host(gw)
        kid = gw.start_kernel()
        assert value_of(gw, kid, "(globals().__setitem__('z', 9), z)[1]") == 9
        # A directory where the record goes: the rename over it fails.
        blocker = os.path.join(gw.state_dir, "kernels.json")
        os.mkdir(blocker)
        before = sorted(os.listdir(gw.state_dir))
        assert "kernels.json" in before and "paused" in before, before
        gw.proc.send_signal(signal.SIGUSR2)
        wait_for(lambda: "SIGUSR2 refused: cannot record the kernels" in gw.read_log(), 20,
                 "the refusal is logged")
        assert gw.proc.poll() is None
        assert kernel_host(gw) == host
        assert value_of(gw, kid, "z") == 9
        assert [m["id"] for m in gw.request("GET", "/api/kernels")[1]] == [kid]
        # No temporary copy of the keys is left behind: the directory holds
        # what it held (the blocker, paused sandboxes, built templates).
        assert sorted(os.listdir(gw.state_dir)) == before
        os.rmdir(blocker)
        restart_keeping(gw)
        assert value_of(gw, kid, "z") == 9
    finally:
        finish(gw)


def test_a_failed_exec_leaves_the_old_gateway_serving(tmp_path):
    """An upgrade that installed a program that cannot run: execve fails,
    and the old image serves on with every kernel, its sessions and its
    sandboxes (nothing was destroyed before the exec). Once a good program
    is back, SIGUSR2 works."""
    # The bridge beside the program is bound into the sandboxes: a
    # directory their user can enter (pytest's tmp_path is 0700).
    bindir = pathlib.Path(tempfile.mkdtemp(prefix="glovebox-keep-bin-"))
    bindir.chmod(0o755)
    program = bindir / "glovebox"
    for src in (BINARY, KERNEL_HOST,
                *(os.path.join(os.path.dirname(BINARY), name)
                  for name in ("glovebox-kernel-bridge", "glovebox-init"))):
        shutil.copy2(src, bindir / os.path.basename(src))
    state = tmp_path / "state"
    gw = Gateway(str(program), ["--state-dir", str(state), "--keep-grace", "5"])
    try:
        host = kernel_host(gw)
        kid = gw.start_kernel()
        assert value_of(gw, kid, "(globals().__setitem__('w', 'old'), w)[1]") == "old"
        status, nb, _ = gw.request("POST", "/api/sessions", {
            "path": "a.ipynb", "name": "a.ipynb", "type": "notebook", "kernel": {"id": kid}})
        assert status == 201, nb
        status, sbx, _ = gw.request("POST", "/e2b/sandboxes", {"timeout": 120}, headers=E2B)
        assert status == 201, sbx
        inits = set(sandbox_inits(host))
        assert len(inits) == 2
        # The installed program is replaced by one whose interpreter does
        # not exist: execve returns ENOENT.
        broken = bindir / "glovebox.new"
        broken.write_text("#!/nonexistent/interpreter\n")
        broken.chmod(0o755)
        os.rename(broken, program)
        gw.proc.send_signal(signal.SIGUSR2)
        wait_for(lambda: "SIGUSR2: cannot restart" in gw.read_log(), 20,
                 "the failed exec is logged")
        assert gw.proc.poll() is None
        assert kernel_host(gw) == host
        assert set(sandbox_inits(host)) == inits
        assert value_of(gw, kid, "w") == "old"
        assert gw.request("GET", "/api/sessions")[1][0]["id"] == nb["id"]
        status, info, _ = gw.request("GET", f"/e2b/sandboxes/{sbx['sandboxID']}", headers=E2B)
        assert status == 200, info
        # The record (keys) went with the attempt.
        assert no_record(state), os.listdir(state)
        # A new kernel still starts: the kernel-host link is sound.
        kid2 = gw.start_kernel()
        assert value_of(gw, kid2, "2 + 3") == 5

        shutil.copy2(BINARY, bindir / "glovebox.new")
        os.rename(bindir / "glovebox.new", program)
        restart_keeping(gw)
        assert value_of(gw, kid, "w") == "old"
        assert value_of(gw, kid2, "2 + 3") == 5
    finally:
        gw.stop(signal.SIGKILL)
        shutil.rmtree(bindir, ignore_errors=True)


def test_the_record_and_its_directory_are_ours_alone(tmp_path):
    """The record holds the kernels' keys: the state directory is made 0700
    however it was, and a symlink planted where the record is written is
    replaced, never written through."""
    state = tmp_path / "state"
    state.mkdir()
    outside = tmp_path / "outside"
    outside.write_text("untouched")
    gw = start_gateway("--state-dir", str(state))
    try:
        kid = gw.start_kernel()
        assert value_of(gw, kid, "(globals().__setitem__('q', 3), q)[1]") == 3
        os.chmod(state, 0o755)
        os.symlink(outside, state / "kernels.json.new")
        restart_keeping(gw)
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        assert outside.read_text() == "untouched"
        assert no_record(str(state)), os.listdir(state)
        assert value_of(gw, kid, "q") == 3
    finally:
        gw.stop(signal.SIGKILL)


def test_e2b_sandboxes_across_a_restart_that_keeps_kernels():
    """What docs/restart.md says of E2B sandboxes: a running one is not kept
    (its processes are ended, and its id is unknown after the restart); a
    paused one is on disk and resumes under its id."""
    gw = keep_gateway()
    try:
        host = kernel_host(gw)
        kid = gw.start_kernel()
        assert value_of(gw, kid, "(globals().__setitem__('j', 1), j)[1]") == 1
        status, running, _ = gw.request("POST", "/e2b/sandboxes", {"timeout": 120}, headers=E2B)
        assert status == 201, running
        status, paused, _ = gw.request("POST", "/e2b/sandboxes", {"timeout": 120}, headers=E2B)
        assert status == 201, paused
        status, body, _ = gw.request("POST", f"/e2b/sandboxes/{paused['sandboxID']}/pause",
                                     headers=E2B)
        assert status == 204, (status, body)
        wait_for(lambda: len(sandbox_inits(host)) == 2, 20, "the paused sandbox is gone")
        restart_keeping(gw)
        status, body, _ = gw.request("GET", f"/e2b/sandboxes/{running['sandboxID']}",
                                     headers=E2B)
        assert status == 404, (status, body)
        # Its sandbox is destroyed by the new image: only the kept kernel's
        # is left.
        wait_for(lambda: len(sandbox_inits(host)) == 1, 20, "the E2B sandbox is destroyed")
        assert value_of(gw, kid, "j") == 1
        status, info, _ = gw.request("GET", f"/e2b/sandboxes/{paused['sandboxID']}",
                                     headers=E2B)
        assert status == 200 and info["state"] == "paused", (status, info)
        status, body, _ = gw.request("POST", f"/e2b/sandboxes/{paused['sandboxID']}/resume",
                                     {"timeout": 60}, headers=E2B)
        assert status == 201, (status, body)
    finally:
        finish(gw)


def run_as_kept(state, timeout=30):
    """Starts glovebox as if exec'd for a restart that keeps kernels."""
    env = dict(os.environ, GLOVEBOX_KEEP="1", GLOVEBOX_TOKEN="test-token-0123456789")
    return subprocess.run([BINARY, "--listen", "127.0.0.1:0", "--state-dir", state],
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_a_record_that_is_not_this_process_is_refused():
    """A record naming a kernel-host that is not our child (or none at all)
    is refused with a clear error: nothing is taken over, nothing crashes."""
    state = tempfile.mkdtemp(prefix="glovebox-keep-")
    fd = os.open(os.path.join(state, "kernels.json"), os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write('{"version": 1, "runtime_dir": "/tmp", "lock_fd": 1, "host_fd": 2, '
                '"host_pid": 1, "controllers": 0, "kernels": [], "sessions": [], '
                '"discard": []}')
    r = run_as_kept(state)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "is not this process's: cannot take over" in r.stderr
    assert no_record(state), os.listdir(state)
    r = run_as_kept(state)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "cannot read the record of kept kernels" in r.stderr
    shutil.rmtree(state, ignore_errors=True)


def test_a_record_others_could_read_or_a_symlink_is_not_read(tmp_path):
    """The record is read only as the gateway wrote it: a regular file of
    its user, mode 0600, not reached through a symlink. Anything else is
    refused and removed (it may hold keys), and the start fails clearly."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    good = ('{"version": 1, "runtime_dir": "/tmp", "lock_fd": 1, "host_fd": 2, '
            '"host_pid": 1, "controllers": 0, "kernels": [], "sessions": [], "discard": []}')
    record = state / "kernels.json"
    record.write_text(good)
    record.chmod(0o644)
    r = run_as_kept(str(state))
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "cannot read the record of kept kernels" in r.stderr
    assert "Operation not permitted" in r.stderr, r.stderr
    assert no_record(str(state)), os.listdir(state)

    target = tmp_path / "elsewhere.json"
    target.write_text(good)
    target.chmod(0o600)
    os.symlink(target, record)
    r = run_as_kept(str(state))
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "cannot read the record of kept kernels" in r.stderr
    assert "Too many levels of symbolic links" in r.stderr, r.stderr
    # The link is not followed: what it points at is untouched.
    assert target.read_text() == good
