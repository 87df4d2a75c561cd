"""Egress per sandbox (gateway/kernels/egress.h, kernel-host/net.h) against a real
gateway, real kernels and real sandboxes, with a pretend internet of
network namespaces on this machine (testnet.py): nothing leaves it.

The operator allows 198.18.0.0/15 (both test networks, and this host's own
address on them) and the names public.gbtest, private.gbtest and
other.gbtest; it denies 198.18.2.0/24, the private network. Each denial is
shown beside a positive control that the same path works where allowed.
"""
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from conftest import run  # noqa: E402
from gbclient import start_gateway  # noqa: E402
import testnet  # noqa: E402
from testnet import HOST_PUBLIC, METADATA, PRIVATE, PUBLIC, PUBLIC_OTHER  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(os.access(t, os.X_OK) for t in
                                 ("/usr/sbin/nft", "/usr/sbin/dnsmasq", "/usr/sbin/ip")),
    reason="egress needs root, nftables, dnsmasq-base and iproute2")

RATE_KIB = 256
MAX_CONNECTIONS = 4

EGRESS_ARGS = ["--egress-allow", "198.18.0.0/15,public.gbtest",
               "--egress-allow", "private.gbtest,other.gbtest,metadata.gbtest,hostself.gbtest",
               "--egress-deny", "198.18.2.0/24",
               "--egress-dns", testnet.DNS,
               "--egress-rate-kib", str(RATE_KIB),
               "--egress-max-connections", str(MAX_CONNECTIONS)]

PROBE = r"""
import json, socket, urllib.request
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()[:40]
    except Exception as e:
        reason = getattr(e, "reason", e)
        return type(reason).__name__
def resolve(name):
    try:
        return socket.gethostbyname(name)
    except Exception as e:
        return type(e).__name__
print(json.dumps({"get": {u: get(u) for u in URLS}, "dns": {n: resolve(n) for n in NAMES}}))
"""


def probe(gw, kid, urls=(), names=()):
    code = f"URLS = {list(urls)!r}\nNAMES = {list(names)!r}\n" + PROBE
    content, stdout, _ = run(gw, kid, code, timeout=120)
    assert content["status"] == "ok", content
    return json.loads(stdout.strip().splitlines()[-1])


def host_links():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
            if line.split(":")[1].strip().startswith(("gbe", "gbi"))]


def tables():
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if "glovebox_gbe" in line]


def resolvers(gw):
    """The resolvers (dnsmasq) whose parent is one of this gateway's processes' children."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "--listen-address=100.127." in line]


def settle(timeout=10):
    """Deleting a kernel answers at once; its sandbox goes a moment later."""
    for _ in range(int(timeout / 0.05)):
        if not host_links() and not tables() and not resolvers(None):
            return
        time.sleep(0.05)
    raise AssertionError(f"left: {host_links()} {tables()} {resolvers(None)}")


@pytest.fixture(scope="module")
def net():
    t = testnet.TestNet().up()
    yield t
    t.down()


@pytest.fixture(scope="module")
def gateway(net):
    gw = start_gateway(*EGRESS_ARGS)
    yield gw
    gw.stop()


def start(gw, network):
    body = {"name": "python3"}
    if network is not None:
        body["network"] = network
    status, model, _ = gw.request("POST", "/api/kernels", body)
    assert status == 201, (status, model)
    return model


def stop(gw, kid):
    status, _, _ = gw.request("DELETE", f"/api/kernels/{kid}")
    assert status == 204


def test_operator_policy_reaches_allowed_refuses_denied(gateway):
    model = start(gateway, True)
    kid = model["id"]
    try:
        assert model["network"]["allowOut"] == ["198.18.0.0/15", "public.gbtest",
                                                "private.gbtest", "other.gbtest",
                                                "metadata.gbtest", "hostself.gbtest"]
        assert model["network"]["denyOut"] == ["198.18.2.0/24"]
        r = probe(gateway, kid,
                  urls=[f"http://{PUBLIC}/", f"http://{PUBLIC_OTHER}/", "http://public.gbtest/",
                        f"http://{PRIVATE}/", "http://private.gbtest/"],
                  names=["public.gbtest", "private.gbtest", "nothere.example"])
        # Allowed: by block, and by name.
        assert r["get"][f"http://{PUBLIC}/"] == "public"
        assert r["get"][f"http://{PUBLIC_OTHER}/"] == "public"
        assert r["get"]["http://public.gbtest/"] == "public"
        # Denied wins over the allowed block and the allowed name.
        assert r["get"][f"http://{PRIVATE}/"] == "ConnectionRefusedError"
        assert r["dns"]["private.gbtest"] == PRIVATE
        assert r["get"]["http://private.gbtest/"] == "ConnectionRefusedError"
        assert r["dns"]["public.gbtest"] == PUBLIC
    finally:
        stop(gateway, kid)


def test_host_and_metadata_unreachable(gateway, net):
    # Positive controls from the host itself: both servers answer there.
    import urllib.request
    assert urllib.request.urlopen(f"http://{HOST_PUBLIC}/", timeout=5).read() == b"host"
    assert urllib.request.urlopen(f"http://{METADATA}/", timeout=5).read() == b"public"
    model = start(gateway, True)
    kid = model["id"]
    try:
        # Within the allowed 198.18.0.0/15, yet this host's own address.
        r = probe(gateway, kid, urls=[f"http://{HOST_PUBLIC}/", f"http://{METADATA}/",
                                      f"http://{PUBLIC}/", "http://hostself.gbtest/",
                                      "http://metadata.gbtest/"],
                  names=["hostself.gbtest", "metadata.gbtest"])
        assert r["get"][f"http://{PUBLIC}/"] == "public"
        assert r["get"][f"http://{HOST_PUBLIC}/"] == "ConnectionRefusedError"
        assert r["get"][f"http://{METADATA}/"] == "ConnectionRefusedError"
        # Allowed names answering with those addresses: the host's own is
        # pinned and still refused; a link-local answer is dropped by the
        # resolver (DNS rebinding protection), so the name does not resolve.
        assert r["dns"]["hostself.gbtest"] == HOST_PUBLIC
        assert r["get"]["http://hostself.gbtest/"] == "ConnectionRefusedError"
        assert r["dns"]["metadata.gbtest"] == "gaierror"
        assert r["get"]["http://metadata.gbtest/"] == "gaierror"
        # The gateway itself, on loopback and on the sandbox's own link.
        content, stdout, _ = run(gateway, kid, f"""
