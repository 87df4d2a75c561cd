"""The Jupyter loop of a zygote's IPython kernel (glovebox-zygote).

A kernel forked from the zygote whose command line is the usual
kernelspec's "-m ipykernel_launcher -f FILE", and for which IPython would
read no file but Glovebox's own /etc/ipython configuration, runs ipykernel's
IPythonKernel (its handlers, and with them every reply, output and comm as
ipykernel makes them) around the shell the zygote built, but not ipykernel's
application: no configuration files or command-line parser, no tornado
streams or second event loop, and one thread of its own where the
application starts five (IOPub, control, heartbeat and a watcher per
captured descriptor) and a second ZMQ context. That start was most of a
zygote kernel's CPU.

- The main thread answers the shell socket, one request at a time, as
  ipykernel's dispatch does: busy, the handler, the streams flushed, idle.
  Each request is a task of the kernel's asyncio loop, as in ipykernel,
  whose first step the thread takes outside the loop's steps (the loop
  its running loop meanwhile); a request that awaits (a cell's top-level
  await) is then run by the loop. Between requests the loop runs what
  cells left on it (tasks, timers, another thread's wake-up), and only
  then. A failed cell with stop_on_error aborts the execute requests that
  have arrived by the time its reply is sent, and no later ones. input()
  asks on the stdin socket, from this thread, as in ipykernel.
- The I/O thread answers the control socket (shutdown, interrupt,
  kernel_info... while a cell runs, as ipykernel's control thread does) and
  the heartbeat, reads descriptors 1 and 2 (a pipe each: what a subprocess
  or a C library writes there is forwarded, as ipykernel forwards it; what
  has reached them when a request ends is published before its idle
  status, which ipykernel does not promise), and flushes stdout and stderr
  0.2 s after their first unsent write. Control requests are answered
  without an event loop: one whose handler waits on a loop is logged and
  not answered.
- Everything published on IOPub goes through one lock, so the two threads
  never use the socket at once. A forked child's writes to sys.stdout and
  sys.stderr go to descriptors 1 and 2, which the parent forwards.
- Messages are sent and read by the zygote's C wire (_glovebox_wire,
  kernel-host/zygote_wire.c) where it can: jupyter_client's Session
  (WireSession) hands it every send of a message type on one of the
  kernel's sockets and every message read; the same bytes, but for the
  dates of a message read, which stay the strings they came as.

Not here, as ipykernel has them: the debugger (debug_request is answered
with an error), GUI event loops (%gui) and a forked child's display()
(dropped: only its streams reach the client). Any other kernel runs
ipykernel's application as before.
"""
import asyncio
import atexit
import codecs
import faulthandler
import functools
import hashlib
import hmac
import importlib.machinery
import importlib.util
import inspect
import io
import json
import json.encoder
import json.scanner
import linecache
import logging
import os
import pdb
import selectors
import signal
import sys
import threading
import time
import traceback
import types
import uuid
from datetime import datetime

import zmq
from IPython.core import debugger, formatters
from IPython.core.application import ENV_CONFIG_DIRS, SYSTEM_CONFIG_DIRS
from IPython.core.profiledir import ProfileDir
from IPython.paths import get_ipython_dir
from IPython.utils.path import ensure_dir_exists
from ipykernel import ipkernel, kernelbase
from ipykernel.compiler import XCachingCompiler
from ipykernel.displayhook import ZMQDisplayHook
from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp
from ipykernel.zmqshell import ZMQInteractiveShell
from jupyter_client import jsonutil
from jupyter_client.adapter import adapt
from jupyter_client.session import DONE, Session, extract_header, json_packer, json_unpacker
from tornado.ioloop import IOLoop
from tornado.platform.asyncio import AsyncIOMainLoop
from traitlets import observe
from traitlets.config import Config

try:
    # Built into glovebox-zygote; elsewhere (tests, bench) an extension
    # module, where built.
    import _glovebox_wire
except ImportError:
    _glovebox_wire = None
try:
    # The zygote's own module (kernel-host/zygote_main.c); not elsewhere.
    import _glovebox_zygote
except ImportError:
    _glovebox_zygote = None

# All imported here, as the zygote loads this file, rather than in the
# functions a kernel runs: an import statement there touches the module and
# its spec, and so copies their pages of the zygote.

# The only configuration file a kernel this loop takes may have: Glovebox's own
# (kernel-host/rootfs.c writes it into every sandbox).
GLOVEBOX_CONFIG = ("/etc/ipython", "ipython_kernel_config.py",
                   "c.HistoryManager.hist_file = ':memory:'\n")
# What that file configures.
GLOVEBOX_SETTINGS = {"HistoryManager": {"hist_file": ":memory:"}}
CONFIG_NAMES = ("ipython_config.py", "ipython_config.json", "ipython_kernel_config.py",
                "ipython_kernel_config.json")
# Each channel's socket type, in the order a kernel makes them.
SOCKET_KINDS = (("shell", zmq.ROUTER), ("iopub", zmq.XPUB), ("stdin", zmq.ROUTER),
                ("control", zmq.ROUTER), ("hb", zmq.ROUTER))
CHANNELS = tuple(name for name, _ in SOCKET_KINDS)
FLUSH_INTERVAL = 0.2
LINGER_MS = 1000
ACCEPTS_REMEMBERED = 64  # code objects (remembered_accepts_cell_id)
PIPE_READS = 16  # of 64 KiB, per pipe and round
UTF8_DECODER = codecs.getincrementaldecoder("utf-8")
LOG_FORMAT = "[glovebox kernel] %(levelname)s %(message)s"


# What every kernel of the zygote would build alike, built once in it
# (prebuild): ipykernel's application object and its logger, the profile
# directory object of the sandbox's home, a Session, the loop's logger and
# its handler, the display hook, where ipykernel_launcher is, and
# ipykernel's kernel object around the zygote's shell, adopted by it.
PREBUILT = {}


