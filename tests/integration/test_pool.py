"""The warm pool: kernels started ahead, invisible until taken, each fresh
and in its own sandbox, never handed to two clients, refilled behind every
take; requests that ask for something else go around it."""
import json
import os
import pathlib
import shutil
import tempfile
import time

from gbclient import (e2b_create, e2b_run, expect_out_of_memory, host_limits,
                      start_gateway, start_with_keys, stdout_of)


def status(gw):
    code, body, _ = gw.request("GET", "/api/status")
    assert code == 200, body
    return body["pool"]


def wait_pool(gw, ready, name="python3", timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        pool = status(gw)
        if pool["kernelspecs"][name]["ready"] == ready:
            return pool
        time.sleep(0.1)
    raise AssertionError(f"pool never had {ready} ready: {status(gw)}")


def take(gw, **body):
    t0 = time.monotonic()
    code, model, headers = gw.request("POST", "/api/kernels", body or {})
    assert code == 201, model
    return model, time.monotonic() - t0


def run(gw, kernel_id, code):
    ch = gw.connect(kernel_id)
    try:
        reply, outputs = ch.execute(code)
        return reply, outputs
    finally:
        ch.close()


def test_pooled_kernels_are_fresh_isolated_and_refilled():
    gw = start_gateway("--pool", "python3=2")
    try:
        pool = wait_pool(gw, 2)
        assert pool["kernelspecs"]["python3"] == {"target": 2, "ready": 2, "starting": 0,
                                                  "taken": 0, "failed": 0}
        assert pool["paused"] is False and pool["memory_available_mb"] > 0
        # Pooled kernels belong to nobody: not listed, not counted.
        assert gw.request("GET", "/api/kernels")[1] == []
        assert gw.request("GET", "/api/status")[1]["kernels"] == 0

        a, took_a = take(gw)
        b, took_b = take(gw)
        assert a["id"] != b["id"] and a["execution_state"] == "idle"
        assert status(gw)["kernelspecs"]["python3"]["taken"] == 2
        # Ready at once: no kernel start in the request (which takes ~0.3 s).
        assert max(took_a, took_b) < 0.25, (took_a, took_b)
        assert sorted(k["id"] for k in gw.request("GET", "/api/kernels")[1]) == sorted(
            [a["id"], b["id"]])

        # Fresh: nothing ran in it before (the first cell is number 1, no
        # user variables, no history).
        reply, outputs = run(gw, a["id"], "import os\n"
                             "print(sorted(k for k in globals() if not k.startswith('_')"
                             " and k not in ('In', 'Out', 'get_ipython', 'exit', 'quit', 'os')))\n"
                             "print(len(In))\n"
                             "open('/home/user/mine', 'w').write('a'); x = 'a'")
        assert reply["content"]["execution_count"] == 1
        assert stdout_of(outputs) == "[]\n2\n"
        # Isolated: b has its own variables and its own sandbox.
        reply, outputs = run(gw, b["id"], "import os\n"
                             "print('x' in globals(), os.path.exists('/home/user/mine'))")
        assert stdout_of(outputs) == "False False\n"
        reply, outputs = run(gw, a["id"], "print(x, open('/home/user/mine').read())")
        assert stdout_of(outputs) == "a a\n"

        # Refilled behind the takes, with kernels nobody has seen.
        wait_pool(gw, 2)
        c, _ = take(gw)
        assert c["id"] not in (a["id"], b["id"])
        assert status(gw)["kernelspecs"]["python3"]["taken"] == 3
        # A deleted kernel does not come back to the pool.
        assert gw.request("DELETE", f"/api/kernels/{a['id']}")[0] == 204
        wait_pool(gw, 2)
        ids = [take(gw)[0]["id"] for _ in range(2)]
        assert a["id"] not in ids
    finally:
        gw.stop()


def taken(gw):
    return status(gw)["kernelspecs"]["python3"]["taken"]


def test_a_pooled_kernel_takes_the_requests_own_env_and_limits():
    gw = start_gateway("--pool", "python3=1")
    try:
        wait_pool(gw, 1)
        model, _ = take(gw, env={"GLOVEBOX_TEST_VAR": "from the request",
                                 "PYTHONPATH": "/home/user/lib"},
                        limits={"memory_mb": 300, "pids": 77, "cpus": 0.5})
        assert taken(gw) == 1
        reply, outputs = run(gw, model["id"], (
            "import os, subprocess, sys\n"
            "print(os.environ['GLOVEBOX_TEST_VAR'])\n"
            "print(subprocess.run(['sh', '-c', 'echo $GLOVEBOX_TEST_VAR'],"
            " capture_output=True, text=True).stdout.strip())\n"
            "print(sys.path[1])\n"
            "print(sorted(k for k in globals() if not k.startswith('_')"
            " and k not in ('In', 'Out', 'get_ipython', 'exit', 'quit', 'os', 'subprocess',"
            " 'sys')))\n"
            "print(open('/proc/self/uid_map').read().split())"))
        lines = stdout_of(outputs).splitlines()
        assert lines[:4] == ["from the request", "from the request", "/home/user/lib", "[]"], lines
        # Set silently: the user's first cell is number 1.
        assert reply["content"]["execution_count"] == 1
        # Its sandbox's cgroup holds the limits asked for, not the pool's.
        assert host_limits(eval(lines[4])) == {"memory": str(300 << 20), "pids": "77",
                                               "cpu": "50000"}
        # Enforced: past 300 MiB it dies of it, and its restart keeps the env.
        ch = gw.connect(model["id"])
        try:
            msg_id = ch.send("execute_request", {"code": "x = bytearray(400 << 20)",
                                                 "silent": False})
            expect_out_of_memory(ch, msg_id, 300)
            _, outputs = ch.execute("import os; print(os.environ.get('GLOVEBOX_TEST_VAR'))")
            assert stdout_of(outputs) == "from the request\n"
        finally:
            ch.close()
        # More than the pool's limits, too.
        wait_pool(gw, 1)
        model, _ = take(gw, limits={"memory_mb": 2048, "cpus": 2})
        assert taken(gw) == 2
        _, outputs = run(gw, model["id"], "print(open('/proc/self/uid_map').read().split())")
        assert host_limits(eval(stdout_of(outputs))) == {"memory": str(2048 << 20),
                                                         "pids": "256", "cpu": "200000"}
    finally:
        gw.stop()


def test_requests_a_running_kernel_cannot_take_go_around_the_pool():
    gw = start_gateway("--pool", "python3=1")
    try:
        wait_pool(gw, 1)
        # Read by Python only as it starts: a kernel of its own.
        model, _ = take(gw, env={"PYTHONHASHSEED": "7"})
        _, outputs = run(gw, model["id"], "import sys; print(sys.flags.hash_randomization)")
        assert stdout_of(outputs) == "1\n" and taken(gw) == 0
        # Read by IPython as it starts: the same.
        model, _ = take(gw, env={"IPYTHONDIR": "/tmp/ipy"})
        _, outputs = run(gw, model["id"], "print(get_ipython().ipython_dir)")
        assert stdout_of(outputs) == "/tmp/ipy\n" and taken(gw) == 0
        # Less memory or fewer processes than a warm kernel may hold
        # already, or another disk: the same.
        take(gw, limits={"memory_mb": 128})
        take(gw, limits={"pids": 32})
        take(gw, limits={"disk_mb": 512})
        assert taken(gw) == 0
        # The same limits as the defaults, spelled out, use the pool.
        take(gw, limits={"memory_mb": 1024})
        assert taken(gw) == 1
    finally:
        gw.stop()


def test_limits_below_what_the_pooled_kernel_holds_are_refused_with_a_reason():
    # A pre-import that holds 300 MiB: a request for 280 MiB cannot have it.
    gw = start_gateway("--pool", "python3=1", "--pool-preimport",
                       "python3=_held = b'x' * (300 << 20)")
    try:
        wait_pool(gw, 1)
        code, body, _ = gw.request("POST", "/api/kernels", {"limits": {"memory_mb": 280}})
        assert code == 503, body
        assert "cannot take those limits" in body["message"] and "280" in body["message"], body
        # Nobody holds it; the pool refills and serves the next request.
        assert gw.request("GET", "/api/kernels")[1] == []
        wait_pool(gw, 1)
        model, _ = take(gw, limits={"memory_mb": 768})
        _, outputs = run(gw, model["id"], "print(len(_held) >> 20)")
        assert stdout_of(outputs) == "300\n" and taken(gw) == 2
    finally:
        gw.stop()


def test_pre_import_runs_before_the_kernel_is_handed_out():
    gw = start_gateway("--pool", "python3=1", "--pool-preimport",
                       "python3=import numpy, pandas, matplotlib.pyplot")
    try:
        wait_pool(gw, 1)
        model, _ = take(gw)
        reply, outputs = run(gw, model["id"], "import sys\n"
                             "print(all(m in sys.modules for m in "
                             "('numpy', 'pandas', 'matplotlib.pyplot')))")
        assert stdout_of(outputs) == "True\n"
        assert reply["content"]["execution_count"] == 1, "the pre-import left no count"
    finally:
        gw.stop()


def test_a_failing_pre_import_is_counted_and_no_kernel_is_handed_out_half_warm():
    gw = start_gateway("--pool", "python3=1", "--pool-preimport", "python3=import no_such_module")
    try:
        deadline = time.time() + 30
        while status(gw)["kernelspecs"]["python3"]["failed"] == 0 and time.time() < deadline:
            time.sleep(0.2)
        assert status(gw)["kernelspecs"]["python3"]["failed"] >= 1
        assert status(gw)["kernelspecs"]["python3"]["ready"] == 0
        # A request still gets a kernel, started for it.
        model, took = take(gw)
        assert status(gw)["kernelspecs"]["python3"]["taken"] == 0
    finally:
        gw.stop()


def test_pool_kernels_count_toward_max_kernels():
    gw = start_gateway("--pool", "python3=2", "--max-kernels", "2")
    try:
        wait_pool(gw, 2)
        # One the pool cannot serve (less memory than a warm kernel may hold).
        code, body, _ = gw.request("POST", "/api/kernels", {"limits": {"memory_mb": 128}})
        assert code == 403 and "limit" in body["message"]
        model, _ = take(gw)
        assert status(gw)["kernelspecs"]["python3"]["taken"] == 1
        # The pool may refill only up to the maximum: one slot is in use.
        time.sleep(1.5)
        pool = status(gw)["kernelspecs"]["python3"]
        assert pool["ready"] + pool["starting"] == 1
    finally:
        gw.stop()


def test_the_pool_pauses_when_memory_is_short():
    gw = start_gateway("--pool", "python3=2", "--pool-min-available-mb", "100000000")
    try:
        time.sleep(1.5)
        pool = status(gw)
        assert pool["paused"] is True
        assert pool["kernelspecs"]["python3"]["ready"] == 0
        assert pool["kernelspecs"]["python3"]["starting"] == 0
        assert "pool paused" in gw.read_log()
    finally:
        gw.stop()


def test_bad_pool_flags_stop_the_start():
    for args, message in [(["--pool", "nope=1"], "no kernelspec named 'nope'"),
                          (["--pool", "python3"], "NAME=VALUE"),
                          (["--pool", "python3=-1"], "whole number"),
                          (["--pool-preimport", "python3=import os"], "has no --pool")]:
        try:
            gw = start_gateway(*args)
        except RuntimeError as e:
            assert message in str(e), (args, str(e))
        else:
            gw.stop()
            raise AssertionError(f"{args} started")


def test_an_e2b_sandbox_starts_from_the_pool():
    gw = start_gateway("--pool", "python3=1")
    try:
        wait_pool(gw, 1)
        code, sb, _ = gw.request("POST", "/e2b/v2/sandboxes", {"timeout": 60}, token="",
                                 headers={"X-API-KEY": gw.token})
        assert code == 201, sb
        assert status(gw)["kernelspecs"]["python3"]["taken"] == 1
        headers = {"E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49999",
                   "X-Access-Token": sb["envdAccessToken"], "Content-Type": "application/json"}
        code, body, _ = gw.request("POST", "/e2b/contexts", {}, token="", headers=headers)
        assert code == 200, body
        # With envVars the sandbox is made for the request.
        code, sb2, _ = gw.request("POST", "/e2b/v2/sandboxes", {"envVars": {"A": "1"}},
                                  token="", headers={"X-API-KEY": gw.token})
        assert code == 201 and status(gw)["kernelspecs"]["python3"]["taken"] == 1
    finally:
        gw.stop()


def e2b_execute(gw, sb, code):
    """What code run in sb's default context printed, and its results; it
    raised nothing."""
    status, lines = e2b_run(gw, sb, {"code": code})
    assert status == 200, lines
    assert not [line for line in lines if line["type"] == "error"], lines
    return ("".join(line["text"] for line in lines if line["type"] == "stdout"),
            [line for line in lines if line["type"] == "result"])


def test_an_e2b_create_from_the_pool_costs_its_kernel_one_execution():
    # The pre-import counts every execute_request the kernel gets after it
    # (ipykernel's handler, wrapped); the sandbox's envVars and its
    # context's startup (display formats, user site, cwd) go as one.
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="glovebox-spec-"))
    os.chmod(tmp_path, 0o755)
    spec = json.load(open("/usr/share/jupyter/kernels/python3/kernel.json"))
    spec["metadata"] = {"glovebox": {"preimport": (
        "import sys\n"
        "sys.glovebox_runs, handlers = [], get_ipython().kernel.shell_handlers\n"
        "def counted(*args, handler=handlers['execute_request']):\n"
        "    sys.glovebox_runs.append(1)\n"
        "    return handler(*args)\n"
        "handlers['execute_request'] = counted\n")}}
    (tmp_path / "python3").mkdir()
    (tmp_path / "python3" / "kernel.json").write_text(json.dumps(spec))
    gw = start_gateway("--kernelspec-path", str(tmp_path), "--pool", "python3=1")
    check = ("import os, sys; print(len(sys.glovebox_runs), os.environ.get('GLOVEBOX_A'), "
             "os.getcwd())\n"
             "import pandas; pandas.DataFrame({'a': [1, 2]})")
    try:
        for env in ({"GLOVEBOX_A": "1"}, {}):
            wait_pool(gw, 1)
            printed, results = e2b_execute(gw, e2b_create(gw, 60, env), check)
            # One execution before this cell, and this cell.
            assert printed == f"2 {env.get('GLOVEBOX_A')} /home/user\n", printed
            # E2B's display extension is loaded: a DataFrame's e2b/data.
            assert results and results[0].get("data", {}).get("a") == [1, 2], results
        assert status(gw)["kernelspecs"]["python3"]["taken"] == 2
    finally:
        gw.stop()
        shutil.rmtree(tmp_path)


