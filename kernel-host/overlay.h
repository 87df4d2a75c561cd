/* The lower layer of a template's sandbox. A template (gateway
 * --template NAME=DIR) is a directory tree the operator made (debootstrap,
 * an OCI image's layers): the sandbox's root is an overlay of that tree,
 * read-only and never written, and an upper layer of the sandbox's own on
 * its size-limited tmpfs (rootfs.h).
 *
 * The tree is the operator's, owned by the host's root. As root, the
 * kernel-host hands the sandbox a detached clone of the tree's mount whose
 * owners are mapped through the sandbox's user namespace (an idmapped
 * mount): the tree's uid 0 is the sandbox's root and its 1000 the
 * sandbox's user, so that overlayfs can copy a file up (it keeps the
 * file's owner, and an owner without a mapping in the sandbox is refused)
 * and what the image lets its user write is writable. The clone travels
 * to the sandbox's first process with its go-ahead (SCM_RIGHTS), which
 * attaches it inside its own mount namespace: no host path that a sandbox
 * can write is ever resolved by the host's root. */
#ifndef GLOVEBOX_OVERLAY_H
#define GLOVEBOX_OVERLAY_H

#include <stdbool.h>
#include <sys/types.h>

/* In the kernel-host, once the sandbox's id maps are written: opens a
 * detached, read-only, nosuid, nodev clone of tree's mount (not of what
 * is mounted inside it), its owners mapped through the user namespace of
 * sandbox_pid. Where the
 * tree's filesystem cannot be idmapped the clone keeps the host's owners
 * (*idmapped false): the sandbox can then write only its home and /tmp.
 * 0 with *fd_out set (the caller closes it), or -errno. */
int overlay_lower_open(const char *tree, pid_t sandbox_pid, int *fd_out, bool *idmapped);
/* Idmaps mount_fd, a detached mount (a template layer's, layers.h)
 * through the user namespace of sandbox_pid, nosuid, nodev, and read-only
 * when read_only. 0 or -errno. */
int overlay_idmap(int mount_fd, pid_t sandbox_pid, bool read_only);

#define OVERLAY_MAX_LAYERS  16 /* HOSTMSG_MAX_LAYERS */
#define OVERLAY_MAX_VOLUMES 8  /* HOSTMSG_MAX_VOLUMES */

/* The detached mounts a sandbox's first process attaches (-1: none): a
 * template's tree or the host's /usr (lower), a disk-backed home
 * (homedisk.h), a build's new layer and a built template's layers, top
 * first (layers.h), and volumes (volumes.h) in the order of their paths
 * (rootfs.h). */
struct overlay_fds {
        int lower, home, build;
        int layers[OVERLAY_MAX_LAYERS];
        size_t nlayers;
        int volumes[OVERLAY_MAX_VOLUMES];
        size_t nvolumes;
        /* where each volume goes (the kernel-host's side only: the plan
         * has them; not sent) */
        const char *volume_paths[OVERLAY_MAX_VOLUMES];
};

void overlay_fds_init(struct overlay_fds *fds);
/* Sends the go-ahead on sock with the descriptors of fds. 0 or -errno. */
int overlay_send_go(int sock, const struct overlay_fds *fds);
/* In the sandbox's first process: receives the go-ahead and the
 * descriptors that came with it (close-on-exec; -1 for one that did not
 * come). Async-signal-safe. 0, or -1 when sock is closed or failed. */
int overlay_recv_go(int sock, struct overlay_fds *fds);

/* Whether the kernel has overlayfs (asked once, loading its module when
 * we are root): without it the host's form falls back to a read-only
 * root, logged once, and a template cannot start. */
bool overlay_available(void);

#endif
