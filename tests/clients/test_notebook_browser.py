"""Classic Notebook 6.4.12 (`python3 -m notebook --gateway-url=...`) in
Debian's headless Chromium, driven by playwright-core (browser/notebook_plot.js).

    glovebox (token) <── notebook --gateway-url <── Chromium <── playwright-core

The browser creates a notebook from the dashboard's New menu, types a
plotting cell, runs it and waits for an <img> whose naturalWidth is non-zero,
restarts the kernel and runs a second cell; the saved .ipynb must hold the
same PNG, and the kernel must be Glovebox's.
Needs node, npm and Debian's chromium; playwright-core comes from
browser/package-lock.json (`npm ci` in tests/clients/browser, no browser
download).
"""
import json
import os
import shutil
import subprocess

import nbformat
import pytest

from clientlib import JupyterProcess, check_png, kernel_ids
from gbclient import BUILD

BROWSER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "browser")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = os.path.abspath(os.path.join(BUILD, "notebook-plot.png"))


@pytest.fixture(scope="session")
def playwright():
    """node with playwright-core installed from the committed lock file."""
    node = shutil.which("node")
    assert node, "node is needed (Debian: apt-get install nodejs npm)"
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is needed (Debian: apt-get install chromium)"
    if not os.path.isdir(os.path.join(BROWSER_DIR, "node_modules", "playwright-core")):
        npm = shutil.which("npm")
        assert npm, "npm is needed to install playwright-core (Debian: apt-get install npm)"
        env = dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=BROWSER_DIR, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
    return node


@pytest.fixture
def notebook(gateway, tmp_path):
    nb = JupyterProcess("notebook", gateway, tmp_path)
    yield nb
    nb.stop()


def test_classic_notebook_plots_in_chromium(playwright, gateway, notebook):
    if os.path.exists(SCREENSHOT):
        os.unlink(SCREENSHOT)
    run = subprocess.run(
        [playwright, os.path.join(BROWSER_DIR, "notebook_plot.js"),
         f"{notebook.base}/tree?token={notebook.token}", SCREENSHOT],
        cwd=BROWSER_DIR, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, CHROMIUM=CHROMIUM, TIMEOUT_MS="60000"))
    lines = run.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {}
    assert run.returncode == 0 and result.get("ok"), (
        f"browser run failed ({run.returncode}): {result or run.stdout}\n{run.stderr}\n"
        f"notebook log:\n{notebook.read_log()[-4000:]}\n"
        f"glovebox log:\n{gateway.read_log()[-2000:]}")

    # What the page showed: the inline PNG decoded (non-zero naturalWidth),
    # the kernel's stdout from the sandbox, the kernel logo proxied from glovebox.
    assert result["naturalWidth"] > 0 and result["naturalHeight"] > 0, result
    assert result["src_prefix"] == "data:image/png;base64,"
    assert result["stdout"] == "plotted in glovebox\n", result
    assert result["prompt"] == 1
    assert result["logo_width"] == 64
    assert result["kernel_name"] == "python3"
    assert result["console"] == [], result["console"]
    # The page's kernel is a Glovebox kernel (by id, in glovebox's own list).
    kernels = kernel_ids(gateway)
    assert result["kernel_id"] in kernels, (result["kernel_id"], kernels)

    # After Kernel > Restart: the same kernel id, a fresh interpreter, a
    # new connection through the proxy that works.
    assert result["kernel_id_after_restart"] == result["kernel_id"]
    after = result["after_restart"]
    assert after["prompt"] == 1, after
    assert [(o["output_type"], o.get("text")) for o in after["outputs"]] == \
        [("stream", "after restart False\n")], after

    # The notebook the browser saved holds the same plot.
    saved = nbformat.read(str(notebook.root / result["notebook_path"]), as_version=4)
    cell = saved.cells[0]
    assert cell.execution_count == 1
    [png] = [o.data["image/png"] for o in cell.outputs if o.output_type == "display_data"]
    width, height = check_png(png)
    assert (width, height) == (result["naturalWidth"], result["naturalHeight"])

    # The screenshot, for a person to look at.
    with open(SCREENSHOT, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(SCREENSHOT) > 10000
