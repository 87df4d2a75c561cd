"""Buffered replay, seen by a websocket-client client of Glovebox.

A client that disconnects and reconnects with the same session_id must get
every output published while it was away, once each and in order, and the
execute_reply and the final idle status too. When the replay buffer
(--replay-messages) overflows, it must be told how many outputs were
dropped, in the cell that lost them, instead of silently missing them.
"""
import datetime
import re
import socket
import time
import uuid

import pytest
import websocket

from gbclient import Channel, start_gateway

N_LINES = 1000
CELL = f"""\
import time
for i in range({N_LINES}):
    print(f"line {{i:04d}}", flush=True)
    time.sleep(0.002)
"""
ALL_LINES = [f"line {i:04d}" for i in range(N_LINES)]


@pytest.fixture
def replay_gateway(request):
    gw = start_gateway(*getattr(request, "param", ()))
    yield gw
    gw.stop()


def execute_request(ch):
    return ch.send("execute_request", {
        "code": CELL, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, "stop_on_error": True})


class Transcript:
    """Everything one execution sent, across connections."""

    def __init__(self, msg_id):
        self.msg_id = msg_id
        self.iopub = []       # every iopub message of the execution, in arrival order
        self.replies = []
        self.idle = False

    def feed(self, m):
        if m["parent_header"].get("msg_id") != self.msg_id:
            return
        if m["channel"] == "shell":
            self.replies.append(m)
        elif m["channel"] == "iopub":
            self.iopub.append(m)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                self.idle = True

    def streams(self, name="stdout"):
        return [m for m in self.iopub
                if m["msg_type"] == "stream" and m["content"]["name"] == name]

    def lines(self):
        return "".join(m["content"]["text"] for m in self.streams()).splitlines()

    def states(self):
        return [m["content"]["execution_state"] for m in self.iopub if m["msg_type"] == "status"]


def read_until(ch, transcript, done, timeout=30):
    deadline = time.time() + timeout
    while not done():
        left = deadline - time.time()
        try:
            assert left > 0
            transcript.feed(ch.recv(left))
        except (AssertionError, websocket.WebSocketTimeoutException):
            lines = transcript.lines()
            raise AssertionError(
                f"timed out after {timeout} s: {len(lines)} lines (last {lines[-1:]}), "
                f"{len(transcript.replies)} replies, idle={transcript.idle}") from None


def drain(ch, quiet, on_message, limit=30):
    """Reads what else ch gets until nothing came for quiet seconds: only
    that quiet ends it. A connection that closes or breaks, or a frame that
    does not decode, fails the test (what arrives after may be what it
    checks); so do messages that never stop coming."""
    deadline = time.time() + limit
    while True:
        try:
            m = ch.recv(quiet)
        except websocket.WebSocketTimeoutException:
            return
        on_message(m)
        assert time.time() < deadline, f"still receiving after {limit} s: {m}"


def disconnect(ch, how, transcript):
    if how == "close":  # a WebSocket close handshake, keeping what came before its end
        ch.close_reading(transcript.feed)
    else:  # the TCP connection just goes away, no close frame
        ch.ws.sock.shutdown(socket.SHUT_RDWR)
        ch.ws.sock.close()


