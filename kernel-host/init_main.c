/* glovebox-init: pid 1 of every sandbox (sandbox.h).
 *
 * The kernel-host sets the sandbox up in a child of its own and, once the
 * root is pivoted and every privilege dropped, that child executes this
 * program, bound read-only into the sandbox at INIT_COMMAND. Being a
 * program of the sandbox's own root (and not a copy of the kernel-host)
 * is what lets the sandbox be checkpointed whole: a checkpoint restores
 * the programs its processes run from inside the sandbox.
 *
 * Every process started in the sandbox is a child of this one (the
 * kernel-host orphans it on purpose: sandbox.c), and so is whatever is
 * orphaned there later. We reap them all and report each end on
 * descriptor INIT_REPORT_FD, a pipe to the kernel-host of this sandbox's
 * own. That is all we do, until the kernel-host kills us and with us the
 * sandbox.
 *
 * libc only. */
#include "autoconf.h"

#include "kernel-host/init_report.h"

#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
        sigset_t set;
        int sig;

        /* Undumpable: no process of the sandbox, its root included, may
         * read or write our memory or open our descriptor through /proc.
         * (The kernel-host's checkpoint holds the capability this asks
         * for in the sandbox's user namespace; nothing in the sandbox
         * does.) */
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        /* Signals sent from inside the sandbox do not reach a pid 1 that
         * has no handler; SIGCHLD is taken synchronously below. */
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, INIT_SIGNAL_REEXEC);
        sigprocmask(SIG_BLOCK, &set, NULL);
        for (;;) {
                struct init_exit rec;
                siginfo_t info;
                int status;
                pid_t pid;

                while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
                        rec = (struct init_exit){.pid = (int32_t)pid, .status = (int32_t)status};
                        /* Blocks while the kernel-host's queue is full:
                         * nothing else waits on us meanwhile. */
                        while (write(INIT_REPORT_FD, &rec, sizeof(rec)) < 0 && errno == EINTR)
                                ;
                }
                sig = sigwaitinfo(&set, &info);
                if (sig < 0 && errno != EINTR)
                        _exit(1);
                /* Every reaped child was reported above; one that ends
                 * meanwhile stays a zombie with its SIGCHLD pending, which
                 * the new image takes (the mask and the pipe survive). */
                if (sig == INIT_SIGNAL_REEXEC) {
                        static char *const argv[] = {INIT_PROGRAM, NULL};
                        static char *const envp[] = {NULL};

                        execve(INIT_COMMAND, argv, envp);
                }
        }
}
