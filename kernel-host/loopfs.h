/* ext4 filesystems in image files on loop devices, made and mounted by
 * the kernel-host (root): disk-backed homes (homedisk.h), template layers
 * (layers.h) and volumes (volumes.h). */
#ifndef GLOVEBOX_LOOPFS_H
#define GLOVEBOX_LOOPFS_H

#include <stdbool.h>
#include <stddef.h>

#define LOOPFS_MKFS "/sbin/mkfs.ext4"

/* Makes dir (root's, 0700) if missing and opens it for images: one
 * nobody else may plant an image in, with LOOPFS_MKFS there to format
 * them. The descriptor, or -errno after logging why, naming what (the
 * feature that is then off). */
int loopfs_images_dir(const char *dir, const char *what);
/* Formats the image open at image_fd as ext4, labelled label, with a
 * journal when journal (mkfs.ext4 reads it through /proc/self/fd: it needs
 * no name). 0 or -errno. */
int loopfs_format(int image_fd, const char *label, bool journal);
/* The loop device the image open at image_fd is attached to already (a
 * mount of it outlived whoever attached it), its path in name: 0, or
 * -ENOENT when there is none. */
int loopfs_find(int image_fd, char *name, size_t size);
/* Binds image_fd to a free loop device (read-only when read_only) that
 * clears itself when its last user goes; direct I/O where the image's
 * filesystem allows it. *loop_fd (the caller's) and its path in name.
 * 0 or -errno. */
int loopfs_attach(int image_fd, bool read_only, int *loop_fd, char *name, size_t size);
/* Mounts the ext4 filesystem on device as a detached mount (in no
 * namespace until someone attaches it): nosuid, nodev, and read-only
 * when read_only. A device already mounted with the same flags gives a
 * mount of the same filesystem (its page cache shared). 0 or -errno. */
int loopfs_mount(const char *device, bool read_only, int *mount_fd);

#endif
