"""E2B's envd file features as Glovebox serves them, spoken raw: file
metadata (user.e2b.* attributes: X-Metadata-* headers, their bounds, read
acting as the caller), gzip uploads, the events of a write, a symlink's
target, /proc files, and the signed file URLs with everything they must
refuse. (E2B's own tests of the SDK's use are in ../shared/e2b-tests.)"""
import base64
import gzip
import hashlib
import http.client
import json
import os
import re
import time
import urllib.parse

import pytest

from gbclient import (e2b_create, e2b_kill, envd_headers, envd_rpc, envd_sh, start_gateway)

ROOT = "Basic " + base64.b64encode(b"root:").decode()
# tmpfs (a memory home, /tmp) keeps user.* attributes from Linux 6.6 on;
# before, an upload's metadata is not kept (docs/e2b.md, "Files").
KERNEL = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2])
needs_tmpfs_xattrs = pytest.mark.skipif(KERNEL < (6, 6),
                                        reason="tmpfs keeps user.* attributes from Linux 6.6")


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


def raw(gw, method, target, headers=None, body=None, conn=None):
    """One request (on conn when given, kept open): (status, headers, body)."""
    c = conn or http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    c.request(method, target, body=body, headers=headers or {})
    resp = c.getresponse()
    data = resp.read()
    if conn is None:
        c.close()
    return resp.status, resp.headers, data


def upload(gw, sb, path, data, headers=None, conn=None, user=None):
    h = dict(envd_headers(sb))
    h["Content-Type"] = "application/octet-stream"
    h.update(headers or {})
    q = {"path": path} | ({"username": user} if user else {})
    status, _, body = raw(gw, "POST", "/e2b/files?" + urllib.parse.urlencode(q), h, data, conn)
    return status, json.loads(body) if body else None


def stat(gw, sb, path, auth=None):
    status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/Stat", {"path": path}, auth)
    assert status == 200, reply
    return reply["entry"]


# --- metadata ---------------------------------------------------------------

@needs_tmpfs_xattrs
def test_metadata_is_set_read_back_replaced_and_kept_on_rename(gw, sb):
    status, written = upload(gw, sb, "m.txt", b"one",
                             {"X-Metadata-Author": "ann", "X-Metadata-purpose": "a b!~"})
    assert status == 200, written
    want = {"author": "ann", "purpose": "a b!~"}  # keys lowercased, as envd does
    assert written[0]["metadata"] == want
    assert stat(gw, sb, "m.txt")["metadata"] == want
    # Another upload replaces the whole set; one without metadata clears it.
    upload(gw, sb, "m.txt", b"two", {"X-Metadata-stage": "2"})
    assert stat(gw, sb, "m.txt")["metadata"] == {"stage": "2"}
    status, written = upload(gw, sb, "m.txt", b"three")
    assert status == 200 and "metadata" not in written[0], written
    assert "metadata" not in stat(gw, sb, "m.txt")
    upload(gw, sb, "m.txt", b"four", {"X-Metadata-k": "v"})
    status, moved = envd_rpc(gw, sb, "filesystem.Filesystem/Move",
                             {"source": "/home/user/m.txt", "destination": "/home/user/n.txt"})
    assert status == 200 and moved["entry"]["metadata"] == {"k": "v"}, moved
    status, listed = envd_rpc(gw, sb, "filesystem.Filesystem/ListDir", {"path": "/home/user"})
    assert [e.get("metadata") for e in listed["entries"] if e["name"] == "n.txt"] == [{"k": "v"}]
    # On /tmp (a tmpfs of its own) too.
    status, written = upload(gw, sb, "/tmp/t.txt", b"x", {"X-Metadata-k": "tmp"})
    assert written[0]["metadata"] == {"k": "tmp"}, written


