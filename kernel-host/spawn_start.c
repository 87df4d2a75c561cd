/* A process started in its sandbox (spawn_start): its stdio, its own
 * cgroup, forked from a zygote or started cold; without a sandbox, a plain
 * child in a session of its own. */
#include "autoconf.h"

#include "kernel-host/spawn.h"
#include "kernel-host/spawn_internal.h"
#include "kernel-host/tcp_bridge.h"
#include "kernel-host/zygote.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Without a sandbox, "/" of the box is run_dir/root and home its
 * home/user, so paths read the same in both modes. */
static void box_home(const struct box *b, char *out, size_t size)
{
        if (b->sandboxed)
                snprintf(out, size, ROOTFS_HOME);
        else
                snprintf(out, size, "%s/" ROOT_DIR ROOTFS_HOME, b->run_dir);
}

/* What a plain child reports through its sync pipe when a step fails. */
struct child_failure {
        char step[32];
        int error;
};

/* Runs in the child: only async-signal-safe calls until execve. */
static __attribute__((noreturn)) void plain_fail(int fd, const char *step, int error)
{
        struct child_failure f = {.error = error};
        size_t len = strlen(step);

        memcpy(f.step, step, len < sizeof(f.step) - 1 ? len : sizeof(f.step) - 1);
        (void)!write(fd, &f, sizeof(f));
        _exit(127);
}

static __attribute__((noreturn)) void child_exec(char **argv, char **envp, const char *cwd,
                                                 const int stdio[3], bool tty, int null_fd,
                                                 int sync_fd, pid_t parent)
{
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++)
                signal(sig, SIG_DFL);
        /* It dies with us, as a sandbox does with its init; a parent gone
         * before this line shows as a new parent. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
                plain_fail(sync_fd, "parent death signal", errno);
        if (getppid() != parent)
                plain_fail(sync_fd, "parent death signal", ESRCH);
        /* Its own session and process group, so an interrupt reaches the
         * process and whatever it started, and nothing else. */
        if (setsid() < 0)
                plain_fail(sync_fd, "setsid", errno);
        for (int i = 0; i < 3; i++) {
                if (dup2(stdio[i] >= 0 ? stdio[i] : null_fd, i) < 0)
                        plain_fail(sync_fd, "stdio", errno);
        }
        if (tty && ioctl(0, TIOCSCTTY, 0) < 0)
                plain_fail(sync_fd, "controlling terminal", errno);
        /* Nothing else is inherited: not the gateway link, nor any other. */
        for (int fd = 3; fd < 4096; fd++) {
                if (fd != sync_fd)
                        close(fd);
        }
        if (chdir(cwd) < 0)
                plain_fail(sync_fd, "chdir", errno);
        execve(argv[0], argv, envp);
        plain_fail(sync_fd, "exec", errno);
}

/* Without a sandbox: a plain child in its own session. */
static int start_plain(struct proc *p, char **argv, char **envp, const char *cwd,
                       const int stdio[3], bool tty, struct hostmsg_failed *fail)
{
        struct child_failure child = {0};
        int sync[2] = {-1, -1};
        int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        ssize_t got;
        pid_t pid, parent;
        int rc;

        if (null_fd < 0 || pipe2(sync, O_CLOEXEC) < 0) {
                rc = -errno;
                spawn_fail_set(fail, p->id, "pipe", errno, NULL);
                goto out;
        }
        parent = getpid();
        pid = fork();
        if (pid < 0) {
                rc = -errno;
                spawn_fail_set(fail, p->id, "fork", errno, NULL);
                goto out;
        }
        if (pid == 0)
                child_exec(argv, envp, cwd, stdio, tty, null_fd, sync[1], parent);
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
                spawn_fail_set(fail, p->id, child.step, child.error, argv[0]);
                goto out;
        }
        p->pid = pid;
        p->reap = pid;
        rc = 0;
