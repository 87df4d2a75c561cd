"""The floor of a forked kernel's CPU to its first result, and the way
there: five kinds of kernel forked from one parent that imported what
Glovebox's zygote imports (numpy, pandas, matplotlib.pyplot, ipykernel),
each answering `1+1` over the Jupyter protocol, outside any sandbox:

- ipykernel: ipykernel's whole start after the fork, its shell built there
  as a cold kernel builds it.
- zygote: Glovebox's zygote as it is, its bootstrap
  (kernel-host/zygote_bootstrap.py) run here: the shell prebuilt and adopted
  by each kernel, ipykernel's IPythonKernel in Glovebox's own loop
  (kernel-host/zygote_kernel.py).
- zygote-session: the same with jupyter_client's Session in Python
  sending and reading every message, as where glovebox-zygote's C wire
  (kernel-host/zygote_wire.c, imported here from GLOVEBOX_BUILD's
  kernel-host/_glovebox_wire.so) is missing. Without that module both
  kinds use Session (said on stderr).
- zygote-application: the same with ipykernel's application around the
  kernel, as a zygote kernel with a configuration file of its own runs
  (and as every zygote kernel ran before that loop).
- prebuilt: ipykernel's application, session, kernel object and shell
  built before the fork, without configuration files; after it only the
  connection file, the sockets and the ZMQ context, the I/O streams, the
  threads, the extensions and init_code (issue 26's design, a bound: a
  real one would still read each kernel's configuration and give it a
  fresh namespace and history).
- lean: no kernel framework around a prebuilt IPython shell: five ZMQ
  sockets, one Session, one poll loop, the shell's run_cell and display
  formatter; no threads of its own. The floor in Python.
- c-loop: the same loop in C (bench/kernel_floor_c.c, built here with the
  system's compiler over libzmq, jansson and libcrypto), Python called only
  to run the cell and format its result: the floor of issue 26's design, a
  kernel loop in C that calls Python only to run a cell. Skipped, saying
  so, where it cannot be built.

Each kernel's CPU is its threads' run time (schedstat) read when the
client has the result; minor faults from /proc/PID/stat. IPython's
directory is a temporary one, histories in memory.

usage: /usr/bin/python3 bench/kernel_floor.py [N]   (N kernels of each; prints JSON)"""
import importlib
import importlib.util
import json
import os
import socket
import statistics
import sys
import tempfile
import time

# Every kernel's IPython directory (profile, history) in a directory of the
# run's own, its history in memory (as in Glovebox's sandboxes): nothing
# written in the user's home, no history thread in the parent.
os.environ["IPYTHONDIR"] = tempfile.mkdtemp(prefix="kernel-floor-")
os.makedirs(os.path.join(os.environ["IPYTHONDIR"], "profile_default"))
with open(os.path.join(os.environ["IPYTHONDIR"], "profile_default", "ipython_kernel_config.py"),
          "w") as _f:
    _f.write("c.HistoryManager.hist_file = ':memory:'\n")
for _name in ("numpy", "pandas", "matplotlib.pyplot", "ipykernel.kernelapp",
              "ipykernel.ipkernel", "jupyter_client", "zmq"):
    importlib.import_module(_name)
from IPython.core.application import BaseIPythonApplication  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from ipykernel.ipkernel import IPythonKernel  # noqa: E402
from ipykernel.kernelapp import IPKernelApp  # noqa: E402
from jupyter_client import BlockingKernelClient  # noqa: E402
from jupyter_client.session import Session  # noqa: E402
from traitlets.config import Config  # noqa: E402


def warm(shell):
    """What a first cell builds on first use (the zygote does the same)."""
    shell.display_formatter.format(0)
    shell.transform_cell("0\n")


SHELL = InteractiveShell.instance(config=Config({"HistoryManager": {"hist_file": ":memory:"}}))
warm(SHELL)
InteractiveShell.clear_instance()


def prebuild_app():
    """ipykernel's application, session, kernel and shell, as far as they
    go without sockets, threads or configuration files."""
    app = IPKernelApp.instance()
    app._init_asyncio_patch()
    app.load_config_file = lambda *a, **kw: None
    BaseIPythonApplication.initialize(app, ["-f", "/nonexistent/kernel.json"])
    app.update_config(Config({"HistoryManager": {"hist_file": ":memory:"}}))
    app.init_pdb()
    app.init_blackhole()
    app.kernel = app.kernel_class.instance(parent=app, session=app.session, log=app.log,
                                           profile_dir=app.profile_dir, user_ns=app.user_ns)
    warm(app.kernel.shell)
    return app


APP = prebuild_app()
InteractiveShell.clear_instance()


HERE = os.path.dirname(os.path.abspath(__file__))
# The zygote's C wire, as an extension module of this Python (the zygote
# has it built in).
_WIRE_DIR = os.path.join(os.environ.get("GLOVEBOX_BUILD", os.path.join(HERE, "..", "build")),
                         "kernel-host")
if os.path.exists(os.path.join(_WIRE_DIR, "_glovebox_wire.so")):
    sys.path.insert(0, _WIRE_DIR)
