"""Faults of the processes under the gateway, as a crash or an operator's
kill -9 makes them: a sandbox's init, the kernel-host, a whole run. Real
gateway, real sandboxed kernels, real clients; every wait has a deadline."""
import os
import re
import signal
import stat
import subprocess
import time

from gbclient import V1, children, cmdline, kernel_host, outputs_of, start_gateway

LEFTOVERS_LINE = re.compile(r"removed what (\d+) earlier run\(s\) left behind: (\d+) director"
                            r"(?:y|ies), (\d+) socket\(s\), (\d+) cgroup\(s\)")
SANDBOX_ID_BASE = 1000000
SLOTS = 32768
IDS_DIR = "/run/glovebox/ids"


def all_inits(host_pid):
    """The inits of host_pid's sandboxes, those made ahead (--sandbox-stock)
    included."""
    return [p for p in children(host_pid) if cmdline(p).startswith(b"glovebox-init")]


def sandbox_inits(host_pid):
    """The inits of host_pid's sandboxes in use: each holds a process."""
    return [p for p in all_inits(host_pid) if children(p)]


def forked_ahead(pid):
    """Whether pid is a kernel's process a zygote forked ahead into a
    sandbox made ahead, waiting for its request."""
    return cmdline(pid).startswith(b"glovebox-kernel-ahead")


def stock_inits(host_pid):
    """The inits of the sandboxes host_pid has made ahead: nothing in them
    but, with a zygote, a kernel's process forked ahead."""
    return [p for p in all_inits(host_pid) if all(forked_ahead(c) for c in children(p))]


def runtime_dir(host_pid):
    args = cmdline(host_pid).split(b"\0")
    return args[args.index(b"--runtime-dir") + 1].decode()


def alive(pid):
    """True while pid runs (a zombie waiting for its reaper has died)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def id_base(host_pid):
    """The first host id of host_pid's sandboxes: its range is named by the
    lock file in IDS_DIR that holds its pid (kernel-host/spawn_sandbox.c),
    else its pid's."""
    try:
        for name in os.listdir(IDS_DIR):
            with open(os.path.join(IDS_DIR, name)) as f:
                if f.read().strip() == str(host_pid):
                    return SANDBOX_ID_BASE + int(name) * 2 * SLOTS
    except OSError:
        pass
    return SANDBOX_ID_BASE + (host_pid % 16384) * 2 * SLOTS


def sandbox_processes(host_pid):
    """Live processes running as the host ids of host_pid's sandboxes."""
    base = id_base(host_pid)
    out = subprocess.run(["ps", "-eo", "uid=,pid="], capture_output=True, text=True).stdout
    return [int(pid) for uid, pid in (line.split() for line in out.splitlines())
            if base <= int(uid) < base + 2 * SLOTS and alive(int(pid))]


def cgroup_dirs(host_pid):
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        found += [os.path.join(root, d) for d in dirs if d == f"glovebox-{host_pid}"]
        dirs[:] = [d for d in dirs if not d.startswith("glovebox-")]
    return found


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def until_idle_after_restart(ch, msg_id, timeout=60):
    """Reads ch until the kernel is idle again after a death; returns the
    statuses seen and the answers to msg_id (iopub error, execute_reply)."""
    deadline = time.time() + timeout
    states, answers = [], {}
    while not ("restarting" in states and states[-1:] == ["idle"]):
        left = deadline - time.time()
        assert left > 0, (states, answers)
        m = ch.recv(timeout=left)
        if m["msg_type"] == "status":
            states.append(m["content"]["execution_state"])
        elif m["parent_header"].get("msg_id") == msg_id:
            answers[m["msg_type"]] = m["content"]
    return states, answers


def test_killed_sandbox_init_clients_carry_on_first_try():
    gw = start_gateway()
    try:
        kid = gw.start_kernel()
        json_ch = gw.connect(kid)
        v1_ch = gw.connect(kid, subprotocol=V1)
        json_ch.execute("x = 1")
        v1_ch.execute("y = 2")
        host = kernel_host(gw)
        inits = sandbox_inits(host)
        assert len(inits) == 1, inits
        msg_id = json_ch.send("execute_request", {"code": "import time; time.sleep(60)",
                                                  "silent": False})
        wait_for(lambda: gw.request("GET", f"/api/kernels/{kid}")[1]["execution_state"] == "busy",
                 30, "the kernel is busy")
        os.kill(inits[0], signal.SIGKILL)
        states, answers = until_idle_after_restart(json_ch, msg_id)
        # The running cell is answered, then dead, restarting, ..., idle.
        assert answers["execute_reply"]["status"] == "error", answers
        assert answers["execute_reply"]["ename"] == "KernelDied", answers
        assert states[states.index("dead"):states.index("dead") + 2] == ["dead", "restarting"]
        # Every client that was connected carries on, in both formats, on
        # the kernel in its new sandbox.
        for ch in (json_ch, v1_ch):
            reply, outputs = ch.execute("'x' in dir(), 40 + 2", timeout=30)
            assert reply["content"]["status"] == "ok", reply
            assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] \
                == "(False, 42)"
        assert sandbox_inits(host) != inits and not alive(inits[0])
        # First try: one automatic restart, none failing on the dead sandbox,
        # and the model says why the state was lost.
        log = gw.read_log()
        assert "find sandbox" not in log, log
        assert len(re.findall(rf"\[{kid[:8]}\] restarting automatically", log)) == 1, log
        status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        assert model["execution_state"] == "idle"
        assert model["reason"] == "the kernel's sandbox died (its init process was killed)"
        assert "sandbox died" in answers["execute_reply"]["evalue"], answers
        json_ch.close()
        v1_ch.close()
    finally:
        assert gw.stop() == 0


