"""Kernels forked from a zygote (--zygote): they come from it, start cold
when they must, take their environment and limits after the fork, and two
of them share nothing: not memory, files, /tmp, random state or HMAC keys.
The escape battery (test_escape.py) also runs against zygote kernels."""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import ZYGOTE_ARGS, assert_from_zygote, run, start_gateway, value
from gbclient import (BUILD, EXTRA_ARGS, THREAD_CORES_IN_KERNEL, Gateway, e2b_create, e2b_kill,
                      kernel_pids, stdout_of, thread_cores)
from test_bounds import outcome, start_command


@pytest.fixture(scope="module")
def gw(zygote_gateway):
    return zygote_gateway


@pytest.fixture
def pair(gw):
    kids = [gw.start_kernel() for _ in range(2)]
    yield kids
    for kid in kids:
        gw.request("DELETE", f"/api/kernels/{kid}")


def children(pid, name):
    out = subprocess.run(["pgrep", "-P", str(pid), "-f", name], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def zygote_pid(g):
    (host,) = children(g.proc.pid, "kernel-host")
    (zygote,) = children(host, "glovebox-zygote")
    return zygote


def test_kernels_come_from_the_zygote(gw, pair):
    for kid in pair:
        assert_from_zygote(gw, kid)
        # And behave as an exec'd kernel: sys.argv, sys.executable, cwd on
        # sys.path, the kernel's own command line.
        argv, orig, exe, path0, cmdline = value(gw, kid, "(__import__('sys').argv, "
                                                "__import__('sys').orig_argv, "
                                                "__import__('sys').executable, "
                                                "__import__('sys').path[0], "
                                                "open('/proc/self/cmdline','rb').read())")
        assert argv[0].endswith("ipykernel_launcher.py") and argv[1] == "-f", argv
        assert orig[:3] == ["/usr/bin/python3", "-m", "ipykernel_launcher"], orig
        assert exe == "/usr/bin/python3"
        assert path0 == "/home/user"
        assert cmdline.startswith(b"/usr/bin/python3\0-m\0ipykernel_launcher\0-f\0/run/kernel/")


RUNS_IN = ("(__import__('os').readlink('/proc/self/exe'), "
           "sorted({l.split()[-1] for l in open('/proc/self/maps') "
           "if 'libpython' in l or 'glovebox-zygote' in l}), "
           "tuple(__import__('sys').flags))")


def test_kernels_run_in_the_interpreters_own_program(gw, pair):
    """The zygote is the kernelspec's Python program running
    glovebox-zygote.so, not a program that embeds libpython3.11.so (whose
    Python ran a third slower: docs/performance.md#the-interpreters-own-program):
    a zygote kernel's executable is a cold kernel's, no libpython is mapped,
    and its interpreter's flags are a cold kernel's."""
    cold = gw.start_kernel(name="python3", env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        assert_from_zygote(gw, cold, expected=False)
        cold_exe, cold_maps, cold_flags = value(gw, cold, RUNS_IN)
    finally:
        gw.request("DELETE", f"/api/kernels/{cold}")
    assert cold_exe.startswith("/usr/bin/python3") and cold_maps == [], (cold_exe, cold_maps)
    for kid in pair:
        exe, maps, flags = value(gw, kid, RUNS_IN)
        assert exe == cold_exe
        assert [os.path.basename(m) for m in maps] == ["glovebox-zygote.so"], maps
        # All but dont_write_bytecode, which the cold one was started with.
        assert flags[:4] + flags[5:] == cold_flags[:4] + cold_flags[5:], (flags, cold_flags)
        assert (flags[4], cold_flags[4]) == (0, 1)


def test_environment_is_applied_after_the_fork(gw):
    kid = gw.start_kernel(name="python3", env={"GLOVEBOX_ZYGOTE_TEST": "per-request"})
    try:
        assert_from_zygote(gw, kid)
        # Both os.environ and the C library's environment (subprocesses).
        assert value(gw, kid, "__import__('os').environ['GLOVEBOX_ZYGOTE_TEST']") == "per-request"
        assert value(gw, kid, "__import__('subprocess').run(['sh', '-c', "
                     "'echo $GLOVEBOX_ZYGOTE_TEST'], capture_output=True, text=True)"
                     ".stdout.strip()") == "per-request"
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


def test_startup_variables_start_cold(gw):
    # The interpreter reads PYTHON* variables only as it starts: such a
    # kernel must not come from the zygote, or the variable would be lost.
    kid = gw.start_kernel(name="python3", env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        assert_from_zygote(gw, kid, expected=False)
        assert value(gw, kid, "__import__('sys').flags.dont_write_bytecode") == 1
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


def test_limits_are_applied_after_the_fork(gw):
    kid = gw.start_kernel(name="python3", limits={"memory_mb": 300, "pids": 40})
    try:
        assert_from_zygote(gw, kid)
        limits = value(gw, kid, """(
    __import__('resource').getrlimit(__import__('resource').RLIMIT_NPROC)[0],
    [l for l in open('/proc/self/cgroup').read().splitlines()])""")
        assert limits[0] == 40, limits
        # Its memory limit holds: the allocation fails or the kernel dies of it.
        ch = gw.connect(kid)
        msg_id = ch.send("execute_request", {"code": "x = bytearray(600 * 1024 * 1024)",
                                             "silent": False})
        deadline = time.time() + 60
        reason = ""
        while time.time() < deadline:
            status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
            reason = model.get("reason", "") if status == 200 else ""
            if "memory" in reason:
                break
            time.sleep(0.2)
        ch.close()
        assert "memory" in reason, (msg_id, reason)
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


RANDOM_STATE = """(
    __import__('random').random(),
    float(__import__('numpy').random.random()),
    __import__('os').urandom(16).hex(),
    str(__import__('uuid').uuid4()),
    __import__('tempfile').mktemp())"""


def test_random_state_differs(gw, pair):
    a = value(gw, pair[0], RANDOM_STATE)
    b = value(gw, pair[1], RANDOM_STATE)
    for x, y, what in zip(a, b, ["random", "numpy.random", "os.urandom", "uuid4", "tempfile"]):
        assert x != y, f"{what} repeats across zygote kernels: {x}"
    # A restarted kernel does not repeat its predecessor's either.
    status, _, _ = gw.request("POST", f"/api/kernels/{pair[0]}/restart")
    assert status == 200
    c = value(gw, pair[0], RANDOM_STATE)
    assert_from_zygote(gw, pair[0])
    assert all(x != z for x, z in zip(a, c)), (a, c)



NUMPY_STATE = """(lambda s: (s[0], int(s[1][0]), len(set(s[1].tolist())), s[2], s[3], s[4]))(
    __import__('numpy').random.get_state())"""


def test_numpys_generator_is_keyed_as_its_seed_keys_it(gw, pair):
    # Each kernel's key is written into numpy's legacy generator in place:
    # the state set_state(('MT19937', key, 624, 0, 0.0)) would make, a
    # first word of 0x80000000 and 623 of the system's entropy.
    for kid in pair:
        kind, first, distinct, pos, has_gauss, gauss = value(gw, kid, NUMPY_STATE)
        assert (kind, first, pos, has_gauss, gauss) == ("MT19937", 0x80000000, 624, 0, 0.0)
        assert distinct > 600


def zygote_memory(gw):
    """The contents of the zygote's writable mappings."""
    zpid = zygote_pid(gw)
    chunks = []
    with open(f"/proc/{zpid}/maps") as maps, open(f"/proc/{zpid}/mem", "rb") as mem:
        for line in maps:
            addr, perms = line.split()[:2]
            if not perms.startswith("rw"):
                continue
            start, end = (int(x, 16) for x in addr.split("-"))
            try:
                mem.seek(start)
                chunks.append(mem.read(end - start))
            except OSError:
                continue
    return chunks


def test_hmac_keys_differ_and_never_reach_the_zygote(gw, pair):
    keys = []
    for kid in pair:
        conn = value(gw, kid, f"open('/run/kernel/{kid[:8]}.json').read()")
        keys.append(json.loads(conn)["key"])
    assert len(keys[0]) >= 32 and keys[0] != keys[1]
    # The zygote only passes descriptors on; no key is in its memory. Nor
    # the kernels' ids, which their cgroups' names carry: the request's
    # child read those onto the zygote's stack, which the zygote cleared.
    ids = [f"p-{kid}".encode() for kid in pair]
    chunks = zygote_memory(gw)
    assert [k for k in keys if any(k.encode() in c for c in chunks)] == []
    assert [i for i in ids if any(i in c for c in chunks)] == []
    # Positive control: the same scan finds what the zygote does hold.
    assert any(b"_glovebox_run" in c for c in chunks)


def test_memory_is_not_shared(gw, pair):
    a, b = pair
    # A changes objects both inherited from the zygote; B still has the
    # zygote's.
    run(gw, a, "import numpy, json; numpy.glovebox_marker = 'from A'; "
               "json.decoder.glovebox_marker = 'from A'; numpy.e_backup = numpy.e; numpy.e = 3")
    assert value(gw, a, "__import__('numpy').e") == 3
    assert value(gw, b, "(getattr(__import__('numpy'), 'glovebox_marker', None), "
                        "getattr(__import__('json').decoder, 'glovebox_marker', None), "
                        "__import__('numpy').e)") == (None, None, 2.718281828459045)
    # Nor can B reach A's process: it is not in B's pid namespace, and
    # reading another process's memory is denied.
    a_pid = int(re.findall(rf"\[{a[:8]}\] started pid (\d+)", gw.read_log())[-1])
    b_pids = value(gw, b, "sorted(int(p) for p in __import__('os').listdir('/proc') "
                          "if p.isdigit())")
    assert len(b_pids) <= 3 and a_pid not in b_pids, b_pids
    out = value(gw, b, f"""(__import__('ctypes').CDLL(None, use_errno=True).syscall(
        310, {a_pid}, 0, 1, 0, 1, 0), __import__('ctypes').get_errno(),
        __import__('os').path.exists('/proc/{a_pid}/mem'))""")
    assert out[2] is False, out
    assert out[0] == -1 and out[1] in (1, 3), out  # EPERM (seccomp) or ESRCH


def thp_collapse_available():
    """MADV_COLLAPSE: Linux 6.1 on, THP not turned off."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return False
    except OSError:
        return False
    major, minor = (int(x) for x in re.match(r"(\d+)\.(\d+)", os.uname().release).groups())
    return (major, minor) >= (6, 1)


def huge_anonymous_kib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return int(re.search(r"^AnonHugePages:\s+(\d+) kB", f.read(), re.M).group(1))


@pytest.mark.skipif(not thp_collapse_available(), reason="no MADV_COLLAPSE here")
def test_the_zygotes_memory_is_in_huge_pages(gw, pair):
    # The modules' objects: a kernel's fork copies one entry per 2 MiB of
    # them. A kernel that writes to them gets 4 KiB copies of its own
    # (test_memory_is_not_shared), and the zygote keeps its huge pages.
    zygote = zygote_pid(gw)
    before = huge_anonymous_kib(zygote)
    assert before >= 16 * 1024, before
    for kid in pair:
        run(gw, kid, "import numpy, pandas; numpy.glovebox_touch = pandas.glovebox_touch = 1; "
                     "x = [str(i) for i in range(100000)]")
    assert huge_anonymous_kib(zygote) == before


def test_files_and_tmp_are_private(gw, pair):
    a, b = pair
    run(gw, a, "open('/tmp/only-a', 'w').write('a'); open('/home/user/only-a', 'w').write('a')")
    seen = value(gw, b, """(sorted(__import__('os').listdir('/tmp')),
        __import__('os').path.exists('/home/user/only-a'),
        sorted(__import__('os').listdir('/run/kernel')))""")
    assert "only-a" not in seen[0] and seen[1] is False
    assert not any(name.startswith(a[:8]) for name in seen[2]), seen[2]
    # Positive control: A sees its own.
    assert value(gw, a, "__import__('os').path.exists('/tmp/only-a')") is True


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_a_start_keeps_to_one_core_until_a_request_could_run_code(gw):
    """While the machine is quiet a kernel's threads start on one core
    (a copy-on-write fault beside a thread running on another core costs
    that core an interrupt: bench/cow_fault), and the first request that
    could run code, the first cell here, finds every thread back on every
    core, as a cold kernel's are. kernel_info, which the gateway sends as a
    kernel starts, keeps them held."""
    with open(f"/proc/{gw.proc.pid}/status") as f:
        every = re.search(r"^Cpus_allowed_list:\s*(\S+)", f.read(), re.M).group(1)
    held = 0
    for _ in range(6):
        running = kernel_pids()
        kid = gw.start_kernel()
        try:
            # Found without a cell, which would release it.
            (pid,) = kernel_pids() - running
            before = thread_cores(pid)
            assert len(before) > 1, "the kernel has its threads when it answers"
            cores = set(before)
            if cores != {every}:
                # Held: every thread on the same single core.
                assert len(cores) == 1 and re.fullmatch(r"\d+", cores.pop()), before
                held += 1
            assert value(gw, kid, THREAD_CORES_IN_KERNEL) == [every]
            assert set(thread_cores(pid)) == {every}
            assert value(gw, kid, "len(__import__('os').sched_getaffinity(0))") == os.cpu_count()
        finally:
            gw.request("DELETE", f"/api/kernels/{kid}")
        time.sleep(0.2)
    assert held > 0, "no kernel of six serial starts was held on its core"


def test_interrupt_restart_and_shutdown(gw):
    kid = gw.start_kernel()
    try:
        assert_from_zygote(gw, kid)
        ch = gw.connect(kid)
        msg_id = ch.send("execute_request", {"code": "import time; time.sleep(60)",
                                             "silent": False})
        time.sleep(1)
        status, _, _ = gw.request("POST", f"/api/kernels/{kid}/interrupt")
        assert status == 204
        reply, _ = ch.collect(msg_id, timeout=20)
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        ch.close()
        run(gw, kid, "state = 1")
        status, _, _ = gw.request("POST", f"/api/kernels/{kid}/restart")
        assert status == 200
        assert value(gw, kid, "'state' in globals()") is False
        assert_from_zygote(gw, kid)
    finally:
        status, _, _ = gw.request("DELETE", f"/api/kernels/{kid}")
    assert status == 204
    assert gw.request("GET", f"/api/kernels/{kid}")[0] == 404


def test_kernels_exit_on_their_own_when_shut_down(gw):
    # ipykernel's control thread flushes stdout through the IOPub thread
    # after the shutdown request; the exit must not stop that thread under
    # it (then the kernel waited 10 s and the gateway killed it after 2 s:
    # one kernel in five, before the exit stopped the control thread first).
    kids = []
    for _ in range(10):
        kid = gw.start_kernel()
        run(gw, kid, "print('to flush')")
        kids.append(kid)
        assert gw.request("DELETE", f"/api/kernels/{kid}")[0] == 204
    log = gw.read_log()
    assert [k for k in kids if f"[{k[:8]}] removed" not in log] == []
    assert [k for k in kids if f"[{k[:8]}] did not exit" in log] == []


def test_a_dead_zygote_means_cold_starts():
    g = start_gateway(*ZYGOTE_ARGS)
    try:
        kid = g.start_kernel()
        assert_from_zygote(g, kid)
        os.kill(zygote_pid(g), signal.SIGKILL)
        # The kernel it made lives on; new ones start cold and work.
        assert value(g, kid, "1 + 1") == 2
        cold = g.start_kernel()
        assert_from_zygote(g, cold, expected=False)
        assert re.search(r"zygote python3: .*start cold", g.read_log())
    finally:
        g.stop()


def requests_waiting(zygote):
    """How many requests wait in the zygote's socket (descriptor 3): ss's
    receive queue, one byte a request."""
    out = subprocess.run(["ss", "-xpn"], capture_output=True, text=True, check=True).stdout
    (line,) = [line for line in out.splitlines() if f"pid={zygote},fd=3)" in line]
    return int(line.split()[2])


def test_stalled_starts_hold_no_other():
    """The kernel-host starts as many kernels at once as it has cores, and
    a start that has not reported within 200 ms holds up no other. With
    one kernel more than there are cores stalled (their zygote stopped,
    their requests waiting in its socket), the last is sent all the same,
    a cold kernel still starts at once, and the stalled ones start from
    the zygote once it runs again. Waiting for one start at a time, the
    cold kernel waited until the stalled ones' 30 s were up. (No stock: a
    process forked ahead would take the requests instead of the zygote.)"""
    g = start_gateway(*ZYGOTE_ARGS, "--sandbox-stock", "0")
    zygote = None
    try:
        assert_from_zygote(g, g.start_kernel())  # the zygote is ready
        zygote = zygote_pid(g)
        os.kill(zygote, signal.SIGSTOP)
        stalled = []
        waiters = [threading.Thread(target=lambda: stalled.append(g.start_kernel()))
                   for _ in range(len(os.sched_getaffinity(0)) + 1)]
        for w in waiters:
            w.start()
        deadline = time.monotonic() + 10
        while requests_waiting(zygote) < len(waiters) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert requests_waiting(zygote) == len(waiters), "a start waited for stalled ones"
        assert all(w.is_alive() for w in waiters), "a kernel started with its zygote stopped"
        began = time.monotonic()
        cold = g.start_kernel(name="python3", env={"PYTHONDONTWRITEBYTECODE": "1"})
        took = time.monotonic() - began
        assert all(w.is_alive() for w in waiters), \
            "a stalled start ended before the cold one was answered"
        assert took < 10, f"the cold kernel's start waited {took:.1f} s for the stalled ones"
        assert_from_zygote(g, cold, expected=False)
        assert value(g, cold, "6 * 7") == 42
        os.kill(zygote, signal.SIGCONT)
        zygote = None
        for w in waiters:
            w.join(60)
        assert len(stalled) == len(waiters), "a stalled start never ended"
        for kid in stalled:
            assert_from_zygote(g, kid)
    finally:
        if zygote:
            os.kill(zygote, signal.SIGCONT)
        g.stop()


def test_processes_that_end_at_once_are_started_then_ended(gw):
    """Twenty commands started side by side that end as soon as they run:
    each is answered as started and then as ended, with its own exit code.
    (An end the sandbox's init reports while its start is still being read
    is held until the start is answered; else the gateway would drop the
    end, and the stream would never close.)"""
    sb = e2b_create(gw)
    try:
        results = {}

        def one(code):
            frames, _ = start_command(gw, sb, {"cmd": "/bin/sh", "args": ["-c", f"exit {code}"]},
                                      timeout=60)
            results[code] = outcome(frames)

        threads = [threading.Thread(target=one, args=(code,)) for code in range(1, 21)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert results == {code: ("", code) for code in range(1, 21)}
    finally:
        e2b_kill(gw, sb)


def test_a_module_that_does_not_load_means_cold_starts():
    """The zygote is the kernelspec's Python loading glovebox-zygote.so: in
    a build whose module does not load (here a file that is no shared
    object), the zygote ends at once, the log says why, and kernels start
    cold and work."""
    build = tempfile.mkdtemp(prefix="glovebox-build-", dir="/tmp")
    os.chmod(build, 0o755)
    for program in ("glovebox", "glovebox-kernel-host", "glovebox-kernel-bridge",
                    "glovebox-sudo", "glovebox-init", "glovebox-criu-action"):
        if os.path.exists(os.path.join(BUILD, program)):
            shutil.copy2(os.path.join(BUILD, program), os.path.join(build, program))
    with open(os.path.join(build, "glovebox-zygote.so"), "wb") as f:
        f.write(b"not a shared object\n")
    g = Gateway(os.path.join(build, "glovebox"), list(EXTRA_ARGS) + list(ZYGOTE_ARGS))
    try:
        kid = g.start_kernel()
        assert_from_zygote(g, kid, expected=False)
        assert value(g, kid, "1 + 1") == 2
        log = g.read_log()
        # Found though not executable (as installed), named, and refused by
        # the loader.
        module = os.path.join(build, "glovebox-zygote.so")
        assert re.search(rf"zygote python3 started \(pid \d+, {re.escape(module)}\)", log), \
            log[-3000:]
        assert re.search(r"zygote python3: ImportError: /proc/self/fd/4: file too short", log), \
            log[-3000:]
        assert re.search(r"zygote python3: .*start cold", log), log[-3000:]
    finally:
        g.stop()
        shutil.rmtree(build, ignore_errors=True)


@pytest.mark.parametrize("bad", ["py thon:numpy", ":numpy", "python3:numpy;os", "python3:a b",
                                 "x" * 80 + ":numpy"])
def test_bad_zygote_flag_is_refused(bad):
    binary = os.path.join(os.environ["GLOVEBOX_BUILD"], "glovebox")
    out = subprocess.run([binary, "--zygote", bad, "--check-config"], capture_output=True,
                         text=True, timeout=20)
    assert out.returncode != 0
    assert "--zygote" in out.stderr, out.stderr
    # Positive control.
    out = subprocess.run([binary, "--zygote", "python3:numpy,pandas", "--check-config"],
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr


def test_pooled_kernels_come_from_the_zygote_too():
    g = start_gateway(*ZYGOTE_ARGS, "--pool", "python3=1")
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            status, body, _ = g.request("GET", "/api/status")
            if status == 200 and body["pool"]["kernelspecs"]["python3"]["ready"] >= 1:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the pool did not fill")
        kid = g.start_kernel()
        assert_from_zygote(g, kid)
        # A request with its own limits is not served by the pool, and still
        # comes from the zygote.
        other = g.start_kernel(name="python3", limits={"pids": 100})
        assert_from_zygote(g, other)
    finally:
        g.stop()


# ---- the IPython shell the zygote builds once -------------------------------

FIRST_CELL = """import sys
print(repr((sorted(k for k in globals() if k != 'sys'), list(In), dict(Out),
            get_ipython().execution_count,
            [h[2] for h in get_ipython().history_manager.get_range()])))"""


def first_cell(gw, kid):
    content, stdout, _ = run(gw, kid, FIRST_CELL)
    assert content["status"] == "ok", content
    return content["execution_count"], stdout


def shell_id(gw, kid):
    return value(gw, kid, "id(get_ipython())")


def test_prebuilt_shell_starts_empty_like_a_cold_one(gw, pair):
    cold = gw.start_kernel(name="python3", env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        # Nothing of the zygote's own set-up is in the namespace, In, Out
        # or the history: the first cell sees what it sees in a cold kernel.
        want = first_cell(gw, cold)
        for kid in pair:
            assert first_cell(gw, kid) == want
        assert want[0] == 1
        assert_from_zygote(gw, cold, expected=False)
        for kid in pair:
            assert_from_zygote(gw, kid)
        # Both kernels use the shell the zygote built (an object at the same
        # address in each), each with its own history (in memory, as a cold
        # kernel's: rootfs.c's /etc/ipython, so no thread saves it), and the
        # environment a kernel shell sets.
        assert shell_id(gw, pair[0]) == shell_id(gw, pair[1])
        assert shell_id(gw, cold) != shell_id(gw, pair[0])
        probe = """(str(get_ipython().history_manager.hist_file),
            get_ipython().history_manager.enabled,
            get_ipython().history_manager.save_thread is None,
            get_ipython().kernel is not None and get_ipython().parent is get_ipython().kernel,
            __import__('os').environ.get('PAGER'),
            sys.modules['__main__'] is get_ipython().user_module)"""
        for kid in pair + [cold]:
            assert value(gw, kid, probe) == (
                ":memory:", True, True, True, "cat", True)
        # A name one kernel defines is not in the other's namespace or
        # history, nor in the shell a later kernel gets.
        run(gw, pair[0], "glovebox_mine = 1")
        # (The name is spelt in two halves: this cell is in the history.)
        assert value(gw, pair[1], "('glovebox_' + 'mine' in globals(), "
                                  "any('glovebox_' + 'mine' in h[2] for h in "
                                  "get_ipython().history_manager.get_range()))") == (False, False)
        assert value(gw, pair[0], "('glovebox_' + 'mine' in globals(), "
                                  "any('glovebox_' + 'mine' in h[2] for h in "
                                  "get_ipython().history_manager.get_range()))") == (True, True)
        later = gw.start_kernel()
        try:
            assert first_cell(gw, later) == want
            assert_from_zygote(gw, later)
        finally:
            gw.request("DELETE", f"/api/kernels/{later}")
    finally:
        gw.request("DELETE", f"/api/kernels/{cold}")


class Cells:
    """Runs cells without stop_on_error: a request that reaches ipykernel
    just after a failed cell would otherwise be aborted (a race, not what
    is tested here)."""

    def __init__(self, ch):
        self.ch = ch

    def execute(self, code, stdin_reply=None):
        msg_id = self.ch.send("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": stdin_reply is not None, "stop_on_error": False})
        return self.ch.collect(msg_id, 60, stdin_reply)


def shell_behaviour(gw, kid):
    """What a client sees of a kernel's shell: magics, completion,
    inspection, rich output, tracebacks, input()."""
    seen = {}
    ch = gw.connect(kid)
    cells = Cells(ch)
    try:
        reply, out = cells.execute("%lsmagic")
        seen["lsmagic"] = [m["content"]["data"]["text/plain"] for m in out
                           if m["msg_type"] == "execute_result"]
        reply, out = cells.execute("glovebox_variable = 1\n%timeit -n1 -r1 pass")
        seen["timeit"] = reply["content"]["status"]
        for code in ("glovebox_va", "import nump"):
            msg_id = ch.send("complete_request", {"code": code, "cursor_pos": len(code)})
            reply, _ = ch.collect(msg_id)
            seen[code] = reply["content"]["matches"]
        msg_id = ch.send("inspect_request", {"code": "len", "cursor_pos": 3,
                                             "detail_level": 0})
        reply, _ = ch.collect(msg_id)
        seen["inspect"] = (reply["content"]["found"],
                           "Signature" in reply["content"]["data"]["text/plain"])
        reply, out = cells.execute("import matplotlib.pyplot as plt\n"
                                "plt.plot([1, 2, 3])\nplt.show()")
        seen["png"] = [sorted(m["content"]["data"]) for m in out
                       if m["msg_type"] == "display_data"]
        reply, out = cells.execute("def f():\n    return 1 / 0\nf()")
        errors = [m["content"] for m in out if m["msg_type"] == "error"]
        seen["traceback"] = (reply["content"]["ename"], errors[0]["ename"],
                             "return 1 / 0" in re.sub(r"\x1b\[[0-9;]*m", "",
                                                      "\n".join(errors[0]["traceback"])))
        reply, out = cells.execute("input('? ')")
        seen["no stdin"] = reply["content"].get("ename")
        reply, out = cells.execute("input('? ')", stdin_reply=lambda prompt: prompt + "yes")
        seen["stdin"] = [m["content"]["data"]["text/plain"] for m in out
                         if m["msg_type"] == "execute_result"]
        # The history a client asks for: its database opened then, in a
        # zygote's kernel (see test_history_is_opened_on_first_use).
        for kind, extra in (("tail", {"n": 3}), ("range", {"session": 0, "start": 1,
                                                          "stop": 4}),
                            ("search", {"pattern": "glovebox_*", "n": 5})):
            msg_id = ch.send("history_request", {"output": False, "raw": True,
                                                 "hist_access_type": kind, **extra})
            reply, _ = ch.collect(msg_id)
            seen["history " + kind] = [tuple(h) for h in reply["content"]["history"]]
        reply, out = cells.execute("!echo from a shell\n%reset -f\n%who")
        seen["reset"] = stdout_of(out)
    finally:
        ch.close()
    return seen


def test_prebuilt_shell_behaves_as_a_cold_one(gw):
    kid = gw.start_kernel()
    cold = gw.start_kernel(name="python3", env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        assert_from_zygote(gw, kid)
        assert_from_zygote(gw, cold, expected=False)
        got, want = shell_behaviour(gw, kid), shell_behaviour(gw, cold)
        assert got == want
        # And what both show is what a working kernel shows.
        assert "%timeit" in want["lsmagic"][0] and want["timeit"] == "ok"
        assert want["glovebox_va"] == ["glovebox_variable"] and "numpy" in want["import nump"]
        assert want["inspect"] == (True, True)
        assert want["png"] == [["image/png", "text/plain"]]
        assert want["traceback"] == ("ZeroDivisionError", "ZeroDivisionError", True)
        assert want["no stdin"] == "StdinNotImplementedError"
        assert want["stdin"] == ["'? yes'"]
        # (The first cell was assert_from_zygote's.)
        assert [h[:2] for h in want["history range"]] == [(0, 1), (0, 2), (0, 3)]
        assert want["history range"][1][2] == "%lsmagic"
        assert [h[2] for h in want["history search"]] == [
            "glovebox_variable = 1\n%timeit -n1 -r1 pass"]
        # (A system command prints through a pseudo-terminal: CR LF.)
        assert want["reset"].replace("\r\n", "\n") == ("from a shell\n"
                                                     "Interactive namespace is empty.\n")
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")
        gw.request("DELETE", f"/api/kernels/{cold}")


def test_history_is_opened_on_first_use(gw):
    """A zygote's kernel opens its history database (SQLite, in memory) when
    it is first used, not at its start: the cells' inputs are kept in the
    shell meanwhile, as in any kernel."""
    kid = gw.start_kernel()
    try:
        assert_from_zygote(gw, kid)
        probe = "type(get_ipython().history_manager.db).__name__"
        assert value(gw, kid, probe) == "LazyDB"
        run(gw, kid, "glovebox_x = 1")
        assert value(gw, kid, probe) == "LazyDB"
        assert value(gw, kid, "[h[2] for h in get_ipython().history_manager.search("
                              "'glovebox_x*')]") == ["glovebox_x = 1"]
        assert value(gw, kid, probe) == "Connection"
        assert value(gw, kid, "get_ipython().history_manager.get_session_info(0)[0]") == 1
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


APP = ("(lambda a: (a.argv, a.extra_args, {k: dict(v) for k, v in a.cli_config.items()}, "
       "a.connection_file, a.connection_file == __import__('sys').argv[2], "
       "type(a).parse_command_line is __import__('traitlets').config.Application"
       ".parse_command_line))(__import__('ipykernel.kernelapp').kernelapp.IPKernelApp.instance())")


def test_kernel_application_reads_its_command_line_as_a_cold_one(gw):
    # The zygote's kernels skip traitlets' parser for the usual "-f FILE";
    # what the application holds afterwards is what the parser gives a cold
    # kernel, and the parser is back in place for anything that calls it.
    kid = gw.start_kernel()
    cold = gw.start_kernel(name="python3", env={"PYTHONDONTWRITEBYTECODE": "1"})
    try:
        assert_from_zygote(gw, kid)
        assert_from_zygote(gw, cold, expected=False)
        got, want = value(gw, kid, APP), value(gw, cold, APP)
        path = want[3]
        assert path.startswith("/run/kernel/") and path.endswith(".json"), want
        assert want == (["-f", path], [], {"IPKernelApp": {"connection_file": path}}, path,
                        True, True)
        assert got[3] != path and got == (["-f", got[3]], [], {"IPKernelApp": {
            "connection_file": got[3]}}, got[3], True, True)
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")
        gw.request("DELETE", f"/api/kernels/{cold}")


PROFILE = "/home/user/.ipython/profile_default"


def restart(gw, kid):
    status, _, _ = gw.request("POST", f"/api/kernels/{kid}/restart")
    assert status == 200


def test_profile_config_and_startup_files_in_the_home(gw, pair):
    a, b = pair
    prebuilt = shell_id(gw, b)
    # Startup files and configuration of the kernel application only: the
    # prebuilt shell is used, and they run in it.
    run(gw, a, f"""import os
os.makedirs('{PROFILE}/startup', exist_ok=True)
open('{PROFILE}/startup/00-glovebox.py', 'w').write('glovebox_started = 42\\n')
open('{PROFILE}/ipython_kernel_config.py', 'w').write(
    "c.IPKernelApp.exec_lines = ['glovebox_exec = 7']\\n")""")
    restart(gw, a)
    assert_from_zygote(gw, a)
    assert value(gw, a, "(glovebox_started, glovebox_exec)") == (42, 7)
    assert shell_id(gw, a) == prebuilt
    # Configuration of the shell itself: honoured, by a shell built in the
    # kernel (the one the zygote built knows nothing of it).
    run(gw, a, f"""open('{PROFILE}/ipython_kernel_config.py', 'a').write(
    "c.InteractiveShell.ast_node_interactivity = 'all'\\n"
    "c.PlainTextFormatter.max_seq_length = 3\\n")""")
    restart(gw, a)
    assert_from_zygote(gw, a)
    assert value(gw, a, "(glovebox_started, glovebox_exec)") == (42, 7)
    assert shell_id(gw, a) != prebuilt
    _, _, out = run(gw, a, "1\n2\nlist(range(10))")
    results = [m["content"]["data"]["text/plain"] for m in out
               if m["msg_type"] == "execute_result"]
    assert results == ["1", "2", "[0, 1, 2, ...]"], results
    # Positive control: the neighbour, without that file, shows one result.
    _, _, out = run(gw, b, "1\n2\nlist(range(10))")
    assert [m["content"]["data"]["text/plain"] for m in out
            if m["msg_type"] == "execute_result"] == [str(list(range(10)))]
