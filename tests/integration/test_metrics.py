"""GET /metrics, GET /api/health, a kernel's sandbox usage and
--log-format json, against a real gateway and real sandboxed kernels: the
counters move by exactly what the test did, the text parses as Prometheus
exposition (Debian's python3-prometheus-client parser), health turns 503
while the kernel-host is stopped, and the audit lines say who ran what
without the code or the token."""
import http.client
import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gbclient import start_gateway

ALLOCATE_1_GIB = "x = bytearray(1 << 30)\nx[::4096] = b'a' * (len(x) // 4096)"


def scrape(gw, token=None):
    """Every sample of GET /metrics as {(name, sorted labels): value}; the
    text must parse as exposition format 0.0.4."""
    req = urllib.request.Request(gw.base + "/metrics")
    req.add_header("Authorization", f"Bearer {token or gw.token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    samples, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = s.value
    return samples, types, text


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def execute_http(gw, kid, code, timeout=None):
    """Runs code through POST /api/kernels/{id}/execute; returns its lines."""
    body = {"code": code}
    if timeout is not None:
        body["timeout"] = timeout
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=120)
    conn.request("POST", f"/api/kernels/{kid}/execute", json.dumps(body),
                 {"Authorization": f"token {gw.token}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    lines = [json.loads(line) for line in resp.read().decode().splitlines() if line.strip()]
    conn.close()
    return lines


def kernel_hosts(gw):
    out = subprocess.run(["pgrep", "-P", str(gw.proc.pid)], capture_output=True, text=True)
    hosts = []
    for pid in out.stdout.split():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"kernel-host" in f.read():
                    hosts.append(int(pid))
        except OSError:
            pass
    return hosts


def kernel_host(gw):
    hosts = kernel_hosts(gw)
    assert len(hosts) == 1, hosts
    return hosts[0]


def wait_for(predicate, timeout=30, step=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(step)
    return predicate()


@pytest.fixture(scope="module")
def gw():
    g = start_gateway("--log-format", "json")
    yield g
    g.stop()


def test_metrics_need_the_token_and_take_bearer(gw):
    status, _, _ = gw.request("GET", "/metrics", token="")
    assert status == 401
    status, _, _ = gw.request("GET", "/metrics", token="wrong-token-xxxxxxxx")
    assert status == 401
    samples, types, text = scrape(gw)  # Authorization: Bearer, as Prometheus sends it
    assert types["glovebox_execution_duration_seconds"] == "histogram"
    assert types["glovebox_kernels"] == "gauge"
    assert types["glovebox_http_requests"] == "counter"  # the parser drops _total
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert len(line.split(" ", 3)) == 4, line


def test_counters_move_by_what_was_done(gw):
    before, _, _ = scrape(gw)
    kid = gw.start_kernel()
    cells = ["1 + 1", "print('x' * 1000)", "raise ValueError('no')", "é = 'ü'; print(é)"]
    try:
        ch = gw.connect(kid)
        for code in cells[:3]:
            # stop_on_error false: with it, ipykernel aborts whatever
            # reaches it until its abort ends, and the next cell (the HTTP
            # one) may reach it that soon.
            reply, _ = ch.collect(ch.send("execute_request", {
                "code": code, "silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": False}))
            assert reply["content"]["status"] == ("error" if "raise" in code else "ok")
        ch.close()
        lines = execute_http(gw, kid, cells[3])
        assert {"type": "end_of_execution"} in lines
        def settled(s):
            # The close, and the HTTP run's execution (counted when its
            # reply comes, which may be after the run's last line).
            return s if (value(s, "glovebox_websocket_connections_closed_total")
                         > value(before, "glovebox_websocket_connections_closed_total") and
                         value(s, "glovebox_executions_total", tenant="admin", outcome="ok")
                         - value(before, "glovebox_executions_total", tenant="admin",
                                 outcome="ok") >= 3) else None

        after = wait_for(lambda: settled(scrape(gw)[0]))
        if not after:
            now = scrape(gw)[0]
            raise AssertionError(
                "not counted: closes %s, ok %s, error %s; log:\n%s" % (
                    value(now, "glovebox_websocket_connections_closed_total")
                    - value(before, "glovebox_websocket_connections_closed_total"),
                    value(now, "glovebox_executions_total", tenant="admin", outcome="ok")
                    - value(before, "glovebox_executions_total", tenant="admin", outcome="ok"),
                    value(now, "glovebox_executions_total", tenant="admin", outcome="error")
                    - value(before, "glovebox_executions_total", tenant="admin", outcome="error"),
                    "\n".join(gw.read_log().splitlines()[-12:])))

        def delta(name, **labels):
            return value(after, name, **labels) - value(before, name, **labels)

        assert delta("glovebox_kernel_starts_total", kernelspec="python3") == 1
        assert delta("glovebox_executions_total", tenant="admin", outcome="ok") == 3
        assert delta("glovebox_executions_total", tenant="admin", outcome="error") == 1
        hist = "glovebox_execution_duration_seconds"
        assert delta(hist + "_count", kernelspec="python3") == len(cells)
        assert delta(hist + "_bucket", kernelspec="python3", le="+Inf") == len(cells)
        assert delta(hist + "_sum", kernelspec="python3") > 0
        # Buckets are cumulative: never decreasing with le, +Inf == count.
        buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in after.items()
                          if k[0] == hist + "_bucket" and dict(k[1])["kernelspec"] == "python3"))
        counts = [v for _, v in buckets]
        assert counts == sorted(counts) and buckets[-1][0] == float("inf")
        assert counts[-1] == value(after, hist + "_count", kernelspec="python3")
        assert [b for b, _ in buckets][:2] == [0.005, 0.01] and 60.0 in [b for b, _ in buckets]
        # The code's size in bytes (UTF-8), tenant "admin" (the token's).
        assert delta("glovebox_tenant_code_bytes_total", tenant="admin") == sum(
            len(c.encode()) for c in cells)
        assert delta("glovebox_tenant_execution_seconds_total", tenant="admin") > 0
        assert delta("glovebox_relayed_messages_total", direction="to_kernel") >= len(cells)
        assert delta("glovebox_relayed_bytes_total", direction="from_kernel") > 1000
        assert delta("glovebox_websocket_connections_opened_total") == 1
        assert delta("glovebox_websocket_connections_closed_total") == 1
        assert delta("glovebox_websocket_frames_total", direction="in") >= 3
        assert delta("glovebox_websocket_frames_total", direction="out") >= 3
        # Route classes, never paths (the kernel's id is in none).
        assert delta("glovebox_http_requests_total", route="kernels", status="201") == 1
        assert delta("glovebox_http_requests_total", route="execute", status="200") == 1
        assert not any(kid in json.dumps(k) for k in after)
        assert value(after, "glovebox_kernels", kernelspec="python3", state="idle") >= 1
        assert value(after, "glovebox_tenant_kernels", tenant="admin") >= 1
        assert value(after, "glovebox_kernel_host_up") == 1
        assert value(after, "glovebox_memory_available_bytes") > 0
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


def test_json_logs_and_one_audit_line_per_execution(gw):
    kid = gw.start_kernel()
    first = "print('secret-code-text')\nimport time\ntime.sleep(0.5)"
    took = []
    try:
        for code, timeout in ((first, None), ("1/0", None),
                              ("import time\ntime.sleep(30)", 1)):
            t0 = time.monotonic()
            execute_http(gw, kid, code, timeout=timeout)
            took.append(time.monotonic() - t0)
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")
    log = gw.read_log()
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]
    for line in lines:
        assert {"time", "level", "component", "message"} <= set(line), line
        assert line["level"] in ("debug", "info", "warn", "error")
    assert {line["component"] for line in lines} >= {"glovebox", "kernel-host"}
    audits = [line for line in lines if line.get("event") == "execution" and line["kernel"] == kid]
    assert [a["outcome"] for a in audits] == ["ok", "error", "timeout"], audits
    assert [a["code_bytes"] for a in audits] == [len(first), 3,
                                                 len("import time\ntime.sleep(30)")]
    for a in audits:
        assert a["tenant"] == "admin", a
    # Each execution's own time: at least what it slept, within what the
    # request took from here (plus the log's rounding).
    assert 0.5 <= audits[0]["duration_s"] <= took[0] + 0.01, (audits[0], took)
    assert 0 < audits[1]["duration_s"] <= took[1] + 0.01, (audits[1], took)
    assert 1.0 <= audits[2]["duration_s"] < 30
    assert "secret-code-text" not in log
    assert gw.token not in log