def prebuild(shell, adopt):
    """Run in the zygote, before any fork, once its shell is built (None if
    that failed). The shell holds the application's configuration object
    itself, and the storemagic extension is loaded into it (ipykernel's
    application loads it into every kernel's shell): a kernel writes its
    configuration into that object in place, so its shell need not load
    it again. The prebuilt kernel adopts the shell here (adopt: the
    bootstrap's), with Glovebox's configuration, the only one a kernel of
    this loop has, merged in as each kernel merges it: a fresh namespace,
    history and compiler, copied by each kernel's fork; the kernel then
    adopts it for its own process only (run's adopt_here).

    So is what ipykernel's application does to the process, the same for
    every kernel: the interruptible pdb, a crash hook on the real stderr,
    faulthandler writing there; and jupyter_client reads dates faster."""
    app = IPKernelApp.instance()
    app.log.debug("prebuilt")
    PREBUILT["profile_dir"] = ProfileDir.create_profile_dir(
        os.path.join(get_ipython_dir(), "profile_default"))
    PREBUILT["session"] = WireSession()
    PREBUILT["wire_tools"] = wire_tools()
    # getLogger of a new name walks every logger there is; setLevel empties
    # every logger's cache. Each kernel gives the handler its stream.
    log = PREBUILT["log"] = logging.getLogger("glovebox.kernel")
    log.setLevel(logging.WARNING)
    log.propagate = False
    handler = PREBUILT["log_handler"] = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    log.addHandler(handler)
    PREBUILT["displayhook"] = ZMQDisplayHook(PREBUILT["session"], None)
    PREBUILT["launcher"] = importlib.util.find_spec("ipykernel_launcher").origin
    PREBUILT["path"] = list(sys.path)
    # One-time set-up of the libraries every kernel's start uses, done here
    # rather than in every kernel: libzmq's (libsodium's random source among
    # it: a context without sockets starts no thread) and OpenSSL's HMAC
    # (Session's, keyed per kernel).
    zmq.Context().term()
    hmac.new(b"glovebox", digestmod=hashlib.sha256)
    PREBUILT["loop"] = prebuilt_loop()
    if hasattr(debugger, "InterruptiblePdb"):
        debugger.Pdb = debugger.InterruptiblePdb
        pdb.Pdb = debugger.Pdb
        pdb.set_trace = debugger.set_trace
    sys.excepthook = excepthook
    patch_faulthandler()
    jsonutil.parse_date = parse_date
    kernelbase._accepts_cell_id = ipkernel._accepts_cell_id = \
        remembered_accepts_cell_id(kernelbase._accepts_cell_id)
    direct_format_calls(formatters)
    if shell is not None:
        shell.config = app.config
        shell.extension_manager.load_extension("storemagic")
        kernel = prebuild_kernel(app, shell)
        app.config.merge(Config(GLOVEBOX_SETTINGS))
        adopt(shell, parent=kernel, kernel=kernel, profile_dir=PREBUILT["profile_dir"],
              compiler_class=XCachingCompiler)
        # Its process's part undone: the zygote's own __main__ and atexit.
        shell.restore_sys_module_state()
        atexit.unregister(shell.atexit_operations)
        PREBUILT["kernel"] = kernel
        # ipykernel waits 0.5 ms before every execute_reply, for its IOPub
        # thread's flush; the loop's streams flush as they are told to.
        kernel._execute_sleep = 0
        # A kernel_info_reply's content as ipykernel's handler builds it:
        # the same in every kernel of the loop until it runs something
        # (KernelLoop._kernel_info_request).
        content = {"status": "ok"}
        content.update(kernel.kernel_info)
        PREBUILT["kernel_info"] = content


def prebuild_kernel(app, shell):
    """ipykernel's IPythonKernel, built as its application builds it but
    without sockets, around the zygote's shell, which it does not adopt
    here (prebuild has it adopted); not the singleton, so a kernel that
    runs ipykernel's application builds its own."""
    def instance(cls, *args, **kw):
        return shell

    ZMQInteractiveShell.instance = classmethod(instance)
    try:
        kernel = IPythonKernel(parent=app, session=PREBUILT["session"], log=PREBUILT["log"],
                               profile_dir=PREBUILT["profile_dir"])
    finally:
        del ZMQInteractiveShell.instance
    # Listed in the shell by each kernel of the loop (KernelLoop._make_kernel),
    # not in the zygote: a kernel of ipykernel's application lists its own.
    shell.configurables.remove(kernel.comm_manager)
    return kernel


def prebuilt_loop():
    """The asyncio loop a kernel of the loop runs, and tornado's view of it
    (the AsyncIOMainLoop that IOLoop.current() makes for it), made here
    once: making them cost each kernel about 0.5 ms and 150 copied pages.
    Not this thread's current loop: a kernel of ipykernel's application
    makes its own, as before. Each kernel gives it descriptors of its own
    (own_descriptors)."""
    loop = asyncio.new_event_loop()
    get_event_loop = asyncio.get_event_loop
    asyncio.get_event_loop = lambda: loop
    try:
        AsyncIOMainLoop(make_current=False)
    finally:
        asyncio.get_event_loop = get_event_loop
    return loop


def own_descriptors(loop):
    """The zygote's loop given an epoll and a self-pipe of this process,
    made as a new loop makes them (BaseSelectorEventLoop's __init__ and
    _make_self_pipe). The zygote's were closed as the kernel was confined
    and their numbers may name other files by now: the objects holding
    them must not close them, so the sockets are detached and the selector
    is held for good."""
    PREBUILT["zygote_selector"] = loop._selector
    loop._ssock.detach()
    loop._csock.detach()
    loop._internal_fds -= 1
    loop._selector = selectors.DefaultSelector()
    loop._make_self_pipe()


def wire_tools():
    """What every kernel's C wire uses (zygote_wire.c's enum tool), or None
    where there is no wire: json's C encoder and scanner, and for what they
    refuse, jupyter_client's own functions."""
    if _glovebox_wire is None or None in (json.encoder.c_make_encoder,
                                          json.encoder.c_encode_basestring,
                                          json.scanner.c_make_scanner):
        return None
    # The HMAC every kernel's wire copies (OpenSSL's lookups done here).
    _glovebox_wire.prepare()
    return (json.encoder.c_make_encoder, jsonutil.json_default,
            json.encoder.c_encode_basestring, json.scanner.c_make_scanner(json.JSONDecoder()),
            json_packer, adapt, DONE, zmq.ZMQError)


class WireSession(Session):
    """jupyter_client's Session whose messages the C wire sends and reads,
    once a kernel has connected it (connect_wire): a send on one of the
    kernel's sockets of a message type, or of a message dict built
    beforehand, without buffers or a header of the caller's, and every
    message read from a list of bytes. Anything else, and everything
    before or without a wire, is Session's."""

    wire = None
    streams = None

    def connect_wire(self, streams):
        """The wire of this kernel's key and identity; streams: (stream,
        its libzmq handle, whether its sends take its lock, LockedSocket's:
        the lock is the stream's own, replaced in a forked child). Left
        unconnected where the Session is configured beyond what the wire
        does (another scheme or packer, metadata, adaptation, debug)."""
        tools = PREBUILT.get("wire_tools")
        if tools is None or self.signature_scheme != "hmac-sha256" or \
                self.pack is not json_packer or self.unpack is not json_unpacker or \
                self.metadata or self.adapt_version or self.debug:
            return
        self.wire = _glovebox_wire.Wire(self.key, self.session, self.username,
                                        self.digest_history, self.digest_history_size, tools)
        self.streams = {id(stream): (handle, locked) for stream, handle, locked in streams}

    @observe("key")
    def _wire_key_changed(self, change):
        # A key set on a running kernel (the gateway re-keys a restored
        # copy): the wire's too, its count of ids going on.
        if self.wire is not None:
            self.wire.rekey(change["new"])

    @property
    def msg_id(self):
        # One count for both ways of sending.
        if self.wire is not None:
            return self.wire.next_id()
        return Session.msg_id.fget(self)

    def send(self, stream, msg_or_type, content=None, parent=None, ident=None, buffers=None,
             track=False, header=None, metadata=None):
        to = None if self.wire is None else self.streams.get(id(stream))
        if isinstance(msg_or_type, str):
            built = False
        elif type(msg_or_type) is dict and not msg_or_type.get("buffers"):
            # One built beforehand (a display's, an execute_result), whose
            # parts Session packs as they are.
            built = True
        else:
            to = None
        if to is None or buffers or header is not None:
            return Session.send(self, stream, msg_or_type, content, parent, ident, buffers,
                                track, header, metadata)
        handle, locked = to
        if not locked:
            # A closed socket's handle is freed: pyzmq would refuse it too.
            if stream.closed:
                raise zmq.ZMQError(zmq.ENOTSOCK)
            if built:
                return self.wire.send_message(handle, msg_or_type, ident)
            return self.wire.send(handle, msg_or_type, content, parent, ident, metadata)
        with stream.lock:
            # A closed IOPub builds the message and drops it, as LockedSocket.
            handle = 0 if stream.closed else handle
            if built:
                return self.wire.send_message(handle, msg_or_type, ident)
            return self.wire.send(handle, msg_or_type, content, parent, ident, metadata)

    def close_wire(self):
        """Nothing more is sent through the wire: the sockets are closing,
        and another thread may still send (its message is dropped)."""
        if self.wire is not None:
            self.wire.close()

    def deserialize(self, msg_list, content=True, copy=True):
        if self.wire is None or not content or not copy:
            return Session.deserialize(self, msg_list, content, copy)
        return self.wire.deserialize(msg_list)


