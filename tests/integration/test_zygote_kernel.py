"""kernel-host/zygote_kernel.py, the Jupyter loop of a zygote's Python
kernels, on the host: which kernels it takes (and which it leaves to
ipykernel's application), and a kernel whose start fails inside it. Each
case runs in a child interpreter that ran the zygote's own bootstrap,
kernel-host/zygote_bootstrap.py, as glovebox-zygote.so does (without its
preloads), since the loop takes over the process's descriptors 1 and 2.
The loop's kernels themselves are tested in sandboxes, against cold ones:
tests/sandbox/test_zygote_loop.py."""
import json
import os
import subprocess
import sys
import textwrap
import time

from queue import Empty

import zmq
from jupyter_client import BlockingKernelClient

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GLOVEBOX_CONFIG = "c.HistoryManager.hist_file = ':memory:'\n"

# The child's start: the zygote's bootstrap, run as the zygote runs it, with
# the loop's source beside it.
PRELUDE = textwrap.dedent("""
    import json, os, sys
    root = sys.argv[1]
    scope = {"__name__": "__glovebox_zygote__", "_glovebox_preload": [],
             "_glovebox_kernel_source":
                 open(os.path.join(root, "kernel-host", "zygote_kernel.py")).read()}
    exec(open(os.path.join(root, "kernel-host", "zygote_bootstrap.py")).read(), scope)
    loop = scope["_glovebox_kernel_loop"]
    assert loop is not None and scope["_glovebox_shell"] is not None
    """)


def child_command(tmp_path, code, env=None):
    """The command and environment of a fresh interpreter that runs PRELUDE
    then code, its IPython directory tmp_path/ipython."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    return ([sys.executable, "-c", PRELUDE + textwrap.dedent(code), ROOT],
            dict(base, IPYTHONDIR=str(tmp_path / "ipython"), **(env or {})))


def child(tmp_path, code, env=None):
    """Runs child_command to its end; returns (exit status, stdout, stderr)."""
    argv, env = child_command(tmp_path, code, env)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def connection_file(tmp_path, **changes):
    """A connection file in tmp_path: IPC sockets beside it by default, so
    that no test takes a TCP port."""
    info = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4,
            "hb_port": 5, "ip": str(tmp_path / "kernel"), "key": "k" * 32,
            "transport": "ipc", "signature_scheme": "hmac-sha256"}
    info.update(changes)
    path = tmp_path / "kernel.json"
    path.write_text(json.dumps(info))
    return str(path)


TAKEN = """
# Glovebox's own configuration file, where the sandbox has it.
loop.GLOVEBOX_CONFIG = (os.environ["GB_ETC"], "ipython_kernel_config.py",
                        os.environ["GB_GLOVEBOX_CONFIG"])
import IPython.core.application as application
application.SYSTEM_CONFIG_DIRS[:] = [os.environ["GB_ETC"]]
application.ENV_CONFIG_DIRS[:] = []
got = loop.plain_configuration(os.environ["GB_CONN"], dict(os.environ))
print(json.dumps(None if got is None else {"config": got[1],
                                           "profile": got[2].location,
                                           "ipython_dir": got[3]}))
"""


def taken(tmp_path, env=None, setup=None, **conn):
    """What plain_configuration says of a kernel: its configuration and
    profile directory, or None (ipykernel's application runs it)."""
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "ipython_kernel_config.py").write_text(GLOVEBOX_CONFIG)
    if setup:
        setup(tmp_path)
    status, out, err = child(tmp_path, TAKEN, dict(env or {}, GB_ETC=str(etc),
                                                    GB_GLOVEBOX_CONFIG=GLOVEBOX_CONFIG,
                                                    GB_CONN=connection_file(tmp_path, **conn)))
    assert status == 0, err
    return json.loads(out)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_plain_kernel_is_taken_with_glovebox_s_configuration(tmp_path):
    got = taken(tmp_path)
    assert got == {"config": {"HistoryManager": {"hist_file": ":memory:"}},
                   "profile": str(tmp_path / "ipython" / "profile_default"),
                   "ipython_dir": str(tmp_path / "ipython")}
    # The profile's directories were made, as ipykernel makes them.
    assert (tmp_path / "ipython" / "profile_default" / "startup").is_dir()
    assert taken(tmp_path, transport="tcp", ip="127.0.0.1") is not None


