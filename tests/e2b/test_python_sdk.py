"""E2B's Python SDK, unmodified, first call to last, against a real Glovebox.

The tutorial's data-analysis agent, then every SDK call docs/e2b.md's table
lists, each with what it must return or the clear error it must raise.
"""
import asyncio
import base64
import datetime
import json
import os
import re
import time
import urllib.error
import urllib.request

import pytest

from conftest import generated_token, point_sdk_at
from gbclient import start_gateway

from e2b_code_interpreter import AsyncSandbox, Sandbox
from e2b import (AuthenticationException, CommandExitException, InvalidArgumentException,
                 NotFoundException, SandboxException, TimeoutException)
from e2b.sandbox.sandbox_api import SandboxQuery

CSV = "city,month,sales\nOslo,1,10\nOslo,2,14\nOslo,3,9\nRome,1,20\nRome,2,25\nRome,3,31\n"


def test_data_analysis_tutorial(gateway):
    """The tutorial's agent: a default create, a CSV in, pandas and a plot, the PNG out."""
    sbx = Sandbox.create()
    try:
        info = sbx.get_info()
        # The SDK asked for internet access (its default); what the sandbox
        # has is reported truthfully: none.
        assert info.allow_internet_access is False
        assert info.state.value == "running"

        written = sbx.files.write("/home/user/sales.csv", CSV)
        assert written.path == "/home/user/sales.csv"

        setup = sbx.commands.run("pip install pandas matplotlib seaborn")
        assert setup.exit_code == 0
        assert "Requirement already satisfied: seaborn" in setup.stdout

        ex = sbx.run_code(
            "import pandas as pd, matplotlib.pyplot as plt\n"
            "df = pd.read_csv('/home/user/sales.csv')\n"
            "totals = df.groupby('city')['sales'].sum()\n"
            "print(totals.to_dict())\n"
            "fig, ax = plt.subplots()\n"
            "for city, rows in df.groupby('city'):\n"
            "    ax.plot(rows['month'], rows['sales'], label=city)\n"
            "ax.set_title('Sales by month'); ax.set_xlabel('month'); ax.set_ylabel('sales')\n"
            "plt.savefig('/home/user/sales.png')\n"
            "plt.show()\n"
            "df.describe()")
        assert ex.error is None, ex.error
        assert ex.logs.stdout == ["{'Oslo': 33, 'Rome': 76}\n"]
        # Two images, as E2B's template gives them: the file savefig wrote
        # (Pillow's save to a path is shown) and the figure, with its chart.
        images = [r for r in ex.results if r.png]
        assert len(images) == 2
        chart = [r for r in images if r.chart]
        assert len(chart) == 1
        png = base64.b64decode(chart[0].png)
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        # E2B's chart model beside the PNG: a line chart with both series.
        assert chart[0].chart is not None
        assert chart[0].chart.type.value == "line"
        assert chart[0].chart.title == "Sales by month"
        assert chart[0].chart.x_label == "month" and chart[0].chart.y_label == "sales"
        lines = {e.label: [tuple(p) for p in e.points] for e in chart[0].chart.elements}
        assert lines == {"Oslo": [(1, 10), (2, 14), (3, 9)], "Rome": [(1, 20), (2, 25), (3, 31)]}
        # The DataFrame result carries the frame as data.
        main = [r for r in ex.results if r.is_main_result]
        assert len(main) == 1 and "<table" in main[0].html
        assert main[0].data is not None
        assert json.dumps(main[0].data)  # JSON all the way down
        assert "sales" in json.dumps(main[0].data)

        saved = sbx.files.read("/home/user/sales.png", format="bytes")
        assert bytes(saved[:8]) == b"\x89PNG\r\n\x1a\n" and len(saved) > 1000
    finally:
        sbx.kill()


def test_errors(sbx):
    ex = sbx.run_code("x = 1\n1 / 0")
    assert ex.error.name == "ZeroDivisionError"
    assert "division by zero" in ex.error.value
    assert "ZeroDivisionError" in ex.error.traceback
    seen = []
    ex = sbx.run_code("def f(:\n  pass", on_error=seen.append)
    assert ex.error.name == "SyntaxError"
    assert [e.name for e in seen] == ["SyntaxError"]
    # The state from before the error is kept.
    assert sbx.run_code("x + 1").text == "2"


def test_streaming_while_the_cell_runs(sbx):
    seen = []
    stamp = lambda kind: lambda m: seen.append((kind, m, time.monotonic()))  # noqa: E731
    start = time.monotonic()
    ex = sbx.run_code(
        "import sys, time\n"
        "print('out', flush=True)\n"
        "time.sleep(0.8)\n"
        "print('err', file=sys.stderr, flush=True)\n"
        "display(42)\n"
        "time.sleep(0.8)\n"
        "'done'",
        on_stdout=stamp("stdout"), on_stderr=stamp("stderr"), on_result=stamp("result"))
    end = time.monotonic()
    kinds = [k for k, _, _ in seen]
    assert kinds == ["stdout", "stderr", "result", "result"], kinds
    assert seen[0][1].line == "out\n" and seen[0][1].error is False
    assert seen[1][1].line == "err\n" and seen[1][1].error is True
    # E2B's text of a string result is the string, without its quotes.
    assert seen[2][1].text == "42" and seen[3][1].text == "done"
    # Each callback came when its output was made, not at the end.
    assert seen[0][2] - start < end - start - 1.2
    assert seen[1][2] - seen[0][2] > 0.6
    assert end - seen[2][2] > 0.6
    assert ex.logs.stdout == ["out\n"] and ex.logs.stderr == ["err\n"]


def test_envs(gateway):
    sbx = Sandbox.create(envs={"TEAM": "data"})
    try:
        get = "import os\n(os.environ.get('TEAM'), os.environ.get('RUN'))"
        assert sbx.run_code(get, envs={"RUN": "one"}).text == "('data', 'one')"
        # A run's envs are its own.
        assert sbx.run_code(get).text == "('data', None)"
        assert sbx.commands.run("echo $TEAM $RUN", envs={"RUN": "cmd"}).stdout == "data cmd\n"
    finally:
        sbx.kill()


