"""Lists of the whole fleet (docs/several-hosts.md) between real gateways
on loopback: a gateway with --peer includes its peers' kernels, sessions
and E2B sandboxes, asked with the caller's own key (a tenant still sees
only its own); a peer that accepts and never answers, or answers
nonsense, is left out and named, without failing the list; bad fleet flags
stop the start with the reason. The proxy and the network namespaces are
tests/sandbox/test_fleet.py's."""
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse

import pytest

import gbclient
from gbclient import BINARY, EXTRA_ARGS, cold_args, free_port, run_cell, start_gateway

ALICE = "e2b_a11ce0000000000000000001"
BOB = "e2b_b0b000000000000000000002"
ADMIN = "test-token-0123456789"


def keys_file(tmp_path):
    return gbclient.keys_file(tmp_path, {"alice": ALICE, "bob": BOB})


def tag(host):
    t = host.encode().hex().ljust(12, "0")
    return f"{t[:8]}-{t[8:]}-"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    keys = keys_file(tmp_path_factory.mktemp("keys"))
    g1 = start_gateway("--host-id", "h1", "--keys-file", keys, token=ADMIN)
    g2 = start_gateway("--host-id", "h2", "--keys-file", keys, "--peer",
                       f"http://127.0.0.1:{g1.port}", token=ADMIN)
    yield g1, g2
    g2.stop()
    g1.stop()


def test_lists_include_the_peers_and_keep_tenants_apart(pair):
    g1, g2 = pair
    status, a1, _ = g1.request("POST", "/api/kernels", {"name": "python3"}, token=ALICE)
    assert status == 201 and a1["id"].startswith(tag("h1")), a1
    status, a2, _ = g2.request("POST", "/api/kernels", {"name": "python3"}, token=ALICE)
    assert status == 201 and a2["id"].startswith(tag("h2")), a2
    status, b1, _ = g1.request("POST", "/api/kernels", {"name": "python3"}, token=BOB)
    assert status == 201, b1
    status, s1, _ = g1.request("POST", "/api/sessions", {
        "kernel": {"id": a1["id"]}, "path": "a.ipynb", "type": "notebook", "name": "a"},
        token=ALICE)
    assert status == 201 and s1["id"].startswith(tag("h1")), s1
    try:
        status, listed, headers = g2.request("GET", "/api/kernels", token=ALICE)
        assert status == 200 and headers.get("X-Glovebox-Fleet-Missing") is None, headers
        assert {k["id"] for k in listed} == {a1["id"], a2["id"]}, listed
        status, listed, _ = g2.request("GET", "/api/kernels", token=BOB)
        assert {k["id"] for k in listed} == {b1["id"]}, listed
        status, listed, _ = g2.request("GET", "/api/kernels", token=ADMIN)
        assert {a1["id"], a2["id"], b1["id"]} <= {k["id"] for k in listed}, listed
        status, sessions, _ = g2.request("GET", "/api/sessions", token=ALICE)
        assert [s["id"] for s in sessions] == [s1["id"]], sessions
        status, sessions, _ = g2.request("GET", "/api/sessions", token=BOB)
        assert sessions == [], sessions
        # The key in the query works too (it travels with the query).
        status, listed, _ = g2.request("GET", f"/api/kernels?token={BOB}", token="")
        assert status == 200 and {k["id"] for k in listed} == {b1["id"]}, listed
        # g1 has no peers: its own alone.
        status, listed, _ = g1.request("GET", "/api/kernels", token=ALICE)
        assert {k["id"] for k in listed} == {a1["id"]}, listed
    finally:
        for k, key in ((a1, ALICE), (a2, ALICE), (b1, BOB)):
            (g1 if k["id"].startswith(tag("h1")) else g2).request(
                "DELETE", f"/api/kernels/{k['id']}", token=key)