def test_killed_kernel_host_is_replaced():
    gw = start_gateway()
    try:
        kid = gw.start_kernel()
        ch = gw.connect(kid)
        ch.execute("x = 1")
        host = kernel_host(gw)
        runtime = runtime_dir(host)
        old_sandboxed = sandbox_processes(host)
        assert old_sandboxed and cgroup_dirs(host), "sandboxes and cgroups while it runs"
        msg_id = ch.send("execute_request", {"code": "import time; time.sleep(60)",
                                             "silent": False})
        wait_for(lambda: gw.request("GET", f"/api/kernels/{kid}")[1]["execution_state"] == "busy",
                 30, "the kernel is busy")
        killed_at = time.time_ns()
        os.kill(host, signal.SIGKILL)
        # The client hears its cell end, the kernel die and come back.
        states, answers = until_idle_after_restart(ch, msg_id)
        assert answers["error"]["ename"] == "KernelDied", answers
        assert answers["execute_reply"]["status"] == "error", answers
        assert "kernel-host died" in answers["execute_reply"]["evalue"], answers
        assert states[states.index("dead"):states.index("dead") + 2] == ["dead", "restarting"]
        # The sandboxes died with their host, and their cgroups are gone.
        wait_for(lambda: [p for p in old_sandboxed if alive(p)] == [] and
                 sandbox_processes(host) == [], 10, "no process of the old sandboxes")
        wait_for(lambda: cgroup_dirs(host) == [], 10, "the old kernel-host's cgroups removed")
        # A new kernel-host serves: the kernel runs again for the same
        # client, new kernels start, and the old one's directories are gone.
        new_host = kernel_host(gw)
        assert new_host != host and runtime_dir(new_host) == runtime
        reply, outputs = ch.execute("'x' in dir()", timeout=30)
        assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] == \
            "False"
        other = gw.start_kernel()
        assert gw.request("GET", f"/api/kernels/{other}")[0] == 200
        # The sandboxes' directories (sN, some made ahead) are the new
        # kernel-host's alone: made since the old one was killed.
        now = {d: os.stat(os.path.join(runtime, d)).st_ctime_ns for d in os.listdir(runtime)}
        sandbox_dirs = {d for d in now if re.fullmatch(r"s\d+", d)}
        assert set(now) - {".lock", "host-%d" % new_host} == sandbox_dirs, now
        assert all(now[d] > killed_at for d in sandbox_dirs), (now, killed_at)
        log = gw.read_log()
        assert "started a new kernel-host" in log
        assert len(re.findall(rf"\[{kid[:8]}\] restarting automatically", log)) == 1, log
        ch.close()
    finally:
        assert gw.stop() == 0
    assert not os.path.exists(runtime)
    assert cgroup_dirs(new_host) == []


def kill_host_while_busy(gw, kid, ch):
    """Kills the kernel-host while kid runs a cell of ch's; returns the
    kernel-host's pid and the cell's msg_id."""
    msg_id = ch.send("execute_request", {"code": "import time; time.sleep(60)",
                                         "silent": False})
    wait_for(lambda: gw.request("GET", f"/api/kernels/{kid}")[1]["execution_state"] == "busy",
             30, "the kernel is busy")
    host = kernel_host(gw)
    os.kill(host, signal.SIGKILL)
    return host, msg_id


