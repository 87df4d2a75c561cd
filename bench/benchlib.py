"""What the benchmark drives: Glovebox and Jupyter Server (the same Jupyter
kernel API, the same client code) and, for the floor, a kernel talked to
over ZMQ directly with jupyter_client."""
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import websocket

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("GLOVEBOX_BUILD", os.path.join(ROOT, "build"))
# Kernels run with Debian's Python whatever "python3" is first on PATH.
ENV = dict(os.environ, PATH="/usr/bin:/bin:/usr/sbin:/sbin")
# The floor's kernels get a fresh home, as sandboxed ones do (IPython reads
# its profile and history database from there at start).
KERNEL_HOME = tempfile.mkdtemp(prefix="bench-home-")
atexit.register(shutil.rmtree, KERNEL_HOME, ignore_errors=True)
KERNEL_ENV = dict(ENV, HOME=KERNEL_HOME)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer")


def execute_content(code):
    return {"code": code, "silent": False, "store_history": False, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True}


def collect(recv, msg_id):
    """Reads (channel, message) pairs from recv() until msg_id's reply and
    its idle status are in; returns its other iopub messages."""
    outputs, reply, idle = [], False, False
    while not (reply and idle):
        channel, m = recv()
        if not m or m["parent_header"].get("msg_id") != msg_id:
            continue
        if channel == "shell":
            reply = True
            if m["content"].get("status") != "ok":
                raise RuntimeError(f"execution failed: {m['content']}")
        elif m["msg_type"] == "status":
            idle = m["content"]["execution_state"] == "idle"
        else:
            outputs.append(m)
    return outputs


def wait_ready(session, shell, iopub, poller, timeout=60):
    """Asks a kernel for kernel_info until it answers and iopub carries a
    message too (a SUB socket subscribes asynchronously: until then the
    kernel's outputs are lost), what any client, Glovebox too, waits for."""
    replied = published = False
    deadline = time.time() + timeout
    while not (replied and published):
        if time.time() > deadline:
            raise RuntimeError("the kernel did not answer kernel_info")
        session.send(shell, "kernel_info_request", {})
        for sock, _ in poller.poll(20):
            session.recv(sock, mode=0)
            replied |= sock is shell
            published |= sock is iopub


class Server:
    """A Jupyter kernel API server: Glovebox or Jupyter Server."""

    name = "?"

    def __init__(self, cmd, port, token, cwd=None):
        self.port, self.token = port, token
        self.base = f"http://127.0.0.1:{port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=ENV, cwd=cwd,
                                     start_new_session=True)
        wait_http(self.base + "/api")

    def request(self, method, path, body=None, timeout=300):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"token {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read()
                return resp.status, json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            return e.code, None

    def start_kernel(self):
        status, model = self.request("POST", "/api/kernels", {"name": "python3"})
        if status != 201:
            raise RuntimeError(f"{self.name}: POST /api/kernels answered {status}")
        return model["id"]

    def delete_kernel(self, kernel_id):
        self.request("DELETE", f"/api/kernels/{kernel_id}")

    def connect(self, kernel_id):
        return WsChannel(self, kernel_id)

    def cpu_seconds(self):
        """CPU time used so far by the server process itself (not kernels)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Glovebox(Server):
    name = "Glovebox"

    def __init__(self, *args, runner=(), pool=None, defaults=False):
        """Kernels start cold and no pool is kept, unless args name a
        --zygote, pool names a size, or defaults keeps glovebox's own (a
        zygote and a pool of 2 as root: docs/performance.md#fast-by-default)."""
        port, token = free_port(), uuid.uuid4().hex
        cmd = list(runner) + [os.path.join(BUILD, "glovebox"), "--listen", f"127.0.0.1:{port}",
                              "--token", token, "--max-kernels", "2000",
                              "--pool-min-available-mb", "512", *args]
        if pool:
            cmd += ["--pool", f"python3={pool}"]
        elif not defaults:
            cmd += ["--pool", "none"]
        if not defaults and "--zygote" not in args:
            cmd += ["--zygote", "none"]
        super().__init__(cmd, port, token)

    def pool_ready(self):
        status, body = self.request("GET", "/api/status")
        return body["pool"]["kernelspecs"]["python3"]["ready"] if status == 200 else 0

    def wait_pool(self, n, timeout=600):
        deadline = time.time() + timeout
        while self.pool_ready() < n:
            if time.time() > deadline:
                raise RuntimeError("the pool did not fill")
            time.sleep(0.1)


class JupyterServer(Server):
    name = "Jupyter Server"

    def __init__(self):
        port, token = free_port(), uuid.uuid4().hex
        self.root = tempfile.mkdtemp(prefix="bench-js-")
        cmd = ["/usr/bin/python3", "-m", "jupyter_server", "--no-browser", "--allow-root",
               f"--port={port}", "--ip=127.0.0.1", f"--ServerApp.token={token}",
               f"--ServerApp.root_dir={self.root}", "--ServerApp.iopub_msg_rate_limit=0",
               "--ServerApp.iopub_data_rate_limit=0", "--ServerApp.port_retries=0",
               "--MappingKernelManager.cull_idle_timeout=0"]
        super().__init__(cmd, port, token)

    def stop(self):
        super().stop()
        shutil.rmtree(self.root, ignore_errors=True)