def test_e2b_sets_its_own_variables_for_commands_and_code(gateway):
    # E2B_SANDBOX, E2B_SANDBOX_ID and E2B_TEMPLATE_ID, as E2B sets them; in
    # the default context (a pooled kernel), a context of its own and a
    # command. envVars may set them otherwise.
    sbx = Sandbox.create()
    try:
        want = f"true {sbx.sandbox_id} code-interpreter-v1"
        get = ("import os\n' '.join(os.environ.get(k, '-') for k in "
               "('E2B_SANDBOX', 'E2B_SANDBOX_ID', 'E2B_TEMPLATE_ID'))")
        assert sbx.run_code(get).text == want
        ctx = sbx.create_code_context(cwd="/tmp")
        assert sbx.run_code(get, context=ctx).text == want
        out = sbx.commands.run("echo $E2B_SANDBOX $E2B_SANDBOX_ID $E2B_TEMPLATE_ID").stdout
        assert out == want + "\n", out
    finally:
        sbx.kill()
    sbx = Sandbox.create(envs={"E2B_SANDBOX": "mine"})
    try:
        assert sbx.commands.run("echo $E2B_SANDBOX").stdout == "mine\n"
        assert sbx.run_code("import os; os.environ['E2B_SANDBOX']").text == "mine"
    finally:
        sbx.kill()


def test_code_contexts(sbx):
    sbx.run_code("shared = 'default context'")
    ctx = sbx.create_code_context(cwd="/tmp")
    assert ctx.language == "python" and ctx.cwd == "/tmp"
    ex = sbx.run_code("import os\nprint(os.getcwd())\nshared", context=ctx)
    assert ex.logs.stdout == ["/tmp\n"]
    assert ex.error.name == "NameError"
    assert ctx.id in [c.id for c in sbx.list_code_contexts()]
    sbx.run_code("mine = 1", context=ctx)
    sbx.restart_code_context(ctx)
    assert sbx.run_code("mine", context=ctx).error.name == "NameError"
    sbx.remove_code_context(ctx.id)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=ctx)
    with pytest.raises(InvalidArgumentException):
        sbx.run_code("1", language="python", context=ctx)
    # The default context was untouched by all of it.
    assert sbx.run_code("shared").text == "default context"
    assert sbx.run_code("1 + 1", language="python").text == "2"


def test_commands(sbx):
    r = sbx.commands.run("echo hi; echo oops >&2; id -un; pwd", cwd="/tmp")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "hi\nuser\n/tmp\n", "oops\n")

    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo partial; exit 3")
    assert failed.value.exit_code == 3 and failed.value.stdout == "partial\n"

    chunks = []
    r = sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.2; done",
                         on_stdout=lambda s: chunks.append((s, time.monotonic())))
    assert "".join(c for c, _ in chunks) == "1\n2\n3\n" and len(chunks) == 3
    assert chunks[-1][1] - chunks[0][1] > 0.3

    bg = sbx.commands.run("read line; echo got $line; sleep 30", background=True, stdin=True)
    assert bg.pid in [p.pid for p in sbx.commands.list()]
    sbx.commands.send_stdin(bg.pid, "hello\n")
    time.sleep(0.5)
    assert sbx.commands.kill(bg.pid) is True
    with pytest.raises(CommandExitException) as killed:
        bg.wait()
    assert killed.value.stdout == "got hello\n"
    assert bg.pid not in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(bg.pid) is False

    waited = sbx.commands.run("sleep 0.3; echo later", background=True)
    assert waited.wait().stdout == "later\n"


def test_command_timeout_raises_timeout(sbx):
    start = time.monotonic()
    with pytest.raises(TimeoutException) as caught:
        sbx.commands.run("echo started; sleep 10", timeout=2)
    assert 1.5 < time.monotonic() - start < 6
    assert "timeout" in str(caught.value)
    # The command was killed with its deadline, not left running.
    deadline = time.monotonic() + 5
    while [p for p in sbx.commands.list() if "sleep 10" in " ".join(p.args)]:
        assert time.monotonic() < deadline, "the command outlived its timeout"
        time.sleep(0.1)
    assert sbx.commands.run("pgrep -x sleep || echo none").stdout == "none\n"


def test_lifecycle(gateway):
    sbx = Sandbox.create(timeout=900, metadata={"suite": "python-sdk"})
    try:
        end = sbx.get_info().end_at
        assert 890 < (end - datetime.datetime.now(datetime.timezone.utc)).total_seconds() <= 900
        # connect sends its default 300 s: a lifetime is never shortened by it.
        again = Sandbox.connect(sbx.sandbox_id)
        assert again.run_code("21 * 2").text == "42"
        assert sbx.get_info().end_at >= end
        # ... but lengthened when asked for longer.
        Sandbox.connect(sbx.sandbox_id, timeout=1200)
        left = (sbx.get_info().end_at - datetime.datetime.now(datetime.timezone.utc))
        assert 1190 < left.total_seconds() <= 1200
        # set_timeout sets it, shorter too.
        sbx.set_timeout(60)
        left = (sbx.get_info().end_at - datetime.datetime.now(datetime.timezone.utc))
        assert 50 < left.total_seconds() <= 60

        listed = Sandbox.list(query=SandboxQuery(metadata={"suite": "python-sdk"})).next_items()
        assert [s.sandbox_id for s in listed] == [sbx.sandbox_id]
        assert listed[0].metadata == {"suite": "python-sdk"}
        assert Sandbox.list(query=SandboxQuery(metadata={"suite": "other"})).next_items() == []
        assert sbx.is_running() is True
    finally:
        assert sbx.kill() is True
    assert sbx.is_running() is False
    assert Sandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(SandboxException):
        Sandbox.connect(sbx.sandbox_id)


def test_a_sandbox_ends_at_its_timeout(gateway):
    sbx = Sandbox.create(timeout=2)
    time.sleep(3)
    assert sbx.is_running() is False
    with pytest.raises(NotFoundException):
        sbx.get_info()


def test_set_timeout_zero_ends_it_now(gateway):
    """E2B's set_timeout(0): the sandbox ends at once (after the answer);
    a negative timeout is a 400 naming the range."""
    sbx = Sandbox.create(timeout=300)
    try:
        status, body = raw(gateway, f"/sandboxes/{sbx.sandbox_id}/timeout", {"timeout": -1})
        assert status == 400 and b"timeout must be from 0 to" in body, body
        assert sbx.is_running() is True
        sbx.set_timeout(0)
        for _ in range(50):
            if not sbx.is_running():
                break
            time.sleep(0.1)
        assert sbx.is_running() is False
    finally:
        Sandbox.kill(sbx.sandbox_id)