def test_anything_more_is_left_to_ipykernels_application(tmp_path):
    def profile(t):
        return t / "ipython" / "profile_default"

    cases = {
        "PYTHONSTARTUP": dict(env={"PYTHONSTARTUP": "/dev/null"}),
        "a profile's kernel configuration": dict(setup=lambda t: write(
            profile(t) / "ipython_kernel_config.py", "c.IPKernelApp.exec_lines = ['x = 1']\n")),
        "a profile's JSON configuration": dict(setup=lambda t: write(
            profile(t) / "ipython_config.json", "{}")),
        "a startup file": dict(setup=lambda t: write(profile(t) / "startup" / "00.py",
                                                     "x = 1\n")),
        "a changed system configuration": dict(setup=lambda t: write(
            t / "etc" / "ipython_kernel_config.py", GLOVEBOX_CONFIG + "c.A.b = 1\n")),
        "a port left to the kernel": dict(hb_port=0),
        "a transport of another kind": dict(transport="udp"),
    }
    for name, case in cases.items():
        case_dir = tmp_path / name.replace(" ", "-").replace("'", "")
        case_dir.mkdir()
        assert taken(case_dir, **case) is None, name
    # Positive control: a README in the startup folder (IPython writes one).
    assert taken(tmp_path, setup=lambda t: write(profile(t) / "startup" / "README", "")) \
        is not None


FAILING = """
loop.GLOVEBOX_CONFIG = (os.environ["IPYTHONDIR"] + "/profile_default",
                        "ipython_kernel_config.py", "")
def adopt(shell, *args, **kw):
    os.write(1, b"written to the captured stdout\\n")
    raise RuntimeError("the shell could not be adopted")
try:
    loop.run(os.environ["GB_CONN"], dict(os.environ), scope["_glovebox_shell"], adopt)
except RuntimeError as e:
    print("raised:", e, sys.stdout is sys.__stdout__, sys.stderr is sys.__stderr__)
    os.write(2, b"after, on the real stderr\\n")
"""


def test_a_kernel_that_fails_in_the_loop_gives_back_its_output(tmp_path):
    # Descriptors 1 and 2 and sys.stdout/stderr are the process's own again,
    # so that the error reaches the kernel's log, where the gateway reads
    # why a kernel did not start.
    status, out, err = child(tmp_path, FAILING, {"GB_CONN": connection_file(tmp_path)})
    assert status == 0, err
    assert out.splitlines()[-1] == "raised: the shell could not be adopted True True", out
    assert err.splitlines()[-1] == "after, on the real stderr", err


SERVING = """
loop.GLOVEBOX_CONFIG = (os.environ["IPYTHONDIR"] + "/profile_default",
                        "ipython_kernel_config.py", "")
echo, failed = loop.KernelLoop._echo, []
def echo_failing_once(self, hb):
    if not failed:
        failed.append(1)
        raise RuntimeError("a fault in the I/O thread")
    return echo(self, hb)
loop.KernelLoop._echo = echo_failing_once
loop.run(os.environ["GB_CONN"], dict(os.environ), scope["_glovebox_shell"],
         scope["_glovebox_adopt_here"])
"""