def wait_idle(gw, kid, timeout=30):
    """Waits, over REST, until the kernel has finished the cell."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        _, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        if model["execution_state"] == "idle":
            return
        time.sleep(0.05)
    raise TimeoutError("kernel still busy")


def first_difference(lines):
    for i, want in enumerate(ALL_LINES):
        if i >= len(lines) or lines[i] != want:
            return f"{len(lines)} lines; at {i}: {lines[i:i + 3]} instead of {want!r}"
    return f"{len(lines)} lines, {len(lines) - N_LINES} extra: {lines[N_LINES:N_LINES + 3]}"


def seq(m):
    """The kernel session's message counter, from ipykernel's msg_id
    ("<session>_<pid>_<n>", jupyter_client.session.Session.msg_id)."""
    match = re.fullmatch(r"[0-9a-f-]+_\d+_(\d+)", m["header"]["msg_id"])
    assert match, m["header"]["msg_id"]
    return int(match.group(1))


def sent_at(m):
    return datetime.datetime.fromisoformat(m["header"]["date"].replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("when,how", [("mid-cell", "close"), ("after-cell", "drop")])
def test_reconnect_replays_every_line_once(replay_gateway, when, how):
    gw = replay_gateway
    kid = gw.start_kernel()
    session = "replay-" + uuid.uuid4().hex
    ch = Channel(gw, kid, session_id=session)
    reply, _ = ch.execute("pass")
    assert reply["content"]["status"] == "ok"

    t = Transcript(execute_request(ch))
    read_until(ch, t, lambda: len(t.lines()) >= 150)
    before = len(t.lines())
    assert not t.idle and before < N_LINES, "the cell ended before the disconnect"
    disconnect(ch, how, t)
    left_at = time.time()
    if when == "mid-cell":
        time.sleep(0.8)
        _, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        assert model["execution_state"] == "busy", "the cell must still be running"
    else:
        wait_idle(gw, kid)
    back_at = time.time()
    n_away = len(t.iopub)

    ch = Channel(gw, kid, session_id=session)
    try:
        read_until(ch, t, lambda: t.replies and t.idle)
        # A little longer: nothing of this execution may arrive twice.
        drain(ch, 0.5, t.feed)
    finally:
        ch.close()

    lines = t.lines()
    assert len(lines) == len(set(lines)), "duplicated lines"
    assert lines == ALL_LINES, first_difference(lines)
    assert len(t.replies) == 1 and t.replies[0]["msg_type"] == "execute_reply"
    assert t.replies[0]["content"]["status"] == "ok"
    assert t.states() == ["busy", "idle"]
    assert [m["msg_type"] for m in t.iopub][:2] == ["status", "execute_input"]
    assert t.iopub[-1]["msg_type"] == "status"
    # Message by message: the kernel's numbering of this execution's messages
    # (every one of them is this execution's) has no gap and no repeat.
    numbers = sorted(seq(m) for m in t.iopub + t.replies)
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    # Replay was exercised: outputs the kernel sent while no client was
    # connected reached the new connection.
    replayed = [m for m in t.iopub[n_away:] if left_at + 0.05 < sent_at(m) < back_at - 0.05]
    assert len(replayed) > 20, (left_at, back_at, [sent_at(m) for m in t.iopub[n_away:][:3]])
    assert not t.streams("stderr")


OVERFLOWS = {
    "replay-messages=20": ("--replay-messages", "20"),
    # The byte budget is --replay-bytes plus room for one --max-message-bytes message.
    "replay-bytes=16k": ("--replay-bytes", "16384", "--max-message-bytes", "16384"),
}


@pytest.mark.parametrize("replay_gateway", list(OVERFLOWS.values()), indirect=True,
                         ids=list(OVERFLOWS))
def test_replay_overflow_is_reported(replay_gateway, request):
    gw = replay_gateway
    kid = gw.start_kernel()
    session = "overflow-" + uuid.uuid4().hex
    ch = Channel(gw, kid, session_id=session)
    reply, _ = ch.execute("pass")
    assert reply["content"]["status"] == "ok"

    t = Transcript(execute_request(ch))
    read_until(ch, t, lambda: len(t.lines()) >= 100)
    disconnect(ch, "close", t)
    wait_idle(gw, kid)
    n_before = len(t.iopub)
    lines_before = t.lines()

    ch = Channel(gw, kid, session_id=session)
    try:
        read_until(ch, t, lambda: t.replies and t.idle)
    finally:
        ch.close()

    after = t.iopub[n_before:]
    notices = [m for m in t.iopub if m["msg_type"] == "stream" and
               m["content"]["name"] == "stderr"]
    assert len(notices) == 1, [m["content"] for m in after[:5]]
    notice = notices[0]
    text = notice["content"]["text"]
    assert text.startswith("[glovebox]"), text
    match = re.search(r"(\d+) output messages? (?:were|was) dropped", text)
    assert match, text
    dropped = int(match.group(1))
    # In the cell that lost them, so a frontend shows it under that cell.
    assert notice["channel"] == "iopub"
    assert notice["parent_header"]["msg_id"] == t.msg_id
    # Before the outputs that survived: the gap is where the notice is.
    assert after[0] is notice

    lines = t.lines()
    assert len(lines) == len(set(lines)), "duplicated lines"
    assert lines == sorted(lines) and lines[-1] == ALL_LINES[-1]
    assert lines[:len(lines_before)] == ALL_LINES[:len(lines_before)]
    missing = N_LINES - len(lines)
    # Every dropped message was a stream message carrying at least one line.
    assert dropped > 0 and missing > 0, (dropped, missing)
    # The kernel numbers the messages it sends (jupyter_client's msg_id ends
    # in a counter): the notice's count is the gap in those numbers.
    last_before = max(seq(m) for m in t.iopub[:n_before])
    first_after = min(seq(m) for m in after[1:] + t.replies)
    gap = first_after - last_before - 1
    # (one message may have been in flight, sent but unread, at the close)
    assert gap - 1 <= dropped <= gap, (dropped, gap)
    # What survived is the newest --replay-messages worth, a contiguous tail.
    tail = lines[len(lines_before):]
    assert tail == ALL_LINES[N_LINES - len(tail):]
    if "replay-messages=20" in request.node.name:
        # (its iopub messages but the notice, and the execute_reply)
        assert len(after) - 1 + 1 <= 20
    else:
        # 32 KiB hold a few dozen ~0.5 KiB stream messages, never hundreds.
        assert 1 < len(after) < 200, len(after)
    assert len(t.replies) == 1 and t.replies[0]["content"]["status"] == "ok"
    assert t.idle


def test_replay_is_per_session(replay_gateway):
    """Two clients of one kernel: B, connected throughout, sees the iopub
    broadcast live; A, who sent the cell, disconnects and gets its own
    backlog back on return; a third client with a new session_id gets no
    one else's backlog."""
    gw = replay_gateway
    kid = gw.start_kernel()
    a = Channel(gw, kid, session_id="a-" + uuid.uuid4().hex)
    b = Channel(gw, kid, session_id="b-" + uuid.uuid4().hex)
    try:
        reply, _ = a.execute("pass")
        ta = Transcript(execute_request(a))
        tb = Transcript(ta.msg_id)
        read_until(a, ta, lambda: len(ta.lines()) >= 100)
        a.close_reading(ta.feed)
        read_until(b, tb, lambda: tb.idle)
        assert tb.lines() == ALL_LINES
        assert tb.replies == [], "the execute_reply goes to the requester only"

        c = Channel(gw, kid, session_id="c-" + uuid.uuid4().hex)
        try:
            reply, out = c.execute("print('c here')")
            stray = [m for m in out if m["parent_header"].get("msg_id") == ta.msg_id]
            drain(c, 0.3, lambda m: stray.append(m)
                  if m["parent_header"].get("msg_id") == ta.msg_id else None)
            assert stray == [], "a new session got another session's backlog"
        finally:
            c.close()

        a = Channel(gw, kid, session_id=a.session)
        read_until(a, ta, lambda: ta.replies and ta.idle)
        assert ta.lines() == ALL_LINES
        assert len(ta.replies) == 1
    finally:
        a.close()
        b.close()


