"""Pause and resume of a Jupyter kernel where no checkpoint of its memory
can be made (here: no CRIU, --criu names none): POST /api/kernels/{id}/pause
saves its /home/user under --state-dir and ends it, POST .../resume starts
it again under the same id with its files; a paused kernel is listed,
answers 409 to what needs it running, outlives the gateway and stays its
owner's. Files only: variables are not kept, and the model says so and why.
test_pause_memory.py has the pause that keeps memory."""
import hashlib
import json
import os
import secrets

import pytest
import websocket

from gbclient import run_cell, start_gateway

TOKEN = "test-token-0123456789"
# No CRIU: the files-only pause every host without one gets.
NO_CRIU = ("--criu", "/nonexistent/criu")


@pytest.fixture
def state(tmp_path):
    return str(tmp_path / "state")


@pytest.fixture
def gw(state):
    g = start_gateway("--state-dir", state, *NO_CRIU)
    yield g
    g.stop()


def test_pause_and_resume_keep_the_files_not_the_variables(gw, state):
    kid = gw.start_kernel()
    reply, _, _ = run_cell(gw, kid, "import os\nos.makedirs('/home/user/sub', exist_ok=True)\n"
                                    "open('/home/user/sub/f.txt', 'w').write('kept')\n"
                                    "open('/home/user/big', 'wb').write(os.urandom(3 << 20))\n"
                                    "x = 41")
    assert reply["status"] == "ok", reply
    _, digest, _ = run_cell(gw, kid, "import hashlib\n"
                                     "print(hashlib.sha256(open('/home/user/big','rb').read())"
                                     ".hexdigest())")

    status, model, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
    assert status == 200, model
    assert model["id"] == kid and model["execution_state"] == "paused"
    assert model["paused"]["memory_kept"] is False
    assert model["paused"]["notice"].startswith("variables are not kept: ")
    assert "/nonexistent/criu was not found" in model["paused"]["notice"], model
    assert sorted(os.listdir(os.path.join(state, "paused", kid))) == ["home.tar", "meta.json"]
    meta = json.load(open(os.path.join(state, "paused", kid, "meta.json")))
    assert meta["kind"] == "kernel" and meta["kernelspec"] == "python3"

    status, listed, _ = gw.request("GET", "/api/kernels")
    assert [(k["id"], k["execution_state"]) for k in listed] == [(kid, "paused")]
    status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
    assert status == 200 and model["execution_state"] == "paused"
    # What needs a running kernel is refused, by name.
    status, body, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
    assert status == 409 and "already paused" in body["message"], body
    status, body, _ = gw.request("POST", f"/api/kernels/{kid}/interrupt")
    assert status == 409 and "resume" in body["message"], body
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        gw.connect(kid)
    assert refused.value.status_code == 404

    status, model, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
    assert status == 200, model
    assert model["id"] == kid and model["execution_state"] == "idle"
    assert not os.path.exists(os.path.join(state, "paused", kid))
    reply, out, _ = run_cell(gw, kid, "print(open('/home/user/sub/f.txt').read())\n"
                                      "import hashlib\n"
                                      "print(hashlib.sha256(open('/home/user/big','rb').read())"
                                      ".hexdigest())\nprint('x' in globals())")
    assert reply["status"] == "ok", reply
    assert out == "kept\n" + digest + "False\n"
    status, body, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
    assert status == 409 and "not paused" in body["message"], body


def test_unknown_kernels_and_wrong_methods(gw):
    status, body, _ = gw.request("POST", "/api/kernels/no-such-kernel/pause")
    assert status == 404 and "does not exist" in body["message"], body
    status, body, _ = gw.request("POST", "/api/kernels/no-such-kernel/resume")
    assert status == 404, body
    kid = gw.start_kernel()
    status, body, _ = gw.request("GET", f"/api/kernels/{kid}/pause")
    assert status == 405, body
    # Deleting a paused kernel removes its saved files.
    assert gw.request("POST", f"/api/kernels/{kid}/pause")[0] == 200
    status, _, _ = gw.request("DELETE", f"/api/kernels/{kid}")
    assert status == 204
    assert gw.request("GET", f"/api/kernels/{kid}")[0] == 404
    assert gw.request("POST", f"/api/kernels/{kid}/resume")[0] == 404
    assert os.listdir(os.path.join(gw_state(gw), "paused")) == []


