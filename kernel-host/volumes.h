/* Volumes: filesystems that outlive sandboxes and are shared by them
 * (E2B's volumes, a kernel's "volumes"), each an ext4 image with a journal,
 * <id>.img in the volumes directory (STATE_DIR/volumes/images, 0700, the
 * kernel-host's alone), of the size the gateway gave it: that is its
 * quota, and the host pays for what is written, at most that.
 *
 * A volume is on one loop device at a time, whoever mounts it: every
 * sandbox that has it gets its own mount of the same filesystem (one
 * superblock: each sees the others' writes at once), idmapped through the
 * sandbox's user namespace (overlay.h), so that its files are owned as
 * every sandbox sees them (1000: "user", 0: its root). A device that
 * outlived a previous kernel-host (a mount still held) is found and used
 * again, never a second one on the same image.
 *
 * The gateway gets the volume's root directory (O_PATH) for its content
 * API and resolves every path in it itself (RESOLVE_IN_ROOT): no path in a
 * volume is ever resolved by the kernel-host. Needs root. */
#ifndef GLOVEBOX_VOLUMES_H
#define GLOVEBOX_VOLUMES_H

#include <stdbool.h>
#include <stdint.h>

/* Makes dir (0700) if missing and keeps it open. 0 or -errno, logged. */
int volumes_init(const char *dir);
bool volumes_enabled(void);
/* Volume id's root directory, as an O_PATH descriptor in *root_fd (the
 * caller's). size_mb not 0: the volume is made first, of that size
 * (-EEXIST when it exists). On failure -errno and *step says what failed. */
int volumes_open(const char *id, uint64_t size_mb, int *root_fd, const char **step);
/* A new detached read-write mount (nosuid, nodev) of volume id, for a
 * sandbox, in *mount_fd (the caller's: it idmaps it). 0 or -errno. */
int volumes_mount(const char *id, int *mount_fd);
/* Removes volume id's image; mounts that still have it keep it until
 * they end. */
void volumes_delete(const char *id);

#endif
