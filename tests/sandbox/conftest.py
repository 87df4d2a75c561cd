import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from gbclient import run_cell as run, start_gateway, value_of as value  # noqa: E402,F401

CANARY_ENV = "GLOVEBOX_CANARY_SECRET"
CANARY_VALUE = "canary-4a1f9e"


@pytest.fixture(scope="module")
def gateway():
    env = dict(os.environ, **{CANARY_ENV: CANARY_VALUE})
    gw = start_gateway(env=env)
    yield gw
    gw.stop()


@pytest.fixture
def kernel(gateway):
    kid = gateway.start_kernel()
    yield kid
    gateway.request("DELETE", f"/api/kernels/{kid}")
