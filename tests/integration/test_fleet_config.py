"""deploy/haproxy/fleet-config, the command that writes HAProxy's
configuration for several hosts (docs/several-hosts.md): what it writes
passes `haproxy -c`, plain and with TLS, routes each host's ids to that
host's backend with that host's 503 answer, reads each host's agent where
it is, and bad lists are refused with the reason and nothing written.
tests/sandbox/test_fleet.py runs its output in front of real gateways."""
import json
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "deploy", "haproxy", "fleet-config")

needs_haproxy = pytest.mark.skipif(shutil.which("haproxy") is None,
                                   reason="needs haproxy (Debian's)")


def run(*args):
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True)


def haproxy_check(cfg):
    r = subprocess.run(["haproxy", "-c", "-f", cfg], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def three_hosts(tmp_path, *extra):
    cfg = tmp_path / "haproxy.cfg"
    r = run("--listen", "127.0.0.1:19401", "--output", str(cfg),
            "--stats-socket", str(tmp_path / "admin.sock"),
            "--host", "h1=10.0.0.11:8888", "--host", "h2=10.0.0.12:8888",
            "--host", "web3=10.0.0.13:9000,agent=10.0.1.13:7777", *extra)
    assert r.returncode == 0, r.stderr
    return cfg, cfg.read_text()


@needs_haproxy
def test_the_configuration_passes_haproxy_check(tmp_path):
    cfg, text = three_hosts(tmp_path)
    haproxy_check(str(cfg))
    assert "@" not in "".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    assert "    bind 127.0.0.1:19401\n" in text


def test_each_host_gets_its_ids_its_backend_and_its_503(tmp_path):
    cfg, text = three_hosts(tmp_path)
    # The tags protocol/fleetid.c puts in ids: hex of the name, zero padded.
    for host, tag, server in (("h1", "683100000000", "10.0.0.11:8888"),
                              ("h2", "683200000000", "10.0.0.12:8888"),
                              ("web3", "776562330000", "10.0.0.13:9000")):
        uuid = f"{tag[:8]}-{tag[8:]}-"
        assert (f"acl id_{host} path_beg /api/kernels/{uuid} /api/sessions/{uuid} "
                f"/e2b/sandboxes/gb{tag} /e2b/v2/sandboxes/gb{tag}") in text
        assert f"acl id_{host} hdr_beg(e2b-sandbox-id) gb{tag}\n" in text
        assert f"acl id_{host} hdr_beg(mcp-session-id) {uuid}\n" in text
        assert f"use_backend host_{host} if id_{host}\n" in text
        backend = text.split(f"backend host_{host}\n")[1].split("\nbackend ")[0]
        errorfile = re.search(r"errorfile 503 (\S+)", backend).group(1)
        assert errorfile == str(tmp_path / "glovebox-errors" / f"{host}-503.http")
        assert f"server {host} {server}\n" in backend
        with open(errorfile, newline="") as f:
            head, body = f.read().split("\r\n\r\n", 1)
        assert head.startswith("HTTP/1.1 503 ") and f"Content-Length: {len(body)}" in head
        assert json.loads(body) == {
            "message": f"Host {host} is down: its kernels and sandboxes are gone with it",
            "reason": "host down", "host": host}
    spread = text.split("\nbackend spread\n")[1]
    assert "server h1 10.0.0.11:8888 weight 100 " in spread
    assert "agent-addr 10.0.0.11 agent-port 9999 " in spread
    assert "agent-addr 10.0.1.13 agent-port 7777 " in spread


@needs_haproxy
def test_tls_at_the_front(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl to make a certificate")
    pem = tmp_path / "front.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=glovebox.test", "-keyout", str(pem), "-out", str(pem)],
                   check=True, capture_output=True)
    cfg, text = three_hosts(tmp_path, "--tls-cert", str(pem))
    assert f"    bind 127.0.0.1:19401 ssl crt {pem}\n" in text
    haproxy_check(str(cfg))