def test_faults_are_logged_and_the_kernel_goes_on(tmp_path):
    # The heartbeat's first ping makes the I/O thread's round raise; the
    # thread logs it and still answers the heartbeat, the control socket
    # and the output pipes after it. A request that is no valid message is
    # logged, and the next one answered.
    outputs = []
    path = connection_file(tmp_path)
    hb_address = f"ipc://{tmp_path / 'kernel'}-5"
    argv, env = child_command(tmp_path, SERVING, {"GB_CONN": path})
    kernel = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              text=True)
    kc = BlockingKernelClient()
    kc.load_connection_file(path)
    # No heartbeat channel of the client's: its ping could be the first,
    # which finds no echo, and the client would call the kernel dead.
    kc.start_channels(hb=False)
    ctx = zmq.Context()
    hb = ctx.socket(zmq.REQ)
    hb.connect(hb_address)
    hb.rcvtimeo = 3000
    try:
        kc.wait_for_ready(timeout=60)
        # A start slower than its first second has a second kernel_info
        # reply left over.
        while True:
            try:
                kc.get_shell_msg(timeout=0.3)
            except Empty:
                break
        hb.send(b"ping")  # answered by nobody: the round raised
        time.sleep(0.5)
        hb.close(linger=0)
        hb = ctx.socket(zmq.REQ)
        hb.rcvtimeo = 3000
        hb.connect(hb_address)
        hb.send(b"again")
        assert hb.recv() == b"again"
        # A request whose header has no type (signed, so past the check of
        # the key): logged as invalid, and the loop goes on.
        lie = kc.session.msg("kernel_info_request")
        del lie["header"]["msg_type"]
        kc.session.send(kc.shell_channel.socket, lie)
        msg_id = kc.kernel_info()  # on shell; then one on control
        assert kc.get_shell_msg(timeout=10)["parent_header"]["msg_id"] == msg_id
        control_id = kc.session.send(kc.control_channel.socket, "kernel_info_request",
                                     {})["header"]["msg_id"]
        assert kc.get_control_msg(timeout=10)["parent_header"]["msg_id"] == control_id
        reply = kc.execute_interactive("import os; os.write(1, b'through the pipe\\n')",
                                       timeout=10, output_hook=outputs.append)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        hb.close(linger=0)
        ctx.term()
        kernel.kill()
        _, err = kernel.communicate(timeout=10)
    assert "in the kernel's I/O thread" in err and "a fault in the I/O thread" in err, err
    assert "an invalid message on the shell socket" in err and "KeyError: 'msg_type'" in err, err
    assert "through the pipe\n" in "".join(m["content"].get("text", "") for m in outputs
                                           if m["msg_type"] == "stream"), outputs



PLAIN_SERVING = """
loop.GLOVEBOX_CONFIG = (os.environ["IPYTHONDIR"] + "/profile_default",
                        "ipython_kernel_config.py", "")
loop.run(os.environ["GB_CONN"], dict(os.environ), scope["_glovebox_shell"],
         scope["_glovebox_adopt_here"])
"""


def welcomes(ctx, address, session, topic, timeout=30):
    """A new subscriber's first message, read without asking the kernel
    anything; but for the kernel's "starting" status, which a subscriber
    that connects as the kernel starts may get first (the loop publishes
    it as it starts, and reads the subscription after)."""
    sub = ctx.socket(zmq.SUB)
    sub.rcvtimeo = timeout * 1000
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(address)
    try:
        while True:
            idents, frames = session.feed_identities(sub.recv_multipart())
            msg = session.deserialize(frames)
            if msg["msg_type"] != "status" or msg["content"] != {"execution_state": "starting"}:
                return idents, msg
    finally:
        sub.close(linger=0)


def test_each_iopub_subscription_is_welcomed(tmp_path):
    # JEP 65's iopub_welcome, signed, on the subscription's topic, to each
    # subscriber as it subscribes (one for the same topic again too), while
    # the kernel answers as before.
    from jupyter_client.session import Session
    path = connection_file(tmp_path)
    argv, env = child_command(tmp_path, PLAIN_SERVING, {"GB_CONN": path})
    kernel = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              text=True)
    session = Session(key=b"k" * 32)
    ctx = zmq.Context()
    address = f"ipc://{tmp_path / 'kernel'}-2"
    kc = BlockingKernelClient()
    kc.load_connection_file(path)
    try:
        for topic in (b"", b"", b"kernel."):
            idents, msg = welcomes(ctx, address, session, topic)
            assert msg["msg_type"] == "iopub_welcome", msg
            assert msg["content"] == {"subscription": topic.decode()}
            assert idents == [topic or b"welcome"] and msg["parent_header"] == {}
        kc.start_channels()
        kc.wait_for_ready(timeout=60)
        reply = kc.execute_interactive("1+1", timeout=10)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        ctx.term()
        kernel.kill()
        kernel.communicate(timeout=10)


