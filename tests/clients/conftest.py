"""Real Jupyter clients against a real Glovebox.

Every test starts its own glovebox (tests/integration/gbclient.py) and, where
it needs one, its own Jupyter Server or Classic Notebook on free loopback
ports, and stops them at the end. Run with Debian's interpreter:

    /usr/bin/python3 -m pytest tests/clients
"""
import pytest

from clientlib import GB_TOKEN, JupyterProcess
from gbclient import start_gateway


@pytest.fixture
def gateway():
    """A glovebox with a token."""
    gw = start_gateway(token=GB_TOKEN)
    yield gw
    gw.stop()


@pytest.fixture
def open_gateway():
    """A glovebox with --no-auth, for clients that send no credentials."""
    gw = start_gateway("--no-auth", token=None)
    yield gw
    gw.stop()


@pytest.fixture
def jupyter_server(gateway, tmp_path):
    """jupyter_server 1.23 with --gateway-url pointing at a token-protected glovebox."""
    js = JupyterProcess("jupyter_server", gateway, tmp_path)
    yield js
    js.stop()
