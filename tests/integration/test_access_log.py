"""Logs and metrics for operators: the access line of every HTTP request
and WebSocket (--access-log), failed authentications logged at a bounded
rate, and glovebox_build_info and the process metrics in /metrics; a real
gateway, read through its log."""
import json
import os
import re
import socket
import time
import urllib.request

import pytest
import websocket

from gbclient import run_cell, start_gateway

ACCESS = re.compile(
    r"access: method=(\S+) route=(\S+) status=(\d+) bytes_in=(\d+) bytes_out=(\d+) "
    r"duration_s=([\d.]+) tenant=(\S+)")


def access_lines(gw):
    return [dict(zip(("method", "route", "status", "bytes_in", "bytes_out", "duration_s",
                      "tenant"), m.groups()))
            for m in ACCESS.finditer(gw.read_log())]


def wait_for_line(gw, predicate, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = [a for a in access_lines(gw) if predicate(a)]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("no such access line in:\n" + gw.read_log()[-4000:])


@pytest.fixture(scope="module")
def gateway():
    gw = start_gateway("--log-rate-limit", "5")
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def kernel(gateway):
    kid = gateway.start_kernel()
    yield kid
    gateway.request("DELETE", f"/api/kernels/{kid}")


def test_a_request_has_one_line_with_its_route_class_and_no_id_or_query(gateway, kernel):
    # The token in the query and the kernel's id in the path: neither may
    # reach the log, only the route's class.
    status, body, _ = gateway.request(
        "GET", f"/api/kernels/{kernel}?token={gateway.token}&secret=s3cr3t-query")
    assert status == 200
    length = len(json.dumps(body, separators=(",", ":")))
    lines = wait_for_line(gateway, lambda a: a["route"] == "kernels" and a["method"] == "GET"
                          and a["status"] == "200" and a["bytes_out"] == str(length))
    assert lines[-1]["tenant"] == "admin"
    assert float(lines[-1]["duration_s"]) < 10
    log = gateway.read_log()
    assert "s3cr3t-query" not in log
    assert kernel not in "\n".join(line for line in log.splitlines() if "access:" in line)
    assert gateway.token not in log


def test_a_body_is_counted_in_and_a_refusal_has_its_status(gateway):
    body = json.dumps({"name": "no-such-kernelspec", "pad": "x" * 1000}).encode()
    status, _, _ = gateway.request("POST", "/api/kernels", raw=body)
    assert status in (400, 404)
    wait_for_line(gateway, lambda a: a["method"] == "POST" and a["route"] == "kernels"
                  and a["status"] == str(status) and a["bytes_in"] == str(len(body)))
    status, _, _ = gateway.request("GET", "/mcp")
    wait_for_line(gateway, lambda a: a["route"] == "mcp" and a["status"] == str(status))


def test_a_websocket_has_its_line_at_its_close(gateway, kernel):
    ch = gateway.connect(kernel)
    reply, _ = ch.execute("print('x' * 5000)")
    assert reply["content"]["status"] == "ok"
    before = len([a for a in access_lines(gateway) if a["route"] == "channels"])
    ch.close()
    lines = wait_for_line(gateway, lambda a: a["route"] == "channels" and a["status"] == "101")
    assert len(lines) == before + 1
    line = lines[-1]
    assert line["method"] == "GET" and line["tenant"] == "admin"
    # The bytes of the connection each way: the output came out, the
    # request went in.
    assert int(line["bytes_out"]) > 5000, line
    assert int(line["bytes_in"]) > 100, line
    assert float(line["duration_s"]) > 0


def test_a_relayed_port_has_its_line_with_the_apps_status(gateway, kernel):
    code = ("import subprocess, sys, socket, time\n"
            "open('/home/user/page.txt', 'w').write('p' * 3000)\n"
            "srv = subprocess.Popen([sys.executable, '-m', 'http.server', '8000', '--bind',"
            " '127.0.0.1', '--directory', '/home/user'], stdout=subprocess.DEVNULL,"
            " stderr=subprocess.DEVNULL)\n"
            "for _ in range(100):\n"
            "    try:\n"
            "        socket.create_connection(('127.0.0.1', 8000)).close()\n"
            "        break\n"
            "    except OSError:\n"
            "        time.sleep(0.1)\n")
    content, _, _ = run_cell(gateway, kernel, code)
    assert content["status"] == "ok", content
    for name, status in (("page.txt", 200), ("missing.txt", 404)):
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as s:
            s.sendall(f"GET /api/kernels/{kernel}/ports/8000/{name} HTTP/1.1\r\n"
                      f"Host: 127.0.0.1:{gateway.port}\r\n"
                      f"Authorization: token {gateway.token}\r\n\r\n".encode())
            data = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
        assert data.split(b" ")[1] == str(status).encode(), data[:200]
        lines = wait_for_line(gateway, lambda a, status=status: a["route"] == "ports"
                              and a["status"] == str(status))
        assert lines[-1]["tenant"] == "admin" and lines[-1]["method"] == "GET"
        if status == 200:
            assert int(lines[-1]["bytes_out"]) > 3000, lines[-1]


def test_failed_authentications_are_logged_at_a_bounded_rate(gateway):
    started = time.time()
    for i in range(40):
        gateway.request("GET", "/api/kernels", token=f"wrong-key-{i:04d}-xxxxxxxx")
    ws_url = f"ws://127.0.0.1:{gateway.port}/api/kernels/nope/channels?token=wrong-ws-key-1234"
    with pytest.raises(websocket.WebSocketBadStatusException):
        websocket.create_connection(ws_url, timeout=10)
    took = time.time() - started
    deadline, written, suppressed = time.time() + 10, 0, 0
    while time.time() < deadline:
        log = gateway.read_log()
        written = len(re.findall(r"authentication failed: GET \S+ from 127\.0\.0\.1", log))
        suppressed = sum(int(n) for n in re.findall(
            r"(\d+) more lines like \"authentication failed: %s %s from %s\" suppressed", log))
        if written + suppressed >= 41:
            break
        time.sleep(0.2)
    assert written + suppressed == 41, (written, suppressed)
    # At most 5 a second (--log-rate-limit), plus the window it began in.
    assert written <= 5 * (int(took) + 2), (written, took)
    assert suppressed > 0
    log = gateway.read_log()
    assert "wrong-key-" not in log and "wrong-ws-key" not in log
    # The refused upgrade has its access line too, under its route class.
    wait_for_line(gateway, lambda a: a["route"] == "channels" and a["status"] == "401")


def test_access_log_off_and_errors():
    gw = start_gateway("--access-log", "off")
    try:
        assert gw.request("GET", "/api/kernels")[0] == 200
        assert gw.request("GET", "/api/kernels", token="wrong-key-xxxxxxxx")[0] == 401
        time.sleep(0.5)
        assert access_lines(gw) == []
        # Failed authentications are warnings, logged whatever the access log.
        assert "authentication failed: GET kernels" in gw.read_log()
    finally:
        gw.stop()
    gw = start_gateway("--access-log", "errors")
    try:
        assert gw.request("GET", "/api/kernels")[0] == 200
        assert gw.request("GET", "/api/kernels/nope")[0] == 404
        lines = wait_for_line(gw, lambda a: a["status"] == "404")
        assert all(int(a["status"]) >= 400 for a in access_lines(gw)), access_lines(gw)
        assert lines[-1]["route"] == "kernels"
    finally:
        gw.stop()
    with pytest.raises(RuntimeError, match="--access-log must be all, errors or off"):
        start_gateway("--access-log", "some")


def test_json_access_lines_carry_their_fields():
    gw = start_gateway("--log-format", "json")
    try:
        assert gw.request("GET", "/api/kernelspecs")[0] == 200
        deadline = time.time() + 10
        found = []
        while time.time() < deadline and not found:
            found = [json.loads(line) for line in gw.read_log().splitlines()
                     if line.startswith("{") and '"event":"access"' in line]
            time.sleep(0.1)
        assert found, gw.read_log()
        a = found[-1]
        assert (a["method"], a["route"], a["status"], a["tenant"]) == (
            "GET", "kernelspecs", 200, "admin")
        assert a["bytes_out"] > 0 and a["bytes_in"] == 0 and a["duration_s"] >= 0
    finally:
        gw.stop()


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_metrics_have_build_info_and_process_figures(gateway):
    req = urllib.request.Request(gateway.base + "/metrics")
    req.add_header("Authorization", f"token {gateway.token}")
    with urllib.request.urlopen(req) as resp:
        text = resp.read().decode()
    assert re.search(r'^glovebox_build_info\{version="\d+\.\d+[^"]*"\} 1$', text, re.M), text
    assert "# TYPE process_cpu_seconds_total counter" in text
    pid = gateway.proc.pid
    with open(f"/proc/{pid}/status") as f:
        rss_kib = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    rss = metric(text, "process_resident_memory_bytes")
    # The gateway's own figures, not another process's.
    assert 0.5 * rss_kib * 1024 < rss < 2 * rss_kib * 1024, (rss, rss_kib)
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    assert abs(metric(text, "process_open_fds") - fds) <= 5, (metric(text, "process_open_fds"),
                                                               fds)
    start = metric(text, "process_start_time_seconds")
    assert time.time() - 3600 < start <= time.time() + 1, start
    assert metric(text, "process_cpu_seconds_total") >= 0
    assert metric(text, "process_max_fds") > 0
    assert metric(text, "process_virtual_memory_bytes") > rss
    # The kernel-host's beside them.
    assert metric(text, "glovebox_kernel_host_resident_memory_bytes") > 0
    assert metric(text, "glovebox_kernel_host_open_fds") > 0
    assert metric(text, "glovebox_kernel_host_cpu_seconds_total") >= 0
