"""E2B's envd directory watchers, spoken raw: WatchDir's stream and the
polled watchers, their bounds (watchers per sandbox and per gateway,
watched directories, queued events) with their in-band notices, bad input,
and their end with their client or their sandbox. (The SDKs' own use is in
tests/e2b.)"""
import base64
import http.client
import json
import socket
import time
import urllib.request

import pytest

from gbclient import (connect_frames, e2b_create, e2b_kill, envd_envelope, envd_headers,
                      envd_rpc, envd_sh, start_gateway)

LIMITS = ["--watch-max-watchers", "2", "--watch-max-watchers-per-sandbox", "1",
          "--watch-max-dirs-per-sandbox", "3", "--watch-queue-events", "16"]


@pytest.fixture(scope="module")
def gw():
    g = start_gateway(*LIMITS)
    yield g
    g.stop()


@pytest.fixture
def sb(gw):
    s = e2b_create(gw)
    yield s
    e2b_kill(gw, s)


def create(gw, sb, path, recursive=False, auth=None):
    return envd_rpc(gw, sb, "filesystem.Filesystem/CreateWatcher",
                    {"path": path, "recursive": recursive}, auth)


def events(gw, sb, wid):
    status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    assert status == 200, reply
    return reply.get("events", [])


def poll(gw, sb, wid, done, timeout=20):
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        seen += events(gw, sb, wid)
        if done(seen):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"not seen in time: {seen}")


def remove(gw, sb, wid):
    status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})
    assert status == 200, reply


def create_until_room(gw, sb, path, timeout=10):
    """CreateWatcher, retried while a watcher that is ending still counts."""
    deadline = time.time() + timeout
    while True:
        status, reply = create(gw, sb, path)
        if status == 200 or time.time() > deadline:
            return status, reply
        time.sleep(0.1)


def test_polled_watcher_reports_and_bounds_what_it_holds(gw, sb):
    envd_sh(gw, sb, "mkdir -p /home/user/t")
    status, reply = create(gw, sb, "/home/user/t")
    assert status == 200, reply
    wid = reply["watcherId"]
    assert events(gw, sb, wid) == []
    envd_sh(gw, sb, "cd /home/user/t && echo 1 > a && chmod 600 a && mv a b && rm b")
    seen = poll(gw, sb, wid, lambda s: {"name": "b", "type": "EVENT_TYPE_REMOVE"} in s)
    assert [(e["name"], e["type"]) for e in seen] == [
        ("a", "EVENT_TYPE_CREATE"), ("a", "EVENT_TYPE_WRITE"), ("a", "EVENT_TYPE_CHMOD"),
        ("a", "EVENT_TYPE_RENAME"), ("b", "EVENT_TYPE_CREATE"), ("b", "EVENT_TYPE_REMOVE")]
    # 40 files make 80 events; 16 wait for the client, then a notice of the rest.
    envd_sh(gw, sb, "cd /home/user/t && for i in $(seq 40); do echo > f$i; done")
    time.sleep(1)
    seen = events(gw, sb, wid)
    assert len(seen) == 17, seen
    assert all(e["type"] != "EVENT_TYPE_UNSPECIFIED" for e in seen[:16]), seen
    assert seen[16]["type"] == "EVENT_TYPE_UNSPECIFIED", seen
    assert "64 events were dropped" in seen[16]["name"], seen
    assert events(gw, sb, wid) == []
    # One watcher per sandbox here: a second is refused by name...
    status, reply = create(gw, sb, "/home/user")
    assert status == 429 and reply["code"] == "resource_exhausted", reply
    assert "too many directory watchers in this sandbox" in reply["message"]
    # ...until the first is removed.
    remove(gw, sb, wid)
    status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/GetWatcherEvents",
                             {"watcherId": wid})
    assert status == 404 and reply["code"] == "not_found", reply
    status, reply = create(gw, sb, "/home/user")
    assert status == 200, reply
    remove(gw, sb, reply["watcherId"])


