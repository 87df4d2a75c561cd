"""A pretend internet for egress tests, made of network namespaces on this
machine; no packet of it ever leaves the machine.

    public   netns gbt-pub-<pid>,  veth gbtpub<n>:  host 198.18.1.1, netns 198.18.1.2
             HTTP on :80 (198.18.1.2 and 198.18.1.3, and 169.254.169.254 as a
             stand-in metadata service), the upstream DNS server on :53
    private  netns gbt-priv-<pid>, veth gbtpriv<n>: host 198.18.2.1, netns 198.18.2.2
             HTTP on :80

Names (answered by the public netns' dnsmasq): public.gbtest -> 198.18.1.2,
private.gbtest -> 198.18.2.2, other.gbtest -> 198.18.1.3,
metadata.gbtest -> 169.254.169.254, hostself.gbtest -> 198.18.1.1 (this
host's own address on the public link). A server on this host listens on
198.18.1.1 too, so "the host's own address is unreachable" has something
to refuse. Every server answers GET / with its own name, and /big with
BIG_BYTES bytes.
"""
import os
import socket
import subprocess
import textwrap
import time

PUBLIC = "198.18.1.2"
PUBLIC_OTHER = "198.18.1.3"
PRIVATE = "198.18.2.2"
HOST_PUBLIC = "198.18.1.1"
METADATA = "169.254.169.254"
DNS = PUBLIC
BIG_BYTES = 1 << 20

SERVER = textwrap.dedent("""
    import http.server, socketserver, sys
    name, addrs, port, big = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = (b"x" * big) if self.path == "/big" else name.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    class S(socketserver.ThreadingMixIn, socketserver.TCPServer):
        # Not HTTPServer: its server_bind looks the address up in DNS.
        daemon_threads = True
        allow_reuse_address = True
    import threading
    servers = [S((a, port), H) for a in addrs]
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    servers[0].serve_forever()
""")


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class TestNet:
    def __init__(self):
        tag = os.getpid() % 100000
        self.ns_pub = f"gbt-pub-{tag}"
        self.ns_priv = f"gbt-priv-{tag}"
        self.if_pub = f"gbtpub{tag}"
        self.if_priv = f"gbtpriv{tag}"[:15]
        self.procs = []

    def _link(self, ns, ifname, host, inside, extra=()):
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", ifname, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "addr", "add", f"{host}/24", "dev", ifname)
        sh("ip", "link", "set", ifname, "up")
        # Replies to the sandboxes' masqueraded traffic are forwarded from
        # this link: forwarding on it, and on nothing else of the host's.
        with open(f"/proc/sys/net/ipv4/conf/{ifname}/forwarding", "w") as f:
            f.write("1")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", f"{inside}/24", "dev", "eth0")
        for a in extra:
            sh("ip", "-n", ns, "addr", "add", f"{a}/32", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "route", "add", "default", "via", host)

    def _serve(self, ns, name, addrs, port=80):
        cmd = ["/usr/bin/python3", "-c", SERVER, name, ",".join(addrs), str(port), str(BIG_BYTES)]
        if ns:
            cmd = ["ip", "netns", "exec", ns] + cmd
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        assert p.stdout.readline().strip() == "ready"

    def up(self):
        self.remove_leftovers()
        try:
            return self._up()
        except BaseException:
            self.down()
            raise

    @staticmethod
    def remove_leftovers():
        """What a killed test run left: its netns and links (test names only)."""
        for line in sh("ip", "netns", "list").stdout.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith("gbt-pub-") or name.startswith("gbt-priv-"):
                sh("ip", "netns", "del", name, check=False)
        for line in sh("ip", "-o", "link", "show").stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith("gbtpub") or name.startswith("gbtpriv"):
                sh("ip", "link", "del", name, check=False)
        sh("ip", "route", "del", f"{METADATA}/32", check=False)

    def _up(self):
        self._link(self.ns_pub, self.if_pub, HOST_PUBLIC, PUBLIC, [PUBLIC_OTHER, METADATA])
        self._link(self.ns_priv, self.if_priv, "198.18.2.1", PRIVATE)
        # The stand-in metadata service is reached through the public link.
        sh("ip", "route", "add", f"{METADATA}/32", "via", PUBLIC, "dev", self.if_pub)
        self._serve(self.ns_pub, "public", [PUBLIC, PUBLIC_OTHER, METADATA])
        self._serve(self.ns_priv, "private", [PRIVATE])
        self._serve(None, "host", [HOST_PUBLIC])
        dns = subprocess.Popen(
            ["ip", "netns", "exec", self.ns_pub, "/usr/sbin/dnsmasq", "--keep-in-foreground",
             "--conf-file=/dev/null", "--no-hosts", "--no-resolv", "--bind-interfaces",
             f"--listen-address={DNS}", "--user=nobody", "--group=nogroup", "--pid-file=",
             f"--address=/public.gbtest/{PUBLIC}", f"--address=/private.gbtest/{PRIVATE}",
             f"--address=/other.gbtest/{PUBLIC_OTHER}",
             f"--address=/metadata.gbtest/{METADATA}",
             f"--address=/hostself.gbtest/{HOST_PUBLIC}", "--address=/#/"])
        self.procs.append(dns)
        for _ in range(200):
            try:
                socket.create_connection((DNS, 53), timeout=1).close()
                break
            except OSError:
                time.sleep(0.01)
        return self

    def down(self):
        for p in self.procs:
            p.kill()
            p.wait()
        sh("ip", "route", "del", f"{METADATA}/32", check=False)
        for ns in (self.ns_pub, self.ns_priv):
            sh("ip", "netns", "del", ns, check=False)
        for ifname in (self.if_pub, self.if_priv):
            sh("ip", "link", "del", ifname, check=False)
