#include "autoconf.h"

#include "kernel-host/zygote.h"
#include "kernel-host/homecache.h"
#include "kernel-host/rootfs.h"
#include "kernel-host/sandbox.h"
#include "protocol/buf.h"
#include "protocol/kernelspec.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Importing pandas on a loaded machine, then the rehearsal's bound
 * (zygote_main.c's REHEARSAL_MS). */
#define READY_TIMEOUT_MS 40000
#define MAX_MODULES      1024
#define OUTPUT_LINE_MAX  512   /* a longer line is logged in parts */
#define OUTPUT_READ_MAX  65536 /* bytes per zygote and round */

struct zygote {
        char name[ZYGOTE_MAX_NAME];
        pid_t pid;
        int link;   /* our end of its socket; -1 once it is gone */
        bool ready; /* it said "ready" */
        /* Our end of its stdout and stderr (-1 once closed), and the line
         * read so far: what Python prints there (a module that failed to
         * preload, a library's warning) is logged a line at a time, in
         * the log's own format. */
        int output;
        char line[OUTPUT_LINE_MAX];
        size_t line_len;
};

static struct zygote zygotes[ZYGOTE_MAX];
static size_t nzygotes;
static char python_real[PATH_MAX];

static bool name_ok(const char *s, size_t len)
{
        if (len == 0 || len >= ZYGOTE_MAX_NAME)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];

                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || c == '.'))
                        return false;
        }
        return true;
}

/* Module names: dotted identifiers separated by commas, each perhaps
 * ending in "?" (imported where installed), or nothing. */
static bool modules_ok(const char *s)
{
        size_t len = strlen(s);

        if (len > MAX_MODULES)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];

                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '_' || c == '.' || c == ',' || c == '?'))
                        return false;
        }
        return true;
}

/* The module, readable (an installed one is not executable: data the
 * interpreter maps). */
static int find_module(char *out, size_t size)
{
        return file_beside_self(ZYGOTE_MODULE, R_OK, out, size);
}

/* What the interpreter runs: without the "" that "-c" puts first on
 * sys.path (the zygote imports nothing from its cwd, and its kernels' flags
 * are a cold kernel's), the module, from the descriptor zygote_child leaves
 * open for it (its path may be under /tmp, which the zygote's mount
 * namespace covers), then main (zygote_main.c), which returns only in a
 * kernel's process, with the kernel's argv and environment for the run
 * function the bootstrap defined. It is given the modules to preload:
 * sys.argv[3] of zygote_child's command line. */
static const char zygote_command[] =
    "import _imp, sys\n"
    "del sys.path[0]\n"
    "from importlib.machinery import ModuleSpec\n"
    "_glovebox_zygote = _imp.create_dynamic(ModuleSpec('_glovebox_zygote', None, "
    "origin='/proc/self/fd/4'))\n"
    "_glovebox_kernel = _glovebox_zygote.main(sys.argv[3])\n"
    "_glovebox_run(*_glovebox_kernel)\n";
_Static_assert(ZYGOTE_MODULE_FD == 4, "zygote_command loads the module from descriptor 4");

/* In the forked child, before execve: the zygote's own mount namespace,
 * where /tmp and /home are private tmpfs (its imports may write caches
 * under $HOME, never on the host), dying with us. The kernelspec's
 * interpreter runs the module (zygote_main.c): sys.argv[1] names it, for
 * whoever reads the command line. */
