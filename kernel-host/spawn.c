#include "autoconf.h"

#include "kernel-host/spawn.h"
#include "kernel-host/seccomp.h"
#include "protocol/connfile.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CONNECTION_FILE "connection.json"
#define IPC_DIR         "ipc"  /* sockets and connection file */
#define ROOT_DIR        "root" /* the sandbox's root mount point */
#define HOME_DIR        "home" /* the home of an unsandboxed kernel */

/* As root, sandbox n runs as host ids ID_BASE + id_offset + 2n (its root)
 * and + 2n + 1 ("user"): ids no other account uses, different for every
 * sandbox and, through id_offset, for every running gateway. */
#define ID_BASE   1000000u
#define MAX_SLOTS 32768

static struct sock_fprog seccomp_program;
static unsigned id_offset;
static unsigned char slots[MAX_SLOTS];

int spawn_init(void)
{
        int rc = seccomp_policy_build(&seccomp_program);

        if (rc < 0) {
                log_error("cannot build the seccomp filter: %s", strerror(-rc));
                return rc;
        }
        id_offset = ((unsigned)getpid() % 16384u) * 2u * MAX_SLOTS;
        return 0;
}

static int slot_take(void)
{
        for (int i = 0; i < MAX_SLOTS; i++) {
                if (!slots[i]) {
                        slots[i] = 1;
                        return i;
                }
        }
        return -1;
}

static void slot_release(int slot)
{
        if (slot >= 0 && slot < MAX_SLOTS)
                slots[slot] = 0;
}

/* What the child reports through the sync pipe when a step fails. */
struct child_failure {
        char step[32];
        int error;
};

/* Everything the child needs, built before fork so that the child only
 * makes async-signal-safe calls. */
struct child_plan {
        char **argv;
        char **envp;
        char home[PATH_MAX];
        int sync_fd;
        int null_fd; /* the kernel's stdin, and stdout/stderr unless debugging */
};

static void fail_set(struct hostmsg_failed *fail, const char *id, const char *step, int error,
                     const char *detail)
{
        snprintf(fail->kernel_id, sizeof(fail->kernel_id), "%s", id);
        snprintf(fail->step, sizeof(fail->step), "%s", step);
        fail->error = error;
        snprintf(fail->message, sizeof(fail->message), "%s failed: %s%s%s", step, strerror(error),
                 detail ? ": " : "", detail ? detail : "");
}

static void free_strv(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

/* Replaces "{connection_file}" and "{resource_dir}" as jupyter_client does. */
static char *expand_arg(const char *arg, const char *connection_file, const char *resource_dir)
{
        static const struct {
                const char *name;
                size_t len;
        } vars[] = {{"{connection_file}", 17}, {"{resource_dir}", 14}};
        char out[HOSTMSG_MAX_STRING + PATH_MAX * 2];
        size_t o = 0;

        for (const char *p = arg; *p;) {
                const char *value = NULL;
                size_t skip = 0;

                for (size_t v = 0; v < 2; v++) {
                        if (strncmp(p, vars[v].name, vars[v].len) == 0) {
                                value = v == 0 ? connection_file : resource_dir;
                                skip = vars[v].len;
                        }
                }
                if (!value) {
                        value = p;
                        skip = 1;
                }
                size_t vlen = value == p ? 1 : strlen(value);

                if (o + vlen >= sizeof(out))
                        return NULL;
                memcpy(out + o, value, vlen);
                o += vlen;
                p += skip;
        }
        out[o] = '\0';
        return strdup(out);
}

/* A bare program name is looked up in the kernel's PATH here, before fork,
 * because the child may only make async-signal-safe calls. */
static char *resolve_program(const char *name)
{
        static const char *const dirs[] = {"/usr/local/bin", "/usr/bin", "/bin"};
        char path[PATH_MAX];

        if (strchr(name, '/'))
                return strdup(name);
        for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                if ((size_t)snprintf(path, sizeof(path), "%s/%s", dirs[i], name) < sizeof(path) &&
                    access(path, X_OK) == 0)
                        return strdup(path);
        }
        return strdup(name);
}

static char **build_argv(const struct hostmsg_start *req, const char *connection_file)
{
        size_t n = 0;
        char **argv;

        while (req->argv[n])
                n++;
        argv = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; argv && i < n; i++) {
                argv[i] = i == 0 ? resolve_program(req->argv[0])
                                 : expand_arg(req->argv[i], connection_file, req->kernelspec_dir);
                if (!argv[i]) {
                        free_strv(argv);
                        return NULL;
                }
        }
        return argv;
}

