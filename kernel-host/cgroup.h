/* One cgroup per kernel for memory (no swap), processes and CPU, made
 * beneath the kernel-host's own cgroup of each controller: cgroup v2 where
 * the unified hierarchy has the controller, v1 otherwise (this is what a
 * delegated cgroup allows, and it keeps kernels accounted to whoever runs
 * Glovebox). A controller that cannot be used is logged once at start,
 * and the gateway hears which are (cgroup_controllers): it refuses requests
 * for limits it cannot enforce. */
#ifndef GLOVEBOX_CGROUP_H
#define GLOVEBOX_CGROUP_H

#include "protocol/hostmsg.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum cgroup_controller { CGROUP_MEMORY, CGROUP_PIDS, CGROUP_CPU, CGROUP_CONTROLLERS };

/* A sandbox's or a process's group: one directory in each hierarchy in use,
 * in the order of cgroup_parent. cgroup v2 is one hierarchy whatever its
 * controllers, so a group there is one directory, made, joined and removed
 * once; on v1 each controller's hierarchy has its own. */
struct kernel_cgroup {
        char dirs[CGROUP_CONTROLLERS][PATH_MAX]; /* "" where none was made */
        unsigned ndirs;
        bool oom_groups; /* cgroup_hand_down done: children get memory.oom.group */
};

/* Renames cg's directories to name, beside where they are (a sandbox made
 * ahead takes its request's id: the gateway finds a sandbox's group by
 * it). All or none: 0, or -errno with cg as it was (a failed undo is
 * logged). Only cgroup v1 renames a group: see cgroup_renamable. */
int cgroup_rename(struct kernel_cgroup *cg, const char *name);
/* Whether every hierarchy we make groups in is cgroup v1, where a group
 * can be renamed (v2 refuses it, EPERM). */
bool cgroup_renamable(void);
/* The name of cg's groups (the last part of their directories); "" when
 * it has none. */
const char *cgroup_name(const struct kernel_cgroup *cg);

/* Gives cg the least CPU weight beside its siblings (background: only
 * what they leave) or the usual one. 0 (also without a CPU controller),
 * or -errno. */
int cgroup_set_background(const struct kernel_cgroup *cg, bool background);

/* Gives cg new limits: -EBUSY (nothing written) when it already holds
 * more memory or processes than they allow, else 0 or -errno of the file
 * that could not be written; err says which. */
int cgroup_relimit(const struct kernel_cgroup *cg, const struct hostmsg_limits *limits, char *err,
                   size_t errlen);

/* Finds the hierarchies and makes this kernel-host's parent groups. */
void cgroup_init(void);
/* The controllers whose limits are enforced: bit 1 << c for each. */
unsigned cgroup_controllers(void);
/* Makes the kernel's groups with limits; on failure nothing is left and
 * err says which file. */
int cgroup_create(const char *kernel_id, const struct hostmsg_limits *limits,
                  struct kernel_cgroup *cg, char *err, size_t errlen);
int cgroup_attach(const struct kernel_cgroup *cg, pid_t pid);
/* How many processes the memory limit of the group has killed. */
uint64_t cgroup_oom_kills(const struct kernel_cgroup *cg);
/* On cgroup v2, moves init (the sandbox's, already in its group and in a
 * cgroup namespace rooted there) into a leaf of the group, so that the
 * group can hand the memory controller down to its children: cgroup v2
 * lets a group with processes of its own have no controllers in its
 * subtree (the no-internal-process rule). Its process groups can then have
 * memory.oom.group. Nothing to do on v1. 0 or -errno. */
int cgroup_hand_down(struct kernel_cgroup *cg, pid_t init);
/* cg's directories, one per hierarchy ("" where none was made), into out
 * (what confine_open_start_group and the joins take): their number. */
unsigned cgroup_dir_list(const struct kernel_cgroup *cg, const char *out[CGROUP_CONTROLLERS]);
/* Makes a group called name inside each of parent's, with no limits of
 * its own (parent's cover it): a process and whatever it starts live
 * there, so that they can be killed together, setsid or not, and after
 * cgroup_hand_down an out-of-memory kill takes them all together. On
 * failure nothing is left and err says which directory. */
int cgroup_create_child(const struct kernel_cgroup *parent, const char *name,
                        struct kernel_cgroup *child, char *err, size_t errlen);
/* The group called name inside each of parent's, as cgroup_create_child
 * made it (its directories, now: parent's may have been renamed since);
 * nothing is made. 0 or -ENAMETOOLONG. */
int cgroup_child_of(const struct kernel_cgroup *parent, const char *name,
                    struct kernel_cgroup *child);
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
/* How many parent groups this kernel-host has (one per hierarchy in use),
 * and the i-th ("" past them): a successor removes them if we die without
 * doing so. */
unsigned cgroup_parent_count(void);
const char *cgroup_parent(unsigned i);
/* Kills everything in a dead kernel-host's parent group and removes it
 * with every group beneath it, counting them in *removed. Only a
 * glovebox-<pid> directory of a cgroup filesystem is touched: -EINVAL for
 * anything else, -EBUSY for our own. */
int cgroup_remove_stale(const char *dir, unsigned *removed);
/* CRIU's --cgroup-root for the i-th hierarchy of cg (cgroup_parent's
 * order): "controller:/path" on v1, "/path" on v2, the path as the
 * hierarchy names it. 0, or -ENOENT past the last. */
int cgroup_criu_root(const struct kernel_cgroup *cg, unsigned i, char *out, size_t size);
/* Removes the parent groups (at exit). */
void cgroup_shutdown(void);

#endif