def test_requests_for_what_glovebox_lacks_name_it(gateway):
    # onTimeout 'pause' is served (test_pause_sdk.py), and auto_resume with
    # it (test_auto_resume_sdk.py); without it, auto_resume is a 400 below.
    with pytest.raises(SandboxException) as caught:
        Sandbox.create(network={"allow_out": ["1.1.1.1"]})
    assert "network.allowOut" in str(caught.value)
    with pytest.raises(SandboxException) as caught:
        Sandbox.create("no-such-template")
    assert "404" in str(caught.value) or "not found" in str(caught.value)
    # On the wire: what this SDK always sends is fine; asking for more is not.
    status, body = raw(gateway, "/sandboxes", {"autoResume": {"enabled": True}})
    assert status == 400 and b"autoResume.enabled needs autoPause" in body, body
    status, body = raw(gateway, "/sandboxes", {"autoPause": False, "autoResume": {"enabled": False},
                                               "allow_internet_access": True, "secure": True})
    assert status == 201, body
    Sandbox.kill(json.loads(body)["sandboxID"])


def test_files(sbx):
    sbx.files.write_files([{"path": "/home/user/a.txt", "data": "A"},
                           {"path": "/home/user/d/b.bin", "data": b"\x00\x01"}])
    assert sbx.files.read("/home/user/a.txt") == "A"
    assert bytes(sbx.files.read("/home/user/d/b.bin", format="bytes")) == b"\x00\x01"
    assert {e.name for e in sbx.files.list("/home/user")} >= {"a.txt", "d"}
    assert sbx.files.exists("/home/user/a.txt") and not sbx.files.exists("/home/user/nope")
    assert sbx.files.get_info("/home/user/d").type.value == "dir"
    assert sbx.files.make_dir("/home/user/e") is True
    assert sbx.files.make_dir("/home/user/e") is False
    sbx.files.rename("/home/user/a.txt", "/home/user/e/a.txt")
    assert sbx.run_code("open('/home/user/e/a.txt').read()").text == "A"
    sbx.files.remove("/home/user/e")
    assert not sbx.files.exists("/home/user/e/a.txt")
    with pytest.raises(NotFoundException):
        sbx.files.read("/home/user/nope")
    # What code writes is there for files.read, and the other way round.
    sbx.run_code("open('/home/user/made.txt', 'w').write('by code')")
    assert sbx.files.read("/home/user/made.txt") == "by code"


def test_files_as_envd_064_serves_them(sbx):
    """Metadata, octet-stream and gzip uploads, list order, symlink targets,
    watch entries and the signed URLs (fetched with nothing of the
    sandbox's), as the SDK uses them once envdVersion is 0.6.4."""
    info = sbx.files.write("/home/user/m.txt", "meta", metadata={"Author": "ann"},
                           use_octet_stream=True)
    assert info.metadata == {"author": "ann"}
    assert sbx.files.get_info("/home/user/m.txt").metadata == {"author": "ann"}
    sbx.files.write("/home/user/g.txt", "zipped", gzip=True)
    assert sbx.files.read("/home/user/g.txt") == "zipped"
    sbx.commands.run("mkdir -p ls/b && touch ls/a ls/C && ln -s a ls/l", cwd="/home/user")
    assert [e.name for e in sbx.files.list("/home/user/ls")] == ["C", "a", "b", "l"]
    assert sbx.files.get_info("/home/user/ls/l").symlink_target == "/home/user/ls/a"
    sbx.files.remove("/home/user/never-was")
    handle = sbx.files.watch_dir("/home/user/ls", include_entry=True)
    sbx.files.write("/home/user/ls/new.txt", "n")
    events = handle.get_new_events()
    handle.stop()
    assert [e.type.value for e in events] == ["create", "chmod", "write"], events
    assert events[-1].entry.path == "/home/user/ls/new.txt"
    with urllib.request.urlopen(sbx.download_url("/home/user/m.txt")) as resp:
        assert resp.read() == b"meta"
    body = (b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"u.txt\"\r\n\r\n"
            b"uploaded\r\n--b--\r\n")
    req = urllib.request.Request(sbx.upload_url("/home/user/u.txt", use_signature_expiration=60),
                                 data=body, method="POST",
                                 headers={"Content-Type": "multipart/form-data; boundary=b"})
    with urllib.request.urlopen(req) as resp:
        assert resp.status == 200
    assert sbx.files.read("/home/user/u.txt") == "uploaded"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(sbx.download_url("/home/user/m.txt", use_signature_expiration=-1))
    assert refused.value.code == 401


# What E2B's code-interpreter template preinstalls and Debian 12 packages
# (docs/e2b.md's list), by the names code imports.
PREINSTALLED = ("numpy pandas matplotlib seaborn scipy sklearn openpyxl xlrd requests bs4 "
                "sympy plotly aiohttp gensim imageio nltk numba cv2 docx skimage soundfile "
                "xarray PIL joblib pytz urllib3 IPython").split()


def test_preinstalled_packages_and_pip(sbx):
    r = sbx.commands.run("python3 -c 'import " + ", ".join(PREINSTALLED) + "; print(\"ok\")'",
                         timeout=120)
    assert r.stdout == "ok\n", r.stderr
    # The tutorial's own call: what is preinstalled is "already satisfied".
    ex = sbx.run_code(
        "import subprocess\n"
        "r = subprocess.run(['pip', 'install', 'pandas', 'matplotlib', 'seaborn'],\n"
        "                   capture_output=True, text=True)\n"
        "print(r.returncode)\nprint(r.stdout + r.stderr)")
    code, out = ex.logs.stdout[0].split("\n", 1)
    assert code == "0", out
    assert "externally-managed" not in out
    # A package that is not here fails, saying why.
    with pytest.raises(CommandExitException) as caught:
        sbx.commands.run("pip install glovebox-no-such-package")
    assert "no network" in caught.value.stderr
    assert "externally-managed" not in caught.value.stderr + caught.value.stdout


