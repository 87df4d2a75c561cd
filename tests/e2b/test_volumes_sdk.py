"""Volumes through the unmodified E2B Python SDK (Volume, volume_mounts) and
Glovebox's own kernels API ("volumes" on POST /api/kernels): shared by
sandboxes at once, outliving them and the gateway, per tenant, bounded, and
nothing of the host reachable through them. E2B's own volume tests run in the
e2b-upstream suite (ENABLE_VOLUME_TESTS)."""
import hashlib
import json
import os
import secrets
import time

import pytest

from conftest import point_sdk_at, start_gateway

NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="volumes need a gateway run as root")
pytestmark = NEEDS_ROOT


def use_volumes_at(gw):
    """The content API is served beside the control plane."""
    os.environ["E2B_VOLUME_API_URL"] = f"{gw.base}/e2b"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    keys = {name: "e2b_" + secrets.token_hex(20) for name in ("alice", "bob")}
    path.write_text(json.dumps({"keys": [
        {"name": name, "sha256": hashlib.sha256(key.encode()).hexdigest()}
        for name, key in keys.items()]}))
    gw = start_gateway("--keys-file", str(path), "--volume-size-mb", "64",
                       "--volume-quota-mb", "256", token="e2b_" + secrets.token_hex(20))
    gw.keys = keys
    yield gw
    gw.stop()


@pytest.fixture(autouse=True)
def sdk_env(gateway):
    point_sdk_at(gateway, gateway.token)
    use_volumes_at(gateway)


@pytest.fixture
def vol():
    from e2b import Volume
    v = Volume.create("vol-" + secrets.token_hex(4))
    yield v
    Volume.destroy(v.volume_id)


def run(sbx, code):
    ex = sbx.run_code(code)
    assert ex.error is None, ex.error
    return "".join(ex.logs.stdout)


def test_two_sandboxes_share_a_volume_which_outlives_them(vol):
    from e2b import Volume
    from e2b_code_interpreter import Sandbox
    a = Sandbox.create(volume_mounts={"/data": vol})
    b = Sandbox.create(volume_mounts={"/mnt/shared": vol.name})
    try:
        run(a, "open('/data/notes.txt', 'w').write('from a\\n')")
        # b sees a's write at once: one filesystem, not a copy.
        assert run(b, "print(open('/mnt/shared/notes.txt').read(), end='')") == "from a\n"
        run(b, "open('/mnt/shared/notes.txt', 'a').write('from b\\n')")
        assert run(a, "print(open('/data/notes.txt').read(), end='')") == "from a\nfrom b\n"
        # Owned by the sandbox's user, as every sandbox and the API see it.
        assert run(a, "import os; print(os.stat('/data/notes.txt').st_uid)").strip() == "1000"
        info = vol.get_info("/notes.txt")
        assert (info.uid, info.gid, info.size) == (1000, 1000, 14)
        # The sandboxes' info names their volumes.
        assert b.get_info().volume_mounts == [{"name": vol.name, "path": "/mnt/shared"}]
        # Written through the API, seen in the sandbox.
        vol.write_file("/from-api.txt", "api")
        assert run(b, "print(open('/mnt/shared/from-api.txt').read())").strip() == "api"
    finally:
        a.kill()
        b.kill()
    assert vol.read_file("/notes.txt") == "from a\nfrom b\n"
    assert vol.volume_id in [v.volume_id for v in Volume.list()]


def test_a_volume_outlives_the_gateway(tmp_path):
    from e2b import Volume
    from e2b_code_interpreter import Sandbox
    state = str(tmp_path / "state")
    os.makedirs(state, mode=0o700)
    token = "e2b_" + secrets.token_hex(20)
    gw = start_gateway("--state-dir", state, "--volume-size-mb", "32", token=token)
    try:
        point_sdk_at(gw, token)
        use_volumes_at(gw)
        v = Volume.create("kept")
        s = Sandbox.create(volume_mounts={"/data": v})
        run(s, "open('/data/kept.txt', 'w').write('still here')")
        s.kill()
    finally:
        gw.stop()
    gw = start_gateway("--state-dir", state, "--volume-size-mb", "32", token=token)
    try:
        point_sdk_at(gw, token)
        use_volumes_at(gw)
        assert [x.name for x in Volume.list()] == ["kept"]
        again = Volume.connect(v.volume_id)
        assert again.token == v.token
        assert again.read_file("/kept.txt") == "still here"
        s = Sandbox.create(volume_mounts={"/data": "kept"})
        try:
            assert run(s, "print(open('/data/kept.txt').read())").strip() == "still here"
        finally:
            s.kill()
        assert Volume.destroy(v.volume_id) is True
        assert Volume.list() == []
        # The kernel-host removes the image as it is told, after the answer.
        images = os.path.join(state, "volumes", "images")
        end = time.monotonic() + 10
        while os.listdir(images) and time.monotonic() < end:
            time.sleep(0.05)
        assert os.listdir(images) == []
    finally:
        gw.stop()