@needs_tmpfs_xattrs
def test_metadata_headers_are_found_exactly(gw, sb):
    """Many headers, a name that only appears in another header's value, and
    a header of an earlier request on the same connection."""
    many = {f"X-Metadata-key{i}": f"value{i}" for i in range(30)}
    many["X-Other"] = "x-metadata-planted:yes"
    status, written = upload(gw, sb, "many.txt", b"x", many)
    assert status == 200, written
    assert written[0]["metadata"] == {f"key{i}": f"value{i}" for i in range(30)}
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    status, first = upload(gw, sb, "first.txt", b"1", {"X-Metadata-only-first": "yes"}, conn=conn)
    assert first[0]["metadata"] == {"only-first": "yes"}
    status, second = upload(gw, sb, "second.txt", b"2", conn=conn)
    conn.close()
    assert status == 200 and "metadata" not in second[0], second


@pytest.mark.parametrize("headers, why", [
    ({"X-Metadata-k": "caf\u00e9".encode().decode("latin-1")}, "not printable ASCII"),
    ({"X-Metadata-" + "k" * 247: "v"}, "longer than"),
    ({f"X-Metadata-k{i}": "v" * 500 for i in range(9)}, "larger than 4096"),
])
def test_bad_metadata_is_refused_before_anything_is_written(gw, sb, headers, why):
    status, reply = upload(gw, sb, "bad.txt", b"x", headers)
    assert status == 400 and why in reply["message"], reply
    status, _ = envd_rpc(gw, sb, "filesystem.Filesystem/Stat", {"path": "bad.txt"})
    assert status == 404


@needs_tmpfs_xattrs
def test_metadata_is_read_as_the_caller(gw, sb):
    """A file only root may read shows its metadata to root only: the
    attributes are read acting as the caller, never as the gateway."""
    code, _, err = envd_sh(gw, sb, "echo s > /home/user/secret && python3 -c \"import os; "
                           "os.setxattr('/home/user/secret', 'user.e2b.k', b'v')\" && "
                           "chown root:root /home/user/secret && chmod 600 /home/user/secret",
                           auth=ROOT)
    assert code == 0, err
    assert stat(gw, sb, "secret", auth=ROOT)["metadata"] == {"k": "v"}
    assert "metadata" not in stat(gw, sb, "secret")


@needs_tmpfs_xattrs
def test_metadata_set_inside_is_bounded(gw, sb):
    """Attributes the sandbox sets itself: what is not UTF-8 is left out,
    and no more than 4096 bytes of them are reported."""
    code, _, err = envd_sh(gw, sb, "touch /home/user/x && python3 -c \"import os\n"
                           "os.setxattr('/home/user/x', 'user.e2b.bin', b'\\xff\\xfe')\n"
                           "os.setxattr('/home/user/x', 'user.e2b.ok', b'fine')\n"
                           "[os.setxattr('/home/user/x', f'user.e2b.big{i}', b'v' * 1000) "
                           "for i in range(10)]\"")
    assert code == 0, err
    metadata = stat(gw, sb, "x")["metadata"]
    assert "bin" not in metadata and metadata.get("ok") == "fine", metadata
    assert sum(len("user.e2b." + k) + len(v) for k, v in metadata.items()) <= 4096


# --- gzip uploads -------------------------------------------------------------

def test_gzip_uploads_and_their_errors(gw, sb):
    body = gzip.compress(b"hello ") + gzip.compress(b"world")  # two members
    status, written = upload(gw, sb, "g.txt", body, {"Content-Encoding": "gzip"})
    assert status == 200, written
    code, out, _ = envd_sh(gw, sb, "cat /home/user/g.txt")
    assert out == "hello world"
    for data, headers in [(b"not gzip at all", {"Content-Encoding": "gzip"}),
                          (gzip.compress(b"x" * 100000)[:-20], {"Content-Encoding": "gzip"}),
                          (b"x", {"Content-Encoding": "br"})]:
        status, reply = upload(gw, sb, "g2.txt", data, headers)
        assert status == 400, (headers, reply)


