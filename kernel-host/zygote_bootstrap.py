# glovebox-zygote's bootstrap: run once in the zygote, in __main__ (the C
# side sets _glovebox_preload, the modules to import, and
# _glovebox_kernel_source, zygote_kernel.py's text, first). Built into
# the binary with .incbin, as zygote_kernel.py is: the code a zygote
# runs is the code reviewed with this build. Comments only, no
# docstring: it would become __main__.__doc__.
#
# Runs once in the zygote: the imports every kernel shares, the IPython shell
# every ipykernel kernel would build, and the function each kernel starts with
# after its fork.
#
# The shell (ipykernel's ZMQInteractiveShell: magics, formatters, completer,
# inspector, prefilters, aliases) is most of ipykernel's start and depends on
# no kernel's identity, so it is built here, once, with its history disabled
# (no database, no saving thread) and no kernel, session or socket; the
# zygote's sys.modules["__main__"] and atexit are put back as they were. What
# a kernel's first cell would build on first use is built here too: the
# display formatters (a trait default) and the tokenizer's patterns (compiled
# into tokenize's cache). netifaces, where installed, is imported here: with
# it jupyter_client lists the kernel's addresses (it asks for localhost as the
# kernel loads its connection file) by getifaddrs, in the kernel's own network
# namespace; without it each kernel runs `ip addr`. A kernel offers the shell
# to ipykernel through ZMQInteractiveShell.instance(), which IPythonKernel
# calls: for one call it returns the prebuilt shell, adopted by the kernel
# (its parent, kernel, configuration, profile and ipython directories,
# compiler, environment variables, a fresh user module and namespace, its own
# history (where the configuration puts it) and saving thread, execution count
# 1), or, when the kernel's configuration has a section for anything but the
# kernel application, the kernel, its session and the history's file (a
# profile's ipython_kernel_config.py setting InteractiveShell, a formatter,
# the history...), builds a shell of its own as a cold kernel would. Startup
# files and exec_lines run in the kernel either way (the application runs
# them).
#
# A kernel's history held in memory (Glovebox's /etc/ipython: no file to
# write) has its SQLite database made when something first reads or writes it
# (a history request, %history, the end of the session), not as the shell is
# built: IPython's HistoryManager, subclassed under its own name, holds a
# stand-in that opens the database and the session's row at that first use
# (session 1, as a fresh database numbers it); a history kept in a file is
# opened at once, as before.
#
# A kernel of ipykernel_launcher with the usual "-f FILE", for which IPython
# would read no configuration but Glovebox's, does not run ipykernel's
# application at all: zygote_kernel.py (loaded below) runs ipykernel's
# kernel object in a loop of its own around the shell, with what every
# kernel's application would build alike made here, once (its prebuild):
# the kernel object itself, which adopts the shell here (_glovebox_adopt),
# so that each kernel runs only the part of the adoption that depends on
# its process (_glovebox_adopt_here). If loading or prebuilding it fails,
# the zygote says why on its stderr and every kernel runs the application.
#
# A process the zygote forks ahead into a sandbox of the stock runs
# _glovebox_warm while it waits: zygote_kernel.py's warm_up, the part of a
# first cell that every kernel does alike, run there rather than in the
# request's path. Before it is ready, the zygote forks a child that runs
# _glovebox_rehearse: zygote_kernel.py's rehearse, a kernel of its loop on
# requests of the child's own, which lists the pages a kernel's first
# requests write (kernel-host/zygote_pages.h).
#
# If building the shell fails, the zygote says why on its stderr and its
# kernels build their own. A kernel whose command line is the usual
# kernelspec's "-f FILE" gets from the kernel application's parse_command_line
# the configuration traitlets' parser would have made of it, without building
# that parser (an argparse of every option of every configurable class: 6 to 7
# ms of CPU); any other command line goes through the parser. The run function
# gives the kernel what an exec'd interpreter would have: its own random state
# (the fork copied ours; numpy's legacy generator keyed as its seed() keys it,
# from 2,496 bytes of the system's entropy rather than a SeedSequence of 16: a
# third of the time; the key written straight into the generator's state, at
# the address numpy's BitGenerator.ctypes gives, found and checked here once:
# what set_state writes, without its Python, 0.3 ms and some 70 pages, while
# the zygote has drawn no Gaussian, whose cache set_state would also clear),
# its environment (the C library's set by take_kernel,
# os.environ's mapping rebuilt, not a putenv or unsetenv per variable),
# Python's signal dispositions (the sandbox reset them), user site-packages
# and PYTHONPATH as they are now, the cwd first on sys.path, and "-m MODULE
# args" run as __main__. It ends as Python's own exit does (threads, atexit,
# open files flushed) but without tearing down every module: that would write
# to, and so copy, every page the kernel shares with the zygote (a second per
# kernel with pandas and matplotlib). gc.freeze() keeps the collector off the
# zygote's objects for the same reason, and sys.modules's names are copied
# side by side: IPython's start takes set(sys.modules), whose reference
# counts, on names interned all over the heap as each module was imported,
# made each kernel copy some 800 pages of the zygote (3 ms; 0.3 ms side by
# side). The run function's exit stops ipykernel's control thread first: that
# thread's last message, the shutdown request, ends with a flush of stdout
# through the IOPub thread, which the application's atexit handler stops
# before it joins the control thread, so the flush waited out its 10 s and the
# gateway killed about one kernel in five after 2 s.
import gc, importlib, os, sys
for _name in _glovebox_preload:
    try:
        importlib.import_module(_name.rstrip('?'))
    except ImportError as _e:
        if not _name.endswith('?'):
            raise
        sys.stderr.write(f'not preloading {_name[:-1]}: {_e}\n')
