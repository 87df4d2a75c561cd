"""A small Jupyter kernel client for Glovebox's tests: REST with urllib,
channels with websocket-client, in both wire formats."""
import http.client
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import websocket

V1 = "v1.kernel.websocket.jupyter.org"

BUILD = os.environ.get("GLOVEBOX_BUILD",
                       os.path.join(os.path.dirname(__file__), "..", "..", "build"))
BINARY = os.path.abspath(os.path.join(BUILD, "glovebox"))
KERNEL_HOST = os.path.abspath(os.path.join(BUILD, "glovebox-kernel-host"))
# The sandbox is the default; GLOVEBOX_TEST_ARGS adds flags to every gateway.
EXTRA_ARGS = os.environ.get("GLOVEBOX_TEST_ARGS", "").split()


def cold_args(args):
    """--zygote none and --pool none, each unless args name their own: a
    test's gateway starts kernels cold and keeps no pool, as the test says,
    unless it asks for glovebox's defaults (warm=True; test_defaults.py)."""
    named = lambda flag: any(a == flag or a.startswith(flag + "=") for a in args)
    return ([] if named("--zygote") else ["--zygote", "none"]) + \
        ([] if named("--pool") else ["--pool", "none"])


def start_gateway(*args, **kw):
    """A real glovebox from the build tree, with the test flags and args."""
    return Gateway(BINARY, list(EXTRA_ARGS) + list(args), **kw)


def start_with_keys(keys_dir, names, *args):
    """A gateway with a keys file of one plain key per name (besides its
    token, the admin's); gw.keys maps each name to its key, and
    gw.create(name) starts a python3 kernel as that tenant."""
    from test_tenants import new_key, write_keys
    keys = {name: new_key(name) for name in names}
    path = os.path.join(str(keys_dir), "keys.json")
    write_keys(path, {name: (key, {}) for name, key in keys.items()})
    gw = start_gateway("--keys-file", path, *args)
    gw.keys = keys

    def create(name):
        status, model, _ = gw.request("POST", "/api/kernels", {"name": "python3"},
                                      token=keys[name])
        assert status == 201, (status, model)
        return model["id"]

    gw.create = create
    return gw


