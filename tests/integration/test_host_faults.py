"""Faults of the processes under the gateway, as a crash or an operator's
kill -9 makes them: a sandbox's init, the kernel-host, a whole run. Real
gateway, real sandboxed kernels, real clients; every wait has a deadline."""
import os
import re
import signal
import stat
import subprocess
import time

from gbclient import V1, outputs_of, start_gateway

LEFTOVERS_LINE = re.compile(r"removed what (\d+) earlier run\(s\) left behind: (\d+) director"
                            r"(?:y|ies), (\d+) socket\(s\), (\d+) cgroup\(s\)")
SANDBOX_ID_BASE = 1000000
SLOTS = 32768


def children(pid):
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def kernel_host(gw):
    hosts = [p for p in children(gw.proc.pid) if b"kernel-host" in cmdline(p)]
    assert len(hosts) == 1, hosts
    return hosts[0]


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def sandbox_inits(host_pid):
    return [p for p in children(host_pid) if cmdline(p).startswith(b"glovebox-init")]


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


def sandbox_processes(host_pid):
    """Live processes running as the host ids of host_pid's sandboxes."""
    base = SANDBOX_ID_BASE + (host_pid % 16384) * 2 * SLOTS
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
