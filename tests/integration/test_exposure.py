"""What a client without the token, or a web page elsewhere, can make the
gateway do: the Host check against DNS rebinding, requests refused before
any body is read, the caps on connections, the deadline for connections
that never authenticate, and where the token is (and is not) shown.

Raw sockets throughout: urllib and websocket-client would hide what is
measured here (which bytes were read, when a connection closed)."""
import json
import os
import re
import socket
import ssl
import subprocess
import tempfile
import time

import pytest
import websocket

from gbclient import BINARY, free_port, start_gateway


def connect(gw, source="127.0.0.1"):
    """A TCP connection to the gateway from a loopback source address of
    our choosing (all of 127/8 is this machine), so that one test can be
    several clients."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", gw.port))
    s.settimeout(10)
    return s


def read_response(s, timeout=10):
    """One HTTP response: (status, JSON body or None, headers, seconds it
    took). Status 0 when the connection closed without one."""
    s.settimeout(timeout)
    t0 = time.monotonic()
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return 0, None, {}, time.monotonic() - t0
            data += chunk
    except (ConnectionResetError, socket.timeout):
        return 0, None, {}, time.monotonic() - t0
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    parsed = json.loads(body) if body and "json" in headers.get("content-type", "") else None
    return status, parsed, headers, time.monotonic() - t0


def request(s, method, path, headers=(), body=b""):
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def closed_within(s, seconds):
    """Seconds until the gateway closed s (EOF or reset), or None if it was
    still open after the given seconds. Reads and drops what comes."""
    s.settimeout(0.1)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            if not s.recv(65536):
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def get(gw, path, host=None, origin=None, token=None, source="127.0.0.1"):
    s = connect(gw, source)
    try:
        headers = [("Host", host or f"127.0.0.1:{gw.port}"), ("Connection", "close")]
        if origin:
            headers.append(("Origin", origin))
        if token:
            headers.append(("Authorization", f"token {token}"))
        request(s, "GET", path, headers)
        return read_response(s)
    finally:
        s.close()


def upgrade_status(gw, kernel, host, origin=None, token=None):
    """The status a WebSocket upgrade to kernel's channels gets (101 when it
    is accepted). (Without an origin, websocket-client sends one made of
    the URL, 127.0.0.1.)"""
    url = f"ws://127.0.0.1:{gw.port}/api/kernels/{kernel}/channels"
    if token:
        url += f"?token={token}"
    try:
        ws = websocket.create_connection(url, host=host, origin=origin, timeout=10)
    except websocket.WebSocketBadStatusException as e:
        return e.status_code
    ws.close()
    return 101


# ---- 12: the Host check (DNS rebinding) --------------------------------------------------


def test_dns_rebinding_is_refused_even_without_auth():
    """A page on evil.example whose name now resolves to 127.0.0.1 sends
    Host and Origin evil.example: same-origin to the browser, and to the
    Origin check. With --no-auth that was every kernel; now a 403."""
    gw = start_gateway("--no-auth", token=None)
    try:
        evil = f"evil.example:{gw.port}"
        status, body, headers, _ = get(gw, "/api/kernels", host=evil, origin=f"http://{evil}")
        assert status == 403, (status, body)
        assert body["reason"] == "Forbidden" and "--allow-host" in body["message"], body
        assert "access-control-allow-origin" not in headers
        # Without an Origin (a simple navigation or a form post) too.
        assert get(gw, "/api/kernels", host=evil)[0] == 403
        # The page's own files are refused as well: nothing is served to a
        # rebound name.
        assert get(gw, "/", host=evil)[0] == 403
        # And the WebSocket: a refused upgrade, never 101.
        status, model, _ = gw.request("POST", "/api/kernels", {"name": "python3"}, token="")
        assert status == 201, model
        assert upgrade_status(gw, model["id"], evil, f"http://{evil}") == 403
        # The names the gateway is reached by, port or not: served.
        for host in (f"127.0.0.1:{gw.port}", "127.0.0.1", f"localhost:{gw.port}",
                     f"[::1]:{gw.port}", f"127.0.0.2:{gw.port}"):
            assert get(gw, "/api/kernels", host=host, origin=f"http://{host}")[0] == 200, host
        assert upgrade_status(gw, model["id"], f"localhost:{gw.port}",
                              f"http://localhost:{gw.port}") == 101
        # On loopback another machine's address is no name of this gateway's.
        assert get(gw, "/api/kernels", host=f"10.1.2.3:{gw.port}")[0] == 403
        # Malformed Hosts are refused, never taken for a name.
        for host in ("localhost:80x", "[::1", "a b", "x" * 400):
            assert get(gw, "/api/kernels", host=host)[0] == 403, host
        # A request without Host (HTTP/1.0) is no browser's: served.
        s = connect(gw)
        s.sendall(b"GET /api HTTP/1.0\r\n\r\n")
        assert read_response(s)[0] == 200
        s.close()
        # The operator hears of it once, with the flag that would allow it.
        assert gw.read_log().count("--allow-host evil.example") == 1
    finally:
        gw.stop()


def test_allow_host_names_the_gateway_and_star_turns_the_check_off():
    gw = start_gateway("--allow-host", "notebook.example, gb.example:443")
    try:
        for host in (f"notebook.example:{gw.port}", "NOTEBOOK.example", "gb.example"):
            status, _, _, _ = get(gw, "/api", host=host, token=gw.token)
            assert status == 200, host
        assert get(gw, "/api", host="evil.example", token=gw.token)[0] == 403
        kid = gw.start_kernel()
        for name, want in (("notebook.example", 101), ("evil.example", 403)):
            host = f"{name}:{gw.port}"
            assert upgrade_status(gw, kid, host, f"http://{host}", gw.token) == want, name
    finally:
        gw.stop()
    gw = start_gateway("--allow-host", "*")
    try:
        assert get(gw, "/api", host="anything.example", token=gw.token)[0] == 200
    finally:
        gw.stop()
    out = subprocess.run([BINARY, "--allow-host", "bad name", "--check-config"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--allow-host" in out.stderr, out.stderr


def test_listening_beyond_loopback_takes_addresses_not_names():
    """On 0.0.0.0 clients come by any address of the machine (or a public
    one NAT forwards): an address cannot be rebound, a name can."""
    port = free_port()
    # The last --listen wins over the one the test client adds.
    gw = start_gateway("--listen", f"0.0.0.0:{port}")
    gw.port, gw.base = port, f"http://127.0.0.1:{port}"
    try:
        for host in ("10.1.2.3", f"203.0.113.9:{gw.port}", f"127.0.0.1:{gw.port}", "localhost"):
            assert get(gw, "/api", host=host, token=gw.token)[0] == 200, host
        assert get(gw, "/api", host=f"myhost.example:{gw.port}", token=gw.token)[0] == 403
    finally:
        gw.stop()


def test_ipv6_loopback_names_and_caps():
    """Listening on [::1]: Host "[::1]:port" is the gateway's own; an IPv6
    client is counted by its /64."""
    port = free_port()
    gw = start_gateway("--listen", f"[::1]:{port}", "--max-connections-per-address", "1")
    gw.port = port
    try:
        auth = [("Authorization", f"token {gw.token}")]

        def ask(host):
            s = socket.create_connection(("::1", port), timeout=10)
            request(s, "GET", "/api", [("Host", host)] + auth)
            return s, read_response(s)

        first, (status, _, _, _) = ask(f"[::1]:{port}")
        assert status == 200
        second, (status, body, _, _) = ask(f"localhost:{port}")
        assert status == 429 and "::/64" in body["message"], (status, body)
        second.close()
        first.close()
        deadline = time.monotonic() + 10
        while True:
            s, (status, body, _, _) = ask(f"evil.example:{port}")
            s.close()
            if status != 429:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert status == 403, (status, body)
        assert "http://[::1]:" in gw.url_line
    finally:
        gw.stop()


def test_an_origin_too_long_to_read_is_not_taken_for_none():
    """An Origin longer than the gateway reads (a page on a long domain name)
    used to count as no Origin at all: let through, WebSocket included."""
    gw = start_gateway("--no-auth", token=None)
    try:
        origin = "http://" + "a" * 250 + ".example"
        status, body, _, _ = get(gw, "/api/kernels", origin=origin)
        assert status == 403, (status, body)
        status, model, _ = gw.request("POST", "/api/kernels", {"name": "python3"}, token="")
        assert upgrade_status(gw, model["id"], f"127.0.0.1:{gw.port}", origin) == 403
        assert upgrade_status(gw, model["id"], f"127.0.0.1:{gw.port}",
                              f"http://127.0.0.1:{gw.port}") == 101
    finally:
        gw.stop()


# ---- 13: no body before credentials; caps; the unauthenticated deadline ------------------


def test_unauthenticated_bodies_are_refused_before_any_is_read():
    """Each request sends its headers and a first chunk, as a client that
    means to send a long body slowly would. Each is answered at once, from
    its headers, and the connection closed: before, the E2B routes read the
    body first and /api/kernels never answered, both for 120 s."""
    gw = start_gateway()
    try:
        cases = [
            ("POST", "/api/kernels", [], 401),
            ("POST", "/e2b/v2/sandboxes", [("X-API-KEY", "wrong")], 401),
            ("POST", "/e2b/execute", [("E2b-Sandbox-Id", "nope"), ("E2b-Sandbox-Port", "49999")],
             502),
            ("POST", "/e2b/files", [("E2b-Sandbox-Id", "nope"), ("E2b-Sandbox-Port", "49983")],
             502),
            # A signed upload URL whose signature no sandbox made.
            ("POST", "/files?path=a&signature=v1_forged", [], 401),
            ("POST", "/e2b/files?path=a&signature=v1_forged", [], 401),
            ("PUT", "/api/kernels/00000000-0000-0000-0000-000000000000/files/x", [], 401),
            ("POST", "/", [], 405),
            ("GET", "/static/app.js", [], 400),
        ]
        for method, path, extra, want in cases:
            for framing in ([("Transfer-Encoding", "chunked")], [("Content-Length", "1000000")]):
                s = connect(gw)
                request(s, method, path,
                        [("Host", f"127.0.0.1:{gw.port}")] + extra + framing,
                        b"1\r\na\r\n" if framing[0][0] == "Transfer-Encoding" else b"a")
                status, body, headers, took = read_response(s)
                assert status == want, (method, path, framing, status, body)
                assert took < 2, (method, path, framing, took)
                # Nothing more is read: the connection ends with the answer.
                gone = closed_within(s, 2)
                assert gone is not None, (method, path, framing)
                s.close()
        # A positive control: with the token, the same chunked body is read.
        s = connect(gw)
        body = json.dumps({"name": "nope"}).encode()
        request(s, "POST", "/api/kernels",
                [("Host", f"127.0.0.1:{gw.port}"), ("Authorization", f"token {gw.token}"),
                 ("Transfer-Encoding", "chunked")],
                b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        status, err, _, _ = read_response(s)
        assert status == 404 and "nope" in err["message"], (status, err)
        s.close()
    finally:
        gw.stop()


def served_connection(gw, auth, source="127.0.0.1", timeout=10):
    """A connection the gateway serves, once the ones just closed are gone
    on its side too (it notices a close asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        s = connect(gw, source)
        request(s, "GET", "/api", auth)
        status = read_response(s)[0]
        if status == 200:
            return s
        s.close()
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def test_connections_per_address_are_capped_with_429():
    gw = start_gateway("--max-connections-per-address", "2")
    held = []
    try:
        auth = [("Host", f"127.0.0.1:{gw.port}"), ("Authorization", f"token {gw.token}")]
        kid = gw.start_kernel()
        held = [served_connection(gw, auth), served_connection(gw, auth)]
        # The third from the same address: a 429 that says why, then closed.
        s = connect(gw)
        request(s, "GET", "/api", auth)
        status, body, _, _ = read_response(s)
        assert status == 429, (status, body)
        assert body["reason"] == "Too Many Requests"
        assert "127.0.0.1" in body["message"] and "--max-connections-per-address" in body["message"]
        assert closed_within(s, 2) is not None
        s.close()
        # Another address is another client.
        other = connect(gw, "127.0.0.2")
        request(other, "GET", "/api", auth)
        assert read_response(other)[0] == 200
        held.append(other)
        # A WebSocket upgrade past the cap is refused the same way.
        assert upgrade_status(gw, kid, f"127.0.0.1:{gw.port}", token=gw.token) == 429
        # Refused connections still open count up to twice the cap; past
        # that a new one is closed at once, unanswered.
        waiting = [connect(gw), connect(gw)]
        s = connect(gw)
        request(s, "GET", "/api", auth)
        assert read_response(s, timeout=5)[0] == 0
        s.close()
        for w in waiting:
            w.close()
        # Once one of the two is closed, the address is served again.
        held.pop(0).close()
        held.append(served_connection(gw, auth))
        assert "refusing connections from 127.0.0.1" in gw.read_log()
    finally:
        for s in held:
            s.close()
        gw.stop()


def test_connections_in_all_are_capped_with_503():
    gw = start_gateway("--max-connections", "3")
    held = []
    try:
        auth = [("Host", f"127.0.0.1:{gw.port}"), ("Authorization", f"token {gw.token}")]
        for i in range(3):
            s = connect(gw, f"127.0.0.{i + 1}")
            request(s, "GET", "/api", auth)
            assert read_response(s)[0] == 200
            held.append(s)
        s = connect(gw, "127.0.0.9")
        request(s, "GET", "/api", auth)
        status, body, _, _ = read_response(s)
        assert status == 503 and "--max-connections" in body["message"], (status, body)
        s.close()
    finally:
        for s in held:
            s.close()
        gw.stop()


def test_connections_that_never_authenticate_are_closed_at_the_deadline():
    gw = start_gateway("--unauthenticated-timeout", "1")
    try:
        host = [("Host", f"127.0.0.1:{gw.port}")]
        # Silent, and slow headers (a line every 0.3 s): closed at 1 s.
        silent = connect(gw)
        took = closed_within(silent, 5)
        assert took is not None and 0.8 < took < 3, took
        slow = connect(gw)
        slow.sendall(b"GET /api HTTP/1.1\r\n")
        t0 = time.monotonic()
        with pytest.raises(OSError):
            while time.monotonic() - t0 < 5:
                slow.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.3)
        assert time.monotonic() - t0 < 3
        # Requests without the token, one every 0.4 s on one connection:
        # each is answered 401, and the connection still ends at 1 s (lws's
        # keep-alive alone would hold it as long as they keep coming).
        s = connect(gw)
        t0, answers = time.monotonic(), 0
        while time.monotonic() - t0 < 5:
            try:
                request(s, "GET", "/api/kernels", host)
                status = read_response(s, timeout=2)[0]
            except OSError:
                break
            if status == 0:
                break
            assert status == 401
            answers += 1
            time.sleep(0.4)
        assert 1 <= answers <= 4 and time.monotonic() - t0 < 3, (answers, time.monotonic() - t0)
        # The page's public files, fetched one after another as a browser
        # does: each starts the deadline again; once they stop, it ends.
        s = connect(gw)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            request(s, "GET", "/", host)
            assert read_response(s)[0] == 200
            time.sleep(0.5)
        took = closed_within(s, 5)
        assert took is not None and 0.3 < took < 3, took
        s.close()
        # A positive control: a connection that sent the token lives on
        # past the deadline, for its next request.
        s = connect(gw)
        auth = host + [("Authorization", f"token {gw.token}")]
        request(s, "GET", "/api", auth)
        assert read_response(s)[0] == 200
        time.sleep(2)
        request(s, "GET", "/api", auth)
        assert read_response(s)[0] == 200
        s.close()
        # And so does a WebSocket.
        kid = gw.start_kernel()
        ch = gw.connect(kid)
        time.sleep(2)
        reply, _ = ch.execute("1 + 1", timeout=30)
        assert reply["content"]["status"] == "ok"
        ch.close()
    finally:
        gw.stop()