# --- events, symlinks, /proc ----------------------------------------------------

def test_a_new_file_gives_envds_three_events_with_their_entries(gw, sb):
    envd_sh(gw, sb, "mkdir -p /home/user/w")
    status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/CreateWatcher",
                             {"path": "/home/user/w", "includeEntry": True})
    assert status == 200, reply
    wid = reply["watcherId"]
    upload(gw, sb, "w/f.txt", b"data")
    envd_sh(gw, sb, "rm /home/user/w/f.txt")
    seen = []
    deadline = time.time() + 10
    while time.time() < deadline and len(seen) < 4:
        status, reply = envd_rpc(gw, sb, "filesystem.Filesystem/GetWatcherEvents",
                                 {"watcherId": wid})
        seen += reply.get("events", [])
        time.sleep(0.1)
    assert [e["type"] for e in seen] == ["EVENT_TYPE_CREATE", "EVENT_TYPE_CHMOD",
                                         "EVENT_TYPE_WRITE", "EVENT_TYPE_REMOVE"], seen
    for e in seen[:3]:
        # Taken when the event was read: the file may be written by then.
        assert e["entry"]["path"] == "/home/user/w/f.txt", e
    assert "entry" not in seen[3], seen[3]


def test_symlink_targets_are_resolved_inside(gw, sb):
    code, _, err = envd_sh(gw, sb, "cd /home/user && mkdir -p d && echo x > d/f && "
                           "ln -s f d/rel && ln -s ../../../../../etc/hostname up && "
                           "ln -s loop loop && ln -s /nowhere broken && ln -s d dl")
    assert code == 0, err
    assert stat(gw, sb, "d/rel")["symlinkTarget"] == "/home/user/d/f"
    assert stat(gw, sb, "d/rel")["type"] == "FILE_TYPE_FILE"
    assert stat(gw, sb, "up")["symlinkTarget"] == "/etc/hostname"
    assert stat(gw, sb, "dl/rel")["symlinkTarget"] == "/home/user/d/f"
    # What cannot be resolved is reported as its own path, at once.
    assert stat(gw, sb, "loop")["symlinkTarget"] == "/home/user/loop"
    assert stat(gw, sb, "broken")["symlinkTarget"] == "/home/user/broken"


def test_proc_files_are_read_to_their_end(gw, sb):
    h = envd_headers(sb)
    for path in ["/proc/sys/kernel/random/boot_id", "/proc/1/status", "/proc/meminfo"]:
        status, _, body = raw(gw, "GET", "/e2b/files?path=" + path, h)
        assert status == 200 and len(body) > 0, (path, status, body)
    status, _, body = raw(gw, "GET", "/e2b/files?path=/home/user/none", h)
    assert status == 404 and b"does not exist" in body


# --- signed URLs --------------------------------------------------------------

def signature(path, operation, user, token, expiration=None):
    text = f"{path}:{operation}:{user or ''}:{token}"
    if expiration is not None:
        text += f":{expiration}"
    digest = hashlib.sha256(text.encode()).digest()
    return "v1_" + base64.b64encode(digest).decode().rstrip("=")


def signed(sb, path, operation="read", user=None, expiration=None, prefix=""):
    q = {"path": path}
    if user:
        q["username"] = user
    q["signature"] = signature(path, operation, user, sb["envdAccessToken"], expiration)
    if expiration is not None:
        q["signature_expiration"] = str(expiration)
    return prefix + "/files?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote)


