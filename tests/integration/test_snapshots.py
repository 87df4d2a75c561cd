"""Snapshots of a Jupyter kernel with its memory: POST /api/kernels/{id}/
snapshot keeps a checkpoint of the running kernel (it runs on) under an id
of its own, POST /api/kernels {"snapshot": id} starts a copy of it as often
as asked (its own id, key, files), /api/snapshots lists, shows and deletes
them; the owner's alone, kept across a gateway restart, counted in the
key's --pause-quota-mb."""
import os
import time

import pytest

import gbclient
from gbclient import checkpoint_dirs, run_cell, start_gateway, value_of
from test_pause_memory import CRIU, criu_usable

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not criu_usable(),
                                reason=f"snapshots need root and CRIU 4.1+ at {CRIU} "
                                       "(scripts/test builds it)")

ALICE = "e2b_a11ce0000000000000000001"
BOB = "e2b_b0b000000000000000000002"
ADMIN = "test-token-0123456789"


def keys_file(tmp_path):
    return gbclient.keys_file(tmp_path, {"alice": ALICE, "bob": BOB})


def gateway(tmp_path, *extra):
    return start_gateway("--state-dir", str(tmp_path / "state"), "--criu", CRIU,
                         "--keys-file", keys_file(tmp_path), *extra, token=ADMIN)


def kernel_from(gw, snap, token=ALICE):
    status, model, _ = gw.request("POST", "/api/kernels", {"snapshot": snap}, token=token)
    assert status == 201, model
    return model["id"]


def checkpoints(tmp_path):
    return checkpoint_dirs(str(tmp_path / "state"))


def test_a_snapshot_starts_kernels_with_its_memory_and_outlives_the_gateway(tmp_path):
    gw = gateway(tmp_path)
    try:
        src = gw.request("POST", "/api/kernels", {"name": "python3"}, token=ALICE)[1]["id"]
        content, _, _ = run_cell(gw, src, "import random\nx = 41\n"
                                          "open('/home/user/f.txt', 'w').write('kept')",
                                 token=ALICE)
        assert content["status"] == "ok", content
        status, snap, _ = gw.request("POST", f"/api/kernels/{src}/snapshot",
                                     {"name": "trained"}, token=ALICE)
        assert status == 201, snap
        assert snap["memory_kept"] is True and snap["name"] == "trained", snap
        assert snap["kernel_id"] == src and snap["size_bytes"] > 10 << 20, snap
        # The source runs on; what it does next is not in the snapshot.
        run_cell(gw, src, "x = 0", token=ALICE)
        a, b = kernel_from(gw, snap["id"]), kernel_from(gw, snap["id"])
        assert len({a, b, src}) == 3
        for kid in (a, b):
            assert value_of(gw, kid, "(x, open('/home/user/f.txt').read())",
                            token=ALICE) == (41, "kept")
        # Each its own: variables, files, random draws.
        run_cell(gw, a, "x = 1\nopen('/home/user/f.txt', 'w').write('a')", token=ALICE)
        assert value_of(gw, b, "(x, open('/home/user/f.txt').read())", token=ALICE) == \
            (41, "kept")
        assert value_of(gw, a, "random.random()", token=ALICE) != \
            value_of(gw, b, "random.random()", token=ALICE)
        # Listed for its owner, nobody else.
        status, listed, _ = gw.request("GET", "/api/snapshots", token=ALICE)
        assert status == 200 and [s["id"] for s in listed] == [snap["id"]], listed
        assert gw.request("GET", "/api/snapshots", token=BOB)[1] == []
        assert gw.request("GET", f"/api/snapshots/{snap['id']}", token=BOB)[0] == 404
        assert gw.request("POST", "/api/kernels", {"snapshot": snap["id"]},
                          token=BOB)[0] == 404
        assert gw.request("DELETE", f"/api/snapshots/{snap['id']}", token=BOB)[0] == 404
    finally:
        gw.stop()
    # A new gateway has it, and starts kernels from it.
    gw = gateway(tmp_path)
    try:
        status, one, _ = gw.request("GET", f"/api/snapshots/{snap['id']}", token=ALICE)
        assert status == 200 and one["name"] == "trained", one
        kid = kernel_from(gw, snap["id"])
        assert value_of(gw, kid, "x + 1", token=ALICE) == 42
        assert gw.request("DELETE", f"/api/snapshots/{snap['id']}", token=ALICE)[0] == 204
        deadline = time.monotonic() + 10
        while checkpoints(tmp_path):
            assert time.monotonic() < deadline, checkpoints(tmp_path)
            time.sleep(0.1)
        assert gw.request("POST", "/api/kernels", {"snapshot": snap["id"]},
                          token=ALICE)[0] == 404
        # The kernel made from it lives on without it.
        assert value_of(gw, kid, "x", token=ALICE) == 41
    finally:
        gw.stop()


def test_snapshots_count_against_the_pause_quota(tmp_path):
    gw = gateway(tmp_path, "--pause-quota-mb", "100")
    try:
        src = gw.request("POST", "/api/kernels", {"name": "python3"}, token=ALICE)[1]["id"]
        status, snap, _ = gw.request("POST", f"/api/kernels/{src}/snapshot", {}, token=ALICE)
        assert status == 201, snap
        # What is left (100 MiB less the first) holds no second one.
        status, body, _ = gw.request("POST", f"/api/kernels/{src}/snapshot", {}, token=ALICE)
        assert status == 507 and "--pause-quota-mb" in body["message"], body
        assert len(checkpoints(tmp_path)) == 1
        assert gw.request("DELETE", f"/api/snapshots/{snap['id']}", token=ALICE)[0] == 204
        status, again, _ = gw.request("POST", f"/api/kernels/{src}/snapshot", {}, token=ALICE)
        assert status == 201, again
    finally:
        gw.stop()


def test_bad_snapshot_requests_say_why(tmp_path):
    gw = gateway(tmp_path)
    try:
        src = gw.request("POST", "/api/kernels", {"name": "python3"}, token=ALICE)[1]["id"]
        status, body, _ = gw.request("POST", f"/api/kernels/{src}/snapshot", {"name": 5},
                                     token=ALICE)
        assert status == 400 and "name" in body["message"], body
        assert gw.request("POST", "/api/kernels/nope/snapshot", {}, token=ALICE)[0] == 404
        assert gw.request("GET", f"/api/kernels/{src}/snapshot", token=ALICE)[0] == 405
        for bad in ("nope", 5, ""):
            status, body, _ = gw.request("POST", "/api/kernels", {"snapshot": bad},
                                         token=ALICE)
            assert status == 404 and "snapshot" in body["message"], (bad, body)
        assert gw.request("POST", "/api/snapshots", {}, token=ALICE)[0] == 405
        assert value_of(gw, src, "1 + 1", token=ALICE) == 2
    finally:
        gw.stop()
