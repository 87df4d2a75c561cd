"""The relay: large outputs reach every client, in both wire formats, byte
for byte (their content is not copied on the way, see gateway/kernels/relay.h), and
a client that stops reading costs bounded memory, not the gateway's."""
import hashlib
import os
import signal
import threading
import time
import uuid

import pytest
import websocket

from gbclient import V1, http_body, outputs_of, rss_kib, start_gateway

PAYLOADS = """
import base64, hashlib, os
from IPython.display import display
blob = base64.b64encode(os.urandom(768 * 1024)).decode()   # ~1 MiB: kept, not copied
text = ''.join(f'{i:07d}\\n' for i in range(40000))      # 320 KB of stdout
print(text, end='', flush=True)
display({'image/png': blob, 'text/plain': 'small'}, raw=True)
print(hashlib.sha256(blob.encode()).hexdigest(), hashlib.sha256(text.encode()).hexdigest())
"""


def iopub_of(ch, msg_id):
    """The iopub messages of another client's request, up to its idle."""
    outputs = []
    while True:
        m = ch.recv(timeout=120)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        outputs.append(m)
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            return outputs


def test_large_outputs_reach_every_client_in_both_formats(gateway, kernel):
    json_ch = gateway.connect(kernel)
    v1_ch = gateway.connect(kernel, subprotocol=V1)
    try:
        reply, outputs = json_ch.execute(PAYLOADS, timeout=120)
        assert reply["content"]["status"] == "ok"
        # The other client saw the same iopub messages.
        seen_by_v1 = iopub_of(v1_ch, reply["parent_header"]["msg_id"])
        for outs in (outputs, seen_by_v1):
            streams = [m["content"]["text"] for m in outputs_of(outs, "stream")]
            digests = streams[-1].split()
            text = "".join(streams[:-1])
            assert hashlib.sha256(text.encode()).hexdigest() == digests[1]
            shown = outputs_of(outs, "display_data")[0]["content"]["data"]
            assert shown["text/plain"] == "small"
            assert hashlib.sha256(shown["image/png"].encode()).hexdigest() == digests[0]
        assert [m["msg_type"] for m in outputs] == [m["msg_type"] for m in seen_by_v1]
    finally:
        json_ch.close()
        v1_ch.close()


def test_a_client_that_stops_reading_costs_bounded_memory():
    # A session holds --replay-bytes of backlog plus one largest message.
    gw = start_gateway("--replay-bytes", str(8 << 20), "--max-message-bytes", str(4 << 20),
                       "--session-linger", "60")
    try:
        kernel = gw.start_kernel()
        stalled = gw.connect(kernel)
        reader = gw.connect(kernel)
        reader.execute("chunk = 'y' * (1 << 20)")
        base = rss_kib(gw.proc.pid)
        peak = [base]
        done = threading.Event()

        def watch():
            while not done.is_set():
                peak[0] = max(peak[0], rss_kib(gw.proc.pid))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            # 128 MiB of output (at a pace the reader keeps up with) while
            # the other client reads nothing at all.
            reply, outputs = reader.execute(
                "import sys, time\nfor _ in range(128):\n"
                "    sys.stdout.write(chunk); sys.stdout.flush(); time.sleep(0.02)",
                timeout=300)
        finally:
            done.set()
            watcher.join()
        assert reply["content"]["status"] == "ok"
        got = sum(len(m["content"]["text"]) for m in outputs_of(outputs, "stream"))
        assert got == 128 << 20, "the reading client got everything"
        # The stalled client's share is its backlog (8 + 4 MiB) and the
        # frame being written, not the 128 MiB it did not read.
        assert peak[0] - base < 40 * 1024, f"RSS grew by {(peak[0] - base) // 1024} MiB"
        # It learns what it missed once it reads again.
        deadline, notice = time.time() + 60, None
        while time.time() < deadline and notice is None:
            m = stalled.recv(timeout=60)
            if m["msg_type"] == "stream" and "were dropped" in m["content"]["text"]:
                notice = m["content"]["text"]
        assert notice, "the stalled client was told that outputs were dropped"
        stalled.close()
        reader.close()
    finally:
        gw.stop()