def excepthook(etype, value, tb):
    traceback.print_exception(etype, value, tb, file=sys.__stderr__)


def patch_faulthandler():
    """faulthandler writing to the process's real stderr unless told
    otherwise, as in ipykernel."""
    enable, register = faulthandler.enable, faulthandler.register

    def enable_here(file=sys.__stderr__, all_threads=True, **kw):
        return enable(file=file, all_threads=all_threads, **kw)

    def register_here(signum, file=sys.__stderr__, all_threads=True, chain=False, **kw):
        return register(signum, file=file, all_threads=all_threads, chain=chain, **kw)

    faulthandler.enable, faulthandler.register = enable_here, register_here


def parse_date(s):
    """jupyter_client's parse_date (every string of a message's header and
    parent header that looks like a date becomes a datetime), reading it
    with the standard library's parser first: dateutil's, which it calls,
    cost a kernel's first request 1.5 ms and some 300 copied pages of the
    zygote. The same instants and offsets; what fromisoformat refuses goes
    to dateutil as before (and fails there as before)."""
    if s is None:
        return s
    if jsonutil.ISO8601_PAT.match(s):
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            dt = jsonutil._dateutil_parse(s)
        return jsonutil._ensure_tzinfo(dt)
    return s


def remembered_accepts_cell_id(ask):
    """ipykernel's _accepts_cell_id (ask), which its execute path asks of
    do_execute and of run_cell_async in every execute request: two
    inspect.signature calls, about 0.25 ms in a kernel's first. Its answer
    depends only on the parameters' names and kinds, which for a plain
    function (or a method of one) are its code object's: remembered per
    code object, at most ACCEPTS_REMEMBERED of them. A callable whose
    signature could come from elsewhere (a __signature__, __wrapped__, a
    partial, a class) is asked each time, and an error is not remembered."""
    known = {}

    def accepts(meth):
        func = getattr(meth, "__func__", meth)
        if type(func) is not types.FunctionType or \
                "__signature__" in func.__dict__ or "__wrapped__" in func.__dict__:
            return ask(meth)
        code = func.__code__
        answer = known.get(code)
        if answer is None:
            answer = bool(ask(meth))
            if len(known) >= ACCEPTS_REMEMBERED:
                known.clear()
            known[code] = answer
        return answer

    return accepts


def direct_format_calls(formatters):
    """IPython's formatters' __call__ methods, made by the decorator package
    around catch_format_error, bind their arguments to the method's
    signature on every call (inspect's Signature.bind: about 7 µs warm,
    twelve formatters a result, more in a kernel's first). Each is replaced
    by one that passes a call naming every parameter (by position, or the
    rest by name) to catch_format_error as the wrapper would after
    binding, and any other call to the wrapper itself. The replaced are
    those whose wrapper is the decorator package's, around
    catch_format_error, with positional-or-keyword parameters only."""
    caller = getattr(formatters.catch_format_error, "__wrapped__", None)
    if caller is None:
        return
    for cls in list(vars(formatters).values()):
        wrapper = cls.__dict__.get("__call__") if isinstance(cls, type) else None
        if getattr(wrapper, "__code__", None) is None or \
                wrapper.__code__.co_name != "fun" or wrapper.__closure__ is None:
            continue
        cells = dict(zip(wrapper.__code__.co_freevars,
                         (c.cell_contents for c in wrapper.__closure__)))
        params = list(getattr(cells.get("sig"), "parameters", {}).values())
        if cells.get("caller") is not caller or cells.get("extras") != () or \
                cells.get("kwsyntax") is not False or cells.get("func") is not wrapper.__wrapped__ or \
                not all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params):
            continue
        setattr(cls, "__call__", direct_call(wrapper, caller, [p.name for p in params]))


def direct_call(wrapper, caller, names):
    """A decorator-package wrapper's fast path (direct_format_calls)."""
    method, n = wrapper.__wrapped__, len(names)

    @functools.wraps(wrapper)
    def call(*args, **kw):
        if kw:
            rest = names[len(args):]
            if len(args) + len(kw) != n or not all(name in kw for name in rest):
                return wrapper(*args, **kw)
            args += tuple(kw[name] for name in rest)
        elif len(args) != n:
            return wrapper(*args, **kw)
        return caller(method, *args)

    return call


def plain_configuration(path, env):
    """The kernel's configuration and its connection, when nothing in its
    environment asks for more than the loop here does; None when something
    does (a configuration or startup file, PYTHONSTARTUP, a port left for
    the kernel to pick): such a kernel runs ipykernel's application."""
    if env.get("PYTHONSTARTUP"):
        return None
    try:
        with open(path) as f:
            info = json.load(f)
        if info.get("transport", "tcp") not in ("tcp", "ipc") or \
                not all(isinstance(info.get(c + "_port"), int) and info[c + "_port"] > 0
                        for c in CHANNELS) or not isinstance(info.get("key", ""), str):
            return None
    except (OSError, ValueError):
        return None
    config = Config()
    ipython_dir = get_ipython_dir()
    profile = os.path.join(ipython_dir, "profile_default")
    # Each directory listed once (a kernel's start opened 16 names that,
    # but for one, are not there).
    for d in [profile] + list(ENV_CONFIG_DIRS) + list(SYSTEM_CONFIG_DIRS):
        try:
            present = set(os.listdir(d))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return None
        for name in CONFIG_NAMES:
            if name not in present:
                continue
            try:
                with open(os.path.join(d, name)) as f:
                    text = f.read()
            except (FileNotFoundError, NotADirectoryError):
                continue
            except (OSError, ValueError):
                return None
            if (d, name, text) != GLOVEBOX_CONFIG:
                return None
            config.merge(Config(GLOVEBOX_SETTINGS))
        if "startup" not in present:
            continue
        try:
            names = os.listdir(os.path.join(d, "startup"))
        except (FileNotFoundError, NotADirectoryError):
            names = ()
        except OSError:
            return None
        if any(n.endswith((".py", ".ipy")) for n in names):
            return None
    try:
        profile_dir = PREBUILT.get("profile_dir")
        if profile_dir is not None and profile_dir.location == profile:
            # The zygote's, for the same place: its directories made here.
            ensure_dir_exists(profile)
            profile_dir.check_dirs()
        else:
            profile_dir = ProfileDir.create_profile_dir(profile, config)
    except Exception:
        return None
    return info, config, profile_dir, ipython_dir