def test_an_e2b_create_from_the_pool_is_answered_before_its_env_has_run():
    # The pre-import makes the kernel take 2 s over every silent execution
    # (the pool's warm-up, then the sandbox's envVars with its context's
    # startup). The create is answered as that execution is sent; the first
    # cell still runs after it, and sees the env.
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="glovebox-spec-"))
    os.chmod(tmp_path, 0o755)
    spec = json.load(open("/usr/share/jupyter/kernels/python3/kernel.json"))
    spec["metadata"] = {"glovebox": {"preimport": (
        "import asyncio\n"
        "handlers = get_ipython().kernel.shell_handlers\n"
        "async def slowed(stream, ident, parent, handler=handlers['execute_request']):\n"
        "    if parent['content'].get('silent'):\n"
        "        await asyncio.sleep(2)\n"
        "    return await handler(stream, ident, parent)\n"
        "handlers['execute_request'] = slowed\n")}}
    (tmp_path / "python3").mkdir()
    (tmp_path / "python3" / "kernel.json").write_text(json.dumps(spec))
    gw = start_gateway("--kernelspec-path", str(tmp_path), "--pool", "python3=1")
    try:
        wait_pool(gw, 1)
        t0 = time.monotonic()
        sb = e2b_create(gw, 60, {"GLOVEBOX_A": "2"})
        created = time.monotonic() - t0
        printed, _ = e2b_execute(gw, sb, "import os; print(os.environ['GLOVEBOX_A'], os.getcwd())")
        ran = time.monotonic() - t0
        assert status(gw)["kernelspecs"]["python3"]["taken"] == 1
        assert created < 1.5 and ran >= 2, (created, ran)
        assert printed == "2 /home/user\n", printed
    finally:
        gw.stop()
        shutil.rmtree(tmp_path)


