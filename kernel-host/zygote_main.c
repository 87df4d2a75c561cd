/* glovebox-zygote: the fork server of one kernelspec (zygote.h).
 *
 * It embeds the Python of the kernelspec, imports ipykernel and the
 * operator's modules once, before any thread exists (the kernel-host sets
 * the BLAS and OpenMP pools to one thread), checks that it is still
 * single-threaded, says "ready" and then only forks: one child per request
 * of the kernel-host. It runs no code of any user and reads nothing but
 * the kernel-host's socket; what a request carries it never reads itself. */
#include "autoconf.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernel-host/confine.h"
#include "kernel-host/seccomp.h"
#include "kernel-host/zygote.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs once in the zygote: the imports every kernel shares, the IPython
 * shell every ipykernel kernel would build, and the function each kernel
 * starts with after its fork.
 *
 * The shell (ipykernel's ZMQInteractiveShell: magics, formatters,
 * completer, inspector, prefilters, aliases) is most of ipykernel's start
 * and depends on no kernel's identity, so it is built here, once, with its
 * history disabled (no database, no saving thread) and no kernel, session
 * or socket; the zygote's sys.modules["__main__"] and atexit are put back
 * as they were. What a kernel's first cell would build on first use is
 * built here too: the display formatters (a trait default) and the
 * tokenizer's patterns (compiled into tokenize's cache). netifaces, where
 * installed, is imported here: with it jupyter_client lists the kernel's
 * addresses (it asks for localhost as the kernel loads its connection
 * file) by getifaddrs, in the kernel's own network namespace; without it
 * each kernel runs `ip addr`. A kernel offers the shell to ipykernel through
 * ZMQInteractiveShell.instance(), which IPythonKernel calls: for one call it
 * returns the prebuilt shell, adopted by the kernel (its parent, kernel,
 * configuration, profile and ipython directories, compiler, environment
 * variables, a fresh user module and namespace, its own history (where the
 * configuration puts it) and saving thread, execution count 1), or, when the
 * kernel's configuration has a section for anything but the kernel
 * application, the kernel, its session and the history's file (a profile's
 * ipython_kernel_config.py setting InteractiveShell, a formatter, the
 * history...), builds a shell of its own as a cold kernel would. Startup
 * files and exec_lines run in the kernel either way (the application
 * runs them).
 *
 * A kernel's history held in memory (Glovebox's /etc/ipython: no file to
 * write) has its SQLite database made when something first reads or writes
 * it (a history request, %history, the end of the session), not as the
 * shell is built: IPython's HistoryManager, subclassed under its own name,
 * holds a stand-in that opens the database and the session's row at that
 * first use (session 1, as a fresh database numbers it); a history kept in
 * a file is opened at once, as before.
 *
 * A kernel of ipykernel_launcher with the usual "-f FILE", for which
 * IPython would read no configuration but Glovebox's, does not run
 * ipykernel's application at all: zygote_kernel.py (built in below) runs
 * ipykernel's kernel object in a loop of its own around the adopted shell,
 * with what every kernel's application would build alike made here, once
 * (its prebuild). If loading or prebuilding it fails, the zygote says why
 * on its stderr and every kernel runs the application.
 *
 * If building the shell fails, the zygote says why on its stderr and its
 * kernels build their own. A kernel whose command line is the usual
 * kernelspec's "-f FILE" gets from the kernel application's
 * parse_command_line the configuration traitlets' parser would have made
 * of it, without building that parser (an argparse of every option of
 * every configurable class: 6 to 7 ms of CPU); any other command line goes
 * through the parser. The run function gives the kernel what an
 * exec'd interpreter would have: its own random state (the fork copied
 * ours), its environment, Python's signal dispositions (the sandbox reset
 * them), user site-packages and PYTHONPATH as they are now, the cwd first
 * on sys.path, and "-m MODULE args" run as __main__. It
 * ends as Python's own exit does (threads, atexit, open files flushed) but
 * without tearing down every module: that would write to, and so copy,
 * every page the kernel shares with the zygote (a second per kernel with
 * pandas and matplotlib). gc.freeze() keeps the collector off the
 * zygote's objects for the same reason, and sys.modules's names are
 * copied side by side: IPython's start takes set(sys.modules), whose
 * reference counts, on names interned all over the heap as each module
 * was imported, made each kernel copy some 800 pages of the zygote (3 ms;
 * 0.3 ms side by side). The run function's exit stops ipykernel's
 * control thread first: that thread's last message, the shutdown request, ends with a
 * flush of stdout through the IOPub thread, which the application's atexit
 * handler stops before it joins the control thread, so the flush waited
 * out its 10 s and the gateway killed about one kernel in five after 2 s. */
