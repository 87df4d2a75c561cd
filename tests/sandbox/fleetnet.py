"""Three Glovebox hosts on one machine, each in a network namespace of its
own, behind a real HAProxy (Debian's) on 127.0.0.1: the set-up of
docs/several-hosts.md, configured by deploy/haproxy/fleet-config as an
operator would.

    bridge gbfbr<n> on this host, 198.19.77.1/24
    netns  gbf-<n>-h1  198.19.77.11   glovebox --host-id h1, agent on :9999
    netns  gbf-<n>-h2  198.19.77.12   glovebox --host-id h2
    netns  gbf-<n>-h3  198.19.77.13   glovebox --host-id h3

The namespaces share one bridge, so the gateways reach each other (their
--peer lists) and this host reaches them without any forwarding. Each
gateway is started with nsenter --net only: `ip netns exec` would mount a
fresh /sys and hide the cgroup hierarchies the sandboxes need.
"""
import importlib.machinery
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from gbclient import BINARY, Gateway, cold_args, free_port

SUBNET = "198.19.77"
GATEWAY_PORT = 8888
AGENT_PORT = 9999
HOSTS = ("h1", "h2", "h3")
# E2B's form, so that the E2B SDK takes it as it is.
TOKEN = "e2b_0123456789abcdef0123"
FLEET_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy",
                            "haproxy", "fleet-config")


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def _load_fleet_config():
    """deploy/haproxy/fleet-config as a module (its file has no .py)."""
    loader = importlib.machinery.SourceFileLoader("fleet_config", FLEET_CONFIG)
    spec = importlib.util.spec_from_loader("fleet_config", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# The tags HAProxy routes by, from the script that writes its configuration:
# a gateway whose ids do not start with them fails host_of below.
fleet_config = _load_fleet_config()
uuid_prefix = fleet_config.uuid_prefix
sandbox_prefix = fleet_config.sandbox_prefix


def host_of(id_):
    """The host an id names, or None."""
    for h in HOSTS:
        if id_.startswith(uuid_prefix(h)) or id_.startswith(sandbox_prefix(h)):
            return h
    return None


class Endpoint:
    """What gbclient's helpers need of a gateway: its port, base URL and
    token. The front proxy is one; each host's own address is another."""

    request = Gateway.request
    start_kernel = Gateway.start_kernel
    connect = Gateway.connect

    def __init__(self, host, port, token=TOKEN):
        self.host, self.port, self.token = host, port, token
        self.base = f"http://{host}:{port}"


class Host:
    def __init__(self, fleet, index, name):
        self.name = name
        self.addr = f"{SUBNET}.{10 + index}"
        self.ns = f"gbf-{fleet.tag}-{name}"
        self.veth = f"gbf{fleet.tag}{name}"[:15]
        self.url = f"http://{self.addr}:{GATEWAY_PORT}"
        self.endpoint = Endpoint(self.addr, GATEWAY_PORT)
        self.proc = None
        self.state_dir = tempfile.mkdtemp(prefix=f"glovebox-fleet-{name}-")
        self.log_path = f"/tmp/glovebox-fleet-{fleet.tag}-{name}.log"

    def start(self, peers, extra=()):
        cmd = ["nsenter", f"--net=/run/netns/{self.ns}", "--", BINARY,
               "--listen", f"{self.addr}:{GATEWAY_PORT}", "--token", TOKEN,
               "--host-id", self.name, "--agent-listen", f"{self.addr}:{AGENT_PORT}",
               "--state-dir", self.state_dir, "--peer-timeout", "2"]
        for p in peers:
            cmd += ["--peer", p.url]
        cmd += list(extra) + cold_args(extra)
        self.log = open(self.log_path, "w+")
        # A session of its own: the teardown ends its kernel-host too.
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        if "serving at" not in line:
            self.proc.kill()
            raise RuntimeError(f"glovebox {self.name} did not start: " + self.read_log())

    def read_log(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def kill(self):
        """SIGKILL to the gateway alone, as a host that fails would."""
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc = None


class Fleet:
    def __init__(self):
        self.tag = os.getpid() % 100000
        self.bridge = f"gbfbr{self.tag}"
        self.hosts = [Host(self, i + 1, n) for i, n in enumerate(HOSTS)]
        self.dir = tempfile.mkdtemp(prefix="glovebox-fleet-haproxy-")
        self.front_port = free_port()
        self.front = Endpoint("127.0.0.1", self.front_port)
        self.stats_sock = os.path.join(self.dir, "stats.sock")
        self.haproxy = None

    def host(self, name):
        return next(h for h in self.hosts if h.name == name)

    # ---- network ----------------------------------------------------------

    @staticmethod
    def remove_leftovers():
        """What a killed run left: its netns, links and bridge (test names only)."""
        for line in sh("ip", "netns", "list").stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith("gbf-"):
                sh("ip", "netns", "del", name, check=False)
        for line in sh("ip", "-o", "link", "show").stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith("gbf"):
                sh("ip", "link", "del", name, check=False)

    def _network(self):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for h in self.hosts:
            sh("ip", "netns", "add", h.ns)
            sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
            sh("ip", "link", "set", h.veth, "master", self.bridge)
            sh("ip", "link", "set", h.veth, "up")
            sh("ip", "-n", h.ns, "link", "set", "lo", "up")
            sh("ip", "-n", h.ns, "addr", "add", f"{h.addr}/24", "dev", "eth0")
            sh("ip", "-n", h.ns, "link", "set", "eth0", "up")

    # ---- HAProxy --------------------------------------------------------

    def write_haproxy_config(self):
        """haproxy.cfg and its error files for this fleet, written by the
        operators' own command (deploy/haproxy/fleet-config), which also
        checks the result with haproxy -c. Returns the file's path."""
        cfg = os.path.join(self.dir, "haproxy.cfg")
        cmd = [FLEET_CONFIG, "--listen", f"127.0.0.1:{self.front_port}", "--output", cfg,
               "--stats-socket", self.stats_sock, "--agent-port", str(AGENT_PORT), "--check"]
        for h in self.hosts:
            cmd += ["--host", f"{h.name}={h.addr}:{GATEWAY_PORT}"]
        r = sh(*cmd, check=False)
        assert r.returncode == 0, r.stdout + r.stderr
        return cfg

    def _start_haproxy(self):
        cfg = self.write_haproxy_config()
        self.haproxy_log = open(os.path.join(self.dir, "haproxy.log"), "w+")
        self.haproxy = subprocess.Popen(["haproxy", "-db", "-f", cfg], stdout=self.haproxy_log,
                                        stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.front_port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("haproxy did not start")

    def haproxy_command(self, command):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.stats_sock)
            s.sendall(command.encode() + b"\n")
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        return out.decode()

    def spread_state(self):
        """{host: (status, weight)} of the create backend, as HAProxy sees it."""
        lines = self.haproxy_command("show stat").splitlines()
        fields = lines[0].lstrip("# ").split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(fields, line.split(",")))
            if row.get("pxname") == "spread" and row.get("svname") in HOSTS:
                out[row["svname"]] = (row["status"], int(row["weight"] or 0))
        return out

    def wait_spread(self, want, timeout=30):
        """Waits until every host named in want has that status in the
        create backend ("UP", "DRAIN", "DOWN")."""
        deadline = time.time() + timeout
        state = {}
        while time.time() < deadline:
            state = self.spread_state()
            if all(state.get(h, ("",))[0].startswith(s) for h, s in want.items()):
                return state
            time.sleep(0.1)
        raise AssertionError(f"HAProxy's create backend is {state}, not {want}")

    # ---- all of it --------------------------------------------------------

    def up(self):
        self.remove_leftovers()
        try:
            self._network()
            for h in self.hosts:
                h.start([p for p in self.hosts if p is not h])
            self._start_haproxy()
            self.wait_spread({h.name: "UP" for h in self.hosts})
        except BaseException:
            self.down()
            raise
        return self

    def down(self):
        if self.haproxy:
            self.haproxy.kill()
            self.haproxy.wait()
            self.haproxy = None
        for h in self.hosts:
            h.stop()
        for h in self.hosts:
            sh("ip", "netns", "del", h.ns, check=False)
            sh("ip", "link", "del", h.veth, check=False)
        sh("ip", "link", "del", self.bridge, check=False)
        for d in [self.dir] + [h.state_dir for h in self.hosts]:
            shutil.rmtree(d, ignore_errors=True)