def test_pooled_python_kernels_compile_the_e2b_display_extension_while_they_wait():
    gw = start_gateway("--pool", "python3=1")
    try:
        wait_pool(gw, 1)
        # Compiled by the pool (the code object's file is the extension's),
        # and run from there; then a kernel of its own (envVars the pool
        # cannot take), which compiles it as its context starts. Both give
        # E2B's results.
        for env, want in ((None, "glovebox/e2b_display.py\n"),
                          ({"PYTHONHASHSEED": "1"}, "False\n")):
            printed, results = e2b_execute(
                gw, e2b_create(gw, 60, env),
                "import sys; c = getattr(sys, '_glovebox_e2b_display', None)\n"
                "print(hasattr(sys, '_glovebox_e2b_display') if c is None else c.co_filename)\n"
                "import pandas; pandas.DataFrame({'a': [3]})")
            assert printed == want, printed
            assert results and results[0].get("data", {}).get("a") == [3], results
            assert status(gw)["kernelspecs"]["python3"]["taken"] == 1
    finally:
        gw.stop()


def test_a_kernelspec_names_its_own_pre_import():
    # (A directory the sandbox's user may enter: pytest's tmp_path is not.)
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="glovebox-spec-"))
    os.chmod(tmp_path, 0o755)
    spec = json.load(open("/usr/share/jupyter/kernels/python3/kernel.json"))
    spec["display_name"] = "Python 3 (pre-imported)"
    # sched: a module no fresh kernel imports (the control shows it).
    spec["metadata"] = {"glovebox": {"preimport": "import json, sched"}}
    (tmp_path / "warm").mkdir()
    (tmp_path / "warm" / "kernel.json").write_text(json.dumps(spec))
    gw = start_gateway("--kernelspec-path", str(tmp_path), "--pool", "warm=1")
    check = "import sys; print('sched' in sys.modules)"
    try:
        wait_pool(gw, 1, name="warm")
        model, _ = take(gw, name="warm")
        assert status(gw)["kernelspecs"]["warm"]["taken"] == 1
        _, outputs = run(gw, model["id"], check)
        assert stdout_of(outputs) == "True\n"
        # The control: a kernel of the same Python, without the pre-import.
        control, _ = take(gw, name="python3")
        _, outputs = run(gw, control["id"], check)
        assert stdout_of(outputs) == "False\n"
    finally:
        gw.stop()
        shutil.rmtree(tmp_path)