def test_e2b_list_includes_the_peers(pair):
    g1, g2 = pair
    status, sb, _ = g1.request("POST", "/e2b/sandboxes",
                               {"templateID": "code-interpreter-v1",
                                "metadata": {"who": "alice & co=1"}}, token="",
                               headers={"X-API-Key": ALICE})
    assert status == 201 and sb["sandboxID"].startswith("gb" + tag("h1")[:8] + "0000"), sb
    try:
        for path in ("/e2b/sandboxes", "/e2b/v2/sandboxes"):
            status, listed, _ = g2.request("GET", path, token="", headers={"X-API-Key": ALICE})
            assert [s["sandboxID"] for s in listed] == [sb["sandboxID"]], (path, listed)
            status, listed, _ = g2.request("GET", path, token="", headers={"X-API-Key": BOB})
            assert listed == [], (path, listed)
        # The metadata filter, encoded as the SDKs send it (each key and
        # value quoted, the pairs urlencoded, the whole a query value),
        # reaches the peer encoded as it came.
        q = "metadata=" + urllib.parse.quote(urllib.parse.urlencode(
            {urllib.parse.quote("who"): urllib.parse.quote("alice & co=1")}), safe="")
        status, listed, _ = g2.request("GET", f"/e2b/v2/sandboxes?{q}", token="",
                                       headers={"X-API-Key": ALICE})
        assert [s["sandboxID"] for s in listed] == [sb["sandboxID"]], listed
        q = "metadata=" + "who%3Dalice"
        status, listed, _ = g2.request("GET", f"/e2b/v2/sandboxes?{q}", token="",
                                       headers={"X-API-Key": ALICE})
        assert listed == [], listed
    finally:
        g1.request("DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", token="",
                   headers={"X-API-Key": ALICE})


def test_e2b_list_pages_span_the_fleet(pair):
    """A page of the fleet's list is one page of all hosts' sandboxes in
    order (newest first), and its token goes on across hosts: limit=1 gives
    this host's newer sandbox, then the peer's older one, then no token."""
    g1, g2 = pair
    made = []
    for gw in (g1, g2):
        status, sb, _ = gw.request("POST", "/e2b/sandboxes",
                                   {"templateID": "code-interpreter-v1",
                                    "metadata": {"suite": "pages"}}, token="",
                                   headers={"X-API-Key": ALICE})
        assert status == 201, sb
        made.append(sb["sandboxID"])
        time.sleep(0.01)
    try:
        seen, token = [], None
        for _ in range(4):
            q = "metadata=suite%3Dpages&limit=1" + (f"&nextToken={token}" if token else "")
            status, listed, headers = g2.request("GET", f"/e2b/v2/sandboxes?{q}", token="",
                                                 headers={"X-API-Key": ALICE})
            assert status == 200 and len(listed) <= 1, listed
            seen += [s["sandboxID"] for s in listed]
            token = headers.get("X-Next-Token")
            if not token:
                break
        assert seen == made[::-1], (seen, made)
    finally:
        for gw, sid in zip((g1, g2), made):
            gw.request("DELETE", f"/e2b/sandboxes/{sid}", token="", headers={"X-API-Key": ALICE})