def test_a_silent_tls_client_is_closed_at_the_deadline():
    d = tempfile.mkdtemp()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", f"{d}/key.pem", "-out", f"{d}/cert.pem"],
                   check=True, capture_output=True)
    gw = start_gateway("--certfile", f"{d}/cert.pem", "--keyfile", f"{d}/key.pem",
                       "--unauthenticated-timeout", "1.5")
    try:
        # A TCP connection that never begins its handshake.
        took = closed_within(connect(gw), 6)
        assert took is not None and 1.2 < took < 4, took
        # One that completes the handshake and then says nothing.
        ctx = ssl.create_default_context(cafile=f"{d}/cert.pem")
        ctx.check_hostname = False
        tls = ctx.wrap_socket(connect(gw))
        took = closed_within(tls, 6)
        assert took is not None and took < 4, took
        tls.close()
    finally:
        gw.stop()


# ---- 14: the token: from a file or the environment, shown only when generated ------------


def test_token_from_a_file_is_used_and_never_printed(tmp_path):
    token = "file-token-0123456789abcdef"
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    gw = start_gateway("--token-file", str(path), token=None)
    gw.token = token
    try:
        assert token not in gw.url_line and "?token=" not in gw.url_line, gw.url_line
        assert re.fullmatch(rf"Glovebox is serving at http://127\.0\.0\.1:{gw.port}/\n",
                            gw.url_line), gw.url_line
        assert gw.request("GET", "/api/kernels")[0] == 200
        assert gw.request("GET", "/api/kernels", token="wrong-token-000")[0] == 401
        with open(f"/proc/{gw.proc.pid}/cmdline", "rb") as f:
            assert token.encode() not in f.read()
        log = gw.read_log()
        assert token not in log and "--token-file" in log
    finally:
        gw.stop()