def test_pip_installs_into_the_sandbox(sbx):
    """What pip installs lands in the sandbox's own writable home, is
    importable at once in the running context, and nowhere else (a package
    built from local files: no network needed)."""
    sbx.files.write("/home/user/pkg/pyproject.toml",
                    '[build-system]\nrequires = ["setuptools"]\n'
                    'build-backend = "setuptools.build_meta"\n'
                    '[project]\nname = "gbdemo"\nversion = "1.0"\n')
    sbx.files.write("/home/user/pkg/gbdemo.py", "ANSWER = 42\n")
    r = sbx.commands.run("pip install --no-index --no-build-isolation /home/user/pkg",
                         timeout=120)
    assert "Successfully installed gbdemo-1.0" in r.stdout
    ex = sbx.run_code("import gbdemo\ngbdemo.ANSWER, gbdemo.__file__")
    assert ex.error is None, ex.error
    assert re.fullmatch(r"\(42, '/home/user/\.local/lib/python3\.\d+/site-packages/gbdemo\.py'\)",
                        ex.text), ex.text
    other = Sandbox.create()
    try:
        assert other.run_code("import gbdemo").error.name == "ModuleNotFoundError"
    finally:
        other.kill()


def test_unsupported_calls_say_so(sbx):
    """What Glovebox lacks is refused by name, never "not found"; the sandbox
    carries on after each refusal."""
    # Snapshots and forks work now (tests/e2b/test_snapshots_sdk.py).
    calls = {
        "update_network": lambda: sbx.update_network({"deny_out": ["0.0.0.0/0"]}),
        "create_code_context(language='cobol')": lambda: sbx.create_code_context(language="cobol"),
    }
    for name, call in calls.items():
        with pytest.raises(SandboxException) as caught:
            call()
        message = str(caught.value)
        assert "not supported" in message or (
            "languages:" in message and "python" in message), (name, message)
        assert not isinstance(caught.value, NotFoundException), (name, message)
    assert sbx.run_code("1").text == "1"


def wait_for(read, pattern, what, seconds=20):
    """Waits until read() (text so far) matches pattern."""
    end = time.monotonic() + seconds
    while not re.search(pattern, read()):
        assert time.monotonic() < end, f"{what}: no {pattern!r} in {read()!r}"
        time.sleep(0.05)


def test_pty_create_input_resize_connect_kill(sbx):
    """sbx.pty: a login shell on a terminal of the sandbox's own, as its
    user; input, resize, a second client through connect, kill."""
    import threading
    from e2b import PtySize
    out, seen, ends = [], [], []

    def follow(handle, chunks):
        try:
            handle.wait(on_pty=chunks.append)
        except CommandExitException as e:
            ends.append(e.exit_code)

    term = sbx.pty.create(PtySize(rows=30, cols=100))
    reader = threading.Thread(target=follow, args=(term, out), daemon=True)
    reader.start()
    text = lambda chunks: b"".join(chunks).decode(errors="replace")
    sbx.pty.send_stdin(term.pid, b"echo P$((6*7)) $(id -un); stty size; tty\n")
    wait_for(lambda: text(out), r"P42 user\r\n30 100\r\n/dev/pts/\d+", "the first shell")
    sbx.pty.resize(term.pid, PtySize(rows=50, cols=160))
    sbx.pty.send_stdin(term.pid, b"stty size\n")
    wait_for(lambda: text(out), r"\s50 160\r\n", "the size after resize")

    other = sbx.pty.connect(term.pid)
    follower = threading.Thread(target=follow, args=(other, seen), daemon=True)
    follower.start()
    sbx.pty.send_stdin(term.pid, b"echo Q$((4+4))\n")
    wait_for(lambda: text(seen), r"Q8", "the connected client")

    assert sbx.pty.kill(term.pid) is True
    reader.join(10)
    follower.join(10)
    assert not reader.is_alive() and not follower.is_alive(), "both streams ended"
    assert ends == [-1, -1], "both heard the kill"
    assert sbx.pty.kill(term.pid) is False
    # (resize raises the Connect error itself, not wrapped by the SDK.)
    with pytest.raises(Exception) as caught:
        sbx.pty.resize(sbx.commands.run("sleep 20", background=True).pid, PtySize(5, 5))
    assert "no terminal" in str(caught.value)


def test_background_command_connect_and_wait(sbx):
    """commands.run(background=True), then commands.connect(pid).wait()."""
    bg = sbx.commands.run("echo one; sleep 0.5; echo two", background=True)
    again = sbx.commands.connect(bg.pid)
    result = again.wait()
    assert result.exit_code == 0
    assert result.stdout.endswith("two\n"), result.stdout
    assert bg.wait().exit_code == 0
    with pytest.raises(SandboxException):
        sbx.commands.connect(999999)


def test_killing_a_sandbox_ends_its_command_and_terminal_streams(gateway):
    """A sandbox killed while a command and a terminal run in it: each
    follower's stream is cut short, as E2B's are when a sandbox goes, so
    the SDK finds the sandbox gone and raises its "sandbox was killed"
    TimeoutException; the gateway serves the next sandbox's commands."""
    import threading
    from e2b import PtySize
    sbx = Sandbox.create()
    outcomes = {}

    def follow(name, handle, **callbacks):
        try:
            handle.wait(**callbacks)
            outcomes[name] = "returned"
        except Exception as e:  # the stream ends without an end event
            outcomes[name] = f"{type(e).__name__}: {e}"

    try:
        out = []
        bg = sbx.commands.run("echo up; sleep 60", background=True, stdin=True)
        term = sbx.pty.create(PtySize(rows=24, cols=80))
        followers = [threading.Thread(target=follow, args=("command", bg),
                                      kwargs={"on_stdout": out.append}, daemon=True),
                     threading.Thread(target=follow, args=("terminal", term),
                                      kwargs={"on_pty": lambda _: None}, daemon=True)]
        for t in followers:
            t.start()
        wait_for(lambda: "".join(out), r"up\n", "the command's output")
        assert {bg.pid, term.pid} <= {p.pid for p in sbx.commands.list()}
    finally:
        assert sbx.kill() is True
    for t in followers:
        t.join(15)
    assert not any(t.is_alive() for t in followers), f"streams still open: {outcomes}"
    assert set(outcomes) == {"command", "terminal"}
    for name, what in outcomes.items():
        assert what.startswith("TimeoutException") and "sandbox was killed" in what, outcomes
    again = Sandbox.create()
    try:
        assert again.commands.run("echo still here").stdout == "still here\n"
        assert again.commands.list() == []
    finally:
        again.kill()


def test_killing_a_sandbox_mid_cell_raises_sandbox_killed(gateway):
    """run_code in flight when its sandbox is killed: the /execute stream is
    cut short, and the SDK, finding the sandbox gone, raises the error it
    raises for that."""
    import threading
    from e2b import TimeoutException
    sbx = Sandbox.create()
    timer = threading.Timer(2.0, sbx.kill)
    timer.start()
    try:
        with pytest.raises(TimeoutException, match="sandbox was killed"):
            sbx.run_code("import time; time.sleep(120)", timeout=120)
    finally:
        timer.cancel()


