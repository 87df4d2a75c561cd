"""Large outputs on the channels WebSocket: a frame of 1 MiB or more is
written by the gateway itself, straight from the kernel's ZMQ frame, as one
WebSocket frame (see gateway/jupyter/channels.c). These tests read the frames as
they come off the wire: each large message is one whole frame, exact in
both formats, pongs never land inside one, a reader slower than the
gateway gets every byte, a connection replaced mid-frame hands the message
whole to its successor, and the memory a burst took is given back."""
import hashlib
import json
import socket
import threading
import time
import urllib.request

import websocket

from gbclient import V1, decode_v1, rss_kib, start_gateway

MIB = 1 << 20

# One display_data of n MiB of text (one kernel message, one frame), then
# its digest on stdout.
BIG = """
import hashlib, os
from IPython.display import display
s = os.urandom({n} * 1024 * 512).hex()
display({{'text/plain': s}}, raw=True)
print(hashlib.sha256(s.encode()).hexdigest())
"""


def read_message(ch, pongs=None):
    """Reads frames until a whole data message is in; returns (message,
    number of frames it came in). Pongs are counted in pongs[0]."""
    data, frames = b"", 0
    while True:
        f = ch.ws.recv_frame()
        if f.opcode == websocket.ABNF.OPCODE_PONG:
            if pongs is not None:
                pongs[0] += 1
            continue
        if f.opcode == websocket.ABNF.OPCODE_CLOSE:
            raise ConnectionError("closed")
        assert f.opcode in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY,
                            websocket.ABNF.OPCODE_CONT), f.opcode
        data += f.data
        frames += 1
        if f.fin:
            break
    if ch.v1:
        return decode_v1(data), frames
    return json.loads(data), frames


