/* Template layers: what a template build (gateway/e2b/builds.h) wrote into
 * its sandbox's root, kept as an ext4 image, <id>.img in the layers
 * directory (STATE_DIR/templates/layers, 0700, the kernel-host's alone).
 *
 * A build's sandbox gets a new layer as the upper layer of its root's
 * overlays (rootfs.h): every change its steps make lands there (whiteouts
 * and overlayfs's user.* marks included), bounded by the image's size.
 * When that sandbox ends the layer is sealed: its filesystem is made
 * read-only, which writes everything back, and from then on it is only
 * ever mounted read-only, as a lower layer of the sandboxes of the
 * template (and of templates built from it). Its files are owned as the
 * sandbox saw them (0 its root, 1000 its user): every sandbox gets its
 * mount idmapped through its own user namespace (overlay.h).
 *
 * The filesystem is one the kernel wrote on the sandbox's behalf: a
 * sandbox never sees the image's bytes, only files in it, so mounting it
 * again is mounting a filesystem the kernel made. No path in it is ever
 * resolved by the kernel-host. Needs root (loop devices, mounts). */
#ifndef GLOVEBOX_LAYERS_H
#define GLOVEBOX_LAYERS_H

#include <stdbool.h>

/* The directories of a layer's root (rootfs.h names them): the root
 * overlay's upper and work directories, and the host /usr overlay's. */
#define LAYERS_ROOT "root"
#define LAYERS_USR  "usr"
#define LAYERS_ROOT_WORK "rwork"
#define LAYERS_USR_WORK  "uwork"

/* Makes dir (0700) if missing and keeps it open. 0 or -errno, logged. */
int layers_init(const char *dir);
/* Whether layers_init succeeded: builds and built templates work. */
bool layers_enabled(void);
/* A new layer id of size_mb MiB for a build: made, formatted, mounted
 * read-write as a detached mount (nosuid, nodev) with its directories,
 * which *mount_fd holds (the caller's: it idmaps it and hands it to the
 * sandbox). The layer stays open here until layers_seal. On failure
 * nothing is left, -errno and *step names what failed. */
int layers_create(const char *id, unsigned long long size_mb, int *mount_fd, const char **step);
/* The build's sandbox is gone: its layer's filesystem becomes read-only
 * (every write is on the image then). 0 or -errno (the layer is then
 * removed). Only a layer made by layers_create. */
int layers_seal(const char *id);
/* A detached, read-only mount of layer id (nosuid, nodev), in *mount_fd
 * (the caller's). Its loop device is kept for the next sandbox, whose
 * mount then shares the filesystem and its page cache. 0 or -errno. */
int layers_mount(const char *id, int *mount_fd);
/* Forgets layer id and removes its image (a deleted template, a failed
 * build); sandboxes that have it mounted keep it until they end. */
void layers_delete(const char *id);

#endif
