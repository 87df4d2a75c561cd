import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from gbclient import Gateway  # noqa: E402

BUILD = os.environ.get("GLOVEBOX_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
BINARY = os.path.abspath(os.path.join(BUILD, "glovebox"))
# The sandbox is the default; tests may add flags for what they exercise.
EXTRA_ARGS = os.environ.get("GLOVEBOX_TEST_ARGS", "").split()


def start_gateway(*args, **kw):
    return Gateway(BINARY, list(EXTRA_ARGS) + list(args), **kw)


@pytest.fixture(scope="module")
def gateway():
    gw = start_gateway()
    yield gw
    gw.stop()


@pytest.fixture
def kernel(gateway):
    kid = gateway.start_kernel()
    yield kid
    gateway.request("DELETE", f"/api/kernels/{kid}")
