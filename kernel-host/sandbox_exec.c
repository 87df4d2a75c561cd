/* Starting a process in a sandbox (sandbox.h's sandbox_exec_begin): a
 * starter forked from the kernel-host joins the sandbox and has a child of
 * its own there fork the process, which confines itself and executes.
 * Between their forks and the execve only async-signal-safe calls. */
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
                                                               int group_fd, int report_fd)
{
        pid_t pid;

        confine_join_started(csb, group_fd, ex->conn_name, ex->conn_text, report_fd);
        pid = fork();
        if (pid < 0)
                confine_fail(report_fd, "fork", errno);
        if (pid == 0) {
                confine_hello(report_fd);
                confine_exec(sb, ex, report_fd);
        }
        _exit(0);
}

/* The starter: joins the sandbox like nsenter, forks a child there that
 * forks the process and exits: orphaned in the sandbox's pid namespace,
 * the process becomes a child of its init, which reports its end (the
 * whole sandbox is one tree under its init, as a checkpoint takes it).
 * All three report on report_fd, the kernel-host's socket (confine.h):
 * a failed step, or the process's hello and then its execve. On cgroup v2
 * that child starts in the process's group (confine_vfork_into): a move
 * would wait for a grace period. */
static __attribute__((noreturn)) void starter_main(const struct sandbox *sb,
                                                   const struct sandbox_exec *ex, int report_fd)
{
        const char *dirs[CGROUP_CONTROLLERS];
        struct confine_sandbox csb;
        int status, group_fd;
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
        middle = group_fd >= 0 ? confine_vfork_into(group_fd) : fork();
        if (middle < 0)
                confine_fail(report_fd, group_fd >= 0 ? "start in cgroup" : "fork", errno);
        if (middle == 0)
                starter_middle(sb, ex, &csb, group_fd, report_fd);
        /* Reaped here, not by the sandbox's init, which would report it. */
        while (waitpid(middle, &status, 0) < 0 && errno == EINTR)
                ;
        _exit(0);
}

int sandbox_exec_begin(const struct sandbox *sb, const struct sandbox_exec *ex, int *fd,
                       pid_t *starter, struct hostmsg_failed *fail)
{
        int report[2];
        int rc;

        *fd = -1;
        *starter = 0;
        /* Asked here, in the kernel-host: the starter has the answer. */
        (void)confine_can_start_in_group();
        rc = confine_exec_socket(report);
        if (rc < 0) {
                sandbox_fail_set(fail, "socketpair", -rc);
                return rc;
        }
        *starter = fork();
        if (*starter < 0) {
                rc = -errno;
                sandbox_fail_set(fail, "fork", errno);
                close(report[0]);
                close(report[1]);
                *starter = 0;
                return rc;
        }
        if (*starter == 0) {
                close(report[0]);
                starter_main(sb, ex, report[1]);
        }
        close(report[1]);
        *fd = report[0];
        return 0;
}