static __attribute__((noreturn)) void zygote_child(const char *module_path, const char *modules,
                                                   int link, int output)
{
        /* Room for a kernel's command line: the kernels overwrite it. */
        static char title[160];
        char *argv[] = {(char *)GLOVEBOX_ZYGOTE_PYTHON,
                        (char *)"-c",
                        (char *)zygote_command,
                        (char *)ZYGOTE_NAME,
                        (char *)"--preload",
                        (char *)modules,
                        (char *)"--title",
                        title,
                        NULL};
        /* The imports see what a kernel's environment says (spawn_args.c's
         * base), and one thread for BLAS and OpenMP: fork() copies one.
         * Not debugpy's warning, at ipykernel's import, that frozen modules
         * may hide breakpoints: the zygote debugs nothing (its kernels get
         * their own environment). */
        char *envp[] = {(char *)"PATH=" ROOTFS_TOOLS_DIR ":/usr/local/bin:/usr/bin:/bin",
                        (char *)"HOME=" ROOTFS_HOME,
                        (char *)"LANG=C.UTF-8",
                        (char *)"TERM=xterm-256color",
                        (char *)"MPLBACKEND=module://matplotlib_inline.backend_inline",
                        (char *)"OPENBLAS_NUM_THREADS=1",
                        (char *)"OMP_NUM_THREADS=1",
                        (char *)"MKL_NUM_THREADS=1",
                        (char *)"NUMEXPR_NUM_THREADS=1",
                        (char *)"PYDEVD_DISABLE_FILE_VALIDATION=1",
                        NULL};
        sigset_t none;
        /* The module is opened before /tmp is covered: the build tree may
         * well be under /tmp. Kept far above the descriptors moved below. */
        int module_fd = open(module_path, O_RDONLY | O_CLOEXEC);
        int module = module_fd < 0 ? -1 : fcntl(module_fd, F_DUPFD_CLOEXEC, ZYGOTE_FD + 16);

        memset(title, ' ', sizeof(title) - 1);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (module < 0)
                _exit(127);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || unshare(CLONE_NEWNS) < 0 ||
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m") < 0 ||
            mount("tmpfs", "/home", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m") < 0 ||
            mkdir(ROOTFS_HOME, 0700) < 0 || chdir(ROOTFS_HOME) < 0)
                _exit(126);
        /* matplotlib's font list, not built again for the zygote. */
        if (homecache_dir())
                homecache_link(homecache_dir(), ROOTFS_HOME, 0);
        /* The module's descriptor stays open across the execve (main
         * closes it once loaded). */
        if (dup2(output, STDOUT_FILENO) < 0 || dup2(output, STDERR_FILENO) < 0 ||
            dup2(link, ZYGOTE_FD) < 0 || dup2(module, ZYGOTE_MODULE_FD) < 0)
                _exit(126);
        syscall(SYS_close_range, ZYGOTE_MODULE_FD + 1, ~0u, 0);
        execve(python_real, argv, envp);
        _exit(127);
}

int zygote_start(const char *spec)
{
        const char *colon = strchr(spec, ':');
        size_t name_len = colon ? (size_t)(colon - spec) : strlen(spec);
        const char *modules = colon ? colon + 1 : "";
        char module[PATH_MAX];
        struct zygote *z;
        int sv[2], out[2] = {-1, -1}, rc;
        pid_t pid;

        if (!name_ok(spec, name_len) || !modules_ok(modules)) {
                log_error("--zygote %s: expected NAME:MODULE,MODULE,...", spec);
                return -EINVAL;
        }
        if (nzygotes == ZYGOTE_MAX) {
                log_error("--zygote %s: at most %d zygotes", spec, ZYGOTE_MAX);
                return -E2BIG;
        }
        if (geteuid() != 0) {
                log_warn("zygote %.*s needs a kernel-host running as root: its kernels start cold",
                         (int)name_len, spec);
                return -EPERM;
        }
        if (find_module(module, sizeof(module)) < 0) {
                log_warn("no " ZYGOTE_MODULE " beside the kernel-host: kernels start cold");
                return -ENOENT;
        }
        if (!python_real[0] && !realpath(GLOVEBOX_ZYGOTE_PYTHON, python_real)) {
                log_warn("zygote: %s: %s", GLOVEBOX_ZYGOTE_PYTHON, strerror(errno));
                return -errno;
        }
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        if (pipe2(out, O_CLOEXEC) < 0 || fcntl(out[0], F_SETFL, O_NONBLOCK) < 0) {
                rc = -errno;
                goto fail;
        }
        pid = fork();
        if (pid < 0) {
                rc = -errno;
                goto fail;
        }
        if (pid == 0)
                zygote_child(module, modules, sv[1], out[1]);
        close(sv[1]);
        close(out[1]);
        z = &zygotes[nzygotes++];
        memset(z, 0, sizeof(*z));
        memcpy(z->name, spec, name_len);
        z->pid = pid;
        z->link = sv[0];
        z->output = out[0];
        log_info("zygote %s started (pid %d, %s), preloading %s", z->name, (int)pid, module,
                 modules[0] ? modules : "ipykernel only");
        return 0;
fail:
        close(sv[0]);
        close(sv[1]);
        if (out[0] >= 0)
                close(out[0]);
        if (out[1] >= 0)
                close(out[1]);
        return rc;
}

