"""Several hosts behind a real proxy (docs/several-hosts.md): three
gateways, each in a network namespace of its own, behind Debian's HAProxy
configured from deploy/haproxy/glovebox.cfg.in. Everything a client does
goes through the front: creates are spread over the hosts, every id
reaches its own host, WebSockets reconnect, lists show the whole fleet, a
drained host takes no new kernels and keeps running its own, and a host
killed with SIGKILL is reported down by name while the others carry on.

The tests share one fleet and run in order: the drain comes before the
kill, which is last.
"""
import shutil
import socket
import time
import uuid

import pytest
import websocket

from fleetnet import AGENT_PORT, Fleet, host_of
from gbclient import run_cell, stdout_of

pytestmark = [
    pytest.mark.skipif(shutil.which("haproxy") is None, reason="needs haproxy (Debian's)"),
    pytest.mark.skipif(shutil.which("nsenter") is None, reason="needs nsenter"),
]

CREATES = 6


@pytest.fixture(scope="module")
def fleet():
    import os
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    f = Fleet().up()
    f.kernels = []
    yield f
    try:
        for h in f.hosts:
            if h.proc and h.proc.poll() is None:
                for k in h.endpoint.request("GET", "/api/kernels")[1] or []:
                    h.endpoint.request("DELETE", f"/api/kernels/{k['id']}")
    finally:
        f.down()


def create_through_front(fleet, n):
    ids = []
    for _ in range(n):
        status, model, headers = fleet.front.request("POST", "/api/kernels", {"name": "python3"})
        assert status == 201, (status, model)
        ids.append(model["id"])
    fleet.kernels += ids
    return ids


def test_ids_name_their_host_and_creates_spread(fleet):
    ids = create_through_front(fleet, CREATES)
    hosts = [host_of(i) for i in ids]
    assert None not in hosts, ids
    # Weighted round robin over three hosts of about equal capacity.
    assert len(set(hosts)) >= 2, hosts
    for kid in ids:
        assert len(kid) == 36 and kid[14] == "4", kid  # still a UUID 4
        owner = fleet.host(host_of(kid))
        status, model, _ = fleet.front.request("GET", f"/api/kernels/{kid}")
        assert status == 200 and model["id"] == kid, (status, model)
        # The owner has it; another host does not: the front routed by id.
        assert owner.endpoint.request("GET", f"/api/kernels/{kid}")[0] == 200
        other = next(h for h in fleet.hosts if h is not owner)
        assert other.endpoint.request("GET", f"/api/kernels/{kid}")[0] == 404


def test_run_and_reconnect_through_the_front(fleet):
    kid = fleet.kernels[0]
    content, out, _ = run_cell(fleet.front, kid, "x = 41\nprint('set')")
    assert content["status"] == "ok" and out == "set\n", (content, out)
    session = uuid.uuid4().hex
    ch = fleet.front.connect(kid, session_id=session)
    msg_id = ch.send("execute_request", {
        "code": "import time\ntime.sleep(1.5)\nprint('late', x + 1)", "silent": False,
        "store_history": True, "user_expressions": {}, "allow_stdin": False,
        "stop_on_error": True})
    ch.close()
    # Back through the front with the same session: the output made while
    # away is replayed, from the same kernel (x is still there).
    ch = fleet.front.connect(kid, session_id=session)
    try:
        reply, outputs = ch.collect(msg_id, timeout=60)
    finally:
        ch.close()
    assert reply["content"]["status"] == "ok", reply
    assert stdout_of(outputs) == "late 42\n", outputs


def test_lists_show_the_whole_fleet(fleet):
    # Lists go to whichever host the front picks: each must show all.
    for _ in range(4):
        status, models, headers = fleet.front.request("GET", "/api/kernels")
        assert status == 200, models
        assert headers.get("X-Glovebox-Fleet-Missing") is None, headers
        listed = {m["id"] for m in models}
        assert set(fleet.kernels) <= listed, (fleet.kernels, listed)
    # A session for an existing kernel goes to that kernel's host.
    kid = next(k for k in fleet.kernels if host_of(k) == host_of(fleet.kernels[-1]))
    status, s, _ = fleet.front.request("POST", "/api/sessions", {
        "kernel": {"id": kid}, "path": "fleet.ipynb", "type": "notebook", "name": "fleet"})
    assert status == 201, (status, s)
    assert s["kernel"]["id"] == kid and host_of(s["id"]) == host_of(kid), s
    assert fleet.front.request("GET", f"/api/sessions/{s['id']}")[0] == 200
    for _ in range(3):
        status, sessions, _ = fleet.front.request("GET", "/api/sessions")
        assert status == 200 and s["id"] in {x["id"] for x in sessions}, sessions
    # A peer's answer does not fan out again: a host asked as a peer
    # answers with its own kernels only.
    h = fleet.hosts[0]
    status, own, _ = h.endpoint.request("GET", "/api/kernels",
                                        headers={"X-Glovebox-Fleet-Peer": "test"})
    assert status == 200 and all(host_of(m["id"]) == h.name for m in own), own
    # Credentials are the caller's own, at every host.
    status, body, _ = fleet.front.request("GET", "/api/kernels", token="wrong-token-000000")
    assert status in (401, 403), (status, body)


