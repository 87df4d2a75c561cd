"""E2B's lifecycle autoResume through the unmodified Python SDK: a sandbox
created with lifecycle={"on_timeout": "pause", "auto_resume": True} that its
timeout paused resumes on the next request to it, whichever plane: code
(run_code), envd (files), a port through getHost (HTTP and a WebSocket
upgrade), several at once after one resume, and then has its lifetime
again. Without auto_resume a paused sandbox answers as before, and asking
for auto_resume without the pause is refused."""
import json
import os
import shutil
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import point_sdk_at
from gbclient import start_gateway
from test_pause_sdk import api, state_of, wait_for_state
from test_ports_sdk import get

from e2b_code_interpreter import Sandbox
from e2b import TimeoutException

AUTO = {"on_timeout": "pause", "auto_resume": True}


def memory_kept(gw, sandbox_id):
    status, info = api(gw, "GET", f"/sandboxes/{sandbox_id}")
    assert status == 200 and info["state"] == "paused", info
    return info["glovebox"]["memoryKept"]


def need_memory(gw, sandbox_id):
    """What lives in a process (variables, a server started from code)
    survives only a pause that kept the memory: CRIU's."""
    if not memory_kept(gw, sandbox_id):
        pytest.skip("this host makes no memory checkpoints (CRIU): the pause kept files only")


def resumes_logged(gw, sandbox_id):
    return gw.read_log().count(f"e2b sandbox {sandbox_id} resumed")


def serve_port_from_code(gw, sbx, port=8000):
    """A server started from code (a child of the kernel, kept by a memory
    pause), answering through getHost with the traffic token."""
    sbx.files.write("/home/user/site/index.txt", "served after a nap")
    assert sbx.run_code(
        "import subprocess\n"
        f"srv = subprocess.Popen(['python3', '-m', 'http.server', '{port}', "
        "'--directory', '/home/user/site'])").error is None
    headers = {"e2b-traffic-access-token": sbx.traffic_access_token}
    end = time.monotonic() + 30
    while get(gw, sbx.get_host(port), "/index.txt", headers)[0] != 200:
        assert time.monotonic() < end, "the server never answered"
        time.sleep(0.2)
    return headers