_GLOVEBOX_GENERIC = {'object', 'HasDescriptors', 'HasTraits', 'Configurable',
                     'LoggingConfigurable', 'SingletonConfigurable'}
def _glovebox_prebuild():
    import atexit
    from IPython.core.history import HistoryManager
    from ipykernel.compiler import XCachingCompiler
    from ipykernel.zmqshell import ZMQInteractiveShell
    def init_history(self):
        self.history_manager = HistoryManager(shell=self, parent=self, enabled=False)
        self.configurables.append(self.history_manager)
    ZMQInteractiveShell.init_history = init_history
    try:
        shell = ZMQInteractiveShell(compiler_class=XCachingCompiler)
    finally:
        del ZMQInteractiveShell.init_history
    shell.restore_sys_module_state()
    atexit.unregister(shell.atexit_operations)
    shell.display_formatter.format(0)
    shell.transform_cell('0\n')
    return shell
def _glovebox_shell_fits(cls, shell, args, kw):
    parent = kw.get('parent')
    if cls is not type(shell) or args or parent is None:
        return False
    if any(c._instance is not None for c in cls._walk_mro()):
        return False
    if set(kw) - {'parent', 'profile_dir', 'user_module', 'user_ns', 'kernel',
                  'compiler_class'}:
        return False
    if kw.get('user_module') is not None or kw.get('user_ns') is not None:
        return False
    if kw.get('compiler_class', type(shell.compile)) is not type(shell.compile):
        return False
    known = {'Session', 'ProfileDir'}
    for c in type(parent).__mro__ + type(getattr(parent, 'parent', None)).__mro__:
        known.add(c.__name__)
    known -= _GLOVEBOX_GENERIC
    # The history's file (Glovebox's /etc/ipython keeps it in memory) is
    # read as the adopted shell makes its history manager.
    return all(k in known or not v or (k == 'HistoryManager' and set(v) <= {'hist_file'})
               for k, v in dict.items(parent.config))
def _glovebox_adopt(shell, parent, kernel=None, profile_dir=None, compiler_class=None, **_):
    shell.config = parent.config
    shell.parent = parent
    shell.kernel = kernel
    shell.init_profile_dir(profile_dir)
    shell.compile = type(shell.compile)()
    old_ns, old_hidden = shell.user_ns, shell.user_ns_hidden
    shell.init_create_namespaces()
    for k, v in old_ns.items():
        shell.user_ns.setdefault(k, v)
    for k, v in old_hidden.items():
        shell.user_ns_hidden.setdefault(k, v)
    shell.configurables.remove(shell.history_manager)
    shell.init_history()
    shell.init_encoding()
    shell.init_user_ns()
    shell.Completer.namespace = shell.user_ns
    shell.Completer.global_namespace = shell.user_global_ns
    shell.execution_count = 1
    _glovebox_adopt_here(shell, profile_dir)
# The part of an adoption that depends on the process doing it: its
# environment, cwd and files, sys.modules, atexit. zygote_kernel.py adopts
# the shell in the zygote, for the prebuilt kernel, and each of its kernels
# then runs only this.
def _glovebox_adopt_here(shell, profile_dir, ipython_dir=None):
    import atexit
    from pathlib import Path
    from IPython.paths import get_ipython_dir
    from IPython.utils.path import get_home_dir
    shell.ipython_dir = get_ipython_dir() if ipython_dir is None else ipython_dir
    if profile_dir is not shell.profile_dir:
        shell.init_profile_dir(profile_dir)
    shell.starting_dir = os.getcwd()
    shell.home_dir = shell.logger.home_dir = get_home_dir()
    shell.init_environment()
    shell.db = type(shell.db)(os.path.join(shell.profile_dir.location, 'db'))
    shell.history_manager.dir_hist[:] = [Path.cwd()]
    shell.save_sys_module_state()
    shell.init_sys_modules()
    atexit.register(shell.atexit_operations)
