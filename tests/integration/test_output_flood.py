"""A command that writes without end (`yes`) does not hold the gateway's
one event loop: another kernel's round trips stay fast while it runs. A
real gateway, a real E2B sandbox running the command through envd's
process.Process/Start, and a real kernel."""
import json
import statistics
import time
import urllib.request

import pytest

from gbclient import (Channel, e2b_create, e2b_kill, envd_envelope, envd_headers, envd_rpc,
                      start_gateway)


@pytest.fixture(scope="module")
def gw():
    g = start_gateway()
    yield g
    g.stop()


def round_trips(ch, n):
    times = []
    for _ in range(n):
        t = time.monotonic()
        reply, _ = ch.execute("1", timeout=60)
        times.append(time.monotonic() - t)
        assert reply["content"]["status"] == "ok"
    return times


def test_a_flooding_command_leaves_other_kernels_fast(gw):
    kernel = gw.start_kernel()
    sb = e2b_create(gw)
    ch = Channel(gw, kernel)
    try:
        round_trips(ch, 3)  # warm
        req = urllib.request.Request(
            gw.base + "/e2b/process.Process/Start", method="POST",
            data=envd_envelope({"process": {"cmd": "/bin/sh", "args": [
                "-c", "cat /dev/zero >&2 & cat /dev/zero & exec cat /dev/zero"]}}))
        req.add_header("Content-Type", "application/connect+json")
        for k, v in envd_headers(sb).items():
            req.add_header(k, v)
        resp = urllib.request.urlopen(req, timeout=30)
        first = resp.read(4096)
        pid = json.loads(first[5:5 + int.from_bytes(first[1:5], "big")])["event"]["start"]["pid"]
        # The client goes: the commands run on, and the gateway reads (and
        # drops) their output as fast as it comes, on both pipes.
        resp.close()
        time.sleep(1)
        times = round_trips(ch, 20)
        p50 = statistics.median(times)
        assert p50 < 0.2, [round(t, 3) for t in times]
        status, _ = envd_rpc(gw, sb, "process.Process/SendSignal",
                             {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
        assert status == 200
    finally:
        ch.close()
        e2b_kill(gw, sb)
        gw.request("DELETE", f"/api/kernels/{kernel}")