def test_recursive_watch_stops_at_the_directory_limit(gw, sb):
    # Three watched directories per sandbox: the top and two of five below.
    envd_sh(gw, sb, "mkdir -p /home/user/r/d1 /home/user/r/d2 /home/user/r/d3 "
                    "/home/user/r/d4 /home/user/r/d5")
    status, reply = create(gw, sb, "/home/user/r", recursive=True)
    assert status == 200, reply
    wid = reply["watcherId"]
    seen = events(gw, sb, wid)
    assert len(seen) == 1 and seen[0]["type"] == "EVENT_TYPE_UNSPECIFIED", seen
    assert "limit of 3 watched directories" in seen[0]["name"], seen
    envd_sh(gw, sb, "for d in 1 2 3 4 5; do echo > /home/user/r/d$d/x; done")
    seen = poll(gw, sb, wid, lambda s: len(s) >= 4)
    time.sleep(0.5)
    seen += events(gw, sb, wid)
    names = sorted(e["name"] for e in seen)
    # Two subdirectories are watched (each a create and a write), no more.
    assert len(names) == 4 and len({n.split("/")[0] for n in names}) == 2, names
    remove(gw, sb, wid)
    # Thousands of directories, existing and new, cost no more watches.
    envd_sh(gw, sb, "mkdir /home/user/many && cd /home/user/many && seq 5000 | xargs mkdir")
    status, reply = create(gw, sb, "/home/user/many", recursive=True)
    assert status == 200, reply
    wid = reply["watcherId"]
    envd_sh(gw, sb, "cd /home/user/many && seq 5001 7000 | xargs mkdir")
    time.sleep(1)
    seen = events(gw, sb, wid)
    notices = [e for e in seen if e["type"] == "EVENT_TYPE_UNSPECIFIED"]
    assert "limit of 3 watched directories" in notices[0]["name"], notices
    # A file in each of the 7000: the two watched report theirs, no other
    # does (and a watch that reported nothing would fail here).
    envd_sh(gw, sb, "cd /home/user/many && python3 -c "
                    "\"import os; [open(d + '/f', 'w').close() for d in os.listdir('.')]\"")

    def watched(seen):
        return {e["name"].split("/")[0] for e in seen if "/" in e["name"]}

    seen = poll(gw, sb, wid, lambda s: len(watched(s)) >= 2)
    time.sleep(0.5)
    seen += events(gw, sb, wid)
    assert len(watched(seen)) == 2, seen
    assert all(e["name"].endswith("/f") for e in seen if "/" in e["name"]), seen
    remove(gw, sb, wid)


def test_bad_requests_are_refused_clearly(gw, sb):
    cases = [({"path": "/home/user/none"}, 404, "not_found"),
             ({"path": "/home/user/.profile"}, 400, "invalid_argument"),
             ({"path": "/home/user", "recursive": "yes"}, 400, "invalid_argument"),
             ({"recursive": True}, 400, "invalid_argument"),
             ({"path": "/etc/shadow"}, 404, "not_found")]
    envd_sh(gw, sb, "touch /home/user/.profile")
    for body, status, code in cases:
        got, reply = envd_rpc(gw, sb, "filesystem.Filesystem/CreateWatcher", body)
        assert (got, reply["code"]) == (status, code), (body, reply)
    got, reply = envd_rpc(gw, sb, "filesystem.Filesystem/GetWatcherEvents", {"watcherId": "x"})
    assert got == 404 and reply["code"] == "not_found"
    got, reply = envd_rpc(gw, sb, "filesystem.Filesystem/RemoveWatcher", {})
    assert got == 404
    got, reply = envd_rpc(gw, sb, "filesystem.Filesystem/CreateWatcher", {"path": "/home/user"},
                          auth="Basic " + base64.b64encode(b"admin:").decode())
    assert got == 400 and "use 'user' or 'root'" in reply["message"], reply
    # A malformed stream request ends its stream with the error.
    status, data = stream_request(gw, sb, b"\0\0\0\0\x09not json!")
    assert status == 200
    assert connect_frames(data)[-1][1]["error"]["code"] == "invalid_argument"
    # The gateway carries on.
    status, reply = create(gw, sb, "/home/user")
    assert status == 200, reply
    remove(gw, sb, reply["watcherId"])