static int env_has(char **envp, size_t n, const char *entry)
{
        size_t name_len = strcspn(entry, "=");

        for (size_t i = 0; i < n; i++) {
                if (strncmp(envp[i], entry, name_len + 1) == 0)
                        return (int)i;
        }
        return -1;
}

/* The kernel's whole environment: a fixed base, then the request's entries
 * (kernelspec env and the client's, validated by the gateway), which may
 * override the base except HOME. Nothing of our own environment leaks. */
static char **build_env(const struct hostmsg_start *req, const char *home)
{
        char home_entry[PATH_MAX + 8];
        const char *base[] = {
                "PATH=/usr/local/bin:/usr/bin:/bin",
                home_entry,
                "LANG=C.UTF-8",
                "TERM=xterm-256color",
                "MPLBACKEND=module://matplotlib_inline.backend_inline",
        };
        size_t nbase = sizeof(base) / sizeof(base[0]);
        size_t nreq = 0, n = 0;
        char **envp;

        snprintf(home_entry, sizeof(home_entry), "HOME=%s", home);
        while (req->env[nreq])
                nreq++;
        envp = calloc(nbase + nreq + 1, sizeof(char *));
        if (!envp)
                return NULL;
        for (size_t i = 0; i < nbase; i++) {
                envp[n] = strdup(base[i]);
                if (!envp[n++])
                        goto fail;
        }
        for (size_t i = 0; i < nreq; i++) {
                int at = env_has(envp, n, req->env[i]);
                char *copy;

                if (strncmp(req->env[i], "HOME=", 5) == 0)
                        continue;
                copy = strdup(req->env[i]);
                if (!copy)
                        goto fail;
                if (at >= 0) {
                        free(envp[at]);
                        envp[at] = copy;
                } else {
                        envp[n++] = copy;
                }
        }
        return envp;
fail:
        free_strv(envp);
        return NULL;
}

/* Runs in the child. Only async-signal-safe calls from here to execve; a
 * failure is written to the sync pipe and the child exits. */
static void child_fail(int fd, const char *step, int error)
{
        struct child_failure f = {.error = error};
        size_t len = strlen(step);

        memcpy(f.step, step, len < sizeof(f.step) - 1 ? len : sizeof(f.step) - 1);
        (void)!write(fd, &f, sizeof(f));
        _exit(127);
}

static void close_other_fds(int keep)
{
        /* The kernel must not inherit the gateway link or anything else. */
        for (int fd = 3; fd < 1024; fd++) {
                if (fd != keep)
                        close(fd);
        }
}

static void child_exec(const struct child_plan *plan)
{
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        /* Its own session and process group, so an interrupt (SIGINT to the
         * group) reaches the kernel and whatever it started, and nothing else. */
        if (setsid() < 0)
                child_fail(plan->sync_fd, "setsid", errno);
        /* Kernels talk over ZMQ; what they print to stdio is noise (kept
         * when debugging). */
        if (dup2(plan->null_fd, 0) < 0 ||
            (log_threshold > LOG_LEVEL_DEBUG &&
             (dup2(plan->null_fd, 1) < 0 || dup2(plan->null_fd, 2) < 0)))
                child_fail(plan->sync_fd, "stdio", errno);
        close_other_fds(plan->sync_fd);
        if (chdir(plan->home) < 0)
                child_fail(plan->sync_fd, "chdir", errno);
        execve(plan->argv[0], plan->argv, plan->envp);
        child_fail(plan->sync_fd, "exec", errno);
}

static int remove_tree_at(int dirfd)
{
        int fd = dup(dirfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *de;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        while ((de = readdir(d)) != NULL) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (unlinkat(dirfd, de->d_name, 0) == 0 || errno != EISDIR)
                        continue;
                int sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

                if (sub >= 0) {
                        remove_tree_at(sub);
                        close(sub);
                }
                unlinkat(dirfd, de->d_name, AT_REMOVEDIR);
        }
        closedir(d);
        return 0;
}

