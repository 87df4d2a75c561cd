"""Jupyter Server 1.23.3 as a gateway client of Glovebox.

    glovebox (token) <── jupyter_server --gateway-url (its own token) <── this test

The test is a client of jupyter_server only (its REST API and its
/api/kernels/{id}/channels WebSocket); every kernel it reaches must be a
sandboxed Glovebox kernel. Glovebox here runs WITH a token: jupyter_server
1.23.3's gateway WebSocket proxy (gateway/handlers.py,
GatewayWebSocketClient._connect) builds its upgrade request with
GatewayClient.load_connection_args(), which adds
"Authorization: token <GatewayClient.auth_token>", so --no-auth is not
needed for this client (it is for nbclient's GatewayKernelClient, see
test_nbclient_gateway.py).
"""
import time
from concurrent.futures import ThreadPoolExecutor
import uuid

import websocket

from clientlib import check_png, kernel_ids, ready_channel
from gbclient import outputs_of, stdout_of

PLOT = """\
%matplotlib inline
import matplotlib.pyplot as plt
plt.plot([0, 1, 4, 9, 16], 'o-')
plt.title('glovebox')
plt.show()
"""


def start_kernel(js):
    status, model, headers = js.request("POST", "/api/kernels", {"name": "python3"})
    assert status == 201, (status, model, js.read_log()[-3000:])
    return model


def test_kernelspecs_come_from_glovebox(gateway, jupyter_server):
    status, specs, _ = jupyter_server.request("GET", "/api/kernelspecs")
    assert status == 200, (status, specs)
    _, gb_specs, _ = gateway.request("GET", "/api/kernelspecs")
    assert specs["default"] == gb_specs["default"] == "python3"
    assert set(specs["kernelspecs"]) == set(gb_specs["kernelspecs"])
    assert specs["kernelspecs"]["python3"]["spec"]["argv"] == \
        gb_specs["kernelspecs"]["python3"]["spec"]["argv"]
    # A kernelspec resource, fetched by jupyter_server's GatewayResourceHandler
    # from glovebox's /kernelspecs/{name}/{file}.
    status, logo, headers = jupyter_server.request("GET", "/kernelspecs/python3/logo-64x64.png")
    assert status == 200, (status, logo)
    assert logo[:8] == b"\x89PNG\r\n\x1a\n"


def test_kernel_runs_in_glovebox(gateway, jupyter_server):
    model = start_kernel(jupyter_server)
    kid = model["id"]
    # The same kernel, by id, in glovebox's own list.
    assert kid in kernel_ids(gateway)
    # jupyter_server's GET refreshes its model from glovebox (it parses
    # last_activity with "%Y-%m-%dT%H:%M:%S.%fZ"; a 500 here means it could not).
    status, listed, _ = jupyter_server.request("GET", "/api/kernels")
    assert status == 200, (status, listed, jupyter_server.read_log()[-3000:])
    assert [k["id"] for k in listed] == [kid]
    status, one, _ = jupyter_server.request("GET", f"/api/kernels/{kid}")
    assert status == 200 and one["id"] == kid and one["name"] == "python3", (status, one)

    ch = ready_channel(jupyter_server, kid)
    try:
        reply, out = ch.execute("print('hello from the kernel')")
        assert reply["content"]["status"] == "ok", reply
        assert stdout_of(out) == "hello from the kernel\n"

        reply, out = ch.execute("1+1")
        assert reply["content"]["status"] == "ok"
        [result] = outputs_of(out, "execute_result")
        assert result["content"]["data"]["text/plain"] == "2"
        assert result["content"]["execution_count"] == reply["content"]["execution_count"] == 2

        # The sandbox, seen from inside: seccomp filter mode, no capabilities,
        # uid 1000, glovebox's hostname, an empty network namespace.
        reply, out = ch.execute(
            "import os, socket\n"
            "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())\n"
            "print(st['Seccomp'].strip(), st['CapEff'].strip(), os.getuid(), socket.gethostname(),"
            " sorted(os.listdir('/sys/class/net')) if os.path.exists('/sys/class/net')"
            " else 'nosys')")
        assert reply["content"]["status"] == "ok", reply
        assert stdout_of(out).split() == ["2", "0000000000000000", "1000", "glovebox", "nosys"]

        # While the proxy is connected, glovebox counts its connection.
        assert kernel_ids(gateway)[kid]["connections"] >= 1

        reply, out = ch.execute(PLOT)
        assert reply["content"]["status"] == "ok", reply
        [display] = outputs_of(out, "display_data")
        check_png(display["content"]["data"]["image/png"])
        assert "Figure" in display["content"]["data"]["text/plain"]
    finally:
        ch.close()


