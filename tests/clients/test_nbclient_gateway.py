"""nbclient (Debian's 0.7.2) executing notebooks on Glovebox kernels through
jupyter_server's GatewayKernelManager, configured the documented way: the
GatewayClient singleton from JUPYTER_GATEWAY_* environment variables.

Glovebox runs with --no-auth here: GatewayKernelManager's REST calls carry
"Authorization: token <auth_token>", but GatewayKernelClient.start_channels
opens its WebSocket with websocket.create_connection(ws_url, timeout=...,
sslopt=...) and no header at all (jupyter_server/gateway/managers.py), so
against a glovebox with a token the channel upgrade is refused —
test_gateway_kernel_client_sends_no_token shows exactly that.
"""
import asyncio
import re

import nbformat
import pytest
from jupyter_server.gateway.gateway_client import GatewayClient
from jupyter_server.gateway.managers import GatewayKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from clientlib import check_png, kernel_ids

CELLS = [
    "print('hello from nbclient')",
    "x = 41",
    "x + 1",
    "%matplotlib inline\n"
    "import matplotlib.pyplot as plt\n"
    "fig, ax = plt.subplots()\n"
    "ax.bar(['a', 'b', 'c'], [3, 1, 2])\n"
    "plt.show()",
    "1 / 0",
    "print(x * 2)",
    "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines())\n"
    "print('Seccomp', st['Seccomp'].strip())",
    "from IPython.display import HTML\nHTML('<b>bold</b>')",
    "import sys\nprint('to stderr', file=sys.stderr)",
    "h = display('first', display_id=True)\nh.update('second')",
]


