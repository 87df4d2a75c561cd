import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from gbclient import run_cell as run, start_gateway, value_of as value  # noqa: E402,F401

CANARY_ENV = "GLOVEBOX_CANARY_SECRET"
CANARY_VALUE = "canary-4a1f9e"

# A kernel forked from this zygote has numpy imported before its first
# cell; a cold one has not.
ZYGOTE_ARGS = ("--zygote", "python3:numpy")


def memory_pause_possible():
    """What a memory checkpoint needs here: root, overlayfs and CRIU 4.1+
    (scripts/test builds it; the uml suite's kernel has no overlayfs)."""
    import re
    import subprocess
    if os.geteuid() != 0 or "overlay" not in open("/proc/filesystems").read():
        return False
    try:
        out = subprocess.run([os.environ.get("GLOVEBOX_CRIU", "/usr/local/sbin/criu"),
                              "--version"], capture_output=True, text=True).stdout
    except OSError:
        return False
    m = re.search(r"Version: (\d+)\.(\d+)", out)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (4, 1)


def pytest_generate_tests(metafunc):
    # The escape battery runs against cold kernels and, unchanged, against
    # kernels forked from a zygote and, where a memory checkpoint can be
    # made, kernels restored from one, cold and forked from the zygote
    # (each paused and resumed before the test has it).
    if "gateway" in metafunc.fixturenames and metafunc.module.__name__.endswith("test_escape"):
        modes = ["cold", "zygote"] + (["restored", "zygote-restored"]
                                      if memory_pause_possible() else [])
        metafunc.parametrize("gateway", modes, indirect=True, scope="module")


def restored_start_kernel(gw):
    """gw.start_kernel, but every kernel it gives has been paused with its
    memory and resumed: what it runs was restored by CRIU."""
    start = gw.start_kernel

    def start_restored(**body):
        kid = start(**body)
        value(gw, kid, "1")
        status, model, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
        assert status == 200 and model["paused"] == {"memory_kept": True}, model
        status, model, _ = gw.request("POST", f"/api/kernels/{kid}/resume")
        assert status == 200, model
        return kid
    return start_restored


@pytest.fixture(scope="module")
def zygote_gateway():
    """A gateway whose python3 kernels come from a zygote, one per module."""
    g = start_gateway(*ZYGOTE_ARGS)
    yield g
    g.stop()


def assert_from_zygote(gw, kid, expected=True):
    """A kernel of the zygote gateway came from the zygote (numpy was
    imported before anything ran), or a cold one did not."""
    assert value(gw, kid, "'numpy' in __import__('sys').modules") is expected


@pytest.fixture(scope="module")
def gateway(request):
    env = dict(os.environ, **{CANARY_ENV: CANARY_VALUE})
    mode = getattr(request, "param", "cold")
    gw = start_gateway(*(ZYGOTE_ARGS if mode.startswith("zygote") else ()), env=env)
    gw.mode = mode
    if mode.endswith("restored"):
        gw.start_kernel = restored_start_kernel(gw)
    if mode.startswith("zygote"):
        # Else the battery could pass on cold kernels without saying so.
        kid = gw.start_kernel()
        assert_from_zygote(gw, kid)
        gw.request("DELETE", f"/api/kernels/{kid}")
    yield gw
    gw.stop()


@pytest.fixture
def kernel(gateway):
    kid = gateway.start_kernel()
    yield kid
    gateway.request("DELETE", f"/api/kernels/{kid}")
