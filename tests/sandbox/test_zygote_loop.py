"""The Jupyter loop of the zygote's Python kernels (kernel-host/zygote_kernel.py):
where it runs and where ipykernel's application runs instead, and that a
client sees of it what it sees of a cold kernel: outputs, comms, aborts
after an error, control requests while a cell runs, exit(). What only the
loop promises (a cell's descriptor output published before its idle
status, a forked child's prints, the debugger's refusal) is tested on it
alone."""
import re
import time

import pytest

from conftest import assert_from_zygote, run, value
from gbclient import stdout_of

THREADS = "sorted(t.name for t in __import__('threading').enumerate())"
COMM_MANAGERS = ("sum(type(c).__name__ == 'CommManager' "
                 "for c in get_ipython().configurables)")
LOOP_THREADS = ["MainThread", "glovebox-kernel-io"]
PROFILE = "/home/user/.ipython/profile_default"


@pytest.fixture(scope="module")
def gw(zygote_gateway):
    return zygote_gateway


@pytest.fixture
def loop(gw):
    kid = gw.start_kernel()
    assert_from_zygote(gw, kid)
    assert value(gw, kid, THREADS) == LOOP_THREADS
    yield kid
    gw.request("DELETE", f"/api/kernels/{kid}")


@pytest.fixture
def cold(gw):
    # PYTHON* variables are read as an interpreter starts: a cold kernel.
    kid = gw.start_kernel(name="python3", env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert_from_zygote(gw, kid, expected=False)
    yield kid
    gw.request("DELETE", f"/api/kernels/{kid}")


def execute(ch, code, stop_on_error=True):
    return ch.send("execute_request", {"code": code, "silent": False, "store_history": True,
                                       "user_expressions": {}, "allow_stdin": False,
                                       "stop_on_error": stop_on_error})


def results(out):
    """The text of each execute_result among a request's messages."""
    return [m["content"]["data"]["text/plain"] for m in out if m["msg_type"] == "execute_result"]


def plain(text):
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_the_loop_runs_unless_a_file_asks_for_ipykernels_application(gw, loop):
    # A startup file in the profile: ipykernel's application runs the
    # kernel (its five threads) and the file.
    run(gw, loop, f"""import os
os.makedirs('{PROFILE}/startup', exist_ok=True)
open('{PROFILE}/startup/00-glovebox.py', 'w').write('glovebox_started = 42\\n')""")
    assert gw.request("POST", f"/api/kernels/{loop}/restart")[0] == 200
    assert_from_zygote(gw, loop)
    assert value(gw, loop, "glovebox_started") == 42
    threads = value(gw, loop, THREADS)
    assert {"Control", "Heartbeat", "IOPub"} <= set(threads), threads
    # Its own kernel object's comm manager is the only one the shell lists
    # (the zygote's kernel object is the loop's).
    assert value(gw, loop, COMM_MANAGERS) == 1
    # Without it, the loop again.
    run(gw, loop, f"__import__('os').remove('{PROFILE}/startup/00-glovebox.py')")
    assert gw.request("POST", f"/api/kernels/{loop}/restart")[0] == 200
    assert value(gw, loop, THREADS) == LOOP_THREADS
    assert value(gw, loop, "'glovebox_started' in globals()") is False


IDENTITY = """(lambda k, ip: {
    'ident': k.ident, 'session': k.session.session, 'topic': ip.displayhook.topic.decode(),
    'singleton': type(k).instance() is k, 'shell': ip is k.shell and ip.kernel is k,
    'comm_managers': sum(type(c).__name__ == 'CommManager' for c in ip.configurables),
    'argv0': __import__('sys').argv[0], 'count': ip.execution_count})(
    get_ipython().kernel, get_ipython())"""


def test_each_kernel_is_its_own(gw, loop, cold):
    # The zygote builds ipykernel's kernel object once; each kernel gets
    # it with an identity, a session and a topic of its own, and is the
    # singleton, as a cold kernel's is.
    other = gw.start_kernel()
    try:
        assert_from_zygote(gw, other)
        first, second, want = (value(gw, k, IDENTITY) for k in (loop, other, cold))
    finally:
        gw.request("DELETE", f"/api/kernels/{other}")
    for got in (first, second):
        assert {k: got[k] for k in ("singleton", "shell", "comm_managers", "argv0")} == \
            {k: want[k] for k in ("singleton", "shell", "comm_managers", "argv0")}
        assert got["topic"] == f"kernel.{got['ident']}.execute_result"
    assert want["singleton"] and want["shell"] and want["comm_managers"] == 1
    assert want["argv0"].endswith("/ipykernel_launcher.py")
    for key in ("ident", "session"):
        assert len({first[key], second[key], want[key]}) == 3, key


OUTPUTS = """import sys
print('out 1')
print('err 1', file=sys.stderr)
from IPython.display import display, clear_output
h = display('first', display_id=True)
h.update('second')
display({'text/html': '<b>x</b>', 'text/plain': 'x'}, raw=True)
clear_output(wait=True)
import asyncio
await asyncio.sleep(0.01)
print('out 2')
42"""


def outputs_seen(gw, kid):
    ch = gw.connect(kid)
    try:
        reply, out = ch.execute(OUTPUTS)
        seen = {"reply": reply["content"]["status"]}
        seen["messages"] = [(m["msg_type"], m["content"].get("name"),
                             m["content"].get("text"),
                             m["content"].get("data", {}).get("text/plain"),
                             m["content"].get("wait"))
                            for m in out if m["msg_type"] not in ("status", "execute_input")]
        reply, out = ch.execute("def f():\n    return 1 / 0\nf()")
        errors = [m["content"] for m in out if m["msg_type"] == "error"]
        seen["error"] = (reply["content"]["status"], reply["content"]["ename"],
                         [plain(line).splitlines()[-1] for line in errors[0]["traceback"]])
        states = [m["content"]["execution_state"] for m in out if m["msg_type"] == "status"]
        seen["states"] = states
        return seen
    finally:
        ch.close()


def test_outputs_are_a_cold_kernels(gw, loop, cold):
    got, want = outputs_seen(gw, loop), outputs_seen(gw, cold)
    assert got == want
    assert want["reply"] == "ok"
    texts = [m for m in want["messages"] if m[0] == "stream"]
    assert "".join(t[2] for t in texts if t[1] == "stdout") == "out 1\nout 2\n"
    assert [t[2] for t in texts if t[1] == "stderr"] == ["err 1\n"]
    assert [m[0] for m in want["messages"] if m[0] != "stream"] == [
        "display_data", "update_display_data", "display_data", "clear_output", "execute_result"]
    assert want["messages"][-1][3] == "42"
    assert want["error"][:2] == ("error", "ZeroDivisionError")
    assert want["states"] == ["busy", "idle"]


def test_replies_are_not_held_back(gw, loop, cold):
    # ipykernel sleeps 0.5 ms before every execute_reply so that its IOPub
    # thread can flush; the loop's streams flush before the reply is sent
    # (test_outputs_are_a_cold_kernels), so it does not sleep.
    sleep = "get_ipython().kernel._execute_sleep"
    assert value(gw, loop, sleep) == 0
    assert value(gw, cold, sleep) == 0.0005


def test_descriptor_and_child_output_come_with_the_cell(gw, loop):
    # Written to descriptors 1 and 2 by Python, a subprocess and a forked
    # child: all of it on IOPub, with the cell's parent, before its idle.
    # (Each line in one write: what comes through the pipes and what Python
    # writes are interleaved as they arrive, as in ipykernel.)
    code = """import os, subprocess, sys
os.write(1, b'fd out\\n')
os.write(2, b'fd err \\xff\\n')
subprocess.run(['echo', 'from a subprocess'])
pid = os.fork()
if pid == 0:
    sys.stdout.write('from a forked child\\n')
    os._exit(0)
os.waitpid(pid, 0)
sys.stdout.write('from python\\n')"""
    ch = gw.connect(loop)
    try:
        for _ in range(3):
            reply, out = ch.execute(code)
            assert reply["content"]["status"] == "ok"
            lines = sorted(stdout_of(out).splitlines())
            assert lines == ["fd out", "from a forked child", "from a subprocess",
                             "from python"], out
            err = "".join(m["content"]["text"] for m in out
                          if m["msg_type"] == "stream" and m["content"]["name"] == "stderr")
            assert err == "fd err \ufffd\n"
    finally:
        ch.close()


def test_output_is_flushed_while_the_cell_runs(gw, loop):
    ch = gw.connect(loop)
    try:
        msg_id = execute(ch, "import os, time\nprint('early')\ntime.sleep(3)\n"
                             "os.write(1, b'fd early\\n')\ntime.sleep(3)\nprint('late')")
        arrived = {}
        start = time.monotonic()
        while "late\n" not in arrived:
            m = ch.recv(30)
            if m["msg_type"] == "stream" and m["parent_header"].get("msg_id") == msg_id:
                arrived[m["content"]["text"]] = time.monotonic() - start
        assert list(arrived) == ["early\n", "fd early\n", "late\n"], arrived
        # Each within a second of its write (0.2 s after, as in ipykernel),
        # not at the cell's end six seconds later.
        assert arrived["early\n"] < 1.5 and 3 <= arrived["fd early\n"] < 4.5, arrived
        assert arrived["late\n"] >= 6, arrived
    finally:
        ch.close()


def test_a_failed_cell_aborts_what_had_arrived_and_no_more(gw, loop, cold):
    def replies(kid):
        ch = gw.connect(kid)
        try:
            ids = [execute(ch, code) for code in ("a = 1", "import time; time.sleep(1); 1 / 0",
                                                   "b = 2", "c = 3")]
            got = [ch.collect(i)[0]["content"]["status"] for i in ids]
            # Sent after the failed cell's idle status: it runs.
            got.append(ch.collect(execute(ch, "d = 4"))[0]["content"]["status"])
            got.append(ch.execute("sorted(k for k in 'abcd' if k in globals())")[1][-2]
                       ["content"]["data"]["text/plain"])
            return got
        finally:
            ch.close()

    want = ["ok", "error", "aborted", "aborted", "ok", "['a', 'd']"]
    assert replies(loop) == want
    # The requests to abort are taken as the failed cell's reply goes out,
    # before its idle status: a cell sent on that status always runs.
    ch = gw.connect(loop)
    try:
        for _ in range(10):
            assert ch.execute("1 / 0")[0]["content"]["status"] == "error"
            assert ch.execute("1")[0]["content"]["status"] == "ok"
    finally:
        ch.close()
    # ipykernel 6.17 ends its abort from a timer, so a cell sent right after
    # the failed one's idle may be aborted too (glovebox_kernelbase.py): the
    # cold kernel is compared on the requests queued behind the error only.
    assert replies(cold)[:4] == want[:4]


def test_control_requests_are_answered_while_a_cell_runs(gw, loop):
    ch = gw.connect(loop)
    try:
        cell = execute(ch, "import time; time.sleep(4)")
        time.sleep(0.5)
        start = time.monotonic()
        info = ch.send("kernel_info_request", {}, channel="control")
        debug = ch.send("debug_request", {"type": "request", "seq": 1, "command": "initialize",
                                          "arguments": {}}, channel="control")
        replies = {}
        while len(replies) < 3:
            m = ch.recv(30)
            parent = m["parent_header"].get("msg_id")
            if m["channel"] in ("shell", "control") and parent in (cell, info, debug):
                replies[parent] = (m["msg_type"], m["content"].get("status"),
                                   time.monotonic() - start)
        assert replies[info][:2] == ("kernel_info_reply", "ok")
        assert replies[info][2] < 2, replies
        assert replies[debug][:2] == ("debug_reply", "error")
        assert replies[cell][:2] == ("execute_reply", "ok") and replies[cell][2] > 3
        assert list(replies) == [info, debug, cell]
    finally:
        ch.close()


COMM_TARGET = """def glovebox_target(comm, msg):
    @comm.on_msg
    def echo(msg):
        comm.send({'echo': msg['content']['data']})
    comm.send({'opened': msg['content']['data']})
get_ipython().kernel.comm_manager.register_target('glovebox', glovebox_target)"""


def comms_seen(gw, kid):
    ch = gw.connect(kid)
    try:
        assert ch.execute(COMM_TARGET)[0]["content"]["status"] == "ok"
        seen = []
        for msg_type, content in (
                ("comm_open", {"comm_id": "c1", "target_name": "glovebox", "data": {"n": 1}}),
                ("comm_msg", {"comm_id": "c1", "data": {"n": 2}})):
            msg_id = ch.send(msg_type, content)
            while True:
                m = ch.recv(30)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                if m["msg_type"] == "comm_msg":
                    seen.append(m["content"]["data"])
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    break
        reply, _ = ch.collect(ch.send("comm_info_request", {"target_name": "glovebox"}))
        seen.append(reply["content"]["comms"])
        return seen
    finally:
        ch.close()


def test_comms_are_a_cold_kernels(gw, loop, cold):
    got, want = comms_seen(gw, loop), comms_seen(gw, cold)
    assert got == want
    assert want == [{"opened": {"n": 1}}, {"echo": {"n": 2}},
                    {"c1": {"target_name": "glovebox"}}]


WIRE_CELL = """from ipykernel.comm import Comm
print('before', flush=True)
c = Comm(target_name='nobody', data={'n': 1}, buffers=[b'\\x00\\x01'])
print('after')
k = get_ipython().kernel
(type(k.session.wire).__name__, k.session.msg_id)"""


def test_its_messages_go_through_the_c_wire(gw, loop):
    # kernel-host/zygote_wire.c sends and reads the loop's messages; one
    # with buffers (a comm's) is sent by jupyter_client's Session: all
    # reach the client, in order, their ids of one count.
    ch = gw.connect(loop)
    try:
        reply, out = ch.execute(WIRE_CELL)
    finally:
        ch.close()
    assert reply["content"]["status"] == "ok"
    kinds = [(m["msg_type"], m["content"].get("text")) for m in out
             if m["msg_type"] in ("stream", "comm_open")]
    assert kinds == [("stream", "before\n"), ("comm_open", None), ("stream", "after\n")]
    comm = next(m for m in out if m["msg_type"] == "comm_open")
    assert comm["content"]["data"] == {"n": 1}
    assert [bytes(b) for b in comm.get("buffers", [])] in ([b"\x00\x01"], [])
    result = next(m for m in out if m["msg_type"] == "execute_result")
    wire, next_id = eval(result["content"]["data"]["text/plain"])
    assert wire == "Wire"
    ids = [m["header"]["msg_id"] for m in out] + [reply["header"]["msg_id"]]
    counts = [int(i.rsplit("_", 1)[1]) for i in ids]
    # busy, execute_input, the streams, the comm, the result, idle, the
    # reply and the id the cell took: one session's count, each once, the
    # comm's (Session's send) between the streams' (the wire's).
    assert len({i.rsplit("_", 1)[0] for i in ids + [next_id]}) == 1
    counts.append(int(next_id.rsplit("_", 1)[1]))
    assert len(set(counts)) == len(counts)
    before, comm_at, after = (int(m["header"]["msg_id"].rsplit("_", 1)[1]) for m in out
                              if m["msg_type"] in ("stream", "comm_open"))
    assert before < comm_at < after


def test_exit_in_a_cell_ends_the_kernel_as_a_cold_ones(gw, loop, cold):
    for kid in (cold, loop):
        run(gw, kid, "glovebox_before = 1")
        ch = gw.connect(kid)
        try:
            reply, _ = ch.execute("exit()")
            assert reply["content"]["status"] == "ok"
            assert [p["source"] for p in reply["content"]["payload"]] == ["ask_exit"]
        finally:
            ch.close()
        # The kernel ended; the gateway started it again.
        deadline = time.monotonic() + 30
        while True:
            try:
                if value(gw, kid, "'glovebox_before' in globals()", timeout=10) is False:
                    break
            except Exception:
                # (A cell sent as the kernel ended goes unanswered.)
                pass
            assert time.monotonic() < deadline, gw.read_log()[-3000:]
            time.sleep(0.5)


def asyncio_seen(gw, kid):
    """A task a cell leaves on the loop runs between cells; asyncio.run()
    finds the loop running; an awaiting cell is interrupted."""
    seen = []
    ch = gw.connect(kid)
    try:
        reply, _ = ch.execute("import asyncio\nglovebox_ticks = []\n"
                              "async def tick():\n"
                              "    for _ in range(3):\n"
                              "        glovebox_ticks.append(1)\n"
                              "        await asyncio.sleep(0.05)\n"
                              "glovebox_task = asyncio.get_event_loop().create_task(tick())")
        seen.append(reply["content"]["status"])
        time.sleep(1)
        reply, out = ch.execute("len(glovebox_ticks), glovebox_task.done()")
        seen.append(results(out))
        # (Without stop_on_error: ipykernel 6.17 may abort a request sent
        # just after a failed cell's idle, test_a_failed_cell_aborts_...)
        reply, _ = ch.collect(execute(ch, "asyncio.run(asyncio.sleep(0))", stop_on_error=False))
        seen.append((reply["content"]["ename"], reply["content"]["evalue"]))
        msg_id = execute(ch, "await asyncio.sleep(30)")
        time.sleep(1)
        assert gw.request("POST", f"/api/kernels/{kid}/interrupt")[0] == 204
        reply, _ = ch.collect(msg_id, timeout=20)
        seen.append((reply["content"]["status"], reply["content"].get("ename")))
        reply, out = ch.execute("await asyncio.sleep(0.01)\n'after'")
        seen.append(results(out))
        return seen
    finally:
        ch.close()


def test_asyncio_is_a_cold_kernels(gw, loop, cold):
    got, want = asyncio_seen(gw, loop), asyncio_seen(gw, cold)
    assert got == want
    assert want[:3] == ["ok", ["(3, True)"],
                        ("RuntimeError", "asyncio.run() cannot be called from a running event loop")]
    assert want[3][0] == "error" and want[4] == ["'after'"], want


def kernel_info(gw, kid, channel="shell"):
    ch = gw.connect(kid)
    try:
        sent = ch.send("kernel_info_request", {}, channel=channel)
        while True:
            m = ch.recv(30)
            if m["msg_type"] == "kernel_info_reply" and \
                    m["parent_header"].get("msg_id") == sent:
                return m["content"]
    finally:
        ch.close()


def test_kernel_info_is_a_cold_kernels(gw, cold):
    # The loop answers with the content the zygote built until the kernel
    # runs anything, then with ipykernel's handler: the same replies as a
    # cold kernel's, on both channels, before and after a cell changes
    # what they say.
    kid = gw.start_kernel()
    try:
        assert_from_zygote(gw, kid)
        first = [kernel_info(gw, k, channel) for k in (kid, cold)
                 for channel in ("shell", "control")]
        assert first[0] == first[1] == first[2] == first[3], first
        assert first[0]["status"] == "ok" and first[0]["implementation"] == "ipython"
        for k in (kid, cold):
            run(gw, k, "get_ipython().banner2 = 'glovebox banner'")
        after = [kernel_info(gw, k, channel) for k in (kid, cold)
                 for channel in ("shell", "control")]
        assert after[0] == after[1] == after[2] == after[3], after
        assert after[0]["banner"] == first[0]["banner"] + "\nglovebox banner"
    finally:
        gw.request("DELETE", f"/api/kernels/{kid}")


STOREMAGIC = """import os
open('storemagic.py', 'w').write('''
import builtins
def load_ipython_extension(ip):
    builtins.glovebox_storemagic = ip is get_ipython()
''')
os.getcwd()"""


def test_storemagic_is_a_cold_kernels(gw, loop, cold):
    # ipykernel's application loads "storemagic" into every shell: IPython's
    # own (%store), or a module of that name the kernel's path has first.
    for k in (loop, cold):
        assert "Stored 'glovebox_x' (int)" in run(gw, k, "glovebox_x = 5\n%store glovebox_x")[1]
        assert value(gw, k, "hasattr(__import__('builtins'), 'glovebox_storemagic')") is False
        run(gw, k, STOREMAGIC)
        assert gw.request("POST", f"/api/kernels/{k}/restart")[0] == 200
        assert value(gw, k, "__import__('builtins').glovebox_storemagic") is True
        assert value(gw, k, "'storemagic' in get_ipython().extension_manager.loaded") is True
        run(gw, k, "__import__('os').remove('storemagic.py')")
    assert_from_zygote(gw, loop)


def test_the_gateway_keeps_the_welcome_to_itself(gw, loop):
    # The loop answers each IOPub subscription with an iopub_welcome (JEP
    # 65). The gateway's, made again as the kernel restarts, is the
    # gateway's: a client attached through the restart hears none.
    ch = gw.connect(loop)
    try:
        assert gw.request("POST", f"/api/kernels/{loop}/restart")[0] == 200
        sent = execute(ch, "1+1")
        seen = []
        while True:
            m = ch.recv(30)
            seen.append(m["msg_type"])
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle" and \
                    m["parent_header"].get("msg_id") == sent:
                break
        assert "execute_result" in seen and "iopub_welcome" not in seen, seen
    finally:
        ch.close()
    assert value(gw, loop, THREADS) == LOOP_THREADS


WAKE = """import asyncio, threading
loop = asyncio.get_running_loop()
future = loop.create_future()
threading.Timer(0.2, lambda: loop.call_soon_threadsafe(future.set_result, 'woken')).start()
await future"""

# What the loop's self-pipe carries: the bytes sent, among any other
# thread's wake-ups before or after them.
OWN_LOOP = """(lambda loop: (
    loop._csock.send(b'glovebox') == 8 and b'glovebox' in loop._ssock.recv(4096),
    {int(l.split()[1]) for l in open(f'/proc/self/fdinfo/{loop._selector.fileno()}')
     if l.startswith('tfd:')} >= {loop._ssock.fileno()}))(
    __import__('asyncio').get_event_loop())"""


def test_each_kernel_runs_its_own_loop(gw, loop, cold):
    # The zygote makes the asyncio loop (and tornado's view of it) once;
    # each kernel gives it an epoll and a self-pipe of its own: another
    # thread's call_soon_threadsafe wakes it, as a cold kernel's.
    other = gw.start_kernel()
    try:
        assert_from_zygote(gw, other)
        for k in (loop, other, cold):
            content, _, out = run(gw, k, WAKE)
            assert content["status"] == "ok", content
            assert results(out) == ["'woken'"]
            assert value(gw, k, OWN_LOOP) == (True, True)
            assert value(gw, k, "type(get_ipython().kernel.io_loop).__name__") == \
                "AsyncIOMainLoop"
    finally:
        gw.request("DELETE", f"/api/kernels/{other}")


STACK = "[f.name for f in __import__('traceback').extract_stack()]"
WAKE_UPS = {
    "woken": "threading.Timer(0.2, loop.call_soon_threadsafe, (print, 'woken')).start()",
    "signalled": "loop.add_signal_handler(signal.SIGUSR1, print, 'signalled')\n"
                 "threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()",
}


def outside_requests(gw, kid, wake_up):
    """What a cell sees of the loop while it has nothing to run (running,
    not runnable again), and whether a wake-up between requests runs it:
    another thread's call_soon_threadsafe, a signal of add_signal_handler
    (wake_up: a key of WAKE_UPS, the text it prints)."""
    seen = []
    ch = gw.connect(kid)
    try:
        def result(code):
            reply, out = ch.execute(code)
            if reply["content"]["status"] != "ok":
                return reply["content"]["ename"], reply["content"]["evalue"]
            return results(out)

        seen.append(result("import asyncio, os, signal, threading\n"
                           "loop = asyncio.get_running_loop()\n"
                           "loop is asyncio.get_event_loop(), loop.is_running()"))
        # A current task, as ipykernel's (sniffio's answer: asyncio).
        seen.append(result("asyncio.current_task() is not None"))
        seen.append(result("loop.run_forever()"))
        seen.append(result(WAKE_UPS[wake_up]))
        printed, deadline = False, time.monotonic() + 10
        while not printed and time.monotonic() < deadline:
            m = ch.recv(10)
            printed = m["msg_type"] == "stream" and wake_up in m["content"]["text"]
        seen.append(printed)
        seen.append(result("1 + 1"))
        return seen
    finally:
        ch.close()


@pytest.mark.parametrize("wake_up", sorted(WAKE_UPS))
def test_cells_run_outside_the_loop_which_runs_between_them(gw, cold, wake_up):
    # Requests are handled outside the asyncio loop (_serve), the loop still
    # the cells' running loop; a wake-up between requests makes it run, as
    # a cold kernel's (a fresh kernel each: the first wake-up is the test).
    fresh = gw.start_kernel()
    try:
        assert_from_zygote(gw, fresh)
        stack = value(gw, fresh, STACK)
        assert "_run_request" in stack and "_run_once" not in stack, stack
        got = outside_requests(gw, fresh, wake_up)
        assert got == outside_requests(gw, cold, wake_up)
        assert got == [["(True, True)"], ["True"],
                       ("RuntimeError", "This event loop is already running"),
                       [], True, ["2"]], got
        # The loop has run; the cells still run outside it.
        stack = value(gw, fresh, STACK)
        assert "_run_request" in stack and "_run_once" not in stack, stack
    finally:
        gw.request("DELETE", f"/api/kernels/{fresh}")


def test_a_timer_left_by_a_cell_runs_between_requests(gw, loop):
    ch = gw.connect(loop)
    try:
        reply, _ = ch.execute("__import__('asyncio').get_running_loop().call_later("
                              "0.1, print, 'later');")
        assert reply["content"]["status"] == "ok", reply
        m = ch.recv(10)
        while m["msg_type"] != "stream":
            m = ch.recv(10)
        assert m["content"]["text"] == "later\n", m
    finally:
        ch.close()


def awaiting_first_seen(gw, kid):
    """A first cell that awaits; then nest_asyncio's asyncio.run() inside
    cells, as notebooks use it, after the loop has run."""
    seen = []
    ch = gw.connect(kid)
    try:
        for code in ("import asyncio, nest_asyncio\nawait asyncio.sleep(0.01, 'first')",
                     "nest_asyncio.apply()\nasyncio.run(asyncio.sleep(0.01, 'ran'))",
                     "asyncio.run(asyncio.sleep(0.01, 'again'))",
                     "await asyncio.sleep(0.01, 'awaited')", "1 + 1"):
            reply, out = ch.execute(code, timeout=30)
            seen.append((reply["content"]["status"], results(out)))
        return seen
    finally:
        ch.close()


def test_nest_asyncio_after_a_cell_that_awaits_is_a_cold_kernels(gw, loop, cold):
    # The first cell awaits: its request goes on as a task of the asyncio
    # loop. nest_asyncio then patches the loop and runs asyncio.run() inside
    # cells: a cell never runs inside a step of the loop whose callbacks the
    # nested run could take (the kernel died on the second asyncio.run()).
    got = awaiting_first_seen(gw, loop)
    assert got == awaiting_first_seen(gw, cold)
    assert got == [("ok", ["'first'"]), ("ok", ["'ran'"]), ("ok", ["'again'"]),
                   ("ok", ["'awaited'"]), ("ok", ["2"])], got


def test_nest_asyncio_before_the_loop_has_run(gw, loop):
    content, _, out = run(gw, loop, "import asyncio, nest_asyncio\nnest_asyncio.apply()\n"
                          "asyncio.run(asyncio.sleep(0.01, 'ran'))")
    assert content["status"] == "ok", content
    assert results(out) == ["'ran'"]
    content, _, out = run(gw, loop, "asyncio.run(asyncio.sleep(0.01, 'again'))")
    assert results(out) == ["'again'"], content
    assert value(gw, loop, "1 + 1") == 2


def test_a_first_cell_that_awaits_is_interrupted(gw, loop):
    # Its request goes on as the loop's task, the loop watching the wake-up
    # pipe that a SIGINT taken by another thread writes.
    ch = gw.connect(loop)
    try:
        msg_id = execute(ch, "import asyncio\nawait asyncio.sleep(30)")
        time.sleep(1)
        assert gw.request("POST", f"/api/kernels/{loop}/interrupt")[0] == 204
        reply, _ = ch.collect(msg_id, timeout=20)
        assert (reply["content"]["status"], reply["content"]["ename"]) == \
            ("error", "CancelledError")
        reply, out = ch.execute("1 + 1")
        assert results(out) == ["2"]
    finally:
        ch.close()


FACTORY = """import asyncio
def glovebox_factory(loop, coro, **kw):
    # A task factory that schedules more than the task's first step.
    loop.call_soon(print, 'made')
    return asyncio.Task(coro, loop=loop, **kw)
asyncio.get_running_loop().set_task_factory(glovebox_factory)"""


def test_a_task_factory_that_schedules_more_is_obeyed(gw, loop):
    # Then a request's task is run by the loop itself, as before the
    # requests were stepped outside it.
    content, _, _ = run(gw, loop, FACTORY)
    assert content["status"] == "ok", content
    content, stdout, out = run(gw, loop, STACK.join(("print(", ")")))
    assert content["status"] == "ok", content
    assert "_run_once" in stdout and "made" in stdout, stdout
    assert value(gw, loop, "1 + 1") == 2
    content, _, _ = run(gw, loop, "asyncio.get_running_loop().set_task_factory(None)")
    assert "_run_once" not in value(gw, loop, STACK)


def sent_before_first_execute(gw):
    """How many messages a new loop kernel sent before its first execute's
    busy status: message ids end in the kernel's count of its sends."""
    kid = gw.start_kernel()
    ch = gw.connect(kid)
    try:
        sent = execute(ch, "1+1")
        while True:
            m = ch.recv(30)
            if m["msg_type"] == "status" and m["parent_header"].get("msg_id") == sent:
                return int(m["header"]["msg_id"].rsplit("_", 1)[1])
    finally:
        ch.close()
        gw.request("DELETE", f"/api/kernels/{kid}")


def test_a_loop_kernel_is_ready_on_its_welcome_without_a_kernel_info(gw, cold):
    # The gateway takes the loop's iopub_welcome as the kernel's answer and
    # asks it for no kernel_info (KERNEL_WELCOME_WAIT_MS): before its first
    # execute the kernel sent its "starting" and the welcome only, not the
    # busy, reply and idle of a kernel_info. (The gateway asks after 100 ms
    # without a welcome, so one of three starts must show it.)
    counts = []
    for _ in range(3):
        counts.append(sent_before_first_execute(gw))
        if counts[-1] == 2:
            break
    assert counts[-1] == 2, counts
    # A kernel of ipykernel's application sends no welcome: it was asked,
    # and is ready.
    assert value(gw, cold, "1+1") == 2
