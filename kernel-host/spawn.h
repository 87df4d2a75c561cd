/* Starting one kernel process from a start request. */
#ifndef GLOVEBOX_SPAWN_H
#define GLOVEBOX_SPAWN_H

#include "protocol/hostmsg.h"

#include <sys/types.h>

struct kernel_proc {
        char kernel_id[JP_UUID_SIZE];
        pid_t pid;            /* the process we started; its process group too */
        char run_dir[PATH_MAX]; /* <runtime>/<kernel id>: connection file, sockets */
};

/* Creates the run directory and connection file of req and starts its
 * kernel. On success fills proc and the started report; on failure fills
 * fail (which step, errno), leaves nothing behind and returns -errno. */
int spawn_kernel(const struct hostmsg_start *req, const char *runtime_dir,
                 struct kernel_proc *proc, struct hostmsg_started *started,
                 struct hostmsg_failed *fail);

/* Removes everything spawn_kernel created for proc on the host. */
void spawn_cleanup(const struct kernel_proc *proc);

#endif