static const char bootstrap[] =
    "import gc, importlib, os, sys\n"
    "for _name in _glovebox_preload:\n"
    "    try:\n"
    "        importlib.import_module(_name.rstrip('?'))\n"
    "    except ImportError as _e:\n"
    "        if not _name.endswith('?'):\n"
    "            raise\n"
    "        sys.stderr.write(f'not preloading {_name[:-1]}: {_e}\\n')\n"
    "_GLOVEBOX_GENERIC = {'object', 'HasDescriptors', 'HasTraits', 'Configurable',\n"
    "                     'LoggingConfigurable', 'SingletonConfigurable'}\n"
    "def _glovebox_prebuild():\n"
    "    import atexit\n"
    "    from IPython.core.history import HistoryManager\n"
    "    from ipykernel.compiler import XCachingCompiler\n"
    "    from ipykernel.zmqshell import ZMQInteractiveShell\n"
    "    def init_history(self):\n"
    "        self.history_manager = HistoryManager(shell=self, parent=self, enabled=False)\n"
    "        self.configurables.append(self.history_manager)\n"
    "    ZMQInteractiveShell.init_history = init_history\n"
    "    try:\n"
    "        shell = ZMQInteractiveShell(compiler_class=XCachingCompiler)\n"
    "    finally:\n"
    "        del ZMQInteractiveShell.init_history\n"
    "    shell.restore_sys_module_state()\n"
    "    atexit.unregister(shell.atexit_operations)\n"
    "    shell.display_formatter.format(0)\n"
    "    shell.transform_cell('0\\n')\n"
    "    return shell\n"
    "def _glovebox_shell_fits(cls, shell, args, kw):\n"
    "    parent = kw.get('parent')\n"
    "    if cls is not type(shell) or args or parent is None:\n"
    "        return False\n"
    "    if any(c._instance is not None for c in cls._walk_mro()):\n"
    "        return False\n"
    "    if set(kw) - {'parent', 'profile_dir', 'user_module', 'user_ns', 'kernel',\n"
    "                  'compiler_class'}:\n"
    "        return False\n"
    "    if kw.get('user_module') is not None or kw.get('user_ns') is not None:\n"
    "        return False\n"
    "    if kw.get('compiler_class', type(shell.compile)) is not type(shell.compile):\n"
    "        return False\n"
    "    known = {'Session', 'ProfileDir'}\n"
    "    for c in type(parent).__mro__ + type(getattr(parent, 'parent', None)).__mro__:\n"
    "        known.add(c.__name__)\n"
    "    known -= _GLOVEBOX_GENERIC\n"
    "    # The history's file (Glovebox's /etc/ipython keeps it in memory) is\n"
    "    # read as the adopted shell makes its history manager.\n"
    "    return all(k in known or not v or (k == 'HistoryManager' and set(v) <= {'hist_file'})\n"
    "               for k, v in dict.items(parent.config))\n"
    "def _glovebox_adopt(shell, parent, kernel=None, profile_dir=None, compiler_class=None, **_):\n"
    "    import atexit\n"
    "    from IPython.paths import get_ipython_dir\n"
    "    from IPython.utils.path import get_home_dir\n"
    "    shell.config = parent.config\n"
    "    shell.parent = parent\n"
    "    shell.kernel = kernel\n"
    "    shell.ipython_dir = get_ipython_dir()\n"
    "    shell.init_profile_dir(profile_dir)\n"
    "    shell.starting_dir = os.getcwd()\n"
    "    shell.home_dir = shell.logger.home_dir = get_home_dir()\n"
    "    shell.compile = type(shell.compile)()\n"
    "    shell.init_environment()\n"
    "    shell.db = type(shell.db)(os.path.join(shell.profile_dir.location, 'db'))\n"
    "    old_ns, old_hidden = shell.user_ns, shell.user_ns_hidden\n"
    "    shell.init_create_namespaces()\n"
    "    for k, v in old_ns.items():\n"
    "        shell.user_ns.setdefault(k, v)\n"
    "    for k, v in old_hidden.items():\n"
    "        shell.user_ns_hidden.setdefault(k, v)\n"
    "    shell.save_sys_module_state()\n"
    "    shell.init_sys_modules()\n"
    "    shell.configurables.remove(shell.history_manager)\n"
    "    shell.init_history()\n"
    "    shell.init_encoding()\n"
    "    shell.init_user_ns()\n"
    "    shell.Completer.namespace = shell.user_ns\n"
    "    shell.Completer.global_namespace = shell.user_global_ns\n"
    "    shell.execution_count = 1\n"
    "    atexit.register(shell.atexit_operations)\n"
    "def _glovebox_offer_shell(shell):\n"
    "    from ipykernel.zmqshell import ZMQInteractiveShell\n"
    "    def instance(cls, *args, **kw):\n"
    "        del ZMQInteractiveShell.instance\n"
    "        if not _glovebox_shell_fits(cls, shell, args, kw):\n"
    "            return cls.instance(*args, **kw)\n"
    "        try:\n"
    "            _glovebox_adopt(shell, **kw)\n"
    "        except Exception:\n"
    "            import traceback\n"
    "            traceback.print_exc()\n"
    "            return cls.instance(*args, **kw)\n"
    "        for c in cls._walk_mro():\n"
    "            c._instance = shell\n"
    "        return shell\n"
    "    ZMQInteractiveShell.instance = classmethod(instance)\n"
    "def _glovebox_lazy_history():\n"
    "    from IPython.core import history, interactiveshell\n"
    "    class LazyDB(history.DummyDB):\n"
    "        def __init__(self, manager):\n"
    "            self.manager = manager\n"
    "        def open(self):\n"
    "            manager = self.manager\n"
    "            if manager.db is self:\n"
    "                history.HistoryAccessor.init_db(manager)\n"
    "                history.HistoryManager.new_session(manager)\n"
    "            return manager.db\n"
    "        def execute(self, *args, **kw):\n"
    "            return self.open().execute(*args, **kw)\n"
    "        def commit(self, *args, **kw):\n"
    "            return self.open().commit(*args, **kw)\n"
    "        def __enter__(self):\n"
    "            return self.open().__enter__()\n"
    "        def __exit__(self, *args):\n"
    "            return self.manager.db.__exit__(*args)\n"
    "    class HistoryManager(history.HistoryManager):\n"
    "        def init_db(self):\n"
    "            if self.enabled and str(self.hist_file) == ':memory:':\n"
    "                self.db = LazyDB(self)\n"
    "            else:\n"
    "                super().init_db()\n"
    "        def new_session(self, conn=None):\n"
    "            if conn is None and isinstance(self.db, LazyDB):\n"
    "                self.session_number = 1\n"
    "            else:\n"
    "                super().new_session(conn)\n"
    "    interactiveshell.HistoryManager = HistoryManager\n"
    "_glovebox_lazy_history()\n"
    "try:\n"
    "    import netifaces\n"
    "except ImportError:\n"
    "    pass\n"
    "def _glovebox_load_kernel_loop():\n"
    "    import linecache, types\n"
    "    name = 'glovebox_zygote_kernel.py'\n"
    "    module = types.ModuleType('glovebox_zygote_kernel')\n"
    "    module.__file__ = name\n"
    "    linecache.cache[name] = (len(_glovebox_kernel_source), None,\n"
    "                             _glovebox_kernel_source.splitlines(True), name)\n"
    "    exec(compile(_glovebox_kernel_source, name, 'exec'), module.__dict__)\n"
    "    return module\n"
    "try:\n"
    "    _glovebox_kernel_loop = _glovebox_load_kernel_loop()\n"
    "except Exception:\n"
    "    import traceback\n"
    "    traceback.print_exc()\n"
    "    _glovebox_kernel_loop = None\n"
    "try:\n"
    "    _glovebox_shell = _glovebox_prebuild()\n"
    "except Exception:\n"
    "    import traceback\n"
    "    traceback.print_exc()\n"
    "    _glovebox_shell = None\n"
    "try:\n"
    "    if _glovebox_kernel_loop is not None:\n"
    "        _glovebox_kernel_loop.prebuild(_glovebox_shell)\n"
    "except Exception:\n"
    "    import traceback\n"
    "    traceback.print_exc()\n"
    "    _glovebox_kernel_loop = None\n"
    "def _glovebox_plain_argv(path):\n"
    "    from ipykernel.kernelapp import IPKernelApp\n"
    "    from traitlets.config import Config\n"
    "    own = IPKernelApp.__dict__.get('parse_command_line')\n"
    "    def parse_command_line(self, argv=None):\n"
    "        if own is None:\n"
    "            del IPKernelApp.parse_command_line\n"
    "        else:\n"
    "            IPKernelApp.parse_command_line = own\n"
    "        if type(self) is not IPKernelApp or \\\n"
    "                list(sys.argv[1:] if argv is None else argv) != ['-f', path]:\n"
    "            return self.parse_command_line(argv)\n"
    "        self.argv = ['-f', path]\n"
    "        self.cli_config = Config({'IPKernelApp': {'connection_file': path}})\n"
    "        self.update_config(self.cli_config)\n"
    "        self.extra_args = []\n"
    "    IPKernelApp.parse_command_line = parse_command_line\n"
    "def _glovebox_stop_control():\n"
    "    kernelapp = sys.modules.get('ipykernel.kernelapp')\n"
    "    if kernelapp is None or not kernelapp.IPKernelApp.initialized():\n"
    "        return\n"
    "    control = getattr(kernelapp.IPKernelApp.instance(), 'control_thread', None)\n"
    "    if control is not None and control.is_alive():\n"
    "        control.stop()\n"
    "        control.join(5)\n"
    "def _glovebox_exit(code):\n"
    "    import atexit, gc, io, threading\n"
    "    _glovebox_stop_control()\n"
    "    threading._shutdown()\n"
    "    atexit._run_exitfuncs()\n"
    "    for f in gc.get_objects():\n"
    "        if isinstance(f, io.IOBase):\n"
    "            try:\n"
    "                if not f.closed and f.writable():\n"
    "                    f.flush()\n"
    "            except Exception:\n"
    "                pass\n"
    "    os._exit(code)\n"
    "def _glovebox_run(argv, env):\n"
    "    import os, random, signal, site, sys\n"
    "    os.environ.clear()\n"
    "    os.environ.update(env)\n"
    "    random.seed()\n"
    "    numpy = sys.modules.get('numpy')\n"
    "    if numpy is not None:\n"
    "        numpy.random.seed()\n"
    "    signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "    signal.signal(signal.SIGPIPE, signal.SIG_IGN)\n"
    "    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "    if site.ENABLE_USER_SITE and os.path.isdir(site.USER_SITE) \\\n"
    "            and site.USER_SITE not in sys.path:\n"
    "        site.addsitedir(site.USER_SITE)\n"
    "    extra = [p for p in env.get('PYTHONPATH', '').split(':') if p]\n"
    "    sys.path[0:0] = [os.getcwd()] + extra\n"
    "    sys.orig_argv = list(argv)\n"
    "    sys.argv = [argv[0]] + list(argv[3:])\n"
    "    if argv[2] in ('ipykernel_launcher', 'ipykernel'):\n"
    "        plain = len(argv) == 5 and argv[3] == '-f' and not argv[4].startswith('-')\n"
    "        if plain and _glovebox_shell is not None and _glovebox_kernel_loop is not None \\\n"
    "                and _glovebox_kernel_loop.run(argv[4], env, _glovebox_shell, "
    "_glovebox_adopt):\n"
    "            _glovebox_exit(0)\n"
    "        if _glovebox_shell is not None:\n"
    "            _glovebox_offer_shell(_glovebox_shell)\n"
    "        if plain:\n"
    "            _glovebox_plain_argv(argv[4])\n"
    "    import runpy, traceback\n"
    "    try:\n"
    "        runpy._run_module_as_main(argv[2], alter_argv=True)\n"
    "        code = 0\n"
    "    except SystemExit as e:\n"
    "        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1\n"
    "        if not isinstance(e.code, int) and e.code is not None:\n"
    "            print(e.code, file=sys.stderr)\n"
    "    except BaseException:\n"
    "        traceback.print_exc()\n"
    "        code = 1\n"
    "    _glovebox_exit(code & 0xff)\n"
    "def _glovebox_compact_module_names():\n"
    "    items = list(sys.modules.items())\n"
    "    names = [(name + ' ')[:-1] for name, _ in items]\n"
    "    for name, _ in items:\n"
    "        del sys.modules[name]\n"
    "    for name, (_, module) in zip(names, items):\n"
    "        sys.modules[name] = module\n"
    "_glovebox_compact_module_names()\n"
    "gc.collect()\n"
    "gc.freeze()\n";

