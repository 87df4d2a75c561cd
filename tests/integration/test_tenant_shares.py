"""What one tenant may take of what the gateway shares between tenants: the
kernel-host's slots for connections into sandboxes (ports), and the
gateway's directory watchers; and the idle timeout of upgraded port
relays. Two tenants from a keys file, each with its own sandboxes."""
import hashlib
import json
import os
import socket
import threading
import time

import pytest
import websocket

from gbclient import envd_rpc, run_cell, start_gateway

HERE = os.path.dirname(os.path.abspath(__file__))
IDLE_S = 2
SHARE = 16  # --port-max-connecting-per-tenant's default


def new_key():
    return "e2b_" + os.urandom(20).hex()  # E2B's form, for the /e2b routes


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    keys = {"alice": new_key(), "bob": new_key()}
    with open(path, "w") as f:
        json.dump({"keys": [{"name": n, "sha256": hashlib.sha256(k.encode()).hexdigest()}
                            for n, k in keys.items()]}, f)
    g = start_gateway("--keys-file", str(path), "--port-idle-timeout", str(IDLE_S),
                      "--watch-max-watchers", "4", "--watch-max-watchers-per-sandbox", "2",
                      "--watch-max-watchers-per-tenant", "3")
    g.keys = keys
    yield g
    g.stop()


def start_as(gw, key):
    status, model, _ = gw.request("POST", "/api/kernels", {"name": "python3"}, token=key)
    assert status == 201, (status, model)
    return model["id"]


def get(gw, path, key):
    """One request on a fresh connection: its status (relayed answers end
    with the connection)."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n"
                  f"Authorization: token {key}\r\n\r\n".encode())
        data = b""
        while b"\r\n" not in data:
            d = s.recv(4096)
            if not d:
                break
            data += d
    return int(data.split(b" ")[1])


JAM = ("import socket\n"
       "jam = socket.socket(); jam.bind(('127.0.0.1', 8500)); jam.listen(0)\n"
       "fill = [socket.socket() for _ in range(4)]\n"
       "for s in fill:\n"
       "    s.setblocking(False)\n"
       "    try:\n"
       "        s.connect(('127.0.0.1', 8500))\n"
       "    except BlockingIOError:\n"
       "        pass\n")

SERVE = ("import subprocess, sys, socket, time\n"
         "open('/home/user/hello.txt', 'w').write('hello')\n"
         "srv = subprocess.Popen([sys.executable, '-m', 'http.server', '8000', '--bind', "
         "'127.0.0.1', '--directory', '/home/user'])\n"
         "for _ in range(100):\n"
         "    try:\n"
         "        socket.create_connection(('127.0.0.1', 8000)).close()\n"
         "        break\n"
         "    except OSError:\n"
         "        time.sleep(0.1)\n")


def test_one_tenants_ports_that_never_accept_starve_no_other_tenant(gw):
    """Nine sandboxes of one tenant, each with a port whose backlog is
    full, asked 12 times at once each: 8 per sandbox would take all 64 of
    the kernel-host's connecting slots (before, another tenant's port then
    answered 503); the tenant's share stops at 16, and another tenant's
    port answers at once."""
    alice, bob = gw.keys["alice"], gw.keys["bob"]
    kernels = []
    try:
        for _ in range(9):
            kernels.append(start_as(gw, alice))
            content, _, _ = run_cell(gw, kernels[-1], JAM)
            assert content["status"] == "ok", content
        kernels.append(start_as(gw, bob))
        bobs = kernels[-1]
        content, _, _ = run_cell(gw, bobs, SERVE)
        assert content["status"] == "ok", content
        assert get(gw, f"/api/kernels/{bobs}/ports/8000/hello.txt", bob) == 200
        answers = []

        def hammer(kid):
            try:
                answers.append(get(gw, f"/api/kernels/{kid}/ports/8500/", alice))
            except OSError as e:
                answers.append(type(e).__name__)

        threads = [threading.Thread(target=hammer, args=(kid,))
                   for kid in kernels[:9] for _ in range(12)]
        for t in threads:
            t.start()
        time.sleep(1.5)  # the slots taken, the connects waiting out their 5 s
        started = time.time()
        status = get(gw, f"/api/kernels/{bobs}/ports/8000/hello.txt", bob)
        took = time.time() - started
        for t in threads:
            t.join(30)
        assert status == 200 and took < 3, (status, took)
        # Alice's share waited (504), the rest were told at once (503).
        assert set(answers) <= {503, 504}, answers
        assert answers.count(504) <= SHARE, answers
    finally:
        for kid in kernels:
            gw.request("DELETE", f"/api/kernels/{kid}")


def test_an_idle_upgraded_relay_is_closed_after_the_timeout(gw):
    """A relayed WebSocket that moves bytes stays open past the timeout;
    once nothing moves either way for --port-idle-timeout, it is closed."""
    bob = gw.keys["bob"]
    kid = start_as(gw, bob)
    try:
        with open(os.path.join(HERE, "ports_servers.py")) as f:
            source = f.read()
        content, _, _ = run_cell(gw, kid, (
            "import subprocess, sys, socket, time\n"
            f"open('/home/user/servers.py', 'w').write({source!r})\n"
            "servers = subprocess.Popen([sys.executable, '/home/user/servers.py'])\n"
            "for _ in range(100):\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', 8765)).close()\n"
            "        break\n"
            "    except OSError:\n"
            "        time.sleep(0.1)\n"))
        assert content["status"] == "ok", content
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{gw.port}/api/kernels/{kid}/ports/8765/echo?token={bob}",
            timeout=30)
        try:
            assert ws.recv() == "path:/echo"
            # Busy for twice the timeout: a message every half of it.
            for i in range(4):
                time.sleep(IDLE_S / 2)
                ws.send(f"ping {i}")
                assert ws.recv() == f"ping {i}"
            started = time.time()
            with pytest.raises((websocket.WebSocketConnectionClosedException,
                                ConnectionError)):
                ws.recv()
            took = time.time() - started
            assert IDLE_S - 0.5 < took < IDLE_S + 3, took
        finally:
            ws.close()
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


def e2b_create_as(gw, key):
    status, sb, _ = gw.request("POST", "/e2b/v2/sandboxes", {"timeout": 300}, token="",
                               headers={"X-API-KEY": key})
    assert status == 201, sb
    return sb


def watch(gw, sb):
    return envd_rpc(gw, sb, "filesystem.Filesystem/CreateWatcher",
                    {"path": "/home/user", "recursive": False})


def test_one_tenant_cannot_take_every_watcher_of_the_gateway(gw):
    """4 watchers in the gateway, 2 per sandbox, 3 per tenant: a tenant
    with two sandboxes gets 3, and another tenant still gets one."""
    alice, bob = gw.keys["alice"], gw.keys["bob"]
    boxes = []
    try:
        for key in (alice, alice, bob):
            boxes.append((key, e2b_create_as(gw, key)))
        a1, a2, b1 = (sb for _, sb in boxes)
        assert [watch(gw, a1)[0], watch(gw, a1)[0], watch(gw, a2)[0]] == [200, 200, 200]
        status, reply = watch(gw, a2)
        assert status != 200 and "tenant" in json.dumps(reply), (status, reply)
        status, reply = watch(gw, b1)
        assert status == 200, (status, reply)
    finally:
        for key, sb in boxes:
            gw.request("DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", token="",
                       headers={"X-API-KEY": key})
