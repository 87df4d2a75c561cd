"""E2B's getHost(port) against a real Glovebox: the unmodified Python SDK
names "{port}-{sandboxId}.{domain}" with the domain Glovebox returned at
create, and that name, sent as the Host to the gateway's own address (what
a wildcard DNS name or curl --resolve does), reaches the sandbox's server."""
import http.client
import time

import pytest

from e2b import SandboxException
from e2b_code_interpreter import Sandbox


def get(gateway, host, path="/", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": host, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_get_host_names_the_gateway_and_reaches_the_sandbox(gateway):
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/site/index.txt", "served from an E2B sandbox")
        server = sbx.commands.run(
            "python3 -m http.server 8000 --bind 127.0.0.1 --directory /home/user/site",
            background=True)
        host = sbx.get_host(8000)
        # Glovebox's own address, never E2B's domain.
        assert host == f"8000-{sbx.sandbox_id}.localhost:{gateway.port}", host

        token = {"e2b-traffic-access-token": sbx.traffic_access_token}
        deadline = time.time() + 30
        while True:
            status, body = get(gateway, host, "/index.txt", token)
            if status != 502 or time.time() > deadline:
                break
            time.sleep(0.2)  # the server is still starting
        assert status == 200, (status, body)
        assert body == b"served from an E2B sandbox"

        # The API key works as well; without either, 401.
        status, _ = get(gateway, host, "/index.txt", {"Authorization": f"Bearer {gateway.token}"})
        assert status == 200
        status, _ = get(gateway, host, "/index.txt")
        assert status == 401
        status, _ = get(gateway, host, "/index.txt", {"e2b-traffic-access-token": "wrong"})
        assert status == 401
        # A port nothing listens on: 502 with a message.
        status, body = get(gateway, sbx.get_host(8001), "/", token)
        assert status == 502 and b"8001" in body
        server.kill()
    finally:
        sbx.kill()
    # A killed sandbox's name no longer reaches anything.
    status, _ = get(gateway, host, "/index.txt", {"Authorization": f"Bearer {gateway.token}"})
    assert status == 404


def test_metadata_makes_ports_public(gateway):
    sbx = Sandbox.create(metadata={"glovebox.public_ports": "8000"})
    try:
        sbx.commands.run("python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp",
                         background=True)
        host = sbx.get_host(8000)
        deadline = time.time() + 30
        while True:
            status, _ = get(gateway, host, "/")
            if status != 502 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert status == 200, status
        # Only the ports named.
        status, _ = get(gateway, sbx.get_host(8001), "/")
        assert status == 401
    finally:
        sbx.kill()
    with pytest.raises(SandboxException) as e:
        Sandbox.create(metadata={"glovebox.public_ports": "80,http"})
    assert "glovebox.public_ports" in str(e.value)
