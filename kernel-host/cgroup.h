/* One cgroup per kernel for memory (no swap), processes and CPU, made
 * beneath the kernel-host's own cgroup of each controller: cgroup v2 where
 * the unified hierarchy has the controller, v1 otherwise (this is what a
 * delegated cgroup allows, and it keeps kernels accounted to whoever runs
 * Glovebox). A controller that cannot be used is logged once at start and
 * its limit is not enforced. */
#ifndef GLOVEBOX_CGROUP_H
#define GLOVEBOX_CGROUP_H

#include "protocol/hostmsg.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum cgroup_controller { CGROUP_MEMORY, CGROUP_PIDS, CGROUP_CPU, CGROUP_CONTROLLERS };

struct kernel_cgroup {
        char dirs[CGROUP_CONTROLLERS][PATH_MAX]; /* "" where the controller is unavailable */
};

/* Finds the hierarchies and makes this kernel-host's parent groups. */
void cgroup_init(void);
/* True when every controller is usable. */
bool cgroup_complete(void);
/* Makes the kernel's groups with limits; on failure nothing is left and
 * err says which file. */
int cgroup_create(const char *kernel_id, const struct hostmsg_limits *limits,
                  struct kernel_cgroup *cg, char *err, size_t errlen);
int cgroup_attach(const struct kernel_cgroup *cg, pid_t pid);
/* How many processes the memory limit of the group has killed. */
uint64_t cgroup_oom_kills(const struct kernel_cgroup *cg);
/* Makes a group called name inside each of parent's, with no limits of
 * its own (parent's cover it): a process and whatever it starts live
 * there, so that they can be killed together, setsid or not. On failure
 * nothing is left and err says which directory. */
int cgroup_create_child(const struct kernel_cgroup *parent, const char *name,
                        struct kernel_cgroup *child, char *err, size_t errlen);
/* SIGKILLs every process in the groups except spare (0: none); returns how
 * many it found. Processes forking meanwhile may be missed: repeat until it
 * finds none. */
int cgroup_kill(struct kernel_cgroup *cg, pid_t spare);
/* Removes the groups if no process is left in them (never kills); 0, or
 * -EBUSY with the occupied ones kept. */
int cgroup_remove_if_empty(struct kernel_cgroup *cg);
/* Kills anything left in the groups and their child groups, and removes
 * them all. */
void cgroup_destroy(struct kernel_cgroup *cg);
/* This kernel-host's parent group of controller c ("" if unusable): a
 * successor removes it if we die without doing so. */
const char *cgroup_parent(enum cgroup_controller c);
/* Kills everything in a dead kernel-host's parent group and removes it
 * with every group beneath it, counting them in *removed. Only a
 * glovebox-<pid> directory of a cgroup filesystem is touched: -EINVAL for
 * anything else, -EBUSY for our own. */
int cgroup_remove_stale(const char *dir, unsigned *removed);
/* Removes the parent groups (at exit). */
void cgroup_shutdown(void);

#endif