import socket
gw = open('/etc/resolv.conf').read().split()[1]
for addr in [(gw, {gateway.port}), (gw, 22), ('{HOST_PUBLIC}', {gateway.port})]:
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect(addr); print('open', addr)
    except OSError as e:
        print(type(e).__name__, addr)
""")
        assert "open" not in stdout, stdout
        assert stdout.count("ConnectionRefusedError") == 3, stdout
    finally:
        stop(gateway, kid)


def test_request_narrows_and_dns_pins(gateway):
    model = start(gateway, {"allowOut": ["public.gbtest"]})
    kid = model["id"]
    try:
        assert model["network"]["allowOut"] == ["public.gbtest"]
        r = probe(gateway, kid, urls=["http://public.gbtest/", f"http://{PUBLIC_OTHER}/"],
                  names=["public.gbtest", "other.gbtest", "private.gbtest"])
        assert r["dns"]["public.gbtest"] == PUBLIC
        assert r["get"]["http://public.gbtest/"] == "public"
        # Names outside the request: no answer at all.
        assert r["dns"]["other.gbtest"] == "gaierror"
        assert r["dns"]["private.gbtest"] == "gaierror"
        # Only what the name's answer gave is reachable, not its neighbour.
        assert r["get"][f"http://{PUBLIC_OTHER}/"] == "ConnectionRefusedError"
    finally:
        stop(gateway, kid)


def test_deny_out_narrows(gateway):
    model = start(gateway, {"denyOut": [PUBLIC_OTHER, "other.gbtest"]})
    kid = model["id"]
    try:
        r = probe(gateway, kid, urls=[f"http://{PUBLIC}/", f"http://{PUBLIC_OTHER}/"],
                  names=["other.gbtest", "public.gbtest"])
        assert r["get"][f"http://{PUBLIC}/"] == "public"
        assert r["get"][f"http://{PUBLIC_OTHER}/"] == "ConnectionRefusedError"
        assert r["dns"]["other.gbtest"] == "gaierror"
        assert r["dns"]["public.gbtest"] == PUBLIC
    finally:
        stop(gateway, kid)


@pytest.mark.parametrize("network, field", [
    ({"allowOut": ["10.0.0.0/8"]}, "'10.0.0.0/8' is outside"),
    ({"allowOut": ["example.com"]}, "'example.com' is outside"),
    ({"allowOut": ["198.18.0.0/14"]}, "'198.18.0.0/14' is outside"),
    ({"allowOut": ["not a rule"]}, "network.allowOut[0]"),
    ({"allowOut": ["2001:db8::/32"]}, "IPv6"),
    ({"allowOut": [], "proxy": "x"}, "network.proxy"),
    ("yes", "\"network\" must be"),
])
def test_outside_policy_is_400(gateway, network, field):
    status, body, _ = gateway.request("POST", "/api/kernels",
                                      {"name": "python3", "network": network})
    assert status == 400, body
    assert field in body["message"], body


def test_default_sandbox_unchanged(gateway):
    status, model, _ = gateway.request("POST", "/api/kernels", {"name": "python3"})
    assert status == 201
    kid = model["id"]
    try:
        assert "network" not in model
        settle()
        before = host_links()
        content, stdout, _ = run(gateway, kid, """