@needs_tmpfs_xattrs
def test_signed_urls_read_and_write_their_own_sandbox(gw):
    a, b = e2b_create(gw), e2b_create(gw)
    try:
        upload(gw, a, "s.txt", b"in a")
        upload(gw, b, "s.txt", b"in b")
        for prefix in ["", "/e2b"]:
            assert raw(gw, "GET", signed(a, "s.txt", prefix=prefix))[::2] == (200, b"in a")
            assert raw(gw, "GET", signed(b, "s.txt", user="user",
                                         expiration=int(time.time()) + 60,
                                         prefix=prefix))[::2] == (200, b"in b")
        # An upload, multipart as upload_url says, with metadata.
        boundary = "xyzzy"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
                f"filename=\"up.txt\"\r\n\r\nuploaded\r\n--{boundary}--\r\n").encode()
        status, _, reply = raw(gw, "POST", signed(a, "up.txt", "write"),
                               {"Content-Type": f"multipart/form-data; boundary={boundary}",
                                "X-Metadata-via": "signed"}, body)
        assert status == 200, reply
        assert json.loads(reply)[0]["metadata"] == {"via": "signed"}
        entry = stat(gw, a, "up.txt")
        assert entry["owner"] == "user" and entry["metadata"] == {"via": "signed"}, entry
    finally:
        e2b_kill(gw, a)
        e2b_kill(gw, b)


def test_signed_urls_refuse_everything_they_were_not_made_for(gw):
    a, b = e2b_create(gw), e2b_create(gw)
    try:
        upload(gw, a, "s.txt", b"in a")
        good = signed(a, "s.txt")
        assert raw(gw, "GET", good)[0] == 200

        def refused(target, headers=None, method="GET", body=None, message="invalid signature"):
            status, _, reply = raw(gw, method, target, headers, body)
            assert (status, json.loads(reply)) == (401, {"code": 401, "message": message}), \
                (target, status, reply)

        forged = good.replace("signature=v1_", "signature=v1_A")
        refused(forged)
        refused(good.replace("path=s.txt", "path=r.txt"))          # another path
        refused(good + "&username=root")                           # another user
        refused(good, method="POST", body=b"x",                    # another operation
                headers={"Content-Type": "application/octet-stream"})
        assert stat(gw, a, "s.txt")["size"] == "4"                 # nothing written
        refused(good, {"E2b-Sandbox-Id": b["sandboxID"]})          # another sandbox
        refused(signed(a, "s.txt", expiration=int(time.time()) - 1),
                message="signature is already expired")
        later = int(time.time()) + 60
        refused(signed(a, "s.txt", expiration=later).replace(str(later), str(later + 1)))
        refused("/files?path=s.txt", message="missing signature query parameter")
        # A signed user is the user, whatever Authorization header comes along.
        upload(gw, a, "mine.txt", b"x", user="root")
        envd_sh(gw, a, "chmod 600 /home/user/mine.txt", auth=ROOT)
        status, _, _ = raw(gw, "GET", signed(a, "mine.txt"), {"Authorization": ROOT})
        assert status == 403
        assert raw(gw, "GET", signed(a, "mine.txt", user="root"))[0] == 200
        # The bad forms are told apart.
        status, _, _ = raw(gw, "GET", signed(a, "s.txt") + "&signature_expiration=soon")
        assert status in (400, 401)
        assert raw(gw, "DELETE", good)[0] == 405
        # An upload URL writes its own path only, whatever its parts say.
        body = b"".join(f"--b\r\nContent-Disposition: form-data; name=\"file\"; "
                        f"filename=\"{name}\"\r\n\r\n{name}\r\n".encode()
                        for name in ["one.txt", "/home/user/other.txt"]) + b"--b--\r\n"
        status, _, reply = raw(gw, "POST", signed(a, "one.txt", "write"),
                               {"Content-Type": "multipart/form-data; boundary=b"}, body)
        assert status == 400 and b"multiple files to the same path" in reply, reply
        status, _ = envd_rpc(gw, a, "filesystem.Filesystem/Stat", {"path": "other.txt"})
        assert status == 404
        # Its sandbox gone, the URL is good for nothing.
        e2b_kill(gw, a)
        refused(good)
    finally:
        e2b_kill(gw, a)
        e2b_kill(gw, b)