/* Logs the line read so far, its bytes outside printable ASCII as '?'. */
static void output_line(struct zygote *z)
{
        for (size_t i = 0; i < z->line_len; i++) {
                if (z->line[i] < 0x20 || z->line[i] > 0x7e)
                        z->line[i] = '?';
        }
        z->line[z->line_len] = '\0';
        if (z->line_len)
                log_warn("zygote %s: %s", z->name, z->line);
        z->line_len = 0;
}

/* Reads what z's output holds (at most OUTPUT_READ_MAX, so that one
 * zygote cannot hold up the loop), logging each whole line; at its end,
 * the rest, and the pipe is closed. */
static void output_read(struct zygote *z)
{
        char buf[4096];
        size_t total = 0;
        ssize_t n = 0;

        while (z->output >= 0 && total < OUTPUT_READ_MAX) {
                n = read(z->output, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                total += (size_t)n;
                for (ssize_t i = 0; i < n; i++) {
                        if (buf[i] == '\n') {
                                output_line(z);
                                continue;
                        }
                        z->line[z->line_len++] = buf[i];
                        if (z->line_len == sizeof(z->line) - 1)
                                output_line(z);
                }
        }
        if (z->output >= 0 && (n == 0 || (n < 0 && errno != EAGAIN))) {
                output_line(z);
                close(z->output);
                z->output = -1;
        }
}

size_t zygote_output_fds(struct pollfd *fds, size_t max)
{
        size_t n = 0;

        for (size_t i = 0; i < nzygotes && n < max; i++) {
                if (zygotes[i].output >= 0)
                        fds[n++] = (struct pollfd){zygotes[i].output, POLLIN, 0};
        }
        return n;
}

void zygote_read_output(void)
{
        for (size_t i = 0; i < nzygotes; i++)
                output_read(&zygotes[i]);
}

static struct zygote *zygote_find(const char *name)
{
        for (size_t i = 0; i < nzygotes; i++) {
                if (zygotes[i].link >= 0 && strcmp(zygotes[i].name, name) == 0)
                        return &zygotes[i];
        }
        return NULL;
}

static void zygote_lost(struct zygote *z, const char *why)
{
        log_warn("zygote %s: %s; its kernels start cold", z->name, why);
        close(z->link);
        z->link = -1;
        if (z->pid > 0)
                kill(z->pid, SIGKILL);
}

/* Whether the zygote's end of its socket is closed: it is gone. */
static bool zygote_hung_up(const struct zygote *z)
{
        struct pollfd p = {z->link, 0, 0};

        return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

/* Waits for the zygote's "ready", the first time. */
static int zygote_wait_ready(struct zygote *z)
{
        struct pollfd p[2] = {{z->link, POLLIN, 0}, {z->output, POLLIN, 0}};
        struct timespec start, now;
        char word[16];
        ssize_t n;
        int rc;

        if (z->ready)
                return 0;
        clock_gettime(CLOCK_MONOTONIC, &start);
        /* What it prints as it imports is read meanwhile: a full pipe
         * would stop it short of "ready". */
        for (;;) {
                long left;

                clock_gettime(CLOCK_MONOTONIC, &now);
                left = READY_TIMEOUT_MS - ((now.tv_sec - start.tv_sec) * 1000 +
                                           (now.tv_nsec - start.tv_nsec) / 1000000);
                p[1].fd = z->output;
                rc = left <= 0 ? 0 : poll(p, 2, (int)left);
                if (rc < 0 && errno == EINTR)
                        continue;
                if (rc > 0 && p[1].revents) {
                        output_read(z);
                        if (!p[0].revents)
                                continue;
                }
                break;
        }
        if (rc <= 0) {
                zygote_lost(z, "not ready in time");
                return -ENOENT;
        }
        n = recv(z->link, word, sizeof(word), MSG_DONTWAIT);
        if (n != 5 || memcmp(word, "ready", 5) != 0) {
                zygote_lost(z, "preloading failed (see its log)");
                return -ENOENT;
        }
        z->ready = true;
        return 0;
}

bool zygote_fits(const char *name, char *const *argv, char *const *envp)
{
        char real[PATH_MAX];

        if (!name || !name[0] || !zygote_find(name))
                return false;
        if (!argv[0] || !argv[1] || !argv[2] || strcmp(argv[1], "-m") != 0 || !argv[2][0])
                return false;
        if (!realpath(argv[0], real) || strcmp(real, python_real) != 0)
                return false;
        for (size_t i = 0; envp[i]; i++) {
                /* spawn_args.c's own base sets these to what the zygote has. */
                if (strcmp(envp[i], "LANG=C.UTF-8") == 0 ||
                    strcmp(envp[i], "MPLBACKEND=module://matplotlib_inline.backend_inline") == 0)
                        continue;
                if (jp_env_read_at_start(envp[i]))
                        return false;
        }
        return true;
}

static int append(char **buf, size_t *len, size_t *cap, const void *data, size_t n)
{
        if (*len + n > ZYGOTE_MAX_SPEC)
                return -E2BIG;
        if (*len + n > *cap) {
                size_t want = (*len + n) * 2;
                char *grown = realloc(*buf, want);

                if (!grown)
                        return -ENOMEM;
                *buf = grown;
                *cap = want;
        }
        memcpy(*buf + *len, data, n);
        *len += n;
        return 0;
}

static int append_str(char **buf, size_t *len, size_t *cap, const char *s)
{
        return append(buf, len, cap, s ? s : "", strlen(s ? s : "") + 1);
}

/* The request's memfd, sealed, so that the child reads exactly what we
 * wrote: for ex, or with cg's directories alone (ex NULL) for a process
 * forked ahead. */
static int build_spec(const struct sandbox *sb, const struct kernel_cgroup *cg,
                      const struct sandbox_exec *ex)
{
        struct zygote_spec spec = {.magic = ZYGOTE_SPEC_MAGIC,
                                   .privileged = sb->ids.privileged,
                                   .disk_mb = sb->limits.disk_mb,
                                   .pids = sb->limits.pids};
        char *buf = NULL;
        size_t len = 0, cap = 0, done = 0;
        int fd = -1, rc = 0;

        spec.ndirs = cg->ndirs;
        while (ex && ex->argv[spec.nargv])
                spec.nargv++;
        while (ex && ex->envp[spec.nenv])
                spec.nenv++;
        rc = append(&buf, &len, &cap, &spec, sizeof(spec));
        for (unsigned i = 0; rc == 0 && i < spec.ndirs; i++)
                rc = append_str(&buf, &len, &cap, cg->dirs[i]);
        if (rc == 0 && (spec.ndirs > ZYGOTE_MAX_DIRS || len - sizeof(spec) > ZYGOTE_MAX_DIRS_BYTES))
                rc = -ENAMETOOLONG;
        if (rc == 0) {
                spec.dirs_bytes = (uint32_t)(len - sizeof(spec));
                memcpy(buf, &spec, sizeof(spec));
        }
        if (rc == 0 && ex)
                rc = append_str(&buf, &len, &cap, ex->conn_name);
        if (rc == 0 && ex)
                rc = append_str(&buf, &len, &cap, ex->conn_text);
        if (rc == 0 && ex)
                rc = append_str(&buf, &len, &cap, ex->cwd);
        for (unsigned i = 0; rc == 0 && i < spec.nargv; i++)
                rc = append_str(&buf, &len, &cap, ex->argv[i]);
        for (unsigned i = 0; rc == 0 && i < spec.nenv; i++)
                rc = append_str(&buf, &len, &cap, ex->envp[i]);
        if (rc < 0)
                goto out;
        fd = memfd_create("glovebox-zygote-request", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0) {
                rc = -errno;
                goto out;
        }
        while (done < len) {
                ssize_t n = write(fd, buf + done, len - done);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        rc = n < 0 ? -errno : -EIO;
                        goto out;
                }
                done += (size_t)n;
        }
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                rc = -errno;
out:
        free(buf);
        if (rc < 0 && fd >= 0)
                close(fd);
        return rc < 0 ? rc : fd;
}

static void fail_set(struct hostmsg_failed *fail, const char *step, int error)
{
        snprintf(fail->step, sizeof(fail->step), "%s", step);
        fail->error = error;
        snprintf(fail->message, sizeof(fail->message), "zygote step \"%s\" failed: %s", step,
                 strerror(error));
}

/* One message of tag with n descriptors on sock (the zygote's link or a
 * process's forked ahead). 0 or -errno. */
static int send_fds(int sock, char tag, const int *fds, size_t n)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * ZYGOTE_NFDS)];
                struct cmsghdr align;
        } control;
        struct iovec iov = {&tag, 1};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.buf,
                             .msg_controllen = sizeof(control.buf)};
        struct cmsghdr *c;
        ssize_t sent;

        if (n > ZYGOTE_NFDS)
                return -EINVAL;
        memset(control.buf, 0, sizeof(control.buf));
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
        c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
        do {
                sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
        } while (sent < 0 && errno == EINTR);
        return sent == 1 ? 0 : sent < 0 ? -errno : -EIO;
}