def test_kernel_metrics_route_reports_the_sandbox(gw):
    kid = gw.start_kernel()
    try:
        status, first, _ = gw.request("GET", f"/api/kernels/{kid}/metrics")
        assert status == 200, first
        assert first["cpuCount"] == 1 and first["memTotal"] == 1024 * 1024 * 1024
        assert 0 < first["memUsed"] < first["memTotal"]
        assert 0 < first["diskTotal"] and 0 <= first["diskUsed"] <= first["diskTotal"]
        execute_http(gw, kid, "x = bytearray(100 * 1024 * 1024)\n"
                              "open('/home/user/blob', 'wb').write(b'z' * 10_000_000)\n"
                              "import time\nt = time.time()\nwhile time.time() - t < 1: pass")
        status, second, _ = gw.request("GET", f"/api/kernels/{kid}/metrics")
        assert status == 200
        assert second["memUsed"] - first["memUsed"] > 90 * 1024 * 1024, (first, second)
        assert second["diskUsed"] - first["diskUsed"] >= 9_000_000, (first, second)
        assert second["cpuUsedPct"] > 0
        assert second["timestampUnix"] >= first["timestampUnix"]
        status, _, _ = gw.request("GET", f"/api/kernels/{kid}/metrics", token="")
        assert status == 401
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


