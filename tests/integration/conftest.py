import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from gbclient import start_gateway  # noqa: E402


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