/* The sandbox's descriptors of a request: its /run/kernel and namespaces. */
static void sandbox_fds(const struct sandbox *sb, int fds[ZYGOTE_NFDS])
{
        fds[ZYGOTE_FD_RUN] = sb->run_fd;
        for (int i = 0; i < CONFINE_NAMESPACES; i++)
                fds[ZYGOTE_FD_NS + i] = sb->ns_fds[i];
}

struct zygote_ahead {
        int link;                   /* our end of the process's link */
        pid_t zygote;               /* the zygote it was forked from */
        char name[ZYGOTE_MAX_NAME]; /* that zygote's */
};

/* Sends the request for ex, to zygote z, or over a's link to the process
 * forked ahead (a not NULL): *fd is where the kernel's report is read.
 * -ENOENT when neither can take it. */
static int start(struct zygote *z, struct zygote_ahead *a, const struct sandbox *sb,
                 const struct sandbox_exec *ex, int *fd, struct hostmsg_failed *fail)
{
        int fds[ZYGOTE_NFDS];
        int report[2] = {-1, -1};
        int spec_fd = -1;
        int rc;

        spec_fd = build_spec(sb, ex->cgroup, ex);
        if (spec_fd < 0) {
                rc = spec_fd;
                fail_set(fail, "request", -rc);
                goto out;
        }
        /* The kernel itself reports on it: its hello carries its host
         * pid in the credentials, then it closes the socket as it runs,
         * or reports the step that failed (confine.h). */
        rc = confine_exec_socket(report);
        if (rc < 0) {
                fail_set(fail, "socketpair", -rc);
                goto out;
        }
        fds[ZYGOTE_FD_SPEC] = spec_fd;
        fds[ZYGOTE_FD_REPORT] = report[1];
        fds[ZYGOTE_FD_OUTPUT] = ex->stdio[1];
        sandbox_fds(sb, fds);
        if (a) {
                /* It has the sandbox's already. */
                rc = send_fds(a->link, 'S', fds, ZYGOTE_FD_RUN);
                if (rc < 0)
                        rc = -ENOENT; /* it died waiting */
        } else {
                rc = send_fds(z->link, 'F', fds, ZYGOTE_NFDS);
                if (rc < 0) {
                        zygote_lost(z, "its socket failed");
                        rc = -ENOENT;
                }
        }
        if (rc == 0) {
                *fd = report[0];
                report[0] = -1;
        }
out:
        if (spec_fd >= 0)
                close(spec_fd);
        if (report[0] >= 0)
                close(report[0]);
        if (report[1] >= 0)
                close(report[1]);
        return rc;
}

