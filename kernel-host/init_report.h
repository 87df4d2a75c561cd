/* What a sandbox's init (init_main.c) tells the kernel-host: one record
 * per child it reaped, on the pipe it holds as INIT_REPORT_FD. */
#ifndef GLOVEBOX_INIT_REPORT_H
#define GLOVEBOX_INIT_REPORT_H

#include <stdint.h>

#define INIT_PROGRAM   "glovebox-init"
#define INIT_COMMAND   "/opt/glovebox/init" /* where every sandbox has it: off PATH */
#define INIT_REPORT_FD 3

struct init_exit {
        int32_t pid;    /* in the sandbox's pid namespace */
        int32_t status; /* as waitpid gave it */
};

#endif
