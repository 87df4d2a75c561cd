/* Sandboxes and the processes in them, as the kernel-host keeps them. */
#ifndef GLOVEBOX_SPAWN_H
#define GLOVEBOX_SPAWN_H

#include "protocol/hostmsg.h"

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

/* Prepares what every sandbox shares; runtime_dir holds their directories.
 * 0 or -errno (logged). */
int spawn_init(const char *runtime_dir);

/* Makes a sandbox (or, without one, a plain directory). *root_fd is a new
 * descriptor of its root directory for the gateway (the caller closes it).
 * On failure fills fail, leaves nothing behind and returns -errno. */
int spawn_sandbox_create(const struct hostmsg_sandbox *req, struct hostmsg_sandbox_ready *ready,
                         int *root_fd, struct hostmsg_failed *fail);
/* Kills everything in the sandbox; it is reported gone once reaped. */
int spawn_sandbox_destroy(const char *id);

/* Starts a process in its sandbox. A command's stdin (write end), stdout
 * and stderr (read ends) are returned in fds for the gateway. */
int spawn_start(const struct hostmsg_start *req, struct hostmsg_started *started, int fds[3],
                size_t *nfds, struct hostmsg_failed *fail);
/* Delivers sig to the process's group; -ESRCH if unknown. */
int spawn_signal(const char *id, int sig);
/* Kills the process's group at once. */
int spawn_stop(const char *id);

/* The user and network namespaces of a sandbox (descriptors that stay
 * the kernel-host's: do not close them). -ESRCH for an unknown sandbox or
 * one whose init is gone, -EPERM for a plain directory (--sandbox=none),
 * which has no namespace of its own to reach. */
int spawn_sandbox_netns(const char *id, int *userns_fd, int *netns_fd);

/* Reports what ended with pid: an exited process (EXITED) and/or a sandbox
 * whose last process is gone (SANDBOX_GONE), through report. */
/* A sandbox's CPU weight: the least (background) or the usual. 0,
 * -ESRCH, or -errno of the cgroup's file. */
int spawn_sandbox_priority(const char *id, bool background);
/* Gives a sandbox new limits (cgroup_relimit), its disk's size the same:
 * 0, -ESRCH, -EINVAL for another disk size, -EBUSY, or -errno; err says
 * why. */
int spawn_sandbox_relimit(const char *id, const struct hostmsg_limits *limits, char *err,
                          size_t errlen);
void spawn_reap(pid_t pid, int status, void (*report)(enum hostmsg_type, json_t *));
/* Takes the ends that sandboxes' inits reported (sandbox_exit_next) and
 * reports each process's exit through report. */
void spawn_init_reports(void (*report)(enum hostmsg_type, json_t *));
/* Kills everything and waits for it (at exit). */
void spawn_stop_all(void (*report)(enum hostmsg_type, json_t *));

#endif