import os, socket
print(sorted(n for _, n in socket.if_nameindex()))
print(repr(open('/etc/resolv.conf').read()))
try:
    socket.create_connection(('198.18.1.2', 80), timeout=3); print('connected')
except OSError as e:
    print(type(e).__name__, e.errno)
""")
        lines = stdout.strip().splitlines()
        assert lines[0] == "['lo']", stdout
        assert lines[1] == "''", stdout
        assert lines[2] == "OSError 101", stdout  # ENETUNREACH
        assert host_links() == before
    finally:
        stop(gateway, kid)


def test_bandwidth_cap(gateway):
    kid = start(gateway, True)["id"]
    try:
        content, stdout, _ = run(gateway, kid, f"""
import time, urllib.request
t = time.monotonic()
n = len(urllib.request.urlopen('http://{PUBLIC}/big', timeout=60).read())
print(n, time.monotonic() - t)
""", timeout=120)
        n, seconds = stdout.split()
        assert int(n) == testnet.BIG_BYTES
        # 1 MiB at 256 KiB/s, a burst of 256 KiB: at least ~2 s (unlimited
        # it takes milliseconds here).
        assert float(seconds) > 1.5, stdout
    finally:
        stop(gateway, kid)


def test_connection_cap(gateway):
    kid = start(gateway, True)["id"]
    try:
        content, stdout, _ = run(gateway, kid, f"""
import socket, time
held, results = [], []
for i in range({MAX_CONNECTIONS} + 2):
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect(('{PUBLIC}', 80)); held.append(s); results.append('ok')
    except OSError as e:
        results.append(type(e).__name__)
print(results)
for s in held:
    s.close()
