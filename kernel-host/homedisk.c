#include "autoconf.h"

#include "kernel-host/homedisk.h"
#include "kernel-host/loopfs.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOMES_DIR     "homes"

static int homes_fd = -1;

/* Makes path a directory of mode 0700 if it is missing; one that exists is
 * taken as the operator made it, but never through a symlink. */
static int make_private_dir(int at, const char *path)
{
        struct stat st;

        if (mkdirat(at, path, 0700) < 0 && errno != EEXIST)
                return -errno;
        if (fstatat(at, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int homedisk_init(const char *state_dir)
{
        int dir_fd = -1, rc;

        rc = make_private_dir(AT_FDCWD, state_dir);
        if (rc == 0) {
                dir_fd = open(state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                rc = dir_fd < 0 ? -errno : 0;
        }
        if (rc == 0)
                rc = make_private_dir(dir_fd, HOMES_DIR);
        if (rc == 0) {
                homes_fd =
                    openat(dir_fd, HOMES_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                rc = homes_fd < 0 ? -errno : 0;
        }
        if (rc == 0 && access(LOOPFS_MKFS, X_OK) < 0)
                rc = -errno;
        if (rc < 0)
                log_error("--home-storage disk: cannot use %s/" HOMES_DIR " (or " LOOPFS_MKFS
                          ", from e2fsprogs): %s",
                          state_dir, strerror(-rc));
        else
                log_info("sandbox homes are ext4 images in %s/" HOMES_DIR, state_dir);
        if (dir_fd >= 0)
                close(dir_fd);
        return rc;
}

bool homedisk_enabled(void)
{
        return homes_fd >= 0;
}

/* The fresh filesystem's root becomes the user's, reachable by nobody
 * else, and without lost+found (an empty home, as a tmpfs one is). By
 * descriptor: nobody but us has seen this filesystem yet. */
static int give_root(int mount_fd, uid_t uid, gid_t gid)
{
        int root = openat(mount_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int rc = 0;

        if (root < 0)
                return -errno;
        if (unlinkat(root, "lost+found", AT_REMOVEDIR) < 0 && errno != ENOENT)
                rc = -errno;
        if (rc == 0 && (fchown(root, uid, gid) < 0 || fchmod(root, 0700) < 0))
                rc = -errno;
        close(root);
        return rc;
}

int homedisk_create(unsigned long long size_mb, uid_t uid, gid_t gid, int *mount_fd,
                    const char **step)
{
        char device[32];
        int image = -1, loop = -1, mnt = -1, rc;

        *mount_fd = -1;
        *step = "home image";
        if (homes_fd < 0)
                return -ENODEV;
        /* Nameless: freed with its last reference, never left behind. */
        image = openat(homes_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (image < 0) {
                rc = -errno;
                goto out;
        }
        /* Sparse: the host pays for what the sandbox writes, at most this. */
        if (ftruncate(image, (off_t)(size_mb << 20)) < 0) {
                rc = -errno;
                goto out;
        }
        *step = "home mkfs";
        rc = loopfs_format(image, "home", false);
        if (rc < 0)
                goto out;
        *step = "home loop device";
        rc = loopfs_attach(image, false, &loop, device, sizeof(device));
        if (rc < 0)
                goto out;
        *step = "home mount";
        rc = loopfs_mount(device, false, &mnt);
        if (rc < 0)
                goto out;
        *step = "home owner";
        rc = give_root(mnt, uid, gid);
        if (rc < 0)
                goto out;
        *mount_fd = mnt;
        mnt = -1;
out:
        if (mnt >= 0)
                close(mnt);
        /* The mount holds the device now, the device the image. */
        if (loop >= 0)
                close(loop);
        if (image >= 0)
                close(image);
        return rc;
}