out:
        if (null_fd >= 0)
                close(null_fd);
        if (sync[0] >= 0)
                close(sync[0]);
        if (sync[1] >= 0)
                close(sync[1]);
        return rc;
}

static char last_zygote[ZYGOTE_MAX_NAME];

const char *spawn_last_zygote(void)
{
        return last_zygote;
}

/* The process b's stock forked ahead (zygote.h), taken out of b: started
 * as ex, in its group named name (where groups can be renamed: cgroup v1;
 * on v2 it keeps ZYGOTE_AHEAD_GROUP), when the start is one of zygote's
 * (NULL: not a zygote's); else, or when it cannot serve, ended and its
 * group removed: -ENOENT, and the caller starts ex as without one. */
static int start_ahead(struct box *b, const char *zygote, const char *name, struct sandbox_exec *ex,
                       struct proc *p, struct hostmsg_failed *fail)
{
        struct zygote_ahead *a = b->ahead;
        int rc = -ENOENT;

        if (!zygote) {
                spawn_drop_ahead(b, false);
                return -ENOENT;
        }
        b->ahead = NULL;
        if (cgroup_child_of(&b->sandbox.cgroup, ZYGOTE_AHEAD_GROUP, &p->cgroup) < 0) {
                zygote_ahead_free(a);
                return -ENOENT;
        }
        if (!cgroup_renamable() || cgroup_rename(&p->cgroup, name) == 0)
                rc = zygote_exec_ahead(a, zygote, &b->sandbox, ex, &p->sp, fail);
        else
                zygote_ahead_free(a);
        if (rc == -ENOENT)
                cgroup_destroy(&p->cgroup); /* and whatever waits there */
        return rc;
}

void spawn_drop_ahead(struct box *b, bool wait)
{
        struct kernel_cgroup group;

        if (!b->ahead && !(wait && b->ahead_left))
                return;
        zygote_ahead_free(b->ahead);
        b->ahead = NULL;
        if (cgroup_child_of(&b->sandbox.cgroup, ZYGOTE_AHEAD_GROUP, &group) < 0)
                return;
        /* Its process killed; its group removed once it has left it
         * (wait), or left empty for the sandbox's end to remove: a start
         * does not wait for a process to die. */
        b->ahead_left = !wait;
        if (wait)
                cgroup_destroy(&group);
        else
                cgroup_kill(&group, 0);
}

static void close_pair(int pair[2])
{
        for (int i = 0; i < 2; i++) {
                if (pair[i] >= 0)
                        close(pair[i]);
                pair[i] = -1;
        }
}