time.sleep(1)
s = socket.create_connection(('{PUBLIC}', 80), timeout=5); print('again ok'); s.close()
""")
        assert stdout.splitlines()[0] == str(
            ["ok"] * MAX_CONNECTIONS + ["ConnectionRefusedError"] * 2), stdout
        assert "again ok" in stdout
    finally:
        stop(gateway, kid)


def test_everything_removed_when_the_sandbox_ends(gateway):
    settle()
    before_links, before_tables = host_links(), tables()
    kid = start(gateway, True)["id"]
    assert len(host_links()) == len(before_links) + 1
    assert len(tables()) == len(before_tables) + 1
    assert resolvers(gateway)
    stop(gateway, kid)
    for _ in range(100):
        if host_links() == before_links and tables() == before_tables and not resolvers(gateway):
            break
        time.sleep(0.05)
    assert host_links() == before_links
    assert tables() == before_tables
    assert not resolvers(gateway)


def test_killed_kernel_host_leaves_nothing(net):
    """SIGKILL to the kernel-host: its resolver dies with it (its pid
    namespace), the pair with the sandbox, and the table is removed by the
    next kernel-host (the gateway starts one at once, and the kernel starts
    again there, in a new sandbox with the same egress)."""
    settle()
    gw = start_gateway(*EGRESS_ARGS)
    try:
        kid = start(gw, True)["id"]
        old_links, old_tables, old_resolvers = host_links(), tables(), resolvers(gw)
        assert len(old_links) == 1 and len(old_tables) == 1 and len(old_resolvers) == 1
        host_pid = int(subprocess.run(["pgrep", "-P", str(gw.proc.pid), "-f", "kernel-host"],
                                      capture_output=True, text=True).stdout.split()[0])
        os.kill(host_pid, 9)

        def old_gone():
            return (not set(old_links) & set(host_links())
                    and not set(old_tables) & set(tables())
                    and not set(old_resolvers) & set(resolvers(gw)))
        for _ in range(200):
            if old_gone():
                break
            time.sleep(0.05)
        assert old_gone(), (host_links(), tables(), resolvers(gw))
        assert "network leftovers" in gw.read_log()
        # The kernel is back, with egress, on the new kernel-host.
        for _ in range(600):
            status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
            if model.get("execution_state") == "idle" and len(host_links()) == 1:
                break
            time.sleep(0.1)
        assert model["network"]["allowOut"][0] == "198.18.0.0/15"
        r = probe(gw, kid, urls=[f"http://{PUBLIC}/"])
        assert r["get"][f"http://{PUBLIC}/"] == "public"
        stop(gw, kid)
        settle()
    finally:
        gw.stop()


def test_gateway_stop_leaves_nothing(net):
    """A gateway stopped with a kernel that has egress: the kernel-host
    removes its resolver, table and pair as it exits."""
    settle()
    gw = start_gateway(*EGRESS_ARGS)
    try:
        start(gw, True)
        assert host_links() and tables() and resolvers(gw)
    finally:
        gw.stop()
    assert not host_links()
    assert not tables()
    assert not resolvers(gw)


def test_template_sandbox_with_egress(net):
    """A template's sandbox (--template) gets egress the same way: its
    /etc/resolv.conf names its resolver."""
    import shutil
    import tempfile
    from gbtemplate import make_tree
    tree = tempfile.mkdtemp(prefix="glovebox-template-")
    os.chmod(tree, 0o755)
    make_tree(tree)
    settle()
    gw = start_gateway(*EGRESS_ARGS, "--template", f"tpl={tree}")
    try:
        status, model, _ = gw.request("POST", "/api/kernels",
                                      {"template": "tpl", "network": {"allowOut": ["public.gbtest"]}})
        assert status == 201, model
        r = probe(gw, model["id"], urls=["http://public.gbtest/", f"http://{PUBLIC_OTHER}/"],
                  names=["other.gbtest"])
        assert r["get"]["http://public.gbtest/"] == "public"
        assert r["get"][f"http://{PUBLIC_OTHER}/"] == "ConnectionRefusedError"
        assert r["dns"]["other.gbtest"] == "gaierror"
        content, stdout, _ = run(gw, model["id"], "print(open('/etc/template-marker').read())")
        assert "only-in-the-template" in stdout
        stop(gw, model["id"])
        settle()
    finally:
        gw.stop()
        shutil.rmtree(tree)


CHAOS_PROBE = r"""
import random, socket, struct
server = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]
qid = random.randrange(65536)
name = b''.join(bytes([len(p)]) + p for p in b'version.bind'.split(b'.')) + b'\0'
query = struct.pack('>HHHHHH', qid, 0x0100, 1, 0, 0, 0) + name + struct.pack('>HH', 16, 3)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
s.sendto(query, (server, 53))
data = s.recv(4096)
flags, qd, an = struct.unpack('>HHH', data[2:8])
print(flags & 0xf, an, b'dnsmasq' in data.lower())
"""


def test_reserved_blocks_stay_closed_unless_the_operator_opens_them(net):
    """An allowed name answering in a block that is not globally routable
    (here 198.18.0.0/15, benchmarking; 100.64.0.0/10, carrier-grade NAT,
    is the same rule) is pinned but not reached: the operator opens such a
    block by naming it. And the resolver says nothing of itself (CHAOS
    version.bind)."""
    gw = start_gateway("--egress-allow", "public.gbtest", "--egress-dns", testnet.DNS)
    try:
        model = start(gw, True)
        kid = model["id"]
        try:
            r = probe(gw, kid, urls=["http://public.gbtest/"], names=["public.gbtest"])
            assert r["dns"]["public.gbtest"] == PUBLIC
            assert r["get"]["http://public.gbtest/"] == "ConnectionRefusedError"
            _, stdout, _ = run(gw, kid, CHAOS_PROBE)
            rcode, answers, named = stdout.split()
            assert answers == "0" and named == "False", stdout
        finally:
            stop(gw, kid)
    finally:
        gw.stop()
    # The same name with its block opened by the operator: reached.
    gw = start_gateway("--egress-allow", "public.gbtest,198.18.1.0/24", "--egress-dns",
                       testnet.DNS)
    try:
        model = start(gw, {"allowOut": ["public.gbtest"]})
        kid = model["id"]
        try:
            r = probe(gw, kid, urls=["http://public.gbtest/"], names=["public.gbtest"])
            assert r["get"]["http://public.gbtest/"] == "public"
        finally:
            stop(gw, kid)
    finally:
        gw.stop()
    settle()


HOLD_CONNECTION = r"""
import socket
x = 41
held = socket.create_connection(("public.gbtest", 80), timeout=5)
print(held.getsockname()[0], open('/etc/resolv.conf').read().split()[1])
"""

AFTER = r"""
def held_state():
    try:
        held.sendall(b"GET / HTTP/1.0\r\n\r\n")
        return "open " + repr(held.recv(64)[:12])
    except OSError as e:
        return type(e).__name__