def new_sockets():
    """A ZeroMQ context and a kernel's five sockets, unbound: (context,
    {channel: socket})."""
    context = zmq.Context()
    sockets = {}
    try:
        for name, kind in SOCKET_KINDS:
            sock = sockets[name] = context.socket(kind)
            sock.linger = LINGER_MS
            if kind == zmq.ROUTER:
                sock.router_handover = 1
            elif kind == zmq.XPUB:
                # Every subscription read, each answered (_welcome).
                sock.xpub_verbose = 1
    except BaseException:
        context.destroy(0)
        raise
    return context, sockets


def sockets_ahead():
    """In a process forked ahead into a sandbox, once it is confined
    (zygote_main.c's ahead_child: libzmq's threads, made here, are then as
    confined as the process): the context and sockets new_sockets makes,
    the first of which starts libzmq's two threads, out of the request's
    path. The request's connection binds them (KernelLoop); a kernel that
    runs ipykernel's application instead closes them (run)."""
    PREBUILT["sockets"] = new_sockets()


def drop_sockets_ahead():
    made = PREBUILT.pop("sockets", None)
    if made is not None:
        made[0].destroy(0)


def address(info, channel):
    """Where a channel's socket binds, as jupyter_client names it."""
    ip, port = info.get("ip", "127.0.0.1"), info[channel + "_port"]
    if info.get("transport", "tcp") == "ipc":
        return f"ipc://{ip}-{port}"
    return f"tcp://{ip}:{port}"


def finish(result):
    """A control handler's result; a coroutine is run to its end here, since
    none of ipykernel's control handlers waits on anything (without a
    running loop, asyncio refuses one that would)."""
    if not inspect.isawaitable(result):
        return result
    try:
        result.send(None)
    except StopIteration as e:
        return e.value
    result.close()
    raise RuntimeError("the handler waited on an event loop, which this kernel does not run")


class LockedSocket:
    """The IOPub socket, used by both threads one at a time. In a forked
    child (whose copy of the socket belongs to the parent's context) every
    message is dropped."""

    def __init__(self, socket, lock):
        self.socket, self.lock, self.pid = socket, lock, os.getpid()
        self.closed = False

    def send_multipart(self, parts, *args, **kw):
        if self.closed or os.getpid() != self.pid:
            return None
        with self.lock:
            return self.socket.send_multipart(parts, *args, **kw)


class OutStream(io.TextIOBase):
    """sys.stdout or sys.stderr: text published on IOPub as "stream"
    messages, at the latest FLUSH_INTERVAL after the first unsent write."""

    encoding = "UTF-8"

    def __init__(self, kernel_loop, name, fd, original):
        self._loop, self.name, self._fd, self._original = kernel_loop, name, fd, original
        self.topic = b"stream." + name.encode()
        self.parent_header = {}
        self._pid = os.getpid()
        self._after_fork()

    def _after_fork(self):
        self._lock = threading.Lock()
        self._parts = []
        self.due = None

    def fileno(self):
        # What subprocess and faulthandler ask for: the descriptor the
        # kernel was started with, as ipykernel answers.
        return self._original

    def isatty(self):
        return False

    def writable(self):
        return True

    def set_parent(self, parent):
        self.parent_header = extract_header(parent)

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text)}")
        if os.getpid() != self._pid:
            # A forked child: its descriptor leads to the parent's pipe.
            os.write(self._fd, text.encode("utf-8", "replace"))
            return len(text)
        with self._lock:
            self._parts.append(text)
            first = self.due is None
            if first:
                self.due = time.monotonic() + FLUSH_INTERVAL
        if first:
            self._loop.wake_io()
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if os.getpid() != self._pid:
            return
        # Taken and sent under the IOPub lock, so that two threads flushing
        # at once cannot reorder the text.
        with self._loop.iopub_lock:
            with self._lock:
                text = "".join(self._parts)
                self._parts = []
                self.due = None
            if text:
                self._loop.session.send(self._loop.iopub, "stream",
                                        {"name": self.name, "text": text},
                                        parent=self.parent_header, ident=self.topic)