def test_nothing_of_the_host_through_a_volume(vol, tmp_path):
    from e2b.exceptions import NotFoundException, VolumeException
    from e2b_code_interpreter import Sandbox
    canary = tmp_path / "canary"
    canary.write_text("host secret")
    os.chmod(tmp_path, 0o755)
    s = Sandbox.create(volume_mounts={"/data": vol})
    try:
        out = run(s, f"""
import os
os.symlink({str(canary)!r}, '/data/abs')
os.symlink('../../../../../../{str(canary)}', '/data/rel')
os.mkfifo('/data/fifo')
try:
    os.link('/etc/hostname', '/data/hard')
    print('linked')
except OSError as e:
    print('no link', e.errno)
""")
        assert out.strip() == "no link 18"  # EXDEV: a filesystem of its own
    finally:
        s.kill()
    # The API resolves every link inside the volume: neither reaches the host.
    for name in ("/abs", "/rel"):
        with pytest.raises(NotFoundException):
            vol.read_file(name)
        info = vol.get_info(name)
        assert info.type.value == "symlink" and info.target
    # Writing through a link is refused, and the host file stays as it was.
    with pytest.raises(VolumeException):
        vol.write_file("/abs", "overwritten", force=True)
    assert canary.read_text() == "host secret"
    # ".." is refused outright; a FIFO is no file to read (and no wait).
    with pytest.raises(VolumeException):
        vol.read_file("../../etc/passwd")
    started = time.time()
    with pytest.raises(VolumeException):
        vol.read_file("/fifo")
    assert time.time() - started < 5
    # Removing a link removes the link.
    vol.remove("/abs")
    assert canary.read_text() == "host secret"


def test_a_volume_is_bounded_and_a_tenant_by_its_quota(gateway):
    from e2b import Volume
    from e2b.exceptions import RateLimitException
    from e2b_code_interpreter import Sandbox
    key = gateway.keys["bob"]
    made = [Volume.create(f"q{i}", api_key=key) for i in range(4)]  # 4 x 64 MiB = the quota
    try:
        # 429, which the SDK reads as E2B's own limits.
        with pytest.raises(RateLimitException) as e:
            Volume.create("q4", api_key=key)
        assert "quota" in str(e.value)
        s = Sandbox.create(api_key=key, volume_mounts={"/data": made[0]})
        try:
            out = run(s, """
try:
    with open('/data/big', 'wb') as f:
        for _ in range(100):
            f.write(b'x' * (1 << 20))
    print('wrote it all')
except OSError as e:
    print('errno', e.errno)
""")
            assert out.strip() == "errno 28"  # ENOSPC at the volume's size
        finally:
            s.kill()
    finally:
        for v in made:
            Volume.destroy(v.volume_id, api_key=key)


def test_volumes_belong_to_their_tenant(gateway):
    from e2b import Volume
    from e2b.exceptions import SandboxException
    from e2b_code_interpreter import Sandbox
    alice, bob = gateway.keys["alice"], gateway.keys["bob"]
    v = Volume.create("alices", api_key=alice)
    try:
        assert "alices" not in [x.name for x in Volume.list(api_key=bob)]
        assert Volume.destroy(v.volume_id, api_key=bob) is False  # 404: not found for bob
        with pytest.raises(SandboxException) as e:
            Sandbox.create(api_key=bob, volume_mounts={"/data": "alices"})
        assert "not found" in str(e.value)
        # The same name is another volume for another tenant.
        mine = Volume.create("alices", api_key=bob)
        assert mine.volume_id != v.volume_id
        Volume.destroy(mine.volume_id, api_key=bob)
        # Another volume's token opens nothing here.
        other = Volume(volume_id=v.volume_id, name=v.name, token="vol_" + "0" * 44)
        with pytest.raises(Exception) as e:
            other.read_file("/x")
        assert "401" in str(e.value) or "token" in str(e.value)
    finally:
        Volume.destroy(v.volume_id, api_key=alice)


