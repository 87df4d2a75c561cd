"""The HTTP routes agents and curl use without a WebSocket: cell runs as
NDJSON, the files of a kernel's sandbox, and the same over E2B's routes,
with the escapes that must not work."""
import hashlib
import http.client
import json
import os
import time
import urllib.parse

import pytest


def stream(gateway, path, body, headers=None):
    """POSTs body and yields each NDJSON line as it arrives, with its time."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=120)
    hdrs = {"Authorization": f"token {gateway.token}", "Content-Type": "application/json"}
    hdrs.update(headers or {})
    conn.request("POST", path, json.dumps(body), hdrs)
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    assert resp.getheader("Content-Type") == "application/x-ndjson"
    for raw in resp:
        line = raw.decode().strip()
        assert line, "no blank lines"
        yield json.loads(line), time.time()
    conn.close()


def run(gateway, kid, code, timeout=None):
    body = {"code": code}
    if timeout is not None:
        body["timeout"] = timeout
    return [line for line, _ in stream(gateway, f"/api/kernels/{kid}/execute", body)]


def test_execute_streams_ndjson(gateway, kernel):
    lines = list(stream(gateway, f"/api/kernels/{kernel}/execute", {
        "code": "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.5)\n"
                "6 * 7"}))
    kinds = [line["type"] for line, _ in lines]
    assert kinds == ["number_of_executions", "stdout", "stdout", "stdout", "result",
                     "end_of_execution"], kinds
    stdout = [(line["text"], when) for line, when in lines if line["type"] == "stdout"]
    assert [t for t, _ in stdout] == ["0\n", "1\n", "2\n"]
    assert stdout[2][1] - stdout[0][1] > 0.7, "lines arrive while the cell runs"
    result = lines[4][0]
    assert result["text"] == "42" and result["is_main_result"] is True


def test_execute_rich_results_and_errors(gateway, kernel):
    lines = run(gateway, kernel, "import pandas as pd\n"
                                 "from IPython.display import display, HTML\n"
                                 "display(HTML('<b>bold</b>'))\n"
                                 "pd.DataFrame({'a': [1]})")
    results = [line for line in lines if line["type"] == "result"]
    assert results[0]["html"] == "<b>bold</b>" and results[0]["is_main_result"] is False
    assert "<table" in results[1]["html"] and results[1]["is_main_result"] is True
    lines = run(gateway, kernel, "1/0")
    error = [line for line in lines if line["type"] == "error"][0]
    assert error["name"] == "ZeroDivisionError" and "division by zero" in error["value"]
    assert "Traceback" in error["traceback"] or "ZeroDivisionError" in error["traceback"]
    assert lines[-1]["type"] == "end_of_execution"


def test_execute_timeout_keeps_partial_output(gateway, kernel):
    start = time.time()
    lines = run(gateway, kernel, "import time\nprint('before', flush=True)\ntime.sleep(30)",
                timeout=1.5)
    assert time.time() - start < 10
    assert [line["text"] for line in lines if line["type"] == "stdout"] == ["before\n"]
    errors = [line for line in lines if line["type"] == "error"]
    assert errors[-1]["name"] == "TimeoutError"
    # The kernel was interrupted and goes on with its state.
    lines = run(gateway, kernel, "print('after')")
    assert [line["text"] for line in lines if line["type"] == "stdout"] == ["after\n"]


def test_a_run_that_times_out_queued_interrupts_its_own_cell_not_the_one_before(gateway):
    """A notebook's cell runs 4 s with another queued behind it
    (stop_on_error, as notebooks send); an /execute with a 1 s timeout
    waits behind them. Its timeout interrupts its own cell once that one
    starts, never the notebook's: before, the interrupt hit the notebook's
    running cell (KeyboardInterrupt) and ipykernel then answered its queued
    cell "aborted", the status Jupyter Server's client once saw."""
    import threading
    kid = gateway.start_kernel()
    ch = gateway.connect(kid)
    try:
        ch.execute("pass")
        cells = []
        for code in ("import time; time.sleep(4); print('first done')", "print('second')"):
            cells.append(ch.send("execute_request", {
                "code": code, "silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True}))
        time.sleep(0.5)  # the first cell running, the second queued
        lines = []
        runner = threading.Thread(target=lambda: lines.extend(
            run(gateway, kid, "import time; time.sleep(30)", timeout=1)))
        runner.start()
        for msg_id, out in zip(cells, ("first done\n", "second\n")):
            reply, outputs = ch.collect(msg_id, timeout=60)
            assert reply["content"]["status"] == "ok", reply["content"]
            assert "".join(m["content"]["text"] for m in outputs
                           if m["msg_type"] == "stream") == out
        runner.join(60)
        errors = [line for line in lines if line["type"] == "error"]
        assert errors and errors[-1]["name"] == "TimeoutError", lines
        # The run's own cell was interrupted: the kernel is free, not
        # sleeping out its 30 s (nor restarted: its state is there).
        started = time.time()
        reply, outputs = ch.execute("print(time.time() > 0)", timeout=20)
        assert reply["content"]["status"] == "ok" and time.time() - started < 10, reply
    finally:
        ch.close()
        gateway.request("DELETE", f"/api/kernels/{kid}")


def test_execute_bad_requests(gateway, kernel):
    for body in (b"{", b'{"code": 5}', b'{"code": "1", "timeout": -1}'):
        status, err, _ = gateway.request("POST", f"/api/kernels/{kernel}/execute", raw=body)
        assert status == 400, body
    status, _, _ = gateway.request("POST", "/api/kernels/00000000-0000-4000-8000-000000000000"
                                           "/execute", {"code": "1"})
    assert status == 404


def test_a_kernel_deleted_mid_cell_ends_the_stream_with_execution_aborted(gateway):
    """Glovebox's own /execute says what happened, in-band, and ends its
    body whole (E2B's /execute is cut short instead, as E2B's is when the
    sandbox goes: tests/e2b)."""
    import threading
    kid = gateway.start_kernel()
    got = []

    def follow():
        try:
            for line, _ in stream(gateway, f"/api/kernels/{kid}/execute",
                                  {"code": "import time\nprint('go', flush=True)\n"
                                           "time.sleep(60)"}):
                got.append(line)
        except Exception as e:  # http.client.IncompleteRead: a body cut short
            got.append({"type": "broken", "error": repr(e)})

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    deadline = time.time() + 60
    while not any(line.get("type") == "stdout" for line in got) and time.time() < deadline:
        time.sleep(0.1)
    status, _, _ = gateway.request("DELETE", f"/api/kernels/{kid}")
    assert status == 204
    t.join(30)
    assert not t.is_alive(), "the stream ended"
    kinds = [line["type"] for line in got]
    assert kinds[-2:] == ["error", "end_of_execution"], got
    assert got[-2]["name"] == "ExecutionAborted", got


def test_abandoned_call_interrupts_the_cell(gateway, kernel):
    import socket
    body = json.dumps({"code": "import time\nprint('go', flush=True)\ntime.sleep(60)"})
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    sock.sendall((f"POST /api/kernels/{kernel}/execute HTTP/1.1\r\n"
                  f"Host: 127.0.0.1:{gateway.port}\r\n"
                  f"Authorization: token {gateway.token}\r\nContent-Length: {len(body)}\r\n\r\n"
                  + body).encode())
    seen = b""
    while b"stdout" not in seen:
        piece = sock.recv(4096)
        assert piece, seen  # closed before the cell printed
        seen += piece
    sock.close()  # the client goes away mid-cell
    start = time.time()
    lines = run(gateway, kernel, "print('free')")
    assert [line["text"] for line in lines if line["type"] == "stdout"] == ["free\n"]
    assert time.time() - start < 10, "the abandoned cell was interrupted"


def file_url(kid, path="", query=None):
    url = f"/api/kernels/{kid}/files" + (f"/{path}" if path else "")
    return url + ("?" + urllib.parse.urlencode(query) if query else "")


def test_files_round_trip_and_listing(gateway, kernel):
    status, body, _ = gateway.request("PUT", file_url(kernel, "notes/a.txt"), raw=b"hello")
    assert status == 201 and body["files"][0]["path"] == "/home/user/notes/a.txt"
    lines = run(gateway, kernel, "print(open('/home/user/notes/a.txt').read())\n"
                                 "import os; print(os.stat('/home/user/notes/a.txt').st_uid)\n"
                                 "open('/tmp/from-code.txt', 'w').write('made by code')")
    assert [line["text"] for line in lines if line["type"] == "stdout"] == ["hello\n1000\n"]
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port)
    conn.request("GET", file_url(kernel, query={"path": "/tmp/from-code.txt"}),
                 headers={"Authorization": f"token {gateway.token}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.read() == b"made by code"
    status, listing, _ = gateway.request("GET", file_url(kernel, "notes"))
    assert status == 200
    assert [(e["name"], e["type"], e["size"]) for e in listing["entries"]] == [("a.txt", "file", 5)]
    status, listing, _ = gateway.request("GET", file_url(kernel))
    assert ("notes", "dir") in [(e["name"], e["type"]) for e in listing["entries"]]
    status, _, _ = gateway.request("DELETE", file_url(kernel, "notes"))
    assert status == 204
    status, _, _ = gateway.request("GET", file_url(kernel, "notes/a.txt"))
    assert status == 404


def test_file_of_100_mib_both_ways(gateway, kernel):
    data = os.urandom(100 * 1024 * 1024)
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=120)
    conn.request("PUT", file_url(kernel, "big.bin"), body=data,
                 headers={"Authorization": f"token {gateway.token}"})
    assert conn.getresponse().status == 201
    lines = run(gateway, kernel, "import hashlib\n"
                "print(hashlib.sha256(open('/home/user/big.bin','rb').read()).hexdigest())")
    digest = hashlib.sha256(data).hexdigest()
    assert [line["text"] for line in lines if line["type"] == "stdout"] == [digest + "\n"]
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=120)
    conn.request("GET", file_url(kernel, "big.bin"),
                 headers={"Authorization": f"token {gateway.token}"})
    resp = conn.getresponse()
    assert int(resp.getheader("Content-Length")) == len(data)
    assert hashlib.sha256(resp.read()).hexdigest() == digest
    gateway.request("DELETE", file_url(kernel, "big.bin"))


def test_no_escape_through_files(gateway, kernel):
    run(gateway, kernel, "import os\n"
                         "os.symlink('/etc/shadow', '/home/user/shadow')\n"
                         "os.symlink('/', '/home/user/root')\n"
                         "os.symlink('/proc/1/root', '/home/user/proc-root')")
    with open("/etc/hostname") as f:
        host_name = f.read()
    # A planted link to a host path resolves inside the sandbox.
    status, _, _ = gateway.request("GET", file_url(kernel, "shadow"))
    assert status == 404
    # "/" through a link is the sandbox's root: its hostname is its own.
    for path in ("root/etc/hostname", "../../etc/hostname"):
        conn = http.client.HTTPConnection("127.0.0.1", gateway.port)
        conn.request("GET", file_url(kernel, query={"path": path}),
                     headers={"Authorization": f"token {gateway.token}"})
        resp = conn.getresponse()
        body = resp.read()
        assert resp.status == 200 and body == b"glovebox\n" and body.decode() != host_name, path
    # /proc magic links are refused outright: 403 where following one needs
    # a right over its process (init's root) that the files' user lacks,
    # 400 (ELOOP) for any that would open.
    status, _, _ = gateway.request("GET", file_url(kernel, query={"path": "/home/user/proc-root/etc/hostname"}))
    assert status in (400, 403)
    # Writes go no further: read-only system paths and links into them.
    run(gateway, kernel, "os.symlink('/usr/lib', '/home/user/lib')")
    for target in ("/usr/evil", "/home/user/lib/evil", "/etc/passwd"):
        status, _, _ = gateway.request("PUT", file_url(kernel, query={"path": target}), raw=b"x")
        assert status == 403, target
    assert not os.path.exists("/usr/evil") and not os.path.exists("/usr/lib/evil")


def e2b(gateway, method, path, sandbox, port, body=None, raw=None, token=None):
    headers = {"E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": port,
               "X-Access-Token": token or sandbox["envdAccessToken"]}
    if body is not None:
        headers["Content-Type"] = "application/json"
    return gateway.request(method, "/e2b" + path, body, raw=raw, token="", headers=headers)


@pytest.fixture
def e2b_sandbox(gateway):
    status, sb, _ = gateway.request("POST", "/e2b/v2/sandboxes", {"timeout": 120}, token="",
                                    headers={"X-API-KEY": gateway.token})
    assert status == 201, sb
    yield sb
    gateway.request("DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", token="",
                    headers={"X-API-KEY": gateway.token})


def test_e2b_with_curl(gateway, e2b_sandbox):
    sb = e2b_sandbox
    lines = list(stream(gateway, "/e2b/execute", {"code": "print('hi')\n1 + 1"}, headers={
        "E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49999",
        "X-Access-Token": sb["envdAccessToken"], "Authorization": ""}))
    assert [line["type"] for line, _ in lines] == ["number_of_executions", "stdout", "result",
                                                   "end_of_execution"]
    # Access needs the sandbox's own token; the API key is for the control plane.
    status, _, _ = e2b(gateway, "GET", "/health", sb, "49983", token="nope")
    assert status == 401
    status, _, _ = gateway.request("POST", "/e2b/v2/sandboxes", {}, token="",
                                   headers={"X-API-KEY": "wrong"})
    assert status == 401
    status, err, _ = gateway.request("POST", "/e2b/v2/sandboxes", {"templateID": "nope"},
                                     token="", headers={"X-API-KEY": gateway.token})
    assert status == 404 and err["code"] == 404
    # onTimeout 'pause' is served (tests/e2b/test_pause_sdk.py), and resuming on
    # traffic with it (tests/e2b/test_auto_resume_sdk.py); without it, 400.
    status, err, _ = gateway.request("POST", "/e2b/v2/sandboxes",
                                     {"autoPause": False, "autoResume": {"enabled": True}},
                                     token="", headers={"X-API-KEY": gateway.token})
    assert status == 400 and "autoResume.enabled needs autoPause" in err["message"]
    # Internet access is granted within the network policy, which is none.
    status, made, _ = gateway.request("POST", "/e2b/v2/sandboxes",
                                      {"allow_internet_access": True}, token="",
                                      headers={"X-API-KEY": gateway.token})
    assert status == 201, made
    status, info, _ = gateway.request("GET", f"/e2b/sandboxes/{made['sandboxID']}", token="",
                                      headers={"X-API-KEY": gateway.token})
    assert status == 200 and info["allowInternetAccess"] is False
    gateway.request("DELETE", f"/e2b/sandboxes/{made['sandboxID']}", token="",
                    headers={"X-API-KEY": gateway.token})
    status, err, _ = gateway.request("POST", "/e2b/v2/sandboxes",
                                     {"network": {"allowOut": ["1.1.1.1"]}}, token="",
                                     headers={"X-API-KEY": gateway.token})
    assert status == 400 and "network.allowOut" in err["message"]


def test_e2b_files_no_escape(gateway, e2b_sandbox):
    sb = e2b_sandbox
    list(stream(gateway, "/e2b/execute", {"code": "import os; os.symlink('/etc/shadow', "
                                                   "'/home/user/x')"},
                headers={"E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49999",
                         "X-Access-Token": sb["envdAccessToken"]}))
    for path in ("/home/user/x", "../../../etc/shadow", "/etc/shadow"):
        status, err, _ = e2b(gateway, "GET", "/files?" + urllib.parse.urlencode({"path": path}),
                             sb, "49983")
        assert status == 404 and err["code"] == 404, path
    status, body, _ = e2b(gateway, "POST", "/filesystem.Filesystem/Stat", sb, "49983",
                          {"path": "/home/user/x/../../../../etc/shadow"})
    assert status == 404 and body["code"] == "not_found"


ALLOCATE_1_GIB = "x = bytearray(1 << 30)\nx[::4096] = b'a' * (len(x) // 4096)"


def test_runs_on_a_kernel_that_dies_of_oom_end_at_once():
    """Every run pending on a kernel that dies ends, within about a second,
    with the reason and end_of_execution: on Glovebox's route (the run that
    allocated, and one queued behind it) and on E2B's."""
    import threading
    from gbclient import start_gateway
    gw = start_gateway("--memory-mb", "128")
    try:
        kid = gw.start_kernel(name="python3", limits={"memory_mb": 128})
        results = {}

        def call(name, path, body, headers=None):
            t0 = time.time()
            lines = [(line, at - t0) for line, at in stream(gw, path, body, headers)]
            results[name] = lines

        # The cell waits a second before it allocates, so that the second
        # run is surely queued behind it (sent after the death, it would
        # rightly run on the restarted kernel).
        runs = [threading.Thread(target=call, args=("oom", f"/api/kernels/{kid}/execute", {
            "code": "import time\ntime.sleep(1)\n" + ALLOCATE_1_GIB, "timeout": 60}))]
        runs[0].start()
        time.sleep(0.3)
        runs.append(threading.Thread(target=call, args=(
            "queued", f"/api/kernels/{kid}/execute", {"code": "print('queued')"})))
        runs[1].start()
        for t in runs:
            t.join(60)
        status, sb, _ = gw.request("POST", "/e2b/v2/sandboxes", {"timeout": 120}, token="",
                                   headers={"X-API-KEY": gw.token})
        assert status == 201, sb
        call("e2b", "/e2b/execute", {"code": ALLOCATE_1_GIB}, {
            "E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49999",
            "X-Access-Token": sb["envdAccessToken"], "Authorization": ""})
        for name in ("oom", "queued", "e2b"):
            lines = results[name]
            types = [line["type"] for line, _ in lines]
            assert types[-2:] == ["error", "end_of_execution"], (name, types)
            error = lines[-2][0]
            assert error["name"] == "KernelOutOfMemory", (name, error)
            assert "128 MiB" in error["value"], (name, error)
            assert "keepalive" not in types, (name, types)
            # Filling 128 MiB takes the kernel a fraction of a second; the
            # gateway hears of the kill and answers at once, not at a
            # timeout (before: only keepalives until one).
            assert lines[-1][1] < 3.0, (name, lines[-1][1])
            assert lines[-1][1] - lines[-2][1] < 0.5, (name, lines)
    finally:
        gw.stop()


def test_interrupts_while_a_kernel_restarts_are_refused_not_fatal(gateway, kernel):
    """An interrupt of a kernel that is still starting would kill it (its
    SIGINT handler is not in place yet): refused with 409 instead, and the
    restart costs nothing more."""
    import threading
    restarted = {}
    t = threading.Thread(target=lambda: restarted.update(
        reply=gateway.request("POST", f"/api/kernels/{kernel}/restart")))
    t.start()
    statuses = []
    while t.is_alive():
        status, body, _ = gateway.request("POST", f"/api/kernels/{kernel}/interrupt")
        statuses.append(status)
        if status == 409:
            assert "nothing to interrupt" in body["message"]
        time.sleep(0.005)
    t.join()
    assert restarted["reply"][0] == 200, restarted
    assert 409 in statuses, statuses
    status, model, _ = gateway.request("GET", f"/api/kernels/{kernel}")
    assert "reason" not in model, model
    assert f"[{kernel[:8]}] died" not in gateway.read_log()
    # Ready again, an interrupt is taken.
    status, _, _ = gateway.request("POST", f"/api/kernels/{kernel}/interrupt")
    assert status == 204


def test_a_death_during_a_cell_disarms_its_timeout(gateway, kernel):
    """The run ends at the death; its timeout must not later interrupt and
    restart the freshly restarted kernel, nor wipe the death's reason."""
    lines = [line for line, _ in stream(gateway, f"/api/kernels/{kernel}/execute", {
        "code": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "timeout": 2})]
    assert [line["type"] for line in lines][-2:] == ["error", "end_of_execution"], lines
    assert lines[-2]["name"] == "KernelDied"
    deadline = time.time() + 30
    while True:
        status, model, _ = gateway.request("GET", f"/api/kernels/{kernel}")
        if model["execution_state"] == "idle" or time.time() > deadline:
            break
        time.sleep(0.1)
    time.sleep(3)  # past the cell's timeout of 2 s
    log = gateway.read_log()
    assert log.count(f"[{kernel[:8]}] restarting automatically") == 1, log[-3000:]
    assert f"[{kernel[:8]}] execution did not stop" not in log
    status, model, _ = gateway.request("GET", f"/api/kernels/{kernel}")
    assert model["execution_state"] == "idle" and "signal 9" in model.get("reason", ""), model