static void spawn_cleanup(const struct kernel_proc *proc)
{
        int fd = open(proc->run_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (fd >= 0) {
                remove_tree_at(fd);
                close(fd);
        }
        if (rmdir(proc->run_dir) < 0 && errno != ENOENT)
                klog_warn(proc->kernel_id, "cannot remove %s: %s", proc->run_dir, strerror(errno));
}

/* Writes the connection file into ipc_dir, readable by the kernel's user
 * only. ip is the socket path prefix as the kernel sees it. */
static int write_connection(const struct hostmsg_start *req, const char *ipc_dir, const char *ip,
                            uid_t uid, gid_t gid)
{
        struct jp_connection conn = {.transport = "ipc", .signature_scheme = "hmac-sha256"};
        char path[PATH_MAX + 32];
        int rc;

        snprintf(conn.ip, sizeof(conn.ip), "%s", ip);
        snprintf(conn.key, sizeof(conn.key), "%s", req->key);
        for (int i = 0; i < JP_CHANNEL_COUNT; i++)
                conn.ports[i] = HOSTMSG_PORT(i);
        snprintf(path, sizeof(path), "%s/" CONNECTION_FILE, ipc_dir);
        rc = jp_connection_write(&conn, path);
        if (rc == 0 && chown(path, uid, gid) < 0)
                rc = -errno;
        return rc;
}

static int start_unsandboxed(struct child_plan *plan, struct kernel_proc *proc,
                             struct hostmsg_failed *fail)
{
        struct child_failure child = {0};
        int sync[2] = {-1, -1};
        ssize_t got;
        pid_t pid;
        int rc;

        plan->null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (plan->null_fd < 0 || pipe2(sync, O_CLOEXEC) < 0) {
                rc = -errno;
                fail_set(fail, proc->kernel_id, "pipe", errno, NULL);
                goto out;
        }
        plan->sync_fd = sync[1];
        pid = fork();
        if (pid < 0) {
                rc = -errno;
                fail_set(fail, proc->kernel_id, "fork", errno, NULL);
                goto out;
        }
        if (pid == 0)
                child_exec(plan);
        close(sync[1]);
        sync[1] = -1;
        /* EOF means execve succeeded (the pipe closed on exec). */
        do {
                got = read(sync[0], &child, sizeof(child));
        } while (got < 0 && errno == EINTR);
        if (got == (ssize_t)sizeof(child)) {
                child.step[sizeof(child.step) - 1] = '\0';
                waitpid(pid, NULL, 0);
                rc = -child.error;
                fail_set(fail, proc->kernel_id, child.step, child.error, plan->argv[0]);
                goto out;
        }
        proc->pid = pid;
        rc = 0;
out:
        if (plan->null_fd >= 0)
                close(plan->null_fd);
        if (sync[0] >= 0)
                close(sync[0]);
        if (sync[1] >= 0)
                close(sync[1]);
        return rc;
}

int spawn_kernel(const struct hostmsg_start *req, const char *runtime_dir,
                 struct kernel_proc *proc, struct hostmsg_started *started,
                 struct hostmsg_failed *fail)
{
        struct child_plan plan = {.sync_fd = -1, .null_fd = -1};
        struct sandbox_request sreq = {.start = req, .seccomp = &seccomp_program};
        char ipc_dir[PATH_MAX + 8], path[PATH_MAX + 16], ip[PATH_MAX + 16];
        const char *connection_file, *home;
        int rc;

        memset(proc, 0, sizeof(*proc));
        proc->slot = -1;
        proc->sandboxed = req->sandbox;
        snprintf(proc->kernel_id, sizeof(proc->kernel_id), "%s", req->kernel_id);
        if ((size_t)snprintf(proc->run_dir, sizeof(proc->run_dir), "%s/%s", runtime_dir,
                             req->kernel_id) >= sizeof(proc->run_dir) - 64) {
                fail_set(fail, req->kernel_id, "run-dir", ENAMETOOLONG, NULL);
                return -ENAMETOOLONG;
        }
        /* Searchable by all: the sandbox's setup runs as an unprivileged
         * host id and must reach its mount points; nothing here is listable. */
        if (mkdir(proc->run_dir, 0711) < 0) {
                rc = -errno;
                fail_set(fail, req->kernel_id, "run-dir", errno, NULL);
                return rc;
        }
        snprintf(ipc_dir, sizeof(ipc_dir), "%s/" IPC_DIR, proc->run_dir);
        if (mkdir(ipc_dir, 0700) < 0) {
                rc = -errno;
                fail_set(fail, req->kernel_id, "ipc-dir", errno, NULL);
                goto fail;
        }
        sreq.run_dir = proc->run_dir;
        sreq.ipc_dir = ipc_dir;
        sreq.quiet = log_threshold > LOG_LEVEL_DEBUG;
        sreq.ids.user_uid = getuid();
        sreq.ids.user_gid = getgid();
        if (proc->sandboxed) {
                if (geteuid() == 0) {
                        proc->slot = slot_take();
                        if (proc->slot < 0) {
                                rc = -EAGAIN;
                                fail_set(fail, req->kernel_id, "host ids", EAGAIN, NULL);
                                goto fail;
                        }
                        sreq.ids.privileged = true;
                        sreq.ids.setup_uid = ID_BASE + id_offset + 2u * (unsigned)proc->slot;
                        sreq.ids.user_uid = sreq.ids.setup_uid + 1;
                        sreq.ids.setup_gid = sreq.ids.setup_uid;
                        sreq.ids.user_gid = sreq.ids.user_uid;
                }
                snprintf(path, sizeof(path), "%s/" ROOT_DIR, proc->run_dir);
                if (mkdir(path, 0755) < 0 || chown(ipc_dir, sreq.ids.user_uid,
                                                   sreq.ids.user_gid) < 0) {
                        rc = -errno;
                        fail_set(fail, req->kernel_id, "run-dir", errno, NULL);
                        goto fail;
                }
                snprintf(ip, sizeof(ip), SANDBOX_RUN_DIR "/kernel");
                connection_file = SANDBOX_RUN_DIR "/" CONNECTION_FILE;
                home = SANDBOX_HOME;
        } else {
                snprintf(ip, sizeof(ip), "%s/kernel", ipc_dir);
                snprintf(path, sizeof(path), "%s/" CONNECTION_FILE, ipc_dir);
                snprintf(plan.home, sizeof(plan.home), "%s/" HOME_DIR, proc->run_dir);
                if (mkdir(plan.home, 0700) < 0) {
                        rc = -errno;
                        fail_set(fail, req->kernel_id, "home-dir", errno, NULL);
                        goto fail;
                }
                connection_file = path;
                home = plan.home;
        }
        if (strlen(ipc_dir) + 16 > sizeof(((struct jp_connection *)0)->ip)) {
                rc = -ENAMETOOLONG;
                fail_set(fail, req->kernel_id, "run-dir", ENAMETOOLONG, "socket path too long");
                goto fail;
        }
        rc = write_connection(req, ipc_dir, ip, sreq.ids.user_uid, sreq.ids.user_gid);
        if (rc < 0) {
                fail_set(fail, req->kernel_id, "connection-file", -rc, NULL);
                goto fail;
        }
        plan.argv = build_argv(req, connection_file);
        plan.envp = build_env(req, home);
        if (!plan.argv || !plan.envp) {
                rc = -ENOMEM;
                fail_set(fail, req->kernel_id, "prepare", ENOMEM, NULL);
                goto fail;
        }
        if (proc->sandboxed) {
                sreq.argv = plan.argv;
                sreq.envp = plan.envp;
                rc = sandbox_start(&sreq, &proc->sandbox, fail);
                snprintf(fail->kernel_id, sizeof(fail->kernel_id), "%s", req->kernel_id);
                proc->pid = proc->sandbox.init_pid;
        } else {
                rc = start_unsandboxed(&plan, proc, fail);
        }
        if (rc < 0)
                goto fail;
        snprintf(started->kernel_id, sizeof(started->kernel_id), "%s", req->kernel_id);
        started->pid = proc->pid;
        snprintf(started->ipc_prefix, sizeof(started->ipc_prefix), "%s/kernel", ipc_dir);
        goto out;
fail:
        spawn_cleanup(proc);
        slot_release(proc->slot);
out:
        free_strv(plan.argv);
        free_strv(plan.envp);
        return rc;
}

int spawn_signal(const struct kernel_proc *proc, int sig)
{
        if (proc->sandboxed)
                return sandbox_signal(&proc->sandbox, sig);
        /* The kernel leads its own process group: signal the whole group. */
        return kill(-proc->pid, sig) < 0 ? -errno : 0;
}

void spawn_kill(const struct kernel_proc *proc)
{
        if (proc->sandboxed)
                sandbox_kill(&proc->sandbox);
        else
                kill(-proc->pid, SIGKILL);
}

void spawn_reap(struct kernel_proc *proc, int status, struct hostmsg_exit *ex)
{
        bool oom = false;

        if (proc->sandboxed)
                status = sandbox_finish(&proc->sandbox, status, &oom);
        else
                kill(-proc->pid, SIGKILL); /* stragglers of the kernel's group */
        memset(ex, 0, sizeof(*ex));
        snprintf(ex->kernel_id, sizeof(ex->kernel_id), "%s", proc->kernel_id);
        ex->pid = proc->pid;
        if (WIFSIGNALED(status)) {
                ex->exit_code = -1;
                ex->signal = WTERMSIG(status);
        } else {
                ex->exit_code = WEXITSTATUS(status);
        }
        snprintf(ex->reason, sizeof(ex->reason), "%s",
                 oom ? "out-of-memory" : WIFSIGNALED(status) ? "signaled" : "exited");
        spawn_cleanup(proc);
        slot_release(proc->slot);
        proc->slot = -1;
}