class WsChannel:
    """The Jupyter kernel WebSocket (JSON format)."""

    def __init__(self, server, kernel_id):
        self.session = uuid.uuid4().hex
        url = (f"ws://127.0.0.1:{server.port}/api/kernels/{kernel_id}/channels"
               f"?session_id={self.session}&token={server.token}")
        # (websocket-client checks UTF-8 byte by byte in Python: off, or it
        # measures itself.)
        self.ws = websocket.create_connection(url, timeout=600, skip_utf8_validation=True)

    def send(self, msg_type, content, channel="shell"):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": msg_type, "session": self.session,
                       "username": "bench", "date": "", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "content": content, "channel": channel,
            "buffers": []}))
        return msg_id

    def execute(self, code):
        """Runs code; returns its iopub messages (statuses left out)."""
        return collect(self.recv, self.send("execute_request", execute_content(code)))

    def recv(self):
        opcode, data = self.ws.recv_data()
        if opcode != websocket.ABNF.OPCODE_TEXT:
            return None, None
        m = json.loads(data)
        return m["channel"], m

    def close(self):
        self.ws.close()


class DirectKernel:
    """The floor: an ipykernel on the host, talked to over ZMQ directly with
    pyzmq and jupyter_client's Session (signing, JSON), in one synchronous
    loop like the WebSocket client's: no gateway, no client threads."""

    name = "direct ZMQ"

    def __init__(self):
        import zmq
        from jupyter_client.manager import KernelManager
        os.environ["PATH"] = ENV["PATH"]
        self.zmq = zmq
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env=KERNEL_ENV)
        self.session = self.km.session
        self.shell = self.km.connect_shell()
        self.iopub = self.km.connect_iopub()
        self.poller = zmq.Poller()
        self.poller.register(self.shell, zmq.POLLIN)
        self.poller.register(self.iopub, zmq.POLLIN)
        wait_ready(self.session, self.shell, self.iopub, self.poller)

    def execute(self, code):
        sent = self.session.send(self.shell, "execute_request", execute_content(code))
        return collect(self.recv, sent["header"]["msg_id"])

    def recv(self):
        (sock, _), *_ = self.poller.poll(600_000)
        _, m = self.session.recv(sock, mode=0)
        return ("shell" if sock is self.shell else "iopub"), m

    def close(self):
        self.shell.close(0)
        self.iopub.close(0)
        self.km.shutdown_kernel(now=True)


def bare_first_result():
    """The floor of a cold start: ipykernel started as a plain process
    (connection file, Popen), asked for kernel_info until it answers (and
    iopub carries a message), then `1+1` run, with pyzmq and Session in one
    synchronous loop. Seconds from the start to the result."""
    import zmq
    from jupyter_client.connect import write_connection_file
    from jupyter_client.session import Session

    t0 = time.perf_counter()
    fd, path = tempfile.mkstemp(suffix=".json", prefix="bench-kernel-")
    os.close(fd)
    info = write_connection_file(path, ip="127.0.0.1", key=uuid.uuid4().hex.encode())[1]
    proc = subprocess.Popen(["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=KERNEL_ENV)
    ctx = zmq.Context.instance()
    session = Session(key=info["key"].encode() if isinstance(info["key"], str) else info["key"])
    shell = ctx.socket(zmq.DEALER)
    shell.connect(f"tcp://127.0.0.1:{info['shell_port']}")
    iopub = ctx.socket(zmq.SUB)
    iopub.setsockopt(zmq.SUBSCRIBE, b"")
    iopub.connect(f"tcp://127.0.0.1:{info['iopub_port']}")
    poller = zmq.Poller()
    poller.register(shell, zmq.POLLIN)
    poller.register(iopub, zmq.POLLIN)
    try:
        wait_ready(session, shell, iopub, poller)
        msg_id = session.send(shell, "execute_request", execute_content("1+1"))["header"]["msg_id"]
        while True:
            events = poller.poll(60_000)
            if not events:
                raise RuntimeError("the bare kernel did not answer 1+1")
            for sock, _ in events:
                _, m = session.recv(sock, mode=0)
                if (sock is iopub and m["msg_type"] == "execute_result"
                        and m["parent_header"].get("msg_id") == msg_id):
                    return time.perf_counter() - t0
    finally:
        shell.close(0)
        iopub.close(0)
        proc.kill()
        proc.wait()
        os.unlink(path)


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children = {}
    for line in out.splitlines():
        p, pp = map(int, line.split())
        children.setdefault(pp, []).append(p)
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(children.get(p, []))
    return seen
