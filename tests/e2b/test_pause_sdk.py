"""Pause and resume through the unmodified E2B Python SDK: sbx.pause() saves
the sandbox under the gateway's --state-dir and frees it, Sandbox.connect
resumes it under the same id, a paused sandbox outlives the gateway,
lifecycle onTimeout 'pause' pauses instead of killing, and a paused sandbox
stays its creator's. With CRIU (scripts/test builds it) the pause keeps the
memory: variables, contexts, processes; pause(keep_memory=False), or a
sandbox a checkpoint cannot take, keeps the files only, and the sandbox's
info says so and why."""
import hashlib
import json
import os
import secrets
import time
import urllib.error
import urllib.request

import pytest

from conftest import point_sdk_at
from gbclient import checkpoint_dirs, start_gateway
from test_ports_sdk import get, wait_served

from e2b_code_interpreter import Sandbox
from e2b import SandboxException, SandboxNotFoundException, SandboxState, TimeoutException
from e2b.sandbox.sandbox_api import SandboxQuery


def api(gw, method, path, body=None, key=None):
    """The control plane on the wire: (status, parsed JSON or None)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(gw.base + "/e2b" + path, data=data, method=method)
    req.add_header("X-API-Key", key or gw.token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read()
            return resp.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, (json.loads(text) if text else None)


def state_of(sandbox_id, **opts):
    return Sandbox.get_info(sandbox_id, **opts).state.value


def wait_for_state(sandbox_id, state, seconds=30, **opts):
    end = time.monotonic() + seconds
    while state_of(sandbox_id, **opts) != state:
        assert time.monotonic() < end, f"{sandbox_id} never became {state}"
        time.sleep(0.2)


def test_pause_then_connect_resumes_with_the_files(gateway):
    sbx = Sandbox.create(metadata={"suite": "pause"})
    try:
        sbx.files.write("notes/plan.txt", "pause me")
        blob = os.urandom(256 * 1024)
        sbx.files.write("/home/user/data.bin", blob)
        assert sbx.run_code("answer = 42\nanswer").text == "42"
        assert sbx.pause(keep_memory=False) is True
        assert state_of(sbx.sandbox_id) == "paused"
        # Its info says what was kept: the files, not the variables.
        status, info = api(gateway, "GET", f"/sandboxes/{sbx.sandbox_id}")
        assert status == 200 and info["state"] == "paused", info
        assert info["glovebox"]["memoryKept"] is False
        assert info["glovebox"]["pauseNotice"].startswith("variables are not kept: ")
        assert "files only" in info["glovebox"]["pauseNotice"], info
        paused = Sandbox.list(query=SandboxQuery(metadata={"suite": "pause"},
                                                 state=[SandboxState.PAUSED])).next_items()
        assert [s.sandbox_id for s in paused] == [sbx.sandbox_id]
        assert Sandbox.list(query=SandboxQuery(metadata={"suite": "pause"},
                                               state=[SandboxState.RUNNING])).next_items() == []
        # Nothing runs while paused: the gateway's 502, which the SDK turns
        # into its TimeoutException, saying why.
        with pytest.raises(TimeoutException, match="The sandbox is paused: connect to it"):
            sbx.run_code("1")

        again = Sandbox.connect(sbx.sandbox_id)
        assert again.sandbox_id == sbx.sandbox_id
        assert state_of(sbx.sandbox_id) == "running"
        assert again.files.read("notes/plan.txt") == "pause me"
        assert again.files.read("/home/user/data.bin", format="bytes") == bytes(blob)
        # A fresh kernel: the files came back, the variable did not.
        assert again.run_code("answer").error.name == "NameError"
        assert again.run_code("open('/home/user/notes/plan.txt').read()").text == "pause me"
        # A second pause and resume of the same sandbox works as the first.
        assert again.pause(keep_memory=False) is True
        third = Sandbox.connect(sbx.sandbox_id)
        assert third.files.read("notes/plan.txt") == "pause me"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_pause_answers_409_404_and_resume_409(gateway):
    sbx = Sandbox.create()
    try:
        # Resuming a running sandbox: 409.
        status, body = api(gateway, "POST", f"/sandboxes/{sbx.sandbox_id}/resume", {})
        assert status == 409 and "already running" in body["message"], body
        assert sbx.pause() is True
        # Already paused: the SDK's False is E2B's 409.
        assert sbx.pause() is False
        status, body = api(gateway, "POST", f"/sandboxes/{sbx.sandbox_id}/pause", {})
        assert status == 409 and "already paused" in body["message"], body
        # The timeout of a paused sandbox is not set: 409.
        status, body = api(gateway, "POST", f"/sandboxes/{sbx.sandbox_id}/timeout",
                           {"timeout": 60})
        assert status == 409 and "paused" in body["message"], body
        # The deprecated resume route resumes too.
        status, body = api(gateway, "POST", f"/sandboxes/{sbx.sandbox_id}/resume",
                           {"timeout": 60})
        assert status == 201 and body["sandboxID"] == sbx.sandbox_id, body
        assert state_of(sbx.sandbox_id) == "running"
    finally:
        Sandbox.kill(sbx.sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.pause("gb0123456789abcdef")
    status, body = api(gateway, "POST", "/sandboxes/gb0123456789abcdef/resume", {})
    assert status == 404, body


def raw_plane(gw, sandbox_id, port, headers=None):
    """A sandbox-plane request on the wire: (status, body bytes)."""
    req = urllib.request.Request(gw.base + "/e2b/health" if port == "49983"
                                 else gw.base + "/e2b/contexts",
                                 headers={"E2b-Sandbox-Id": sandbox_id,
                                          "E2b-Sandbox-Port": port, **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_without_credentials_a_paused_id_is_answered_as_an_unknown_one(gateway):
    """The sandbox plane tells that a sandbox is paused only to its token's
    holder: without credentials, or with a wrong token, a paused id gets the
    same status and body as an id that never existed."""
    sbx = Sandbox.create()
    try:
        assert sbx.pause() is True
        unknown = "gb" + secrets.token_hex(len(sbx.sandbox_id) // 2)[:len(sbx.sandbox_id) - 2]
        assert len(unknown) == len(sbx.sandbox_id) and unknown != sbx.sandbox_id
        for port in ("49983", "49999"):
            for headers in ({}, {"X-Access-Token": "0" * 64},
                            {"E2B-Traffic-Access-Token": "0" * 64},
                            {"X-API-Key": "e2b_" + "0" * 40}):
                paused = raw_plane(gateway, sbx.sandbox_id, port, headers)
                never = raw_plane(gateway, unknown, port, headers)
                assert paused == never, (port, headers, paused, never)
                assert never[0] == 502 and b"not found" in never[1], never
        # Its own token is told that it is paused (a positive control).
        status, body = raw_plane(gateway, sbx.sandbox_id, "49983",
                                 {"X-Access-Token": sbx._envd_access_token})
        assert status == 502 and b"paused" in body, (status, body)
    finally:
        Sandbox.kill(sbx.sandbox_id)


@pytest.mark.parametrize("keep_memory", [False, True])
def test_killing_a_paused_sandbox_removes_its_files(gateway, keep_memory):
    sbx = Sandbox.create()
    sbx.files.write("x.txt", "x")
    assert sbx.pause(keep_memory=keep_memory) is True
    state = gateway.own_state_dir
    listed = os.listdir(os.path.join(state, "paused"))
    assert listed == [sbx.sandbox_id]
    assert sorted(os.listdir(os.path.join(state, "paused", sbx.sandbox_id))) \
        == (["meta.json"] if keep_memory else ["home.tar", "meta.json"])
    assert len(checkpoint_dirs(state)) == (1 if keep_memory else 0)
    assert Sandbox.kill(sbx.sandbox_id) is True
    assert os.listdir(os.path.join(state, "paused")) == []
    # The kernel-host removes the checkpoint as it is told.
    end = time.monotonic() + 10
    while checkpoint_dirs(state) and time.monotonic() < end:
        time.sleep(0.05)
    assert checkpoint_dirs(state) == []
    with pytest.raises(SandboxException):
        Sandbox.connect(sbx.sandbox_id)


def test_a_paused_sandbox_survives_a_gateway_restart(tmp_path):
    state = str(tmp_path / "state")
    gw = start_gateway("--state-dir", state, token="e2b_" + secrets.token_hex(20))
    try:
        point_sdk_at(gw, gw.token)
        sbx = Sandbox.create(metadata={"suite": "restart"})
        sbx.files.write("kept.txt", "across restarts")
        sandbox_id = sbx.sandbox_id
        tokens = (sbx._envd_access_token, sbx.traffic_access_token)
        assert sbx.pause() is True
    finally:
        gw.stop()
    assert os.path.isfile(os.path.join(state, "paused", sandbox_id, "meta.json"))
    gw = start_gateway("--state-dir", state, token=gw.token)
    try:
        point_sdk_at(gw, gw.token)
        assert state_of(sandbox_id) == "paused"
        listed = Sandbox.list(query=SandboxQuery(metadata={"suite": "restart"})).next_items()
        assert [(s.sandbox_id, s.state.value) for s in listed] == [(sandbox_id, "paused")]
        again = Sandbox.connect(sandbox_id)
        # Both its tokens were kept, each its own.
        assert (again._envd_access_token, again.traffic_access_token) == tokens
        assert again.files.read("kept.txt") == "across restarts"
        assert again.run_code("6 * 7").text == "42"
        # Resumed: its saved state is gone from the disk.
        assert os.listdir(os.path.join(state, "paused")) == []
        again.kill()
    finally:
        gw.stop()


def test_on_timeout_pause_pauses_and_connect_resumes(gateway):
    sbx = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
    try:
        assert Sandbox.get_info(sbx.sandbox_id).lifecycle["on_timeout"] == "pause"
        sbx.files.write("t.txt", "timed out, not lost")
        wait_for_state(sbx.sandbox_id, "paused", seconds=30)
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert again.files.read("t.txt") == "timed out, not lost"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_set_timeout_zero_pauses_one_that_pauses_at_its_timeout(gateway):
    """set_timeout(0) is its timeout now: onTimeout 'pause' pauses it (E2B's
    tests force an auto-pause so)."""
    sbx = Sandbox.create(timeout=300, lifecycle={"on_timeout": "pause"})
    try:
        sbx.files.write("t.txt", "paused at once")
        sbx.set_timeout(0)
        wait_for_state(sbx.sandbox_id, "paused", seconds=30)
        again = Sandbox.connect(sbx.sandbox_id, timeout=60)
        assert again.files.read("t.txt") == "paused at once"
    finally:
        Sandbox.kill(sbx.sandbox_id)


@pytest.fixture
def tenants_gateway(tmp_path):
    path = tmp_path / "keys.json"
    keys = {name: "e2b_" + secrets.token_hex(20) for name in ("alice", "bob")}
    path.write_text(json.dumps({"keys": [
        {"name": name, "sha256": hashlib.sha256(key.encode()).hexdigest()}
        for name, key in keys.items()]}))
    state = str(tmp_path / "state")
    args = ("--keys-file", str(path), "--state-dir", state)
    gw = start_gateway(*args)
    gw.keys, gw.args = keys, args
    yield gw
    gw.stop()


def test_a_paused_sandbox_stays_its_creators(tenants_gateway):
    gw = tenants_gateway
    alice, bob = gw.keys["alice"], gw.keys["bob"]
    point_sdk_at(gw, gw.token)
    sbx = Sandbox.create(api_key=alice)
    sbx.files.write("mine.txt", "alice's")
    with pytest.raises(SandboxNotFoundException):
        Sandbox.pause(sbx.sandbox_id, api_key=bob)
    assert state_of(sbx.sandbox_id, api_key=alice) == "running"
    assert sbx.pause() is True
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sbx.sandbox_id, api_key=bob)
    assert Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED]), api_key=bob).next_items() == []
    assert Sandbox.kill(sbx.sandbox_id, api_key=bob) is False
    # The owner is recorded: after a restart too.
    gw.stop()
    again_gw = start_gateway(*gw.args)
    try:
        point_sdk_at(again_gw, again_gw.token)
        with pytest.raises(SandboxNotFoundException):
            Sandbox.connect(sbx.sandbox_id, api_key=bob)
        assert [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED]),
                                                   api_key=alice).next_items()] \
            == [sbx.sandbox_id]
        again = Sandbox.connect(sbx.sandbox_id, api_key=alice)
        assert again.files.read("mine.txt") == "alice's"
        # Resumed, it is still alice's alone.
        status, body = api(again_gw, "GET", f"/sandboxes/{sbx.sandbox_id}", key=bob)
        assert status == 404, body
        again.kill()
    finally:
        again_gw.stop()


def test_pause_keeps_the_memory_contexts_and_processes(gateway):
    """The SDK's default pause, with CRIU: the same kernel comes back, with
    its variables, its contexts (and their ids), the processes its code
    started, /tmp and the boot id."""
    sbx = Sandbox.create(metadata={"suite": "pause-memory"})
    try:
        assert sbx.run_code("import subprocess\nanswer = 42\n"
                            "child = subprocess.Popen(['sleep', '1000'])\nchild.pid").text
        ctx = sbx.create_code_context()
        assert sbx.run_code("in_ctx = 7", context=ctx).error is None
        sbx.files.write("/tmp/t.txt", "tmp kept")
        boot = sbx.files.read("/proc/sys/kernel/random/boot_id")
        assert sbx.pause() is True
        status, info = api(gateway, "GET", f"/sandboxes/{sbx.sandbox_id}")
        assert info["glovebox"] == {"memoryKept": True}, info
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.run_code("answer").text == "42"
        assert again.run_code("child.poll() is None").text == "True"
        assert again.run_code("in_ctx", context=ctx).text == "7"
        assert {c.id for c in again.list_code_contexts()} >= {ctx.id}
        assert again.files.read("/tmp/t.txt") == "tmp kept"
        assert again.files.read("/proc/sys/kernel/random/boot_id") == boot
        # And again: a restored sandbox pauses with its memory as a new one.
        assert again.pause() is True
        third = Sandbox.connect(sbx.sandbox_id)
        assert third.run_code("answer + 1").text == "43"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_commands_run_on_through_a_pause_with_memory(gateway):
    """Commands started through commands.run keep running through a pause
    with memory, under their pids: their pipes to the gateway are new ones
    after the restore, so a server's log lines, stdin and output still flow,
    and a second pause takes them again."""
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/site/index.txt", "served across a pause")
        server = sbx.commands.run(
            "python3 -m http.server 8000 --bind 127.0.0.1 --directory /home/user/site",
            background=True)
        cat = sbx.commands.run("cat", background=True, stdin=True)
        token = {"e2b-traffic-access-token": sbx.traffic_access_token}
        host = sbx.get_host(8000)
        assert wait_served(gateway, host, token) == 200
        for round_ in range(2):
            assert sbx.pause() is True
            status, info = api(gateway, "GET", f"/sandboxes/{sbx.sandbox_id}")
            assert info["glovebox"] == {"memoryKept": True}, info
            sbx = Sandbox.connect(sbx.sandbox_id)
            pids = {c.pid for c in sbx.commands.list()}
            assert {server.pid, cat.pid} <= pids, pids
            # The server logs each request to its stderr, a pipe to the
            # gateway: a dead pipe would fail the request.
            assert get(gateway, host, "/index.txt", token) == (200, b"served across a pause")
            # cat's stdin and stdout are the new pipes.
            followed = sbx.commands.connect(cat.pid)
            sbx.commands.send_stdin(cat.pid, f"round {round_}\n")
            seen = ""
            for stdout, _, _ in followed:
                seen += stdout or ""
                if f"round {round_}" in seen:
                    break
            assert f"round {round_}\n" in seen
            followed.disconnect()
        # The restored command dies when killed, and its end is reported.
        assert sbx.commands.kill(cat.pid) is True
        deadline = time.monotonic() + 10
        while cat.pid in {c.pid for c in sbx.commands.list()}:
            assert time.monotonic() < deadline, "the killed command is still listed"
            time.sleep(0.1)
    finally:
        Sandbox.kill(sbx.sandbox_id)


def read_terminal(handle, marker):
    """What a terminal shows until marker appears (a shell echoes what it
    is sent: the marker is built by the command, not typed whole)."""
    seen = b""
    for _, _, pty in handle:
        seen += pty or b""
        if marker in seen:
            return seen
    raise AssertionError(f"the terminal ended before {marker!r}: {seen!r}")


def test_a_terminal_runs_on_through_a_pause_with_memory(gateway):
    """A shell on a terminal (pty.create) runs on through a pause with
    memory, under its pid, with its variables and its size: after the
    restore its terminal is a new one, whose master the gateway has, and a
    second pause takes it again."""
    from e2b import PtySize
    sbx = Sandbox.create()
    try:
        sbx.run_code("kept = 1")
        term = sbx.pty.create(PtySize(rows=31, cols=97))
        sbx.pty.send_stdin(term.pid, b"SHELL_KEPT=through; echo set-$SHELL_KEPT\n")
        read_terminal(term, b"set-through")
        term.disconnect()
        for round_ in range(2):
            assert sbx.pause() is True
            status, info = api(gateway, "GET", f"/sandboxes/{sbx.sandbox_id}")
            assert info["glovebox"] == {"memoryKept": True}, info
            sbx = Sandbox.connect(sbx.sandbox_id)
            assert sbx.run_code("kept").text == "1"
            again = sbx.pty.connect(term.pid)
            sbx.pty.send_stdin(term.pid, f"echo r{round_}-$SHELL_KEPT-$(stty size)\n".encode())
            assert f"r{round_}-through-31 97".encode() in read_terminal(again, b"-31 97")
            sbx.pty.resize(term.pid, PtySize(rows=40, cols=120))
            sbx.pty.send_stdin(term.pid, b"echo size-$(stty size | tr ' ' x)\n")
            read_terminal(again, b"size-40x120")
            sbx.pty.resize(term.pid, PtySize(rows=31, cols=97))
            again.disconnect()
        # A fork's copy of the shell has a terminal of its own.
        (fork,) = sbx.fork(count=1, timeout=60)
        try:
            mine = fork.pty.connect(term.pid)
            fork.pty.send_stdin(term.pid, b"echo in-the-$(echo fork)-$SHELL_KEPT\n")
            read_terminal(mine, b"in-the-fork-through")
            mine.disconnect()
        finally:
            fork.kill()
        # The restored shell ends when told to, and its end is reported.
        sbx.pty.send_stdin(term.pid, b"exit 3\n")
        deadline = time.monotonic() + 10
        while term.pid in {c.pid for c in sbx.commands.list()}:
            assert time.monotonic() < deadline, "the shell that exited is still listed"
            time.sleep(0.1)
    finally:
        Sandbox.kill(sbx.sandbox_id)
