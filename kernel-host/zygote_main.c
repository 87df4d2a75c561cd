/* glovebox-zygote.so: the fork server of one kernelspec (zygote.h).
 *
 * An extension module of the kernelspec's Python, which the kernel-host
 * runs (zygote.c): the interpreter is Debian's own program, which runs
 * Python about a quarter faster than the same Python embedded from
 * libpython3.11.so, built apart and position-independent
 * (docs/performance.md#the-interpreters-own-program). Its main
 * imports ipykernel and the operator's modules once, before any thread
 * exists (the kernel-host sets the BLAS and OpenMP pools to one thread),
 * checks that it is still single-threaded, says "ready" and then only
 * forks: one child per request of the kernel-host. It runs no code of any
 * user and reads nothing but the kernel-host's socket; what a request
 * carries it never reads itself. In a kernel's process main returns, with
 * the kernel's argv and environment, to the interpreter's own command,
 * which runs the kernel as a script would run: Python's own exit ends it. */
#include "autoconf.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernel-host/confine.h"
#include "kernel-host/seccomp.h"
#include "kernel-host/zygote.h"
#include "kernel-host/zygote_core.h"
#include "kernel-host/zygote_pages.h"
#include "kernel-host/zygote_wire.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
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
#include <time.h>
#include <unistd.h>

/* zygote_bootstrap.py, run once in the zygote (the imports every kernel
 * shares, the prebuilt shell, the run function each kernel starts with:
 * that file says what and why), and zygote_kernel.py, the Jupyter loop a
 * kernel runs instead of ipykernel's application where it can: in the
 * binary itself, as display.c keeps its extension, so that the code a
 * sandbox runs is the code reviewed with this build. */
__asm__(".section .rodata\n"
        ".balign 16\n"
        "zygote_bootstrap_py:\n"
        ".incbin \"" GLOVEBOX_SRCDIR "/kernel-host/zygote_bootstrap.py\"\n"
        ".byte 0\n"
        ".balign 16\n"
        "zygote_kernel_py:\n"
        ".incbin \"" GLOVEBOX_SRCDIR "/kernel-host/zygote_kernel.py\"\n"
        ".byte 0\n"
        ".previous\n");
extern const char zygote_bootstrap_py[];
extern const char zygote_kernel_py[];

static char *title_area;
static size_t title_len;
static int cap_last = CAP_LAST_CAP;
static struct sock_fprog filter;
/* Where a kernel's process goes back to main (kernel_main), and what it
 * takes there: the kernel's argv and environment. */
static jmp_buf to_main;
static PyObject *kernel_argv, *kernel_env;
/* The bootstrap's _glovebox_warm, which a process forked ahead calls as it
 * waits (ahead_child); NULL where the bootstrap has none. */
static PyObject *warm_up;
/* The bootstrap's _glovebox_confined, which a process forked ahead calls
 * once confined (ahead_child); NULL where the bootstrap has none. */
static PyObject *on_confined;

/* The bootstrap's _glovebox_rehearse (zygote_pages.h's rehearsal); NULL
 * where it has none. */
static PyObject *rehearsal;

/* The longest the zygote waits for its rehearsal: then it ends it, and
 * goes on without the rehearsal's list. */
#define REHEARSAL_MS 10000

/* One message on sock, of one of the tags: its tag into *tag_out, and
 * exactly max descriptors into fds. 0; 1 for a malformed message (another
 * tag or number of descriptors: its descriptors closed); -1 when the peer
 * is gone. */
static int recv_fds(int sock, const char *tags, char *tag_out, int *fds, size_t max)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * ZYGOTE_NFDS)];
                struct cmsghdr align;
        } control;
        char tag = 0;
        struct iovec iov = {&tag, 1};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.buf,
                             .msg_controllen = sizeof(control.buf)};
        size_t n = 0;
        ssize_t got;

        do {
                got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
        } while (got < 0 && errno == EINTR);
        if (got <= 0)
                return -1;
        *tag_out = tag;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                        continue;
                for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                        int fd;

                        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                        if (n < max)
                                fds[n++] = fd;
                        else
                                close(fd);
                }
        }
        if (!tag || !strchr(tags, tag) || n != max || (msg.msg_flags & MSG_CTRUNC)) {
                while (n > 0)
                        close(fds[--n]);
                return 1;
        }
        return 0;
}

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

