"""Tenants through the unmodified E2B Python SDK: each API key a tenant
(--keys-file), a sandbox its creator's, another key's sandboxes not found,
and a key past its quota refused with the SDK's rate-limit error."""
import hashlib
import json
import secrets

import pytest

from conftest import point_sdk_at
from gbclient import start_gateway

from e2b_code_interpreter import Sandbox
from e2b import RateLimitException, SandboxNotFoundException
from e2b.sandbox.sandbox_api import SandboxQuery


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """This module's glovebox, with keys (conftest's sdk_env points the SDK at
    it, with the token; each call below names its key)."""
    path = tmp_path_factory.mktemp("keys") / "keys.json"
    # E2B's form (e2b_ and hex digits): the SDK checks it before sending.
    keys = {name: "e2b_" + secrets.token_hex(20) for name in ("alice", "bob")}
    quotas = {"alice": {"max_kernels": 1}, "bob": {}}
    path.write_text(json.dumps({"keys": [
        dict({"name": name, "sha256": hashlib.sha256(key.encode()).hexdigest()}, **quotas[name])
        for name, key in keys.items()]}))
    gw = start_gateway("--keys-file", str(path))
    gw.keys = keys
    point_sdk_at(gw, gw.token)
    yield gw
    gw.stop()


def test_a_sandbox_is_its_creators_alone(gateway):
    alice, bob = gateway.keys["alice"], gateway.keys["bob"]
    sbx = Sandbox.create(api_key=alice, metadata={"suite": "tenants"})
    try:
        assert sbx.run_code("6 * 7").text == "42"
        # bob: not found, by every way the SDK names a sandbox.
        with pytest.raises(SandboxNotFoundException):
            Sandbox.connect(sbx.sandbox_id, api_key=bob)
        with pytest.raises(SandboxNotFoundException):
            Sandbox.get_info(sbx.sandbox_id, api_key=bob)
        assert Sandbox.kill(sbx.sandbox_id, api_key=bob) is False
        query = SandboxQuery(metadata={"suite": "tenants"})
        assert Sandbox.list(query=query, api_key=bob).next_items() == []
        assert [s.sandbox_id for s in Sandbox.list(query=query, api_key=alice).next_items()] \
            == [sbx.sandbox_id]
        # alice's quota is one kernel: her sandbox's context holds it.
        with pytest.raises(RateLimitException) as refused:
            Sandbox.create(api_key=alice)
        assert "Quota" in str(refused.value)
        # bob is not held back by it.
        other = Sandbox.create(api_key=bob)
        try:
            assert other.run_code("1 + 1").text == "2"
            # Still alice's, and alive after all of bob's attempts.
            again = Sandbox.connect(sbx.sandbox_id, api_key=alice)
            assert again.run_code("6 * 7").text == "42"
        finally:
            assert other.kill() is True
    finally:
        assert Sandbox.kill(sbx.sandbox_id, api_key=alice) is True
