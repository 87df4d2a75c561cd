/* Starting, signalling and reaping kernels, sandboxed (the default) or,
 * with --sandbox=none, as plain processes. */
#ifndef GLOVEBOX_SPAWN_H
#define GLOVEBOX_SPAWN_H

#include "kernel-host/sandbox.h"
#include "protocol/hostmsg.h"

#include <stdbool.h>
#include <sys/types.h>

struct kernel_proc {
        char kernel_id[JP_UUID_SIZE];
        pid_t pid;              /* the sandbox's init, or the kernel itself */
        char run_dir[PATH_MAX]; /* <runtime>/<kernel id> */
        bool sandboxed;
        struct sandbox sandbox;
        int slot;               /* host id slot (sandboxed, as root) */
};

/* Prepares what every sandbox shares (seccomp program, host id range).
 * Returns 0 or -errno; the error is logged. */
int spawn_init(void);

/* Creates the run directory and connection file of req and starts its
 * kernel. On success fills proc and started; on failure fills fail (which
 * step, errno), leaves nothing behind and returns -errno. */
int spawn_kernel(const struct hostmsg_start *req, const char *runtime_dir,
                 struct kernel_proc *proc, struct hostmsg_started *started,
                 struct hostmsg_failed *fail);
/* Delivers sig to the kernel's process group. */
int spawn_signal(const struct kernel_proc *proc, int sig);
/* Kills everything of the kernel at once. */
void spawn_kill(const struct kernel_proc *proc);
/* After proc->pid was reaped with status: fills the exit report (the
 * kernel's own status, out-of-memory as the reason when that killed it)
 * and removes everything the kernel had on the host. */
void spawn_reap(struct kernel_proc *proc, int status, struct hostmsg_exit *ex);

#endif