def test_get_metrics_reports_the_sandbox_and_moves(sbx):
    """get_metrics: the sandbox's CPU, memory and disk, oldest sample first,
    the last one taken now; memory grows by what a cell allocates, disk by
    what it writes."""
    first = sbx.get_metrics()
    assert len(first) >= 1
    m = first[-1]
    assert m.cpu_count >= 1 and 0 <= m.cpu_used_pct <= 100
    assert m.mem_total == 1024 * 1024 * 1024 and 0 < m.mem_used < m.mem_total
    assert 0 < m.disk_total and 0 <= m.disk_used <= m.disk_total
    assert abs(m.timestamp.timestamp() - time.time()) < 60
    ex = sbx.run_code("held = bytearray(100 * 1024 * 1024)\n"
                      "open('/home/user/blob', 'wb').write(b'z' * 5_000_000)")
    assert ex.error is None, ex.error
    later = sbx.get_metrics()[-1]
    assert later.mem_used - m.mem_used > 90 * 1024 * 1024, (m, later)
    assert later.disk_used - m.disk_used >= 4_000_000, (m, later)
    assert Sandbox.get_metrics(sbx.sandbox_id)[-1].mem_used > 90 * 1024 * 1024
    sbx.run_code("del held")


def test_get_metrics_keeps_a_history_and_answers_ranges(gateway):
    """A sample at ready and every 5 s after, kept and answered by range
    (Unix seconds, both ends in), oldest first; a range that ends before
    the sandbox began is empty; start after end, or a start that is not a
    whole number, is a 400 naming it."""
    began = int(time.time())
    sbx = Sandbox.create()
    try:
        time.sleep(7)
        before_now = int(time.time()) - 1  # the samples kept, not the one taken now
        kept = sbx.get_metrics(end=datetime.datetime.fromtimestamp(before_now,
                                                                   datetime.timezone.utc))
        assert len(kept) >= 2, kept  # at ready, and 5 s later
        stamps = [k.timestamp.timestamp() for k in kept]
        assert stamps == sorted(stamps) and began - 1 <= stamps[0] and stamps[-1] < before_now + 1
        assert 4 <= stamps[1] - stamps[0] <= 6, stamps
        # from the second sample on: the first is left out
        since = sbx.get_metrics(start=datetime.datetime.fromtimestamp(int(stamps[1]),
                                                                      datetime.timezone.utc))
        assert since[0].timestamp.timestamp() >= int(stamps[1])
        assert len(since) >= len(kept) - 1 + 1  # and one taken now
        assert sbx.get_metrics(start=datetime.datetime.fromtimestamp(began - 3600,
                                                                     datetime.timezone.utc),
                               end=datetime.datetime.fromtimestamp(began - 1800,
                                                                   datetime.timezone.utc)) == []
        url = f"{gateway.base}/e2b/sandboxes/{sbx.sandbox_id}/metrics"
        for query, words in [("start=10&end=5", "start (10) is after end (5)"),
                             ("start=-1", "start must be a Unix time"),
                             ("end=soon", "end must be a Unix time")]:
            req = urllib.request.Request(f"{url}?{query}", headers={"X-API-Key": gateway.token})
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(req, timeout=30)
            assert caught.value.code == 400
            assert words in json.loads(caught.value.read())["message"], query
    finally:
        sbx.kill()


def test_contexts_are_listed_in_creation_order_with_a_default_javascript_one(gateway, sbx):
    """As E2B's: a new sandbox lists its default Python context, then its
    default JavaScript one, then the contexts made, in that order. The
    JavaScript one has no kernel until it runs something."""
    def kernels():
        status, listed, _ = gateway.request("GET", "/api/kernels")
        assert status == 200
        return len(listed)

    first = sbx.list_code_contexts()
    assert [(c.language, c.cwd) for c in first] == [("python", "/home/user"),
                                                    ("javascript", "/home/user")]
    before = kernels()
    made = [sbx.create_code_context(), sbx.create_code_context(language="bash", cwd="/tmp")]
    assert kernels() == before + 2  # the JavaScript one still has none
    assert [c.id for c in sbx.list_code_contexts()] == [c.id for c in first + made]
    js = first[1]
    assert sbx.run_code("process.cwd()", context=js).text == "/home/user"
    assert kernels() == before + 3
    assert sbx.run_code("6 * 7", language="javascript").text == "42"  # the same one
    assert kernels() == before + 3
    assert sbx.run_code("pwd", context=made[1]).logs.stdout == ["/tmp\n"]
    sbx.remove_code_context(js.id)
    assert [c.id for c in sbx.list_code_contexts()] == [first[0].id] + [c.id for c in made]


def test_a_context_cwd_must_be_a_directory_the_user_can_enter(sbx):
    """E2B's Python context would report the cwd and run in /home/user; here
    a cwd that is not there, not a directory, or shut to the sandbox's user
    is refused before any kernel starts, naming it."""
    sbx.commands.run("mkdir -p /home/user/shut/in && chmod 700 /home/user/shut "
                     "&& touch /home/user/file", user="root")
    for cwd, why in [("/nope", "No such file or directory"),
                     ("/home/user/file", "Not a directory"),
                     ("/home/user/shut/in", "Permission denied"),
                     ("relative/dir", "absolute path")]:
        with pytest.raises(SandboxException) as caught:
            sbx.create_code_context(cwd=cwd)
        assert "400" in str(caught.value) and why in str(caught.value), (cwd, caught.value)
    assert [c.language for c in sbx.list_code_contexts()] == ["python", "javascript"]
    for language in ("python", "bash", "js"):
        ctx = sbx.create_code_context(cwd="/tmp/../tmp", language=language)
        code = {"python": "import os; print(os.getcwd())", "bash": "pwd",
                "js": "console.log(process.cwd())"}[language]
        assert sbx.run_code(code, context=ctx).logs.stdout == ["/tmp\n"], language


def test_a_context_whose_cwd_is_gone_restarts_in_home_with_its_formats(sbx):
    sbx.commands.run("mkdir -p /home/user/work")
    ctx = sbx.create_code_context(cwd="/home/user/work")
    assert sbx.run_code("import os; os.getcwd()", context=ctx).text == "/home/user/work"
    sbx.commands.run("rm -r /home/user/work")
    sbx.restart_code_context(ctx)
    ex = sbx.run_code("import os, pandas as pd\nprint(os.getcwd())\npd.DataFrame({'a': [1]})",
                      context=ctx)
    # The move failed (and was logged); E2B's formats were loaded before it.
    assert ex.logs.stdout == ["/home/user\n"] and ex.results[0].data == {"a": [1]}, ex