DATES = """
from jupyter_client import jsonutil
from jupyter_client.session import Session
assert jsonutil.parse_date is loop.parse_date
strings = ["2026-12-05T03:21:27.461000Z", "2026-12-05T03:21:27Z", "2026-12-05T03:21:27",
           "2026-12-05T03:21:27.461+05:30", "2026-12-05T03:21:27.4-0800",
           "2026-12-05T03:21:27.000001+00:00", "not a date", "2026-12-05", "",
           "2026-02-30T00:00:00Z", "2026-12-05T24:00:00"]
def read(parse, s):
    try:
        d = parse(s)
    except ValueError:
        return "ValueError"
    return [d.isoformat(), d.utcoffset().total_seconds()] if hasattr(d, "isoformat") else d
def dateutil_s(s):
    if s is None or not jsonutil.ISO8601_PAT.match(s):
        return s
    return jsonutil._ensure_tzinfo(jsonutil._dateutil_parse(s))
session = Session(key=b"k")
msg = session.msg("kernel_info_request", {"when": "2026-12-05T03:21:27Z"})
back = session.deserialize(session.serialize(msg)[1:])
print(json.dumps({"ours": [read(loop.parse_date, s) for s in strings],
                  "dateutil": [read(dateutil_s, s) for s in strings],
                  "header": [back["header"]["date"].isoformat(),
                             msg["header"]["date"].isoformat()],
                  "content": back["content"]["when"]}))
"""


def test_message_dates_read_as_dateutil_reads_them(tmp_path):
    # The zygote reads dates with the standard library's parser first
    # (dateutil's was the slowest step of a kernel's first request): the
    # same instants, offsets and refusals for every string jupyter_client
    # would read as a date; a message's date survives the round trip.
    status, out, err = child(tmp_path, DATES)
    assert status == 0, err
    got = json.loads(out)
    assert got["ours"] == got["dateutil"]
    assert got["ours"][0] == ["2026-12-05T03:21:27.461000+00:00", 0.0]
    assert got["ours"][9] == got["ours"][10] == "ValueError"
    assert got["ours"][6:9] == ["not a date", "2026-12-05", ""]
    assert got["header"][0] == got["header"][1]
    assert got["content"] == "2026-12-05T03:21:27Z"  # content is not read for dates


WARM_UP = """
import linecache
shell = scope["_glovebox_shell"]
seen = []
def hook(event, args):
    if watching and event in ("open", "import", "os.remove", "os.mkdir", "os.listdir",
                              "os.scandir", "subprocess.Popen", "os.system"):
        seen.append((event, repr(args)[:100]))
sys.addaudithook(hook)
def state():
    return (len(linecache.cache), len(shell.compile._filename_map), sys.meta_path[:],
            shell.last_execution_result, shell.execution_count, len(shell.user_ns),
            hasattr(sys, "last_value"), "showtraceback" in vars(shell))
before = state()
watching = True
ran = loop.warm_up(shell)
watching = False
quiet, seen = seen, []
# A run that would import a module not loaded (one on this host's path):
# the import is refused, no file opened, and the warm-up says it did not run.
assert "tabnanny" not in sys.modules
shell.transform_cell = lambda cell: __import__("tabnanny") and cell
watching = True
failed = loop.warm_up(shell)
watching = False
del shell.transform_cell
print(json.dumps({"ran": ran, "quiet": quiet, "failed": failed, "kept": before == state(),
                  "imported": "tabnanny" in sys.modules,
                  "opened": [e for e in seen if e[0] != "import"],
                  "tempdir": __import__("tempfile").tempdir}))
"""


def test_the_warm_up_reads_nothing_and_leaves_nothing(tmp_path):
    """zygote_kernel.py's warm_up, which each process forked ahead runs in
    its sandbox before it is confined: it opens, imports and removes no
    file (ipykernel's compiler would probe a temporary directory by writing
    one), and what it leaves of its cell in the shell and linecache is put
    back. Where its run would import a module not loaded, the import is
    refused (nothing read) and it says it did not run."""
    code, out, err = child(tmp_path, WARM_UP)
    assert code == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"ran": True, "quiet": [], "failed": False, "kept": True, "imported": False,
                   "opened": [], "tempdir": None}, got


