"""Fast by default (docs/performance.md#fast-by-default): a gateway started
with no --zygote and no --pool forks the default kernelspec's kernels from
a zygote that imported numpy, pandas and matplotlib.pyplot, and keeps two
ready in a pool; "none" turns each off; matplotlib's font list is built
once per host and every new home links to it, read-only. These gateways
run with glovebox's own defaults (warm=True): every other test's gateway
starts kernels cold unless it asks (gbclient.cold_args)."""
import hashlib
import json
import os
import subprocess
import time

import pytest

from conftest import assert_from_zygote, run, start_gateway, value
from gbclient import BINARY

CACHE = "/var/cache/glovebox/home/.cache/matplotlib"
UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# What a fresh home's font list is, where matplotlib looks for it.
FONT_LIST = """import glob, os
import matplotlib.font_manager as fm
paths = glob.glob(os.path.expanduser('~/.cache/matplotlib/fontlist-v*.json'))
print(repr([(p, os.path.islink(p) and os.readlink(p)) for p in paths]))"""


def wait_pool(gw, n, timeout=90):
    deadline = time.time() + timeout
    while time.time() < deadline:
        status, body, _ = gw.request("GET", "/api/status")
        assert status == 200, body
        ready = body["pool"]["kernelspecs"].get("python3", {}).get("ready", 0)
        if ready >= n:
            return body["pool"]
        time.sleep(0.2)
    pytest.fail(f"the pool did not reach {n}: {body['pool']}\n{gw.read_log()[-2000:]}")


@pytest.fixture(scope="module")
def warm():
    g = start_gateway(warm=True)
    yield g
    g.stop()


def test_no_flags_give_a_zygote_and_a_pool(warm):
    log = warm.read_log()
    assert "python3 kernels fork from a zygote" in log, log
    pool = wait_pool(warm, 2)
    assert pool["kernelspecs"]["python3"]["target"] == 2, pool
    kid = warm.start_kernel()
    try:
        # From the zygote: numpy, pandas and pyplot were imported before the
        # kernel's first cell, and it was one of the pool's.
        assert_from_zygote(warm, kid)
        assert value(warm, kid, "[m in __import__('sys').modules for m in "
                     "('numpy', 'pandas', 'matplotlib.pyplot')]") == [True, True, True]
        status, body, _ = warm.request("GET", "/api/status")
        assert body["pool"]["kernelspecs"]["python3"]["taken"] >= 1, body["pool"]
        # A first plot needs no font list of its own.
        content, out, _ = run(warm, kid, FONT_LIST + "\nimport matplotlib.pyplot as plt\n"
                              "plt.plot([1, 2]); plt.savefig('/tmp/p.png')")
        assert content["status"] == "ok", content
        assert "building the font cache" not in out, out
    finally:
        warm.request("DELETE", f"/api/kernels/{kid}")


def test_none_turns_each_off():
    g = start_gateway("--zygote", "none", "--pool", "none", warm=True)
    try:
        assert "fork from a zygote" not in g.read_log()
        status, body, _ = g.request("GET", "/api/status")
        assert body["pool"]["kernelspecs"] == {}, body["pool"]
        kid = g.start_kernel()
        assert_from_zygote(g, kid, expected=False)
    finally:
        g.stop()
    # "none" goes alone.
    out = subprocess.run([BINARY, "--zygote", "none", "--zygote", "python3:numpy",
                          "--check-config"], capture_output=True, text=True, timeout=20)
    assert out.returncode != 0 and "--zygote none" in out.stderr, out.stderr
    # An optional module ("?") is a module name too.
    out = subprocess.run([BINARY, "--zygote", "python3:numpy?,surely_not_installed?",
                          "--check-config"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr


def test_a_module_not_installed_is_left_out():
    # Said in the log as the kernel-host's other lines are (JSON here): what
    # the zygote prints is read by the kernel-host and logged a line at a
    # time, nothing of it raw in the gateway's log.
    g = start_gateway("--zygote", "python3:numpy?,surely_not_installed?", "--pool", "none",
                      "--log-format", "json", warm=True)
    try:
        kid = g.start_kernel()
        assert_from_zygote(g, kid)
        deadline = time.time() + 10
        while "not preloading surely_not_installed" not in g.read_log():
            assert time.time() < deadline, g.read_log()[-2000:]
            time.sleep(0.1)
        lines = [json.loads(line) for line in g.read_log().splitlines() if line.strip()]
        said = [line for line in lines if "not preloading" in line["message"]]
        assert [(line["component"], line["level"], line["message"]) for line in said] == [
            ("kernel-host", "warn", "zygote python3: not preloading surely_not_installed: "
             "No module named 'surely_not_installed'")], said
    finally:
        g.stop()


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_a_cold_kernel_uses_the_hosts_font_list_read_only():
    g = start_gateway()  # cold: no zygote, no pool
    try:
        kid = g.start_kernel()
        assert_from_zygote(g, kid, expected=False)
        (name,) = [n for n in os.listdir(CACHE) if n.startswith("fontlist-v")]
        before = sha(os.path.join(CACHE, name))
        content, out, _ = run(g, kid, FONT_LIST)
        assert content["status"] == "ok", content
        link = f"/home/user/.cache/matplotlib/{name}"
        assert out.strip() == repr([(link, f"/opt/glovebox/home/.cache/matplotlib/{name}")])
        # matplotlib read it: its font manager lists the host's fonts and
        # built nothing of its own.
        assert value(g, kid, "len(fm.fontManager.ttflist) > 10") is True
        # Nobody in the sandbox can write it, root included.
        content, out, _ = run(g, kid, f"""import subprocess
for cmd in (['sh', '-c', 'echo x > {link}'], ['sudo', 'sh', '-c', 'echo x > {link}'],
            ['sudo', 'rm', '/opt/glovebox/home/.cache/matplotlib/{name}']):
    print(subprocess.run(cmd, capture_output=True).returncode != 0)""")
        assert out.split() == ["True", "True", "True"], out
        assert sha(os.path.join(CACHE, name)) == before
        # The link is the sandbox's own: removed, matplotlib builds its own.
        content, out, _ = run(g, kid, f"import os; os.unlink('{link}'); print('gone')")
        assert out.strip() == "gone", content
    finally:
        g.stop()


def test_unprivileged_says_once_why_kernels_start_cold():
    g = start_gateway(runner=UNPRIVILEGED, warm=True)
    try:
        log = g.read_log()
        assert log.count("kernels start cold, without a zygote: not root") == 1, log
        assert "fork from a zygote" not in log
    finally:
        g.stop()