def test_hundreds_of_client_sessions(gateway, kernel):
    # Each session has three ZMQ sockets of its own and lingers after its
    # connection closes: 400 of them are past ZMQ's default of 1023 sockets.
    for _ in range(400):
        gateway.connect(kernel).close()
    ch = gateway.connect(kernel)
    try:
        reply, outputs = ch.execute("print('still here')")
        assert reply["content"]["status"] == "ok"
        assert [m["content"]["text"] for m in outputs_of(outputs, "stream")] == ["still here\n"]
    finally:
        ch.close()


def test_lingering_sessions_are_bounded_and_the_evicted_are_told():
    # Clients that connect with a fresh session_id each time and never come
    # back: each such session lingers with three sockets (six descriptors
    # here, three in the kernel). Past --max-lingering-sessions the one
    # that waited longest goes.
    import os
    import uuid
    bound = 8
    gw = start_gateway("--max-lingering-sessions", str(bound), "--session-linger", "600")
    try:
        kernel = gw.start_kernel()

        def fds():
            return len(os.listdir(f"/proc/{gw.proc.pid}/fd"))

        first = gw.connect(kernel, session_id="first-" + uuid.uuid4().hex)
        first.execute("1")
        first.close()
        base = fds()
        # (200: the first is among the last 256 evicted, whose ids each
        # kernel remembers.)
        ids = [uuid.uuid4().hex for _ in range(200)]
        for sid in ids:
            gw.connect(kernel, session_id=sid).close()
        # Closing is asynchronous (ZMQ's I/O thread): poll for the count.
        allowed = base + bound * 6 + 16
        deadline = time.time() + 20
        while fds() > allowed and time.time() < deadline:
            time.sleep(0.1)
        grown = fds() - base
        assert fds() <= allowed, f"{grown} descriptors more after 200 sessions"
        # The kernel answers a new client at once.
        reader = gw.connect(kernel)
        reply, outputs = reader.execute("print('published')")
        assert reply["content"]["status"] == "ok"
        reader.close()
        # The newest lingering session kept what was published meanwhile...
        last = gw.connect(kernel, session_id=ids[-1])
        got = []
        while "published\n" not in got:
            m = last.recv(timeout=30)
            if m["msg_type"] == "stream":
                got.append(m["content"]["text"])
                assert "was closed while its client was away" not in m["content"]["text"]
        last.close()
        # ...and the evicted first one is told, in-band, when it comes back.
        again = gw.connect(kernel, session_id=first.session)
        m = again.recv(timeout=30)
        while m["msg_type"] != "stream":
            m = again.recv(timeout=30)
        assert m["content"]["name"] == "stderr"
        assert "was closed while its client was away" in m["content"]["text"]
        assert "--max-lingering-sessions" in m["content"]["text"]
        again.close()
    finally:
        gw.stop()


def test_idle_lingering_sessions_give_back_their_sockets_and_come_back():
    # A detached session that waits for no reply closes its sockets after
    # 10 s (SESSION_PARK_SECONDS): idle sessions of a thousand kernels then
    # cost no descriptors. One that waits for a reply keeps them, or the
    # reply would be lost; both come back whole.
    gw = start_gateway("--session-linger", "600")
    try:
        kernel = gw.start_kernel()

        def fds():
            return len(os.listdir(f"/proc/{gw.proc.pid}/fd"))

        idle = gw.connect(kernel, session_id="idle-" + uuid.uuid4().hex)
        reply, _ = idle.execute("x = 41")
        assert reply["content"]["status"] == "ok"
        idle.close()
        waiting = gw.connect(kernel, session_id="waiting-" + uuid.uuid4().hex)
        msg_id = waiting.send("execute_request", {
            "code": "import time; time.sleep(13); print('slept')", "silent": False,
            "store_history": True, "user_expressions": {}, "allow_stdin": False,
            "stop_on_error": True})
        waiting.close()
        closed_at = time.time()
        time.sleep(1)
        both = fds()
        # The idle session parks (its 3 sockets: 6 descriptors); the one
        # waiting for its reply does not.
        deadline = closed_at + 12.5
        while fds() > both - 6 and time.time() < deadline:
            time.sleep(0.2)
        assert fds() <= both - 6, f"{both} descriptors, then {fds()}: the idle session kept its sockets"
        time.sleep(max(0, closed_at + 15 - time.time()))
        back = gw.connect(kernel, session_id=waiting.session)
        reply, outputs = back.collect(msg_id, timeout=30)
        assert reply["content"]["status"] == "ok"
        assert "slept\n" in [m["content"]["text"] for m in outputs_of(outputs, "stream")]
        back.close()
        # The parked session reconnects with its identity: it has what was
        # published while it was away, and its kernel state.
        again = gw.connect(kernel, session_id=idle.session)
        iopub = iopub_of(again, msg_id)
        assert "slept\n" in [m["content"]["text"] for m in outputs_of(iopub, "stream")]
        reply, outputs = again.execute("x + 1")
        assert reply["content"]["status"] == "ok"
        assert [m["content"]["data"]["text/plain"]
                for m in outputs_of(outputs, "execute_result")] == ["42"]
        again.close()
    finally:
        gw.stop()