def test_an_oom_kill_is_counted():
    g = start_gateway("--memory-mb", "128")
    try:
        before, _, _ = scrape(g)
        kid = g.start_kernel(limits={"memory_mb": 128})
        lines = execute_http(g, kid, ALLOCATE_1_GIB)
        assert any(line.get("name") == "KernelOutOfMemory" for line in lines), lines
        after = wait_for(lambda: (lambda s: s if value(
            s, "glovebox_kernel_restarts_total", kernelspec="python3", kind="automatic") else None)(
                scrape(g)[0]))
        assert after, "no automatic restart counted"
        assert value(after, "glovebox_kernel_oom_kills_total", kernelspec="python3") - value(
            before, "glovebox_kernel_oom_kills_total", kernelspec="python3") == 1
        assert value(after, "glovebox_kernel_deaths_total", kernelspec="python3") == 1
        assert value(after, "glovebox_executions_total", tenant="admin", outcome="error") == 1
    finally:
        g.stop()


def test_health_turns_503_while_the_kernel_host_is_stopped():
    g = start_gateway()
    host = kernel_host(g)
    try:
        status, body, _ = g.request("GET", "/api/health", token="")
        assert status == 200, body
        assert body == {"status": "ok",
                        "checks": {"kernel_host": "ok", "pool": "ok", "memory": "ok"}}
        os.kill(host, signal.SIGSTOP)
        try:
            # A stop takes effect when the process is next scheduled.
            assert wait_for(lambda: open(f"/proc/{host}/stat").read().rsplit(")", 1)[1].split()[0]
                            in ("T", "t"), timeout=10)
            # Without the token: only the names of the failing checks.
            status, body, _ = g.request("GET", "/api/health", token="")
            assert status == 503, body
            assert body == {"status": "unhealthy",
                            "checks": {"kernel_host": "failing", "pool": "ok", "memory": "ok"}}
            status, body, _ = g.request("GET", "/api/health")
            assert status == 503
            assert body["checks"]["kernel_host"]["status"] == "failing"
            assert "stopped" in body["checks"]["kernel_host"]["detail"]
            samples, _, _ = scrape(g)
            assert value(samples, "glovebox_kernel_host_up") == 0
            assert value(samples, "glovebox_healthy") == 0
        finally:
            os.kill(host, signal.SIGCONT)
        status, body, _ = g.request("GET", "/api/health", token="")
        assert status == 200, body
        # And a kernel still starts and runs: the gateway recovered.
        kid = g.start_kernel()
        assert {"type": "end_of_execution"} in execute_http(g, kid, "1")
    finally:
        g.stop()


def test_a_replaced_kernel_host_is_counted_and_health_stays_ok():
    g = start_gateway("--max-host-restarts", "1")
    try:
        host = kernel_host(g)
        before, _, _ = scrape(g)
        os.kill(host, signal.SIGKILL)
        assert wait_for(lambda: kernel_hosts(g) and kernel_hosts(g) != [host], timeout=20)
        status, body, _ = g.request("GET", "/api/health", token="")
        assert status == 200, body
        after, _, _ = scrape(g)
        assert value(after, "glovebox_kernel_host_restarts_total") - value(
            before, "glovebox_kernel_host_restarts_total") == 1
    finally:
        g.stop()


def test_health_needs_memory_above_the_pool_minimum():
    g = start_gateway("--pool-min-available-mb", str(1 << 29))
    try:
        status, body, _ = g.request("GET", "/api/health", token="")
        assert status == 503
        assert body["checks"]["memory"] == "failing"
        assert body["checks"]["kernel_host"] == "ok"
    finally:
        g.stop()


def test_a_refused_websocket_upgrade_is_counted(gw):
    import websocket
    before, _, _ = scrape(gw)
    kid = gw.start_kernel()
    try:
        with pytest.raises(websocket.WebSocketBadStatusException):
            gw.connect(kid, token="wrong-token-xxxxxxxx")
        after, _, _ = scrape(gw)
        assert value(after, "glovebox_http_requests_total", route="channels", status="401") - value(
            before, "glovebox_http_requests_total", route="channels", status="401") == 1
        assert value(after, "glovebox_websocket_connections_opened_total") == value(
            before, "glovebox_websocket_connections_opened_total")
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")
