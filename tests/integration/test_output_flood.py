"""A command that writes without end (`yes`) does not hold the gateway's
one event loop: another kernel's round trips stay fast while it runs. A
real gateway, a real E2B sandbox running the command through envd's
process.Process/Start, and a real kernel."""
import base64
import json
import socket
import statistics
import time
import urllib.request

import pytest

from gbclient import (Channel, e2b_create, e2b_kill, envd_envelope, envd_headers, envd_rpc,
                      rss_kib, start_gateway)


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


def test_a_client_that_stops_reading_holds_its_command_and_loses_nothing(gw):
    """A command that writes 64 MB to a client that stops reading: the
    gateway stops reading the command's pipe (the command waits, as on a
    pipe to a slow reader) instead of queueing or dropping; once the client
    reads again it gets every byte, then the command's end."""
    total = 64 * 1000 * 1000
    sb = e2b_create(gw)
    try:
        body = envd_envelope({"process": {"cmd": "/bin/sh", "args": [
            "-c", f"head -c {total} /dev/zero; echo done >&2"]}})
        head = ["POST /e2b/process.Process/Start HTTP/1.1", f"Host: 127.0.0.1:{gw.port}",
                "Content-Type: application/connect+json", f"Content-Length: {len(body)}"]
        head += [f"{k}: {v}" for k, v in envd_headers(sb).items()]
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=60)
        # A small receive buffer, so that what waits is the gateway's.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        data = s.recv(4096)
        before = rss_kib(gw.proc.pid)
        time.sleep(6)  # not reading: the command has long written its 64 MB
        grown = rss_kib(gw.proc.pid) - before
        assert grown < 24 * 1024, f"the gateway grew by {grown} KiB for a client not reading"
        s.settimeout(60)
        data = bytearray(data)
        while True:
            d = s.recv(1 << 20)
            if not d:
                break
            data += d
            if data.endswith(b"\r\n0\r\n\r\n"):
                break
        s.close()
        head, _, rest = bytes(data).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        if b"transfer-encoding: chunked" in head.lower():
            raw, at = bytearray(), 0
            while True:
                eol = rest.index(b"\r\n", at)
                n = int(rest[at:eol], 16)
                if n == 0:
                    break
                raw += rest[eol + 2:eol + 2 + n]
                at = eol + 2 + n + 2
            rest = bytes(raw)
        raw = rest
        stdout, stderr, end, at = 0, b"", None, 0
        while at + 5 <= len(raw):  # Connect envelopes, read in place
            n = int.from_bytes(raw[at + 1:at + 5], "big")
            frame = json.loads(raw[at + 5:at + 5 + n])
            at += 5 + n
            event = frame.get("event", {})
            if "data" in event:
                stdout += len(base64.b64decode(event["data"].get("stdout", "")))
                stderr += base64.b64decode(event["data"].get("stderr", ""))
                assert "dropped" not in json.dumps(frame)
            if "end" in event:
                end = event["end"]
        assert stdout == total
        assert stderr == b"done\n"
        assert end and end["exitCode"] == 0, end
    finally:
        e2b_kill(gw, sb)