def test_sessions_api_starts_glovebox_kernel(gateway, jupyter_server):
    """What JupyterLab and Notebook do: POST /api/sessions. jupyter_server
    then posts {"name", "env": {"KERNEL_WORKING_DIR": <root_dir>, ...}} to
    glovebox (GatewayKernelManager.start_kernel)."""
    (jupyter_server.root / "nb.ipynb").write_text("{}")
    status, sess, _ = jupyter_server.request("POST", "/api/sessions", {
        "path": "nb.ipynb", "type": "notebook", "name": "nb.ipynb",
        "kernel": {"name": "python3"}})
    assert status == 201, (status, sess, jupyter_server.read_log()[-3000:])
    kid = sess["kernel"]["id"]
    assert kid in kernel_ids(gateway)
    ch = ready_channel(jupyter_server, kid)
    try:
        reply, out = ch.execute("import os; print(os.environ.get('KERNEL_WORKING_DIR'))")
        assert reply["content"]["status"] == "ok", reply
        # The request's env reaches the sandboxed kernel (the value names a
        # host path; the kernel cannot see it, but it is what the client sent).
        assert stdout_of(out).strip() == str(jupyter_server.root)
    finally:
        ch.close()
    status, _, _ = jupyter_server.request("DELETE", f"/api/sessions/{sess['id']}")
    assert status == 204
    assert kid not in kernel_ids(gateway)


def test_interrupt_restart_delete_through_jupyter_server(gateway, jupyter_server):
    kid = start_kernel(jupyter_server)["id"]
    ch = ready_channel(jupyter_server, kid)
    try:
        reply, _ = ch.execute("x = 42")
        assert reply["content"]["status"] == "ok"

        msg_id = ch.send("execute_request", {
            "code": "import time\nfor _ in range(600): time.sleep(0.1)", "silent": False,
            "store_history": True, "user_expressions": {}, "allow_stdin": False,
            "stop_on_error": True})
        # Wait for the cell to be running (busy) before interrupting.
        deadline = time.time() + 30
        while True:
            assert time.time() < deadline, "the sleeping cell never started"
            m = ch.recv(max(0.1, deadline - time.time()))
            if (m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "execute_input"):
                break
        t0 = time.time()
        status, body, _ = jupyter_server.request("POST", f"/api/kernels/{kid}/interrupt")
        assert status == 204, (status, body)
        reply, out = ch.collect(msg_id, timeout=20)
        assert time.time() - t0 < 10
        assert reply["content"]["status"] == "error"
        assert reply["content"]["ename"] == "KeyboardInterrupt"

        status, body, _ = jupyter_server.request("POST", f"/api/kernels/{kid}/restart")
        assert status == 200, (status, body, jupyter_server.read_log()[-3000:])
        assert body["id"] == kid
    finally:
        ch.close()

    # After the restart, a fresh interpreter: x is gone; the same id, still in glovebox.
    assert kid in kernel_ids(gateway)
    ch = ready_channel(jupyter_server, kid)
    try:
        reply, out = ch.execute("print('x' in globals())", timeout=60)
        assert reply["content"]["status"] == "ok", reply
        assert stdout_of(out) == "False\n"
    finally:
        ch.close()

    status, _, _ = jupyter_server.request("DELETE", f"/api/kernels/{kid}")
    assert status == 204
    assert kid not in kernel_ids(gateway)


