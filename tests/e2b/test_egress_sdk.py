"""E2B's Python SDK, unmodified, asking for internet access from a Glovebox
whose operator allows some egress (tests/sandbox/testnet.py's pretend
internet: nothing leaves this machine)."""
import os
import sys

import pytest

from conftest import generated_token, point_sdk_at
from gbclient import start_gateway

from e2b import SandboxException
from e2b_code_interpreter import Sandbox

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sandbox"))
import testnet  # noqa: E402
from testnet import PRIVATE, PUBLIC, PUBLIC_OTHER  # noqa: E402

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(os.access(t, os.X_OK) for t in
                                 ("/usr/sbin/nft", "/usr/sbin/dnsmasq", "/usr/sbin/ip")),
    reason="egress needs root, nftables, dnsmasq-base and iproute2")

FETCH = """
import urllib.request
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=5).read().decode()
    except Exception as e:
        return type(getattr(e, "reason", e)).__name__
[get(u) for u in URLS]
"""


EGRESS = ("--egress-allow", f"{PUBLIC}/32,{PUBLIC_OTHER}/32,public.gbtest",
          "--egress-dns", testnet.DNS)


@pytest.fixture(scope="module")
def net():
    t = testnet.TestNet().up()
    yield t
    t.down()


@pytest.fixture(scope="module")
def egress_gateway(net):
    gw = start_gateway(*EGRESS, token=None)
    gw.token = generated_token(gw)
    try:
        yield gw
    finally:
        gw.stop()


def fetch(sbx, urls):
    ex = sbx.run_code(f"URLS = {urls!r}\n" + FETCH)
    assert ex.error is None, ex.error
    return eval(ex.text)


def test_internet_access_within_the_operator_policy(egress_gateway):
    point_sdk_at(egress_gateway, egress_gateway.token)
    sbx = Sandbox.create(allow_internet_access=True)
    try:
        info = sbx.get_info()
        assert info.allow_internet_access is True
        assert fetch(sbx, ["http://public.gbtest/", f"http://{PUBLIC}/", f"http://{PRIVATE}/"]) \
            == ["public", "public", "ConnectionRefusedError"]
        # Commands share the sandbox's network.
        out = sbx.commands.run(f"python3 -c \"import urllib.request as u; "
                               f"print(u.urlopen('http://{PUBLIC}/').read().decode())\"")
        assert out.stdout == "public\n"
    finally:
        sbx.kill()


def test_no_internet_access(egress_gateway):
    point_sdk_at(egress_gateway, egress_gateway.token)
    sbx = Sandbox.create(allow_internet_access=False)
    try:
        assert sbx.get_info().allow_internet_access is False
        assert fetch(sbx, [f"http://{PUBLIC}/", "http://public.gbtest/"]) == [
            "OSError", "gaierror"]
    finally:
        sbx.kill()


def test_allow_out_narrows_and_outside_is_refused(egress_gateway):
    point_sdk_at(egress_gateway, egress_gateway.token)
    sbx = Sandbox.create(network={"allow_out": [PUBLIC], "deny_out": ["0.0.0.0/0"]})
    try:
        assert fetch(sbx, [f"http://{PUBLIC}/", f"http://{PUBLIC_OTHER}/"]) == [
            "public", "ConnectionRefusedError"]
    finally:
        sbx.kill()
    with pytest.raises(SandboxException) as caught:
        Sandbox.create(network={"allow_out": ["10.0.0.0/8"]})
    assert "400" in str(caught.value) and "10.0.0.0/8" in str(caught.value)


def test_pause_keeps_the_memory_and_the_internet_access(net, tmp_path):
    """(Issue 24.) A sandbox with internet access pauses with its memory
    and comes back with the same egress; a pause of its files only is
    refused, saying why: the files alone would come back without it."""
    from test_pause_memory import CRIU, criu_usable
    if not criu_usable():
        pytest.skip(f"memory pause needs CRIU 4.1+ at {CRIU}")
    gw = start_gateway(*EGRESS, "--state-dir", str(tmp_path / "state"), "--criu", CRIU,
                       token=None)
    gw.token = generated_token(gw)
    try:
        point_sdk_at(gw, gw.token)
        sbx = Sandbox.create(allow_internet_access=True, network={"allow_out": ["public.gbtest"]})
        assert sbx.run_code("x = 7; x").text == "7"
        with pytest.raises(SandboxException) as refused:
            sbx.pause(keep_memory=False)
        assert "network egress is paused only with its memory" in str(refused.value)
        assert sbx.pause() is True
        info = Sandbox.get_info(sbx.sandbox_id)
        assert info.state.value == "paused"
        again = Sandbox.connect(sbx.sandbox_id)
        try:
            info = again.get_info()
            assert info.allow_internet_access is True
            assert info.network == {"allow_out": ["public.gbtest"], "deny_out": []}, info.network
            assert again.run_code("x + 1").text == "8"
            # The same egress: the allowed name, nothing else.
            assert fetch(again, ["http://public.gbtest/", f"http://{PUBLIC_OTHER}/"]) == [
                "public", "ConnectionRefusedError"]
            out = again.commands.run("python3 -c \"import urllib.request as u; "
                                     "print(u.urlopen('http://public.gbtest/').read().decode())\"")
            assert out.stdout == "public\n"
        finally:
            again.kill()
    finally:
        gw.stop()
