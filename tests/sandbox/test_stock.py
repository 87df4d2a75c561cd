"""Sandboxes made ahead (docs/performance.md#sandboxes-made-ahead): as root,
once a request of the host's form has been served, the kernel-host keeps
--sandbox-stock sandboxes of its shape made ahead, idle at the least CPU
weight; the next such request claims one, which gets the request's own
limits and the usual weight. Real gateway, kernel-host, sandboxes and
kernels; each sandbox is told by its init's host pid."""
import os
import signal
import subprocess
import time

import pytest

from conftest import start_gateway, value
from gbclient import (assert_pids_limit_holds, children, cmdline, host_limits, kernel_host,
                      start_with_keys)
from test_host_faults import alive, stock_inits, wait_for
from test_pause_memory import confinement

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes are made ahead as root")

LIMITS = {"memory_mb": 300, "pids": 77, "cpus": 0.5}


def kernel_pid(gw, kid):
    """The kernel's host pid, found by the host uid its sandbox maps 1000 to."""
    uid_map = value(gw, kid, "open('/proc/self/uid_map').read().split()")
    host_uid = uid_map[uid_map.index("1000") + 1]
    pids = subprocess.run(["pgrep", "-u", host_uid, "-f", "ipykernel"], capture_output=True,
                          text=True).stdout.split()
    assert len(pids) == 1, pids
    return int(pids[0])