def got_lines(lines):
    return [line for line in lines if line["type"] == "stdout"]


def test_stalled_clients_cost_bounded_memory_and_reading_clients_keep_up():
    """While a kernel prints 128 MiB, one WebSocket client and the /execute
    client read nothing: the gateway holds what the configured buffers
    allow (and gives it back), a WebSocket client that reads gets every
    byte without a long silence, another kernel answers as usual, and the
    /execute client is told in-band how many lines it lost."""
    import json
    import re
    import socket
    import statistics
    mib = 1 << 20
    gw = start_gateway("--replay-bytes", str(8 * mib), "--max-message-bytes", str(4 * mib),
                       "--stream-buffer-bytes", str(8 * mib), "--session-linger", "60")
    try:
        kernel, other = gw.start_kernel(), gw.start_kernel()
        stalled = gw.connect(kernel)
        stalled.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader, probe = gw.connect(kernel), gw.connect(other)
        probe.execute("pass")
        base = rss_kib(gw.proc.pid)
        peak, stop = [base], threading.Event()
        seen = {"msgs": 0, "bytes": 0, "gap": 0.0, "idle": False}
        rtts = []
        marker = "# paced print 128"

        def watch():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(gw.proc.pid))
                time.sleep(0.02)

        def read():
            run_id, last = None, None
            while not seen["idle"]:
                m = reader.recv(timeout=120)
                now = time.time()
                if m["msg_type"] == "execute_input" and marker in m["content"]["code"]:
                    run_id, last = m["parent_header"]["msg_id"], now
                if run_id is None or m["parent_header"].get("msg_id") != run_id:
                    continue
                seen["gap"] = max(seen["gap"], now - last)
                last = now
                if m["msg_type"] == "stream":
                    seen["msgs"] += 1
                    seen["bytes"] += len(m["content"]["text"])
                elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    seen["idle"] = True

        def probing():
            while not stop.is_set():
                t = time.time()
                probe.execute("pass")
                rtts.append(time.time() - t)

        threads = [threading.Thread(target=f) for f in (watch, read, probing)]
        for t in threads:
            t.start()
        # The /execute client sends its cell and then reads nothing.
        body = json.dumps({"code": f"{marker}\nimport sys, time\nc = 'y' * (1 << 20)\n"
                                   "for _ in range(128):\n"
                                   "    sys.stdout.write(c); sys.stdout.flush(); time.sleep(0.02)"})
        http = socket.socket()
        http.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        http.connect(("127.0.0.1", gw.port))
        http.sendall((f"POST /api/kernels/{kernel}/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Authorization: token {gw.token}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        threads[1].join(300)
        stop.set()
        for t in threads:
            t.join(60)
        # Now it reads, to the end.
        http.settimeout(60)
        raw = b""
        while True:
            piece = http.recv(1 << 20)
            if not piece:
                break
            raw += piece
        http.close()
        body, complete = http_body(raw)
        assert complete, "the /execute stream ended with its last chunk"
        lines = [json.loads(line) for line in body.splitlines()]

        print(f"RSS +{(peak[0] - base) // 1024} MiB, reader gap {seen['gap']:.2f} s, "
              f"other kernel p50 {statistics.median(rtts) * 1000:.1f} ms, "
              f"/execute got {len(got_lines(lines))} of {seen['msgs']} lines")
        assert seen["idle"] and seen["bytes"] == 128 * mib, seen
        assert seen["gap"] < 2.0, f"the reading client waited {seen['gap']:.1f} s for a frame"
        assert statistics.median(rtts) < 0.1, f"other kernel: p50 {statistics.median(rtts):.3f} s"
        got = got_lines(lines)
        notices = [line["text"] for line in lines
                   if line["type"] == "stderr" and "were dropped" in line["text"]]
        assert lines[-1]["type"] == "end_of_execution"
        assert len(notices) >= 1, "the /execute client is told what it lost"
        dropped = sum(int(re.search(r"(\d+) output lines", n).group(1)) for n in notices)
        assert dropped > 0 and len(got) + dropped == seen["msgs"], (len(got), dropped, seen)
        # What the stalled clients cost: the session's backlog (8 + 4 MiB)
        # and a message being written (4 MiB), the /execute stream's buffer
        # (8 MiB and a line), pieces in flight; not the 128 MiB.
        grown = (peak[0] - base) // 1024
        assert grown < 48, f"RSS grew by {grown} MiB"
        # And it is given back: a stalled session's backlog goes with it.
        stalled.close()
        reader.close()
        gw.request("DELETE", f"/api/kernels/{kernel}")
        deadline = time.time() + 10
        while rss_kib(gw.proc.pid) - base > 16 * 1024 and time.time() < deadline:
            time.sleep(0.1)
        kept = (rss_kib(gw.proc.pid) - base) // 1024
        assert kept < 16, f"{kept} MiB kept after the kernel is gone"
        probe.close()
    finally:
        gw.stop()


def test_a_kernel_faster_than_the_gateway_costs_its_queue_bound_and_clients_are_told():
    """A kernel that writes faster than the gateway relays: what waits is
    --iopub-queue-bytes (plus one message), not whatever ZMQ would hold;
    the rest is dropped, and every client is told how much."""
    import re
    mib = 1 << 20
    # (The smallest queue, 4 KiB plus one message of at most 128 KiB: about
    # two 64 KiB messages wait, so a turn of the loop that finds more drops.)
    gw = start_gateway("--iopub-queue-bytes", "4096", "--max-message-bytes", str(128 * 1024),
                       "--replay-bytes", str(64 * mib))
    try:
        kernel = gw.start_kernel()
        ch = gw.connect(kernel)
        base = rss_kib(gw.proc.pid)
        peak, stop = [base], threading.Event()

        def watch():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(gw.proc.pid))
                time.sleep(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        # The kernel outruns the gateway for certain: the gateway is stopped
        # (SIGSTOP) while the kernel writes 500 messages of 64 KiB, fewer than
        # ZMQ's own queues hold (1,000), so none is lost before the gateway;
        # once it runs again, its first turns find 32 MiB waiting.
        result = {}

        def run():
            result["reply"], result["outputs"] = ch.execute(
                "import sys, time\ntime.sleep(1.5)\nc = 'z' * (64 * 1024)\n"
                "for _ in range(500):\n    sys.stdout.write(c); sys.stdout.flush()",
                timeout=300)

        runner = threading.Thread(target=run)
        try:
            runner.start()
            time.sleep(0.7)  # the request is on its way to the kernel
            os.kill(gw.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(4)
            finally:
                os.kill(gw.proc.pid, signal.SIGCONT)
            runner.join(300)
        finally:
            stop.set()
            watcher.join()
        reply, outputs = result["reply"], result["outputs"]
        assert reply["content"]["status"] == "ok"
        streams = outputs_of(outputs, "stream")
        got = [m for m in streams if m["content"]["text"].startswith("z")]
        notices = [m["content"]["text"] for m in streams
                   if "output messages were dropped" in m["content"]["text"]]
        dropped = sum(int(re.search(r"(\d+) output messages", n).group(1)) for n in notices)
        print(f"got {len(got)}, dropped {dropped} in {len(notices)} notices, "
              f"RSS +{(peak[0] - base) // 1024} MiB")
        assert dropped > 0, "the kernel outran the gateway: some were dropped"
        assert all("--iopub-queue-bytes" in n for n in notices)
        # Every message is either relayed or counted.
        assert len(got) + dropped == 500, (len(got), dropped)
        ch.close()
    finally:
        gw.stop()


# A cell whose outputs come one message a line, for a while.
COUNT_SLOWLY = """
import sys, time
for i in range({n}):
    print(f"line {{i}}", flush=True)
    time.sleep({pause})
"""


def cell_messages(ch, exec_id, until_done=True, limit=None, timeout=60, asked=True):
    """Messages of exec_id that ch receives, in order: all of them up to its
    reply (if ch asked) and idle, or the first limit."""
    got, reply, idle = [], not asked, False
    deadline = time.time() + timeout
    while (limit is None or len(got) < limit) and not (until_done and reply and idle):
        m = ch.recv(max(deadline - time.time(), 0.1))
        if m["parent_header"].get("msg_id") != exec_id:
            continue
        got.append(m)
        if m["channel"] == "shell":
            reply = True
        if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            idle = True
    return got


def ids(msgs, channel=None):
    return [m["header"]["msg_id"] for m in msgs if channel is None or m["channel"] == channel]


def stdout_text(msgs):
    return "".join(m["content"]["text"] for m in msgs
                   if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")


@pytest.mark.parametrize("how", ["stops reading", "drops its socket"])
def test_a_reconnect_naming_its_last_message_gets_everything_after_it_once(gateway, kernel, how):
    # A page that unloads mid-cell: it handled N messages, more reached its
    # socket, and it went (still connected, or its socket simply gone). The
    # same session back with last_msg_id of the Nth gets the N+1th onward,
    # each once: together exactly what an undisturbed client saw.
    import socket
    sid = "reload-" + uuid.uuid4().hex
    witness = gateway.connect(kernel)
    first = gateway.connect(kernel, session_id=sid)
    n, lines = 20, 150
    exec_id = first.send("execute_request", {
        "code": COUNT_SLOWLY.format(n=lines, pause=0.01), "silent": False,
        "store_history": True, "user_expressions": {}, "allow_stdin": False,
        "stop_on_error": True})
    handled = cell_messages(first, exec_id, until_done=False, limit=n)
    # Meanwhile the gateway writes on to the socket, and counts it
    # delivered: without the replay these would be lost.
    time.sleep(1)
    if how == "drops its socket":
        first.ws.sock.shutdown(socket.SHUT_RDWR)
        first.ws.sock.close()
    again = gateway.connect(kernel, session_id=sid, last_msg_id=handled[-1]["header"]["msg_id"])
    rest = cell_messages(again, exec_id)
    whole = cell_messages(witness, exec_id, asked=False)
    seen = handled + rest
    assert len(set(ids(seen))) == len(seen), "a message came twice"
    assert ids(seen, "iopub") == ids(whole, "iopub")
    assert stdout_text(seen) == "".join(f"line {i}\n" for i in range(lines))
    assert [m["msg_type"] for m in seen if m["channel"] == "shell"] == ["execute_reply"]
    for ch in (witness, again):
        ch.close()
    if how == "stops reading":
        first.close()


def test_a_bogus_last_msg_id_replays_nothing_and_breaks_nothing(gateway, kernel):
    sid = "bogus-" + uuid.uuid4().hex
    ch = gateway.connect(kernel, session_id=sid)
    reply, _ = ch.execute("print('before')")
    assert reply["content"]["status"] == "ok"
    ours = {reply["parent_header"]["msg_id"]}
    ch.close()
    for bogus in ["no-such-message", "x" * 127, "x" * 128, "x" * 300, "bad\x01id",
                  "sp ace", "\u00e9t\u00e9", ""]:
        ch = gateway.connect(kernel, session_id=sid, last_msg_id=bogus)
        # Nothing of this session's earlier requests comes again. (A
        # status of the gateway's own kernel_info probe may still arrive.)
        replayed = []
        try:
            while True:
                m = ch.recv(0.5)
                if m["parent_header"].get("msg_id") in ours:
                    replayed.append(m["msg_type"])
        except websocket.WebSocketTimeoutException:
            pass
        assert replayed == [], (bogus, replayed)
        reply, outputs = ch.execute("print('after')")
        ours.add(reply["parent_header"]["msg_id"])
        assert reply["content"]["status"] == "ok"
        assert [m["content"]["text"] for m in outputs_of(outputs, "stream")] == ["after\n"]
        ch.close()
    assert gateway.proc.poll() is None


def replay_after(gw, kernel, sid, last_msg_id):
    """What a reconnect naming last_msg_id gets before the kernel is asked
    anything more: the messages up to the quiet."""
    ch = gw.connect(kernel, session_id=sid, last_msg_id=last_msg_id)
    got = []
    try:
        while True:
            got.append(ch.recv(1.5))
    except websocket.WebSocketTimeoutException:
        pass
    ch.close()
    return got


def test_the_history_of_delivered_messages_is_bounded_by_count():
    # 1024 messages: the 1024th from the end is still there to replay from,
    # the 1025th is gone, and the client is told some may be missing.
    gw = start_gateway()
    try:
        kernel = gw.start_kernel()
        sid = "count-" + uuid.uuid4().hex
        ch = gw.connect(kernel, session_id=sid)
        exec_id = ch.send("execute_request", {
            "code": COUNT_SLOWLY.format(n=1300, pause=0), "silent": False,
            "store_history": True, "user_expressions": {}, "allow_stdin": False,
            "stop_on_error": True})
        # Until the reply and the idle status, in whichever order they come
        # (shell and iopub are two sockets).
        seen, idle, replied = [], False, False
        while not (idle and replied):
            m = ch.recv(60)
            seen.append(m)
            replied |= m["channel"] == "shell"
            idle |= (m["parent_header"].get("msg_id") == exec_id and m["msg_type"] == "status"
                     and m["content"]["execution_state"] == "idle")
        ch.close()
        assert len(seen) > 1100, len(seen)
        got = replay_after(gw, kernel, sid, seen[-1024]["header"]["msg_id"])
        assert ids(got) == ids(seen[-1023:])
        got = replay_after(gw, kernel, sid, seen[-1025]["header"]["msg_id"])
        assert len(got) == 1, [m["msg_type"] for m in got]
        assert got[0]["msg_type"] == "stream" and got[0]["content"]["name"] == "stderr"
        assert "outputs may be missing" in got[0]["content"]["text"]
        # (Nor does the history lose what it had by such a reconnect.)
        got = replay_after(gw, kernel, sid, seen[-3]["header"]["msg_id"])
        assert ids(got)[:2] == ids(seen[-2:])
    finally:
        gw.stop()


def test_the_history_of_delivered_messages_is_bounded_by_bytes():
    # --replay-bytes below 4 MiB bounds the history: 256 KiB here, of
    # messages of about 33 KiB, holds the last seven or so, never sixteen.
    gw = start_gateway("--replay-bytes", str(256 * 1024))
    try:
        kernel = gw.start_kernel()
        sid = "bytes-" + uuid.uuid4().hex
        ch = gw.connect(kernel, session_id=sid)
        reply, outputs = ch.execute(
            "import sys\nfor i in range(40):\n"
            "    print(str(i) * 32768, flush=True)\n")
        assert reply["content"]["status"] == "ok"
        ch.close()
        streams = outputs_of(outputs, "stream")
        assert len(streams) >= 30, len(streams)
        # 3 messages back is well within, 16 streams back well beyond.
        # (The reply comes on the shell socket: it may be delivered, and
        # kept, between the last two streams of iopub.)
        got = replay_after(gw, kernel, sid, streams[-3]["header"]["msg_id"])
        assert ids([m for m in got if m["msg_type"] == "stream"])[:2] == ids(streams[-2:])
        got = replay_after(gw, kernel, sid, streams[-16]["header"]["msg_id"])
        assert [m["msg_type"] for m in got] == ["stream"]
        assert "outputs may be missing" in got[0]["content"]["text"]
    finally:
        gw.stop()