def test_contexts_keep_charts_and_cwd_across_restarts(sbx):
    ctx = sbx.create_code_context(cwd="/tmp")
    plot = "import matplotlib.pyplot as plt, os\nplt.bar(['a', 'b'], [3, 5])\nplt.show()\nos.getcwd()"
    for _ in range(2):
        ex = sbx.run_code(plot, context=ctx)
        assert ex.text == "/tmp"
        chart = [r.chart for r in ex.results if r.chart]
        assert len(chart) == 1 and chart[0].type.value == "bar"
        assert [(e.label, e.value) for e in chart[0].elements] == [("a", 3), ("b", 5)]
        sbx.restart_code_context(ctx)
    # A kernel that dies ends its run at once, and is restarted with them too.
    start = time.monotonic()
    ex = sbx.run_code("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", context=ctx)
    assert ex.error.name == "KernelDied" and time.monotonic() - start < 5
    deadline = time.monotonic() + 30
    while True:
        ex = sbx.run_code(plot, context=ctx)
        if ex.error is None or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert ex.text == "/tmp" and [r.chart.type.value for r in ex.results if r.chart] == ["bar"]


def test_a_pooled_sandbox_is_the_same_to_the_sdk():
    gw = start_gateway("--pool", "python3=1", token=None)
    try:
        point_sdk_at(gw, generated_token(gw))
        deadline = time.monotonic() + 60
        while True:
            status, body, _ = gw.request("GET", "/api/status",
                                         token=generated_token(gw))
            if body["pool"]["kernelspecs"]["python3"]["ready"] == 1:
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.1)
        sbx = Sandbox.create()
        ex = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
        assert ex.results[0].data == {"a": [1, 2]}
        status, body, _ = gw.request("GET", "/api/status", token=generated_token(gw))
        assert body["pool"]["kernelspecs"]["python3"]["taken"] == 1, body
        sbx.kill()
        # envs too: set in the pooled kernel, in its commands, and kept
        # by its context's restart.
        while body["pool"]["kernelspecs"]["python3"]["ready"] != 1:
            assert time.monotonic() < deadline + 60, body
            time.sleep(0.1)
            status, body, _ = gw.request("GET", "/api/status", token=generated_token(gw))
        sbx = Sandbox.create(envs={"FROM_CREATE": "yes"})
        status, body, _ = gw.request("GET", "/api/status", token=generated_token(gw))
        assert body["pool"]["kernelspecs"]["python3"]["taken"] == 2, body
        assert sbx.run_code("import os; os.environ['FROM_CREATE']").text == "yes"
        assert sbx.commands.run("echo $FROM_CREATE").stdout == "yes\n"
        default = [c for c in sbx.list_code_contexts() if c.language == "python"][0]
        sbx.restart_code_context(default)
        assert sbx.run_code("import os; os.environ['FROM_CREATE']").text == "yes"
        sbx.kill()
    finally:
        gw.stop()


def test_generated_token_is_an_e2b_key(gateway):
    assert gateway.token.startswith("e2b_")
    sbx = Sandbox.create(api_key=gateway.token)
    sbx.kill()
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_" + "0" * 40)


def test_an_operator_token_of_another_form():
    gw = start_gateway(token="operator-chosen-token")
    try:
        point_sdk_at(gw, gw.token)
        # The SDK refuses it before sending anything...
        with pytest.raises(AuthenticationException) as caught:
            Sandbox.create()
        assert "e2b_" in str(caught.value)
        assert "E2B_VALIDATE_API_KEY=false" in gw.read_log()
        # ...unless told not to check the form.
        os.environ["E2B_VALIDATE_API_KEY"] = "false"
        sbx = Sandbox.create()
        assert sbx.run_code("6 * 7").text == "42"
        sbx.kill()
    finally:
        gw.stop()


def test_strict_refusal_of_internet_requests():
    gw = start_gateway("--e2b-refuse-internet", token=None)
    try:
        point_sdk_at(gw, generated_token(gw))
        with pytest.raises(SandboxException) as caught:
            Sandbox.create()
        assert "400" in str(caught.value) and "allow_internet_access" in str(caught.value)
        sbx = Sandbox.create(allow_internet_access=False)
        assert sbx.get_info().allow_internet_access is False
        sbx.kill()
    finally:
        gw.stop()