def _kernel_pids(gw):
    """{kernel id prefix: host pid} of every kernel under gw's sandboxes."""
    import subprocess

    def children(pid):
        out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    found = {}
    for host in children(gw.proc.pid):
        for init in children(host):
            for pid in children(init):
                try:
                    args = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                for arg in args:
                    if arg.startswith(b"/run/kernel/") and arg.endswith(b".json"):
                        found[arg[12:-5].decode()] = pid
    return found


def _sandbox_cpu_weight(pid):
    """The CPU weight of the sandbox's group holding pid (its process group's
    parent): cpu.shares on cgroup v1, cpu.weight on v2; None without one."""
    for line in pathlib.Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return int((pathlib.Path("/sys/fs/cgroup/cpu" + path).parent / "cpu.shares")
                       .read_text())
        weight = pathlib.Path("/sys/fs/cgroup" + path).parent / "cpu.weight"
        if controllers == "" and weight.exists():
            return int(weight.read_text())
    return None


def test_pooled_sandboxes_run_in_the_background_until_taken():
    """A refill takes only the CPU that cells leave: a pooled kernel's
    sandbox has the least CPU weight until it is handed out, then the usual
    one; the refill behind it is in the background again."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("cgroups are set only as root")
    gw = start_gateway("--pool", "python3=1")
    try:
        wait_pool(gw, 1)
        (pooled, pid), = _kernel_pids(gw).items()
        weight = _sandbox_cpu_weight(pid)
        if weight is None:
            import pytest
            pytest.skip("no cgroup CPU controller here")
        assert weight in (1, 2), weight  # v2's least, v1's least
        model, _ = take(gw)
        assert model["id"].startswith(pooled)
        assert _sandbox_cpu_weight(pid) in (100, 1024)
        # The taken kernel works at its usual weight.
        assert stdout_of(run(gw, model["id"], "print(6 * 7)")[1]) == "42\n"
        wait_pool(gw, 1)
        refill = {k: p for k, p in _kernel_pids(gw).items() if not model["id"].startswith(k)}
        (_, refill_pid), = refill.items()
        assert _sandbox_cpu_weight(refill_pid) in (1, 2)
        # Requests that go around the pool run at the usual weight.
        own, _ = take(gw, env={"A": "1"})
        assert _sandbox_cpu_weight(_kernel_pids(gw)[own["id"][:8]]) in (100, 1024)
    finally:
        gw.stop()


def test_one_tenant_takes_at_most_half_of_the_pool_until_it_is_full_again(tmp_path):
    """With several keys the pool is shared: one tenant's creates take at
    most half of it (rounded up) until it is full again, and the next ones
    start kernels of their own, so that one tenant cannot empty it for the
    others. (With the token alone, one tenant takes it all:
    test_pooled_kernels_are_fresh_isolated_and_refilled.)"""
    import concurrent.futures

    gw = start_with_keys(tmp_path, ("alice", "bob"), "--pool", "python3=4")
    try:
        wait_pool(gw, 4)
        # Three at once: two from the pool, one started for her.
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            alice = list(ex.map(gw.create, ["alice"] * 3))
        assert len(set(alice)) == 3
        assert taken(gw) == 2, status(gw)
        # Bob's comes from what was kept.
        gw.create("bob")
        assert taken(gw) == 3, status(gw)
        # Full again, the pool serves her again.
        wait_pool(gw, 4)
        gw.create("alice")
        assert taken(gw) == 4, status(gw)
    finally:
        gw.stop()


def at_max_kernels_with_her_half_taken(tmp_path):
    """A gateway with a pool of 4 and room for 5 kernels, where Alice has
    taken her half of the pool."""
    gw = start_with_keys(tmp_path, ("alice", "bob"), "--pool", "python3=4",
                         "--max-kernels", "5")
    try:
        wait_pool(gw, 4)
        gw.create("alice")
        gw.create("alice")
        assert taken(gw) == 2
    except BaseException:
        gw.stop()
        raise
    return gw


def test_a_pool_that_cannot_fill_does_not_hold_a_tenant_back(tmp_path):
    """A pool kept below its target (here by --max-kernels) is as full as it
    gets once nothing is on its way: the shares start over, and a tenant
    that had its half is served from it again."""
    gw = at_max_kernels_with_her_half_taken(tmp_path)
    try:
        # Two of hers and three pooled: the most there may be.
        wait_pool(gw, 3)
        assert status(gw)["kernelspecs"]["python3"]["starting"] == 0
        gw.create("alice")
        assert taken(gw) == 3, status(gw)
    finally:
        gw.stop()


def test_a_tenant_at_its_share_is_served_from_the_pool_at_max_kernels(tmp_path):
    """At --max-kernels a start of the tenant's own would be refused (403):
    a tenant that had its half is then served from the pool rather than
    refused while kernels wait there (here while the pool starts the one
    more kernel the limit allows)."""
    gw = at_max_kernels_with_her_half_taken(tmp_path)
    try:
        deadline = time.time() + 30
        while status(gw)["kernelspecs"]["python3"]["starting"] != 1:
            assert time.time() < deadline, status(gw)
            time.sleep(0.01)
        gw.create("alice")
        assert taken(gw) == 3, status(gw)
    finally:
        gw.stop()


def test_a_pooled_kernels_first_session_has_its_sockets_connected_ahead():
    """While a kernel waits in the pool, the three sockets (shell, control,
    stdin) of its first client session are connected to it already: a
    claim's first request does not wait for their handshakes, here or in
    the kernel. That session works whole (a cell, input() over stdin,
    which the kernel sends to the identity shell came from, a request on
    control) and a second session has sockets of its own. A kernel claimed
    and never connected to gives them back after 10 s
    (SESSION_PARK_SECONDS): nobody holds descriptors by never coming."""
    # At --max-kernels 1 a claim leaves no room for a refill, whose
    # sockets would be counted with the claimed kernel's.
    gw = start_gateway("--pool", "python3=1", "--max-kernels", "1", "--log-level", "debug")
    took = "took the sockets opened ahead"

    def fds():
        return len(os.listdir(f"/proc/{gw.proc.pid}/fd"))

    def taken_by(kernel_id):
        return [line for line in gw.read_log().splitlines()
                if took in line and kernel_id[:8] in line]

    try:
        wait_pool(gw, 1)
        unused, _ = take(gw)
        claimed = fds()
        deadline = time.time() + 12.5
        while fds() > claimed - 6 and time.time() < deadline:
            time.sleep(0.2)
        assert fds() <= claimed - 6, f"{claimed} descriptors, then {fds()}"
        reply, _ = run(gw, unused["id"], "1 + 1")
        assert reply["content"]["status"] == "ok", reply
        assert taken_by(unused["id"]) == []
        assert gw.request("DELETE", f"/api/kernels/{unused['id']}")[0] == 204

        wait_pool(gw, 1)
        a, _ = take(gw)
        first = gw.connect(a["id"])
        reply, _ = first.execute("name = input('who? ')", stdin_reply=lambda prompt: "ada")
        assert reply["content"]["status"] == "ok", reply
        assert len(taken_by(a["id"])) == 1, gw.read_log()[-3000:]
        msg_id = first.send("kernel_info_request", {}, channel="control")
        m = first.recv(30)
        while m["parent_header"].get("msg_id") != msg_id or m["channel"] != "control":
            m = first.recv(30)
        assert m["msg_type"] == "kernel_info_reply", m
        second = gw.connect(a["id"])
        reply, outputs = second.execute("name")
        assert [o["content"]["data"]["text/plain"] for o in outputs
                if o["msg_type"] == "execute_result"] == ["'ada'"]
        second.close()
        first.close()
        assert len(taken_by(a["id"])) == 1
    finally:
        gw.stop()