class SilentPeer:
    """Accepts connections and answers nothing (or a fixed reply)."""

    def __init__(self, reply=None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.held = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(c)
            if self.reply is not None:
                c.recv(65536)
                c.sendall(self.reply)
                c.close()

    def close(self):
        self.sock.close()
        for c in self.held:
            c.close()


def test_a_silent_or_broken_peer_is_left_out_and_named():
    silent = SilentPeer()
    broken = SilentPeer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nnot json!")
    dead_port = free_port()
    gw = start_gateway("--host-id", "h3", "--peer-timeout", "1",
                       "--peer", f"http://127.0.0.1:{silent.port}",
                       "--peer", f"http://127.0.0.1:{broken.port}",
                       "--peer", f"http://127.0.0.1:{dead_port}")
    try:
        kid = gw.start_kernel()
        t0 = time.time()
        status, listed, headers = gw.request("GET", "/api/kernels")
        took = time.time() - t0
        assert status == 200 and [k["id"] for k in listed] == [kid], listed
        missing = headers["X-Glovebox-Fleet-Missing"]
        assert f"http://127.0.0.1:{silent.port} (no answer in time)" in missing, missing
        assert f"http://127.0.0.1:{broken.port} (answered no list)" in missing, missing
        assert f"http://127.0.0.1:{dead_port} (cannot connect)" in missing, missing
        assert 0.9 < took < 10, took
        # The gateway goes on serving.
        assert gw.request("GET", f"/api/kernels/{kid}")[0] == 200
    finally:
        gw.stop()
        silent.close()
        broken.close()


def glovebox_on(port, state_dir, *args):
    """A gateway on a port chosen beforehand (start_gateway picks its own)."""
    return subprocess.Popen([BINARY, *EXTRA_ARGS, *cold_args(EXTRA_ARGS), "--listen", f"127.0.0.1:{port}", "--token",
                             ADMIN, "--state-dir", str(state_dir), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(proc):
    proc.terminate()
    try:
        return proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def test_a_peer_with_this_hosts_id_refuses_the_start(tmp_path):
    first = start_gateway("--host-id", "dup1")
    try:
        run = subprocess.run([BINARY, *EXTRA_ARGS, *cold_args(EXTRA_ARGS), "--listen", f"127.0.0.1:{free_port()}",
                              "--token", ADMIN, "--state-dir", str(tmp_path), "--host-id", "dup1",
                              "--peer", first.base], capture_output=True, text=True, timeout=30)
        assert run.returncode != 0 and "serving at" not in run.stdout, run
        assert (f"the gateway at --peer {first.base} has this host's --host-id dup1"
                in run.stderr), run.stderr
        assert "start each host of a fleet with a --host-id of its own" in run.stderr
        # The first logs the call it refused, naming where it came from.
        assert ("refused a call from the gateway at 127.0.0.1: it says its --host-id is dup1"
                in first.read_log()), first.read_log()[-2000:]
        assert first.request("GET", "/api/kernels")[0] == 200
        # Control: another id next to it starts.
        other = start_gateway("--host-id", "dup2", "--peer", first.base)
        other.stop()
    finally:
        first.stop()


def test_a_duplicate_that_starts_later_is_refused_and_named(tmp_path):
    """A peer that was down when this host started is not checked then; a
    gateway with this host's id started there later refuses its calls,
    and both sides log it."""
    later_port = free_port()
    gw = start_gateway("--host-id", "dup3", "--peer", f"http://127.0.0.1:{later_port}")
    later = glovebox_on(later_port, tmp_path, "--host-id", "dup3")
    try:
        assert "serving at" in later.stdout.readline()
        status, listed, headers = gw.request("GET", "/api/kernels")
        assert status == 200 and listed == [], (status, listed)
        assert (f"http://127.0.0.1:{later_port} (has this host's --host-id)"
                in headers["X-Glovebox-Fleet-Missing"]), headers
        assert (f"--peer http://127.0.0.1:{later_port} refused this host's list request: it "
                "has this host's --host-id dup3" in gw.read_log()), gw.read_log()[-2000:]
        # Its own answer: 409, JSON, whatever the route and credentials.
        status, body, _ = gw.request("GET", "/api/health", token="",
                                     headers={"X-Glovebox-Fleet-Peer": "dup3"})
        assert status == 409 and body["reason"] == "duplicate host id", (status, body)
        assert gw.request("GET", "/api/health", token="",
                          headers={"X-Glovebox-Fleet-Peer": "dup4"})[0] == 200
    finally:
        _, err = stop(later)
        gw.stop()
    assert "refused a call from the gateway at 127.0.0.1: it says its --host-id is dup3" in err


@pytest.mark.parametrize("args, message", [
    (["--host-id", "H1"], "--host-id must be"),
    (["--host-id", "toolong7"], "--host-id must be"),
    (["--host-id", "h1", "--peer", "http://localhost:8888"], "numeric address"),
    (["--host-id", "h1", "--peer", "https://127.0.0.1:8888"], "numeric address"),
    (["--peer", "http://127.0.0.1:8888"], "--peer needs --host-id"),
    (["--agent-listen", "somewhere:99"], "--agent-listen must be"),
])
def test_bad_fleet_flags_are_refused(args, message):
    run = subprocess.run([BINARY, "--check-config", "--token", ADMIN] + args,
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0 and message in run.stderr, (run.returncode, run.stderr)


def test_agent_answers_capacity_then_drain():
    agent = free_port()
    gw = start_gateway("--host-id", "h4", "--agent-listen", f"127.0.0.1:{agent}",
                       "--max-kernels", "4")

    def line():
        with socket.create_connection(("127.0.0.1", agent), timeout=5) as s:
            return s.recv(100).decode()

    try:
        assert line().startswith("up ready ")
        kid = gw.start_kernel()
        # One of four slots taken: at most 75 % free.
        assert 1 <= int(line().split()[2].rstrip("%")) <= 75, line()
        status, body, _ = gw.request("POST", "/api/fleet/drain")
        assert status == 200 and body["draining"] and body["kernels"] == 1, body
        assert line() == "drain\n"
        status, body, _ = gw.request("POST", "/e2b/sandboxes", {}, token="",
                                     headers={"X-API-Key": gw.token})
        assert status == 503 and "draining" in body["message"], body
        status, body, _ = gw.request("POST", "/api/sessions", {
            "kernel": {"name": "python3"}, "path": "x.ipynb", "type": "notebook"})
        assert status == 503, body
        # An existing kernel still runs and still gets sessions.
        status, body, _ = gw.request("POST", "/api/sessions", {
            "kernel": {"id": kid}, "path": "y.ipynb", "type": "notebook"})
        assert status == 201, body
        assert gw.request("DELETE", "/api/fleet/drain")[1]["draining"] is False
        assert line().startswith("up ready ")
        assert gw.request("GET", "/api/fleet", token="nope-nope-nope")[0] in (401, 403)
    finally:
        gw.stop()


def page_short_id(kernel_id):
    """The short id the page's kernel picker shows (static/ids.js), run
    under Node."""
    ids = os.path.join(os.path.dirname(__file__), "..", "..", "static", "ids.js")
    out = subprocess.run(
        ["node", "--input-type=module", "-e",
         f"const m = await import({json.dumps('file://' + os.path.abspath(ids))});"
         f"process.stdout.write(m.shortId({json.dumps(kernel_id)}))"],
        capture_output=True, text=True, timeout=30, check=True)
    return out.stdout


def test_short_ids_tell_a_hosts_kernels_apart():
    """With --host-id every id starts with the host's tag: the short id of
    log lines, connection files and the page's picker is taken from the
    random end of the id instead (issue 25, item 10)."""
    gw = start_gateway("--host-id", "h3")
    try:
        kids = [gw.start_kernel() for _ in range(2)]
        shorts = [kid[-8:] for kid in kids]
        assert all(kid.startswith(tag("h3")) for kid in kids), kids
        assert shorts[0] != shorts[1], kids
        for kid, short in zip(kids, shorts):
            reply, out, _ = run_cell(gw, kid, "import os; print(sorted(os.listdir('/run/kernel')))")
            assert reply["status"] == "ok", reply
            assert f"'{short}.json'" in out, (short, out)
            if shutil.which("node"):
                assert page_short_id(kid) == short, kid
        log = gw.read_log()
        for short in shorts:
            assert f"[{short}] started pid" in log, (short, log[-3000:])
        assert f"[{tag('h3')[:8]}]" not in log, log[-3000:]
    finally:
        gw.stop()
