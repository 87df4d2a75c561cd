/* The plan of a sandbox's root filesystem (rootfs.h), shared by the
 * kernel-host's planning (rootfs.c) and the sandbox's first process, which
 * applies it (rootfs_apply.c): a list of steps, each a directory, a file, a
 * link or a mount. */
#ifndef GLOVEBOX_ROOTFS_OPS_H
#define GLOVEBOX_ROOTFS_OPS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

enum op_kind {
        OP_DIR,     /* mkdir target */
        OP_FILE,    /* create target with data as its content */
        OP_SYMLINK, /* target -> source */
        OP_TMPFS,   /* tmpfs on target, options in data */
        OP_BIND,    /* bind source on target; read-only unless OP_WRITABLE */
        OP_PROC,    /* a new proc on target */
        OP_DEVPTS,  /* a private devpts on target */
        OP_ATTACH,  /* a detached mount on target: flags ATTACH_* */
        OP_OVERLAY, /* overlayfs on target, options in data */
};

#define ATTACH_LOWER 0ul  /* the template's tree, or the host's /usr */
#define ATTACH_HOME  1ul  /* a disk-backed /home/user */
#define ATTACH_BUILD 2ul  /* a build's new layer */
#define ATTACH_LAYER 16ul /* + i: a built template's layer i */
#define ATTACH_VOLUME 64ul /* + i: volume i */

#define OP_WRITABLE   1u /* bind stays writable */
#define OP_KEEP_FLAGS 2u /* bind keeps its source's flags (device nodes) */
#define OP_EXECUTABLE 4u /* file is created with mode 0755 */
#define OP_USER_OWNED 8u /* directory is given to the sandbox's user */

struct mount_op {
        enum op_kind kind;
        unsigned options;
        unsigned long flags; /* mount flags (tmpfs, proc), remount flags (bind), mode (dir) */
        char *target;
        char *source;
        char *data;
        char step[64]; /* named in errors: "bind /usr" */
};

struct rootfs {
        char top[PATH_MAX]; /* the host directory the first tmpfs is mounted on */
        char top_options[128];
        char root[PATH_MAX]; /* what targets are relative to while planning; then the new root */
        bool writable_root;  /* an overlay; else remounted read-only (plan_host_flat) */
        bool home_in_root;   /* /home/user is the root overlay's (a built template's, a build's) */
        bool homecache;      /* HOMECACHE_MOUNT is bound (homecache.h): the host's root only */
        char upper[32], work[32], usr_upper[32], usr_work[32]; /* layers' names in top */
        struct mount_op *ops;
        size_t nops, cap;
};

#endif
