/* What a sandbox's init (init_main.c) tells the kernel-host: one record
 * per child it reaped, on the pipe it holds as INIT_REPORT_FD. */
#ifndef GLOVEBOX_INIT_REPORT_H
#define GLOVEBOX_INIT_REPORT_H

#include <signal.h>
#include <stdint.h>

#define INIT_PROGRAM   "glovebox-init"
#define INIT_COMMAND   "/opt/glovebox/init" /* where every sandbox has it: off PATH */
#define INIT_REPORT_FD 3
/* After a restore (checkpoint.h) the kernel-host sends it: init executes
 * itself again. A restored process's memory belongs to the host's user
 * namespace (CRIU, not an execve inside the sandbox, made it), so the
 * next checkpoint, which inspects an undumpable init from inside the
 * sandbox's, could not; a new execve makes it the sandbox's again. Sent
 * from inside the sandbox it does no more than that. */
#define INIT_SIGNAL_REEXEC SIGUSR1

struct init_exit {
        int32_t pid;    /* in the sandbox's pid namespace */
        int32_t status; /* as waitpid gave it */
};

#endif