def upgrade_status(gw, host, headers):
    """A WebSocket upgrade through the ports proxy: the first line of what
    comes back (http.server answers it as a plain GET)."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=60) as s:
        lines = [f"GET /index.txt HTTP/1.1", f"Host: {host}", "Connection: Upgrade",
                 "Upgrade: websocket", "Sec-WebSocket-Version: 13",
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data.split(b"\r\n", 1)[0]


def test_run_code_resumes_with_its_variables_and_lifetime(gateway):
    sbx = Sandbox.create(timeout=4, lifecycle=AUTO)
    try:
        assert Sandbox.get_info(sbx.sandbox_id).lifecycle == {"on_timeout": "pause",
                                                              "auto_resume": True}
        assert sbx.run_code("kept = 6 * 7").error is None
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
        need_memory(gateway, sbx.sandbox_id)
        # The same Sandbox object, no connect: the request resumes it.
        assert sbx.run_code("kept").text == "42"
        assert state_of(sbx.sandbox_id) == "running"
        assert resumes_logged(gateway, sbx.sandbox_id) == 1
        # Its lifetime again from the resume: it pauses at its timeout
        # once more, and wakes once more.
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
        assert sbx.run_code("kept + 1").text == "43"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_files_read_resumes_it(gateway):
    sbx = Sandbox.create(timeout=3, lifecycle=AUTO)
    try:
        sbx.files.write("nap.txt", "still here")
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
        assert sbx.files.read("nap.txt") == "still here"
        assert state_of(sbx.sandbox_id) == "running"
        # A write while paused waits the same way, its body with it.
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
        sbx.files.write("woken.txt", "written on waking")
        assert sbx.files.read("woken.txt") == "written on waking"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_a_port_request_resumes_it(gateway):
    sbx = Sandbox.create(timeout=30, lifecycle=AUTO)
    try:
        headers = serve_port_from_code(gateway, sbx)
        sbx.set_timeout(2)
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
        need_memory(gateway, sbx.sandbox_id)
        # Without its token a sleeping sandbox's port stays closed, and
        # is not woken.
        assert get(gateway, sbx.get_host(8000), "/index.txt")[0] == 403
        assert state_of(sbx.sandbox_id) == "paused"
        status, body = get(gateway, sbx.get_host(8000), "/index.txt", headers)
        assert (status, body) == (200, b"served after a nap")
        assert state_of(sbx.sandbox_id) == "running"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_requests_at_once_are_all_served_by_one_resume(gateway):
    sbx = Sandbox.create(timeout=30, lifecycle=AUTO)
    try:
        headers = serve_port_from_code(gateway, sbx)
        assert sbx.run_code("kept = 'yes'").error is None
        sbx.set_timeout(2)
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
        need_memory(gateway, sbx.sandbox_id)
        host = sbx.get_host(8000)
        results = {}
        calls = {
            "code": lambda: sbx.run_code("kept").text,
            "file": lambda: sbx.files.read("/home/user/site/index.txt"),
            "port": lambda: get(gateway, host, "/index.txt", headers),
            "port2": lambda: get(gateway, host, "/index.txt", headers)[0],
            "upgrade": lambda: upgrade_status(gateway, host, headers),
            # A connect meanwhile resumes it or waits for the same resume.
            "connect": lambda: Sandbox.connect(sbx.sandbox_id).sandbox_id,
        }

        def run(name):
            try:
                results[name] = calls[name]()
            except Exception as e:  # noqa: BLE001 - said in the assertion
                results[name] = e

        threads = [threading.Thread(target=run, args=(n,)) for n in calls]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert results == {"code": "yes", "file": "served after a nap",
                           "port": (200, b"served after a nap"), "port2": 200,
                           "upgrade": b"HTTP/1.0 200 OK", "connect": sbx.sandbox_id}, results
        assert resumes_logged(gateway, sbx.sandbox_id) == 1
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_auto_resume_without_the_pause_is_refused(gateway):
    status, body = api(gateway, "POST", "/sandboxes",
                       {"templateID": "code-interpreter-v1", "autoResume": {"enabled": True}})
    assert status == 400 and "autoResume.enabled needs autoPause" in body["message"], body
    status, body = api(gateway, "POST", "/sandboxes",
                       {"templateID": "code-interpreter-v1", "autoPause": False,
                        "autoResume": {"enabled": "yes"}})
    assert status == 400 and "autoResume" in body["message"], body


def test_without_auto_resume_a_paused_sandbox_answers_as_before(gateway):
    sbx = Sandbox.create(timeout=30, lifecycle={"on_timeout": "pause"})
    try:
        assert Sandbox.get_info(sbx.sandbox_id).lifecycle["auto_resume"] is False
        headers = serve_port_from_code(gateway, sbx)
        sbx.set_timeout(2)
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
        with pytest.raises(TimeoutException, match="The sandbox is paused: connect to it"):
            sbx.run_code("1")
        with pytest.raises(TimeoutException, match="The sandbox is paused: connect to it"):
            sbx.files.read("/home/user/site/index.txt")
        assert get(gateway, sbx.get_host(8000), "/index.txt", headers)[0] == 403
        status, _ = get(gateway, sbx.get_host(8000), "/index.txt",
                        {"Authorization": f"Bearer {gateway.token}"})
        assert status == 404
        assert state_of(sbx.sandbox_id) == "paused"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_auto_resume_survives_a_gateway_restart(tmp_path):
    state = str(tmp_path / "state")
    gw = start_gateway("--state-dir", state, token="e2b_" + os.urandom(20).hex())
    try:
        point_sdk_at(gw, gw.token)
        sbx = Sandbox.create(timeout=2, lifecycle=AUTO)
        sbx.files.write("kept.txt", "across restarts")
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
    finally:
        gw.stop()
    with open(os.path.join(state, "paused", sbx.sandbox_id, "meta.json")) as f:
        assert json.load(f)["autoResume"] is True
    gw = start_gateway("--state-dir", state, token=gw.token)
    try:
        point_sdk_at(gw, gw.token)
        assert Sandbox.get_info(sbx.sandbox_id).lifecycle["auto_resume"] is True
        # The same tokens, through the new gateway: an envd read wakes it.
        req = urllib.request.Request(gw.base + "/e2b/files?path=/home/user/kept.txt",
                                     headers={"E2b-Sandbox-Id": sbx.sandbox_id,
                                              "E2b-Sandbox-Port": "49983",
                                              "X-Access-Token": sbx._envd_access_token})
        with urllib.request.urlopen(req, timeout=60) as resp:
            assert (resp.status, resp.read()) == (200, b"across restarts")
        assert state_of(sbx.sandbox_id) == "running"
        Sandbox.kill(sbx.sandbox_id)
    finally:
        gw.stop()


def test_a_resume_that_fails_answers_502_and_it_stays_paused(gateway):
    sbx = Sandbox.create(timeout=3, lifecycle=AUTO)
    try:
        assert sbx.run_code("kept = 1").error is None
        wait_for_state(sbx.sandbox_id, "paused", seconds=60)
        need_memory(gateway, sbx.sandbox_id)
        # Its checkpoint lost: nothing can restore it.
        checkpoints = os.path.join(gateway.own_state_dir, "checkpoints")
        for name in os.listdir(checkpoints):
            if not name.startswith("."):  # the kernel-host's manifest key
                shutil.rmtree(os.path.join(checkpoints, name))
        start = time.monotonic()
        with pytest.raises(TimeoutException, match="paused and could not be resumed"):
            sbx.run_code("kept")
        assert time.monotonic() - start < 60
        assert state_of(sbx.sandbox_id) == "paused"
    finally:
        Sandbox.kill(sbx.sandbox_id)