class KernelLoop:
    """One kernel: its sockets, its kernel object and its two threads."""

    # Whether the loop's start reports its pages (zygote_pages.h).
    report_at_start = True
    # Where a channel's socket binds.
    address = staticmethod(address)

    def __init__(self, path, info, config, profile_dir, ipython_dir, shell, adopt_here):
        app = self._application(path, info, config, profile_dir)
        self.stopping = False
        self._arrived = []
        self.kernel_info = PREBUILT.get("kernel_info")
        self.iopub_lock = threading.RLock()
        self.pipe_lock = threading.Lock()
        self.log = PREBUILT["log"]
        # Made while the process waited (sockets_ahead), or here.
        self.context, self.sockets = PREBUILT.pop("sockets", None) or new_sockets()
        for name in CHANNELS:
            self.sockets[name].bind(self.address(info, name))
        self.iopub = LockedSocket(self.sockets["iopub"], self.iopub_lock)
        self.session = self._session(info)
        # The IOPub's sends under its lock, as LockedSocket's; each other
        # socket is used by one thread.
        self.session.connect_wire(
            [(self.iopub, self.sockets["iopub"].underlying, True)] +
            [(self.sockets[name], self.sockets[name].underlying, False)
             for name in ("shell", "stdin", "control")])
        self._wake_io_r, self._wake_io_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake_main_r, self._wake_main_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._capture_output()
        try:
            self._make_kernel(app, info, profile_dir, ipython_dir, shell, adopt_here)
        except BaseException:
            # Its traceback where a kernel that fails to start says why.
            self._release_output()
            raise

    def _make_kernel(self, app, info, profile_dir, ipython_dir, shell, adopt_here):
        # The zygote's, adopted there (prebuild), given what its __init__
        # would have been given here, a kernel identity of its own, and the
        # shell for this process.
        kernel = self.kernel = PREBUILT.pop("kernel")
        kernel.set_trait("ident", str(uuid.uuid4()))
        kernel.session, kernel.log = self.session, self.log
        kernel.iopub_socket, kernel.stdin_socket = self.iopub, self.sockets["stdin"]
        kernel.profile_dir = profile_dir
        # The IPython directory plain_configuration found (IPython's
        # lookup, about 0.25 ms in a kernel's start, once).
        adopt_here(shell, profile_dir, ipython_dir)
        for c in ZMQInteractiveShell._walk_mro():
            c._instance = shell
        shell.displayhook.session = shell.display_pub.session = self.session
        shell.displayhook.pub_socket = shell.display_pub.pub_socket = self.iopub
        shell.displayhook.topic = kernel._topic("execute_result")
        shell.configurables.append(kernel.comm_manager)
        # The singleton, as ipykernel's application makes it: what
        # Kernel.instance() finds (ipykernel.comm.Comm asks it).
        for c in IPythonKernel._walk_mro():
            c._instance = kernel
        kernel.record_ports({name + "_port": info[name + "_port"] for name in CHANNELS})
        app.session, app.context, app.kernel, app.shell = self.session, self.context, kernel, shell
        for name in ("shell", "stdin", "control"):
            setattr(app, name + "_socket", self.sockets[name])
        app.iopub_socket = self.iopub
        shell.configurables.append(app)
        # Replaced on this kernel alone: the ones that use ipykernel's loops.
        kernel._abort_queues = self._abort_queues
        # In the kernel's own tables, which the loop reads for every
        # request: code that wraps a handler there is obeyed, as in ipykernel.
        kernel.shell_handlers["shutdown_request"] = self._shutdown_request
        kernel.control_handlers["shutdown_request"] = self._shutdown_request
        kernel.control_handlers["debug_request"] = self._debug_request
        self._ipykernel_kernel_info = kernel.shell_handlers["kernel_info_request"]
        kernel.shell_handlers["kernel_info_request"] = self._kernel_info_request
        kernel.control_handlers["kernel_info_request"] = self._kernel_info_request
        self._start_shell(kernel.shell)

    # ---- start ----------------------------------------------------------

    @staticmethod
    def _session(info):
        """The zygote's Session, given this kernel's identity and key."""
        session = PREBUILT.pop("session")
        session.username = os.environ.get("USER", "username")
        session.session = str(uuid.uuid4())
        session.pid = os.getpid()
        session.signature_scheme = info.get("signature_scheme", "hmac-sha256")
        session.key = info.get("key", "").encode()
        return session

    @staticmethod
    def _application(path, info, config, profile_dir):
        """ipykernel's application object, holding what its start would
        have set (the command line, the configuration, the connection), for
        the code that asks IPKernelApp.instance() where its kernel is; it
        does not run."""
        app = IPKernelApp.instance()
        app.argv, app.extra_args = ["-f", path], []
        app.cli_config = Config({"IPKernelApp": {"connection_file": path}})
        # In place (prebuild): the object the zygote's shell holds, so that
        # its adoption (shell.config = kernel.config) sees no change.
        app.config.merge(config)
        app.config.merge(app.cli_config)
        app.connection_file = path
        app.profile_dir = profile_dir
        app.transport, app.ip, app.key = info.get("transport", "tcp"), info.get("ip", "127.0.0.1"), \
            info.get("key", "").encode()
        for name in CHANNELS:
            setattr(app, name + "_port", info[name + "_port"])
        return app

    def _capture_output(self):
        """Descriptors 1 and 2 become pipes the I/O thread reads, and
        sys.stdout and sys.stderr streams of this kernel."""
        self.pipes = {}
        self.streams = {}
        for fd, name in ((1, "stdout"), (2, "stderr")):
            old = getattr(sys, name)
            if old is not None:
                try:
                    old.flush()
                except Exception:
                    pass
            original = os.dup(fd)
            os.set_inheritable(original, False)
            r, w = os.pipe2(os.O_CLOEXEC)
            os.set_blocking(r, False)
            os.dup2(w, fd)
            os.close(w)
            self.streams[name] = OutStream(self, name, fd, original)
            self.pipes[r] = (self.streams[name], original, UTF8_DECODER("replace"))
            setattr(sys, name, self.streams[name])
        # The zygote's handler (prebuild), onto the kernel's own stderr.
        PREBUILT["log_handler"].setStream(io.TextIOWrapper(
            io.FileIO(os.dup(self.streams["stderr"].fileno()), "w"), encoding="utf-8",
            errors="backslashreplace", write_through=True))

    def _release_output(self):
        """Descriptors 1 and 2, sys.stdout and sys.stderr as they were."""
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(self.streams[name].fileno(), fd)
            setattr(sys, name, getattr(sys, "__" + name + "__"))

    def _start_shell(self, shell):
        """What ipykernel's application does to the shell and the process
        before its loop, per kernel: SIGINT ignored between requests, ''
        on sys.path, the display hook, the storemagic extension, the names
        defined so far hidden from %who. (What it does alike in every
        kernel, the interruptible pdb, the crash hook on the real stderr
        and faulthandler's file, the zygote has done: prebuild.)"""
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if "" not in sys.path:
            at = next((i for i, p in enumerate(sys.path)
                       if os.path.basename(p) in ("site-packages", "dist-packages")), 0)
            sys.path.insert(at, "")
        os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        kernel = self.kernel
        displayhook = PREBUILT.pop("displayhook")
        displayhook.session, displayhook.pub_socket = self.session, self.iopub
        displayhook.get_execution_count = lambda: kernel.execution_count
        sys.displayhook = displayhook
        if not storemagic_loaded(shell.extension_manager.loaded):
            shell.extension_manager.load_extension("storemagic")
        shell.user_ns_hidden.update(shell.user_ns)
        shell._sys_modules_keys = set(sys.modules)
        shell.exit_now = False

    def _after_fork_in_child(self):
        self.iopub_lock = self.iopub.lock = threading.RLock()
        self.pipe_lock = threading.Lock()
        for stream in self.streams.values():
            stream._after_fork()

    # ---- the loops ------------------------------------------------------

    def run(self):
        """Answers until a shutdown request or exit(); then closes the
        sockets, sending what is queued (at most LINGER_MS)."""
        os.register_at_fork(after_in_child=self._after_fork_in_child)
        io_thread = threading.Thread(target=self._io_loop, name="glovebox-kernel-io",
                                     daemon=True)
        io_thread.start()
        loop = PREBUILT.pop("loop", None)
        if loop is None:
            loop = asyncio.new_event_loop()
        else:
            own_descriptors(loop)
        asyncio.set_event_loop(loop)
        # tornado's view of it, which ipykernel's kernel uses to cancel a
        # cell's task on SIGINT and to stop after exit().
        self.kernel.io_loop = IOLoop.current()
        self.kernel._publish_status("starting", "shell")
        # Started, before any request is read: the pages this start wrote,
        # told the zygote once (kernel-host/zygote_pages.h). No code of the
        # user's has run, and the report, shared with the zygote, is gone
        # before the gateway calls the kernel started, so no pause finds it.
        if _glovebox_zygote is not None and self.report_at_start:
            _glovebox_zygote.report_pages()
        try:
            self._serve(loop)
        except RuntimeError:
            # Stopped (exit() stops the loop, as in ipykernel).
            if not self.kernel.shell.exit_now:
                raise
        finally:
            self.stopping = True
            self.wake_io()
            io_thread.join(5)
            for stream in self.streams.values():
                stream.flush()
            with self.iopub_lock:
                self.iopub.closed = True
            self.session.close_wire()
            self.context.destroy(LINGER_MS)

    def _serve(self, loop):
        """The shell socket's requests, one at a time, each a task of the
        kernel's asyncio loop run outside the loop's steps (_run_request).
        Between requests the loop runs what cells left on it (tasks,
        timers, descriptors, another thread's wake-up) until a request
        arrives; while it has nothing, the kernel waits on its sockets
        without it. Since no request runs inside a step of the loop,
        nest_asyncio's asyncio.run() in a cell cannot take that step's
        callbacks from under it (which ended the kernel)."""
        shell = self.sockets["shell"]
        shell_fd = shell.getsockopt(zmq.FD)
        with self.iopub_lock:
            iopub = self.sockets["iopub"].getsockopt(zmq.FD)
        # The IOPub's descriptor, never the socket, which the other thread
        # uses (_welcome); the loop's self-pipe, written by a wake-up.
        woken = loop._ssock.fileno()
        poller = zmq.Poller()
        poller.register(shell, zmq.POLLIN)
        for fd in (iopub, self._wake_main_r, woken):
            poller.register(fd, zmq.POLLIN)
        # A signal wakes the loop too: SIGINT during an awaiting cell
        # schedules that cell's cancellation with call_soon (ipykernel's
        # _cancel_on_sigint), which a loop asleep in epoll would not see
        # before its timeout.
        signal.set_wakeup_fd(self._wake_main_w, warn_on_full_buffer=False)
        while not self.stopping:
            try:
                frames = shell.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                self._welcome()
                # ZeroMQ's descriptor says only that the socket's events
                # may have changed (the loop's readers watch it): ZMQ_EVENTS,
                # read before every wait, says whether a message is there.
                if shell.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    continue
                if has_work(loop):
                    self._run_loop(loop, shell_fd, iopub)
                    continue
                ready = dict(poller.poll())
                if woken in ready:
                    # For the loop to read: a thread's call_soon_threadsafe,
                    # a signal of the loop's add_signal_handler.
                    self._run_loop(loop, shell_fd, iopub)
                elif self._wake_main_r in ready:
                    self._drain(self._wake_main_r)
                continue
            self._run_request(loop, shell, frames)

    def _run_request(self, loop, shell, frames):
        """One request, a task of the loop as in ipykernel (a cell's current
        task), its first step taken here rather than in a step of the loop,
        the loop this thread's running loop meanwhile (a cell sees it
        running, can schedule on it, cannot run it or asyncio.run(), as in
        ipykernel): all of the request unless it awaits; then the loop runs
        the rest."""
        ready = len(loop._ready)
        task = loop.create_task(self._request(shell, frames))
        # (Unless a task factory of a cell's scheduled otherwise: then the
        # loop takes every step.)
        if len(loop._ready) == ready + 1:
            first = loop._ready.pop()
            hooks = as_if_running(loop)
            try:
                first._run()
            finally:
                no_longer_running(loop, hooks)
        if not task.done():
            self._run_loop(loop, until=task)

    async def _request(self, shell, frames):
        try:
            await self._dispatch_shell(shell, frames)
            if self._arrived:
                await self._abort_arrived(shell)
        except Exception:
            # A message ipykernel's dispatch could not take either
            # (a header without a type...): logged, as there.
            self.log.error("a shell request", exc_info=True)
        if self.kernel.shell.exit_now:
            self.stopping = True

    def _run_loop(self, loop, *fds, until=None):
        """The asyncio loop run until the future until is done, or
        (without one) until one of fds or the kernel's wake-up pipe wakes
        it. The wake-up pipe is watched either way: it is how a signal
        taken by another thread reaches this one."""
        stop = loop.create_future() if until is None else None

        def woken():
            self._drain(self._wake_main_r)
            if stop is not None:
                awaken(stop)

        for fd in fds:
            loop.add_reader(fd, awaken, stop)
        loop.add_reader(self._wake_main_r, woken)
        try:
            loop.run_until_complete(stop if until is None else until)
        finally:
            for fd in fds:
                loop.remove_reader(fd)
            loop.remove_reader(self._wake_main_r)

    def _welcome(self):
        """Each subscription to IOPub that has arrived answered there with
        an iopub_welcome (JEP 65), its topic the subscription's: a client
        that reads it knows that it hears the kernel, without a request
        (the gateway asked for kernel_info twice in half of the starts, the
        first's busy and idle sent before its subscription was in). Read
        between requests on this thread, under the IOPub's lock against
        the other's sends (which may take the descriptor's wake-up: every
        wait begins here)."""
        sock = self.sockets["iopub"]
        with self.iopub_lock:
            while not self.iopub.closed and sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                frame = sock.recv(zmq.NOBLOCK)
                if frame[:1] == b"\x01":
                    topic = frame[1:]
                    self.session.send(self.iopub, "iopub_welcome",
                                      {"subscription": topic.decode("utf-8", "replace")},
                                      ident=topic or b"welcome")

    def _begin(self, frames, channel):
        """A request's identities and message, now the channel's parent, its
        busy status sent; None for frames that are no valid message (logged,
        as ipykernel does, and not answered)."""
        idents, frames = self.session.feed_identities(frames)
        try:
            msg = self.session.deserialize(frames)
        except Exception:
            self.log.error("an invalid message on the %s socket", channel, exc_info=True)
            return None
        if self.kernel_info is not None and msg["header"].get("msg_type") != "kernel_info_request":
            self.kernel_info = None
        self.kernel.set_parent(idents, msg, channel=channel)
        self.kernel._publish_status("busy", channel)
        return idents, msg

    async def _dispatch_shell(self, sock, frames):
        """One shell request, as ipykernel's dispatch_shell handles it."""
        kernel = self.kernel
        begun = self._begin(frames, "shell")
        if begun is None:
            return
        idents, msg = begun
        msg_type = msg["header"]["msg_type"]
        if StartCore.saved is not None and msg_type != "kernel_info_request":
            StartCore.release()
        if kernel._aborting and msg_type == "execute_request":
            kernel._send_abort_reply(sock, msg, idents)
        elif kernel.should_handle(sock, msg, idents):
            await self._handle(kernel.shell_handlers.get(msg_type), sock, idents, msg)
        for fd in self.pipes:
            self._forward(fd)
        sys.stdout.flush()
        sys.stderr.flush()
        kernel._publish_status("idle", "shell")

    async def _handle(self, handler, sock, idents, msg):
        kernel = self.kernel
        if handler is None:
            self.log.warning("unknown message type %r", msg["header"]["msg_type"])
            return
        try:
            kernel.pre_handler_hook()
        except Exception:
            pass
        try:
            result = handler(sock, idents, msg)
            if inspect.isawaitable(result):
                await result
        except Exception:
            self.log.error("exception in the %s handler", msg["header"]["msg_type"],
                           exc_info=True)
        except KeyboardInterrupt:
            self.log.error("KeyboardInterrupt caught in the kernel")
        finally:
            try:
                kernel.post_handler_hook()
            except Exception:
                pass

    def _abort_queues(self):
        """Called by ipykernel's execute_request after a failed cell with
        stop_on_error, as soon as its reply is sent: the requests that have
        arrived by now are taken off the socket, to be aborted once the
        failed cell's request is done; one that comes later (a client that
        saw the reply, or the idle status after it) runs. (From a control
        request, on the I/O thread, which must not touch the shell socket:
        nothing.)"""
        if threading.current_thread() is not threading.main_thread():
            return
        sock = self.sockets["shell"]
        while True:
            try:
                self._arrived.append(sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return

    async def _abort_arrived(self, sock):
        """What _abort_queues took, answered in order: its execute requests
        aborted, anything else handled."""
        arrived, self._arrived = self._arrived, []
        self.kernel._aborting = True
        try:
            for frames in arrived:
                await self._dispatch_shell(sock, frames)
        finally:
            self.kernel._aborting = False

    def _io_loop(self):
        """The control socket, the heartbeat, the output pipes and the
        streams' timed flushes, until the main loop stops."""
        control, hb = self.sockets["control"], self.sockets["hb"]
        poller = zmq.Poller()
        for what in (control, hb, self._wake_io_r, *self.pipes):
            poller.register(what, zmq.POLLIN)
        while not self.stopping:
            due = [s.due for s in self.streams.values() if s.due is not None]
            timeout = None if not due else max(0, (min(due) - time.monotonic()) * 1000)
            try:
                ready = dict(poller.poll(timeout))
            except zmq.ZMQError:
                if self.stopping:
                    break
                raise
            try:
                self._io_round(ready, poller, control, hb)
            except Exception:
                # Logged; the thread goes on (control, the heartbeat and the
                # output would stop with it).
                self.log.error("in the kernel's I/O thread", exc_info=True)

    def _io_round(self, ready, poller, control, hb):
        if self._wake_io_r in ready:
            self._drain(self._wake_io_r)
        if hb in ready:
            self._echo(hb)
        for fd in self.pipes:
            if fd in ready and not self._forward(fd):
                poller.unregister(fd)
        if control in ready:
            self._control(control)
        now = time.monotonic()
        for stream in self.streams.values():
            if stream.due is not None and stream.due <= now:
                stream.flush()

    def _echo(self, hb):
        while True:
            try:
                hb.send_multipart(hb.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return

    def _forward(self, fd):
        """What a pipe holds, into its stream (and, as ipykernel does, to
        the descriptor the kernel started with). Either thread: the main
        one before a request's last flush, so that what a cell wrote to its
        descriptors is published with it. False at the pipe's end."""
        stream, original, decoder = self.pipes[fd]
        with self.pipe_lock:
            # Bounded, so that a writer that never stops holds up neither
            # thread: the rest is read on the next round.
            for _ in range(PIPE_READS):
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    return True
                except OSError:
                    data = b""
                if not data:
                    return False
                stream.write(decoder.decode(data))
                try:
                    os.write(original, data)
                except OSError:
                    pass
            return True

    def _control(self, control):
        kernel = self.kernel
        while True:
            try:
                frames = control.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            begun = self._begin(frames, "control")
            if begun is None:
                continue
            idents, msg = begun
            handler = kernel.control_handlers.get(msg["header"]["msg_type"])
            if handler is None:
                self.log.error("unknown control message type %r", msg["header"]["msg_type"])
            else:
                try:
                    finish(handler(control, idents, msg))
                except Exception:
                    self.log.error("exception in the control handler", exc_info=True)
            sys.stdout.flush()
            sys.stderr.flush()
            kernel._publish_status("idle", "control")

    # ---- requests answered here, not by ipykernel's loops -----------------

    def _shutdown_request(self, sock, idents, msg):
        """Replies, then ends the main loop (after the running cell, if any:
        the gateway kills a kernel that does not exit in time)."""
        kernel = self.kernel
        content = kernel.do_shutdown(bool(msg["content"].get("restart", False)))
        self.session.send(sock, "shutdown_reply", content, msg, ident=idents)
        self.session.send(self.iopub, "shutdown_reply", content, msg,
                          ident=kernel._topic("shutdown"))
        self.stopping = True
        try:
            os.write(self._wake_main_w, b"x")
        except BlockingIOError:
            pass

    def _kernel_info_request(self, sock, idents, msg):
        """ipykernel's kernel_info_request, with the content the zygote built
        (prebuild) until the kernel handles any other request: what the
        content says (the kernel's class, its language, the shell's banner,
        the help links) changes only by code the kernel runs, and ipykernel's
        handler, which builds it again, cost each kernel's first request
        0.4 ms. Then ipykernel's own."""
        content = self.kernel_info
        if content is None:
            return self._ipykernel_kernel_info(sock, idents, msg)
        reply = self.session.send(sock, "kernel_info_reply", content, msg, idents)
        self.log.debug("%s", reply)
        return None

    def _debug_request(self, sock, idents, msg):
        self.session.send(sock, "debug_reply",
                          {"status": "error", "ename": "NotImplementedError",
                           "evalue": "this kernel has no debugger", "traceback": []},
                          msg, ident=idents)

    # ---- small things -----------------------------------------------------

    def wake_io(self):
        try:
            os.write(self._wake_io_w, b"x")
        except BlockingIOError:
            pass

    @staticmethod
    def _drain(fd):
        try:
            while os.read(fd, 4096):
                pass
        except BlockingIOError:
            pass


def as_if_running(loop):
    """The loop made this thread's running loop, as its run_forever makes
    it, without running it (nest_asyncio's way); returns what was there, for
    no_longer_running."""
    hooks = sys.get_asyncgen_hooks()
    loop._thread_id = threading.get_ident()
    asyncio.events._set_running_loop(loop)
    sys.set_asyncgen_hooks(firstiter=loop._asyncgen_firstiter_hook,
                           finalizer=loop._asyncgen_finalizer_hook)
    return hooks


def no_longer_running(loop, hooks):
    loop._thread_id = None
    asyncio.events._set_running_loop(None)
    sys.set_asyncgen_hooks(*hooks)


def awaken(future):
    if not future.done():
        future.set_result(None)


def has_work(loop):
    """Whether the loop has anything to run: a callback or a timer, or a
    descriptor to watch beyond its own self-pipe."""
    return bool(loop._ready or loop._scheduled) or len(loop._selector.get_map()) > 1


def storemagic_loaded(loaded):
    """Whether ipykernel's load_extension("storemagic") would find it loaded
    in this kernel (and do nothing): a module of that name on the path comes
    first, then IPython's own, which the zygote's shell has loaded
    (prebuild). The zygote's entries of sys.path held no other (its import
    failed there), so only the entries this kernel added are searched (its
    cwd, PYTHONPATH, the user's site-packages): the failed import over the
    whole path cost every kernel 0.6 ms and some 95 copied pages."""
    if "storemagic" in loaded:
        return True
    if "IPython.extensions.storemagic" not in loaded:
        return False
    zygote_path = set(PREBUILT["path"])
    own = [p for p in sys.path if p not in zygote_path]
    return importlib.machinery.PathFinder.find_spec("storemagic", own) is None


def launcher_origin():
    """Where "-m ipykernel_launcher" finds its module: the zygote's (found
    once) unless a directory the kernel put before the zygote's path (the
    cwd, PYTHONPATH, the user's site-packages) holds one."""
    zygote_path = PREBUILT["path"]
    n = len(zygote_path)
    at = next((i for i in range(len(sys.path) - n + 1) if sys.path[i:i + n] == zygote_path),
              None)
    if at is not None:
        spec = importlib.machinery.PathFinder.find_spec("ipykernel_launcher", sys.path[:at])
        if spec is None:
            return PREBUILT["launcher"]
        if spec.origin not in (None, "namespace"):
            return spec.origin
    return importlib.util.find_spec("ipykernel_launcher").origin


class StartCore:
    """The kernel's threads kept on the core its start began on, while the
    machine has no more to run than it has cores, until the first request
    other than kernel_info. A copy-on-write fault of a process that has a
    thread running on another core flushes that core's TLB by an
    interprocessor interrupt, 13.9 µs a fault against 2.2 without in this
    virtual machine (bench/cow_fault); a start makes about 2,000 faults
    with libzmq's I/O thread and the loop's running beside the main
    thread's (about 37 flushes a start here, 7 kept on one core). Under
    load the kernel is not held: it could not move to a core that frees
    up, and 50 starts at once took longer held (docs/performance.md). The
    first request that could run the user's code (anything but
    kernel_info) finds the affinity the kernel was started with."""

    saved = None

    @classmethod
    def hold(cls):
        """In C (zygote_main.c's hold_core: 0.3 ms here in Python, reading
        two files of /proc); a loop outside the zygote is not held."""
        if _glovebox_zygote is not None:
            cls.saved = _glovebox_zygote.hold_core()

    @classmethod
    def release(cls):
        """Every thread's affinity as it was (a thread made since, by one
        held, is held too); on a host whose cores differ (a kernel resumed
        elsewhere), every core."""
        saved, cls.saved = cls.saved, None
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), saved)
            except OSError:
                try:
                    os.sched_setaffinity(int(tid), range(os.cpu_count() or 1))
                except OSError:
                    pass