/* The kernel's argv and environment for main to return (kernel_argv and
 * kernel_env); the C library's environment is the kernel's. 0, or -1 with
 * a Python exception. */
static int take_kernel(char **argv, char **envp)
{
        size_t argc = 0;

        while (argv[argc])
                argc++;
        kernel_argv = PyTuple_New((Py_ssize_t)argc);
        kernel_env = PyDict_New();
        if (!kernel_argv || !kernel_env)
                return -1;
        for (size_t i = 0; i < argc; i++) {
                PyObject *s = PyUnicode_DecodeFSDefault(argv[i]);

                if (!s)
                        return -1;
                PyTuple_SET_ITEM(kernel_argv, (Py_ssize_t)i, s);
        }
        for (size_t i = 0; envp[i]; i++) {
                const char *eq = strchr(envp[i], '=');
                PyObject *k, *v;
                int rc;

                if (!eq)
                        continue;
                k = PyUnicode_DecodeFSDefaultAndSize(envp[i], eq - envp[i]);
                v = PyUnicode_DecodeFSDefault(eq + 1);
                rc = k && v ? PyDict_SetItem(kernel_env, k, v) : -1;
                Py_XDECREF(k);
                Py_XDECREF(v);
                if (rc < 0)
                        return -1;
        }
        /* os.environ takes the same (_glovebox_set_environ) without a
         * putenv per variable. */
        environ = envp;
        return 0;
}

/* The kernel's process, forked into the sandbox's pid namespace: confines
 * itself (the rest of it, when confined ahead), reports on report_fd, then
 * runs. */
