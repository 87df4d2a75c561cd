/* Reading where cgroup hierarchies are mounted: shared by the kernel-host
 * (which makes the groups) and the gateway (which reads a sandbox's usage
 * from them). */
#ifndef GLOVEBOX_CGROUPFS_H
#define GLOVEBOX_CGROUPFS_H

#include <stdbool.h>
#include <stddef.h>

/* On cgroup v2, the leaf of a sandbox's group that holds its init (the
 * kernel-host's cgroup_hand_down); its processes' groups are beside it. */
#define CGROUPFS_INIT_LEAF "init"

/* Whether word is one of the sep-separated items of list (which may end
 * at a newline). */
bool cgroupfs_list_has(const char *list, const char *word, char sep);
/* The mount point and mount root (from /proc/self/mountinfo) of the v1
 * hierarchy holding controller, or of the v2 hierarchy when controller is
 * NULL. 0 or -errno (-ENOENT: none). */
int cgroupfs_find_mount(const char *controller, char *point, size_t psize, char *root,
                        size_t rsize);

#endif