def test_bad_volume_requests_say_why(gateway, vol):
    from e2b import Volume
    from e2b.exceptions import SandboxException, VolumeException
    from e2b_code_interpreter import Sandbox
    for path in ("/proc/x", "relative", "/tmp", "/a/../b", "/"):
        with pytest.raises(SandboxException) as e:
            Sandbox.create(volume_mounts={path: vol})
        assert "400" in str(e.value) and "path" in str(e.value)
    with pytest.raises(SandboxException):
        Sandbox.create(volume_mounts={"/a": vol, "/b": "no-such-volume"})
    with pytest.raises(VolumeException):
        Volume.create("bad name/with slash")
    with pytest.raises(VolumeException) as e:
        Volume.create(vol.name)
    assert "409" in str(e.value) or "exists" in str(e.value)
    status, body, _ = gateway.request("GET", f"/e2b/volumecontent/{vol.volume_id}/path?path=/",
                                      token="")
    assert status == 401, body


def test_a_kernel_mounts_volumes_by_name(gateway, vol):
    vol.write_file("/input.csv", "a,b\n1,2\n")
    status, model, _ = gateway.request("POST", "/api/kernels",
                                       {"name": "python3", "volumes": {"/data": vol.name}})
    assert status == 201, model
    try:
        ch = gateway.connect(model["id"])
        reply, out = ch.execute("print(open('/data/input.csv').read(), end='');"
                                "open('/data/result.txt', 'w').write('done')")
        ch.close()
        assert reply["content"]["status"] == "ok", reply
        text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
        assert text == "a,b\n1,2\n"
        assert vol.read_file("/result.txt") == "done"
    finally:
        gateway.request("DELETE", f"/api/kernels/{model['id']}")
    status, body, _ = gateway.request("POST", "/api/kernels",
                                      {"name": "python3", "volumes": {"/data": "missing"}})
    assert status == 400 and "not found" in body["message"], body
    status, body, _ = gateway.request("POST", "/api/kernels",
                                      {"name": "python3", "volumes": ["/data"]})
    assert status == 400, body


def loop_devices_of(image):
    """The loop devices backed by image (their backing file's path)."""
    found = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.replace(" (deleted)", "") == image:
            found.append(name)
    return found


def test_a_killed_kernel_host_loses_nothing_of_a_volume(tmp_path):
    """kill -9 of the kernel-host while a sandbox writes its volume: the new
    kernel-host mounts the same filesystem (one loop device for the image,
    never a second one beside the one a mount still holds)."""
    import signal
    import subprocess
    from e2b import Volume
    from e2b_code_interpreter import Sandbox
    state = str(tmp_path / "state")
    os.makedirs(state, mode=0o700)
    token = "e2b_" + secrets.token_hex(20)
    gw = start_gateway("--state-dir", state, "--volume-size-mb", "32", token=token)
    try:
        point_sdk_at(gw, token)
        use_volumes_at(gw)
        v = Volume.create("survives")
        image = os.path.join(state, "volumes", "images", v.volume_id + ".img")
        s = Sandbox.create(volume_mounts={"/data": v})
        run(s, "f = open('/data/before.txt', 'w'); f.write('written'); f.close()")
        assert len(loop_devices_of(image)) == 1
        hosts = subprocess.run(["pgrep", "-P", str(gw.proc.pid), "-f", "kernel-host"],
                               capture_output=True, text=True).stdout.split()
        assert len(hosts) == 1, hosts
        os.kill(int(hosts[0]), signal.SIGKILL)
        deadline = time.time() + 30
        while "started a new kernel-host" not in gw.read_log():
            assert time.time() < deadline, gw.read_log()[-2000:]
            time.sleep(0.2)
        t = Sandbox.create(volume_mounts={"/data": v})
        try:
            assert run(t, "print(open('/data/before.txt').read())").strip() == "written"
            run(t, "open('/data/after.txt', 'w').write('again')")
        finally:
            t.kill()
        assert v.read_file("/after.txt") == "again"
        assert len(loop_devices_of(image)) == 1, "one device for the image"
        Volume.destroy(v.volume_id)
    finally:
        gw.stop()