int zygote_exec(const char *name, const struct sandbox *sb, const struct sandbox_exec *ex, int *fd,
                struct hostmsg_failed *fail)
{
        struct zygote *z = zygote_find(name);

        *fd = -1;
        /* A zygote's child confines itself as an exec'd kernel does: the
         * sandbox's user, output on a pipe. Anything else starts cold. */
        if (ex->tty || ex->as_root)
                return -ENOENT;
        if (!z || zygote_wait_ready(z) < 0)
                return -ENOENT;
        return start(z, NULL, sb, ex, fd, fail);
}

int zygote_exec_end(const char *name, bool ahead, int rc, const struct confine_report *r,
                    const struct sandbox_exec *ex, struct sandbox_process *proc,
                    struct hostmsg_failed *fail)
{
        struct zygote *z = zygote_find(name);
        const char *step;

        memset(proc, 0, sizeof(*proc));
        if (rc == -EPIPE && ahead) {
                /* It took the request and died before its hello (its
                 * group is the caller's to clear): nothing started. */
                return -ENOENT;
        }
        if (rc == -EPIPE && (!z || zygote_hung_up(z))) {
                /* It died with our request: whatever of the request ran
                 * joined the kernel's group first, and goes with it. */
                cgroup_kill((struct kernel_cgroup *)ex->cgroup, 0);
                if (z)
                        zygote_lost(z, "gone");
                return -ENOENT;
        }
        rc = confine_wait_outcome(rc, r, &step);
        if (rc < 0) {
                fail_set(fail, step, -rc);
                return rc;
        }
        proc->pid = r->pid;
        proc->nspid = r->nspid;
        return 0;
}

