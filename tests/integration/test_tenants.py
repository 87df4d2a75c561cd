"""Tenants: API keys from --keys-file, each kernel, session and E2B sandbox
its creator's, another tenant's ids answered as unknown ones (404), lists
showing the caller's own, admins seeing everything, quotas answered 429,
and the file read again on SIGHUP."""
import hashlib
import json
import os
import secrets
import signal
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
import websocket

from gbclient import BINARY, Channel, start_gateway, stdout_of

TOKEN = "test-token-0123456789"  # the gateway's --token: the admin "admin"


def new_key(name):
    return f"e2b_{secrets.token_hex(20)}"  # E2B's form, for the /e2b routes


def sha256(key):
    return hashlib.sha256(key.encode()).hexdigest()


def write_keys(path, entries):
    """entries: {name: (key, extra fields)}; the file holds hashes only."""
    keys = [dict({"name": name, "sha256": sha256(key)}, **extra)
            for name, (key, extra) in entries.items()]
    tmp = str(path) + ".new"
    with open(tmp, "w") as f:
        json.dump({"keys": keys}, f)
    os.replace(tmp, path)


def as_key(gw, key, method, path, body=None, headers=None):
    return gw.request(method, path, body, token=key, headers=headers)


def start_as(gw, key, **body):
    status, model, _ = as_key(gw, key, "POST", "/api/kernels", body or {"name": "python3"})
    assert status == 201, (status, model)
    return model["id"]


def ids(gw, key):
    status, models, _ = as_key(gw, key, "GET", "/api/kernels")
    assert status == 200, models
    return {m["id"] for m in models}


def run_as(gw, key, kernel_id, code):
    ch = Channel(gw, kernel_id, token=key)
    try:
        reply, outputs = ch.execute(code, timeout=120)
    finally:
        ch.close()
    return reply["content"], stdout_of(outputs)


def ws_status(gw, key, kernel_id):
    """The HTTP status of a refused upgrade, or 101 when it was accepted."""
    try:
        ch = Channel(gw, kernel_id, token=key)
    except websocket.WebSocketBadStatusException as e:
        return e.status_code
    ch.close()
    return 101