int spawn_start(const struct hostmsg_start *req, struct hostmsg_started *started, int fds[3],
                size_t *nfds, struct hostmsg_failed *fail)
{
        struct box *b = spawn_box_find(req->sandbox_id);
        char inside[PATH_MAX + 32], home[PATH_MAX + 32], conn_name[32];
        char bridge_prefix[sizeof(((struct jp_connection *)0)->ip)] = "";
        struct jp_connection bridge_conn;
        char **argv = NULL, **envp = NULL, *conn_text = NULL;
        int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
        int stdio[3] = {-1, -1, -1};
        int pty_master = -1, pty_peer = -1;
        struct proc *p = NULL;
        const char *cwd;
        int rc;

        *nfds = 0;
        memset(started, 0, sizeof(*started));
        if (!b || b->gone_reported ||
            (b->sandboxed && (!b->init_alive || sandbox_dying(&b->sandbox)))) {
                spawn_fail_set(fail, req->id, "find sandbox", ESRCH, NULL);
                return -ESRCH;
        }
        if (spawn_proc_find(req->id) || spawn_box_find(req->id)) {
                spawn_fail_set(fail, req->id, "register", EEXIST, NULL);
                return -EEXIST;
        }
        /* A sandbox's root exists only where its user namespace maps one
         * (sandbox.c, write_id_maps); never run "root" as anyone else. */
        if (req->as_root && (!b->sandboxed || !b->sandbox.ids.privileged)) {
                spawn_fail_set(fail, req->id, "user root", EPERM,
                               "user 'root' needs a sandbox made by a kernel-host running as root");
                return -EPERM;
        }
        p = calloc(1, sizeof(*p));
        if (!p) {
                spawn_fail_set(fail, req->id, "register", ENOMEM, NULL);
                return -ENOMEM;
        }
        snprintf(p->id, sizeof(p->id), "%s", req->id);
        p->box = b;
        p->kernel = req->kernel;
        box_home(b, home, sizeof(home));
        cwd = req->cwd[0] ? req->cwd : home;
        if (!b->sandboxed && req->cwd[0])
                cwd = home; /* without a sandbox, paths inside mean nothing */
        if (req->kernel) {
                struct jp_connection conn;

                spawn_prepare_connection(b, req, &conn, conn_name, sizeof(conn_name), inside,
                                         sizeof(inside), started->ipc_prefix,
                                         sizeof(started->ipc_prefix));
                if (req->tcp_bridge) {
                        snprintf(bridge_prefix, sizeof(bridge_prefix), "%s", conn.ip);
                        tcp_bridge_connection(&conn, req->id);
                        bridge_conn = conn;
                }
                /* In a sandbox its root writes the file (sandbox_exec);
                 * without one the directory and the kernel are ours. */
                if (b->sandboxed) {
                        conn_text = jp_connection_dump(&conn);
                        rc = conn_text ? 0 : -ENOMEM;
                } else {
                        rc = jp_connection_write_at(&conn, b->plain_ipc_fd, conn_name, (uid_t)-1,
                                                    (gid_t)-1);
                }
                if (rc < 0) {
                        spawn_fail_set(fail, req->id, "connection-file", -rc, NULL);
                        goto fail;
                }
                /* Its output goes to the gateway, which keeps the last
                 * lines: a kernel that fails to start says why there. */
                if (pipe2(pipes[2], O_CLOEXEC) < 0) {
                        rc = -errno;
                        spawn_fail_set(fail, req->id, "pipe", errno, NULL);
                        goto fail;
                }
                stdio[1] = stdio[2] = pipes[2][1];
        } else if (req->pty) {
                /* A terminal: the master goes to the gateway, the peer is
                 * all three of the process's stdio. */
                rc = sandbox_open_pty(b->sandboxed ? &b->sandbox : NULL, req->rows, req->cols,
                                      &pty_master, &pty_peer);
                if (rc < 0) {
                        spawn_fail_set(fail, req->id, "pseudo-terminal", -rc, NULL);
                        goto fail;
                }
                stdio[0] = stdio[1] = stdio[2] = pty_peer;
                inside[0] = '\0';
        } else {
                /* A command talks through pipes the gateway reads. */
                for (int i = 0; i < 3; i++) {
                        if (pipe2(pipes[i], O_CLOEXEC) < 0) {
                                rc = -errno;
                                spawn_fail_set(fail, req->id, "pipe", errno, NULL);
                                goto fail;
                        }
                }
                stdio[0] = pipes[0][0];
                stdio[1] = pipes[1][1];
                stdio[2] = pipes[2][1];
                inside[0] = '\0';
        }
        argv = spawn_build_argv(req, inside);
        if (argv && req->kernel && req->tcp_bridge) {
                argv = tcp_bridge_argv(argv, bridge_prefix, &bridge_conn);
                if (!argv) {
                        rc = -ENOENT;
                        spawn_fail_set(
                            fail, req->id, "tcp-bridge", ENOENT,
                            "glovebox-kernel-bridge is not installed beside the kernel-host");
                        goto fail;
                }
        }
        envp = spawn_build_env(req, home);
        if (!argv || !envp) {
                rc = -ENOMEM;
                spawn_fail_set(fail, req->id, "prepare", ENOMEM, NULL);
                goto fail;
        }
        if (b->sandboxed) {
                struct sandbox_exec ex = {.argv = argv,
                                          .envp = envp,
                                          .cwd = cwd,
                                          .stdio = {stdio[0], stdio[1], stdio[2]},
                                          .cgroup = &p->cgroup,
                                          .conn_name = req->kernel ? conn_name : NULL,
                                          .conn_text = conn_text,
                                          .tty = req->pty,
                                          .as_root = req->as_root};
                char name[JP_UUID_SIZE + 8], err[HOSTMSG_ERROR_SIZE];
                /* A zygote's modules are the host's: only a sandbox on
                 * the host's /usr sees the same files. */
                bool zygote = req->kernel && !req->tcp_bridge && !b->templated &&
                              zygote_fits(req->zygote, argv, envp);

                /* A group of its own: what it starts, even in a new session,
                 * can be killed with it. */
                snprintf(name, sizeof(name), "p-%s", req->id);
                rc = -ENOENT;
                if (b->ahead)
                        rc = start_ahead(b, zygote ? req->zygote : NULL, name, &ex, p, fail);
                if (rc == -ENOENT) {
                        rc = cgroup_create_child(&b->sandbox.cgroup, name, &p->cgroup, err,
                                                 sizeof(err));
                        if (rc < 0) {
                                spawn_fail_set(fail, req->id, "cgroup", -rc, err);
                                goto fail;
                        }
                        rc = -ENOENT;
                        if (zygote)
                                rc = zygote_exec(req->zygote, &b->sandbox, &ex, &p->sp, fail);
                }
                if (rc == 0 && zygote) {
                        klog_debug(req->id, "forked from zygote %s", req->zygote);
                        snprintf(last_zygote, sizeof(last_zygote), "%s", req->zygote);
                }
                if (rc == -ENOENT)
                        rc = sandbox_exec(&b->sandbox, &ex, &p->sp, fail);
                snprintf(fail->id, sizeof(fail->id), "%s", req->id);
                /* Its end comes from its sandbox's init (spawn_init_reports). */
                p->pid = p->sp.pid;
                p->reap = 0;
        } else {
                rc = start_plain(p, argv, envp, cwd, stdio, req->pty, fail);
        }
        if (rc < 0)
                goto fail;
        if (req->kernel) {
                fds[0] = pipes[2][0];
                pipes[2][0] = -1;
                *nfds = 1;
        } else if (req->pty) {
                struct stat st;

                if (fstat(pty_peer, &st) == 0) {
                        p->tty_rdev = st.st_rdev;
                        p->tty_dev = st.st_dev;
                }
                fds[0] = pty_master;
                pty_master = -1;
                *nfds = 1;
        } else {
                for (int i = 0; i < 3; i++) {
                        struct stat st;

                        p->pipes[i] = fstat(stdio[i], &st) == 0 ? st.st_ino : 0;
                }
                fds[0] = pipes[0][1];
                fds[1] = pipes[1][0];
                fds[2] = pipes[2][0];
                pipes[0][1] = pipes[1][0] = pipes[2][0] = -1;
                *nfds = 3;
        }
        for (int i = 0; i < 3; i++)
                close_pair(pipes[i]);
        if (pty_peer >= 0)
                close(pty_peer);
        snprintf(started->id, sizeof(started->id), "%s", req->id);
        started->pid = p->pid;
        b->procs++;
        spawn_proc_add(p);
        spawn_strv_free(argv);
        spawn_strv_free(envp);
        free(conn_text);
        return 0;
fail:
        for (int i = 0; i < 3; i++)
                close_pair(pipes[i]);
        if (pty_master >= 0)
                close(pty_master);
        if (pty_peer >= 0)
                close(pty_peer);
        if (req->kernel)
                spawn_remove_kernel_files(b, req->id);
        cgroup_destroy(&p->cgroup);
        free(p);
        spawn_strv_free(argv);
        spawn_strv_free(envp);
        free(conn_text);
        return rc;
}