def gw_state(gw):
    args = gw.proc.args
    return args[args.index("--state-dir") + 1]


def test_an_e2b_sandboxs_kernel_is_paused_through_e2b(gw):
    status, sbx, _ = gw.request("POST", "/e2b/sandboxes", {"timeout": 60},
                                headers={"X-API-Key": TOKEN})
    assert status == 201, sbx
    try:
        _, kernels, _ = gw.request("GET", "/api/kernels")
        assert len(kernels) == 1
        status, body, _ = gw.request("POST", f"/api/kernels/{kernels[0]['id']}/pause")
        assert status == 409 and "E2B sandbox" in body["message"], body
    finally:
        gw.request("DELETE", f"/e2b/sandboxes/{sbx['sandboxID']}", headers={"X-API-Key": TOKEN})


def test_a_paused_kernel_outlives_the_gateway_and_stays_its_owners(tmp_path):
    keys = {name: "e2b_" + secrets.token_hex(20) for name in ("alice", "bob")}
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [
        {"name": n, "sha256": hashlib.sha256(k.encode()).hexdigest()} for n, k in keys.items()]}))
    args = ("--keys-file", str(path), "--state-dir", str(tmp_path / "state"))
    gw = start_gateway(*args)
    try:
        status, model, _ = gw.request("POST", "/api/kernels", {"name": "python3",
                                                              "env": {"GREETING": "hi"}},
                                      token=keys["alice"])
        assert status == 201, model
        kid = model["id"]
        gw.token = keys["alice"]
        run_cell(gw, kid, "open('/home/user/a.txt', 'w').write('alice')")
        # bob cannot pause, see or resume it.
        assert gw.request("POST", f"/api/kernels/{kid}/pause", token=keys["bob"])[0] == 404
        assert gw.request("POST", f"/api/kernels/{kid}/pause")[0] == 200
        assert gw.request("GET", "/api/kernels", token=keys["bob"])[1] == []
        assert gw.request("POST", f"/api/kernels/{kid}/resume", token=keys["bob"])[0] == 404
    finally:
        gw.stop()
    gw = start_gateway(*args)
    try:
        assert gw.request("GET", "/api/kernels", token=keys["bob"])[1] == []
        assert gw.request("GET", f"/api/kernels/{kid}", token=keys["bob"])[0] == 404
        status, listed, _ = gw.request("GET", "/api/kernels", token=keys["alice"])
        assert [(k["id"], k["execution_state"]) for k in listed] == [(kid, "paused")]
        # The admin may resume it; it stays alice's, with its env.
        status, model, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
        assert status == 200 and model["id"] == kid, model
        assert gw.request("GET", f"/api/kernels/{kid}", token=keys["bob"])[0] == 404
        gw.token = keys["alice"]
        _, out, _ = run_cell(gw, kid, "import os\nprint(open('/home/user/a.txt').read(), "
                                      "os.environ['GREETING'])")
        assert out == "alice hi\n"
    finally:
        gw.stop()