int zygote_ahead(const char *name, const struct sandbox *sb, struct zygote_ahead **out)
{
        struct zygote *z = zygote_find(name);
        struct kernel_cgroup group;
        struct zygote_ahead *a;
        char err[HOSTMSG_ERROR_SIZE];
        int fds[ZYGOTE_NFDS];
        int link[2] = {-1, -1};
        int spec_fd = -1, rc;

        *out = NULL;
        /* Not waited for here: a zygote still importing is left to its
         * first request. */
        if (!z || !z->ready)
                return -ENOENT;
        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->link = -1;
        rc = cgroup_create_child(&sb->cgroup, ZYGOTE_AHEAD_GROUP, &group, err, sizeof(err));
        if (rc < 0) {
                log_debug("no kernel forked ahead: %s", err);
                free(a);
                return rc;
        }
        spec_fd = build_spec(sb, &group, NULL);
        rc = spec_fd < 0 ? spec_fd : confine_exec_socket(link);
        if (rc >= 0) {
                fds[ZYGOTE_FD_SPEC] = spec_fd;
                fds[ZYGOTE_FD_REPORT] = fds[ZYGOTE_FD_OUTPUT] = link[1];
                sandbox_fds(sb, fds);
                rc = send_fds(z->link, 'A', fds, ZYGOTE_NFDS);
                if (rc < 0)
                        zygote_lost(z, "its socket failed");
        }
        if (spec_fd >= 0)
                close(spec_fd);
        if (link[1] >= 0)
                close(link[1]);
        if (rc < 0) {
                if (link[0] >= 0)
                        close(link[0]);
                cgroup_destroy(&group);
                free(a);
                return rc;
        }
        a->link = link[0];
        a->zygote = z->pid;
        snprintf(a->name, sizeof(a->name), "%s", name);
        *out = a;
        return 0;
}

int zygote_exec_ahead(struct zygote_ahead *a, const char *name, const struct sandbox *sb,
                      const struct sandbox_exec *ex, int *fd, struct hostmsg_failed *fail)
{
        struct zygote *z = zygote_find(name);

        *fd = -1;
        /* The zygote it came from, still there: a process of another, or
         * of one gone since (its kernels start cold), serves nothing. */
        if (ex->tty || ex->as_root || !z || !z->ready || strcmp(a->name, name) != 0 ||
            a->zygote != z->pid)
                return -ENOENT;
        return start(NULL, a, sb, ex, fd, fail);
}

void zygote_ahead_free(struct zygote_ahead *a)
{
        if (!a)
                return;
        if (a->link >= 0)
                close(a->link);
        free(a);
}

bool zygote_reaped(pid_t pid, int status)
{
        for (size_t i = 0; i < nzygotes; i++) {
                if (zygotes[i].pid == pid) {
                        zygotes[i].pid = 0;
                        if (zygotes[i].link >= 0) {
                                log_warn("zygote %s ended (status %d)", zygotes[i].name, status);
                                zygote_lost(&zygotes[i], "gone");
                        }
                        return true;
                }
        }
        return false;
}

void zygote_stop_all(void)
{
        for (size_t i = 0; i < nzygotes; i++) {
                if (zygotes[i].link >= 0)
                        close(zygotes[i].link);
                zygotes[i].link = -1;
                if (zygotes[i].pid > 0)
                        kill(zygotes[i].pid, SIGKILL);
        }
}
