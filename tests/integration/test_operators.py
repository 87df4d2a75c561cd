"""What operators configure: kernel limits, culling, CORS and Origin, TLS,
IOPub rate limits, the message-type allow-list, --no-auth."""
import json
import re
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request

import pytest
import websocket

from gbclient import free_port, outputs_of, start_gateway, stdout_of


def test_max_kernels_counts_starting_ones():
    gw = start_gateway("--max-kernels", "2")
    try:
        import threading
        results = []

        def start():
            results.append(gw.request("POST", "/api/kernels", {})[0])

        threads = [threading.Thread(target=start) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [201, 201, 403]
        status, body, _ = gw.request("POST", "/api/kernels", {})
        assert status == 403 and "limit" in body["message"]
    finally:
        gw.stop()


def wait_for(predicate, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_idle_culling_spares_connected_and_busy():
    gw = start_gateway("--cull-idle-timeout", "2", "--cull-interval", "1")
    try:
        # Each kernel connected or busy as soon as it is started: a start
        # on a loaded machine can take longer than the cull timeout.
        connected = gw.start_kernel()
        ch = gw.connect(connected)
        busy = gw.start_kernel()
        worker = gw.connect(busy)
        worker.send("execute_request", {"code": "import time; time.sleep(60)", "silent": False})
        idle = gw.start_kernel()
        gone = lambda kid: gw.request("GET", f"/api/kernels/{kid}")[0] == 404  # noqa: E731
        assert wait_for(lambda: gone(idle), 10), "the idle kernel is culled"
        time.sleep(3)
        assert not gone(connected), "a connected kernel is spared"
        assert not gone(busy), "a busy kernel is spared"
        ch.close()
        assert wait_for(lambda: gone(connected), 10), "culled once its client left"
        worker.close()
    finally:
        gw.stop()


def test_cors_preflight_and_origin_checks():
    gw = start_gateway("--allow-origin", "http://notebook.example")
    try:
        req = urllib.request.Request(gw.base + "/api/kernels", method="OPTIONS", headers={
            "Origin": "http://notebook.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        with urllib.request.urlopen(req) as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == "http://notebook.example"
            assert "POST" in resp.headers["Access-Control-Allow-Methods"]
            assert "authorization" in resp.headers["Access-Control-Allow-Headers"].lower()
        status, _, headers = gw.request("GET", "/api/kernels",
                                        headers={"Origin": "http://notebook.example"})
        assert status == 200
        assert headers["Access-Control-Allow-Origin"] == "http://notebook.example"
        # Another origin is refused, on REST and on the WebSocket upgrade.
        status, body, headers = gw.request("GET", "/api/kernels",
                                           headers={"Origin": "http://evil.example"})
        assert status == 403 and headers["Access-Control-Allow-Origin"] is None
        kid = gw.start_kernel()
        url = f"ws://127.0.0.1:{gw.port}/api/kernels/{kid}/channels?token={gw.token}"
        with pytest.raises(websocket.WebSocketBadStatusException) as info:
            websocket.create_connection(url, origin="http://evil.example")
        assert info.value.status_code == 403
        websocket.create_connection(url, origin="http://notebook.example").close()
        # The gateway's own origin is always fine.
        websocket.create_connection(url, origin=f"http://127.0.0.1:{gw.port}").close()
    finally:
        gw.stop()


def test_tls():
    d = tempfile.mkdtemp()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", f"{d}/key.pem", "-out", f"{d}/cert.pem"],
                   check=True, capture_output=True)
    gw = start_gateway("--certfile", f"{d}/cert.pem", "--keyfile", f"{d}/key.pem")
    try:
        assert gw.url_line.split()[-1].startswith("https://")
        ctx = ssl.create_default_context(cafile=f"{d}/cert.pem")
        ctx.check_hostname = False
        req = urllib.request.Request(f"https://127.0.0.1:{gw.port}/api/kernels", data=b"{}",
                                     headers={"Authorization": f"token {gw.token}"})
        with urllib.request.urlopen(req, context=ctx) as resp:
            kid = json.loads(resp.read())["id"]
        ws = websocket.create_connection(
            f"wss://127.0.0.1:{gw.port}/api/kernels/{kid}/channels?token={gw.token}",
            sslopt={"ca_certs": f"{d}/cert.pem", "check_hostname": False})
        ws.close()
        # A client offering HTTP/2 (E2B's SDKs do, on TLS) gets HTTP/1.1,
        # where headers such as X-API-Key reach the gateway.
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", gw.port)) as raw, \
                ctx.wrap_socket(raw) as tls:
            assert tls.selected_alpn_protocol() == "http/1.1"
        req = urllib.request.Request(f"https://127.0.0.1:{gw.port}/e2b/sandboxes",
                                     headers={"X-API-Key": gw.token})
        with urllib.request.urlopen(req, context=ctx) as resp:
            assert resp.status == 200 and json.loads(resp.read()) == []
        with pytest.raises(Exception):
            urllib.request.urlopen(f"http://127.0.0.1:{gw.port}/api", timeout=5)
    finally:
        gw.stop()


def test_iopub_rate_limit_holds_outputs_back():
    gw = start_gateway("--iopub-msg-rate-limit", "50", "--rate-limit-window", "1")
    try:
        kid = gw.start_kernel()
        ch = gw.connect(kid)
        reply, outputs = ch.execute(
            "import sys\nfor i in range(2000):\n    print(i, flush=True)", timeout=60)
        assert reply["content"]["status"] == "ok"
        notices = [m for m in outputs if m["msg_type"] == "stream" and
                   m["content"]["text"].startswith("[glovebox] IOPub rate exceeded")]
        assert len(notices) == 1
        lines = stdout_of(outputs).split()
        assert 0 < len(lines) < 2000
        ch.close()
    finally:
        gw.stop()


def test_no_rate_limit_by_default(gateway, kernel):
    ch = gateway.connect(kernel)
    _, outputs = ch.execute("for i in range(2000):\n    print(i, flush=True)", timeout=60)
    assert stdout_of(outputs).split() == [str(i) for i in range(2000)]
    ch.close()


def test_message_type_allow_list():
    gw = start_gateway("--allowed-message-types",
                       "kernel_info_request, execute_request")
    try:
        kid = gw.start_kernel()
        ch = gw.connect(kid)
        _, outputs = ch.execute("6 * 7")
        assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] == "42"
        msg_id = ch.send("complete_request", {"code": "pri", "cursor_pos": 3})
        while True:
            m = ch.recv(timeout=10)
            if m["parent_header"].get("msg_id") == msg_id:
                break
        assert m["msg_type"] == "stream"
        assert "complete_request is not allowed" in m["content"]["text"]
        ch.close()
    finally:
        gw.stop()


def test_no_auth_only_on_loopback():
    out = subprocess.run([start_gateway.__globals__["BINARY"], "--no-auth", "--listen",
                          "0.0.0.0:18999", "--check-config"], capture_output=True, text=True)
    assert out.returncode == 2 and "loopback" in out.stderr
    gw = start_gateway("--no-auth", token=None)
    try:
        assert "?token=" not in gw.url_line
        assert "--no-auth" in gw.read_log()
        status, _, _ = gw.request("GET", "/api/kernels", token="")
        assert status == 200
    finally:
        gw.stop()


def test_bad_flags_are_refused():
    binary = start_gateway.__globals__["BINARY"]
    for args in (["--memory-mb", "lots"], ["--listen", "nowhere"], ["--sandbox", "maybe"],
                 ["--certfile", "/x.pem"], ["--token", "short"], ["--no-such-flag"],
                 ["--memory-mb", "9000", "--max-memory-mb", "8192"],
                 ["--max-host-restarts", "-1"], ["--max-host-restarts", "1001"]):
        out = subprocess.run([binary, *args, "--check-config"], capture_output=True, text=True)
        assert out.returncode == 2, args
        assert out.stderr.startswith("glovebox: "), out.stderr
    out = subprocess.run([binary, "--check-config", "--token", "long-enough"],
                         capture_output=True, text=True)
    assert out.returncode == 0
    for bound in ("0", "1000"):
        out = subprocess.run([binary, "--check-config", "--max-host-restarts", bound],
                             capture_output=True, text=True)
        assert out.returncode == 0, (bound, out.stderr)


def test_config_file(tmp_path):
    cfg = tmp_path / "glovebox.json"
    cfg.write_text(json.dumps({"max-kernels": 1, "base-url": "/cfg/"}))
    gw = start_gateway("--config", str(cfg))
    try:
        status, _, _ = gw.request("POST", "/cfg/api/kernels", {})
        assert status == 201
        status, _, _ = gw.request("POST", "/cfg/api/kernels", {})
        assert status == 403
    finally:
        gw.stop()


FLOOD_BAD_SIGNATURES = """
import time
k = get_ipython().kernel
for i in range(5000):
    # Signed with nothing: every one fails the gateway's HMAC check.
    k.iopub_socket.send_multipart([b'flood', b'<IDS|MSG>', b'0' * 64, b'{}', b'{}', b'{}', b'{}'])
    if i % 500 == 499:
        # (Still thousands a second, but never past the PUB socket's own
        # queue of 1,000, which would drop some before the gateway saw them.)
        time.sleep(0.02)
"""


def test_a_kernel_cannot_flood_the_log():
    import re
    gw = start_gateway("--log-rate-limit", "10")
    try:
        kid = gw.start_kernel()
        ch = gw.connect(kid)
        started = time.time()
        reply, _ = ch.execute(FLOOD_BAD_SIGNATURES, timeout=120)
        assert reply["content"]["status"] == "ok"
        # Every one of the 5,000 is either a line or counted in a summary
        # (written within about a second of the flood's end).
        deadline, written, suppressed = time.time() + 10, 0, 0
        while time.time() < deadline:
            log = gw.read_log()
            written = len(re.findall(r"dropped a iopub message: bad signature", log))
            suppressed = sum(int(n) for n in re.findall(
                r"(\d+) more lines like \"dropped a %s message: %s\" suppressed", log))
            if written + suppressed >= 5000:
                break
            time.sleep(0.2)
        took = time.time() - started
        assert written + suppressed == 5000, (written, suppressed)
        # At most 10 a second (plus the window the flood began in).
        assert written <= 10 * (int(took) + 2), (written, took)
        assert suppressed >= 5000 - 10 * (int(took) + 2)
        # The kernel and the relay are fine.
        reply, outputs = ch.execute("print('after')")
        assert stdout_of(outputs) == "after\n"
        ch.close()
    finally:
        gw.stop()


def test_listen_by_name_and_a_busy_port_say_what_happens():
    binary = start_gateway.__globals__["BINARY"]
    # A host name is resolved: "localhost" serves on 127.0.0.1.
    port = free_port()
    gw = start_gateway("--listen", f"localhost:{port}")
    try:
        assert f"http://localhost:{port}/" in gw.url_line
        req = urllib.request.Request(f"http://127.0.0.1:{port}/api/status",
                                     headers={"Authorization": f"token {gw.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        assert "DOESN'T EXIST" not in gw.read_log()
        # The same port again: refused in plain words, non-zero, no serving line.
        out = subprocess.run([binary, "--token", "test-token-0123456789", "--listen",
                              f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)
        assert out.returncode != 0
        assert "serving at" not in out.stdout
        assert f"cannot listen on 127.0.0.1:{port}: address already in use" in out.stderr
        assert "lws" not in out.stderr, out.stderr
    finally:
        gw.stop()
    for listen, says in (("no-such-host.invalid:8888", "cannot listen on no-such-host.invalid"),
                         ("192.0.2.1:8888", "192.0.2.1 is not an address of this machine")):
        out = subprocess.run([binary, "--token", "test-token-0123456789", "--listen", listen],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode != 0 and says in out.stderr, out.stderr
        assert "serving at" not in out.stdout


def test_version_and_number_ranges_read_plainly():
    binary = start_gateway.__globals__["BINARY"]
    out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and re.fullmatch(r"glovebox \d+\.\d+\.\d+\n", out.stdout)
    out = subprocess.run([binary, "--memory-mb", "-5"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr == ("glovebox: --memory-mb must be a whole number from 16 to 16777216, "
                          "not '-5'\n")