def test_sparse_files_are_kept_sparse(gw, state):
    """Holes take no room in the archive: three files of holes as large as a
    file may be in the sandbox (RLIMIT_FSIZE - 1, its disk limit) pause
    into a small archive, and resume as the same files, still sparse."""
    kid = gw.start_kernel()
    reply, out, _ = run_cell(gw, kid, "import resource\n"
                                      "size = resource.getrlimit(resource.RLIMIT_FSIZE)[0] - 1\n"
                                      "for i in range(3):\n"
                                      "    with open(f'/home/user/hole{i}', 'wb') as f:\n"
                                      "        f.write(b'end')\n"
                                      "        f.truncate(size)\n"
                                      "print(size)")
    assert reply["status"] == "ok", reply
    size = int(out)
    assert size >= 256 << 20, size
    status, model, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
    assert status == 200, model
    archive = os.stat(os.path.join(state, "paused", kid, "home.tar"))
    assert archive.st_blocks * 512 < 1 << 20, archive
    status, model, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
    assert status == 200, model
    reply, out, _ = run_cell(gw, kid, "import os\n"
                                      "for i in range(3):\n"
                                      "    st = os.stat(f'/home/user/hole{i}')\n"
                                      "    print(st.st_size, st.st_blocks * 512 < 1 << 20,\n"
                                      "          open(f'/home/user/hole{i}', 'rb').read(3))")
    assert reply["status"] == "ok", reply
    assert out == f"{size} True b'end'\n" * 3


def test_an_archive_past_its_room_is_refused_and_the_kernel_runs_on(tmp_path):
    """The archive counts against its owner's room while it is written
    (--pause-quota-mb): past it tar is stopped, nothing is kept, the pause
    is refused saying why and the kernel keeps its variables; an owner
    whose paused kernels hold all their room gets a 429 at once."""
    state = str(tmp_path / "state")
    gw = start_gateway("--state-dir", state, "--pause-quota-mb", "3", *NO_CRIU)
    try:
        small = gw.start_kernel()
        reply, _, _ = run_cell(gw, small, "import os\n"
                                          "open('/home/user/a', 'wb').write(os.urandom(1 << 20))")
        assert reply["status"] == "ok", reply
        status, model, _ = gw.request("POST", f"/api/kernels/{small}/pause")
        assert status == 200, model
        big = gw.start_kernel()
        reply, _, _ = run_cell(gw, big, "import os\nx = 41\n"
                                        "open('/home/user/b', 'wb').write(os.urandom(3 << 20))")
        assert reply["status"] == "ok", reply
        status, body, _ = gw.request("POST", f"/api/kernels/{big}/pause")
        assert status == 507, body
        assert "--pause-quota-mb" in body["message"] and "not paused" in body["message"], body
        assert not os.path.exists(os.path.join(state, "paused", big, "home.tar.new"))
        assert not os.path.exists(os.path.join(state, "paused", big, "home.tar"))
        reply, out, _ = run_cell(gw, big, "print(x + 1)")
        assert reply["status"] == "ok" and out == "42\n", (reply, out)
        # One more megabyte paused leaves less than one: the next pause is a 429.
        reply, _, _ = run_cell(gw, big, "import os\nos.remove('/home/user/b')\n"
                                        "open('/home/user/c', 'wb').write(os.urandom(1 << 20))")
        status, model, _ = gw.request("POST", f"/api/kernels/{big}/pause")
        assert status == 200, model
        third = gw.start_kernel()
        status, body, _ = gw.request("POST", f"/api/kernels/{third}/pause")
        assert status == 429 and "--pause-quota-mb" in body["message"], body
    finally:
        gw.stop()


def test_a_second_gateway_on_the_same_state_directory_is_refused(tmp_path):
    """Two gateways sharing a state directory would resume each other's
    paused kernels: the second refuses to start, naming the first."""
    state = str(tmp_path / "state")
    first = start_gateway("--state-dir", state, *NO_CRIU)
    try:
        with pytest.raises(RuntimeError) as refused:
            start_gateway("--state-dir", state, *NO_CRIU)
        assert "in use by another glovebox" in str(refused.value)
        assert f"(pid {first.proc.pid})" in str(refused.value)
        assert first.request("GET", "/api/kernels")[0] == 200
    finally:
        first.stop()
    # Once the first has ended, the directory is free again.
    again = start_gateway("--state-dir", state, *NO_CRIU)
    again.stop()
