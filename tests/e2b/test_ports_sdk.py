"""E2B's getHost(port) against a real Glovebox: the unmodified Python SDK
names "{port}-{sandboxId}.{domain}" with the domain Glovebox returned at
create, and that name, sent as the Host to the gateway's own address (what
a wildcard DNS name or curl --resolve does), reaches the sandbox's server."""
import http.client
import time
import urllib.error
import urllib.request

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

        # The API key works as well; without either, 403 (E2B's answer).
        status, _ = get(gateway, host, "/index.txt", {"Authorization": f"Bearer {gateway.token}"})
        assert status == 200
        status, _ = get(gateway, host, "/index.txt")
        assert status == 403
        status, _ = get(gateway, host, "/index.txt", {"e2b-traffic-access-token": "wrong"})
        assert status == 403
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
        assert status == 403
    finally:
        sbx.kill()
    with pytest.raises(SandboxException) as e:
        Sandbox.create(metadata={"glovebox.public_ports": "80,http"})
    assert "glovebox.public_ports" in str(e.value)


def wait_served(gateway, host, headers=None):
    deadline = time.time() + 30
    while True:
        status, body = get(gateway, host, "/", headers)
        if status != 502 or time.time() > deadline:
            return status
        time.sleep(0.2)  # the server is still starting


def test_allow_public_traffic_is_what_the_create_says(gateway):
    """network.allowPublicTraffic true: every port without a token; false:
    a port needs the traffic access token (or the API key), as in E2B."""
    from e2b import SandboxNetworkOpts
    public = Sandbox.create(network=SandboxNetworkOpts(allow_public_traffic=True))
    private = Sandbox.create(network=SandboxNetworkOpts(allow_public_traffic=False))
    try:
        for sbx in (public, private):
            sbx.commands.run("python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp",
                             background=True)
        assert wait_served(gateway, public.get_host(8000)) == 200
        token = {"e2b-traffic-access-token": private.traffic_access_token}
        assert wait_served(gateway, private.get_host(8000), token) == 200
        assert get(gateway, private.get_host(8000), "/")[0] == 403
        # One sandbox's traffic token opens no other sandbox's port.
        assert get(gateway, private.get_host(8000), "/",
                   {"e2b-traffic-access-token": public.traffic_access_token})[0] == 403
    finally:
        public.kill()
        private.kill()


