#include "autoconf.h"

#include "kernel-host/rootfs.h"
#include "kernel-host/rootfs_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* Applying a plan (rootfs_ops.h) runs in the sandbox's first process,
 * between clone and pivot_root: async-signal-safe calls only. */

static size_t safe_strlen(const char *s)
{
        size_t n = 0;

        while (s[n])
                n++;
        return n;
}

static int write_all(int fd, const char *data, size_t len)
{
        while (len > 0) {
                ssize_t n = write(fd, data, len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -1;
                data += n;
                len -= (size_t)n;
        }
        return 0;
}

/* The descriptor of detached mount which (ATTACH_*), or -1. */
static int attached_fd(const struct overlay_fds *mounts, unsigned long which)
{
        if (which == ATTACH_LOWER)
                return mounts->lower;
        if (which == ATTACH_HOME)
                return mounts->home;
        if (which == ATTACH_BUILD)
                return mounts->build;
        if (which >= ATTACH_VOLUME && which - ATTACH_VOLUME < mounts->nvolumes)
                return mounts->volumes[which - ATTACH_VOLUME];
        if (which >= ATTACH_LAYER && which < ATTACH_VOLUME && which - ATTACH_LAYER < mounts->nlayers)
                return mounts->layers[which - ATTACH_LAYER];
        return -1;
}

static int run_op(const struct mount_op *op, const struct overlay_fds *mounts)
{
        int fd;

        switch (op->kind) {
        case OP_DIR:
                if (mkdir(op->target, 0755) < 0)
                        return errno == EEXIST ? 0 : -1;
                /* A mode of its own (as the template's tree has it), made
                 * exactly: not as the umask would leave it. */
                if (op->flags && chmod(op->target, (mode_t)op->flags) < 0)
                        return -1;
                if ((op->options & OP_USER_OWNED) &&
                    chown(op->target, ROOTFS_USER_UID, ROOTFS_USER_UID) < 0)
                        return -1;
                return 0;
        case OP_FILE:
                fd = open(op->target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                          (op->options & OP_EXECUTABLE) ? 0755 : 0644);
                if (fd < 0)
                        return -1;
                if (op->data && write_all(fd, op->data, safe_strlen(op->data)) < 0) {
                        close(fd);
                        return -1;
                }
                return close(fd);
        case OP_SYMLINK:
                return symlink(op->source, op->target);
        case OP_TMPFS:
                return mount("tmpfs", op->target, "tmpfs", op->flags, op->data);
        case OP_PROC:
                return mount("proc", op->target, "proc", op->flags, NULL);
        case OP_DEVPTS:
                return mount("devpts", op->target, "devpts", op->flags, op->data);
        case OP_ATTACH:
                fd = attached_fd(mounts, op->flags);
                if (fd < 0) {
                        errno = EBADF;
                        return -1;
                }
                return move_mount(fd, "", AT_FDCWD, op->target, MOVE_MOUNT_F_EMPTY_PATH);
        case OP_OVERLAY:
                /* In the layers' directory (source): data names them from there. */
                if (chdir(op->source) < 0)
                        return -1;
                return mount("overlay", op->target, "overlay", op->flags, op->data);
        case OP_BIND:
                /* A bind of the target onto itself when no source is given. */
                if (mount(op->source ? op->source : op->target, op->target, NULL,
                          MS_BIND | MS_REC | MS_SILENT, NULL) < 0)
                        return -1;
                if (op->options & OP_KEEP_FLAGS)
                        return 0;
                return mount(NULL, op->target, NULL,
                             MS_BIND | MS_REMOUNT | MS_SILENT | op->flags |
                                     ((op->options & OP_WRITABLE) ? 0 : MS_RDONLY),
                             NULL);
        }
        errno = EINVAL;
        return -1;
}

int rootfs_apply(const struct rootfs *p, const struct overlay_fds *mounts, const char **step)
{
        if (mount("tmpfs", p->top, "tmpfs", MS_NOSUID | MS_NODEV, p->top_options) < 0) {
                *step = "tmpfs root";
                return -1;
        }
        for (size_t i = 0; i < p->nops; i++) {
                if (run_op(&p->ops[i], mounts) < 0) {
                        *step = p->ops[i].step;
                        return -1;
                }
        }
        return 0;
}
