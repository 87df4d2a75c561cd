"""The kernel-host's link under a burst of creates (kernel-host/main.c,
serve_creates): a sandbox takes the kernel-host some milliseconds to make,
and the gateway sends a kernel's START only once its sandbox is ready, so
in a burst every START came behind the creates read before it and no
kernel started before the last sandbox was made. A START in a sandbox
already made is now served before the creates waiting; everything else
keeps its order."""
import os
import uuid

from test_bounds import HOSTMSG, KernelHost, good_start

READY, STARTED, START_FAILED = 100, 103, 104
LIMITS = {"memory_mb": 256, "cpu_millis": 1000, "pids": 64, "disk_mb": 64}


def kernel_host_for_sandboxes():
    """A kernel-host whose runtime directory a sandbox's setup (an
    unprivileged host id) can pass through, as the gateway makes it."""
    kernel_host = KernelHost()
    os.chmod(kernel_host.runtime, 0o711)
    return kernel_host


def create(kernel_host, sandbox_id):
    kernel_host.send(HOSTMSG["SANDBOX_CREATE"], {"sandbox_id": sandbox_id, "sandbox": True,
                                                 "ro_paths": [], "limits": LIMITS})


def answers(kernel_host, wanted):
    """The kernel-host's messages, in order, until each of wanted (ids) has
    had its answer: [(type, id)]; a process's exit is left out."""
    seen = []
    while not wanted <= {i for _, i in seen}:
        kind, body = kernel_host.recv(30)
        if kind in (READY, STARTED, START_FAILED, HOSTMSG["SANDBOX_FAILED"]):
            seen.append((kind, body.get("sandbox_id") if kind == READY else body["id"]))
    return seen


def test_a_start_in_a_made_sandbox_goes_before_the_sandboxes_asked_for_after_it():
    kernel_host = kernel_host_for_sandboxes()
    try:
        first = str(uuid.uuid4())
        create(kernel_host, first)
        assert answers(kernel_host, {first}) == [(READY, first)]
        later = [str(uuid.uuid4()) for _ in range(8)]
        for sandbox_id in later:
            create(kernel_host, sandbox_id)
        start = str(uuid.uuid4())
        kernel_host.send(HOSTMSG["START"], good_start(id=start, sandbox_id=first))
        seen = answers(kernel_host, {start, *later})
        assert sorted(seen) == sorted([(READY, s) for s in later] + [(STARTED, start)]), seen
        # The kernel-host may have read the first creates before the START
        # came; not all eight (that is the order of a link read in turn).
        made_before = seen.index((STARTED, start))
        assert made_before <= 3, seen
        # The creates themselves are served in the order they came.
        assert [i for kind, i in seen if kind == READY] == later, seen
    finally:
        kernel_host.close()


def test_what_is_not_a_start_in_a_made_sandbox_waits_for_the_creates_before_it():
    # A START in a sandbox still being asked for, sent right behind its
    # create, is served after it, as are the creates before: never a
    # "no such sandbox".
    kernel_host = kernel_host_for_sandboxes()
    try:
        sandboxes = [str(uuid.uuid4()) for _ in range(4)]
        for sandbox_id in sandboxes:
            create(kernel_host, sandbox_id)
        start = str(uuid.uuid4())
        kernel_host.send(HOSTMSG["START"], good_start(id=start, sandbox_id=sandboxes[-1]))
        seen = answers(kernel_host, {start, *sandboxes})
        assert seen == [(READY, s) for s in sandboxes] + [(STARTED, start)], seen
    finally:
        kernel_host.close()
