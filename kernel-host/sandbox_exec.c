/* Starting a process in a sandbox (sandbox.h's sandbox_exec): a starter
 * forked from the kernel-host joins the sandbox and has a child of its own
 * there fork the process, which confines itself and executes. Between
 * their forks and the execve only async-signal-safe calls. */
#include "autoconf.h"

#include "kernel-host/confine.h"
#include "kernel-host/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* The process itself, inside every namespace: drop everything, execve. */
static __attribute__((noreturn)) void confine_exec(const struct sandbox *sb,
                                                   const struct sandbox_exec *ex, int exec_fd)
{
        struct confine_sandbox csb;

        sandbox_confine_view(sb, &csb);
        confine_process(&csb, ex->stdio, ex->cwd, ex->tty, ex->as_root, exec_fd);
        execve(ex->argv[0], ex->argv, ex->envp);
        confine_fail(exec_fd, "exec", errno);
}

/* The starter's child in the sandbox's pid namespace: forks the process
 * and exits, orphaning it. Started in the process's group (group_fd >= 0),
 * it first closes that descriptor of the host's groups and joins the rest
 * of the sandbox. Its own function, as zygote_main.c's middle_main: a
 * vfork child must not share its caller's frame. */
static __attribute__((noinline, noreturn)) void starter_middle(const struct sandbox *sb,
                                                               const struct sandbox_exec *ex,
                                                               const struct confine_sandbox *csb,
                                                               int group_fd, int report_fd,
                                                               const int exec_sock[2])
{
        pid_t pid;

        confine_join_started(csb, group_fd, ex->conn_name, ex->conn_text, report_fd);
        close(exec_sock[0]);
        close(report_fd);
        pid = fork();
        if (pid < 0)
                confine_fail(exec_sock[1], "fork", errno);
        if (pid == 0) {
                confine_hello(exec_sock[1]);
                confine_exec(sb, ex, exec_sock[1]);
        }
        _exit(0);
}

/* The starter: joins the sandbox like nsenter, forks a child there that
 * forks the process and exits: orphaned in the sandbox's pid namespace,
 * the process becomes a child of its init, which reports its end (the
 * whole sandbox is one tree under its init, as a checkpoint takes it).
 * We report its start on report_fd and exit. On cgroup v2 that child
 * starts in the process's group (confine_vfork_into): the kernel-host
 * waits for us, and a move would have it wait for a grace period too. */
static __attribute__((noreturn)) void starter_main(const struct sandbox *sb,
                                                   const struct sandbox_exec *ex, int report_fd)
{
        const char *dirs[CGROUP_CONTROLLERS];
        struct confine_sandbox csb;
        struct confine_report r;
        int exec_sock[2], status, rc, group_fd;
        unsigned ndirs = cgroup_dir_list(ex->cgroup, dirs);
        pid_t middle;

        sandbox_confine_view(sb, &csb);
        group_fd = confine_join_to_start(&csb, dirs, ndirs, ex->conn_name, ex->conn_text,
                                         confine_can_start_in_group(), report_fd);
        /* The child started in the group shares our memory and shows in
         * the sandbox's /proc: unprivileged, the sandbox's user is ours,
         * and could open its memory (and so ours) unless we are not
         * dumpable. (We show in no /proc of the sandbox's.) */
        if (group_fd >= 0 && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                confine_fail(report_fd, "not dumpable", errno);
        rc = confine_exec_socket(exec_sock);
        if (rc < 0)
                confine_fail(report_fd, "socketpair", -rc);
        middle = group_fd >= 0 ? confine_vfork_into(group_fd) : fork();
        if (middle < 0)
                confine_fail(report_fd, group_fd >= 0 ? "start in cgroup" : "fork", errno);
        if (middle == 0)
                starter_middle(sb, ex, &csb, group_fd, report_fd, exec_sock);
        close(exec_sock[1]);
        /* A middle child that failed before its fork said why on report_fd
         * first: the kernel-host reads that report, not ours below. */
        while (waitpid(middle, &status, 0) < 0 && errno == EINTR)
                ;
        rc = confine_await_exec(exec_sock[0], &r, SANDBOX_SETUP_TIMEOUT_MS);
        if (rc < 0)
                confine_fail(report_fd, "start process", -rc);
        confine_report_send(report_fd, &r);
        _exit(r.kind == CONFINE_STARTED ? 0 : 127);
}

int sandbox_exec(const struct sandbox *sb, const struct sandbox_exec *ex,
                 struct sandbox_process *proc, struct hostmsg_failed *fail)
{
        int report[2] = {-1, -1};
        struct confine_report r;
        pid_t starter;
        int status;
        int rc = 0;

        memset(proc, 0, sizeof(*proc));
        /* Asked here, in the kernel-host: the starter has the answer. */
        (void)confine_can_start_in_group();
        if (pipe2(report, O_CLOEXEC) < 0) {
                rc = -errno;
                sandbox_fail_set(fail, "pipe", errno);
                goto out;
        }
        starter = fork();
        if (starter < 0) {
                rc = -errno;
                sandbox_fail_set(fail, "fork", errno);
                goto out;
        }
        if (starter == 0) {
                close(report[0]);
                starter_main(sb, ex, report[1]);
        }
        close(report[1]);
        report[1] = -1;
        rc = confine_report_wait(report[0], &r, SANDBOX_SETUP_TIMEOUT_MS);
        if (rc == 0 && r.kind != CONFINE_STARTED)
                rc = -(r.error ? r.error : EIO);
        if (rc < 0) {
                sandbox_fail_set(fail, rc == -ETIMEDOUT || rc == -EPIPE ? "start process" : r.step,
                                 -rc);
                kill(starter, SIGKILL);
        }
        /* It has said all it had to: reaped here, not by the main loop. */
        while (waitpid(starter, &status, 0) < 0 && errno == EINTR)
                ;
        if (rc < 0)
                goto out;
        proc->pid = r.pid;
        proc->nspid = r.nspid;
out:
        if (report[0] >= 0)
                close(report[0]);
        if (report[1] >= 0)
                close(report[1]);
        return rc;
}
