/* The filesystem a sandbox sees: planned by the kernel-host, applied by
 * the sandbox's first process between clone and pivot_root. A fresh tmpfs
 * root holds read-only, nosuid, nodev binds of what kernels need (/usr and
 * its merged /bin, /lib* links, a curated /etc, kernelspec directories),
 * a new /proc with /proc/sys read-only, a minimal /dev, size-limited tmpfs
 * /tmp and /home/user, and the sandbox's sockets at /run/kernel. */
#ifndef GLOVEBOX_ROOTFS_H
#define GLOVEBOX_ROOTFS_H

#include <limits.h>

#define ROOTFS_USER_UID 1000 /* "user" inside every sandbox */
#define ROOTFS_RUN_DIR  "/run/kernel"
#define ROOTFS_HOME     "/home/user"
#define ROOTFS_TOOLS_DIR "/opt/glovebox/bin" /* first on PATH: the pip command */
#define ROOTFS_TMPFS    "mode=0755,size=4m,nr_inodes=4096"

struct rootfs;

struct rootfs_params {
        const char *root;      /* the empty host directory the new root is mounted on */
        const char *ipc_dir;   /* host directory mounted at ROOTFS_RUN_DIR */
        unsigned long long disk_mb;
        char *const *ro_paths; /* more host paths, bound read-only at the same path */
};

/* Plans every step; the caller frees the plan. 0 or -errno. */
int rootfs_plan(const struct rootfs_params *params, struct rootfs **out);
void rootfs_free(struct rootfs **rootfs);
/* In the child, inside a private mount namespace: mounts the new root and
 * applies every step. Async-signal-safe. On failure returns -1 with errno
 * set and *step naming the step. */
int rootfs_apply(const struct rootfs *rootfs, const char **step);

#endif