def children(pid):
    """The pids of pid's children."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def cmdline(pid):
    """pid's command line, NUL-separated bytes (b"" once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def kernel_pids():
    """The host pids of every kernel running."""
    out = subprocess.run(["pgrep", "-f", "ipykernel_launcher"], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


def thread_cores(pid):
    """Each thread's Cpus_allowed_list ("0-1"), as the host reads it."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            out.append(re.search(r"^Cpus_allowed_list:\s*(\S+)", f.read(), re.M).group(1))
    return out


# The same, read by a kernel of its own threads: their distinct values, sorted.
THREAD_CORES_IN_KERNEL = (
    "sorted({__import__('re').search(r'Cpus_allowed_list:\\s*(\\S+)', "
    "open(f'/proc/self/task/{t}/status').read()).group(1) "
    "for t in __import__('os').listdir('/proc/self/task')})")


def kernel_host(gw):
    """The pid of gw's kernel-host."""
    hosts = [p for p in children(gw.proc.pid) if b"kernel-host" in cmdline(p)]
    assert len(hosts) == 1, hosts
    return hosts[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """A real glovebox process on a free loopback port."""

    def __init__(self, binary, args=(), token="test-token-0123456789", env=None, runner=(),
                 warm=False):
        self.port = free_port()
        self.token = token
        self.base = f"http://127.0.0.1:{self.port}"
        cmd = list(runner) + [binary, "--listen", f"127.0.0.1:{self.port}"]
        if token:
            cmd += ["--token", token]
        cmd += list(args) + ([] if warm else cold_args(args))
        # Each gateway its own state directory (paused sandboxes), unless
        # the test names one: as root the default, /var/lib/glovebox, is
        # shared by every gateway on the machine.
        # A runner (another user) keeps the default: none when unprivileged.
        self.own_state_dir = None
        if not runner and not any(a == "--state-dir" or a.startswith("--state-dir=")
                                  for a in cmd):
            self.own_state_dir = tempfile.mkdtemp(prefix="glovebox-state-")
            cmd += ["--state-dir", self.own_state_dir]
        self.log_path = f"/tmp/glovebox-test-{self.port}.log"
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log,
                                     env=env, text=True)
        self.url_line = self.proc.stdout.readline()
        if "serving at" not in self.url_line:
            self.proc.kill()
            raise RuntimeError("glovebox did not start: " + self.read_log())

    def read_log(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig=15, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.own_state_dir:
            shutil.rmtree(self.own_state_dir, ignore_errors=True)
            self.own_state_dir = None
        return self.proc.returncode

    def request(self, method, path, body=None, token=None, raw=None, headers=None):
        """Returns (status, parsed JSON or None, headers)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        tok = self.token if token is None else token
        if tok:
            req.add_header("Authorization", f"token {tok}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                text = resp.read()
                return resp.status, (json.loads(text) if text else None), resp.headers
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                parsed = json.loads(text) if text else None
            except ValueError:
                parsed = text
            return e.code, parsed, e.headers

    def start_kernel(self, **body):
        status, model, _ = self.request("POST", "/api/kernels", body or {"name": "python3"})
        assert status == 201, (status, model)
        return model["id"]

    def connect(self, kernel_id, session_id=None, subprotocol=None, token=None,
                last_msg_id=None):
        return Channel(self, kernel_id, session_id, subprotocol, token, last_msg_id)


class Channel:
    """One WebSocket connection to a kernel's channels."""

    def __init__(self, gw, kernel_id, session_id=None, subprotocol=None, token=None,
                 last_msg_id=None):
        self.session = session_id or uuid.uuid4().hex
        tok = gw.token if token is None else token
        url = (f"ws://127.0.0.1:{gw.port}/api/kernels/{kernel_id}/channels"
               f"?session_id={self.session}")
        if tok:
            url += f"&token={tok}"
        if last_msg_id is not None:
            url += "&last_msg_id=" + urllib.parse.quote(last_msg_id, safe="")
        self.v1 = subprotocol == V1
        # websocket-client checks UTF-8 byte by byte in Python (~5 MB/s):
        # off, or a test of throughput measures the client.
        self.ws = websocket.create_connection(
            url, timeout=60, subprotocols=[subprotocol] if subprotocol else None,
            skip_utf8_validation=True)

    def close(self):
        self.ws.close()

    def close_reading(self, on_message, timeout=10):
        """Closes with the WebSocket handshake and hands on_message every
        message that arrives before the gateway's close frame.
        websocket-client's close() reads those and drops them, where the
        gateway, which sent them before it saw our close, counts them as
        delivered: a client that keeps them, as a browser does, is told
        everything once."""
        ws = self.ws
        ws.send_close()
        ws.settimeout(timeout)
        while True:
            frame = ws.recv_frame()
            if frame.opcode == websocket.ABNF.OPCODE_CLOSE:
                break
            if frame.opcode not in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY,
                                    websocket.ABNF.OPCODE_CONT):
                continue
            ws.cont_frame.validate(frame)
            ws.cont_frame.add(frame)
            if ws.cont_frame.is_fire(frame):
                opcode, whole = ws.cont_frame.extract(frame)
                on_message(self.decode(opcode, whole.data))
        ws.shutdown()

    def send(self, msg_type, content, channel="shell", msg_id=None):
        msg_id = msg_id or uuid.uuid4().hex
        header = {"msg_id": msg_id, "msg_type": msg_type, "username": "test",
                  "session": self.session, "date": "2026-01-01T00:00:00.000000Z",
                  "version": "5.3"}
        if self.v1:
            parts = [json.dumps(p).encode() for p in (header, {}, {}, content)]
            self.ws.send_binary(encode_v1(channel, parts))
        else:
            self.ws.send(json.dumps({"header": header, "parent_header": {}, "metadata": {},
                                     "content": content, "channel": channel}))
        return msg_id

    def recv(self, timeout=60):
        self.ws.settimeout(timeout)
        opcode, data = self.ws.recv_data()
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            raise ConnectionError("closed")
        return self.decode(opcode, data)

    def decode(self, opcode, data):
        if self.v1:
            return decode_v1(data)
        if opcode == websocket.ABNF.OPCODE_BINARY:
            return decode_json_binary(data)
        return json.loads(data)

    def execute(self, code, timeout=60, stdin_reply=None, allow_stdin=False):
        """Runs code; returns (reply, iopub messages) for this request."""
        msg_id = self.send("execute_request", {
            "code": code, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": allow_stdin or stdin_reply is not None, "stop_on_error": True})
        return self.collect(msg_id, timeout, stdin_reply)

    def collect(self, msg_id, timeout=60, stdin_reply=None):
        deadline = time.time() + timeout
        reply, outputs, idle = None, [], False
        # Another request's messages that came while an earlier collect
        # waited (a reply on shell can come after the next cell's output on
        # iopub): kept for that request's own collect, in order.
        held, self.held = getattr(self, "held", []), []
        while not (reply and idle):
            left = deadline - time.time()
            if left <= 0:
                self.held = held + self.held
                raise TimeoutError(f"no reply/idle for {msg_id}")
            m = held.pop(0) if held else self.recv(left)
            if m["parent_header"].get("msg_id") != msg_id:
                if len(self.held) < 10000:
                    self.held.append(m)
                continue
            if m["channel"] == "stdin" and m["msg_type"] == "input_request":
                self.send("input_reply", {"value": stdin_reply(m["content"]["prompt"])}, "stdin")
            elif m["channel"] == "shell":
                reply = m
            elif m["channel"] == "iopub":
                outputs.append(m)
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    idle = True
        self.held += held
        return reply, outputs


def encode_v1(channel, parts):
    chunks = [channel.encode()] + list(parts)
    n = len(chunks) + 1
    offsets = [8 * (1 + n)]
    for c in chunks:
        offsets.append(offsets[-1] + len(c))
    return struct.pack("<%dQ" % (n + 1), n, *offsets) + b"".join(chunks)


def decode_v1(data):
    n = struct.unpack_from("<Q", data)[0]
    offsets = struct.unpack_from("<%dQ" % n, data, 8)
    parts = [data[offsets[i]:offsets[i + 1]] for i in range(n - 1)]
    msg = {"channel": parts[0].decode(), "header": json.loads(parts[1]),
           "parent_header": json.loads(parts[2]), "metadata": json.loads(parts[3]),
           "content": json.loads(parts[4]), "buffers": parts[5:]}
    msg["msg_type"] = msg["header"]["msg_type"]
    return msg


def decode_json_binary(data):
    nbufs = struct.unpack_from(">I", data)[0]
    offsets = list(struct.unpack_from(">%dI" % nbufs, data, 4)) + [len(data)]
    msg = json.loads(data[offsets[0]:offsets[1]])
    msg["buffers"] = [data[offsets[i]:offsets[i + 1]] for i in range(1, nbufs)]
    return msg


def rss_kib(pid):
    """The resident memory of process pid, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for process {pid}")


def outputs_of(outputs, msg_type):
    return [m for m in outputs if m["msg_type"] == msg_type]


def stdout_of(outputs):
    return "".join(m["content"]["text"] for m in outputs
                   if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")


def keys_file(directory, keys):
    """A --keys-file in directory naming each key of keys ({name: key}) by
    its SHA-256, as an operator writes one."""
    import hashlib
    path = os.path.join(str(directory), "keys.json")
    with open(path, "w") as f:
        json.dump({"keys": [{"name": name, "sha256": hashlib.sha256(key.encode()).hexdigest()}
                            for name, key in keys.items()]}, f)
    return path


def checkpoint_dirs(state):
    """The checkpoints under a state directory: not the kernel-host's own
    dotfiles (its manifest key)."""
    return sorted(n for n in os.listdir(os.path.join(state, "checkpoints"))
                  if not n.startswith("."))


def run_cell(gw, kernel_id, code, timeout=120, token=None):
    """Runs code in a fresh connection (as token's holder, when given);
    returns (reply content, stdout, iopub messages)."""
    ch = gw.connect(kernel_id, token=token)
    try:
        reply, outputs = ch.execute(code, timeout=timeout)
    finally:
        ch.close()
    return reply["content"], stdout_of(outputs), outputs


def value_of(gw, kernel_id, expr, timeout=120, token=None):
    """Evaluates a Python expression in the kernel; returns it (repr, then
    literal_eval)."""
    import ast
    # On a line of its own: IPython may have printed a notice without a
    # line end (its history database on a full disk).
    content, stdout, _ = run_cell(gw, kernel_id, f"print('\\n' + repr({expr}))", timeout,
                                  token)
    assert content["status"] == "ok", content
    return ast.literal_eval(stdout.strip().splitlines()[-1])


def host_limits(uid_map):
    """The memory, pids and CPU limits of the kernel's cgroups, read on the
    host from its processes (found by their host uid)."""
    host_uid = uid_map[uid_map.index("1000") + 1]
    pids = subprocess.run(["pgrep", "-u", host_uid, "-f", "ipykernel"], capture_output=True,
                          text=True).stdout.split()
    assert pids, "no kernel process of host uid " + host_uid
    limits = {}
    for line in open(f"/proc/{pids[0]}/cgroup"):
        _, ctrls, path = line.strip().split(":", 2)
        # The sandbox's group holds the limits; the kernel's own is below it.
        # Pure cgroup v2 (one hierarchy, "0::path"): the same limits under
        # their v2 names, cpu.max's quota alone.
        group = os.path.dirname(path) if os.path.basename(path).startswith("p-") else path
        for ctrl, name in (("memory", "memory.max"), ("pids", "pids.max"), ("cpu", "cpu.max")):
            file = f"/sys/fs/cgroup{group}/{name}"
            if not ctrls and os.path.exists(file):
                limits[ctrl] = open(file).read().split()[0]
        for ctrl, name in (("memory", "memory.limit_in_bytes"), ("pids", "pids.max"),
                           ("cpu", "cpu.cfs_quota_us")):
            if ctrl in ctrls.split(","):
                base = f"/sys/fs/cgroup/{ctrls}" if os.path.isdir(f"/sys/fs/cgroup/{ctrls}") \
                    else f"/sys/fs/cgroup/{ctrl}"
                for root, _, files in os.walk(base):
                    if root.endswith(group) and name in files:
                        limits[ctrl] = open(os.path.join(root, name)).read().strip()
                        break
    return limits


def assert_pids_limit_holds(gw, kernel_id, limit):
    """The kernel's pids limit holds, not only reads back: it forks until
    refused, which must come before limit children."""
    reply, out, _ = run_cell(gw, kernel_id, (
        "import os, time\nkids = []\n"
        "try:\n    for _ in range(200):\n        pid = os.fork()\n"
        "        if pid == 0:\n            time.sleep(30); os._exit(0)\n"
        f"        kids.append(pid)\nexcept OSError as e:\n    print('refused', len(kids) < {limit})\n"
        "for p in kids:\n    os.kill(p, 9); os.waitpid(p, 0)"))
    assert reply["status"] == "ok" and out == "refused True\n", (reply, out)


def expect_out_of_memory(ch, msg_id, limit_mb, timeout=120):
    """Waits on ch for the out-of-memory death of the cell msg_id in a kernel
    limited to limit_mb: KernelOutOfMemory as the cell's error and reply,
    then dead, restarting, idle; then checks that the kernel restarted
    fresh (x, which the cell was making, is not defined)."""
    error = reply = None
    states = []
    deadline = time.time() + timeout
    while not (error and reply and "idle" in states) and time.time() < deadline:
        m = ch.recv(timeout=max(deadline - time.time(), 1))
        if m["msg_type"] == "error" and m["parent_header"].get("msg_id") == msg_id:
            error = m["content"]
        elif m["msg_type"] == "execute_reply" and m["parent_header"].get("msg_id") == msg_id:
            reply = m["content"]
        elif m["msg_type"] == "status" and (error or states):
            states.append(m["content"]["execution_state"])
    assert error and error["ename"] == "KernelOutOfMemory", error
    assert f"{limit_mb} MiB" in error["evalue"], error
    assert reply and reply["status"] == "error" and reply["ename"] == "KernelOutOfMemory", reply
    assert states[:2] == ["dead", "restarting"] and "idle" in states, states
    _, outputs = ch.execute("'x' in dir()")
    assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] == \
        "False", "the kernel restarted fresh"


# --- E2B sandboxes and envd, spoken raw (the SDK tests are in tests/e2b) -----

def e2b_create(gw, timeout=300, env_vars=None):
    """A new E2B sandbox (its JSON: sandboxID, envdAccessToken...)."""
    body = {"timeout": timeout}
    if env_vars is not None:
        body["envVars"] = env_vars
    status, sb, _ = gw.request("POST", "/e2b/v2/sandboxes", body, token="",
                               headers={"X-API-KEY": gw.token})
    assert status == 201, sb
    return sb


def e2b_kill(gw, sb):
    return gw.request("DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", token="",
                      headers={"X-API-KEY": gw.token})[0]


def e2b_run(gw, sb, body):
    """POST /execute of sb: (status, lines) or (status, error text)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=180)
    conn.request("POST", "/e2b/execute", json.dumps(body),
                 {"E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49999",
                  "X-Access-Token": sb["envdAccessToken"], "Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read().decode()
    conn.close()
    if resp.status != 200:
        return resp.status, data
    return 200, [json.loads(line) for line in data.splitlines() if line.strip()]


def envd_headers(sb, auth=None):
    """The headers of a request to sb's envd; auth: an Authorization value
    ("Basic base64('root:')" names the user as the SDKs do)."""
    headers = {"E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49983",
               "X-Access-Token": sb["envdAccessToken"]}
    if auth:
        headers["Authorization"] = auth
    return headers


def envd_rpc(gw, sb, method, body, auth=None):
    """A unary envd RPC ("filesystem.Filesystem/Stat"): (status, JSON)."""
    status, reply, _ = gw.request("POST", "/e2b/" + method, body, token="",
                                  headers=envd_headers(sb, auth))
    return status, reply


def http_body(raw):
    """The body of a raw HTTP/1.x response read to its end: chunks joined
    when it is chunked. Returns (body, complete): complete is False when a
    chunked body ended without its last chunk (the stream was cut)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return rest, True
    body = b""
    while True:
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            return body, False
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return body, True
        if len(rest) < size + 2:
            return body + rest[:size], False
        body += rest[:size]
        rest = rest[size + 2:]


def connect_frames(data):
    """Connect envelopes: [(flags, JSON)]."""
    frames = []
    while len(data) >= 5:
        n = struct.unpack(">I", data[1:5])[0]
        frames.append((data[0], json.loads(data[5:5 + n])))
        data = data[5 + n:]
    return frames


def envd_envelope(msg):
    raw = json.dumps(msg).encode()
    return b"\0" + struct.pack(">I", len(raw)) + raw


def envd_sh(gw, sb, script, auth=None, timeout=60):
    """Runs script with sh -c as an envd command; returns (exit code, stdout,
    stderr), or raises RuntimeError with the stream's Connect error."""
    import base64
    req = urllib.request.Request(gw.base + "/e2b/process.Process/Start", method="POST",
                                 data=envd_envelope({"process": {"cmd": "/bin/sh",
                                                                 "args": ["-c", script]}}))
    req.add_header("Content-Type", "application/connect+json")
    for k, v in envd_headers(sb, auth).items():
        req.add_header(k, v)
    out, err, code = b"", b"", None
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    for flags, frame in connect_frames(body):
        if flags & 2:
            if "error" in frame:
                raise RuntimeError(frame["error"]["message"])
            break
        event = frame.get("event", {})
        data = event.get("data", {})
        out += base64.b64decode(data.get("stdout", ""))
        err += base64.b64decode(data.get("stderr", ""))
        if "end" in event:
            code = event["end"].get("exitCode", 0)
    return code, out.decode(), err.decode()