@pytest.mark.parametrize("hosts,reason", [
    ([], "give every host"),
    (["h1=10.0.0.11:8888", "h1=10.0.0.12:8888"], "'h1' is given twice"),
    (["H1=10.0.0.11:8888"], "must be 1 to 6 of a-z and 0-9"),
    (["toolong7=10.0.0.11:8888"], "must be 1 to 6 of a-z and 0-9"),
    (["h1:10.0.0.11:8888"], "give ID=ADDRESS:PORT"),
    (["h1=10.0.0.11"], "give ADDRESS:PORT"),
    (["h1=10.0.0.11:70000"], "give ADDRESS:PORT"),
    (["h1=10.0.0.11:8888", "h2=10.0.0.11:8888"], "the same ADDRESS:PORT"),
    (["h1=10.0.0.11:8888,agnt=1.2.3.4:5"], "agent=ADDRESS:PORT"),
])
def test_bad_lists_are_refused_and_nothing_is_written(tmp_path, hosts, reason):
    args = ["--listen", ":80", "--output", str(tmp_path / "haproxy.cfg")]
    for h in hosts:
        args += ["--host", h]
    r = run(*args)
    assert r.returncode == 2 and reason in r.stderr, (r.returncode, r.stderr)
    assert os.listdir(tmp_path) == []


def test_a_missing_certificate_is_refused(tmp_path):
    r = run("--listen", ":443", "--output", str(tmp_path / "haproxy.cfg"),
            "--host", "h1=10.0.0.11:8888", "--tls-cert", str(tmp_path / "none.pem"))
    assert r.returncode == 2 and "none.pem: no such file" in r.stderr, r.stderr
    assert os.listdir(tmp_path) == []


@needs_haproxy
def test_the_front_caps_connections_per_client(tmp_path):
    """Behind the proxy the gateways see one address; the cap per client
    is the proxy's: past it a JSON 429, past twice closed unanswered."""
    cfg, _ = three_hosts(tmp_path, "--max-connections-per-client", "2")
    proxy = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    held = []
    try:
        deadline = time.time() + 20
        while True:
            try:
                held.append(socket.create_connection(("127.0.0.1", 19401), timeout=5))
                break
            except OSError:
                assert time.time() < deadline, "haproxy did not start"
                time.sleep(0.05)
        held.append(socket.create_connection(("127.0.0.1", 19401), timeout=5))
        # A connection counts once haproxy has accepted it, which may come
        # after the kernel completed it: a third that came first is under
        # the cap and goes to a backend (none of ours listens there; what
        # the machine's network answers, if anything, is not the cap's), so
        # it is closed and another tried, until haproxy counts the two.
        while True:
            third = socket.create_connection(("127.0.0.1", 19401), timeout=2)
            third.sendall(b"GET /api HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            try:
                while b"\r\n\r\n" not in answer or not answer.endswith(b"}\n"):
                    chunk = third.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
            except TimeoutError:
                pass
            third.close()
            if answer.startswith(b"HTTP/1.1 429 ") or time.time() > deadline + 20:
                break
            time.sleep(0.2)
        head, body = answer.decode().split("\r\n\r\n", 1)
        assert head.startswith("HTTP/1.1 429 "), head
        assert json.loads(body)["message"] == (
            "Too many connections from your address: at most 2 at once"), body
        # The third is closed after its answer: four held (sending nothing)
        # make twice the cap, and the next is closed at once. They are opened
        # afresh: haproxy closes one that sent nothing for its 15 s
        # http-request timeout, which the two held since the start may have
        # reached on a loaded machine, and then it counts fewer.
        for s in held:
            s.close()
        held = []

        def hold_four():
            for s in held:
                s.close()
            held[:] = [socket.create_connection(("127.0.0.1", 19401), timeout=5)
                       for _ in range(4)]
            return time.time()
        opened = hold_four()
        # Counted once haproxy has accepted them (see above): until then the
        # next is answered (429 under twice the cap, or passed on under the
        # cap), and is tried again; on held ones not yet timed out.
        end = time.time() + 20
        while True:
            if time.time() - opened > 10:
                opened = hold_four()
            try:
                fifth = socket.create_connection(("127.0.0.1", 19401), timeout=5)
                fifth.sendall(b"GET /api HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                got = fifth.recv(4096)
                fifth.close()
            except (ConnectionResetError, BrokenPipeError):
                got = b""
            if got == b"":
                break
            assert time.time() < end, got
            time.sleep(0.2)
    finally:
        for s in held:
            s.close()
        proxy.kill()
        proxy.wait()