def stream_request(gw, sb, body, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
    headers = dict(envd_headers(sb), **{"Content-Type": "application/connect+json"})
    conn.request("POST", "/e2b/filesystem.Filesystem/WatchDir", body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def open_stream(gw, sb, path, recursive=False, extra=None):
    """A WatchDir stream on a raw socket; returns (socket, reader of frames)."""
    body = envd_envelope({"path": path, "recursive": recursive})
    headers = dict(envd_headers(sb), **{"Content-Type": "application/connect+json",
                                        "Content-Length": str(len(body))}, **(extra or {}))
    s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    head = "POST /e2b/filesystem.Filesystem/WatchDir HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    s.sendall(head.encode() + body)
    buf = b""

    def frames(until, timeout=20):
        nonlocal buf
        got = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            # Chunked transfer: strip chunk sizes as they come.
            got = chunked_frames(buf)
            if until(got):
                return got
            s.settimeout(max(0.1, deadline - time.time()))
            try:
                piece = s.recv(65536)
            except socket.timeout:
                continue
            if not piece:
                break
            buf += piece
        return chunked_frames(buf)
    return s, frames


def chunked_frames(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    data = b""
    if b"chunked" in head.lower():
        while body:
            size_line, sep, rest = body.partition(b"\r\n")
            if not sep:
                break
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0 or len(rest) < size:
                data += rest[:size] if size else b""
                break
            data += rest[:size]
            body = rest[size + 2:]
    else:
        data = body
    frames = []
    while len(data) >= 5:
        n = int.from_bytes(data[1:5], "big")
        if len(data) < 5 + n:
            break
        frames.append((data[0], json.loads(data[5:5 + n])))
        data = data[5 + n:]
    return frames


def test_stream_events_keepalives_and_its_end_with_the_client(gw, sb):
    envd_sh(gw, sb, "mkdir -p /home/user/s")
    s, frames = open_stream(gw, sb, "/home/user/s", recursive=True,
                            extra={"Keepalive-Ping-Interval": "1"})
    got = frames(lambda f: len(f) >= 1)
    assert got[0][1] == {"start": {}}, got
    envd_sh(gw, sb, "mkdir /home/user/s/sub")
    frames(lambda f: any(x[1].get("filesystem", {}).get("name") == "sub" for x in f))
    envd_sh(gw, sb, "echo hi > /home/user/s/sub/f")
    got = frames(lambda f: any(x[1].get("filesystem", {}).get("name") == "sub/f" and
                               x[1]["filesystem"]["type"] == "EVENT_TYPE_WRITE" for x in f)
                 and any("keepalive" in x[1] for x in f))
    fs = [x[1]["filesystem"] for x in got if "filesystem" in x[1]]
    assert {"name": "sub/f", "type": "EVENT_TYPE_CREATE"} in fs, fs
    # The only watcher this sandbox may have: a new one waits for the
    # stream's client to leave.
    status, reply = create(gw, sb, "/home/user")
    assert status == 429, reply
    s.close()
    status, reply = create_until_room(gw, sb, "/home/user")
    assert status == 200, reply
    remove(gw, sb, reply["watcherId"])


def test_stream_ends_when_its_directory_goes(gw, sb):
    envd_sh(gw, sb, "mkdir -p /home/user/gone")
    s, frames = open_stream(gw, sb, "/home/user/gone")
    assert frames(lambda f: len(f) >= 1)[0][1] == {"start": {}}
    envd_sh(gw, sb, "touch /home/user/gone/x && rm -r /home/user/gone")
    got = frames(lambda f: f and f[-1][0] & 2)
    s.close()
    fs = [x[1]["filesystem"] for x in got if "filesystem" in x[1]]
    assert fs[:1] == [{"name": "x", "type": "EVENT_TYPE_CREATE"}], got
    assert {"name": "x", "type": "EVENT_TYPE_REMOVE"} in fs, got
    assert got[-1][0] & 2 and got[-1][1] == {}, got


def test_stream_ends_at_its_timeout(gw, sb):
    s, frames = open_stream(gw, sb, "/home/user", extra={"Connect-Timeout-Ms": "500"})
    got = frames(lambda f: f and f[-1][0] & 2)
    s.close()
    assert got[0][1] == {"start": {}}, got
    assert got[-1][0] & 2 and got[-1][1]["error"]["code"] == "deadline_exceeded", got


def gauge(gw, name):
    """A gauge's value in /metrics."""
    req = urllib.request.Request(gw.base + "/metrics")
    req.add_header("Authorization", f"Bearer {gw.token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


def test_watchers_end_with_their_sandbox(gw):
    # Two watchers in the whole gateway: a third sandbox's waits for one.
    a, b, c = e2b_create(gw), e2b_create(gw), e2b_create(gw)
    try:
        assert create(gw, a, "/home/user")[0] == 200
        s, frames = open_stream(gw, b, "/home/user")
        assert frames(lambda f: len(f) >= 1)[0][1] == {"start": {}}
        status, reply = create(gw, c, "/home/user")
        assert status == 429 and "in the gateway" in reply["message"], reply
        # The stream of a sandbox that goes away is cut short, as E2B's is
        # when a sandbox goes (no end-of-stream message: the SDK then asks
        # whether the sandbox is there), and its room is free.
        assert e2b_kill(gw, b) == 204
        start = time.time()
        got = frames(lambda f: False, timeout=10)
        assert time.time() - start < 8, "the connection was closed"
        assert not any(flags & 2 for flags, _ in got), got
        s.settimeout(5)
        assert s.recv(1) == b""
        s.close()
        assert create_until_room(gw, c, "/home/user")[0] == 200
        status, reply = create(gw, c, "/tmp")
        assert status == 429, reply
        assert gauge(gw, "glovebox_e2b_watchers") == 2
        assert gauge(gw, "glovebox_e2b_watched_directories") == 2
        assert e2b_kill(gw, a) == 204
        assert e2b_kill(gw, c) == 204
        assert gauge(gw, "glovebox_e2b_watchers") == 0
        assert gauge(gw, "glovebox_e2b_watched_directories") == 0
        d = e2b_create(gw)
        try:
            assert create_until_room(gw, d, "/home/user")[0] == 200
        finally:
            e2b_kill(gw, d)
    finally:
        for x in (a, b, c):
            e2b_kill(gw, x)


def test_root_watches_what_only_root_may_read(gw, sb):
    root = "Basic " + base64.b64encode(b"root:").decode()
    envd_sh(gw, sb, "mkdir -p /home/user/p/q && chmod 700 /home/user/p", auth=root)
    envd_sh(gw, sb, "chown 0:0 /home/user/p", auth=root)
    status, reply = create(gw, sb, "/home/user/p/q")
    assert status == 403 and reply["code"] == "permission_denied", reply
    status, reply = create(gw, sb, "/home/user/p/q", auth=root)
    assert status == 200, reply
    envd_sh(gw, sb, "touch /home/user/p/q/z", auth=root)
    status, events_reply = envd_rpc(gw, sb, "filesystem.Filesystem/GetWatcherEvents",
                                    {"watcherId": reply["watcherId"]}, auth=root)
    deadline = time.time() + 10
    seen = events_reply["events"] if "events" in events_reply else []
    while not seen and time.time() < deadline:
        time.sleep(0.1)
        seen = events(gw, sb, reply["watcherId"])
    assert {"name": "z", "type": "EVENT_TYPE_CREATE"} in seen, seen
    remove(gw, sb, reply["watcherId"])