# The name a warm-up's cell is compiled under (warm_up).
WARM_UP_NAME = "<glovebox-warm-up>"


def refuse(*args, **kw):
    """Where an error would be shown: the warm-up and the rehearsal end."""
    raise RuntimeError("the zygote's own cell failed")


def guard(shell):
    """What the warm-up and the rehearsal run under, so that they read
    nothing: imports refused (everything they use is loaded), the cell's
    name given (ipykernel's compiler would ask tempfile for a directory,
    which probes it by writing a file), an error ending the run rather
    than being shown (IPython's traceback reads source files). Returns
    what puts them back, each step one that cannot fail."""
    compiler = shell.compile
    meta_path = sys.meta_path
    sys.meta_path = []
    compiler.get_code_name = lambda raw_code, code, number: WARM_UP_NAME
    shell.showtraceback = shell.showsyntaxerror = refuse

    def undo():
        sys.meta_path = meta_path
        shell.__dict__.pop("showtraceback", None)
        shell.__dict__.pop("showsyntaxerror", None)
        compiler.__dict__.pop("get_code_name", None)

    return undo


def warm_up(shell):
    """Run in each process the zygote forks ahead, while it waits, before
    any request reaches it (zygote_main.c's ahead_child): the work of a
    first cell that is the same in every kernel, so that the pages of the
    zygote it writes (reference counts, allocators' lists: about 370) are
    copied there rather than in the request's path. The shell, not yet any
    kernel's, runs "1+1" silently (no history, count or output) and formats
    a result; then what the run left is put back: the shell's last result,
    the compiler's and linecache's entry for the cell. Nothing is read from
    the sandbox (guard). Whether it ran; a failure leaves the kernel's start
    as it was."""
    compiler = shell.compile
    last = shell.last_execution_result, shell.last_execution_succeeded
    undo = guard(shell)
    try:
        result = shell.run_cell("1+1", store_history=False, silent=True)
        shell.display_formatter.format(2)
        return result is not None and result.success
    except Exception:
        return False
    finally:
        # (Each step one that cannot fail, so that every one is taken.)
        undo()
        getattr(compiler, "_filename_map", {}).pop(WARM_UP_NAME, None)
        linecache.cache.pop(WARM_UP_NAME, None)
        shell.last_execution_result, shell.last_execution_succeeded = last


