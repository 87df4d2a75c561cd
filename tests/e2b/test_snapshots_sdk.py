"""Snapshots and forks through the unmodified E2B Python SDK. Snapshots keep
a sandbox's files (variables are not kept, and the snapshot says so):
create_snapshot, Sandbox.create(snapshot_id), list_snapshots,
delete_snapshot; kept under --state-dir, counted against the key's
--pause-quota-mb, each tenant's own. fork(count) keeps the memory too where
CRIU can checkpoint the sandbox: variables, contexts, commands. E2B's own
snapshot and fork tests run in the e2b-upstream suite."""
import hashlib
import json
import os
import secrets
import time

import pytest

from gbclient import checkpoint_dirs

from conftest import point_sdk_at, start_gateway


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    keys = {name: "e2b_" + secrets.token_hex(20) for name in ("alice", "bob")}
    path.write_text(json.dumps({"keys": [
        {"name": name, "sha256": hashlib.sha256(key.encode()).hexdigest()}
        for name, key in keys.items()]}))
    state = str(tmp_path_factory.mktemp("state"))
    gw = start_gateway("--keys-file", str(path), "--state-dir", state,
                       token="e2b_" + secrets.token_hex(20))
    gw.keys = keys
    gw.state = state
    yield gw
    gw.stop()


@pytest.fixture(autouse=True)
def sdk_env(gateway):
    point_sdk_at(gateway, gateway.token)


def run(sbx, code):
    ex = sbx.run_code(code)
    assert ex.error is None, ex.error
    return "".join(ex.logs.stdout)


def memory_forks():
    from test_pause_memory import criu_usable
    return os.geteuid() == 0 and criu_usable()


def test_a_snapshot_starts_sandboxes_with_its_files(gateway):
    from e2b_code_interpreter import Sandbox
    src = Sandbox.create(envs={"FROM": "source"}, metadata={"who": "src"})
    try:
        src.files.write("/home/user/data.txt", "snapshot me")
        run(src, "x = 41")
        snap = src.create_snapshot(name="first")
        assert snap.names == ["first"]
        # Later changes of the source are not in it.
        src.files.write("/home/user/data.txt", "changed after")
        a = Sandbox.create(snap.snapshot_id)
        b = Sandbox.create(snap.snapshot_id)
        try:
            assert a.sandbox_id not in (src.sandbox_id, b.sandbox_id)
            assert a.files.read("/home/user/data.txt") == "snapshot me"
            a.files.write("/home/user/data.txt", "a's own")
            assert b.files.read("/home/user/data.txt") == "snapshot me"
            # The snapshot's environment and template, and with CRIU its
            # memory (files only without: no variables).
            assert run(a, "import os; print(os.environ.get('FROM'))").strip() == "source"
            # E2B's own variables name the new sandbox, not the source.
            assert run(b, "import os; print(os.environ['E2B_SANDBOX_ID'])").strip() == \
                b.sandbox_id
            ex = a.run_code("x")
            if memory_forks():
                assert ex.text == "41" and b.run_code("x + 1").text == "42"
                # Each its own: what one sets, the other does not see.
                assert a.run_code("x = 0").error is None and b.run_code("x").text == "41"
            else:
                assert ex.error is not None and ex.error.name == "NameError"
        finally:
            a.kill()
            b.kill()
        # Listed with what it keeps said, deleted with its checkpoint.
        status, listed, _ = gateway.request("GET", f"/e2b/snapshots?sandboxID={src.sandbox_id}",
                                            headers={"X-API-Key": gateway.token}, token="")
        assert status == 200, listed
        assert [s["snapshotID"] for s in listed] == [snap.snapshot_id]
        assert listed[0]["glovebox"]["memoryKept"] is memory_forks()
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert not os.path.exists(os.path.join(gateway.state, "snapshots", snap.snapshot_id))
        deadline = time.monotonic() + 10
        while checkpoint_dirs(gateway.state):
            assert time.monotonic() < deadline, "the snapshot's checkpoint is still there"
            time.sleep(0.1)
        with pytest.raises(Exception) as e:
            Sandbox.create(snap.snapshot_id)
        assert "not found" in str(e.value)
    finally:
        src.kill()


def test_fork_gives_independent_sandboxes_and_the_source_runs_on(gateway):
    from e2b_code_interpreter import Sandbox
    src = Sandbox.create(timeout=120)
    try:
        src.files.write("/home/user/state.txt", "before the fork")
        end_before = src.get_info().end_at
        forks = src.fork(count=3, timeout=60)
        assert len(forks) == 3 and all(isinstance(f, Sandbox) for f in forks), forks
        try:
            ids = {f.sandbox_id for f in forks}
            assert len(ids) == 3 and src.sandbox_id not in ids
            tokens = {f._envd_access_token for f in forks} | {src._envd_access_token}
            assert len(tokens) == 4, "each fork its own token"
            for i, f in enumerate(forks):
                assert f.files.read("/home/user/state.txt") == "before the fork"
                f.files.write("/home/user/state.txt", f"fork {i}")
            assert [f.files.read("/home/user/state.txt") for f in forks] == \
                ["fork 0", "fork 1", "fork 2"]
            assert src.files.read("/home/user/state.txt") == "before the fork"
            # The source keeps its id and lifetime.
            assert src.is_running() and src.get_info().end_at == end_before
            # Randomness is the fork's own: a new kernel, not a copy.
            seeds = {run(f, "import random; print(random.random())") for f in forks}
            assert len(seeds) == 3
        finally:
            for f in forks:
                f.kill()
        # The fork's own snapshot is gone, listed nowhere.
        assert os.listdir(os.path.join(gateway.state, "snapshots")) == []
        assert Sandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items() == []
    finally:
        src.kill()