def test_pause_and_fork_keep_the_memory_with_a_volume(tmp_path):
    """(Issue 24.) A sandbox with a volume pauses with its memory: a file it
    holds open on the volume is written on after the resume, the writes
    another sandbox made meanwhile are there, and a fork mounts the same
    volume (one filesystem: each sees the others' writes)."""
    from e2b import Volume
    from e2b_code_interpreter import Sandbox
    from test_pause_memory import CRIU, criu_usable
    from test_pause_sdk import api
    if not criu_usable():
        pytest.skip(f"memory pause needs CRIU 4.1+ at {CRIU}")
    state = str(tmp_path / "state")
    token = "e2b_" + secrets.token_hex(20)
    gw = start_gateway("--state-dir", state, "--criu", CRIU, "--volume-size-mb", "32",
                       token=token)
    try:
        point_sdk_at(gw, token)
        use_volumes_at(gw)
        v = Volume.create("paused")
        a = Sandbox.create(volume_mounts={"/data": v})
        b = Sandbox.create(volume_mounts={"/data": v})
        copies = []
        try:
            run(a, "x = 5\nheld = open('/data/log.txt', 'a')\nheld.write('one\\n'); held.flush()")
            assert a.pause() is True
            status, info = api(gw, "GET", f"/sandboxes/{a.sandbox_id}")
            assert info["glovebox"] == {"memoryKept": True}, info
            run(b, "open('/data/while.txt', 'w').write('from b')")
            again = Sandbox.connect(a.sandbox_id)
            out = run(again, "held.write('two\\n'); held.flush()\n"
                             "import os\nprint(x, open('/data/while.txt').read(),"
                             " os.stat('/data/log.txt').st_uid)")
            assert out == "5 from b 1000\n", out
            assert v.read_file("/log.txt") == "one\ntwo\n"
            assert again.get_info().volume_mounts == [{"name": "paused", "path": "/data"}]
            copies = again.fork(count=1, timeout=60)
            run(copies[0], "held.write('three\\n'); held.flush()\n"
                           "open('/data/copy.txt', 'w').write('from the copy')")
            assert run(b, "print(open('/data/copy.txt').read())") == "from the copy\n"
            assert v.read_file("/log.txt") == "one\ntwo\nthree\n"
            assert copies[0].get_info().volume_mounts == [{"name": "paused", "path": "/data"}]
        finally:
            for s in [a, b] + copies:
                s.kill()
        # A Jupyter kernel's too; its restart after the resume keeps the
        # volume (the gateway learnt it from the restore).
        status, model, _ = gw.request("POST", "/api/kernels",
                                      {"name": "python3", "volumes": {"/data": "paused"}})
        assert status == 201, model
        kid = model["id"]
        try:
            ch = gw.connect(kid)
            reply, _ = ch.execute("held = open('/data/log.txt', 'a')")
            ch.close()
            assert reply["content"]["status"] == "ok", reply
            status, body, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
            assert status == 200 and body["paused"] == {"memory_kept": True}, body
            assert gw.request("POST", f"/api/kernels/{kid}/resume")[0] == 200
            ch = gw.connect(kid)
            reply, _ = ch.execute("held.write('four\\n'); held.flush()")
            ch.close()
            assert reply["content"]["status"] == "ok", reply
            assert v.read_file("/log.txt") == "one\ntwo\nthree\nfour\n"
            assert gw.request("POST", f"/api/kernels/{kid}/restart")[0] == 200
            ch = gw.connect(kid)
            reply, out = ch.execute("print(open('/data/log.txt').read().split()[-1])")
            ch.close()
            text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
            assert text == "four\n", (reply, out)
        finally:
            gw.request("DELETE", f"/api/kernels/{kid}")
        assert Volume.destroy(v.volume_id) is True
    finally:
        gw.stop()