def init_of(gw, kid):
    """The host pid of the kernel's sandbox's init: its parent."""
    with open(f"/proc/{kernel_pid(gw, kid)}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def cpu_weight(pid):
    """pid's cgroup's CPU weight, as cgroup v2 (cpu.weight) or v1
    (cpu.shares) says it; the sandbox's group for a kernel, whose own is
    below it."""
    for line in open(f"/proc/{pid}/cgroup"):
        _, ctrls, path = line.strip().split(":", 2)
        group = os.path.dirname(path) if os.path.basename(path).startswith("p-") else path
        if not ctrls and os.path.exists(f"/sys/fs/cgroup{group}/cpu.weight"):
            return "weight", open(f"/sys/fs/cgroup{group}/cpu.weight").read().strip()
        if "cpu" in ctrls.split(","):
            for base in (f"/sys/fs/cgroup/{ctrls}", "/sys/fs/cgroup/cpu"):
                if os.path.exists(f"{base}{group}/cpu.shares"):
                    return "shares", open(f"{base}{group}/cpu.shares").read().strip()
    pytest.fail(f"no CPU weight for {pid}")


def uptime():
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def started_at(pid):
    """When pid started, in seconds since boot (as /proc/uptime counts)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")


def full_stock(host, n):
    return wait_for(lambda: len(stock_inits(host)) == n and stock_inits(host), 30,
                    f"{n} sandboxes made ahead")


def test_a_request_claims_a_sandbox_made_ahead_with_its_own_limits():
    gw = start_gateway("--sandbox-stock", "2")
    try:
        host = kernel_host(gw)
        # None before the first request: it gives the stock its shape.
        time.sleep(0.3)
        assert stock_inits(host) == []
        first = gw.start_kernel()
        assert value(gw, first, "1 + 1") == 2
        ready = full_stock(host, 2)
        # Idle: the least weight.
        assert cpu_weight(ready[0]) in (("weight", "1"), ("shares", "2")), cpu_weight(ready[0])
        time.sleep(0.05)
        asked = uptime()
        kid = gw.start_kernel(name="python3", limits=LIMITS)
        init = init_of(gw, kid)
        # One made ahead, before the request, not one made for it.
        assert init in ready and started_at(init) < asked, (init, ready)
        # With the request's limits and the usual weight.
        assert host_limits(confinement(gw, kid)["uid_map"]) == {
            "memory": str(300 << 20), "pids": "77", "cpu": "50000"}
        assert cpu_weight(kernel_pid(gw, kid)) in (("weight", "100"), ("shares", "1024"))
        # Its group is named after its sandbox, as any: the gateway finds it.
        status, metrics, _ = gw.request("GET", f"/api/kernels/{kid}/metrics")
        assert status == 200 and metrics["memUsed"] > 10 << 20, metrics
        # The limits hold, not only read back: past its pids limit a fork fails.
        assert_pids_limit_holds(gw, kid, 77)
        # The stock is made again, with sandboxes it did not have.
        again = full_stock(host, 2)
        assert init not in again
        # Its kernel runs as any other; its sandbox ends with it.
        assert value(gw, kid, "sum(range(10))") == 45
        assert gw.request("DELETE", f"/api/kernels/{kid}")[0] == 204
        wait_for(lambda: not alive(init), 10, "the claimed sandbox ends with its kernel")
    finally:
        assert gw.stop() == 0
    assert not any(alive(p) for p in again), "the stock ends with the gateway"


def test_a_request_of_another_shape_makes_its_own_and_reshapes_the_stock():
    gw = start_gateway("--sandbox-stock", "1")
    try:
        host = kernel_host(gw)
        gw.start_kernel()
        old = full_stock(host, 1)
        time.sleep(0.05)
        asked = uptime()
        # Another disk: not of the stock's shape.
        kid = gw.start_kernel(name="python3", limits={"disk_mb": 64})
        init = init_of(gw, kid)
        assert init not in old and started_at(init) >= asked - 0.02, (init, old)
        # The stock takes the new shape: the old one goes, one of 64 MiB is
        # made, and the next such request claims it.
        wait_for(lambda: not alive(old[0]), 10, "the stock of the old shape removed")
        new = full_stock(host, 1)
        kid2 = gw.start_kernel(name="python3", limits={"disk_mb": 64})
        assert init_of(gw, kid2) == new[0]
        assert value(gw, kid2, "__import__('shutil').disk_usage('/home/user').total >> 20") \
            <= 64
    finally:
        assert gw.stop() == 0


def test_a_sandbox_made_ahead_that_dies_is_made_again():
    gw = start_gateway("--sandbox-stock", "2")
    try:
        host = kernel_host(gw)
        kid = gw.start_kernel()
        ready = full_stock(host, 2)
        os.kill(ready[0], signal.SIGKILL)
        wait_for(lambda: "a sandbox made ahead ended" in gw.read_log(), 10, "the death is logged")
        again = full_stock(host, 2)
        assert ready[0] not in again
        # Requests are served as before, from what is left of the stock.
        other = gw.start_kernel()
        assert init_of(gw, other) in again
        assert value(gw, other, "6 * 7") == 42 and value(gw, kid, "1") == 1
    finally:
        assert gw.stop() == 0


def test_no_stock_makes_each_sandbox_on_request():
    gw = start_gateway("--sandbox-stock", "0")
    try:
        host = kernel_host(gw)
        gw.start_kernel()
        time.sleep(0.5)
        assert stock_inits(host) == []
        asked = uptime()
        kid = gw.start_kernel()
        assert started_at(init_of(gw, kid)) >= asked - 0.02
    finally:
        assert gw.stop() == 0


def test_one_tenant_takes_at_most_half_of_the_stock_until_it_is_full_again(tmp_path):
    """With several keys the stock is shared: one tenant's creates claim at
    most half of it (rounded up) until it is full again, and the next ones
    get sandboxes made for them, so that one tenant cannot empty it for the
    others; what was kept is the next tenant's."""
    import concurrent.futures

    gw = start_with_keys(tmp_path, ("alice", "bob"), "--sandbox-stock", "4")
    try:
        host = kernel_host(gw)
        gw.create("bob")  # gives the stock its shape
        ready = full_stock(host, 4)
        # Three at once: two sandboxes made ahead, one made for her.
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            alice = list(ex.map(gw.create, ["alice"] * 3))
        inits = [init_of(gw, kid) for kid in alice]
        assert len(set(inits)) == 3
        assert sum(init in ready for init in inits) == 2, (inits, ready)
        # Bob's is one of those kept.
        assert init_of(gw, gw.create("bob")) in ready
        # Full again, the stock serves her again.
        again = full_stock(host, 4)
        assert init_of(gw, gw.create("alice")) in again
    finally:
        assert gw.stop() == 0


def test_a_stock_that_cannot_fill_does_not_hold_a_tenant_back(tmp_path):
    """While the stock waits out a failure (here a stocked init killed: the
    next make waits a second, then two) it is as full as it gets: the
    shares start over, and a tenant that had her half claims what is left.
    Each claim and the second kill come within the first wait, so no
    refill comes between (the stock refills after 100 ms of quiet, which
    a kill's wait outlasts); a round a refill came into anyway (a slow
    machine) is tried again, three at most."""
    import concurrent.futures

    # Kernels from a zygote, which start in well under the wait.
    gw = start_with_keys(tmp_path, ("alice", "bob"), "--sandbox-stock", "6",
                         "--zygote", "python3:json")
    deaths = lambda: gw.read_log().count("a sandbox made ahead ended")  # noqa: E731

    def kill(pid):
        seen = deaths()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: deaths() > seen, 10, "the death is logged")

    try:
        host = kernel_host(gw)
        gw.create("bob")
        for _ in range(3):
            ready = full_stock(host, 6)
            # The first failure: five left, and a second's wait.
            kill(ready[0])
            with concurrent.futures.ThreadPoolExecutor(3) as ex:
                half = list(ex.map(lambda _: gw.create("alice"), range(3)))
            # Her half of six is three: her next is made for her.
            own = gw.create("alice")
            left = stock_inits(host)
            if len(left) != 2 or not set(left) <= set(ready):
                continue  # a refill came in
            assert {init_of(gw, k) for k in half} <= set(ready[1:])
            assert init_of(gw, own) not in ready
            # The second failure, while the first wait lasts: the shares
            # start over, and her next claims the last one.
            kill(left[0])
            if stock_inits(host) != [left[1]]:
                continue
            assert init_of(gw, gw.create("alice")) == left[1]
            break
        else:
            pytest.fail("a refill came into every round")
    finally:
        assert gw.stop() == 0