REHEARSAL = """
shell = scope["_glovebox_shell"]
seen, sent, reports = [], [], []
def hook(event, args):
    if watching and event in ("open", "import", "os.remove", "os.mkdir", "os.listdir",
                              "os.scandir", "os.rename", "subprocess.Popen", "os.system",
                              "socket.bind", "socket.connect", "sqlite3.connect"):
        # (A descriptor of its own wrapped, such as its log's: no path.)
        if event != "open" or not isinstance(args[0], int):
            seen.append((event, repr(args)[:100]))
sys.addaudithook(hook)
send = loop.WireSession.send
def recording(self, stream, msg_or_type, *args, **kw):
    sent.append(msg_or_type if isinstance(msg_or_type, str) else msg_or_type["msg_type"])
    return send(self, stream, msg_or_type, *args, **kw)
loop.WireSession.send = recording
class Zygote:
    # Stands for glovebox-zygote.so's module: what the rehearsal had done
    # when it reported.
    def report_pages(self):
        kernel = loop.IPythonKernel._instance
        last = shell.last_execution_result
        reports.append({"sent": list(sent), "count": kernel.execution_count,
                        "result": last.result, "success": last.success,
                        "history": shell.history_manager.input_hist_raw[1:]})
        return 1
loop._glovebox_zygote = Zygote()
watching = True
done = loop.rehearse(shell)
watching = False
with open(os.environ["GB_OUT"], "w") as f:
    json.dump({"done": done, "reports": reports, "opened": seen}, f)
"""


def test_the_rehearsal_serves_its_own_requests_reads_nothing_and_then_reports(tmp_path):
    """zygote_kernel.py's rehearse, which a child of the zygote runs once
    before the zygote is ready: a kernel of the loop serves the child's own
    requests over in-process sockets (a kernel_info, a cell that prints
    and shows a result) through ipykernel's handlers, and only then does
    it report its pages, once. It opens, imports, binds and connects
    nothing outside the process, and keeps no history."""
    out = tmp_path / "out.json"
    code, _, err = child(tmp_path, REHEARSAL, env={"GB_OUT": str(out)})
    assert code == 0, err
    got = json.loads(out.read_text())
    assert got["done"] is True and got["opened"] == [], got
    assert len(got["reports"]) == 1, got
    report = got["reports"][0]
    assert report["result"] == 2 and report["success"] and report["count"] == 1, report
    assert report["history"] == [], report
    sent = report["sent"]
    order = [t for t in sent if t in ("kernel_info_reply", "execute_input", "stream",
                                      "execute_result", "execute_reply")]
    assert order == ["kernel_info_reply", "execute_input", "stream", "execute_result",
                     "execute_reply"], sent


FORMATS = """
from IPython.core import formatters
shell = scope["_glovebox_shell"]
direct = {name: cls for name, cls in vars(formatters).items()
          if isinstance(cls, type) and getattr(cls.__dict__.get("__call__"), "__code__", None)
          is not None and cls.__dict__["__call__"].__code__.co_name == "call"}

class Rich:
    def __repr__(self):
        return "Rich()"
    def _repr_html_(self):
        return "<b>rich</b>"
    def _repr_markdown_(self):
        return "*rich*", {"note": 1}

class Failing:
    def __repr__(self):
        return "Failing()"
    def _repr_html_(self):
        raise ValueError("a formatter's own error")
    def _repr_latex_(self):
        raise NotImplementedError

def calls():
    f = shell.display_formatter
    plain, bundle = f.formatters["text/plain"], f.mimebundle_formatter
    out = [f.format(o) for o in (1 + 1, "text", [1, {"a": (2, 3)}], Rich(), Failing())]
    out += [plain(5), plain(obj=5), bundle(Rich(), include=None, exclude=None),
            bundle(Rich(), None, exclude=None)]
    for args, kw in (((1, 2), {}), ((), {"nothing": 1}), ((5,), {"obj": 5})):
        try:
            plain(*args, **kw)
        except TypeError as e:
            out.append(("TypeError", str(e)))
    return json.loads(json.dumps(out, default=repr))

got = calls()
for cls in direct.values():
    cls.__call__ = cls.__dict__["__call__"].__wrapped__
print(json.dumps({"direct": sorted(direct), "got": got, "wrapped": calls()}))
"""


