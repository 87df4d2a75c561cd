/* The filesystem a sandbox sees: planned by the kernel-host, applied by
 * the sandbox's first process between clone and pivot_root. On one tmpfs
 * of the sandbox's disk limit, the root is an overlay: a base layer of our
 * own (the files and mount points a sandbox needs: Glovebox's /etc files,
 * the tools, /proc, /home/user, /run/kernel...) over the image (the host's
 * merged /bin, /lib* links, or a template's tree), under an upper layer
 * that takes every write, seen by no other sandbox and gone with it. The
 * host's form has /usr as a second overlay, of the host's /usr, and
 * read-only, nosuid, nodev binds of a curated /etc's entries and of
 * kernelspec directories. Then a new /proc with /proc/sys read-only and
 * host-wide files masked, a minimal /dev, /tmp and /home/user from the same
 * tmpfs, and a tiny tmpfs at /run/kernel for the kernels' sockets and
 * connection files. With disk homes (homedisk.h) /home/user is instead a
 * filesystem of its own. */
#ifndef GLOVEBOX_ROOTFS_H
#define GLOVEBOX_ROOTFS_H

#include "protocol/hostmsg.h"

#include "kernel-host/overlay.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define ROOTFS_USER_UID 1000 /* "user" inside every sandbox */
#define ROOTFS_RUN_DIR  "/run/kernel"
#define ROOTFS_HOME     "/home/user"
#define ROOTFS_TOOLS_DIR "/opt/glovebox/bin" /* first on PATH: the pip command */
#define ROOTFS_SUDO      HOSTMSG_SUDO_COMMAND /* glovebox-sudo (sudo_main.c) */
#define SUDO_PROGRAM     "glovebox-sudo"
/* /run/kernel: a kernel needs 6 inodes (5 sockets and its connection
 * file) and one page (the file). 256 inodes hold 42 kernels and 256 KiB 64
 * connection files, well over the 16 contexts of an E2B sandbox, while a
 * tenant can store no more than 256 KiB there. */
#define ROOTFS_RUN_TMPFS "size=256k,nr_inodes=256"
/* The root of the host's form on a kernel without overlayfs (read-only). */
#define ROOTFS_FLAT_TMPFS "mode=0755,size=4m,nr_inodes=4096"

struct rootfs;

struct rootfs_params {
        const char *root;      /* the empty host directory the new root is mounted on */
        unsigned long long disk_mb;
        char *const *ro_paths; /* more host paths, bound read-only at the same path */
        /* A template's tree (overlay.h), or NULL for the host's /usr. */
        const char *template_root;
        /* The lowest layer (the tree, or the host's /usr) comes as a
         * detached mount to rootfs_apply; else it is used by its path. */
        bool lower_by_fd;
        const char *resolv_conf; /* /etc/resolv.conf (NULL: empty, no resolver) */
        bool home_by_fd; /* /home/user comes as a detached mount (homedisk.h) */
        /* The kernel has overlayfs: the host's form is writable (else its
         * root is a read-only tmpfs, as before overlays). */
        bool overlay;
        /* A built template's layers (layers.h), top first, come as
         * detached mounts: lower layers of the root (and of the host's
         * /usr), between the base and the image. */
        size_t nlayers;
        /* A build: its new layer comes as a detached mount and takes every
         * write to the root (and /usr), home included. */
        bool build_by_fd;
        /* Volumes (volumes.h) come as detached mounts, attached last at
         * these paths (hostmsg_volume_path_valid's), made where missing. */
        const char *const *volume_paths;
        size_t nvolumes;
};

/* Whether glovebox-init (init_main.c) is beside the kernel-host: without
 * it no sandbox can be made. */
bool rootfs_init_found(void);
/* Plans every step; the caller frees the plan. 0 or -errno. */
int rootfs_plan(const struct rootfs_params *params, struct rootfs **out);
void rootfs_free(struct rootfs **rootfs);
/* The directory that becomes the sandbox's root (pivot_root). */
const char *rootfs_root(const struct rootfs *rootfs);
/* Whether the root stays writable (an overlay) rather than being
 * remounted read-only. */
bool rootfs_writable_root(const struct rootfs *rootfs);
/* In the child, inside a private mount namespace: mounts the new root and
 * applies every step, attaching the detached mounts the params said would
 * come (overlay.h). Async-signal-safe. On failure returns -1 with errno
 * set and *step naming the step. */
int rootfs_apply(const struct rootfs *rootfs, const struct overlay_fds *mounts,
                 const char **step);

#endif