def raw(gw, path, body, headers=None, connect=False):
    """POSTs body as the SDK would, on the control plane or a sandbox's."""
    data = json.dumps(body).encode()
    if connect:
        data = bytes([0]) + len(data).to_bytes(4, "big") + data
    req = urllib.request.Request(gw.base + "/e2b" + path, data=data, method="POST")
    req.add_header("X-API-Key", gw.token)
    req.add_header("Content-Type", "application/connect+json" if connect else "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_null_is_the_same_as_absent(gateway):
    """Every optional field of every /e2b and envd route may be null."""
    status, body = raw(gateway, "/sandboxes", {
        "templateID": "code-interpreter-v1", "timeout": None, "metadata": None, "envVars": None,
        "autoPause": None, "autoResume": None, "mcp": None, "network": None,
        "volumeMounts": None, "secure": None, "allow_internet_access": None})
    assert status == 201, body
    created = json.loads(body)
    sid, token = created["sandboxID"], created["envdAccessToken"]
    jupyter = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999", "X-Access-Token": token}
    envd = dict(jupyter, **{"E2b-Sandbox-Port": "49983"})
    try:
        status, body = raw(gateway, "/execute", {"code": "6 * 7", "context_id": None,
                                                 "language": None, "env_vars": None}, jupyter)
        assert status == 200 and b'"text":"42"' in body, body
        status, body = raw(gateway, "/contexts", {"language": None, "cwd": None}, jupyter)
        assert status == 200 and json.loads(body)["cwd"] == "/home/user", body
        status, body = raw(gateway, "/process.Process/Start",
                           {"process": {"cmd": "/bin/echo", "args": ["hi"], "envs": None,
                                        "cwd": None}, "stdin": None, "tag": None},
                           envd, connect=True)
        assert status == 200 and b"aGkK" in body, body  # "hi\n"
        status, body = raw(gateway, "/filesystem.Filesystem/ListDir",
                           {"path": "/home/user", "depth": None}, envd)
        assert status == 200 and b"entries" in body, body
        status, body = raw(gateway, f"/sandboxes/{sid}/timeout", {"timeout": None})
        assert status == 204, body
        status, body = raw(gateway, f"/sandboxes/{sid}/connect", {"timeout": None})
        assert status == 200, body
    finally:
        Sandbox.kill(sid)


def test_async_sandbox(gateway):
    async def agent():
        sbx = await AsyncSandbox.create()
        try:
            seen = []
            ex = await sbx.run_code("import time\nprint('a', flush=True)\ntime.sleep(0.5)\n"
                                    "print('b')\n1 + 1",
                                    on_stdout=lambda m: seen.append((m.line, time.monotonic())))
            assert ex.text == "2"
            assert [line for line, _ in seen] == ["a\n", "b\n"]
            assert seen[1][1] - seen[0][1] > 0.3
            await sbx.files.write("/home/user/x.csv", "a\n1\n")
            assert await sbx.files.read("/home/user/x.csv") == "a\n1\n"
            r = await sbx.commands.run("cat /home/user/x.csv | wc -l")
            assert r.stdout == "2\n"
            with pytest.raises(TimeoutException):
                await sbx.commands.run("sleep 10", timeout=1)
            ctx = await sbx.create_code_context()
            assert (await sbx.run_code("ex", context=ctx)).error.name == "NameError"
            info = await sbx.get_info()
            assert info.sandbox_id == sbx.sandbox_id
            await sbx.set_timeout(120)
            same = await AsyncSandbox.connect(sbx.sandbox_id)
            assert (await same.run_code("'same'")).text == "same"
        finally:
            assert await sbx.kill() is True
        assert await sbx.is_running() is False

    asyncio.run(agent())


def test_templates_and_their_kernelspecs_select_the_sandbox_root():
    """Sandbox.create(NAME) of a --template runs in its tree, contexts and
    commands too; a kernelspec naming the template does the same with its
    env, as it does over /api/kernels."""
    import shutil
    import tempfile
    from gbtemplate import MARKER, make_tree, write_kernelspec

    tree = tempfile.mkdtemp(prefix="glovebox-template-")
    specs = tempfile.mkdtemp(prefix="glovebox-tplspecs-")
    gw = None
    try:
        os.chmod(tree, 0o755)
        os.chmod(specs, 0o755)
        make_tree(tree)
        write_kernelspec(specs, "tplenv", "tpl", {"FROM_TEMPLATE_SPEC": "spec-env-value"})
        gw = start_gateway("--template", f"tpl={tree}", "--kernelspec-path", specs, token=None)
        point_sdk_at(gw, generated_token(gw))
        read = "open('/etc/template-marker').read()"
        sbx = Sandbox.create("tpl")
        try:
            assert sbx.run_code(read).text == MARKER
            assert sbx.commands.run("cat /etc/template-marker").stdout == MARKER
            ctx = sbx.create_code_context()
            assert sbx.run_code(read, context=ctx).text == MARKER
            sbx.files.write("/opt/shared/note.txt", "mine")
            assert sbx.commands.run("cat /opt/shared/note.txt").stdout == "mine"
        finally:
            sbx.kill()
        env = "__import__('os').environ.get('FROM_TEMPLATE_SPEC')"
        sbx = Sandbox.create("tplenv")
        try:
            assert sbx.run_code(read).text == MARKER
            assert sbx.run_code(env).text == "spec-env-value"
            ctx = sbx.create_code_context()
            assert sbx.run_code(env, context=ctx).text == "spec-env-value"
            # The other sandbox's write went with it.
            assert not sbx.files.exists("/opt/shared/note.txt")
        finally:
            sbx.kill()
        with pytest.raises(SandboxException) as caught:
            Sandbox.create("no-such-template")
        assert "tpl" in str(caught.value)
    finally:
        if gw:
            gw.stop()
        shutil.rmtree(tree)
        shutil.rmtree(specs)


# Every language E2B's SDK names, each through the kernelspec installed for
# it (scripts/test installs r-cran-irkernel, ijavascript and OpenJDK; the
# bash, JavaScript, TypeScript and Java kernels are Glovebox's own). The
# first run of a language makes its default context.
LANGUAGES = [
    ("python", "print(6 * 7)"),
    ("bash", "echo $((6 * 7))"),
    ("r", "cat(6 * 7, '\\n')"),
    ("js", "console.log(6 * 7)"),
    ("javascript", "console.log(6 * 7)"),
    ("ts", "const n: number = 6 * 7; console.log(n)"),
    ("java", "System.out.println(6 * 7);"),
]


@pytest.mark.parametrize("language,code", LANGUAGES)
def test_each_language_runs(sbx, language, code):
    ex = sbx.run_code(code, language=language)
    assert ex.error is None, ex.error
    assert "".join(ex.logs.stdout).strip() == "42", ex.logs


def test_language_contexts_keep_state(sbx):
    ctx = sbx.create_code_context(language="bash")
    assert ctx.language == "bash"
    sbx.run_code("x=41; cd /tmp", context=ctx)
    ex = sbx.run_code("echo $((x + 1)) $PWD", context=ctx)
    assert ex.logs.stdout == ["42 /tmp\n"], ex.logs
    failed = sbx.run_code("false", context=ctx)
    assert failed.error is not None and "exit status 1" in failed.error.value
    js = sbx.create_code_context(language="js")
    assert js.language == "javascript"
    sbx.run_code("var y = 20", context=js)
    assert sbx.run_code("y * 2 + 2", context=js).text == "42"
    # js and javascript are one language, whose default context is the
    # sandbox's own (listed first): a run by language goes there, not here.
    sbx.run_code("var y = 7", language="javascript")
    assert sbx.run_code("y", language="js").text == "7"
    assert sbx.run_code("y", context=js).text == "20"


def test_r_plots_and_data_frames(sbx):
    ex = sbx.run_code("plot(1:10)", language="r")
    assert ex.error is None, ex.error
    assert [r for r in ex.results if r.png], ex.results
    assert base64.b64decode([r.png for r in ex.results if r.png][0])[:8] == b"\x89PNG\r\n\x1a\n"
    ex = sbx.run_code("data.frame(city = c('Oslo', 'Rome'), sales = c(33, 76))", language="r")
    html = [r.html for r in ex.results if r.html]
    assert html and "Oslo" in html[0] and "<table" in html[0], ex.results
    ex = sbx.run_code("stop('no such thing')", language="r")
    assert ex.error is not None and "no such thing" in ex.error.value


def test_missing_language_names_the_installed_ones(sbx):
    with pytest.raises(SandboxException) as caught:
        sbx.run_code("1", language="cobol")
    message = str(caught.value)
    for language in ("python", "bash", "r", "javascript"):
        assert re.search(rf"\b{language}\b", message), message


def test_a_language_that_fails_to_start_says_why():
    """A kernel that exits at start: the SDK's error carries its last output."""
    import pathlib
    import shutil
    import tempfile
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="glovebox-spec-"))
    os.chmod(tmp, 0o755)
    (tmp / "brokenr").mkdir()
    (tmp / "brokenr" / "kernel.json").write_text(json.dumps({
        "argv": ["/bin/sh", "-c", "echo 'ldpaths: No such file or directory' >&2; exit 1",
                 "{connection_file}"],
        "display_name": "Broken", "language": "cobol"}))
    gw = start_gateway("--kernelspec-path", str(tmp), token=None)
    try:
        gw.token = generated_token(gw)
        point_sdk_at(gw, gw.token)
        sbx = Sandbox.create()
        try:
            with pytest.raises(SandboxException) as caught:
                sbx.run_code("1", language="cobol")
            message = str(caught.value)
            assert "exited with code 1" in message, message
            assert "ldpaths: No such file or directory" in message, message
            assert sbx.run_code("1 + 1").text == "2"
        finally:
            sbx.kill()
    finally:
        gw.stop()
        shutil.rmtree(tmp)