def test_token_from_the_environment_is_used_and_never_printed():
    token = "env-token-0123456789abcdef"
    gw = start_gateway(token=None, env=dict(os.environ, GLOVEBOX_TOKEN=token))
    gw.token = token
    try:
        assert token not in gw.url_line and "?token=" not in gw.url_line
        assert gw.request("GET", "/api/kernels")[0] == 200
        assert token not in gw.read_log()
    finally:
        gw.stop()


def test_token_on_the_command_line_is_blanked_and_warned_about():
    token = "argv-token-0123456789abcdef"
    gw = start_gateway(token=token)
    try:
        assert token not in gw.url_line
        with open(f"/proc/{gw.proc.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        assert token.encode() not in cmdline and b"--token\0xxxxxxxx" in cmdline, cmdline
        assert gw.request("GET", "/api/kernels")[0] == 200
        log = gw.read_log()
        assert "visible to every user" in log and token not in log
    finally:
        gw.stop()


def test_a_generated_token_is_printed_once_on_stdout_only():
    gw = start_gateway(token=None)
    try:
        m = re.fullmatch(rf"Glovebox is serving at http://127\.0\.0\.1:{gw.port}/\?token="
                         r"(e2b_[0-9a-f]{48})\n", gw.url_line)
        assert m, gw.url_line
        gw.token = m.group(1)
        assert gw.request("GET", "/api/kernels")[0] == 200
        assert gw.token not in gw.read_log()
    finally:
        gw.stop()


def test_bad_token_files_are_refused(tmp_path):
    def check(*args):
        return subprocess.run([BINARY, *args, "--check-config"], capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if k != "GLOVEBOX_TOKEN"})

    empty = tmp_path / "empty"
    empty.write_text("\n")
    long = tmp_path / "long"
    long.write_text("x" * 1000)
    good = tmp_path / "good"
    good.write_text("  good-token-123  \nsecond line ignored\n")
    good.chmod(0o600)
    for args, says in ((["--token-file", str(tmp_path / "missing")], "No such file"),
                       (["--token-file", str(empty)], "no token"),
                       (["--token-file", str(long)], "longer than a token"),
                       (["--token-file", str(tmp_path)], "not a regular file"),
                       (["--token-file", str(good), "--token", "other-token-1"], "once")):
        out = check(*args)
        assert out.returncode == 2 and says in out.stderr, (args, out.stderr)
    assert check("--token-file", str(good)).returncode == 0
    # A token is 8 to 256 printable characters: at the bounds and past them.
    for token, code in (("a" * 8, 0), ("a" * 7, 2), ("a" * 256, 0), ("a" * 257, 2),
                        ("has space", 2)):
        bound = tmp_path / "bound"
        bound.write_text(token + "\n")
        bound.chmod(0o600)
        out = check("--token-file", str(bound))
        assert out.returncode == code, (len(token), out.stderr)
    good.chmod(0o644)
    out = check("--token-file", str(good))
    assert out.returncode == 0 and "readable or writable by every user" in out.stderr


def test_an_idle_keep_alive_connection_outlives_the_clients_pools():
    """A client that reuses its connection after a pause gets an answer:
    the gateway keeps an idle keep-alive connection longer than clients'
    pools keep theirs (httpx's 5 s). At libwebsockets' default 5 s, E2B's
    SDK, reusing its connection after 5 s asleep, sent its request into the
    gateway's close and failed ("Server disconnected without sending a
    response")."""
    gw = start_gateway()
    try:
        auth = [("Host", f"127.0.0.1:{gw.port}"), ("Authorization", f"token {gw.token}")]
        s = connect(gw)
        request(s, "GET", "/api", auth)
        assert read_response(s)[0] == 200
        time.sleep(6.5)
        request(s, "GET", "/api", auth)
        assert read_response(s)[0] == 200
        s.close()
    finally:
        gw.stop()