def _glovebox_offer_shell(shell):
    from ipykernel.zmqshell import ZMQInteractiveShell
    def instance(cls, *args, **kw):
        del ZMQInteractiveShell.instance
        if not _glovebox_shell_fits(cls, shell, args, kw):
            return cls.instance(*args, **kw)
        try:
            _glovebox_adopt(shell, **kw)
        except Exception:
            import traceback
            traceback.print_exc()
            return cls.instance(*args, **kw)
        for c in cls._walk_mro():
            c._instance = shell
        return shell
    ZMQInteractiveShell.instance = classmethod(instance)
def _glovebox_lazy_history():
    from IPython.core import history, interactiveshell
    class LazyDB(history.DummyDB):
        def __init__(self, manager):
            self.manager = manager
        def open(self):
            manager = self.manager
            if manager.db is self:
                history.HistoryAccessor.init_db(manager)
                history.HistoryManager.new_session(manager)
            return manager.db
        def execute(self, *args, **kw):
            return self.open().execute(*args, **kw)
        def commit(self, *args, **kw):
            return self.open().commit(*args, **kw)
        def __enter__(self):
            return self.open().__enter__()
        def __exit__(self, *args):
            return self.manager.db.__exit__(*args)
    class HistoryManager(history.HistoryManager):
        def init_db(self):
            if self.enabled and str(self.hist_file) == ':memory:':
                self.db = LazyDB(self)
            else:
                super().init_db()
        def new_session(self, conn=None):
            if conn is None and isinstance(self.db, LazyDB):
                self.session_number = 1
            else:
                super().new_session(conn)
    interactiveshell.HistoryManager = HistoryManager
_glovebox_lazy_history()
try:
    import netifaces
except ImportError:
    pass
def _glovebox_load_kernel_loop():
    import linecache, types
    name = 'glovebox_zygote_kernel.py'
    module = types.ModuleType('glovebox_zygote_kernel')
    module.__file__ = name
    linecache.cache[name] = (len(_glovebox_kernel_source), None,
                             _glovebox_kernel_source.splitlines(True), name)
    exec(compile(_glovebox_kernel_source, name, 'exec'), module.__dict__)
    return module
try:
    _glovebox_kernel_loop = _glovebox_load_kernel_loop()
except Exception:
    import traceback
    traceback.print_exc()
    _glovebox_kernel_loop = None
try:
    _glovebox_shell = _glovebox_prebuild()
except Exception:
    import traceback
    traceback.print_exc()
    _glovebox_shell = None
try:
    if _glovebox_kernel_loop is not None:
        _glovebox_kernel_loop.prebuild(_glovebox_shell, _glovebox_adopt)
except Exception:
    import traceback
    traceback.print_exc()
    _glovebox_kernel_loop = None
def _glovebox_warm():
    if _glovebox_shell is not None and _glovebox_kernel_loop is not None:
        _glovebox_kernel_loop.warm_up(_glovebox_shell)
def _glovebox_confined():
    if _glovebox_shell is not None and _glovebox_kernel_loop is not None:
        _glovebox_kernel_loop.sockets_ahead()
def _glovebox_rehearse():
    if _glovebox_shell is None or _glovebox_kernel_loop is None:
        return False
    return _glovebox_kernel_loop.rehearse(_glovebox_shell)
def _glovebox_plain_argv(path):
    from ipykernel.kernelapp import IPKernelApp
    from traitlets.config import Config
    own = IPKernelApp.__dict__.get('parse_command_line')
    def parse_command_line(self, argv=None):
        if own is None:
            del IPKernelApp.parse_command_line
        else:
            IPKernelApp.parse_command_line = own
        if type(self) is not IPKernelApp or \
                list(sys.argv[1:] if argv is None else argv) != ['-f', path]:
            return self.parse_command_line(argv)
        self.argv = ['-f', path]
        self.cli_config = Config({'IPKernelApp': {'connection_file': path}})
        self.update_config(self.cli_config)
        self.extra_args = []
    IPKernelApp.parse_command_line = parse_command_line
def _glovebox_stop_control():
    kernelapp = sys.modules.get('ipykernel.kernelapp')
    if kernelapp is None or not kernelapp.IPKernelApp.initialized():
        return
    control = getattr(kernelapp.IPKernelApp.instance(), 'control_thread', None)
    if control is not None and control.is_alive():
        control.stop()
        control.join(5)