/* zygote_kernel.py: the Jupyter loop a kernel runs instead of ipykernel's
 * application where it can (that file says where), in the binary itself as
 * display.c keeps its extension: the code a sandbox runs is the code
 * reviewed with this build. */
__asm__(".section .rodata\n"
        ".balign 16\n"
        "zygote_kernel_py:\n"
        ".incbin \"" GLOVEBOX_SRCDIR "/kernel-host/zygote_kernel.py\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char zygote_kernel_py[];

static char *title_area;
static size_t title_len;
static int cap_last = CAP_LAST_CAP;
static struct sock_fprog filter;

/* ---- the kernel, in the sandbox ------------------------------------------ */

/* Overwrites our command line (what /proc/PID/cmdline shows) with the
 * kernel's argv, as far as it fits, so that it names no host path. */
static void set_title(char **argv)
{
        size_t used = 0;

        if (!title_area)
                return;
        memset(title_area, 0, title_len);
        for (size_t i = 0; argv[i]; i++) {
                size_t len = strlen(argv[i]) + 1;

                if (used + len >= title_len)
                        break;
                memcpy(title_area + used, argv[i], len);
                used += len;
        }
        prctl(PR_SET_NAME, "python3", 0, 0, 0);
}

/* Runs the kernel: never returns. Python's own exit (SystemExit included)
 * ends the process with the kernel's exit code. */
static __attribute__((noreturn)) void run_kernel(char **argv, char **envp)
{
        PyObject *main_mod, *fn, *args = NULL, *env = NULL, *result;
        size_t argc = 0;

        while (argv[argc])
                argc++;
        main_mod = PyImport_AddModule("__main__");
        fn = main_mod ? PyObject_GetAttrString(main_mod, "_glovebox_run") : NULL;
        args = PyTuple_New((Py_ssize_t)argc);
        env = PyDict_New();
        if (!fn || !args || !env)
                goto fail;
        for (size_t i = 0; i < argc; i++) {
                PyObject *s = PyUnicode_DecodeFSDefault(argv[i]);

                if (!s)
                        goto fail;
                PyTuple_SET_ITEM(args, (Py_ssize_t)i, s);
        }
        for (size_t i = 0; envp[i]; i++) {
                const char *eq = strchr(envp[i], '=');
                PyObject *k, *v;
                int rc;

                if (!eq)
                        continue;
                k = PyUnicode_DecodeFSDefaultAndSize(envp[i], eq - envp[i]);
                v = PyUnicode_DecodeFSDefault(eq + 1);
                rc = k && v ? PyDict_SetItem(env, k, v) : -1;
                Py_XDECREF(k);
                Py_XDECREF(v);
                if (rc < 0)
                        goto fail;
        }
        result = PyObject_CallFunctionObjArgs(fn, args, env, NULL);
        if (result) {
                Py_DECREF(result);
                exit(Py_FinalizeEx() < 0 ? 120 : 0);
        }
fail:
        /* Prints the traceback, or exits with a SystemExit's code. */
        PyErr_Print();
        exit(1);
}

/* The kernel's process, forked into the sandbox's pid namespace: confines
 * itself, reports on report_fd, then runs. */
static __attribute__((noreturn)) void kernel_main(const struct confine_sandbox *csb, int output_fd,
                                                  const char *cwd, char **argv, char **envp,
                                                  int report_fd)
{
        const int stdio[3] = {-1, output_fd, output_fd};

        /* A kernel: the sandbox's user, on pipes (never root, never a
         * terminal: hostmsg_json.c refuses both for kernels). */
        confine_process(csb, stdio, cwd, false, false, report_fd);
        /* An exec'd kernel is dumpable again after its execve; the id
         * change above made us not. As then, only the sandbox's own user
         * could look, and seccomp denies ptrace anyway. */
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        set_title(argv);
        /* Closed as an execve would close it: the sign that we run. */
        close(report_fd);
        run_kernel(argv, envp);
}

/* ---- the children of one request ----------------------------------------- */

/* Points out[0..want) at the NUL-terminated strings from p on, which end
 * before end (*end is a NUL). The number found: want, or fewer when the
 * strings run out. */
static size_t split_strings(char *p, const char *end, char **out, size_t want)
{
        size_t n = 0;

        while (n < want && p < end) {
                out[n++] = p;
                p += strlen(p) + 1;
        }
        return n;
}

/* Reads the request's memfd: the header and the strings into one buffer;
 * out[] points into it. Only the kernel's own process reads it whole. 0,
 * or -1 with errno. */
static int read_spec(int fd, struct zygote_spec *spec, char **buf, char ***out, size_t *nout)
{
        struct stat st;
        size_t len, n, want;

        if (fstat(fd, &st) < 0)
                return -1;
        if (st.st_size < (off_t)sizeof(*spec) || st.st_size > (off_t)ZYGOTE_MAX_SPEC) {
                errno = EMSGSIZE;
                return -1;
        }
        len = (size_t)st.st_size;
        *buf = malloc(len + 1);
        if (!*buf || pread(fd, *buf, len, 0) != (ssize_t)len)
                return -1;
        (*buf)[len] = '\0';
        memcpy(spec, *buf, sizeof(*spec));
        if (spec->magic != ZYGOTE_SPEC_MAGIC || spec->ndirs > ZYGOTE_MAX_DIRS || spec->nargv < 3 ||
            spec->nargv > 4096 || spec->nenv > 4096) {
                errno = EBADMSG;
                return -1;
        }
        want = spec->ndirs + 3 + spec->nargv + spec->nenv;
        *out = calloc(want + 2, sizeof(char *));
        if (!*out)
                return -1;
        n = split_strings(*buf + sizeof(*spec), *buf + len, *out, want);
        if (n != want) {
                errno = EBADMSG;
                return -1;
        }
        *nout = n;
        return 0;
}

/* The kernel's process, forked into the sandbox's pid namespace with the
 * sandbox's ids: it says hello to the kernel-host (whose end of the report
 * socket reads our host pid from the kernel's credentials), reads the
 * request, writes the connection file as the sandbox's root, confines
 * itself and runs. Everything a request carries is read here first, in
 * the kernel's own memory. */
static __attribute__((noreturn)) void kernel_child(const struct confine_sandbox *csb,
                                                   const int fds[ZYGOTE_NFDS])
{
        struct zygote_spec spec;
        char *buf = NULL, **s = NULL, **argv, **envp;
        const char *conn_name;
        int report_fd = fds[ZYGOTE_FD_REPORT];
        size_t n = 0;

        PyOS_AfterFork_Child();
        confine_hello(report_fd);
        if (read_spec(fds[ZYGOTE_FD_SPEC], &spec, &buf, &s, &n) < 0)
                confine_fail(report_fd, "zygote request", errno);
        conn_name = s[spec.ndirs];
        argv = s + spec.ndirs + 3;
        envp = argv + spec.nargv;
        /* The array has room for both NULLs: argv's ends where envp starts,
         * so envp moves one up. */
        memmove(envp + 1, envp, spec.nenv * sizeof(char *));
        envp[0] = NULL;
        envp++;
        envp[spec.nenv] = NULL;
        if (conn_name[0])
                confine_connection_file(csb, conn_name, s[spec.ndirs + 1], report_fd);
        kernel_main(csb, fds[ZYGOTE_FD_OUTPUT], s[spec.ndirs + 2], argv, envp, report_fd);
}

/* The middle child: vfork()ed in the sandbox's pid namespace, it forks the
 * kernel, which it orphans at once by exiting, so that the kernel becomes
 * a child of the sandbox's init (sandbox.h). It calls nothing of Python's;
 * glibc's fork() runs its handlers' prepare and parent halves in pairs on
 * the memory it shares. */
static __attribute__((noinline, noreturn)) void middle_main(const struct confine_sandbox *csb,
                                                            const int fds[ZYGOTE_NFDS])
{
        pid_t pid = fork();

        if (pid < 0)
                confine_fail(fds[ZYGOTE_FD_REPORT], "fork", errno);
        if (pid == 0)
                kernel_child(csb, fds);
        _exit(0);
}

/* The request's child: vfork()ed by the zygote, so it shares the
 * zygote's memory, which is suspended until it exits, and copies no page
 * table (the kernel's fork is the one copy a start makes). On the host, as
 * root, it joins the kernel's cgroups and then the sandbox's namespaces,
 * and has the middle child fork the kernel. It reads only the request's
 * header and cgroup directories, which hold no secret, onto the stack,
 * which the zygote clears when it resumes (scrub_stack); it allocates
 * nothing. Its frames lie below the zygote's, which it never returns
 * into. */
static __attribute__((noinline, noreturn)) void request_main(const int fds[ZYGOTE_NFDS])
{
        struct zygote_spec spec;
        struct confine_sandbox csb;
        char dirs[ZYGOTE_MAX_DIRS_BYTES + 1];
        char *dir[ZYGOTE_MAX_DIRS];
        int report_fd = fds[ZYGOTE_FD_REPORT], status;
        size_t n = 0;
        pid_t middle;

        if (pread(fds[ZYGOTE_FD_SPEC], &spec, sizeof(spec), 0) != (ssize_t)sizeof(spec) ||
            spec.magic != ZYGOTE_SPEC_MAGIC || spec.ndirs > ZYGOTE_MAX_DIRS ||
            spec.dirs_bytes > ZYGOTE_MAX_DIRS_BYTES ||
            pread(fds[ZYGOTE_FD_SPEC], dirs, spec.dirs_bytes, sizeof(spec)) !=
                (ssize_t)spec.dirs_bytes)
                confine_fail(report_fd, "zygote request", EBADMSG);
        dirs[spec.dirs_bytes] = '\0';
        n = split_strings(dirs, dirs + spec.dirs_bytes, dir, spec.ndirs);
        if (n != spec.ndirs)
                confine_fail(report_fd, "zygote request", EBADMSG);
        csb = (struct confine_sandbox){.ns_fds = fds + ZYGOTE_FD_NS,
                                       .run_fd = fds[ZYGOTE_FD_RUN],
                                       .privileged = spec.privileged != 0,
                                       .disk_mb = spec.disk_mb,
                                       .pids = spec.pids,
                                       .cap_last = cap_last,
                                       .filter = &filter};
        confine_join(&csb, (const char *const *)dir, n, NULL, NULL, report_fd);
        middle = vfork();
        if (middle == 0)
                middle_main(&csb, fds);
        if (middle < 0)
                confine_fail(report_fd, "fork", errno);
        while (waitpid(middle, &status, 0) < 0 && errno == EINTR)
                ;
        _exit(0);
}

/* Overwrites the stack below the caller's frame, where a request's child
 * ran while the zygote waited: what it read there is not to be in the
 * next kernel's copy of the zygote. */
static __attribute__((noinline)) void scrub_stack(void)
{
        char area[ZYGOTE_MAX_DIRS_BYTES + 65536];

        explicit_bzero(area, sizeof(area));
}

/* ---- the zygote's loop ---------------------------------------------------- */

static int count_threads(void)
{
        DIR *d = opendir("/proc/self/task");
        struct dirent *e;
        int n = 0;

        if (!d)
                return -1;
        while ((e = readdir(d))) {
                if (e->d_name[0] != '.')
                        n++;
        }
        closedir(d);
        return n;
}

static int preload(const char *modules)
{
        PyObject *main_mod, *globals, *list, *source = NULL, *result;
        char *copy = strdup(modules), *p, *next;
        int rc = -1;

        main_mod = PyImport_AddModule("__main__");
        globals = main_mod ? PyModule_GetDict(main_mod) : NULL;
        list = PyList_New(0);
        if (!copy || !globals || !list)
                goto out;
        /* ipykernel itself first: every kernel imports it. */
        if (PyList_Append(list, PyUnicode_FromString("ipykernel.kernelapp")) < 0)
                goto out;
        for (p = copy; p && *p; p = next) {
                PyObject *name;

                next = strchr(p, ',');
                if (next)
                        *next++ = '\0';
                if (!*p)
                        continue;
                name = PyUnicode_FromString(p);
                if (!name || PyList_Append(list, name) < 0) {
                        Py_XDECREF(name);
                        goto out;
                }
                Py_DECREF(name);
        }
        if (PyDict_SetItemString(globals, "_glovebox_preload", list) < 0)
                goto out;
        source = PyUnicode_FromString(zygote_kernel_py);
        if (!source || PyDict_SetItemString(globals, "_glovebox_kernel_source", source) < 0)
                goto out;
        result = PyRun_String(bootstrap, Py_file_input, globals, globals);
        if (!result) {
                PyErr_Print();
                goto out;
        }
        Py_DECREF(result);
        rc = 0;
out:
        Py_XDECREF(source);
        Py_XDECREF(list);
        free(copy);
        return rc;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
#define HUGE_SIZE (2UL << 20)

/* Puts the zygote's private anonymous memory (Python's arenas, malloc's
 * heap: the modules' objects), in each 2 MiB-aligned stretch, into huge
 * pages: a kernel's fork then copies one entry per 2 MiB of it instead of
 * 512 (about 1 ms of the fork with numpy, pandas and matplotlib). A kernel
 * writing to such a page splits only its own mapping and copies 4 KiB, as
 * before. The sysfs THP setting does not apply to MADV_COLLAPSE; a kernel
 * without it (before 6.1) refuses, and forks as before. The MiB moved. */
static unsigned long collapse_anonymous(void)
{
        FILE *f = fopen("/proc/self/maps", "re");
        char line[512];
        unsigned long moved = 0;

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                unsigned long start, end, offset, inode, from, to;
                char perms[5], path[16] = "";

                if (sscanf(line, "%lx-%lx %4s %lx %*s %lu %15s", &start, &end, perms, &offset,
                           &inode, path) < 5)
                        continue;
                if (strcmp(perms, "rw-p") != 0 || inode != 0 ||
                    (path[0] && strcmp(path, "[heap]") != 0))
                        continue;
                from = (start + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1);
                to = end & ~(HUGE_SIZE - 1);
                for (unsigned long a = from; a < to; a += HUGE_SIZE) {
                        if (madvise((void *)a, HUGE_SIZE, MADV_COLLAPSE) == 0)
                                moved++;
                }
        }
        fclose(f);
        return moved * (HUGE_SIZE >> 20);
}

static void serve(int link, int sigfd)
{
        for (;;) {
                struct pollfd pfd[2] = {{link, POLLIN, 0}, {sigfd, POLLIN, 0}};
                union {
                        char buf[CMSG_SPACE(sizeof(int) * ZYGOTE_NFDS)];
                        struct cmsghdr align;
                } control;
                int fds[ZYGOTE_NFDS];
                size_t nfds = 0;
                char tag;
                struct iovec iov = {&tag, 1};
                struct msghdr msg = {.msg_iov = &iov,
                                     .msg_iovlen = 1,
                                     .msg_control = control.buf,
                                     .msg_controllen = sizeof(control.buf)};
                ssize_t n;
                pid_t pid;

                if (poll(pfd, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return;
                }
                if (pfd[1].revents) {
                        struct signalfd_siginfo si;

                        while (read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                                ;
                        while (waitpid(-1, NULL, WNOHANG) > 0)
                                ;
                }
                if (!pfd[0].revents)
                        continue;
                n = recvmsg(link, &msg, MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return; /* the kernel-host is gone */
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

                                for (size_t i = 0; i < k; i++) {
                                        int fd;

                                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                                        if (nfds < ZYGOTE_NFDS)
                                                fds[nfds++] = fd;
                                        else
                                                close(fd);
                                }
                        }
                }
                if (tag != 'F' || nfds != ZYGOTE_NFDS || (msg.msg_flags & MSG_CTRUNC)) {
                        log_error("malformed request dropped");
                        goto close_fds;
                }
                /* Python's fork hooks run as for os.fork(), around the
                 * request's children; only the kernel runs Python. */
                PyOS_BeforeFork();
                pid = vfork();
                if (pid == 0) {
                        close(link);
                        close(sigfd);
                        request_main(fds);
                }
                PyOS_AfterFork_Parent();
                scrub_stack();
                if (pid < 0) {
                        struct confine_report r;

                        confine_report_init(&r, CONFINE_FAILED);
                        r.error = errno;
                        memcpy(r.step, "zygote fork", 12);
                        confine_report_send(fds[ZYGOTE_FD_REPORT], &r);
                }
        close_fds:
                for (size_t i = 0; i < nfds; i++)
                        close(fds[i]);
        }
}

static void usage(void)
{
        fprintf(stderr, "usage: glovebox-zygote --preload MODULE,... [--title TEXT]\n"
                        "Started by glovebox-kernel-host (--zygote); not meant to be run by "
                        "hand.\n");
}

int main(int argc, char **argv)
{
        const char *modules = "";
        PyConfig config;
        PyStatus status;
        sigset_t mask;
        FILE *f;
        int sigfd, threads;
        unsigned long huge;

        log_set_program("zygote");
        title_area = argv[0];
        title_len = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]);
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--preload") == 0 && i + 1 < argc) {
                        modules = argv[++i];
                } else if (strcmp(argv[i], "--title") == 0 && i + 1 < argc) {
                        i++; /* room for the kernels' command lines */
                } else {
                        usage();
                        return 2;
                }
        }
        f = fopen("/proc/sys/kernel/cap_last_cap", "re");
        if (f) {
                if (fscanf(f, "%d", &cap_last) != 1)
                        cap_last = CAP_LAST_CAP;
                fclose(f);
        }
        if (seccomp_policy_build(&filter) < 0) {
                log_error("cannot build the seccomp filter");
                return 1;
        }
        /* Children are reaped from the loop: SIGCHLD through a signalfd. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (sigfd < 0)
                return 1;

        PyConfig_InitPythonConfig(&config);
        /* sys.executable and the paths of the kernelspec's interpreter. */
        status = PyConfig_SetBytesString(&config, &config.program_name, GLOVEBOX_ZYGOTE_PYTHON);
        if (!PyStatus_Exception(status))
                status = Py_InitializeFromConfig(&config);
        PyConfig_Clear(&config);
        if (PyStatus_Exception(status)) {
                log_error("cannot start Python: %s", status.err_msg ? status.err_msg : "?");
                return 1;
        }
        if (preload(modules) < 0) {
                log_error("preloading %s failed", modules);
                (void)!write(ZYGOTE_FD, "failed", 6);
                return 1;
        }
        /* fork() copies one thread: a pool started by an import would be
         * missing in every kernel, with its locks held. */
        threads = count_threads();
        if (threads != 1) {
                log_error("preloading %s left %d threads; a zygote must fork with one", modules,
                          threads);
                (void)!write(ZYGOTE_FD, "failed", 6);
                return 1;
        }
        huge = collapse_anonymous();
        log_debug("%lu MiB in huge pages", huge);
        if (write(ZYGOTE_FD, "ready", 5) != 5)
                return 1;
        serve(ZYGOTE_FD, sigfd);
        return 0;
}
