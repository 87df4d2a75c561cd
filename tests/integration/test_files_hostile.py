"""The file routes against what a sandbox can put at a path: a FIFO, a
terminal, a device, a very deep tree. Each is refused or bounded at once;
the gateway's one thread never waits on them, never chowns a host device
for the sandbox's root, and never recurses without bound."""
import base64
import os
import time
import urllib.request

import pytest

from gbclient import e2b_create, e2b_kill, envd_headers, envd_rpc, envd_sh, start_gateway

ROOT = "Basic " + base64.b64encode(b"root:").decode()


@pytest.fixture(scope="module")
def gw():
    g = start_gateway()
    yield g
    g.stop()


@pytest.fixture
def sb(gw):
    s = e2b_create(gw)
    yield s
    e2b_kill(gw, s)


def files(gw, sb, method, path, data=None, user=None, timeout=10):
    """GET or POST envd's /files (E2B's file transfer): (status, body)."""
    url = f"{gw.base}/e2b/files?path={path}" + (f"&username={user}" if user else "")
    req = urllib.request.Request(url, method=method, data=data)
    for k, v in envd_headers(sb).items():
        req.add_header(k, v)
    if data is not None:
        req.add_header("Content-Type", "application/octet-stream")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_fifo_or_a_terminal_is_refused_at_once(gw, sb):
    code, _, err = envd_sh(gw, sb, "mkfifo /home/user/p && python3 -c \"import os, pty; "
                                   "m, s = pty.openpty(); print(os.ttyname(s))\" > /dev/null")
    assert code == 0, err
    for path in ["/home/user/p", "/dev/tty", "/dev/pts/ptmx"]:
        for method, data in [("GET", None), ("POST", b"x")]:
            started = time.time()
            status, body = files(gw, sb, method, path, data)
            assert status >= 400, (path, method, status, body)
            assert time.time() - started < 5, (path, method)
    # The gateway still answers everyone.
    assert gw.request("GET", "/api/status")[0] == 200


def test_root_cannot_write_or_chown_a_device(gw, sb):
    before = os.stat("/dev/null")
    status, body = files(gw, sb, "POST", "/dev/null", b"x", user="root")
    assert status >= 400, (status, body)
    after = os.stat("/dev/null")
    assert (after.st_uid, after.st_gid, after.st_mode) == \
        (before.st_uid, before.st_gid, before.st_mode)
    # A regular file root makes is root's; one that exists keeps its owner.
    assert files(gw, sb, "POST", "/home/user/made-by-root", b"r", user="root")[0] == 200
    status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/Stat",
                             {"path": "/home/user/made-by-root"})
    assert status == 200 and reply["entry"]["owner"] == "root", reply
    assert files(gw, sb, "POST", "/home/user/mine", b"u")[0] == 200
    assert files(gw, sb, "POST", "/home/user/mine", b"rr", user="root")[0] == 200
    status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/Stat", {"path": "/home/user/mine"})
    assert status == 200 and reply["entry"]["owner"] == "user", reply
    assert files(gw, sb, "GET", "/home/user/mine")[1] == b"rr"


def test_a_very_deep_tree_is_listed_to_a_bounded_depth(gw, sb):
    code, _, err = envd_sh(gw, sb, "cd /home/user && for i in $(seq 1500); do mkdir d && cd d "
                                   "|| exit 1; done", timeout=120)
    assert code == 0, err
    status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/ListDir",
                             {"path": "/home/user", "depth": 100000})
    assert status == 200, reply
    deepest = max(e["path"].count("/d") for e in reply["entries"])
    assert deepest == 64, deepest
    assert gw.proc.poll() is None