def _glovebox_exit(code):
    import atexit, gc, io, threading
    _glovebox_stop_control()
    threading._shutdown()
    atexit._run_exitfuncs()
    for f in gc.get_objects():
        if isinstance(f, io.IOBase):
            try:
                if not f.closed and f.writable():
                    f.flush()
            except Exception:
                pass
    os._exit(code)
def _glovebox_set_environ(env):
    data = getattr(os.environ, '_data', None)
    if not isinstance(data, dict):
        os.environ.clear()
        os.environ.update(env)
        return
    data.clear()
    key, value = os.environ.encodekey, os.environ.encodevalue
    for k, v in env.items():
        data[key(k)] = value(v)
def _glovebox_numpy_seeder():
    numpy = sys.modules.get('numpy')
    if numpy is None:
        return None
    try:
        import ctypes
        rand = numpy.random.mtrand._rand
        state = rand.get_state()
        address = rand._bit_generator.ctypes.state_address
        key = (ctypes.c_uint32 * 624).from_address(address)
        pos = ctypes.c_int.from_address(address + 2496)
        if state[0] != 'MT19937' or state[3] != 0 or list(key) != state[1].tolist() \
                or pos.value != state[2]:
            return None
        return ctypes.memmove, address
    except Exception:
        return None
def _glovebox_seed_numpy(numpy):
    if _glovebox_numpy_seed is not None:
        memmove, address = _glovebox_numpy_seed
        state = bytearray(os.urandom(2500))
        state[0:4] = (0x80000000).to_bytes(4, sys.byteorder)
        state[2496:2500] = (624).to_bytes(4, sys.byteorder)
        memmove(address, bytes(state), 2500)
        return
    try:
        key = numpy.frombuffer(os.urandom(2496), dtype=numpy.uint32).copy()
        key[0] = 0x80000000
        numpy.random.set_state(('MT19937', key, 624, 0, 0.0))
    except Exception:
        numpy.random.seed()
def _glovebox_drop_report():
    # The zygote's module, which the zygote's command names so; not where
    # this file runs elsewhere (tests, bench/kernel_floor.py).
    zygote = globals().get('_glovebox_zygote')
    if zygote is not None:
        zygote.drop_report()
def _glovebox_run(argv, env):
    import os, random, signal, site, sys
    _glovebox_set_environ(env)
    random.seed()
    numpy = sys.modules.get('numpy')
    if numpy is not None:
        _glovebox_seed_numpy(numpy)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if site.ENABLE_USER_SITE and os.path.isdir(site.USER_SITE) \
            and site.USER_SITE not in sys.path:
        # Its .pth files may run code: the kernel's report on its start
        # (kernel-host/zygote_pages.h) goes first, unwritten.
        _glovebox_drop_report()
        site.addsitedir(site.USER_SITE)
    extra = [p for p in env.get('PYTHONPATH', '').split(':') if p]
    sys.path[0:0] = [os.getcwd()] + extra
    sys.orig_argv = list(argv)
    sys.argv = [argv[0]] + list(argv[3:])
    if argv[2] in ('ipykernel_launcher', 'ipykernel'):
        plain = len(argv) == 5 and argv[3] == '-f' and not argv[4].startswith('-')
        if plain and _glovebox_shell is not None and _glovebox_kernel_loop is not None \
                and _glovebox_kernel_loop.run(argv[4], env, _glovebox_shell,
                                              _glovebox_adopt_here):
            _glovebox_exit(0)
        if _glovebox_shell is not None:
            _glovebox_offer_shell(_glovebox_shell)
        if plain:
            _glovebox_plain_argv(argv[4])
    # Not the zygote's loop: its report (kernel-host/zygote_pages.h) goes
    # before any code of the user's could find it, and so do the sockets
    # made while it waited, with their threads.
    _glovebox_drop_report()
    if _glovebox_kernel_loop is not None:
        _glovebox_kernel_loop.drop_sockets_ahead()
    import runpy, traceback
    try:
        runpy._run_module_as_main(argv[2], alter_argv=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    _glovebox_exit(code & 0xff)
def _glovebox_compact_module_names():
    items = list(sys.modules.items())
    names = [(name + ' ')[:-1] for name, _ in items]
    for name, _ in items:
        del sys.modules[name]
    for name, (_, module) in zip(names, items):
        sys.modules[name] = module
_glovebox_numpy_seed = _glovebox_numpy_seeder()
_glovebox_compact_module_names()
gc.collect()
gc.freeze()