@pytest.mark.skipif(not memory_forks(), reason="forks with memory need root and CRIU 4.1+")
def test_fork_keeps_the_memory_contexts_and_commands(gateway):
    from e2b_code_interpreter import Sandbox
    src = Sandbox.create(timeout=120)
    try:
        assert src.run_code("import random\nx = 41").error is None
        ctx = src.create_code_context()
        assert src.run_code("y = 7", context=ctx).error is None
        cat = src.commands.run("cat", background=True, stdin=True)
        forks = src.fork(count=2, timeout=60)
        try:
            draws = {run(src, "print(random.random())")}
            sandbox_id = "__import__('os').environ['E2B_SANDBOX_ID']"
            for f in forks:
                assert f.run_code("x").text == "41"
                assert f.run_code("y", context=ctx).text == "7"
                # E2B's variables name the fork, in its memory and after a restart.
                assert f.run_code(sandbox_id).text == f.sandbox_id
                assert f.run_code(sandbox_id, context=ctx).text == f.sandbox_id
                assert cat.pid in {c.pid for c in f.commands.list()}
                # The fork's copy of cat reads and writes its own new pipes.
                followed = f.commands.connect(cat.pid)
                f.commands.send_stdin(cat.pid, f"to {f.sandbox_id}\n")
                seen = ""
                for stdout, _, _ in followed:
                    seen += stdout or ""
                    if f.sandbox_id in seen:
                        break
                assert seen == f"to {f.sandbox_id}\n"
                followed.disconnect()
                draws.add(run(f, "print(random.random())"))
            # Reseeded: no two draw the same numbers.
            assert len(draws) == 3, draws
            forks[0].restart_code_context(ctx)
            assert forks[0].run_code(sandbox_id, context=ctx).text == forks[0].sandbox_id
            assert src.run_code(sandbox_id).text == src.sandbox_id
            # The source runs on, its command too.
            assert src.run_code("x + 1").text == "42"
            assert cat.pid in {c.pid for c in src.commands.list()}
        finally:
            for f in forks:
                f.kill()
        assert checkpoint_dirs(gateway.state) == []
    finally:
        src.kill()


def test_snapshots_are_their_tenants(gateway):
    from e2b import Sandbox
    alice, bob = gateway.keys["alice"], gateway.keys["bob"]
    src = Sandbox.create(api_key=alice)
    try:
        snap = src.create_snapshot()
        try:
            assert [s.snapshot_id for s in
                    Sandbox.list_snapshots(api_key=alice).next_items()] == [snap.snapshot_id]
            assert Sandbox.list_snapshots(api_key=bob).next_items() == []
            with pytest.raises(Exception):
                Sandbox.create(snap.snapshot_id, api_key=bob)
            assert Sandbox.delete_snapshot(snap.snapshot_id, api_key=bob) is False
        finally:
            assert Sandbox.delete_snapshot(snap.snapshot_id, api_key=alice) is True
    finally:
        src.kill()


def test_bad_snapshot_and_fork_requests_say_why(gateway):
    from e2b import Sandbox
    src = Sandbox.create()
    try:
        h = {"X-API-Key": gateway.token}
        for body in ({"count": 0}, {"count": 1000}, {"count": "two"}):
            status, answer, _ = gateway.request("POST", f"/e2b/sandboxes/{src.sandbox_id}/fork",
                                                body, headers=h, token="")
            assert status == 400 and "count" in answer["message"], (body, answer)
        status, answer, _ = gateway.request("POST", f"/e2b/sandboxes/{src.sandbox_id}/snapshots",
                                            {"name": "no spaces allowed"}, headers=h, token="")
        assert status == 400 and "name" in answer["message"], answer
        status, answer, _ = gateway.request("GET", "/e2b/snapshots?limit=0", headers=h, token="")
        assert status == 400, answer
        src.pause()
        status, answer, _ = gateway.request("POST", f"/e2b/sandboxes/{src.sandbox_id}/fork",
                                            {}, headers=h, token="")
        assert status == 409 and "paused" in answer["message"], answer
    finally:
        src.kill()


def test_snapshots_outlive_the_gateway_and_count_against_the_quota(tmp_path):
    from e2b import Sandbox
    from e2b.exceptions import RateLimitException
    state = str(tmp_path / "state")
    os.makedirs(state, mode=0o700)
    token = "e2b_" + secrets.token_hex(20)
    gw = start_gateway("--state-dir", state, "--pause-quota-mb", "3", token=token)
    try:
        point_sdk_at(gw, token)
        src = Sandbox.create()
        src.commands.run("head -c 2200000 /dev/urandom > /home/user/blob")
        snap = src.create_snapshot(name="kept")
        # Less than a megabyte of room is left: the next is refused.
        with pytest.raises(RateLimitException):
            src.create_snapshot()
        src.kill()
    finally:
        gw.stop()
    gw = start_gateway("--state-dir", state, token=token)
    try:
        point_sdk_at(gw, token)
        assert [s.snapshot_id for s in Sandbox.list_snapshots().next_items()] == [snap.snapshot_id]
        s = Sandbox.create(snap.snapshot_id)
        try:
            assert s.commands.run("wc -c < /home/user/blob").stdout.strip() == "2200000"
        finally:
            s.kill()
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    finally:
        gw.stop()