else:
    print(f"no {_WIRE_DIR}/_glovebox_wire.so: the zygote kinds use Session in Python",
          file=sys.stderr)


def zygote_bootstrap():
    """The zygote's own bootstrap, kernel-host/zygote_bootstrap.py, run
    here as the zygote runs it (its shell prebuilt, its run function), with
    its kernels' loop, kernel-host/zygote_kernel.py, told that the run's own
    configuration file is Glovebox's."""
    with open(os.path.join(HERE, "..", "kernel-host", "zygote_bootstrap.py")) as f:
        source = f.read()
    with open(os.path.join(HERE, "..", "kernel-host", "zygote_kernel.py")) as f:
        loop_source = f.read()
    scope = {"__name__": "__glovebox_zygote__",
             "_glovebox_preload": ["numpy", "pandas", "matplotlib.pyplot"],
             "_glovebox_kernel_source": loop_source}
    exec(compile(source, "<zygote bootstrap>", "exec"), scope)
    scope["_glovebox_kernel_loop"].GLOVEBOX_CONFIG = (
        os.path.join(os.environ["IPYTHONDIR"], "profile_default"), "ipython_kernel_config.py",
        "c.HistoryManager.hist_file = ':memory:'\n")
    return scope


# The zygote's own application object, never initialized, as in
# glovebox-zygote (APP above is the prebuilt kind's, initialized).
IPKernelApp.clear_instance()
ZYGOTE = zygote_bootstrap()  # ends with gc.freeze()
ZYGOTE_APP = IPKernelApp.instance()


def free_ports(n):
    out, socks = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        out.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return out


def lean_kernel(info):
    """The loop: kernel_info and execute, the heartbeat echoed."""
    import zmq
    ctx = zmq.Context()
    socks = {}
    for name, kind in (("shell", zmq.ROUTER), ("iopub", zmq.PUB), ("hb", zmq.REP),
                       ("control", zmq.ROUTER), ("stdin", zmq.ROUTER)):
        socks[name] = ctx.socket(kind)
        socks[name].bind(f"tcp://127.0.0.1:{info[name + '_port']}")
    shell, iopub, hb = socks["shell"], socks["iopub"], socks["hb"]
    session = Session(key=info["key"].encode())
    poller = zmq.Poller()
    poller.register(shell, zmq.POLLIN)
    poller.register(hb, zmq.POLLIN)
    count = 0
    while True:
        for sock, _ in poller.poll():
            if sock is hb:
                hb.send(hb.recv())
                continue
            idents, parts = session.feed_identities(shell.recv_multipart())
            msg = session.deserialize(parts)
            session.send(iopub, "status", {"execution_state": "busy"}, parent=msg)
            if msg["header"]["msg_type"] == "execute_request":
                count += 1
                result = SHELL.run_cell(msg["content"]["code"], store_history=True).result
                data, metadata = SHELL.display_formatter.format(result)
                session.send(iopub, "execute_result", {"data": data, "metadata": metadata,
                                                       "execution_count": count}, parent=msg)
                session.send(shell, "execute_reply", {"status": "ok", "execution_count": count},
                             parent=msg, ident=idents)
            else:
                session.send(shell, "kernel_info_reply",
                             {"status": "ok", "protocol_version": "5.3"}, parent=msg, ident=idents)
            session.send(iopub, "status", {"execution_state": "idle"}, parent=msg)


