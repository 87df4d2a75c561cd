"""The container image deploy/kubernetes/glovebox.yaml names (issue 25, item
12): deploy/container/Containerfile builds with podman from this checkout,
and the image, run as docs/operations.md says (privileged, a read-only root,
the token from a mounted file), serves a sandboxed Python kernel.

A long test (minutes: the image installs Debian's scientific Python stack
and builds Glovebox): scripts/test --long runs it, and installs podman for
it. Its base is Debian 12, which cannot be pulled without a registry: the
test uses GLOVEBOX_CONTAINER_BASE, or a local debian:12, or makes one once
with debootstrap (as root, from Debian's mirror) and podman import."""
import os
import shutil
import subprocess
import tempfile

import pytest

from gbclient import Gateway, free_port, run_cell

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
IMAGE = "localhost/glovebox-test:latest"
# Made by this test from debootstrap when no Debian 12 image is here.
MADE_BASE = "localhost/glovebox-base:debian12"

pytestmark = [
    pytest.mark.skipif(not os.environ.get("GLOVEBOX_LONG"),
                       reason="long (builds a container image, minutes): scripts/test --long"),
    pytest.mark.skipif(shutil.which("podman") is None,
                       reason="needs podman (Debian's; scripts/test --long installs it)"),
]


def podman(*args, **kw):
    return subprocess.run(["podman", *args], **kw)


def image_exists(name):
    return podman("image", "exists", name).returncode == 0


def base_image():
    """A Debian 12 image to build FROM, made once when there is none."""
    for name in (os.environ.get("GLOVEBOX_CONTAINER_BASE"), MADE_BASE,
                 "docker.io/library/debian:12"):
        if name and image_exists(name):
            return name
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.skip("no Debian 12 image here (none can be pulled without a registry: set "
                    "GLOVEBOX_CONTAINER_BASE), and no debootstrap as root to make one")
    tree = tempfile.mkdtemp(prefix="glovebox-base-")
    try:
        made = subprocess.run(["debootstrap", "--variant=minbase", "bookworm", tree],
                              capture_output=True, text=True, timeout=1200)
        if made.returncode != 0:
            pytest.skip("no Debian 12 image here, and debootstrap could not make one "
                        "(Debian's mirror unreachable?): " + made.stderr[-500:])
        tar = subprocess.Popen(["tar", "-C", tree, "--numeric-owner", "-c", "."],
                               stdout=subprocess.PIPE)
        podman("import", "--change", "CMD [\"/bin/bash\"]", "-", MADE_BASE,
               stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
        tar.stdout.close()
        assert tar.wait() == 0
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return MADE_BASE


def runtime_flags(base):
    """podman's flags for a container this host will run. Debian's podman
    runs crun, which refuses a host with cgroup v1 and v2 mounted together
    (hybrid): runc, when installed, runs there. As root podman asks for
    1048576 descriptors and 4194304 processes, which a host whose root lacks
    CAP_SYS_RESOURCE refuses: the unit's 65536 (LimitNOFILE=), or the most
    below it that the host grants."""
    flags = ["--runtime", "runc"] if shutil.which("runc") else []
    tried = []
    for nofile, nproc in ((65536, 65536), (32768, 32768), (16384, 32768), (8192, 16384),
                          (4096, 4096)):
        limits = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
        probe = podman("run", "--rm", *flags, *limits, base, "true", capture_output=True,
                       text=True, timeout=120)
        if probe.returncode == 0:
            return flags + limits
        tried.append(probe.stderr.strip()[-300:])
    pytest.fail("podman runs no container here:\n" + "\n".join(tried))


@pytest.fixture(scope="module")
def image():
    """The image, left in podman's store after the run: its layers make the
    next build (the next --long run) take seconds where nothing changed."""
    base = base_image()
    flags = runtime_flags(base)
    # host networking: the build's apt reaches Debian's mirror without a
    # bridge or NAT set up for containers.
    built = podman("build", "--network=host", *flags, "--build-arg", f"BASE={base}",
                   "-f", "deploy/container/Containerfile", "-t", IMAGE, ".",
                   cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return IMAGE, flags


class ContainerGateway(Gateway):
    """The image's own entrypoint, run as docs/operations.md says."""

    def __init__(self, image, flags):
        self.port = free_port()
        self.token = "e2b_" + os.urandom(20).hex()
        self.base = f"http://127.0.0.1:{self.port}"
        self.own_state_dir = None
        self.name = f"glovebox-test-{self.port}"
        self.secrets = tempfile.mkdtemp(prefix="glovebox-secret-")
        with open(os.path.join(self.secrets, "token"), "w") as f:
            f.write(self.token + "\n")
        os.chmod(os.path.join(self.secrets, "token"), 0o600)
        cmd = ["podman", "run", "--rm", "--name", self.name, "--privileged", "--network=host",
               "--read-only", "--security-opt", "no-new-privileges", *flags,
               "-v", f"{self.secrets}:/etc/glovebox:ro",
               image, "--listen", f"127.0.0.1:{self.port}", "--token-file",
               "/etc/glovebox/token"]
        self.log_path = f"/tmp/glovebox-test-{self.port}.log"
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.url_line = self.proc.stdout.readline()
        if "serving at" not in self.url_line:
            self.stop()
            raise RuntimeError("the image's glovebox did not start: " + self.read_log())

    def stop(self, sig=15, timeout=40):
        rc = super().stop(sig, timeout)
        podman("rm", "-f", self.name, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.secrets, ignore_errors=True)
        return rc


def test_the_image_serves_a_sandboxed_kernel(image):
    gw = ContainerGateway(*image)
    try:
        assert gw.token not in gw.url_line, "a token from a file is never printed"
        status, body, _ = gw.request("GET", "/api/status")
        assert status == 200, body
        kid = gw.start_kernel(name="python3")
        content, stdout, _ = run_cell(gw, kid, "import os, numpy, pandas\n"
                                               "print(numpy.arange(4).sum(), os.getuid())\n")
        assert content["status"] == "ok" and stdout.startswith("6 "), (content, stdout)
        # The sandbox's root is the image's, read-only to the kernel's user.
        content, _, _ = run_cell(gw, kid, "open('/usr/made-here', 'w')")
        assert content["status"] == "error" and content["ename"] in (
            "PermissionError", "OSError"), content
        status, _, _ = gw.request("DELETE", f"/api/kernels/{kid}")
        assert status == 204
    finally:
        # SIGTERM reaches glovebox through podman (the unit's KillMode=mixed):
        # it stops its kernels and exits 0.
        assert gw.stop() == 0, gw.read_log()[-3000:]