s = socket.create_connection(("public.gbtest", 80), timeout=5)
print(x + 1, held_state(), s.getsockname()[0], open('/etc/resolv.conf').read().split()[1])
"""


def test_memory_pause_and_fork_keep_egress(net, tmp_path):
    """(Issue 24.) A kernel with egress is paused with its memory: its
    connections out are closed at the dump, its network (pair, rules,
    resolver) is gone while it is paused and comes back with the same
    policy at the resume; forks each get a network of their own (their
    own address and resolver, /etc/resolv.conf naming it), with the same
    policy. A pause that asks for files only is refused: the files alone
    would come back without the egress."""
    sys.path.insert(0, os.path.join(HERE, "..", "integration"))
    from test_pause_memory import CRIU, criu_usable
    if not criu_usable():
        pytest.skip(f"memory pause needs CRIU 4.1+ at {CRIU}")
    settle()
    before_links, before_tables = host_links(), tables()
    gw = start_gateway(*EGRESS_ARGS, "--state-dir", str(tmp_path / "state"), "--criu", CRIU)
    kids = []
    try:
        model = start(gw, {"allowOut": ["public.gbtest"]})
        kid = model["id"]
        kids.append(kid)
        content, stdout, _ = run(gw, kid, HOLD_CONNECTION)
        assert content["status"] == "ok", content
        address, nameserver = stdout.split()
        assert address.startswith("100.127.") and nameserver.startswith("100.127."), stdout
        assert len(host_links()) == len(before_links) + 1

        status, paused, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
        assert status == 200 and paused["paused"] == {"memory_kept": True}, paused
        # Nothing of its network is left while it sleeps.
        assert host_links() == before_links and tables() == before_tables
        assert not resolvers(None)

        status, resumed, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
        assert status == 200, resumed
        assert resumed["network"] == model["network"], (resumed, model)
        content, stdout, _ = run(gw, kid, AFTER)
        assert content["status"] == "ok", content
        count, held, new_address, new_nameserver = stdout.split()
        assert count == "42"
        # The connection held across the pause was closed at the dump.
        assert not held.startswith("open"), stdout
        assert new_address.startswith("100.127.") and new_nameserver.startswith("100.127.")
        r = probe(gw, kid, urls=[f"http://{PUBLIC}/", f"http://{PUBLIC_OTHER}/",
                                 "http://public.gbtest/", f"http://{PRIVATE}/"],
                  names=["public.gbtest", "other.gbtest"])
        # The same policy: the request's narrowing holds (only the
        # allowed name, and what it resolved to), names resolve.
        assert r["get"]["http://public.gbtest/"] == "public"
        assert r["get"][f"http://{PUBLIC}/"] == "public"
        assert r["get"][f"http://{PUBLIC_OTHER}/"] == "ConnectionRefusedError"
        assert r["get"][f"http://{PRIVATE}/"] == "ConnectionRefusedError"
        assert r["dns"]["public.gbtest"] == PUBLIC
        assert r["dns"]["other.gbtest"] == "gaierror"
        assert len(host_links()) == len(before_links) + 1

        status, body, _ = gw.request("POST", f"/api/kernels/{kid}/fork", {"count": 2})
        assert status == 201, body
        copies = [k["id"] for k in body["kernels"]]
        kids += copies
        assert len(host_links()) == len(before_links) + 3
        addresses = {new_address}
        for copy in copies:
            content, stdout, _ = run(gw, copy, AFTER.replace("x + 1, held_state()", "x + 1, '-'"))
            assert content["status"] == "ok", content
            count, _, copy_address, copy_nameserver = stdout.split()
            assert count == "42"
            addresses.add(copy_address)
            # Its own resolver, named in its own /etc/resolv.conf.
            assert copy_nameserver != new_nameserver, stdout
            r = probe(gw, copy, urls=["http://public.gbtest/", f"http://{PRIVATE}/"],
                      names=["public.gbtest", "other.gbtest"])
            assert r["get"]["http://public.gbtest/"] == "public", r
            assert r["get"][f"http://{PRIVATE}/"] == "ConnectionRefusedError", r
            assert r["dns"]["other.gbtest"] == "gaierror", r
        assert len(addresses) == 3, addresses
        # The source runs on with its network.
        r = probe(gw, kid, urls=["http://public.gbtest/"])
        assert r["get"]["http://public.gbtest/"] == "public"

    finally:
        for k in kids:
            gw.request("DELETE", f"/api/kernels/{k}")
        gw.stop()
    settle()
    assert host_links() == before_links and tables() == before_tables