def test_formatters_called_directly_answer_as_their_wrappers(tmp_path):
    # The zygote's formatters skip the decorator package's argument binding
    # on a call that names every parameter: the same results, errors and
    # refusals as through the wrappers they replace.
    status, out, err = child(tmp_path, FORMATS)
    assert status == 0, err
    got = json.loads(out)
    assert {"BaseFormatter", "PlainTextFormatter", "MimeBundleFormatter"} <= set(got["direct"])
    assert got["got"] == got["wrapped"]
    assert got["got"][0][0] == {"text/plain": "2"}
    assert got["got"][3][0]["text/html"] == "<b>rich</b>"
    assert got["got"][4][0] == {"text/plain": "Failing()"}
    assert [g[0] for g in got["got"][-3:]] == ["TypeError"] * 3
    assert "a formatter's own error" in err


ACCEPTS = """
from ipykernel import ipkernel, kernelbase
import inspect
accepts = kernelbase._accepts_cell_id
asked = []
signature = inspect.signature
inspect.signature = lambda *args, **kw: asked.append(args) or signature(*args, **kw)

def plain(code, silent):
    pass

def with_id(code, silent, *, cell_id=None):
    pass

class K:
    def run(self, code, **kw):
        pass

out = [accepts is ipkernel._accepts_cell_id, accepts(plain), accepts(with_id), accepts(K().run),
       accepts(ipkernel.IPythonKernel.do_execute)]
# Asked once per code: a bound method of the same function is not asked again.
out.append(len(asked))
import types
out.append(accepts(types.MethodType(ipkernel.IPythonKernel.do_execute, object())) and len(asked))
# A signature given later is read, not remembered...
plain.__signature__ = inspect.signature(with_id)
out.append(accepts(plain))
# ...and so is new code.
del plain.__signature__
with_id.__code__ = plain.__code__
out.append(accepts(with_id))
print(json.dumps(out))
"""


def test_accepts_cell_id_is_remembered_only_where_the_code_decides(tmp_path):
    # ipykernel asks whether do_execute and run_cell_async take a cell_id on
    # every execute; the zygote remembers the answer per code object.
    status, out, err = child(tmp_path, ACCEPTS)
    assert status == 0, err
    assert json.loads(out) == [True, False, True, True, True, 4, 4, True, False]


AHEAD = """
import IPython.core.application as application
application.SYSTEM_CONFIG_DIRS[:] = []
application.ENV_CONFIG_DIRS[:] = []
scope["_glovebox_confined"]()
context, sockets = loop.PREBUILT["sockets"]
print(json.dumps({"unbound": [s.get(zmq.LAST_ENDPOINT) == b"" for s in sockets.values()]}))
used = []
loop.KernelLoop.run = lambda self: used.append(
    self.context is context and all(self.sockets[n] is sockets[n] and
                                    self.sockets[n].get(zmq.LAST_ENDPOINT) for n in sockets))
ran = loop.run(os.environ["GB_CONN"], dict(os.environ), scope["_glovebox_shell"],
               scope["_glovebox_adopt_here"])
# (A file: a kernel taken by the loop has descriptors 1 and 2 captured.)
with open(os.environ["GB_OUT"], "w") as f:
    json.dump({"ran": ran, "used": used, "closed": context.closed,
               "left": "sockets" in loop.PREBUILT}, f)
"""


def test_sockets_made_ahead_are_bound_by_the_kernel_or_closed(tmp_path):
    """What a process forked ahead makes once confined (sockets_ahead): a
    context and five unbound sockets, which the kernel's start binds; a
    kernel that ipykernel's application must run closes them first."""
    def ahead(case_dir):
        status, out, err = child(case_dir, "import zmq\n" + AHEAD,
                                 {"GB_CONN": connection_file(case_dir),
                                  "GB_OUT": str(case_dir / "out.json")})
        assert status == 0, err
        assert json.loads(out.splitlines()[-1]) == {"unbound": [True] * 5}
        return json.loads((case_dir / "out.json").read_text())

    # Taken by the loop: its kernel binds the same sockets (its run
    # replaced by a look at them).
    (tmp_path / "taken").mkdir()
    assert ahead(tmp_path / "taken") == {"ran": True, "used": [True], "closed": False,
                                         "left": False}
    # A startup file: the application's, so run() gives the kernel back.
    write(tmp_path / "ipython" / "profile_default" / "startup" / "00.py", "x = 1\n")
    assert ahead(tmp_path) == {"ran": False, "used": [], "closed": True, "left": False}