def test_proxy_authenticates_to_glovebox(gateway, jupyter_server):
    """The working channel above is not thanks to lax auth: glovebox refuses
    a channel upgrade without its token, and jupyter_server's proxy got in
    because it sends one."""
    kid = start_kernel(jupyter_server)["id"]
    url = f"ws://127.0.0.1:{gateway.port}/api/kernels/{kid}/channels?session_id={uuid.uuid4().hex}"
    try:
        ws = websocket.create_connection(url, timeout=10)
    except websocket.WebSocketBadStatusException as e:
        assert e.status_code in (401, 403), e
    else:
        ws.close()
        raise AssertionError("glovebox accepted a channel upgrade without a token")
    ch = ready_channel(jupyter_server, kid)
    try:
        reply, out = ch.execute("print(6 * 7)")
        assert stdout_of(out) == "42\n"
    finally:
        ch.close()


def test_stdin_complete_inspect_control_through_jupyter_server(gateway, jupyter_server):
    """The other channels a notebook frontend uses, through the proxy: an
    input() answered on stdin, completion and inspection on shell,
    kernel_info on control."""
    kid = start_kernel(jupyter_server)["id"]
    ch = ready_channel(jupyter_server, kid)
    try:
        prompts = []
        reply, out = ch.execute("name = input('who? ')\nprint('hello', name)",
                                stdin_reply=lambda p: prompts.append(p) or "glovebox")
        assert reply["content"]["status"] == "ok", reply
        assert prompts == ["who? "]
        assert stdout_of(out) == "hello glovebox\n"

        msg_id = ch.send("complete_request", {"code": "impo", "cursor_pos": 4})
        reply, _ = ch.collect(msg_id)
        assert reply["msg_type"] == "complete_reply" and "import" in reply["content"]["matches"]

        msg_id = ch.send("inspect_request", {"code": "name", "cursor_pos": 4, "detail_level": 0})
        reply, _ = ch.collect(msg_id)
        assert reply["content"]["found"] is True
        assert "glovebox" in reply["content"]["data"]["text/plain"]

        msg_id = ch.send("kernel_info_request", {}, channel="control")
        deadline = time.time() + 30
        while True:
            m = ch.recv(max(0.1, deadline - time.time()))
            if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] == "kernel_info_reply":
                break
        assert m["channel"] == "control"
        assert m["content"]["language_info"]["name"] == "python"
    finally:
        ch.close()


def test_restart_keeps_open_channel_working(gateway, jupyter_server):
    """A client that stays connected across a restart (REST, through
    jupyter_server) goes on executing on the same WebSocket, in a fresh
    interpreter."""
    kid = start_kernel(jupyter_server)["id"]
    ch = ready_channel(jupyter_server, kid)
    try:
        reply, _ = ch.execute("x = 1")
        assert reply["content"]["status"] == "ok"
        status, body, _ = jupyter_server.request("POST", f"/api/kernels/{kid}/restart")
        assert status == 200, (status, body)
        reply, out = ch.execute("print('x' in globals())", timeout=30)
        assert reply["content"]["status"] == "ok", reply
        assert stdout_of(out) == "False\n"
        assert reply["content"]["execution_count"] == 1
    finally:
        ch.close()


def test_kernel_death_reported_through_jupyter_server(gateway, jupyter_server):
    """A kernel that dies mid-cell: the cell ends with an error reply (not a
    hang), the client sees the kernel go dead and come back, and carries on."""
    kid = start_kernel(jupyter_server)["id"]
    ch = ready_channel(jupyter_server, kid)
    try:
        reply, _ = ch.execute("x = 1")
        msg_id = ch.send("execute_request", {
            "code": "import os, time; time.sleep(0.2); os._exit(3)", "silent": False,
            "store_history": True, "user_expressions": {}, "allow_stdin": False,
            "stop_on_error": True})
        states, reply, error = [], None, None
        deadline = time.time() + 60
        # Until the kernel is back: an idle status after 'restarting'.
        while not (reply and "restarting" in states and states[-1] == "idle"):
            m = ch.recv(max(0.1, deadline - time.time()))
            assert time.time() < deadline, (states, reply)
            if m["msg_type"] == "status":
                states.append(m["content"]["execution_state"])
            elif m["parent_header"].get("msg_id") == msg_id:
                if m["channel"] == "shell":
                    reply = m
                elif m["msg_type"] == "error":
                    error = m
        assert reply["content"]["status"] == "error", reply
        assert reply["content"]["ename"] == "KernelDied", reply
        assert error and error["content"]["ename"] == "KernelDied"
        assert "dead" in states and states.index("dead") < states.index("restarting"), states

        reply, out = ch.execute("print('x' in globals())", timeout=30)
        assert stdout_of(out) == "False\n"
    finally:
        ch.close()
    _, model, _ = jupyter_server.request("GET", f"/api/kernels/{kid}")
    assert model["execution_state"] == "idle", model


