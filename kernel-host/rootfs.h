/* The filesystem a sandbox sees: planned by the kernel-host, applied by
 * the sandbox's first process between clone and pivot_root. A fresh tmpfs
 * root holds read-only, nosuid, nodev binds of what kernels need (/usr and
 * its merged /bin, /lib* links, a curated /etc, kernelspec directories),
 * a new /proc with /proc/sys read-only and host-wide files masked, a
 * minimal /dev, size-limited tmpfs /tmp and /home/user, and a tiny tmpfs at
 * /run/kernel for the kernels' sockets and connection files. */
#ifndef GLOVEBOX_ROOTFS_H
#define GLOVEBOX_ROOTFS_H

#include <limits.h>

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
        const char *resolv_conf; /* /etc/resolv.conf (NULL: empty, no resolver) */
};

/* Plans every step; the caller frees the plan. 0 or -errno. */
int rootfs_plan(const struct rootfs_params *params, struct rootfs **out);
void rootfs_free(struct rootfs **rootfs);
/* In the child, inside a private mount namespace: mounts the new root and
 * applies every step. Async-signal-safe. On failure returns -1 with errno
 * set and *step naming the step. */
int rootfs_apply(const struct rootfs *rootfs, const char **step);

#endif
