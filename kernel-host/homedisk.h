/* Disk-backed homes (--home-storage disk): each sandbox's /home/user is a
 * fresh ext4 filesystem of its own, in a sparse image file the size of its
 * disk limit, on a loop device. Writes there are the disk's, not the
 * sandbox's memory, and the image's size is the quota: the sandbox gets
 * ENOSPC at its limit and cannot reach anything beside it.
 *
 * The image never has a name: it is made with O_TMPFILE in
 * STATE_DIR/homes, so that nothing can be left behind whatever happens to
 * the kernel-host. Its blocks are freed when the last reference goes,
 * which is the loop device's, cleared automatically when the sandbox's
 * mount namespace (the only place the filesystem is mounted) ends with
 * it. Needs root: loop devices and the mount. */
#ifndef GLOVEBOX_HOMEDISK_H
#define GLOVEBOX_HOMEDISK_H

#include <stdbool.h>
#include <sys/types.h>

/* Makes state_dir (if missing) and its homes directory, both 0700, and
 * keeps the latter open. 0 or -errno; logs why it failed. */
int homedisk_init(const char *state_dir);
/* Whether homedisk_init succeeded: homes are disks. */
bool homedisk_enabled(void);
/* Makes a home of size_mb MiB owned (its root directory, mode 0700) by the
 * host ids uid:gid, and returns it as a detached mount (nosuid, nodev) in
 * *mount_fd, which the caller attaches (move_mount) and closes. On
 * failure -errno and *step names what failed. */
int homedisk_create(unsigned long long size_mb, uid_t uid, gid_t gid, int *mount_fd,
                    const char **step);

#endif