def test_kernel_host_replaced_at_most_max_host_restarts_times():
    gw = start_gateway("--max-host-restarts", "1")
    try:
        kid = gw.start_kernel()
        ch = gw.connect(kid)
        # The one replacement allowed.
        first, msg_id = kill_host_while_busy(gw, kid, ch)
        states, answers = until_idle_after_restart(ch, msg_id)
        assert answers["execute_reply"]["ename"] == "KernelDied", answers
        host = kernel_host(gw)
        assert host != first
        runtime = runtime_dir(host)
        inits = sandbox_inits(host)
        # Past it: the clients are told, then the gateway exits.
        host, msg_id = kill_host_while_busy(gw, kid, ch)
        states, answers = [], {}
        try:
            while True:
                m = ch.recv(timeout=30)
                if m["msg_type"] == "status":
                    states.append(m["content"]["execution_state"])
                elif m["parent_header"].get("msg_id") == msg_id:
                    answers[m["msg_type"]] = m["content"]
        except ConnectionError:
            pass
        # Told before the connection closed: the cell's end, then dead.
        assert answers["execute_reply"]["ename"] == "KernelDied", answers
        assert states[-1:] == ["dead"], states
        # Not a healthy-looking gateway without a kernel-host: it exits,
        # non-zero, for a supervisor to restart it.
        assert gw.proc.wait(timeout=30) == 1
        assert [p for p in inits if alive(p)] == []
        log = gw.read_log()
        assert "no new kernel-host: --max-host-restarts (1) reached" in log, log
        assert log.count("started a new kernel-host") == 1, log
        # What the dead kernel-host left is for the next start to remove.
        assert os.path.isdir(runtime) and cgroup_dirs(host)
    finally:
        gw.stop()
    gw = start_gateway()
    try:
        assert gw.start_kernel()
        assert not os.path.exists(runtime) and cgroup_dirs(host) == []
        assert LEFTOVERS_LINE.search(gw.read_log())
    finally:
        assert gw.stop() == 0


def crash(gw, host):
    """Kills a whole run at once: nothing of it gets to clean up."""
    os.kill(gw.proc.pid, signal.SIGKILL)
    os.kill(host, signal.SIGKILL)
    gw.proc.wait(10)


def test_next_start_removes_what_crashed_runs_left():
    legacy = None
    live = start_gateway()
    runs = []
    try:
        live_kid = live.start_kernel()
        live_runtime = runtime_dir(kernel_host(live))
        # A sandboxed run and an unconfined one (whose kernel's sockets are
        # on the host) crash whole; a third loses only its gateway. All
        # start first: each start cleans what is left at that moment.
        gateways = [start_gateway(*args) for args in ((), ("--sandbox", "none"), ())]
        for gw in gateways:
            gw.start_kernel()
            runs.append((runtime_dir(kernel_host(gw)), kernel_host(gw)))
        for gw, (_, host), whole in zip(gateways, runs, (True, True, False)):
            if whole:
                crash(gw, host)
            else:
                os.kill(gw.proc.pid, signal.SIGKILL)
                gw.proc.wait(10)
                wait_for(lambda: not alive(host), 10, "the kernel-host cleans up and exits")
        sandboxed, plain, gateway_only = runs
        assert os.listdir(sandboxed[0]) and cgroup_dirs(sandboxed[1]), "a crash leaves these"
        sockets = [os.path.join(r, f) for r, _, fs in os.walk(plain[0]) for f in fs
                   if stat.S_ISSOCK(os.lstat(os.path.join(r, f)).st_mode)]
        assert len(sockets) == 5, sockets
        assert os.listdir(gateway_only[0]) == [".lock"]
        # A directory an older version (no lock) or another program made.
        legacy = f"/tmp/glovebox-{os.urandom(3).hex()}"
        os.mkdir(legacy)

        gw = start_gateway()
        try:
            # (The kernel-host cleans up before it serves the first start.)
            assert gw.start_kernel()
            log = gw.read_log()
            lines = LEFTOVERS_LINE.findall(log)
            assert len(lines) == 1, log  # said once
            runs_n, dirs, sockets_n, cgroups = (int(x) for x in lines[0])
            assert runs_n >= 3 and sockets_n >= 5 and cgroups >= 3 and dirs >= 3, lines
            for runtime, host in runs:
                assert not os.path.exists(runtime), runtime
                assert cgroup_dirs(host) == [], host
                assert sandbox_processes(host) == []
            # Never what may still be in use: a live run, a directory
            # without a lock.
            assert os.path.isdir(legacy)
            assert os.path.exists(os.path.join(live_runtime, ".lock"))
            ch = live.connect(live_kid)
            reply, _ = ch.execute("1 + 1", timeout=30)
            assert reply["content"]["status"] == "ok"
            ch.close()
        finally:
            assert gw.stop() == 0
        # Nothing to say at a start after a clean exit.
        gw = start_gateway()
        try:
            assert gw.start_kernel()
            assert "removed what" not in gw.read_log()
        finally:
            assert gw.stop() == 0
    finally:
        live.stop()
        if legacy:
            os.rmdir(legacy)
