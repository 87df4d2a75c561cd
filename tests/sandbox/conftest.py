import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from gbclient import start_gateway  # noqa: E402

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


def run(gateway, kernel_id, code, timeout=60):
    """Runs code in a fresh connection; returns (reply content, stdout, outputs)."""
    ch = gateway.connect(kernel_id)
    try:
        reply, outputs = ch.execute(code, timeout=timeout)
    finally:
        ch.close()
    stdout = "".join(m["content"]["text"] for m in outputs
                     if m["msg_type"] == "stream" and m["content"]["name"] == "stdout")
    return reply["content"], stdout, outputs


def value(gateway, kernel_id, expr):
    """Evaluates a Python expression in the kernel and returns it (via repr/eval)."""
    content, stdout, outputs = run(gateway, kernel_id, f"print(repr({expr}))")
    assert content["status"] == "ok", content
    import ast
    return ast.literal_eval(stdout.strip().splitlines()[-1])