def run_big(ch, n, pongs=None):
    """Runs BIG; returns (the text displayed, the frames it came in, the
    digest the kernel printed), reading until the cell's idle status."""
    msg_id = ch.send("execute_request", {
        "code": BIG.format(n=n), "silent": False, "store_history": False,
        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    shown = frames = digest = None
    idle = reply = False
    while not (idle and reply):
        m, count = read_message(ch, pongs)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        if m["msg_type"] == "display_data":
            shown, frames = m["content"]["data"]["text/plain"], count
        elif m["msg_type"] == "stream":
            digest = (digest or "") + m["content"]["text"]
        elif m["msg_type"] == "execute_reply":
            assert m["content"]["status"] == "ok", m["content"]
            reply = True
        elif m["msg_type"] == "status":
            idle = idle or m["content"]["execution_state"] == "idle"
    return shown, frames, (digest or "").strip()


def test_large_messages_come_as_one_exact_frame_in_both_formats_while_the_client_pings():
    gw = start_gateway()
    try:
        kernel = gw.start_kernel()
        for protocol in (None, V1):
            ch = gw.connect(kernel, subprotocol=protocol)
            ch.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            pongs, stop = [0], threading.Event()

            def ping():
                # Pings throughout, so that some arrive while a large
                # frame is on its way: a pong inside it would break it.
                while not stop.is_set():
                    ch.ws.ping(b"p")
                    time.sleep(0.005)

            pinger = threading.Thread(target=ping)
            pinger.start()
            try:
                shown, frames, digest = run_big(ch, 24, pongs)
            finally:
                stop.set()
                pinger.join()
            assert len(shown) == 24 * MIB, (protocol, len(shown))
            assert hashlib.sha256(shown.encode()).hexdigest() == digest, protocol
            assert frames == 1, f"{protocol}: a 24 MiB message came in {frames} frames"
            # Every ping is answered once the frame is out, between frames.
            ch.send("kernel_info_request", {})
            deadline = time.time() + 30
            while pongs[0] == 0 and time.time() < deadline:
                read_message(ch, pongs)
            assert pongs[0] > 0, protocol
            ch.close()
    finally:
        gw.stop()


class SlowReader:
    """Reads a channel's frames off its socket in small pieces with pauses,
    parsing them itself (server frames are not masked)."""

    def __init__(self, ch):
        self.sock, self.buf = ch.ws.sock, b""
        self.sock.settimeout(60)

    def take(self, n):
        parts, have = [self.buf], len(self.buf)
        while have < n:
            # The gateway finds the socket full again and again and goes
            # on from where it stopped.
            time.sleep(0.0005)
            chunk = self.sock.recv(16 * 1024)
            if not chunk:
                raise ConnectionError("closed")
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts)
        self.buf = data[n:]
        return data[:n]

    def frame(self):
        head = self.take(2)
        n = head[1] & 0x7f
        if n == 126:
            n = int.from_bytes(self.take(2), "big")
        elif n == 127:
            n = int.from_bytes(self.take(8), "big")
        assert not head[1] & 0x80, "a server frame is not masked"
        return bool(head[0] & 0x80), head[0] & 0x0f, self.take(n)


def test_a_reader_slower_than_the_gateway_gets_every_byte():
    gw = start_gateway()
    try:
        kernel = gw.start_kernel()
        ch = gw.connect(kernel, subprotocol=V1)
        ch.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        ch.execute("pass")
        msg_id = ch.send("execute_request", {
            "code": BIG.format(n=8), "silent": False, "store_history": False,
            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        reader, shown, digest, idle = SlowReader(ch), None, "", False
        while not idle:
            fin, opcode, data = reader.frame()
            assert fin and opcode == 2, (fin, opcode)  # v1: whole binary frames
            m = decode_v1(data)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "display_data":
                shown = m["content"]["data"]["text/plain"]
            elif m["msg_type"] == "stream":
                digest += m["content"]["text"]
            elif m["msg_type"] == "status":
                idle = m["content"]["execution_state"] == "idle"
        assert shown is not None and len(shown) == 8 * MIB
        assert hashlib.sha256(shown.encode()).hexdigest() == digest.strip()
        ch.close()
    finally:
        gw.stop()


def metric(gw, name):
    req = urllib.request.Request(gw.base + "/metrics")
    req.add_header("Authorization", f"Bearer {gw.token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def test_a_connection_replaced_in_the_middle_of_a_frame_hands_the_message_over_whole():
    """The first connection reads nothing, so its 16 MiB frame stops part of
    the way; a second connection of the same session replaces it. The
    first is closed at once although it reads nothing (before, it waited
    for a writable callback that libwebsockets gives only once the client
    has read what it holds: never); the successor gets the cut-off
    message whole and all after it. The execute_reply travels on shell,
    beside iopub: it may have gone to the first connection before the
    large frame started (written, so delivered: only a replay with
    last_msg_id brings it back), else the successor gets it. (It once
    looked as if the successor stopped getting writable callbacks: it was
    waiting for a reply the first connection had been given.)"""
    gw = start_gateway("--session-linger", "60")
    try:
        kernel = gw.start_kernel()
        first = gw.connect(kernel, session_id="handover")
        first.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        msg_id = first.send("execute_request", {
            "code": BIG.format(n=16), "silent": False, "store_history": False,
            "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        # The first connection reads nothing: its 16 MiB frame stops part
        # of the way, in the socket.
        time.sleep(3)
        closed = metric(gw, "glovebox_websocket_connections_closed_total")
        second = gw.connect(kernel, session_id="handover")
        deadline = time.time() + 10
        while (metric(gw, "glovebox_websocket_connections_closed_total") == closed
               and time.time() < deadline):
            time.sleep(0.1)
        assert metric(gw, "glovebox_websocket_connections_closed_total") == closed + 1, \
            "the replaced connection, reading nothing, was not closed"
        outputs, replies = [], []
        while not any(m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                      for m in outputs):
            m = second.recv(60)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            (replies if m["channel"] == "shell" else outputs).append(m)
        shown = [m for m in outputs if m["msg_type"] == "display_data"]
        assert len(shown) == 1, [m["msg_type"] for m in outputs]
        text = shown[0]["content"]["data"]["text/plain"]
        digest = "".join(m["content"]["text"] for m in outputs if m["msg_type"] == "stream")
        assert len(text) == 16 * MIB
        assert hashlib.sha256(text.encode()).hexdigest() == digest.strip()
        # What the first connection was given: whole frames, read off its
        # socket, up to the large one that was cut off (not read: through
        # the window its small buffer set, that would take a minute).
        reader, given_first = SlowReader(first), []
        while True:
            head = reader.take(2)
            n = head[1] & 0x7f
            if n == 126:
                n = int.from_bytes(reader.take(2), "big")
            elif n == 127:
                n = int.from_bytes(reader.take(8), "big")
            if n >= MIB:
                break
            m = json.loads(reader.take(n))
            if m["msg_type"] == "execute_reply" and m["parent_header"].get("msg_id") == msg_id:
                given_first.append(m)
        first.ws.sock.close()
        if not given_first and not replies:
            while not replies:
                m = second.recv(30)
                if m["parent_header"].get("msg_id") == msg_id and m["channel"] == "shell":
                    replies.append(m)
        assert len(given_first) + len(replies) == 1, (given_first, replies)
        assert (given_first + replies)[0]["content"]["status"] == "ok"
        second.close()
    finally:
        gw.stop()


def test_the_memory_of_a_burst_of_large_messages_is_given_back():
    gw = start_gateway()
    try:
        kernel = gw.start_kernel()
        ch = gw.connect(kernel)
        ch.execute("pass")
        base = rss_kib(gw.proc.pid)
        for _ in range(4):
            shown, _, digest = run_big(ch, 32)
            assert hashlib.sha256(shown.encode()).hexdigest() == digest
        grown = (rss_kib(gw.proc.pid) - base) // 1024
        # Kept while large messages flow (one in from the kernel, one on
        # its way out), not one afresh per message...
        assert grown < 160, f"RSS grew by {grown} MiB"
        # ...and given back once they stop (5 s after the last).
        deadline = time.time() + 30
        while rss_kib(gw.proc.pid) - base > 16 * 1024 and time.time() < deadline:
            time.sleep(0.2)
        kept = (rss_kib(gw.proc.pid) - base) // 1024
        assert kept < 16, f"{kept} MiB kept after the burst (it had grown by {grown} MiB)"
        ch.close()
    finally:
        gw.stop()
