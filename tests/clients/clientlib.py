"""Helpers for the client tests: Jupyter Server / Notebook processes as
gateway clients of a glovebox, PNG checks."""
import base64
import ctypes
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import websocket  # noqa: E402
from gbclient import Channel, free_port  # noqa: E402

# The interpreter with Debian's jupyter_server 1.23, notebook 6.4 and nbclient.
PYTHON = "/usr/bin/python3"
GB_TOKEN = "glovebox-token-0123456789"


class JupyterProcess:
    """jupyter_server or notebook as a gateway client of a glovebox."""

    def __init__(self, module, gateway, tmp_path, extra=()):
        self.port = free_port()
        self.token = "client-token-" + uuid.uuid4().hex
        self.base = f"http://127.0.0.1:{self.port}"
        self.root = tmp_path / "root"
        self.root.mkdir(exist_ok=True)
        home = tmp_path / "jupyter"
        env = dict(os.environ)
        # Keep the user's Jupyter configuration and runtime files out of it.
        env.update(JUPYTER_CONFIG_DIR=str(home / "config"),
                   JUPYTER_DATA_DIR=str(home / "data"),
                   JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                   JUPYTER_PLATFORM_DIRS="0", HOME=str(home))
        for k in list(env):
            if k.startswith("JUPYTER_GATEWAY") or k.startswith("KERNEL_"):
                del env[k]
        app = "ServerApp" if module == "jupyter_server" else "NotebookApp"
        cmd = [PYTHON, "-m", module, "--no-browser", "--allow-root",
               "--ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
               f"--{app}.token={self.token}",
               f"--gateway-url={gateway.base}"]
        if gateway.token:
            cmd.append(f"--GatewayClient.auth_token={gateway.token}")
        if module == "jupyter_server":
            cmd.append(f"--ServerApp.root_dir={self.root}")
        else:
            cmd.append(f"--notebook-dir={self.root}")
        cmd += list(extra)
        self.log_path = tmp_path / f"{module}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     cwd=str(self.root), preexec_fn=_die_with_parent)
        deadline = time.time() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{module} exited: {self.read_log()}")
            try:
                status, _, _ = self.request("GET", "/api")
                if status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"{module} did not start: {self.read_log()}")
            time.sleep(0.1)

    def read_log(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def request(self, method, path, body=None, token=None):
        """Returns (status, parsed JSON or raw bytes, headers)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"token {token or self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, _parse(resp.read()), resp.headers
        except urllib.error.HTTPError as e:
            return e.code, _parse(e.read()), e.headers

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _die_with_parent():
    """SIGTERM to the child if the test process dies first (a killed pytest
    leaves no Jupyter server behind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _parse(body):
    try:
        return json.loads(body) if body else None
    except ValueError:
        return body



def check_png(data):
    """Decodes base64 PNG data and returns (width, height); fails if it is no PNG."""
    from PIL import Image

    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", raw[:16]
    img = Image.open(io.BytesIO(raw))
    img.load()  # decodes every chunk: a truncated image raises here
    assert img.format == "PNG"
    assert img.width > 50 and img.height > 50, img.size
    # A real plot, not a blank canvas: more than a handful of colours.
    assert len(img.convert("RGB").getcolors(1 << 20) or []) > 10
    return img.size


def kernel_ids(gw):
    status, kernels, _ = gw.request("GET", "/api/kernels")
    assert status == 200, (status, kernels)
    return {k["id"]: k for k in kernels}


def ready_channel(server, kernel_id, timeout=30, **kw):
    """A channel connection through a Jupyter server's proxy, once it relays.

    jupyter_server 1.23's gateway proxy drops frames that arrive before its
    own connection to the gateway is set up (GatewayWebSocketClient.on_message
    waits on a placeholder future that _connect has not replaced yet). Real
    frontends cope by sending kernel_info_request until one is answered, and
    so does this."""
    ch = Channel(server, kernel_id, **kw)
    deadline = time.time() + timeout
    while time.time() < deadline:
        msg_id = ch.send("kernel_info_request", {})
        until = time.time() + 0.5
        while time.time() < until:
            try:
                m = ch.recv(max(0.01, until - time.time()))
            except websocket.WebSocketTimeoutException:
                break
            if m["channel"] == "shell" and m["parent_header"].get("msg_id") == msg_id:
                assert m["msg_type"] == "kernel_info_reply", m
                return ch
    ch.close()
    raise TimeoutError(f"no kernel_info_reply through {server.base} for {kernel_id}")
