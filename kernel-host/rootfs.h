/* The filesystem a sandbox sees: planned by the kernel-host, applied by
 * the sandbox's first process between clone and pivot_root. A fresh tmpfs
 * root holds read-only, nosuid, nodev binds of what kernels need (/usr and
 * its merged /bin, /lib* links, a curated /etc, kernelspec directories),
 * a new /proc with /proc/sys read-only and host-wide files masked, a
 * minimal /dev, size-limited tmpfs /tmp and /home/user, and a tiny tmpfs at
 * /run/kernel for the kernels' sockets and connection files. A template's
 * root is instead an overlay of its tree and a writable upper layer on
 * one size-limited tmpfs that holds /home/user and /tmp too. With disk
 * homes (homedisk.h) /home/user is instead a filesystem of its own. */
#ifndef GLOVEBOX_ROOTFS_H
#define GLOVEBOX_ROOTFS_H

#include <limits.h>
#include <stdbool.h>

#define ROOTFS_USER_UID 1000 /* "user" inside every sandbox */
#define ROOTFS_RUN_DIR  "/run/kernel"
#define ROOTFS_HOME     "/home/user"
#define ROOTFS_TOOLS_DIR "/opt/glovebox/bin" /* first on PATH: the pip command */
#define ROOTFS_TMPFS    "mode=0755,size=4m,nr_inodes=4096"
/* /run/kernel: a kernel needs 6 inodes (5 sockets and its connection
 * file) and one page (the file). 256 inodes hold 42 kernels and 256 KiB 64
 * connection files, well over the 16 contexts of an E2B sandbox, while a
 * tenant can store no more than 256 KiB there. */
#define ROOTFS_RUN_TMPFS "size=256k,nr_inodes=256"

struct rootfs;

struct rootfs_params {
        const char *root;      /* the empty host directory the new root is mounted on */
        unsigned long long disk_mb;
        char *const *ro_paths; /* more host paths, bound read-only at the same path */
        /* A template's tree (overlay.h), or NULL for the host's /usr. */
        const char *template_root;
        bool lower_by_fd; /* the tree comes as a detached mount to rootfs_apply */
        const char *resolv_conf; /* /etc/resolv.conf (NULL: empty, no resolver) */
        bool home_by_fd; /* /home/user comes as a detached mount (homedisk.h) */
};

/* The detached mounts rootfs_apply attaches (-1: none). */
struct rootfs_mounts {
        int lower_fd; /* a template's tree (lower_by_fd) */
        int home_fd;  /* /home/user (home_by_fd) */
};

/* Plans every step; the caller frees the plan. 0 or -errno. */
int rootfs_plan(const struct rootfs_params *params, struct rootfs **out);
void rootfs_free(struct rootfs **rootfs);
/* The directory that becomes the sandbox's root (pivot_root). */
const char *rootfs_root(const struct rootfs *rootfs);
/* Whether the root stays writable (a template's overlay) rather than
 * being remounted read-only. */
bool rootfs_writable_root(const struct rootfs *rootfs);
/* In the child, inside a private mount namespace: mounts the new root and
 * applies every step, attaching the detached mounts the params said would
 * come. Async-signal-safe. On failure returns -1 with errno set and *step
 * naming the step. */
int rootfs_apply(const struct rootfs *rootfs, const struct rootfs_mounts *mounts,
                 const char **step);

#endif