def build_c_loop():
    """bench/kernel_floor_c.c as an extension module of this interpreter,
    imported; None (and why on stderr) where it cannot be built."""
    import subprocess
    import sysconfig
    out = os.path.join(os.environ["IPYTHONDIR"], "_glovebox_floor" +
                       sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = ["cc", "-O2", "-shared", "-fPIC", "-Wno-deprecated-declarations",
           "-I" + sysconfig.get_paths()["include"], os.path.join(HERE, "kernel_floor_c.c"),
           "-o", out, "-lzmq", "-ljansson", "-lcrypto"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        print(f"c-loop skipped: {e}", file=sys.stderr)
        return None
    if done.returncode != 0:
        print(f"c-loop skipped: {done.stderr.strip()}", file=sys.stderr)
        return None
    spec = importlib.util.spec_from_file_location("_glovebox_floor", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def c_loop_kernel(info):
    """The C loop around SHELL: run_cell and the display formatter, as the
    lean kind calls them."""
    def run(code):
        result = SHELL.run_cell(code, store_history=True).result
        if result is None:
            return None
        data, _ = SHELL.display_formatter.format(result)
        return json.dumps(data).encode()

    C_LOOP.serve(info["ip"], tuple(info[c + "_port"] for c in
                                   ("shell", "iopub", "stdin", "control", "hb")),
                 info["key"], run)


def prebuilt_kernel(path):
    """APP's start from its connection file on: what init_kernel would
    pass the kernel object, given to the prebuilt one."""
    import uuid
    from ipykernel.debugger import Debugger
    from zmq.eventloop.zmqstream import ZMQStream
    app, kernel = APP, APP.kernel
    app.session.session = str(uuid.uuid4())
    app.session.pid = os.getpid()
    app.connection_file = path
    app.init_connection_file()
    app.init_poller()
    app.init_sockets()
    app.init_heartbeat()
    app.init_io()
    app.init_signal()
    kernel.shell_stream = ZMQStream(app.shell_socket)
    kernel.control_stream = ZMQStream(app.control_socket, app.control_thread.io_loop)
    kernel.debugpy_stream = ZMQStream(app.debugpy_socket, app.control_thread.io_loop)
    app.control_thread.start()
    kernel.debug_shell_socket = app.debug_shell_socket
    kernel.control_thread = app.control_thread
    kernel.iopub_thread = app.iopub_thread
    kernel.iopub_socket = app.iopub_socket
    kernel.stdin_socket = app.stdin_socket
    if hasattr(kernel, "debugger"):
        kernel.debugger = Debugger(kernel.log, kernel.debugpy_stream, kernel._publish_debug_event,
                                   kernel.debug_shell_socket, kernel.session,
                                   kernel.debug_just_my_code)
    kernel.shell.displayhook.pub_socket = app.iopub_socket
    kernel.shell.display_pub.pub_socket = app.iopub_socket
    kernel.record_ports({name + "_port": port for name, port in app._ports.items()})
    app.displayhook.get_execution_count = lambda: kernel.execution_count
    app.init_path()
    app.init_shell()
    app.init_gui_pylab()
    app.init_extensions()
    app.init_code()
    app.start()


def clear_singletons():
    for cls in (IPKernelApp, IPythonKernel, InteractiveShell):
        cls.clear_instance()


def ipykernel_kernel(path):
    clear_singletons()
    IPKernelApp.launch_instance(argv=["-f", path])


def zygote_kernel(path):
    clear_singletons()
    # As in the zygote, where it is the only one.
    for cls in IPKernelApp._walk_mro():
        cls._instance = ZYGOTE_APP
    ZYGOTE["_glovebox_run"]([sys.executable, "-m", "ipykernel_launcher", "-f", path],
                            dict(os.environ))


def zygote_session_kernel(path):
    """The zygote's kernel with jupyter_client's Session alone (no C wire)."""
    ZYGOTE["_glovebox_kernel_loop"].PREBUILT["wire_tools"] = None
    zygote_kernel(path)


def zygote_application_kernel(path):
    """The zygote's kernel with ipykernel's application (as one with a
    configuration file of its own runs)."""
    ZYGOTE["_glovebox_kernel_loop"] = None
    zygote_kernel(path)


C_LOOP = build_c_loop()  # built and imported before any fork, as a zygote would
KERNELS = {"lean": lambda info, path: lean_kernel(info),
           "prebuilt": lambda info, path: prebuilt_kernel(path),
           "zygote": lambda info, path: zygote_kernel(path),
           "zygote-session": lambda info, path: zygote_session_kernel(path),
           "zygote-application": lambda info, path: zygote_application_kernel(path),
           "ipykernel": lambda info, path: ipykernel_kernel(path)}
if C_LOOP is not None:
    KERNELS["c-loop"] = lambda info, path: c_loop_kernel(info)


def cpu_and_faults(pid):
    ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            ns += int(f.read().split()[0])
    with open(f"/proc/{pid}/stat") as f:
        minflt = int(f.read().rsplit(")", 1)[1].split()[7])
    return ns / 1e9, minflt


def one(kind, tmp):
    p = free_ports(5)
    info = dict(shell_port=p[0], iopub_port=p[1], stdin_port=p[2], control_port=p[3],
                hb_port=p[4], ip="127.0.0.1", key="k" * 32, transport="tcp",
                signature_scheme="hmac-sha256")
    path = os.path.join(tmp, "kernel.json")
    with open(path, "w") as f:
        json.dump(info, f)
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            KERNELS[kind](info, path)
        finally:
            os._exit(0)
    kc = BlockingKernelClient()
    kc.load_connection_info(info)
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        time.sleep(0.1)  # the IOPub subscription joined
        mid = kc.execute("1+1")
        while True:
            m = kc.get_iopub_msg(timeout=60)
            if m["msg_type"] == "execute_result" and m["parent_header"].get("msg_id") == mid:
                break
        return cpu_and_faults(pid)
    finally:
        kc.stop_channels()
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    import shutil
    tmp = tempfile.mkdtemp()
    runs = {kind: [] for kind in KERNELS}
    try:
        for _ in range(n):
            for kind in runs:
                runs[kind].append(one(kind, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(os.environ["IPYTHONDIR"], ignore_errors=True)
    print(json.dumps({kind: {"cpu": statistics.median(r[0] for r in rs),
                             "minflt": statistics.median(r[1] for r in rs),
                             "samples": rs} for kind, rs in runs.items()}), flush=True)
    # Not the prebuilt shells' exit handlers: they would end histories of
    # kernels that ran in other processes.
    os._exit(0)


if __name__ == "__main__":
    main()
