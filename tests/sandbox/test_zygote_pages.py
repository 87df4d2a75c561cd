"""The pages a zygote kernel's start writes, copied ahead
(kernel-host/zygote_pages.h, docs/performance.md#sandboxes-made-ahead): a
zygote's kernel lists, once its loop has started and before it reads any
request, the pages it has written since its fork, in memory it shares
with its zygote alone; each process the zygote forks
ahead from then on copies those pages, and those the zygote's rehearsal
of a kernel's first requests wrote, while it waits, and then runs the
part of a first cell that every kernel does alike (zygote_kernel.py's
warm_up), writing the pages that writes. Real gateway,
kernel-host, zygote, sandboxes and kernels; the pages are read from the
host, in /proc/PID/pagemap."""
import os
import struct

import pytest

from conftest import start_gateway, value
from gbclient import children, cmdline, kernel_host
from test_stock import ZYGOTE, forked_ahead, kernel_pid

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="zygotes and the stock need root")

PAGE = os.sysconf("SC_PAGESIZE")
# What a report maps in a kernel (kernel-host/zygote_pages.h): its 8-byte
# header and 4,096 ranges of 16, in whole pages.
REPORT_BYTES = -(-(8 + 4096 * 16) // PAGE) * PAGE


def written_pages(pid):
    """The pages pid has written since its fork, as the zygote's kernels
    count them: present, anonymous and mapped by it alone, in its private
    writable mappings."""
    n = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pm:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if fields[1][:2] != "rw" or fields[1][3] != "p":
                continue
            pm.seek(start // PAGE * 8)
            for (e,) in struct.iter_unpack("<Q", pm.read((end - start) // PAGE * 8)):
                n += (e >> 63) & 1 and (e >> 56) & 1 and not (e >> 61) & 1
    return n


def reports(pid):
    """pid's mappings of shared anonymous memory of a report's size: the
    inode of each (one per report)."""
    found = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if fields[1].endswith("s") and fields[5:] == ["/dev/zero", "(deleted)"] \
                    and end - start == REPORT_BYTES:
                found.append(fields[4])
    return found


def kernels(gw):
    """The host pids of the gateway's kernels: its sandboxes' inits'
    children that run ipykernel."""
    return {k for init in children(kernel_host(gw)) for k in children(init)
            if b"ipykernel" in cmdline(k)}


def started(gw, **kw):
    """A new kernel's id and host pid, found as the host sees it (kernel_pid
    would run a cell in it)."""
    running = kernels(gw)
    kid = gw.start_kernel(**kw)
    (pid,) = kernels(gw) - running
    return kid, pid


def test_processes_forked_ahead_copy_the_pages_a_kernels_start_writes():
    """Once a kernel of the zygote has started, each process forked ahead
    holds, before any request reaches it, the pages a start writes: it
    copied them while it waited (Python's after-fork work alone writes
    about 250). A kernel that starts in one runs as any."""
    gw = start_gateway("--sandbox-stock", "2", *ZYGOTE)
    try:
        host = kernel_host(gw)
        first = gw.start_kernel()
        assert value(gw, first, "6 * 7") == 42
        # The two waiting (one may have been forked before the zygote read
        # the list) take the next two kernels; the stock forks two more.
        before = forked_ahead(host, 2)
        taken = [gw.start_kernel() for _ in before]
        after = [p for p in forked_ahead(host, 2) if p not in before]
        assert len(after) == 2, after
        copied = [written_pages(p) for p in after]
        assert min(copied) >= 500, copied
        for kid in taken:
            assert kernel_pid(gw, kid) in before
            assert value(gw, kid, "sum(range(10))") == 45
        later = gw.start_kernel()
        assert kernel_pid(gw, later) in after
        assert value(gw, later, "'copied ' + str(7 * 6)") == "copied 42"
    finally:
        assert gw.stop() == 0


def test_no_kernel_holds_a_report_once_ready():
    """A kernel's report, memory it shares with its zygote, is written and
    unmapped before the kernel is ready: no kernel the gateway has holds
    one (no pause can find one, and no tenant's code). A process forked
    ahead before the zygote had its list holds one of its own while it
    waits (a checkpoint ends a waiting process first); those forked after,
    none."""
    gw = start_gateway("--sandbox-stock", "2", *ZYGOTE)
    try:
        host = kernel_host(gw)
        _, pid = started(gw)
        assert reports(pid) == []
        waiting = forked_ahead(host, 2)
        held = [reports(p) for p in waiting]
        assert all(len(r) <= 1 for r in held), held
        if all(held):
            assert held[0] != held[1], held
        for _ in waiting:
            _, pid = started(gw)
            assert pid in waiting and reports(pid) == []
        fresh = [p for p in forked_ahead(host, 2) if p not in waiting]
        assert fresh and all(reports(p) == [] for p in fresh), fresh
    finally:
        assert gw.stop() == 0


def test_the_users_first_cell_does_not_make_the_list():
    """The list is made before the user's first code runs: a first cell
    that writes to every object the zygote made (a reference to each, taken
    and dropped) makes the kernel write thousands of the zygote's pages,
    and the process forked ahead after it copies only what a start writes,
    a fraction of them."""
    gw = start_gateway("--sandbox-stock", "1", *ZYGOTE)
    try:
        host = kernel_host(gw)
        first = gw.start_kernel()
        (waiting,) = forked_ahead(host, 1)
        # (The zygote's objects are frozen, out of the collector's lists:
        # unfrozen, each one's header is written.)
        assert value(gw, first, "__import__('gc').unfreeze() or "
                                "len([id(o) for o in __import__('gc').get_objects()]) > 0")
        by_first = written_pages(kernel_pid(gw, first))
        taken = gw.start_kernel()
        assert kernel_pid(gw, taken) == waiting
        (fresh,) = [p for p in forked_ahead(host, 1) if p != waiting]
        copied = written_pages(fresh)
        assert 500 <= copied < by_first / 2, (copied, by_first)
    finally:
        assert gw.stop() == 0


# Objects of IPython's that running a cell uses and a kernel's start does
# not: the classes a run makes an instance of, and the functions it calls.
# Their addresses are the same in every process of the zygote.
A_CELLS_OBJECTS = """[id(o) for o in (
    __import__('IPython').core.interactiveshell.ExecutionInfo,
    __import__('IPython').core.interactiveshell.ExecutionResult,
    __import__('IPython').core.interactiveshell.InteractiveShell.run_cell_async,
    __import__('IPython').core.interactiveshell.InteractiveShell.run_ast_nodes,
    __import__('IPython').core.interactiveshell.InteractiveShell.transform_ast,
    __import__('IPython').core.compilerop.CachingCompiler.ast_parse)]"""


def copied(pid, addresses):
    """Which of addresses lie on pages pid has written since its fork."""
    out = []
    with open(f"/proc/{pid}/pagemap", "rb") as pm:
        for address in addresses:
            pm.seek(address // PAGE * 8)
            (e,) = struct.unpack("<Q", pm.read(8))
            out.append(bool((e >> 63) & 1 and (e >> 56) & 1 and not (e >> 61) & 1))
    return out


# Objects of ipykernel's that a kernel's first execute request uses and
# neither its start nor the warm-up does, on pages that neither writes
# either: measured with the rehearsal stopped (2026-12-07), no process
# forked ahead held them, nor with the build before the rehearsal. Others
# the request uses (Kernel.execute_request, the display hook's methods)
# lie on pages the start writes.
A_REQUESTS_OBJECTS = """[id(o) for o in (
    __import__('ipykernel').ipkernel.IPythonKernel.do_execute,
    __import__('ipykernel').ipkernel.IPythonKernel.init_metadata,
    __import__('ipykernel').ipkernel.IPythonKernel.finish_metadata,
    __import__('ipykernel').kernelbase._accepts_cell_id,
    __import__('ipykernel').jsonutil.json_clean)]"""


def test_processes_forked_ahead_have_done_a_first_cells_and_first_requests_work():
    """Each process forked ahead runs, while it waits, the part of a first
    cell every kernel does alike (zygote_kernel.py's warm_up), and copies
    the pages a kernel's first requests write (ipykernel's handlers, the
    display hook, the replies), which the zygote's rehearsal listed
    (zygote_kernel.py's rehearse, in a child of the zygote before it was
    ready): the pages of the objects a cell's run and those requests use
    are its own before any request. The kernel it becomes shows nothing
    of it: its first cell is cell 1, with no history, output, last result
    or cached source before it."""
    gw = start_gateway("--sandbox-stock", "2", *ZYGOTE)
    try:
        host = kernel_host(gw)
        first = gw.start_kernel()
        cells = value(gw, first, A_CELLS_OBJECTS)
        requests = value(gw, first, A_REQUESTS_OBJECTS)
        waiting = forked_ahead(host, 2)
        for pid in waiting:
            assert copied(pid, cells) == [True] * len(cells), ("warm-up", pid, cells)
            assert copied(pid, requests) == [True] * len(requests), ("rehearsal", pid, requests)
        kid, pid = started(gw)
        assert pid in waiting
        assert value(gw, kid, "(get_ipython().execution_count, len(In), dict(Out), _, "
                              "get_ipython().last_execution_result, "
                              "[k for k in __import__('linecache').cache if 'warm' in k])") == \
            (1, 2, {}, "", None, [])
    finally:
        assert gw.stop() == 0