static __attribute__((noreturn)) void kernel_main(const struct confine_sandbox *csb, int output_fd,
                                                  const char *cwd, char **argv, char **envp,
                                                  int report_fd, bool confined)
{
        const int stdio[3] = {-1, output_fd, output_fd};

        /* A kernel: the sandbox's user, on pipes (never root, never a
         * terminal: hostmsg_json.c refuses both for kernels). */
        if (confined) {
                confine_request(csb, stdio, cwd, report_fd);
                if (output_fd > 2)
                        close(output_fd);
        } else
                confine_process(csb, stdio, cwd, false, false, report_fd);
        /* An exec'd kernel is dumpable again after its execve; the id
         * change above made us not. As then, only the sandbox's own user
         * could look, and seccomp denies ptrace anyway. */
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        set_title(argv);
        /* Closed as an execve would close it: the sign that we run. */
        close(report_fd);
        if (take_kernel(argv, envp) < 0) {
                PyErr_Print();
                exit(1);
        }
        /* Back to main's frame, which this process's copy of the zygote's
         * stack still holds: the children ran below it. */
        longjmp(to_main, 1);
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
 * request, writes the connection file as the sandbox's root (as its user
 * when confined ahead: the file is the user's either way), confines
 * itself and runs. Everything a request carries is read here first, in
 * the kernel's own memory. */
static __attribute__((noreturn)) void kernel_request(const struct confine_sandbox *given,
                                                     const int fds[ZYGOTE_NFDS], bool confined)
{
        struct confine_sandbox csb = *given;
        struct zygote_spec spec;
        char *buf = NULL, **s = NULL, **argv, **envp;
        const char *conn_name;
        int report_fd = fds[ZYGOTE_FD_REPORT];
        size_t n = 0;

        confine_hello(report_fd);
        if (read_spec(fds[ZYGOTE_FD_SPEC], &spec, &buf, &s, &n) < 0)
                confine_fail(report_fd, "zygote request", errno);
        /* The request's own (a process forked ahead was given its
         * sandbox's as it was made). */
        csb.privileged = spec.privileged != 0;
        csb.disk_mb = spec.disk_mb;
        csb.pids = spec.pids;
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
                confine_connection_file(&csb, conn_name, s[spec.ndirs + 1], report_fd);
        if (confined) {
                /* What the request brought, but for the report socket and
                 * the output (kernel_main); confine_process closes all. */
                close(fds[ZYGOTE_FD_SPEC]);
                close(fds[ZYGOTE_FD_RUN]);
        }
        kernel_main(&csb, fds[ZYGOTE_FD_OUTPUT], s[spec.ndirs + 2], argv, envp, report_fd,
                    confined);
}

static __attribute__((noreturn)) void kernel_child(const struct confine_sandbox *csb,
                                                   const int fds[ZYGOTE_NFDS])
{
        PyOS_AfterFork_Child();
        kernel_request(csb, fds, false);
}

/* Calls the bootstrap's fn (none: NULL) for what it does, not what it
 * returns; a failure there leaves the start as it would have been. */
static void call_quietly(PyObject *fn)
{
        PyObject *done = fn ? PyObject_CallNoArgs(fn) : NULL;

        if (fn && !done)
                PyErr_Clear();
        Py_XDECREF(done);
}

/* A kernel's process forked ahead (zygote.h): Python's after-fork work
 * done, and its confinement but for what a request decides (confine_ahead:
 * as the sandbox's user, keeping its link and the sandbox's /run/kernel),
 * it waits on its link (fds' report socket) for the rest of a request,
 * then starts as kernel_child does. The link closed or anything else on
 * it: it ends, having run nothing. */
static __attribute__((noreturn)) void ahead_child(const struct confine_sandbox *csb,
                                                  const int fds[ZYGOTE_NFDS])
{
        static char *title[] = {(char *)ZYGOTE_AHEAD_TITLE, NULL};
        int link = fds[ZYGOTE_FD_REPORT];
        int got[ZYGOTE_NFDS];
        char tag;

        PyOS_AfterFork_Child();
        set_title(title);
        /* While nobody waits: the pages its start would write, and the
         * part of its first cell that every kernel does alike (a failure
         * there leaves the kernel's start as it was). */
        zygote_pages_copy();
        call_quietly(warm_up);
        /* Out of the request's path: about 0.5 ms of a start. Nothing of
         * the kernel's has started a thread yet (a thread made before
         * would keep its capabilities and run unfiltered). */
        confine_ahead(csb, link, fds[ZYGOTE_FD_RUN]);
        /* Then what may start threads: they are confined as it is. */
        call_quietly(on_confined);
        memcpy(got, fds, sizeof(got));
        if (recv_fds(link, "S", &tag, got, ZYGOTE_FD_RUN) != 0)
                _exit(0);
        close(link);
        kernel_request(csb, got, true);
}

/* The middle child: vfork()ed in the sandbox's pid namespace, it forks the
 * kernel, which it orphans at once by exiting, so that the kernel becomes
 * a child of the sandbox's init (sandbox.h). It calls nothing of Python's;
 * glibc's fork() runs its handlers' prepare and parent halves in pairs on
 * the memory it shares. One started in the kernel's group (group_fd >= 0,
 * the request child's descriptor of it) joins the rest of the sandbox
 * first and closes that descriptor, which reaches the host's groups. */
static __attribute__((noinline, noreturn)) void
middle_main(const struct confine_sandbox *csb, const int fds[ZYGOTE_NFDS], int group_fd, bool ahead)
{
        pid_t pid;

        confine_join_started(csb, group_fd, NULL, NULL, fds[ZYGOTE_FD_REPORT]);
        pid = fork();

        if (pid < 0)
                confine_fail(fds[ZYGOTE_FD_REPORT], "fork", errno);
        if (pid == 0 && ahead)
                ahead_child(csb, fds);
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
static __attribute__((noinline, noreturn)) void request_main(const int fds[ZYGOTE_NFDS], bool ahead)
{
        struct zygote_spec spec;
        struct confine_sandbox csb;
        char dirs[ZYGOTE_MAX_DIRS_BYTES + 1];
        char *dir[ZYGOTE_MAX_DIRS];
        int report_fd = fds[ZYGOTE_FD_REPORT], status, group_fd;
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
        /* On cgroup v2 the kernel starts in its group rather than moving
         * there: a move waits for an RCU grace period, and the zygote with
         * it. Elsewhere (v1, whose groups are one per hierarchy) it moves. */
        group_fd = confine_join_to_start(&csb, (const char *const *)dir, n, NULL, NULL,
                                         confine_can_start_in_group(), report_fd);
        middle = group_fd >= 0 ? confine_vfork_into(group_fd) : vfork();
        if (middle == 0)
                middle_main(&csb, fds, group_fd, ahead);
        if (middle < 0)
                confine_fail(report_fd, group_fd >= 0 ? "start in cgroup" : "fork", errno);
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

/* Appends the module name to list. 0, or -1 with a Python exception. */
static int append_name(PyObject *list, const char *name)
{
        PyObject *s = PyUnicode_FromString(name);
        int rc = s ? PyList_Append(list, s) : -1;

        Py_XDECREF(s);
        return rc;
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
        if (append_name(list, "ipykernel.kernelapp") < 0)
                goto out;
        for (p = copy; p && *p; p = next) {
                next = strchr(p, ',');
                if (next)
                        *next++ = '\0';
                if (*p && append_name(list, p) < 0)
                        goto out;
        }
        if (PyDict_SetItemString(globals, "_glovebox_preload", list) < 0)
                goto out;
        source = PyUnicode_FromString(zygote_kernel_py);
        if (!source || PyDict_SetItemString(globals, "_glovebox_kernel_source", source) < 0)
                goto out;
        result = PyRun_String(zygote_bootstrap_py, Py_file_input, globals, globals);
        if (!result) {
                PyErr_Print();
                goto out;
        }
        Py_DECREF(result);
        warm_up = PyDict_GetItemString(globals, "_glovebox_warm");
        Py_XINCREF(warm_up);
        on_confined = PyDict_GetItemString(globals, "_glovebox_confined");
        Py_XINCREF(on_confined);
        rehearsal = PyDict_GetItemString(globals, "_glovebox_rehearse");
        Py_XINCREF(rehearsal);
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
 * 512 (about 52 of 100 MiB with numpy, pandas and matplotlib; 2 ms less
 * of the kernel-host's and zygote's CPU per kernel here). A kernel
 * writing to such a page splits only its own mapping and copies 4 KiB, as
 * before. The sysfs THP setting does not apply to MADV_COLLAPSE; a kernel
 * without it (before 6.1) refuses, and forks as before. The MiB moved. */
static unsigned long collapse_anonymous(void)
{
        FILE *f = fopen("/proc/self/maps", "re");
        struct zygote_pages_mapping m;
        unsigned long moved = 0;

        if (!f)
                return 0;
        while (zygote_pages_next_mapping(f, &m)) {
                uint64_t from, to;

                if (strcmp(m.perms, "rw-p") != 0 || m.inode != 0 ||
                    (m.path[0] && strcmp(m.path, "[heap]") != 0))
                        continue;
                from = (m.start + HUGE_SIZE - 1) & ~(HUGE_SIZE - 1);
                to = m.end & ~(HUGE_SIZE - 1);
                for (uint64_t a = from; a < to; a += HUGE_SIZE) {
                        if (madvise((void *)(uintptr_t)a, HUGE_SIZE, MADV_COLLAPSE) == 0)
                                moved++;
                }
        }
        fclose(f);
        return moved * (HUGE_SIZE >> 20);
}

/* Milliseconds since some fixed point. */
static int64_t now_ms(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The rehearsal (zygote_pages.h), once the zygote has loaded everything
 * and before it says it is ready: a child, with a report offered to it
 * and none of the zygote's links, runs the bootstrap's _glovebox_rehearse;
 * the zygote waits for it (sigfd tells of its end), REHEARSAL_MS at most,
 * and takes its list. It runs at the zygote's own priority: a kernel
 * started meanwhile waits for the zygote to be ready. */
static void rehearse(int sigfd)
{
        int64_t deadline = now_ms() + REHEARSAL_MS;
        int status = 0;
        size_t pages;
        pid_t pid;

        if (!rehearsal)
                return;
        zygote_pages_offer_rehearsal();
        PyOS_BeforeFork();
        pid = fork();
        if (pid == 0) {
                static char *title[] = {(char *)ZYGOTE_REHEARSAL_TITLE, NULL};
                PyObject *done;

                PyOS_AfterFork_Child();
                set_title(title);
                close(ZYGOTE_FD);
                close(sigfd);
                prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
                done = PyObject_CallNoArgs(rehearsal);
                if (!done)
                        PyErr_Clear();
                _exit(done == Py_True ? 0 : 1);
        }
        PyOS_AfterFork_Parent();
        zygote_pages_forked();
        while (pid > 0 && waitpid(pid, &status, WNOHANG) == 0) {
                struct pollfd p = {sigfd, POLLIN, 0};
                struct signalfd_siginfo si;
                int64_t left = deadline - now_ms();

                if (left <= 0) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        break;
                }
                if (poll(&p, 1, (int)left) > 0)
                        while (read(sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
                                ;
        }
        pages = zygote_pages_rehearsed();
        if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
                log_debug("a kernel's first requests rehearsed: %zu pages copied ahead", pages);
        else
                log_debug("no rehearsal of a kernel's first requests (status %d)", status);
}

/* Before each fork: a report read if one came, and one offered to the
 * kernel forked next while the zygote has no list (zygote_pages.h). */
static void before_fork(void)
{
        static size_t logged;
        size_t pages = zygote_pages_collect();

        if (pages != logged) {
                logged = pages;
                log_debug("%zu pages of a kernel's start copied ahead from now on", pages);
        }
        zygote_pages_offer();
}

static void serve(int link, int sigfd)
{
        for (;;) {
                struct pollfd pfd[2] = {{link, POLLIN, 0}, {sigfd, POLLIN, 0}};
                int fds[ZYGOTE_NFDS];
                char tag = 0;
                int rc;
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
                /* A kernel to start ('F') or to fork ahead ('A'). */
                rc = recv_fds(link, "FA", &tag, fds, ZYGOTE_NFDS);
                if (rc < 0)
                        return; /* the kernel-host is gone */
                if (rc > 0) {
                        log_error("malformed request dropped");
                        continue;
                }
                before_fork();
                /* Python's fork hooks run as for os.fork(), around the
                 * request's children; only the kernel runs Python. */
                PyOS_BeforeFork();
                pid = vfork();
                if (pid == 0) {
                        close(link);
                        close(sigfd);
                        request_main(fds, tag == 'A');
                }
                PyOS_AfterFork_Parent();
                zygote_pages_forked();
                scrub_stack();
                if (pid < 0) {
                        struct confine_report r;

                        confine_report_init(&r, CONFINE_FAILED);
                        r.error = errno;
                        memcpy(r.step, "zygote fork", 12);
                        confine_report_send(fds[ZYGOTE_FD_REPORT], &r);
                }
                for (size_t i = 0; i < ZYGOTE_NFDS; i++)
                        close(fds[i]);
        }
}

/* The original command line's area (what /proc/PID/cmdline shows), which
 * the interpreter copied at its start and no longer reads: set_title
 * overwrites it with each kernel's argv. */
static void find_title_area(void)
{
        char text[4096], *p;
        unsigned long start = 0, end = 0;
        FILE *f = fopen("/proc/self/stat", "re");
        size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;

        if (f)
                fclose(f);
        text[n] = '\0';
        /* After the name's ")", the fields from the third on: p is left
         * at the space before the 48th, arg_start (the 49th is arg_end). */
        p = strrchr(text, ')');
        for (int field = 3; p && field <= 48; field++)
                p = strchr(p + 1, ' ');
        if (p && sscanf(p, " %lu %lu", &start, &end) == 2 && end > start) {
                title_area = (char *)start;
                title_len = end - start;
        }
}

/* Tells the kernel-host that this zygote will not be ready, and ends it. */
static __attribute__((noreturn)) void failed(void)
{
        (void)!write(ZYGOTE_FD, "failed", 6);
        exit(1);
}
#define FAIL(...)                                                                                  \
        do {                                                                                       \
                log_error(__VA_ARGS__);                                                            \
                failed();                                                                          \
        } while (0)

/* main("MODULE,..."): the zygote's life; never returns in the zygote (it
 * exits when the kernel-host is gone), and returns (argv, environment) in
 * each kernel's process. */
static PyObject *zygote_main(PyObject *self, PyObject *args)
{
        const char *modules;
        PyObject *wire;
        sigset_t mask;
        FILE *f;
        int sigfd, threads;
        unsigned long huge;

        if (!PyArg_ParseTuple(args, "s", &modules))
                return NULL;
        /* The module's descriptor, opened for the interpreter to load it
         * (zygote.c): the kernels must not have it. */
        close(ZYGOTE_MODULE_FD);
        log_set_program("zygote");
        prctl(PR_SET_NAME, ZYGOTE_NAME, 0, 0, 0);
        find_title_area();
        f = fopen("/proc/sys/kernel/cap_last_cap", "re");
        if (f) {
                if (fscanf(f, "%d", &cap_last) != 1)
                        cap_last = CAP_LAST_CAP;
                fclose(f);
        }
        if (seccomp_policy_build(&filter) < 0)
                FAIL("cannot build the seccomp filter");
        /* Asked before any request (it may fork): the requests' children
         * have the answer. */
        (void)confine_can_start_in_group();
        /* Children are reaped from the loop: SIGCHLD through a signalfd. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (sigfd < 0)
                FAIL("cannot make a signalfd");
        /* The kernels' wire in C (zygote_wire.c), for zygote_kernel.py. */
        wire = PyInit__glovebox_wire();
        if (!wire || PyDict_SetItemString(PyImport_GetModuleDict(), "_glovebox_wire", wire) < 0) {
                PyErr_Print();
                FAIL("cannot make _glovebox_wire");
        }
        Py_DECREF(wire);
        /* For zygote_kernel.py, whose kernels call report_pages. */
        if (PyDict_SetItemString(PyImport_GetModuleDict(), "_glovebox_zygote", self) < 0) {
                PyErr_Print();
                FAIL("cannot list _glovebox_zygote");
        }
        if (preload(modules) < 0)
                FAIL("preloading %s failed", modules);
        /* fork() copies one thread: a pool started by an import would be
         * missing in every kernel, with its locks held. */
        threads = count_threads();
        if (threads != 1)
                FAIL("preloading %s left %d threads; a zygote must fork with one", modules,
                     threads);
        /* Before the collapse: what the zygote writes while its
         * rehearsal shares its memory would split huge pages. */
        rehearse(sigfd);
        huge = collapse_anonymous();
        log_debug("%lu MiB in huge pages", huge);
        if (write(ZYGOTE_FD, "ready", 5) != 5)
                exit(1);
        if (setjmp(to_main) != 0) {
                /* A kernel's process (kernel_main): the interpreter's
                 * command runs it. */
                PyObject *result = PyTuple_Pack(2, kernel_argv, kernel_env);

                Py_CLEAR(kernel_argv);
                Py_CLEAR(kernel_env);
                return result;
        }
        serve(ZYGOTE_FD, sigfd);
        /* The kernel-host is gone: so is the zygote, as it ended before,
         * without the interpreter's finalisation. */
        exit(0);
}

/* report_pages(): in a kernel that has a report (zygote_pages.h), lists
 * the pages it has written into it and unmaps it; the ranges listed (0:
 * it has none). zygote_kernel.py calls it once its loop has started. */
static PyObject *zygote_report_pages(PyObject *self, PyObject *unused)
{
        ssize_t n = zygote_pages_report_now();

        return PyLong_FromSsize_t(n > 0 ? n : 0);
}

/* drop_report(): unmaps this kernel's report unwritten; zygote_bootstrap.py
 * calls it before any other program than the zygote's loop runs. */
static PyObject *zygote_drop_report(PyObject *self, PyObject *unused)
{
        zygote_pages_drop();
        Py_RETURN_NONE;
}

static PyMethodDef zygote_methods[] = {
    {"main", zygote_main, METH_VARARGS,
     "main(modules): the zygote's life; returns (argv, env) in a kernel's process."},
    {"report_pages", zygote_report_pages, METH_NOARGS,
     "report_pages(): the pages this kernel's start wrote, told its zygote once."},
    {"drop_report", zygote_drop_report, METH_NOARGS,
     "drop_report(): this kernel's report unmapped, unwritten."},
    {"hold_core", zygote_hold_core, METH_NOARGS,
     "hold_core(): this process kept on its core while the machine is not busy; the cores "
     "it was allowed, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef zygote_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_glovebox_zygote",
    .m_doc = "glovebox-zygote, the fork server of a kernelspec (kernel-host/zygote_main.c).",
    .m_size = -1,
    .m_methods = zygote_methods,
};

PyMODINIT_FUNC PyInit__glovebox_zygote(void);

PyMODINIT_FUNC PyInit__glovebox_zygote(void)
{
        return PyModule_Create(&zygote_module);
}