def make_notebook():
    nb = new_notebook(cells=[new_markdown_cell("# A notebook run by nbclient")] +
                      [new_code_cell(src) for src in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


@pytest.fixture
def gateway_client(monkeypatch):
    """Points the GatewayClient singleton at a glovebox through its env vars,
    and restores everything afterwards."""
    for name in ("JUPYTER_GATEWAY_AUTH_TOKEN", "JUPYTER_GATEWAY_WS_URL", "KERNEL_USERNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERNEL_LAUNCH_TIMEOUT", "60")  # init_static_args rewrites it
    monkeypatch.setattr(GatewayClient, "KERNEL_LAUNCH_TIMEOUT", 60)

    def configure(gw):
        GatewayClient.clear_instance()
        monkeypatch.setenv("JUPYTER_GATEWAY_URL", gw.base)
        if gw.token:
            monkeypatch.setenv("JUPYTER_GATEWAY_AUTH_TOKEN", gw.token)
        gc = GatewayClient.instance()
        assert gc.gateway_enabled and gc.url == gw.base
        return gc

    yield configure
    GatewayClient.clear_instance()


def strip_ansi(text):
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def outputs(cell, output_type):
    return [o for o in cell.outputs if o.output_type == output_type]


def test_nbclient_runs_notebook(open_gateway, gateway_client):
    gateway_client(open_gateway)
    nb = make_notebook()
    seen = []

    def on_cell_execute(cell, cell_index):
        # While the notebook runs, its kernel is one of glovebox's.
        seen.append((client.km.kernel_id, client.km.kernel_id in kernel_ids(open_gateway)))

    client = NotebookClient(nb, kernel_manager_class=GatewayKernelManager, kernel_name="python3",
                            timeout=60, allow_errors=True, on_cell_execute=on_cell_execute)
    client.execute()

    kid = seen[0][0]
    assert kid and seen == [(kid, True)] * len(CELLS)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in code] == list(range(1, len(CELLS) + 1))

    [out] = code[0].outputs
    assert (out.output_type, out.name, out.text) == ("stream", "stdout", "hello from nbclient\n")
    assert code[1].outputs == []
    [res] = outputs(code[2], "execute_result")
    assert res.data["text/plain"] == "42"

    [disp] = outputs(code[3], "display_data")
    check_png(disp.data["image/png"])

    [err] = code[4].outputs
    assert err.output_type == "error" and err.ename == "ZeroDivisionError", err
    assert any("1 / 0" in strip_ansi(line) for line in err.traceback), err.traceback
    # State survives the error cell.
    assert code[5].outputs[0].text == "82\n"
    assert code[6].outputs[0].text == "Seccomp 2\n"
    [html] = outputs(code[7], "execute_result")
    assert html.data["text/html"] == "<b>bold</b>"
    [err_out] = code[8].outputs
    assert (err_out.name, err_out.text) == ("stderr", "to stderr\n")
    # update_display_data, applied by nbclient to the earlier display_data.
    [shown] = code[9].outputs
    assert shown.output_type == "display_data" and shown.data["text/plain"] == "'second'", shown

    # The executed notebook is valid nbformat and round-trips.
    nbformat.validate(nb)
    assert nbformat.reads(nbformat.writes(nb), as_version=4).cells[5].outputs[0].ename == \
        "ZeroDivisionError"
    # nbclient shut the kernel down through glovebox's REST API.
    assert kid not in kernel_ids(open_gateway)


def test_nbclient_stops_at_error(open_gateway, gateway_client):
    """allow_errors=False: the execute_reply's error status stops the run
    with CellExecutionError naming the exception; later cells do not run."""
    gateway_client(open_gateway)
    nb = new_notebook(cells=[new_code_cell("y = 1"), new_code_cell("raise KeyError('boom')"),
                             new_code_cell("print('never')")])
    kids = []
    client = NotebookClient(nb, kernel_manager_class=GatewayKernelManager, kernel_name="python3",
                            timeout=60, on_cell_start=lambda **_: kids.append(client.km.kernel_id))
    with pytest.raises(CellExecutionError) as info:
        client.execute()
    assert "KeyError" in str(info.value) and "boom" in str(info.value)
    assert nb.cells[1].outputs[0].ename == "KeyError"
    assert nb.cells[2].outputs == [] and nb.cells[2].get("execution_count") is None
    assert len(kids) == 2 and kids[0] and kids[0] not in kernel_ids(open_gateway)


def test_gateway_kernel_client_sends_no_token(gateway, gateway_client):
    """Why nbclient needs --no-auth: against a glovebox with a token, the
    REST start succeeds (it carries the token) but GatewayKernelClient's
    WebSocket carries none and glovebox refuses the upgrade."""
    import websocket

    gateway_client(gateway)
    km = GatewayKernelManager()

    async def run():
        await km.start_kernel(kernel_name="python3")
        try:
            assert km.kernel_id in kernel_ids(gateway)
            kc = km.client()
            with pytest.raises(websocket.WebSocketBadStatusException) as info:
                await kc.start_channels()
            return info.value.status_code
        finally:
            await km.shutdown_kernel()

    status = asyncio.run(run())
    assert status in (401, 403)
    assert km.kernel_id not in kernel_ids(gateway)


def test_nbclient_timeout_interrupts_through_glovebox(open_gateway, gateway_client):
    """papermill-style: a cell over its timeout makes nbclient POST
    /api/kernels/{id}/interrupt; the cell ends in KeyboardInterrupt and the
    next cell runs in the same interpreter."""
    gateway_client(open_gateway)
    nb = new_notebook(cells=[new_code_cell("z = 5"),
                             new_code_cell("import time\nfor _ in range(300): time.sleep(0.1)"),
                             new_code_cell("print('after', z)")])
    NotebookClient(nb, kernel_manager_class=GatewayKernelManager, kernel_name="python3",
                   timeout=3, interrupt_on_timeout=True, allow_errors=True).execute()
    [err] = nb.cells[1].outputs
    assert err.output_type == "error" and err.ename == "KeyboardInterrupt", err
    assert nb.cells[2].outputs[0].text == "after 5\n"
