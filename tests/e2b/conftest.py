"""The unmodified E2B Python SDK against a real Glovebox.

The SDK (e2b 2.34.0, e2b_code_interpreter 2.9.0) does not come from PyPI
here: it is unpacked in ../shared/e2b-python/site (or wherever
E2B_PYTHON_SDK points) and imported from there as it is. Its directory goes
on PYTHONPATH before pytest starts, since pytest itself imports Debian's
older attrs:

    PYTHONPATH=../shared/e2b-python/site /usr/bin/python3 -m pytest tests/e2b
"""
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from gbclient import start_gateway  # noqa: E402


def sdk_path():
    candidates = [os.environ.get("E2B_PYTHON_SDK"),
                  os.path.join(HERE, "..", "..", "..", "shared", "e2b-python", "site"),
                  "/work/shared/e2b-python/site"]
    for path in candidates:
        if path and os.path.isdir(os.path.join(path, "e2b_code_interpreter")):
            return os.path.abspath(path)
    raise RuntimeError("the E2B Python SDK was not found: set E2B_PYTHON_SDK to its site/ "
                       "directory (see ../shared/e2b-python/README.md)")


SDK = sdk_path()
sys.path.insert(0, SDK)
if not os.path.abspath(__import__("attr").__file__).startswith(SDK):
    raise RuntimeError(f"Debian's attrs was imported before the SDK's: run pytest with "
                       f"PYTHONPATH={SDK}")


def point_sdk_at(gw, key):
    """The three variables, and nothing else, make an E2B agent a Glovebox one."""
    os.environ["E2B_API_URL"] = f"{gw.base}/e2b"
    os.environ["E2B_SANDBOX_URL"] = f"{gw.base}/e2b"
    os.environ["E2B_API_KEY"] = key
    os.environ.pop("E2B_VALIDATE_API_KEY", None)


def generated_token(gw):
    """The token glovebox made up and printed, as a user copies it."""
    m = re.search(r"\?token=(\S+)", gw.url_line)
    assert m, gw.url_line
    return m.group(1)


@pytest.fixture(scope="module")
def gateway():
    """A glovebox started as a user would, without --token (its generated
    token is the API key) and with its own defaults: kernels from the zygote
    and the pool (docs/performance.md#fast-by-default)."""
    gw = start_gateway(token=None, warm=True)
    gw.token = generated_token(gw)
    point_sdk_at(gw, gw.token)
    yield gw
    gw.stop()


@pytest.fixture(autouse=True)
def sdk_env(gateway):
    """Every test starts with the SDK pointed at the module's glovebox (a test
    with its own gateway points it elsewhere)."""
    point_sdk_at(gateway, gateway.token)


@pytest.fixture
def sbx(gateway):
    from e2b_code_interpreter import Sandbox
    s = Sandbox.create()
    yield s
    s.kill()