# The rehearsal's connection, its requests' header and its cell: one that
# prints and shows a result, as first cells do.
REHEARSAL = {"transport": "ipc", "ip": "glovebox-rehearsal", "key": "glovebox-rehearsal",
             "signature_scheme": "hmac-sha256",
             **{name + "_port": i for i, name in enumerate(CHANNELS, 1)}}
REHEARSAL_HEADER = {"username": "glovebox", "session": "glovebox-rehearsal",
                    "date": "2026-01-01T00:00:00.000000Z", "version": "5.3"}
REHEARSAL_CELL = "print(1)\n1 + 1"
REHEARSAL_END = "glovebox_rehearsal_end"


class Rehearsal(KernelLoop):
    """The rehearsal's kernel (rehearse): its sockets in-process (ZeroMQ's
    inproc, in its own context), its pages reported after its requests."""

    report_at_start = False

    @staticmethod
    def address(info, channel):
        return f"inproc://{info['ip']}-{channel}"


def rehearsal_message(key, msg_type, content):
    """A request of the rehearsal's, signed as a client signs it."""
    header = dict(REHEARSAL_HEADER, msg_id=uuid.uuid4().hex, msg_type=msg_type)
    parts = [json.dumps(part).encode() for part in (header, {}, {}, content)]
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return [b"<IDS|MSG>", mac.hexdigest().encode()] + parts