def test_large_output_through_jupyter_server(gateway, jupyter_server):
    """A 4 MB stdout message and a 1 MB PNG through glovebox and the
    proxy (tornado's client accepts up to 10 MiB per message)."""
    kid = start_kernel(jupyter_server)["id"]
    ch = ready_channel(jupyter_server, kid)
    try:
        reply, out = ch.execute("import sys; sys.stdout.write('x' * 4_000_000 + 'END')",
                                timeout=60)
        assert reply["content"]["status"] == "ok", reply
        text = stdout_of(out)
        assert len(text) == 4_000_003 and text.endswith("END")
        reply, out = ch.execute(
            "%matplotlib inline\nimport matplotlib.pyplot as plt, numpy as np\n"
            "fig = plt.figure(figsize=(12, 12), dpi=100)\n"
            "plt.imshow(np.random.default_rng(0).random((600, 600, 3)))\nplt.show()",
            timeout=60)
        assert reply["content"]["status"] == "ok", reply
        [display] = outputs_of(out, "display_data")
        assert len(display["content"]["data"]["image/png"]) > 1_000_000
        check_png(display["content"]["data"]["image/png"])
    finally:
        ch.close()


def test_concurrent_kernel_starts_through_jupyter_server(gateway, jupyter_server):
    """Four notebooks opened at once: four POSTs pending on glovebox
    together, four kernels, each its own sandbox."""
    with ThreadPoolExecutor(4) as pool:
        models = list(pool.map(lambda _: start_kernel(jupyter_server), range(4)))
    ids = {m["id"] for m in models}
    assert len(ids) == 4 and ids <= set(kernel_ids(gateway))
    # Each sees only its own /tmp: a mark written by one is not in another.
    for i, kid in enumerate(sorted(ids)):
        ch = ready_channel(jupyter_server, kid)
        try:
            reply, out = ch.execute(
                f"import glob; open('/tmp/mark-{i}', 'w').close()\n"
                "print(sorted(glob.glob('/tmp/mark-*')))")
            assert reply["content"]["status"] == "ok", reply
            assert stdout_of(out) == f"['/tmp/mark-{i}']\n"
        finally:
            ch.close()


def test_bearer_scheme_and_base_url(tmp_path):
    """jupyter_server with --GatewayClient.auth_scheme=Bearer, against a
    glovebox served under --base-url /gb/ (gateway URL http://host:port/gb)."""
    from clientlib import GB_TOKEN, JupyterProcess
    from gbclient import start_gateway

    gw = start_gateway("--base-url", "/gb/", token=GB_TOKEN)
    js = None
    try:
        gw.base += "/gb"
        js = JupyterProcess("jupyter_server", gw, tmp_path,
                            extra=["--GatewayClient.auth_scheme=Bearer"])
        status, specs, _ = js.request("GET", "/api/kernelspecs")
        assert status == 200 and "python3" in specs["kernelspecs"], (status, specs)
        status, logo, _ = js.request("GET", "/kernelspecs/python3/logo-64x64.png")
        assert status == 200 and logo[:4] == b"\x89PNG", (status, logo[:100])
        kid = start_kernel(js)["id"]
        assert kid in kernel_ids(gw)
        ch = ready_channel(js, kid)
        try:
            reply, out = ch.execute("print('under /gb/')")
            assert stdout_of(out) == "under /gb/\n"
        finally:
            ch.close()
    finally:
        if js:
            js.stop()
        gw.stop()