def test_replay_across_kernel_death(replay_gateway):
    """The kernel dies and is restarted while its client is away: on return
    the client gets the cell's outputs, the cell's KernelDied error and
    error reply, and the dead → restarting → idle statuses, in that order."""
    gw = replay_gateway
    kid = gw.start_kernel()
    session = "death-" + uuid.uuid4().hex
    ch = Channel(gw, kid, session_id=session)
    ch.execute("pass")
    msg_id = ch.send("execute_request", {
        "code": "import os, time\nfor i in range(40):\n    print(f'line {i:04d}', flush=True)\n"
                "    time.sleep(0.02)\nos._exit(7)",
        "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False,
        "stop_on_error": True})
    t = Transcript(msg_id)
    read_until(ch, t, lambda: len(t.lines()) >= 5)
    ch.close_reading(t.feed)
    deadline = time.time() + 30
    while True:  # until the kernel has died and is back
        _, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        if "reason" in model and model["execution_state"] == "idle":
            break
        assert time.time() < deadline, model
        time.sleep(0.1)
    assert "7" in model["reason"], model

    ch = Channel(gw, kid, session_id=session)
    events = []
    try:
        deadline = time.time() + 30
        while not (events and events[-1] == ("status", "idle")
                   and ("status", "restarting") in events):
            m = ch.recv(max(0.1, deadline - time.time()))
            assert time.time() < deadline, events
            t.feed(m)
            if m["msg_type"] == "status":
                events.append(("status", m["content"]["execution_state"]))
            elif m["parent_header"].get("msg_id") == msg_id and m["msg_type"] != "stream":
                events.append((m["msg_type"], m["content"].get("ename")))
        reply, out = ch.execute("print('back')")
        assert [o["content"]["text"] for o in out if o["msg_type"] == "stream"] == ["back\n"]
    finally:
        ch.close()

    assert t.lines() == [f"line {i:04d}" for i in range(40)]
    assert events.index(("error", "KernelDied")) < events.index(("status", "dead")) \
        < events.index(("status", "restarting")), events
    assert ("execute_reply", "KernelDied") in events
    assert len(t.replies) == 1 and t.replies[0]["content"]["status"] == "error"