def rehearse(shell):
    """Run once, in a child the zygote forks for it before it is ready
    (zygote_main.c's rehearse), never in a kernel: a kernel of this loop,
    around the zygote's shell and kernel, over in-process sockets, serves
    requests this child sends it itself (a kernel_info, a cell that
    prints and shows a result), and then lists the pages it wrote for the
    zygote (report_pages), so that the processes the zygote forks ahead
    copy the pages a kernel's first requests write
    (kernel-host/zygote_pages.h). It is the zygote's code on the zygote's
    requests: nothing is read (guard), no history is kept, nothing
    outlives the child. Whether it reported."""
    if "kernel" not in PREBUILT or _glovebox_zygote is None:
        return False
    guard(shell)
    info = dict(REHEARSAL)
    kernel_loop = Rehearsal("<rehearsal>", info, Config(GLOVEBOX_SETTINGS),
                            PREBUILT["profile_dir"], None, shell, lambda *args: None)
    reported = []

    def end(sock, idents, msg):
        reported.append(_glovebox_zygote.report_pages())
        kernel_loop.stopping = True

    kernel_loop.kernel.shell_handlers[REHEARSAL_END] = end
    client = kernel_loop.context.socket(zmq.DEALER)
    client.linger = 0
    client.connect(kernel_loop.address(info, "shell"))
    key = info["key"].encode()
    execute = {"code": REHEARSAL_CELL, "silent": False, "store_history": False,
               "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}
    for msg_type, content in (("kernel_info_request", {}), ("execute_request", execute),
                              (REHEARSAL_END, {})):
        client.send_multipart(rehearsal_message(key, msg_type, content))
    kernel_loop.run()
    return bool(reported and reported[0] > 0)


def run(path, env, shell, adopt_here):
    """Runs the kernel of connection file path in this process, around the
    zygote's shell and kernel (prebuild); False, having changed nothing,
    when ipykernel's application must run it instead."""
    if "kernel" not in PREBUILT:
        drop_sockets_ahead()
        return False
    prepared = plain_configuration(path, env)
    if prepared is None:
        drop_sockets_ahead()
        return False
    sys.argv[0] = launcher_origin()
    StartCore.hold()
    KernelLoop(path, *prepared, shell, adopt_here).run()
    return True
