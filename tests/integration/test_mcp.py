"""The MCP endpoint ({base}/mcp) spoken to as raw HTTP: the transport's and
JSON-RPC's error cases, auth, sessions and their limits, and tool failures
as results. (tests/node/mcp.test.mjs drives it with the official SDK.)"""
import json
import os
import socket
import time
import urllib.error
import urllib.request

import pytest

from gbclient import start_gateway

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}


def mcp(gw, body=None, session=None, method="POST", raw=None, auth="bearer", headers=None):
    """One HTTP request to /mcp: (status, parsed JSON body or None, headers)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(gw.base + "/mcp", data=data, method=method)
    if auth == "bearer":
        req.add_header("Authorization", f"Bearer {gw.token}")
    elif auth:
        req.add_header("Authorization", auth)
    req.add_header("Content-Type", "application/json")
    req.add_header("Accept", "application/json, text/event-stream")
    if session:
        req.add_header("Mcp-Session-Id", session)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            text = resp.read()
            return resp.status, (json.loads(text) if text else None), resp.headers
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, (json.loads(text) if text else None), e.headers


def initialize(gw, version="2025-06-18"):
    body = dict(INIT, params=dict(INIT["params"], protocolVersion=version))
    status, reply, headers = mcp(gw, body)
    assert status == 200, (status, reply)
    sid = headers.get("Mcp-Session-Id")
    assert sid, headers
    return sid, reply["result"]


def call_tool(gw, sid, name, arguments, rid=7):
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                "params": {"name": name, "arguments": arguments}}, session=sid)
    assert status == 200, (status, reply)
    return reply


def rpc_error(reply):
    assert "error" in reply, reply
    return reply["error"]["code"], reply["error"]["message"]


def kernel_count(gw):
    status, kernels, _ = gw.request("GET", "/api/kernels")
    assert status == 200
    return len(kernels)


@pytest.fixture(scope="module")
def gw():
    g = start_gateway()
    yield g
    g.stop()


@pytest.fixture
def sid(gw):
    s, _ = initialize(gw)
    yield s
    mcp(gw, method="DELETE", session=s)


# ---- auth ------------------------------------------------------------------

@pytest.mark.parametrize("auth", [None, "Bearer wrong-token-123", "Basic dGVzdDp0ZXN0"])
def test_without_the_token_401(gw, auth):
    status, reply, _ = mcp(gw, INIT, auth=auth)
    assert status == 401
    assert "token" in reply["message"]


def test_token_scheme_works_too(gw):
    status, reply, headers = mcp(gw, INIT, auth=f"token {gw.token}")
    assert status == 200, reply
    mcp(gw, method="DELETE", session=headers["Mcp-Session-Id"])


# ---- initialize ------------------------------------------------------------

def test_initialize_result_and_session_header(gw):
    sid, result = initialize(gw)
    assert result["protocolVersion"] == "2025-06-18"
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "glovebox"
    assert len(sid) == 36
    # No kernel until the first tool call.
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, session=sid)
    assert (status, reply) == (200, {"jsonrpc": "2.0", "id": 2, "result": {}})
    assert mcp(gw, method="DELETE", session=sid)[0] == 204


@pytest.mark.parametrize("asked,answered", [("2025-03-26", "2025-03-26"),
                                            ("2025-06-18", "2025-06-18"),
                                            ("2024-01-01", "2025-06-18")])
def test_protocol_version_negotiation(gw, asked, answered):
    sid, result = initialize(gw, asked)
    assert result["protocolVersion"] == answered
    mcp(gw, method="DELETE", session=sid)


def test_sessions_are_distinct(gw):
    a, _ = initialize(gw)
    b, _ = initialize(gw)
    assert a != b
    for s in (a, b):
        assert mcp(gw, method="DELETE", session=s)[0] == 204


@pytest.mark.parametrize("params", [None, {}, {"protocolVersion": 2025}])
def test_initialize_without_a_version_is_invalid_params(gw, params):
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize"}
    if params is not None:
        body["params"] = params
    status, reply, headers = mcp(gw, body)
    assert status == 400
    assert rpc_error(reply)[0] == -32602
    assert "Mcp-Session-Id" not in headers


# ---- JSON-RPC errors -------------------------------------------------------

def test_parse_error(gw):
    status, reply, _ = mcp(gw, raw=b'{"jsonrpc": "2.0", "id": 1, "method": ')
    assert status == 400
    assert rpc_error(reply)[0] == -32700
    assert reply["id"] is None


@pytest.mark.parametrize("body", [
    [INIT],                                              # a batch
    "initialize",                                        # not an object
    {"id": 1, "method": "ping"},                         # no "jsonrpc"
    {"jsonrpc": "1.0", "id": 1, "method": "ping"},       # wrong version
    {"jsonrpc": "2.0", "id": None, "method": "ping"},    # null id
    {"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"},  # object id
    {"jsonrpc": "2.0", "id": 1, "method": 5},            # method not a string
    {"jsonrpc": "2.0", "id": 1},                         # neither request nor response
])
def test_invalid_request(gw, body):
    status, reply, _ = mcp(gw, body)
    assert status == 400
    assert rpc_error(reply)[0] == -32600


def test_method_not_found(gw, sid):
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": "a", "method": "resources/list"},
                           session=sid)
    assert status == 200
    assert reply["id"] == "a"
    assert rpc_error(reply)[0] == -32601


def test_params_not_an_object(gw, sid):
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": 3, "method": "tools/list",
                                "params": [1]}, session=sid)
    assert rpc_error(reply)[0] == -32602


def test_notification_and_response_get_202(gw, sid):
    for body in ({"jsonrpc": "2.0", "method": "notifications/initialized"},
                 {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 9}},
                 {"jsonrpc": "2.0", "id": 5, "result": {}}):
        status, reply, _ = mcp(gw, body, session=sid)
        assert (status, reply) == (202, None), body


# ---- sessions --------------------------------------------------------------

def test_request_without_session_id_400(gw):
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert status == 400
    assert "Mcp-Session-Id" in rpc_error(reply)[1]


def test_unknown_session_404(gw):
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                           session="00000000-0000-4000-8000-000000000000")
    assert status == 404
    assert rpc_error(reply)[0] == -32001


def test_unsupported_protocol_version_header_400(gw, sid):
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid,
                           headers={"MCP-Protocol-Version": "1999-01-01"})
    assert status == 400
    assert "MCP-Protocol-Version" in rpc_error(reply)[1]


def test_get_is_405_and_other_methods_too(gw, sid):
    assert mcp(gw, method="GET", session=sid)[0] == 405
    assert mcp(gw, {"x": 1}, method="PUT", session=sid)[0] == 405


def test_delete_ends_the_session(gw):
    status, _, _ = mcp(gw, method="DELETE")
    assert status == 400
    assert mcp(gw, method="DELETE", session="no-such-session")[0] == 404
    sid, _ = initialize(gw)
    assert mcp(gw, method="DELETE", session=sid)[0] == 204
    assert mcp(gw, method="DELETE", session=sid)[0] == 404
    status, _, _ = mcp(gw, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid)
    assert status == 404


def test_deleting_the_sessions_kernel_ends_the_session(gw, sid):
    before = kernel_count(gw)
    assert call_tool(gw, sid, "run_code", {"code": "1"})["result"]["isError"] is False
    status, kernels, _ = gw.request("GET", "/api/kernels")
    assert len(kernels) == before + 1
    new = [k["id"] for k in kernels]
    for kid in new:
        gw.request("DELETE", f"/api/kernels/{kid}")
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=sid)
    assert status == 404


def test_session_limit_503():
    g = start_gateway("--mcp-max-sessions", "2")
    try:
        a, _ = initialize(g)
        initialize(g)
        status, reply, headers = mcp(g, INIT)
        assert status == 503
        assert "--mcp-max-sessions" in rpc_error(reply)[1]
        assert "Mcp-Session-Id" not in headers
        assert mcp(g, method="DELETE", session=a)[0] == 204
        initialize(g)
    finally:
        g.stop()


def test_session_limit_per_key_429(tmp_path):
    """initialize costs nothing: one key holds at most
    --mcp-max-sessions-per-key sessions, so it cannot take every place of
    --mcp-max-sessions from the other keys; an admin is not held to it."""
    from test_tenants import new_key, write_keys
    keys = {"a": new_key("a"), "b": new_key("b")}
    path = tmp_path / "keys.json"
    write_keys(path, {"a": (keys["a"], {}), "b": (keys["b"], {})})
    g = start_gateway("--keys-file", str(path), "--mcp-max-sessions-per-key", "2")
    try:
        def init_as(key):
            return mcp(g, INIT, auth=f"Bearer {key}")
        first = [init_as(keys["a"]) for _ in range(2)]
        assert [st for st, _, _ in first] == [200, 200], first
        status, reply, headers = init_as(keys["a"])
        assert status == 429, (status, reply)
        assert "--mcp-max-sessions-per-key" in rpc_error(reply)[1]
        assert "Mcp-Session-Id" not in headers
        assert init_as(keys["b"])[0] == 200
        for _ in range(3):
            initialize(g)  # the gateway's token: an admin
        a = first[0][2]["Mcp-Session-Id"]
        req = urllib.request.Request(g.base + "/mcp", method="DELETE",
                                     headers={"Authorization": f"Bearer {keys['a']}",
                                              "Mcp-Session-Id": a})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 204
        assert init_as(keys["a"])[0] == 200
    finally:
        g.stop()


def test_unused_session_expires_without_culling():
    """A session that never started its kernel ends after
    --mcp-unused-session-timeout even with culling off (the default); one
    with its kernel stays."""
    g = start_gateway("--mcp-unused-session-timeout", "1")
    try:
        unused, _ = initialize(g)
        used, _ = initialize(g)
        assert call_tool(g, used, "run_code", {"code": "1"})["result"]["isError"] is False
        # (a request would make it active again: none until then)
        time.sleep(3)
        status, _, _ = mcp(g, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=unused)
        assert status == 404
        status, _, _ = mcp(g, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=used)
        assert status == 200
    finally:
        g.stop()


def test_idle_session_expires_with_its_kernel():
    g = start_gateway("--cull-idle-timeout", "1", "--cull-interval", "1")
    try:
        idle, _ = initialize(g)
        used, _ = initialize(g)
        assert call_tool(g, used, "run_code", {"code": "2 + 2"})["result"]["content"] == [
            {"type": "text", "text": "4"}]
        assert kernel_count(g) == 1
        # Only the kernels are polled: a request to a session is activity.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and kernel_count(g):
            time.sleep(0.5)
        assert kernel_count(g) == 0
        # Two ticks of --cull-interval more for the session that never had one.
        time.sleep(2.5)
        for s in (idle, used):
            status, _, _ = mcp(g, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, session=s)
            assert status == 404
    finally:
        g.stop()


# ---- tools/call: invalid params and tool failures -------------------------

@pytest.mark.parametrize("params,word", [
    ({"name": "no_such_tool", "arguments": {}}, "Unknown tool"),
    ({"arguments": {"code": "1"}}, "name"),
    ({"name": "run_code", "arguments": "1+1"}, "arguments"),
    ({"name": "run_code", "arguments": {}}, "required"),
    ({"name": "run_code", "arguments": {"code": 1}}, "string"),
    ({"name": "run_code", "arguments": {"code": "1", "language": "ruby"}}, "python"),
    ({"name": "run_code", "arguments": {"code": "1", "timeout": -1}}, "seconds"),
    ({"name": "run_code", "arguments": {"code": "1", "extra": True}}, "unknown argument"),
    ({"name": "write_file", "arguments": {"path": "x"}}, "content"),
    ({"name": "run_command", "arguments": {"command": "true", "timeout": 0}}, "seconds"),
])
def test_invalid_tool_params(gw, sid, params, word):
    before = kernel_count(gw)
    status, reply, _ = mcp(gw, {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                "params": params}, session=sid)
    assert status == 200
    code, message = rpc_error(reply)
    assert code == -32602
    assert word in message
    # Refused before any sandbox was made for the session.
    assert kernel_count(gw) == before


def test_tool_failures_are_results_with_is_error(gw, sid):
    cases = [
        ("read_file", {"path": "."}, "directory"),
        ("read_file", {"path": "missing.txt"}, "No such file"),
        ("write_file", {"path": "/usr/bin/evil", "content": "x"}, "Cannot write"),
        ("list_files", {"path": "nothing-here"}, "No such file"),
        ("run_command", {"command": "exit 7"}, "exit code 7"),
        ("run_code", {"code": "raise ValueError('bad value')"}, "ValueError: bad value"),
    ]
    for name, args, text in cases:
        reply = call_tool(gw, sid, name, args)
        result = reply["result"]
        assert result["isError"] is True, (name, result)
        joined = "".join(c.get("text", "") for c in result["content"])
        assert text in joined, (name, joined)
    # The session carries on after each.
    assert call_tool(gw, sid, "run_code", {"code": "6 * 7"})["result"]["content"] == [
        {"type": "text", "text": "42"}]


def test_paths_stay_in_the_sandbox(gw, sid):
    assert call_tool(gw, sid, "run_command",
                     {"command": "ln -s / root-link"})["result"]["isError"] is False
    # The link resolves inside the sandbox's root: its /etc, never the host's.
    reply = call_tool(gw, sid, "read_file", {"path": "root-link/etc/hostname"})
    host = open("/etc/hostname").read()
    texts = "".join(c.get("text", "") for c in reply["result"]["content"])
    assert reply["result"]["isError"] or texts != host
    reply = call_tool(gw, sid, "write_file", {"path": "../../etc/glovebox-mcp-test", "content": "x"})
    assert reply["result"]["isError"] is True
    assert not os.path.exists("/etc/glovebox-mcp-test")


def test_run_code_timeout_interrupts(gw, sid):
    started = time.monotonic()
    reply = call_tool(gw, sid, "run_code", {"code": "import time\ntime.sleep(60)", "timeout": 1})
    assert time.monotonic() - started < 20
    result = reply["result"]
    assert result["isError"] is True
    assert "TimeoutError" in "".join(c["text"] for c in result["content"])
    assert call_tool(gw, sid, "run_code", {"code": "'alive'"})["result"]["content"] == [
        {"type": "text", "text": "alive"}]


def test_output_is_bounded():
    g = start_gateway("--mcp-max-output-bytes", "4096")
    try:
        s, _ = initialize(g)
        result = call_tool(g, s, "run_code", {"code": "print('x' * 100000)"})["result"]
        texts = [c["text"] for c in result["content"]]
        assert sum(len(t) for t in texts) < 4096 + 200
        assert "--mcp-max-output-bytes" in texts[-1]
        result = call_tool(g, s, "run_command", {"command": "head -c 100000 /dev/zero | tr '\\0' y"})
        assert result["result"]["isError"] is False
        out = result["result"]["structuredContent"]["stdout"]
        assert len(out) == 4096
        assert "--mcp-max-output-bytes" in result["result"]["content"][0]["text"]
        call_tool(g, s, "run_command", {"command": "head -c 10000 /dev/zero > big"})
        result = call_tool(g, s, "read_file", {"path": "big"})["result"]
        assert result["isError"] is True
        assert "10000 bytes" in result["content"][0]["text"]
    finally:
        g.stop()


def test_gateway_survives_bad_input(gw):
    for raw in (b"", b"null", b"\xff\xfe", b"{" * 10000, b'{"jsonrpc":"2.0","id":1,"method":"x"'):
        status, _, _ = mcp(gw, raw=raw)
        assert status == 400, raw[:20]
    status, reply, _ = gw.request("GET", "/api")
    assert status == 200


def host_processes_with(marker):
    """Host pids whose command line holds marker (sandboxes' processes are
    this machine's too)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read().replace(b"\0", b" "):
                    found.append(pid)
        except OSError:
            pass
    return found


def send_and_leave_later(gw, sid, body):
    """POSTs body on a socket of its own, which the caller closes: a
    client that goes away mid-call."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", gw.port))
    sock.sendall((f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  f"Authorization: Bearer {gw.token}\r\nMcp-Session-Id: {sid}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                  f"\r\n").encode() + data)
    return sock


def answer_so_far(sock, seconds=5):
    """What the gateway has answered on sock (a call that failed at once
    says why there)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(65536)
    except OSError as e:
        return repr(e)


def wait_until(pred, seconds):
    deadline = time.monotonic() + seconds
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.1)
    return pred()


def test_a_client_that_leaves_stops_its_call(gw, sid):
    # A command whose client went is killed ...
    marker = f"sleep {900000 + os.getpid() % 90000}"
    sock = send_and_leave_later(gw, sid, {
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "run_command", "arguments": {"command": marker}}})
    assert wait_until(lambda: host_processes_with(marker), 60), \
        f"the command runs; the gateway said: {answer_so_far(sock)!r}"
    sock.close()
    assert wait_until(lambda: not host_processes_with(marker), 10), "and is killed"
    # ... and a cell is interrupted: the next one runs at once.
    sock = send_and_leave_later(gw, sid, {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_code", "arguments": {"code": "import time\ntime.sleep(120)"}}})
    time.sleep(1)
    sock.close()
    started = time.monotonic()
    reply = call_tool(gw, sid, "run_code", {"code": "'next'"})
    assert reply["result"]["content"] == [{"type": "text", "text": "next"}]
    assert time.monotonic() - started < 30