def envd_get(gateway, sbx, headers):
    """envd's file read on the wire, with only the headers given."""
    req = urllib.request.Request(gateway.base + "/e2b/files?path=/home/user/t.txt",
                                 headers={"E2b-Sandbox-Id": sbx.sandbox_id,
                                          "E2b-Sandbox-Port": "49983", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def path_get(gateway, path, headers=None):
    """The path form, /api/kernels/{id}/ports/{port}/..., without the API key."""
    return get(gateway, f"127.0.0.1:{gateway.port}", path, headers)


def test_traffic_and_envd_tokens_are_distinct_each_for_its_own_plane(gateway):
    """The traffic access token (given out for an app's users) and the envd
    access token (the sandbox's files and processes) are two secrets: the
    envd token opens no private port, the traffic token opens no envd."""
    from e2b import SandboxNetworkOpts
    sbx = Sandbox.create(network=SandboxNetworkOpts(allow_public_traffic=False))
    try:
        envd, traffic = sbx._envd_access_token, sbx.traffic_access_token
        assert envd and traffic and envd != traffic
        sbx.files.write("/home/user/t.txt", "envd's")
        sbx.commands.run("python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp",
                         background=True)
        host = sbx.get_host(8000)
        assert wait_served(gateway, host, {"e2b-traffic-access-token": traffic}) == 200
        assert get(gateway, host, "/", {"e2b-traffic-access-token": envd})[0] == 403
        # The path form, the same.
        path = f"/api/kernels/{sbx.sandbox_id}/ports/8000/"
        assert path_get(gateway, path, {"e2b-traffic-access-token": traffic})[0] == 200
        assert path_get(gateway, path, {"e2b-traffic-access-token": envd})[0] == 401
        # envd: its own token, in its own header, only.
        assert envd_get(gateway, sbx, {"X-Access-Token": envd}) == (200, b"envd's")
        for headers in ({"X-Access-Token": traffic}, {"E2B-Traffic-Access-Token": traffic},
                        {"E2B-Traffic-Access-Token": envd}, {}):
            assert envd_get(gateway, sbx, headers)[0] == 401, headers
        # The SDK still does everything with them.
        assert sbx.run_code("6 * 7").text == "42"
        assert sbx.files.read("/home/user/t.txt") == "envd's"
        # Kept across a pause: connect answers the same two.
        assert sbx.pause() is True
        again = Sandbox.connect(sbx.sandbox_id)
        assert (again._envd_access_token, again.traffic_access_token) == (envd, traffic)
        assert again.files.read("/home/user/t.txt") == "envd's"
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_the_path_form_takes_an_e2b_sandbox_id(gateway):
    """/api/kernels/{id}/ports/{port}/ with an E2B sandbox's id serves its
    port as the Host form does (it answered "No kernel or sandbox")."""
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/site/index.txt", "by the path form")
        sbx.commands.run(
            "python3 -m http.server 8000 --bind 127.0.0.1 --directory /home/user/site",
            background=True)
        assert wait_served(gateway, sbx.get_host(8000),
                           {"e2b-traffic-access-token": sbx.traffic_access_token}) == 200
        path = f"/api/kernels/{sbx.sandbox_id}/ports/8000/index.txt"
        for headers in ({"Authorization": f"token {gateway.token}"},
                        {"e2b-traffic-access-token": sbx.traffic_access_token}):
            assert path_get(gateway, path, headers) == (200, b"by the path form"), headers
        # Without credentials: 401, as for an unknown id.
        assert path_get(gateway, path)[0] == 401
        assert path_get(gateway, "/api/kernels/gb0123456789abcdef/ports/8000/")[0] == 401
    finally:
        sbx.kill()
    # Killed: not found.
    assert path_get(gateway, path, {"Authorization": f"token {gateway.token}"})[0] == 404


def test_public_traffic_by_default_is_the_operators_choice():
    """--e2b-public-traffic: a create that says nothing gets E2B's default,
    public ports; one that says false still gets a private port."""
    from conftest import point_sdk_at
    from e2b import SandboxNetworkOpts
    from gbclient import start_gateway
    gw = start_gateway("--e2b-public-traffic", token=None)
    import re
    gw.token = re.search(r"\?token=(\S+)", gw.url_line).group(1)
    point_sdk_at(gw, gw.token)
    try:
        plain = Sandbox.create()
        private = Sandbox.create(network=SandboxNetworkOpts(allow_public_traffic=False))
        for sbx in (plain, private):
            sbx.commands.run("python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp",
                             background=True)
        assert wait_served(gw, plain.get_host(8000)) == 200
        token = {"e2b-traffic-access-token": private.traffic_access_token}
        assert wait_served(gw, private.get_host(8000), token) == 200
        assert get(gw, private.get_host(8000), "/")[0] == 403
        # A resumed sandbox keeps it.
        assert plain.pause() is True
        plain = Sandbox.connect(plain.sandbox_id)
        plain.commands.run("python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp",
                           background=True)
        assert wait_served(gw, plain.get_host(8000)) == 200
        plain.kill()
        private.kill()
    finally:
        gw.stop()


HEADER_ECHO = """
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = self.headers.get('Host', '').encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(('127.0.0.1', 8080), H).serve_forever()
"""


def test_mask_request_host_is_the_host_the_app_sees(gateway):
    """network.maskRequestHost (E2B's): the app gets that Host, ${PORT} the
    port's number; a value that could end the header is refused."""
    from e2b import SandboxNetworkOpts
    sbx = Sandbox.create(network=SandboxNetworkOpts(
        mask_request_host="app.example.com:${PORT}", allow_public_traffic=True))
    try:
        sbx.files.write("/tmp/echo.py", HEADER_ECHO)
        sbx.commands.run("python3 /tmp/echo.py", background=True)
        deadline = time.time() + 30
        while True:
            status, body = get(gateway, sbx.get_host(8080), "/")
            if status != 502 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert (status, body) == (200, b"app.example.com:8080")
    finally:
        sbx.kill()
    for bad in ("a.example.com\r\nX-Injected: 1", "a b", "", "x" * 300):
        with pytest.raises(SandboxException) as e:
            Sandbox.create(network=SandboxNetworkOpts(mask_request_host=bad))
        assert "maskRequestHost" in str(e.value)