def test_agent_reports_capacity(fleet):
    for h in fleet.hosts:
        with socket.create_connection((h.addr, AGENT_PORT), timeout=5) as s:
            line = s.recv(100).decode()
        words = line.split()
        assert line.endswith("\n") and words[:2] == ["up", "ready"], line
        assert 1 <= int(words[2].rstrip("%")) <= 100, line
    state = fleet.spread_state()
    assert all(status == "UP" and 1 <= weight <= 100 for status, weight in state.values()), state


def test_drain_sends_creates_elsewhere(fleet):
    h1 = fleet.host("h1")
    kept = next((k for k in fleet.kernels if host_of(k) == "h1"), None)
    if kept is None:
        kept = h1.endpoint.start_kernel(name="python3")
        fleet.kernels.append(kept)
    status, body, _ = h1.endpoint.request("POST", "/api/fleet/drain")
    assert status == 200 and body["draining"] is True, body
    try:
        # Asked directly, the draining host says why.
        status, body, _ = h1.endpoint.request("POST", "/api/kernels", {"name": "python3"})
        assert status == 503 and "draining" in body["message"], (status, body)
        fleet.wait_spread({"h1": "DRAIN", "h2": "UP", "h3": "UP"})
        ids = create_through_front(fleet, 4)
        assert all(host_of(k) in ("h2", "h3") for k in ids), ids
        # Its own kernels keep working.
        content, out, _ = run_cell(fleet.front, kept, "print('still here')")
        assert content["status"] == "ok" and out == "still here\n", (content, out)
    finally:
        status, body, _ = h1.endpoint.request("DELETE", "/api/fleet/drain")
        assert status == 200 and body["draining"] is False, body
    fleet.wait_spread({"h1": "UP"})
    status, model, _ = h1.endpoint.request("POST", "/api/kernels", {"name": "python3"})
    assert status == 201 and host_of(model["id"]) == "h1", (status, model)
    fleet.kernels.append(model["id"])


def test_drain_needs_an_admin(fleet):
    h2 = fleet.host("h2")
    status, body, _ = h2.endpoint.request("POST", "/api/fleet/drain", token="wrong-token-000000")
    assert status in (401, 403), (status, body)
    assert h2.endpoint.request("GET", "/api/fleet")[1]["draining"] is False


def test_killed_host_is_reported_down_and_the_others_carry_on(fleet):
    h3 = fleet.host("h3")
    dead = [k for k in fleet.kernels if host_of(k) == "h3"]
    if not dead:
        dead = [h3.endpoint.start_kernel(name="python3")]
        fleet.kernels += dead
    alive = [k for k in fleet.kernels if host_of(k) in ("h1", "h2")]
    assert alive, fleet.kernels
    ch = fleet.front.connect(dead[0])
    reply, _ = ch.execute("print('before')", timeout=60)
    assert reply["content"]["status"] == "ok"

    h3.kill()

    # The WebSocket through the front is closed, not left hanging.
    closed = False
    deadline = time.time() + 30
    while not closed and time.time() < deadline:
        try:
            ch.recv(timeout=max(0.1, deadline - time.time()))
        except websocket.WebSocketTimeoutException:
            break
        except (ConnectionError, OSError, websocket.WebSocketConnectionClosedException):
            closed = True
    ch.close()
    assert closed, "the WebSocket of a killed host's kernel stayed open"
    # Its ids answer a JSON error naming the host.
    for kid in dead:
        status, body, headers = fleet.front.request("GET", f"/api/kernels/{kid}")
        assert status == 503, (status, body)
        assert body["host"] == "h3" and "down" in body["message"], body
        assert headers["Content-Type"] == "application/json"
    # The others are untouched.
    for kid in alive[:3]:
        content, out, _ = run_cell(fleet.front, kid, "print(6 * 7)")
        assert content["status"] == "ok" and out == "42\n", (kid, content, out)
    # The list says which host is missing and shows the rest.
    fleet.wait_spread({"h3": "DOWN"})
    status, models, headers = fleet.front.request("GET", "/api/kernels")
    assert status == 200, models
    assert h3.url in (headers.get("X-Glovebox-Fleet-Missing") or ""), dict(headers)
    listed = {m["id"] for m in models}
    assert set(alive) <= listed and not set(dead) & listed, (alive, dead, listed)
    # Creates go on, to the hosts that are up.
    ids = create_through_front(fleet, 3)
    assert all(host_of(k) in ("h1", "h2") for k in ids), ids