ZYGOTE = ("--zygote", "python3:json")


def forked_ahead(host, n):
    """Once n sandboxes made ahead each hold a kernel's process forked
    ahead: {that process's pid: its sandbox's init}."""
    def ready():
        found = {c: init for init in stock_inits(host) for c in children(init)}
        return found if len(found) == n and len(stock_inits(host)) == n else None
    return wait_for(ready, 30, f"{n} kernels' processes forked ahead")


def group_of(pid):
    """pid's group (its last part) in each hierarchy that limits it
    (memory, pids, cpu), as the host sees it."""
    groups = {}
    for line in open(f"/proc/{pid}/cgroup"):
        _, ctrls, path = line.strip().split(":", 2)
        # (On a v1/v2 hybrid, the v2 hierarchy, "0::/", holds nothing.)
        if path != "/" and (not ctrls or {"memory", "pids", "cpu"} & set(ctrls.split(","))):
            groups[ctrls] = os.path.basename(path)
    return groups


def confined_status(pid, tid=None):
    """What /proc/PID/status (or a thread's) says of pid's confinement, as
    the host reads it: its ids, capability sets, no_new_privs and seccomp
    mode."""
    keep = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb",
            "NoNewPrivs", "Seccomp")
    with open(f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status") as f:
        status = dict(line.partition(":")[::2] for line in f.read().splitlines())
    return {k: status[k].strip() for k in keep}


def file_size_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        return next(line.split()[3:5] for line in f if line.startswith("Max file size"))


def test_a_stock_made_before_any_zygote_kernel_gets_its_processes():
    """Sandboxes made ahead before any kernel had come from a zygote (the
    first request was another kernelspec's, or, seen in CI, the zygote
    still imported when the stock filled) get their kernel's process forked
    ahead once one has: none stays without for the rest of its wait."""
    gw = start_gateway("--sandbox-stock", "2", *ZYGOTE)
    try:
        host = kernel_host(gw)
        bash = gw.start_kernel(name="bash")

        def both():
            made = stock_inits(host)
            return made if len(made) == 2 else None

        made = wait_for(both, 30, "2 sandboxes made ahead")
        assert all(children(p) == [] for p in made), made
        kid = gw.start_kernel()
        assert value(gw, kid, "6 * 7") == 42
        ahead = forked_ahead(host, 2)
        # Among them the one made before, which the zygote's kernel left.
        assert set(made) & set(ahead.values()), (made, ahead)
        gw.request("DELETE", f"/api/kernels/{bash}")
    finally:
        assert gw.stop() == 0


def test_a_zygote_kernel_starts_in_the_process_forked_ahead_into_its_sandbox():
    """Once a zygote kernel has started, each sandbox made ahead holds a
    process the zygote forked ahead into it (the page tables' copy and
    Python's after-fork work of a start, off the request's path), waiting
    in the sandbox's namespaces and a group of its own. The next zygote
    kernel is that process: it takes the request's limits, environment and
    connection, and is confined exactly as a kernel forked on request."""
    gw = start_gateway("--sandbox-stock", "2", *ZYGOTE)
    try:
        host = kernel_host(gw)
        cold = gw.start_kernel(name="python3", limits=LIMITS, env={"FROM": "request"})
        ahead = forked_ahead(host, 2)
        waited = {}
        for pid in ahead:
            # Not a kernel yet: no Python of anyone's runs in it.
            assert cmdline(pid).rstrip(b"\0") == b"glovebox-kernel-ahead", cmdline(pid)
            assert set(group_of(pid).values()) == {"p-ahead"}, group_of(pid)
            # Confined already, but for what a request decides: the
            # sandbox's user, no capability left, no_new_privs, seccomp;
            # its file size limit not yet set (the request's disk sets it).
            waited[pid] = confined_status(pid)
            assert waited[pid]["Uid"].split() == [waited[pid]["Uid"].split()[0]] * 4
            assert waited[pid]["Uid"].split()[0] != "0", waited[pid]
            assert waited[pid]["Groups"] == "", waited[pid]
            for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                assert waited[pid][caps] == "0000000000000000", (caps, waited[pid])
            assert (waited[pid]["NoNewPrivs"], waited[pid]["Seccomp"]) == ("1", "2"), waited[pid]
            assert file_size_limit(pid) == ["unlimited", "unlimited"], file_size_limit(pid)
            # Its ZeroMQ context made meanwhile (zygote_kernel.py's
            # sockets_ahead), once confined: libzmq's two threads are as
            # confined as the process.
            threads = os.listdir(f"/proc/{pid}/task")
            assert len(threads) == 3, threads
            for tid in threads:
                assert confined_status(pid, tid) == waited[pid], (tid, waited[pid])
        time.sleep(0.05)
        asked = uptime()
        # Limits of its own, not those the stock's sandboxes were made with.
        kid = gw.start_kernel(name="python3", limits=dict(LIMITS, pids=66),
                              env={"FROM": "request"})
        pid = kernel_pid(gw, kid)
        assert pid in ahead and started_at(pid) < asked, (pid, ahead)
        # The sockets it made while it waited are the kernel's: libzmq's
        # two threads and the loop's I/O thread beside the main one.
        assert sorted(open(f"/proc/{pid}/task/{t}/comm").read().strip()
                      for t in os.listdir(f"/proc/{pid}/task")) == \
            ["ZMQbg/IO/0", "ZMQbg/Reaper", "python3", "python3"]
        # The same confinement it waited in, now with the request's limit.
        assert confined_status(pid) == waited[pid]
        assert file_size_limit(pid) == file_size_limit(kernel_pid(gw, cold)) != \
            ["unlimited", "unlimited"]
        # Its connection file, written as the sandbox's user, is the user's.
        assert value(gw, kid, "(lambda s: (s.st_uid, s.st_mode & 0o777))(__import__('os')"
                              ".stat(__import__('ipykernel').get_connection_file()))") == \
            (1000, 0o600)
        assert value(gw, kid, "(__import__('os').environ['FROM'], 6 * 7)") == ("request", 42)
        # Its group is named after it, where groups can be renamed.
        assert set(group_of(pid).values()) == {f"p-{kid}"}, group_of(pid)
        before, after = confinement(gw, cold), confinement(gw, kid)
        assert host_limits(after["uid_map"]) == {
            "memory": str(300 << 20), "pids": "66", "cpu": "50000"}
        assert_pids_limit_holds(gw, kid, 66)
        # Confined as the kernel forked on request, but for its own ids and
        # its own process limit (RLIMIT_NPROC, from the request).
        nproc = [line.split() for line in after["limits"].splitlines()
                 if line.startswith("Max processes")]
        assert nproc == [["Max", "processes", "66", "66", "processes"]], nproc
        assert before["limits"].replace(" 77 ", " 66 ") == after["limits"]
        for key in before:
            if key not in ("uid_map", "gid_map", "cgroup", "limits"):
                assert before[key] == after[key], (key, before[key], after[key])
        # The stock forks one into each sandbox it makes again.
        again = forked_ahead(host, 2)
        assert pid not in again
    finally:
        assert gw.stop() == 0
    assert not any(alive(p) for p in again), "they end with the gateway"


def test_a_start_that_is_not_the_zygotes_ends_the_process_forked_ahead():
    # An environment the zygote's imports would have read (OMP_NUM_THREADS):
    # the kernel starts cold, in a group of its own; what waited is gone.
    gw = start_gateway("--sandbox-stock", "1", *ZYGOTE)
    try:
        host = kernel_host(gw)
        gw.start_kernel()
        (waiting, init), = forked_ahead(host, 1).items()
        kid = gw.start_kernel(name="python3", env={"OMP_NUM_THREADS": "3"})
        assert init_of(gw, kid) == init
        wait_for(lambda: not alive(waiting), 10, "the process forked ahead ended")
        assert kernel_pid(gw, kid) != waiting
        assert value(gw, kid, "__import__('os').environ['OMP_NUM_THREADS']") == "3"
        assert set(group_of(kernel_pid(gw, kid)).values()) == {f"p-{kid}"}
    finally:
        assert gw.stop() == 0


def test_a_process_forked_ahead_that_died_leaves_the_start_to_the_zygote():
    gw = start_gateway("--sandbox-stock", "1", *ZYGOTE)
    try:
        host = kernel_host(gw)
        gw.start_kernel()
        (waiting, init), = forked_ahead(host, 1).items()
        os.kill(waiting, signal.SIGKILL)
        wait_for(lambda: not alive(waiting), 10, "the process forked ahead killed")
        # Its sandbox still serves, with a kernel the zygote forks on request.
        kid = gw.start_kernel(name="python3", limits=LIMITS)
        assert init_of(gw, kid) == init and kernel_pid(gw, kid) != waiting
        assert value(gw, kid, "1 + 1") == 2
        assert set(group_of(kernel_pid(gw, kid)).values()) == {f"p-{kid}"}
    finally:
        assert gw.stop() == 0


def test_processes_forked_ahead_by_a_zygote_gone_since_are_not_used():
    gw = start_gateway("--sandbox-stock", "1", *ZYGOTE)
    try:
        host = kernel_host(gw)
        gw.start_kernel()
        (waiting, init), = forked_ahead(host, 1).items()
        (zygote,) = [p for p in children(host) if b"glovebox-zygote" in cmdline(p)]
        os.kill(zygote, signal.SIGKILL)
        wait_for(lambda: "zygote python3 ended" in gw.read_log(), 10, "the zygote's end logged")
        # Kernels start cold from now on, the one waiting ends unused.
        kid = gw.start_kernel()
        assert init_of(gw, kid) == init
        wait_for(lambda: not alive(waiting), 10, "the process forked ahead ended")
        assert value(gw, kid, "1 + 1") == 2
    finally:
        assert gw.stop() == 0