def poll_events(handle, wanted, timeout=20):
    """Polls the watcher until every (name, type) in wanted was seen; returns
    all the events seen."""
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        seen += [(e.name, e.type.value) for e in handle.get_new_events()]
        if all(w in seen for w in wanted):
            return seen
        time.sleep(0.1)
    raise AssertionError(f"wanted {wanted}, saw {seen}")


def test_watch_dir_polls_create_write_remove(sbx):
    """files.watch_dir (CreateWatcher, GetWatcherEvents, RemoveWatcher): a
    create, a write and a remove, named relative to the watched directory;
    recursive watches see into subdirectories made after the watch began."""
    sbx.files.make_dir("/home/user/watched")
    handle = sbx.files.watch_dir("/home/user/watched")
    assert handle.get_new_events() == []
    sbx.files.write("/home/user/watched/a.txt", "one")
    sbx.commands.run("echo two >> /home/user/watched/a.txt")
    sbx.files.remove("/home/user/watched/a.txt")
    seen = poll_events(handle, [("a.txt", "create"), ("a.txt", "write"), ("a.txt", "remove")])
    order = [t for n, t in seen if n == "a.txt"]
    assert order.index("create") < order.index("remove"), seen
    handle.stop()
    with pytest.raises(SandboxException):
        handle.get_new_events()

    # Not recursive: what happens below a subdirectory is not reported.
    flat = sbx.files.watch_dir("/home/user/watched")
    deep = sbx.files.watch_dir("/home/user/watched", recursive=True)
    sbx.files.make_dir("/home/user/watched/sub")
    poll_events(deep, [("sub", "create")])
    sbx.commands.run("echo x > /home/user/watched/sub/b.txt && rm /home/user/watched/sub/b.txt")
    poll_events(deep, [("sub/b.txt", "create"), ("sub/b.txt", "write"),
                       ("sub/b.txt", "remove")])
    assert all(not n.startswith("sub/") for n, _ in poll_events(flat, [("sub", "create")]))
    flat.stop()
    deep.stop()

    with pytest.raises(NotFoundException):
        sbx.files.watch_dir("/home/user/no-such-dir")
    sbx.files.write("/home/user/plain.txt", "x")
    with pytest.raises(InvalidArgumentException):
        sbx.files.watch_dir("/home/user/plain.txt")


def test_commands_and_files_as_root(sbx):
    """user="root": the sandbox's own root (uid 0 of its user namespace),
    never the host's; files it writes are root's; it reaches the user's
    files; the default stays "user"."""
    r = sbx.commands.run("id -u; whoami; id -u -n", user="root")
    assert r.stdout == "0\nroot\nroot\n", r.stdout
    assert sbx.commands.run("id -u; whoami").stdout == "1000\nuser\n"
    assert sbx.commands.run("whoami", user="user").stdout == "user\n"
    # A file of the user's, private to it: root reads and changes it.
    sbx.commands.run("echo secret > /home/user/private && chmod 600 /home/user/private")
    assert sbx.commands.run("cat /home/user/private", user="root").stdout == "secret\n"
    assert sbx.files.read("/home/user/private", user="root") == "secret\n"
    # What root writes is root's, and the user cannot change it.
    sbx.files.write("/home/user/by-root.txt", "r", user="root")
    assert sbx.files.get_info("/home/user/by-root.txt").owner == "root"
    sbx.commands.run("echo c > /home/user/cmd-root.txt", user="root")
    assert sbx.commands.run("stat -c %u:%g /home/user/cmd-root.txt").stdout == "0:0\n"
    with pytest.raises(CommandExitException):
        sbx.commands.run("echo no >> /home/user/by-root.txt")
    assert sbx.files.get_info("/home/user/private").owner == "user"


def test_async_watch_dir_streams_events(gateway):
    """AsyncSandbox.files.watch_dir: WatchDir's stream, events delivered to
    on_event as they happen, recursive; stop() ends it."""
    async def agent():
        sbx = await AsyncSandbox.create()
        try:
            await sbx.files.make_dir("/home/user/aw")
            seen = []
            handle = await sbx.files.watch_dir(
                "/home/user/aw", on_event=lambda e: seen.append((e.name, e.type.value)),
                recursive=True)

            async def until(wanted):
                deadline = time.time() + 20
                while not all(w in seen for w in wanted):
                    assert time.time() < deadline, (wanted, seen)
                    await asyncio.sleep(0.05)

            await sbx.files.make_dir("/home/user/aw/sub")
            await until([("sub", "create")])
            await sbx.commands.run("echo x > /home/user/aw/sub/f; rm /home/user/aw/sub/f",
                                   user="root")
            await until([("sub/f", "create"), ("sub/f", "write"), ("sub/f", "remove")])
            await handle.stop()
        finally:
            await sbx.kill()

    asyncio.run(agent())