@pytest.fixture(scope="module")
def tenants(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    keys = {"alice": new_key("alice"), "bob": new_key("bob"), "carol": new_key("carol"),
            "ops": new_key("ops")}
    write_keys(path, {
        "alice": (keys["alice"], {"max_kernels": 2}),
        "bob": (keys["bob"], {}),
        "carol": (keys["carol"], {"max_memory_mb": 1536, "max_cpu_millicores": 1500}),
        "ops": (keys["ops"], {"admin": True}),
    })
    # One pooled kernel: handed out, it counts for the tenant that takes it.
    gw = start_gateway("--keys-file", str(path), "--pool", "python3=1",
                       "--allow-unenforced-limits")
    gw.keys = keys
    gw.keys_path = path
    yield gw
    gw.stop()


def wait_pool_ready(gw, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        _, st, _ = gw.request("GET", "/api/status")
        if st["pool"]["kernelspecs"]["python3"]["ready"] == 1:
            return st["pool"]["kernelspecs"]["python3"]
        time.sleep(0.2)
    raise AssertionError("the pool never had a ready kernel")


def test_the_file_holds_hashes_only_and_hash_key_makes_them(tenants):
    text = open(tenants.keys_path).read()
    for name, key in tenants.keys.items():
        assert key not in text
        assert sha256(key) in text
        out = subprocess.run([BINARY, "--hash-key"], input=key + "\n", capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout == sha256(key) + "\n"
    # A hash presented as a key is no key.
    assert as_key(tenants, sha256(tenants.keys["bob"]), "GET", "/api/kernels")[0] == 401
    assert as_key(tenants, "not-a-key-at-all", "GET", "/api/kernels")[0] == 401
    # Neither the start-up line nor the log shows a key.
    log = tenants.read_log() + tenants.url_line
    assert not any(key in log for key in tenants.keys.values())


def test_kernels_are_their_owners_on_every_route(tenants):
    gw, k = tenants, tenants.keys
    alice_kernel = start_as(gw, k["alice"])
    bob_kernel = start_as(gw, k["bob"])
    try:
        # Lists: one's own; admins (the token, and an admin key) see all.
        assert alice_kernel in ids(gw, k["alice"]) and bob_kernel not in ids(gw, k["alice"])
        assert bob_kernel in ids(gw, k["bob"]) and alice_kernel not in ids(gw, k["bob"])
        assert {alice_kernel, bob_kernel} <= ids(gw, TOKEN)
        assert {alice_kernel, bob_kernel} <= ids(gw, k["ops"])
        _, st, _ = as_key(gw, k["bob"], "GET", "/api/status")
        assert st["kernels"] == 1

        unknown = str(uuid.uuid4())
        for owner, other, kid in [("alice", "bob", alice_kernel), ("bob", "alice", bob_kernel)]:
            key = k[other]
            for method, route, body in [
                    ("GET", "", None), ("POST", "/interrupt", {}), ("POST", "/restart", {}),
                    ("POST", "/execute", {"code": "print(1)"}), ("GET", "/metrics", None),
                    ("GET", "/files", None), ("GET", "/files/x.txt", None),
                    ("PUT", "/files/x.txt", None), ("DELETE", "/files/x.txt", None),
                    ("DELETE", "", None)]:
                raw = b"stolen" if method == "PUT" else None
                status, reply, _ = gw.request(method, f"/api/kernels/{kid}{route}", body,
                                              token=key, raw=raw)
                assert status == 404, (owner, method, route, status, reply)
                # Exactly what an id that never existed gets.
                ustatus, _, _ = gw.request(method, f"/api/kernels/{unknown}{route}", body,
                                           token=key, raw=raw)
                assert ustatus == 404, (method, route, ustatus)
            # The WebSocket too, in both wire formats' upgrade.
            assert ws_status(gw, key, kid) == 404
            assert ws_status(gw, key, unknown) == 404

        # Nothing was touched: the owners still reach them and run code.
        reply, out = run_as(gw, k["alice"], alice_kernel, "print('alice here')")
        assert reply["status"] == "ok" and out == "alice here\n"
        status, reply, _ = gw.request("PUT", f"/api/kernels/{alice_kernel}/files/a.txt",
                                      token=k["alice"], raw=b"mine")
        assert status in (200, 201, 204), reply
        assert gw.request("GET", f"/api/kernels/{alice_kernel}/files/a.txt",
                          token=k["bob"])[0] == 404
        reply, out = run_as(gw, k["bob"], bob_kernel, "print('bob here')")
        assert reply["status"] == "ok" and out == "bob here\n"
        # An admin reaches anyone's kernel, the WebSocket included.
        assert ws_status(gw, k["ops"], alice_kernel) == 101
        assert as_key(gw, TOKEN, "GET", f"/api/kernels/{bob_kernel}")[0] == 200
    finally:
        for kid in (alice_kernel, bob_kernel):
            gw.request("DELETE", f"/api/kernels/{kid}")
    assert alice_kernel not in ids(gw, TOKEN)


def test_sessions_are_their_owners(tenants):
    gw, k = tenants, tenants.keys
    body = {"path": "shared.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    status, alice_s, _ = as_key(gw, k["alice"], "POST", "/api/sessions", body)
    assert status == 201, alice_s
    try:
        # The same path for another tenant is a session of its own.
        status, bob_s, _ = as_key(gw, k["bob"], "POST", "/api/sessions", body)
        assert status == 201, bob_s
        assert bob_s["id"] != alice_s["id"]
        assert bob_s["kernel"]["id"] != alice_s["kernel"]["id"]
        for method, body_ in [("GET", None), ("PATCH", {"path": "moved.ipynb"}),
                              ("DELETE", None)]:
            assert as_key(gw, k["bob"], method, f"/api/sessions/{alice_s['id']}",
                          body_)[0] == 404
        # Nor can a session be made on another tenant's kernel.
        status, _, _ = as_key(gw, k["bob"], "POST", "/api/sessions",
                              {"path": "x.ipynb", "kernel": {"id": alice_s["kernel"]["id"]}})
        assert status == 404
        status, mine, _ = as_key(gw, k["alice"], "GET", "/api/sessions")
        assert [s["id"] for s in mine] == [alice_s["id"]]
        status, all_, _ = as_key(gw, TOKEN, "GET", "/api/sessions")
        assert {alice_s["id"], bob_s["id"]} <= {s["id"] for s in all_}
        assert as_key(gw, k["bob"], "DELETE", f"/api/sessions/{bob_s['id']}")[0] == 204
    finally:
        as_key(gw, k["alice"], "DELETE", f"/api/sessions/{alice_s['id']}")
    assert alice_s["kernel"]["id"] not in ids(gw, TOKEN)


def e2b(gw, key, method, route, body=None, sandbox=None, port="49983"):
    headers = {"X-API-Key": key} if key else {}
    if sandbox:
        headers.update({"E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": port,
                        "X-Access-Token": sandbox["envdAccessToken"]})
    return gw.request(method, "/e2b/" + route, body, token="", headers=headers)


def e2b_execute(gw, sandbox, code):
    """The code interpreter's /execute: NDJSON, returned as text."""
    req = urllib.request.Request(
        gw.base + "/e2b/execute", data=json.dumps({"code": code}).encode(), method="POST",
        headers={"Content-Type": "application/json", "E2b-Sandbox-Id": sandbox["sandboxID"],
                 "E2b-Sandbox-Port": "49999", "X-Access-Token": sandbox["envdAccessToken"]})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_e2b_sandboxes_are_their_owners(tenants):
    gw, k = tenants, tenants.keys
    status, sbx, _ = e2b(gw, k["alice"], "POST", "v2/sandboxes", {"templateID": "base"})
    assert status == 201, sbx
    sid = sbx["sandboxID"]
    try:
        for method, route, body in [("GET", f"sandboxes/{sid}", None),
                                    ("POST", f"sandboxes/{sid}/timeout", {"timeout": 60}),
                                    ("POST", f"sandboxes/{sid}/connect", {"timeout": 60}),
                                    ("GET", f"sandboxes/{sid}/metrics", None),
                                    ("DELETE", f"sandboxes/{sid}", None)]:
            for version in ("", "v2/"):
                if version and method != "GET":
                    continue
                status, reply, _ = e2b(gw, k["bob"], method, version + route, body)
                assert status == 404, (method, route, status, reply)
        status, listed, _ = e2b(gw, k["bob"], "GET", "v2/sandboxes")
        assert status == 200 and sid not in [s["sandboxID"] for s in listed]
        status, listed, _ = e2b(gw, k["alice"], "GET", "v2/sandboxes")
        assert [s["sandboxID"] for s in listed] == [sid]
        status, listed, _ = e2b(gw, k["ops"], "GET", "v2/sandboxes")
        assert sid in [s["sandboxID"] for s in listed]
        assert e2b(gw, k["alice"], "GET", f"sandboxes/{sid}")[0] == 200

        # The sandbox plane: its access token reaches it (and runs as its
        # owner); a wrong token does not.
        status, text = e2b_execute(gw, sbx, "print(6 * 7)")
        assert status == 200 and '"42\\n"' in text, text
        forged = dict(sbx, envdAccessToken="0" * 64)
        assert e2b(gw, k["bob"], "GET", "health", sandbox=forged)[0] == 401
        # Its context's kernel is alice's on the Jupyter routes too.
        alice_ids = ids(gw, k["alice"])
        assert alice_ids and not (alice_ids & ids(gw, k["bob"]))
    finally:
        assert e2b(gw, k["alice"], "DELETE", f"sandboxes/{sid}")[0] == 204
    assert e2b(gw, k["alice"], "GET", f"sandboxes/{sid}")[0] == 404


def test_quota_on_kernels_counts_pooled_kernels_handed_out(tenants):
    gw, k = tenants, tenants.keys
    wait_pool_ready(gw)
    taken = wait_pool_ready(gw)["taken"]
    first = start_as(gw, k["alice"])
    started = [first]
    try:
        _, st, _ = gw.request("GET", "/api/status")
        assert st["pool"]["kernelspecs"]["python3"]["taken"] == taken + 1
        # The pooled kernel is alice's now: hers alone, and counted.
        assert first in ids(gw, k["alice"]) and first not in ids(gw, k["bob"])
        started.append(start_as(gw, k["alice"], name="python3", env={"X": "1"}))
        status, reply, _ = as_key(gw, k["alice"], "POST", "/api/kernels",
                                  {"name": "python3", "env": {"X": "2"}})
        assert status == 429, reply
        assert reply["reason"] == "quota" and reply["exceeded"] == "kernels"
        assert reply["quota"]["kernels"] == 2 and reply["holding"]["kernels"] == 2
        assert reply["holding"]["memory_mb"] == 2048
        # Through E2B too, in E2B's error shape.
        status, reply, _ = e2b(gw, k["alice"], "POST", "v2/sandboxes", {"templateID": "base"})
        assert status == 429 and reply["code"] == 429 and reply["holding"]["kernels"] == 2
        # Other tenants are not held back by alice's quota.
        started.append(start_as(gw, k["bob"], name="python3", env={"X": "3"}))
        # One gone, one may start again.
        assert as_key(gw, k["alice"], "DELETE", f"/api/kernels/{started.pop(0)}")[0] == 204
        started.append(start_as(gw, k["alice"], name="python3", env={"X": "4"}))
    finally:
        for kid in started:
            gw.request("DELETE", f"/api/kernels/{kid}")


def test_quota_on_memory_and_cpu_at_the_bound(tenants):
    gw, k = tenants, tenants.keys
    carol = k["carol"]
    started = [start_as(gw, carol, name="python3", env={"X": "1"})]  # 1024 MiB, 1000 m
    try:
        status, reply, _ = as_key(gw, carol, "POST", "/api/kernels",
                                  {"name": "python3", "env": {"X": "2"}})
        assert status == 429 and reply["exceeded"] == "memory", reply
        assert reply["quota"] == {"kernels": None, "memory_mb": 1536, "cpu_millicores": 1500}
        assert reply["holding"] == {"kernels": 1, "memory_mb": 1024, "cpu_millicores": 1000}
        assert reply["asked"] == {"memory_mb": 1024, "cpu_millicores": 1000}
        # Exactly at the bound of memory: let through; then CPU is the bound.
        started.append(start_as(gw, carol, name="python3",
                                limits={"memory_mb": 512, "cpus": 0.5}))
        status, reply, _ = as_key(gw, carol, "POST", "/api/kernels",
                                  {"name": "python3", "limits": {"memory_mb": 16, "cpus": 0.5}})
        assert status == 429 and reply["exceeded"] == "memory", reply
        assert as_key(gw, carol, "DELETE", f"/api/kernels/{started.pop()}")[0] == 204
        started.append(start_as(gw, carol, name="python3",
                                limits={"memory_mb": 256, "cpus": 0.5}))
        status, reply, _ = as_key(gw, carol, "POST", "/api/kernels",
                                  {"name": "python3", "limits": {"memory_mb": 16, "cpus": 0.01}})
        assert status == 429 and reply["exceeded"] == "CPU", reply
        assert reply["holding"]["cpu_millicores"] == 1500
    finally:
        for kid in started:
            gw.request("DELETE", f"/api/kernels/{kid}")


def test_quota_counts_a_shared_e2b_sandbox_once(tenants):
    gw, carol = tenants, tenants.keys["carol"]
    status, sbx, _ = e2b(gw, carol, "POST", "v2/sandboxes",
                         {"templateID": "base", "envVars": {"X": "1"}})
    assert status == 201, sbx
    try:
        # A second context shares the sandbox's 1024 MiB: within 1536.
        status, ctx, _ = e2b(gw, None, "POST", "contexts", {"language": "python"},
                             sandbox=sbx, port="49999")
        assert status == 200, ctx
        status, reply, _ = as_key(gw, carol, "POST", "/api/kernels",
                                  {"name": "python3", "env": {"X": "2"}})
        assert status == 429 and reply["exceeded"] == "memory", reply
        assert reply["holding"] == {"kernels": 2, "memory_mb": 1024, "cpu_millicores": 1000}
    finally:
        assert e2b(gw, carol, "DELETE", f"sandboxes/{sbx['sandboxID']}")[0] == 204


def test_metrics_carry_the_tenant(tenants):
    gw, k = tenants, tenants.keys
    kid = start_as(gw, k["bob"], name="python3", env={"X": "m"})
    try:
        reply, _ = run_as(gw, k["bob"], kid, "1 + 1")
        assert reply["status"] == "ok"
        status, _, _ = as_key(gw, k["bob"], "GET", "/metrics")
        assert status == 403  # every tenant's numbers: admins only
        req = urllib.request.Request(gw.base + "/metrics",
                                     headers={"Authorization": f"token {k['ops']}"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
        assert 'glovebox_executions_total{tenant="bob",outcome="ok"}' in text, text[:2000]
        assert 'glovebox_tenant_kernels{tenant="bob"} 1' in text
        assert 'tenant="default"' not in text
        assert as_key(gw, k["bob"], "GET", f"/api/kernels/{kid}/metrics")[0] == 200
        assert as_key(gw, k["alice"], "GET", f"/api/kernels/{kid}/metrics")[0] == 404
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


def test_the_page_works_with_a_tenant_key(tenants):
    gw, key = tenants, tenants.keys["bob"]
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request("GET", f"/?token={key}")
    resp = conn.getresponse()
    assert resp.status == 200 and b"static/app.js" in resp.read()
    conn.close()
    # What app.js does with the key it keeps: the REST calls with it in a
    # header, the channels with it in the URL.
    assert as_key(gw, key, "GET", "/api/kernelspecs")[0] == 200
    kid = start_as(gw, key, name="python3", env={"X": "page"})
    try:
        assert kid in ids(gw, key)
        reply, out = run_as(gw, key, kid, "print('from the page')")
        assert out == "from the page\n"
        assert as_key(gw, key, "POST", f"/api/kernels/{kid}/interrupt", {})[0] in (204, 409)
    finally:
        assert as_key(gw, key, "DELETE", f"/api/kernels/{kid}")[0] == 204


def test_sighup_adds_and_removes_keys_and_keeps_them_on_a_bad_file(tmp_path):
    path = tmp_path / "keys.json"
    keys = {"alice": new_key("alice"), "bob": new_key("bob"), "dan": new_key("dan")}
    write_keys(path, {"alice": (keys["alice"], {}), "bob": (keys["bob"], {})})
    gw = start_gateway("--keys-file", str(path))
    try:
        assert as_key(gw, keys["dan"], "GET", "/api/kernels")[0] == 401
        bob_kernel = start_as(gw, keys["bob"])
        ch = Channel(gw, bob_kernel, token=keys["bob"])
        reply, _ = ch.execute("1", timeout=120)
        assert reply["content"]["status"] == "ok"

        # dan added, bob removed.
        write_keys(path, {"alice": (keys["alice"], {}), "dan": (keys["dan"], {})})
        gw.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: as_key(gw, keys["dan"], "GET", "/api/kernels")[0] == 200)
        assert as_key(gw, keys["bob"], "GET", "/api/kernels")[0] == 401
        assert as_key(gw, keys["bob"], "GET", f"/api/kernels/{bob_kernel}")[0] == 401
        # bob's open connection goes with his key.
        ch.send("execute_request", {"code": "2", "silent": False, "store_history": True,
                                    "user_expressions": {}, "allow_stdin": False})
        assert close_code_of(ch) == 1008
        # bob's kernel stays, for admins only.
        assert bob_kernel in ids(gw, TOKEN)
        assert bob_kernel not in ids(gw, keys["alice"]) | ids(gw, keys["dan"])
        assert as_key(gw, keys["dan"], "GET", f"/api/kernels/{bob_kernel}")[0] == 404

        # A malformed file keeps the keys in force, and says why.
        with open(path, "w") as f:
            f.write('{"keys": [{"name": "eve", "sha256": "' + keys["bob"] + '"}]}')
        gw.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "refused" in gw.read_log())
        assert "never holds the key itself" in gw.read_log()
        assert keys["bob"] not in gw.read_log()
        assert as_key(gw, keys["dan"], "GET", "/api/kernels")[0] == 200
        assert as_key(gw, keys["alice"], "GET", "/api/kernels")[0] == 200
        assert as_key(gw, keys["bob"], "GET", "/api/kernels")[0] == 401
        # The token stays the admin through every reload.
        assert as_key(gw, TOKEN, "GET", f"/api/kernels/{bob_kernel}")[0] == 200
        assert gw.request("DELETE", f"/api/kernels/{bob_kernel}")[0] == 204
    finally:
        assert gw.stop() == 0


def close_code_of(ch, timeout=30):
    """Reads until the server's close frame; returns its code. Raw frames:
    the client's own close reply could meet a socket already closed."""
    ch.ws.settimeout(timeout)
    while True:
        frame = ch.ws.recv_frame()
        if frame.opcode == websocket.ABNF.OPCODE_CLOSE:
            return struct.unpack("!H", frame.data[:2])[0]


def wait_for(check, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError("condition never held")


def test_start_up_refuses_a_bad_keys_file(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text('{"keys": [{"name": "a", "sha256": "abc"}]}')
    out = subprocess.run([BINARY, "--keys-file", str(path), "--check-config"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "sha256" in out.stderr, out.stderr
    # The token's tenant is "admin": a file may not take that name.
    write_keys(path, {"admin": (new_key("x"), {})})
    out = subprocess.run([BINARY, "--keys-file", str(path), "--token", TOKEN,
                          "--check-config"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and '"admin"' in out.stderr, out.stderr
    # With a keys file and no token, no token is made up (nor printed).
    write_keys(path, {"a": (new_key("a"), {})})
    gw = start_gateway("--keys-file", str(path), token=None)
    try:
        assert "token=" not in gw.url_line
    finally:
        gw.stop()


def test_terminals_and_ports_are_their_owners(tenants):
    """Routes that reach into a sandbox (terminals, ports) confine as the
    kernel routes do: another tenant's terminal or port does not exist."""
    gw, k = tenants, tenants.keys
    kernel = start_as(gw, k["bob"])
    try:
        reply, _ = run_as(gw, k["bob"], kernel, "\n".join([
            "import subprocess, sys, time, urllib.request",
            "srv = subprocess.Popen([sys.executable, '-m', 'http.server', '8000',",
            "    '--bind', '127.0.0.1'], cwd='/tmp', stdout=subprocess.DEVNULL,",
            "    stderr=subprocess.DEVNULL)",
            "for _ in range(100):",
            "    try: urllib.request.urlopen('http://127.0.0.1:8000/'); break",
            "    except OSError: time.sleep(0.1)",
        ]))
        assert reply["status"] == "ok", reply
        path = f"/api/kernels/{kernel}/ports/8000/"

        def port_status(key):
            req = urllib.request.Request(gw.base + path,
                                         headers={"Authorization": f"token {key}"})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return resp.status
            except urllib.error.HTTPError as e:
                return e.code
        assert port_status(k["bob"]) == 200
        assert port_status(k["alice"]) == 404
        assert port_status(k["ops"]) == 200

        status, term, _ = as_key(gw, k["bob"], "POST", "/api/terminals", {"kernel_id": kernel})
        assert status == 200, term
        name = term["name"]
        try:
            _, listed, _ = as_key(gw, k["alice"], "GET", "/api/terminals")
            assert name not in {t["name"] for t in listed}
            _, listed, _ = as_key(gw, k["bob"], "GET", "/api/terminals")
            assert name in {t["name"] for t in listed}
            for method in ("GET", "DELETE"):
                status, _, _ = as_key(gw, k["alice"], method, f"/api/terminals/{name}")
                assert status == 404, method
            # Alice cannot start one in Bob's kernel's sandbox either.
            status, _, _ = as_key(gw, k["alice"], "POST", "/api/terminals",
                                  {"kernel_id": kernel})
            assert status == 404
            url = f"ws://127.0.0.1:{gw.port}/terminals/websocket/{name}"
            with pytest.raises(websocket.WebSocketBadStatusException) as info:
                websocket.create_connection(url, header=[f"Authorization: token {k['alice']}"],
                                            timeout=10)
            assert info.value.status_code == 404
            ws = websocket.create_connection(url, header=[f"Authorization: token {k['bob']}"],
                                             timeout=10)
            ws.send(json.dumps(["stdin", "echo $((6*7))\r"]))
            seen, deadline = "", time.time() + 30
            while "42" not in seen and time.time() < deadline:
                msg = json.loads(ws.recv())
                if msg[0] == "stdout":
                    seen += msg[1]
            ws.close()
            assert "42" in seen
        finally:
            as_key(gw, k["bob"], "DELETE", f"/api/terminals/{name}")
    finally:
        as_key(gw, k["bob"], "DELETE", f"/api/kernels/{kernel}")


def mcp_as(gw, key, body, session=None, method="POST"):
    req = urllib.request.Request(gw.base + "/mcp", method=method,
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": f"Bearer {key}",
                                          "Content-Type": "application/json",
                                          "Accept": "application/json, text/event-stream"})
    if session:
        req.add_header("Mcp-Session-Id", session)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            text = resp.read()
            return resp.status, (json.loads(text) if text else None), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, None, e.headers


def test_mcp_sessions_are_their_owners(tenants):
    """Another tenant naming an MCP session's id is told it does not
    exist, and the session (and its sandbox) carries on for its owner."""
    gw, k = tenants, tenants.keys
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}
    status, _, headers = mcp_as(gw, k["bob"], init)
    assert status == 200
    sid = headers["Mcp-Session-Id"]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "run_code", "arguments": {"code": "secret = 42"}}}
    status, reply, _ = mcp_as(gw, k["bob"], call, sid)
    assert status == 200 and not reply["result"].get("isError"), reply
    try:
        peek = dict(call, params={"name": "run_code", "arguments": {"code": "secret"}})
        status, _, _ = mcp_as(gw, k["alice"], peek, sid)
        assert status == 404
        status, _, _ = mcp_as(gw, k["alice"], None, sid, method="DELETE")
        assert status == 404
        status, reply, _ = mcp_as(gw, k["bob"], peek, sid)
        assert status == 200, reply
        assert "42" in json.dumps(reply["result"]["content"])
    finally:
        mcp_as(gw, k["bob"], None, sid, method="DELETE")


def test_another_tenants_starting_kernel_is_unknown_on_ports(tenants):
    """While Bob's kernel starts (known, no sandbox yet), Alice naming it on
    the ports route is told it does not exist, not that it is starting;
    an admin is told it is starting."""
    gw, k = tenants, tenants.keys
    alice, ops = [], []
    # The window before the sandbox is ready is tens of milliseconds; a
    # loaded machine may let every poll miss it, so a few starts are tried
    # until one was seen.
    for _ in range(5):
        started = {}
        # (env: not the pooled kernel, and another disk: not a sandbox made
        # ahead, either of which would be ready at once)
        starter = threading.Thread(target=lambda: started.update(
            id=start_as(gw, k["bob"], name="python3", env={"X": "starting"},
                        limits={"disk_mb": 512})))
        starter.start()
        try:
            while starter.is_alive():
                _, listed, _ = as_key(gw, k["ops"], "GET", "/api/kernels")
                for m in listed:
                    if m["execution_state"] != "starting":
                        continue
                    path = f"/api/kernels/{m['id']}/ports/8000/"
                    ops.append(port_status(gw, k["ops"], path))
                    alice.append(port_status(gw, k["alice"], path))
        finally:
            starter.join()
            if "id" in started:
                as_key(gw, k["bob"], "DELETE", f"/api/kernels/{started['id']}")
        if 503 in ops:
            break
    assert 503 in ops, ops  # the window was seen
    assert set(alice) == {404}, alice


def port_status(gw, key, path):
    req = urllib.request.Request(gw.base + path, headers={"Authorization": f"token {key}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_terminal_names_are_each_tenants_own(tenants):
    """Terminal names are per tenant: Bob may take a name Alice holds (a
    409 there told Bob her terminal existed while its GET answered 404, and
    let him take the names her clients ask for), each sees and reaches only
    their own under that name, and no answer tells Bob that Alice's exists."""
    gw, k = tenants, tenants.keys
    name = "shared-" + secrets.token_hex(4)
    alice_kernel, bob_kernel = start_as(gw, k["alice"]), start_as(gw, k["bob"])
    try:
        # Nothing of that name yet: what Bob is told before Alice has one.
        before = [as_key(gw, k["bob"], method, f"/api/terminals/{name}")[:2]
                  for method in ("GET", "DELETE")]
        status, term, _ = as_key(gw, k["alice"], "POST", "/api/terminals",
                                 {"name": name, "kernel_id": alice_kernel})
        assert status == 200 and term["name"] == name, (status, term)
        try:
            # Alice's own second one of that name is still a 409.
            status, _, _ = as_key(gw, k["alice"], "POST", "/api/terminals",
                                  {"name": name, "kernel_id": alice_kernel})
            assert status == 409
            # Bob is told exactly what he was told before Alice had one.
            after = [as_key(gw, k["bob"], method, f"/api/terminals/{name}")[:2]
                     for method in ("GET", "DELETE")]
            assert after == before, (before, after)
            assert all(status == 404 for status, _ in after)
            status, listed, _ = as_key(gw, k["bob"], "GET", "/api/terminals")
            assert name not in {t["name"] for t in listed}
            # And he may have one of that name himself.
            status, bobs, _ = as_key(gw, k["bob"], "POST", "/api/terminals",
                                     {"name": name, "kernel_id": bob_kernel})
            assert status == 200 and bobs["name"] == name, (status, bobs)
            try:
                for key, kernel in ((k["alice"], alice_kernel), (k["bob"], bob_kernel)):
                    status, model, _ = as_key(gw, key, "GET", f"/api/terminals/{name}")
                    assert status == 200 and model["kernel_id"] == kernel, model
                    _, listed, _ = as_key(gw, key, "GET", "/api/terminals")
                    assert [t.get("kernel_id") for t in listed if t["name"] == name] \
                        == [kernel]
                # Names made up for them are each tenant's too: both get "1".
                made = []
                for key, kernel in ((k["alice"], alice_kernel), (k["bob"], bob_kernel)):
                    status, model, _ = as_key(gw, key, "POST", "/api/terminals",
                                              {"kernel_id": kernel})
                    assert status == 200, model
                    made.append((key, model["name"]))
                try:
                    assert made[0][1] == made[1][1], made
                finally:
                    for key, made_name in made:
                        as_key(gw, key, "DELETE", f"/api/terminals/{made_name}")
                # Each one's WebSocket reaches the shell in its own
                # kernel's sandbox: the file there, upper-cased by the
                # shell (the echoed command line does not hold the answer).
                for who in ("alice", "bob"):
                    kernel = alice_kernel if who == "alice" else bob_kernel
                    reply, _ = run_as(gw, k[who], kernel,
                                      f"open('/tmp/whose.txt', 'w').write('owner-{who}')")
                    assert reply["status"] == "ok", reply
                    ws = websocket.create_connection(
                        f"ws://127.0.0.1:{gw.port}/terminals/websocket/{name}",
                        header=[f"Authorization: token {k[who]}"], timeout=30)
                    try:
                        ws.send(json.dumps(["stdin", "tr a-z A-Z < /tmp/whose.txt\r"]))
                        seen, deadline = "", time.time() + 30
                        while "OWNER-" not in seen and time.time() < deadline:
                            msg = json.loads(ws.recv())
                            if msg[0] == "stdout":
                                seen += msg[1]
                        assert f"OWNER-{who.upper()}" in seen, seen
                    finally:
                        ws.close()
            finally:
                assert as_key(gw, k["bob"], "DELETE", f"/api/terminals/{name}")[0] == 204
            # Bob's delete ended his own: Alice's is still there.
            status, model, _ = as_key(gw, k["alice"], "GET", f"/api/terminals/{name}")
            assert status == 200 and model["kernel_id"] == alice_kernel
        finally:
            as_key(gw, k["alice"], "DELETE", f"/api/terminals/{name}")
    finally:
        as_key(gw, k["alice"], "DELETE", f"/api/kernels/{alice_kernel}")
        as_key(gw, k["bob"], "DELETE", f"/api/kernels/{bob_kernel}")


def test_quota_counts_terminals_in_sandboxes_of_their_own(tenants):
    """A terminal without a kernel starts a sandbox with the default limits
    (1024 MiB, 1000 m): it counts in the key's quota as a kernel does."""
    gw, carol = tenants, tenants.keys["carol"]  # 1536 MiB
    status, term, _ = as_key(gw, carol, "POST", "/api/terminals", {})
    assert status == 200, term
    try:
        status, reply, _ = as_key(gw, carol, "POST", "/api/terminals", {})
        assert status == 429 and reply["exceeded"] == "memory", reply
        assert reply["holding"]["memory_mb"] == 1024, reply
        # Kernels see the terminal's sandbox too.
        status, reply, _ = as_key(gw, carol, "POST", "/api/kernels",
                                  {"name": "python3", "env": {"X": "t"}})
        assert status == 429 and reply["exceeded"] == "memory", reply
        # Another key is not held back.
        status, other, _ = as_key(gw, tenants.keys["bob"], "POST", "/api/terminals", {})
        assert status == 200, other
        as_key(gw, tenants.keys["bob"], "DELETE", f"/api/terminals/{other['name']}")
    finally:
        assert as_key(gw, carol, "DELETE", f"/api/terminals/{term['name']}")[0] == 204
    # Deleted, it holds nothing: the next one starts.
    status, term, _ = as_key(gw, carol, "POST", "/api/terminals", {})
    assert status == 200, term
    as_key(gw, carol, "DELETE", f"/api/terminals/{term['name']}")


def test_removing_a_key_ends_its_connections_at_once(tmp_path):
    """A reload that removes a key ends every connection that key opened,
    idle ones included, without waiting for their next message: kernel
    channels and terminals close with 1008, relayed port connections end,
    and the key's port cookie stops opening the port. Another key's
    connections carry on."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = tmp_path / "keys.json"
    keys = {"alice": new_key("alice"), "bob": new_key("bob")}
    write_keys(path, {name: (key, {}) for name, key in keys.items()})
    gw = start_gateway("--keys-file", str(path))
    try:
        kernel = start_as(gw, keys["bob"])
        with open(os.path.join(here, "ports_servers.py")) as f:
            source = f.read()
        reply, _ = run_as(gw, keys["bob"], kernel, "\n".join([
            "import socket, subprocess, sys, time",
            f"open('/home/user/servers.py', 'w').write({source!r})",
            "open('/home/user/hello.txt', 'w').write('hello')",
            "srv = subprocess.Popen([sys.executable, '/home/user/servers.py'])",
            "for port in (8000, 8765):",
            "    for _ in range(100):",
            "        try: socket.create_connection(('127.0.0.1', port)).close(); break",
            "        except OSError: time.sleep(0.1)",
        ]))
        assert reply["status"] == "ok", reply
        channel = Channel(gw, kernel, token=keys["bob"])
        assert channel.execute("1", timeout=120)[0]["content"]["status"] == "ok"
        status, term, _ = as_key(gw, keys["bob"], "POST", "/api/terminals", {"kernel_id": kernel})
        assert status == 200, term
        terminal = websocket.create_connection(
            f"ws://127.0.0.1:{gw.port}/terminals/websocket/{term['name']}",
            header=[f"Authorization: token {keys['bob']}"], timeout=10)
        relayed = websocket.create_connection(
            f"ws://127.0.0.1:{gw.port}/api/kernels/{kernel}/ports/8765/echo",
            header=[f"Authorization: token {keys['bob']}"], timeout=10)
        assert relayed.recv() == "path:/echo"
        port_path = f"/api/kernels/{kernel}/ports/8000/hello.txt"
        req = urllib.request.Request(f"{gw.base}{port_path}?token={keys['bob']}")
        with urllib.request.urlopen(req, timeout=30) as resp:
            cookie = resp.headers["Set-Cookie"].split(";")[0]
            assert "Max-Age=43200" in resp.headers["Set-Cookie"]

        def with_cookie():
            req = urllib.request.Request(gw.base + port_path, headers={"Cookie": cookie})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    return resp.status
            except urllib.error.HTTPError as e:
                return e.code
        assert with_cookie() == 200
        # The cookie names its key and its expiry under the MAC: neither
        # can be changed.
        name, expires, mac = cookie.split("=", 1)[1].split("~")
        for forged in (f"alice~{expires}~{mac}", f"bob~{int(expires) + 1}~{mac}"):
            req = urllib.request.Request(gw.base + port_path,
                                         headers={"Cookie": f"glovebox-port={forged}"})
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(req, timeout=30)
            assert info.value.code == 401
        # Alice's connection, for the control.
        kept = Channel(gw, start_as(gw, keys["alice"]), token=keys["alice"])
        assert kept.execute("1", timeout=120)[0]["content"]["status"] == "ok"

        write_keys(path, {"alice": (keys["alice"], {})})
        gw.proc.send_signal(signal.SIGHUP)
        # Nothing is sent on them: the gateway ends them itself.
        assert close_code_of(channel) == 1008
        terminal.settimeout(30)
        while True:
            frame = terminal.recv_frame()
            if frame.opcode == websocket.ABNF.OPCODE_CLOSE:
                assert struct.unpack("!H", frame.data[:2])[0] == 1008
                break
        relayed.settimeout(30)
        with pytest.raises((websocket.WebSocketConnectionClosedException, ConnectionError)):
            while True:
                relayed.recv()
        assert with_cookie() == 401
        assert "connections of removed keys closed" in gw.read_log()
        assert kept.execute("2", timeout=120)[0]["content"]["status"] == "ok"
        kept.close()
    finally:
        gw.stop()
