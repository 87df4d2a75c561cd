#include "autoconf.h"

#include "kernel-host/homedisk.h"
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
#define MKFS_PROGRAM  "/sbin/mkfs.ext4"
#define MKFS_FD       3
#define LOOP_ATTEMPTS 16 /* another process may take the free device we were given */

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
        if (rc == 0 && access(MKFS_PROGRAM, X_OK) < 0)
                rc = -errno;
        if (rc < 0)
                log_error("--home-storage disk: cannot use %s/" HOMES_DIR " (or " MKFS_PROGRAM
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

/* Formats the image open at image_fd. mkfs reads it as /proc/self/fd/3:
 * the image has no name. No journal (the filesystem ends with its
 * sandbox, a crash loses nothing worth replaying), no room kept for
 * growing it, no reserved blocks, 4 KiB blocks and an inode per 16 KiB
 * even when small: of a 64 MiB quota 62 MiB are the user's, of 1 GiB
 * 992 MiB. Inode tables are left to read as the
 * zeroes a sparse file holds (mounted with noinit_itable), so formatting
 * writes only a few MiB. */
static int format_image(int image_fd)
{
        char *argv[] = {(char *)MKFS_PROGRAM,
                        (char *)"-q",
                        (char *)"-F",
                        (char *)"-m",
                        (char *)"0",
                        (char *)"-O",
                        (char *)"^has_journal,^resize_inode",
                        (char *)"-T",
                        (char *)"default",
                        (char *)"-E",
                        (char *)"lazy_itable_init=1,nodiscard",
                        (char *)"-L",
                        (char *)"home",
                        (char *)"/proc/self/fd/3",
                        NULL};
        char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
        sigset_t none;
        int status, null_fd;
        pid_t pid;

        sigemptyset(&none);
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                sigprocmask(SIG_SETMASK, &none, NULL);
                null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
                if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0 ||
                    dup2(null_fd, 2) < 0 || dup2(image_fd, MKFS_FD) < 0)
                        _exit(127);
                syscall(SYS_close_range, MKFS_FD + 1, ~0u, 0);
                execve(MKFS_PROGRAM, argv, envp);
                _exit(127);
        }
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return -errno;
        }
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

/* Binds image_fd to a free loop device that clears itself when its last
 * user (the mount) goes. Direct I/O where the image's filesystem allows it:
 * the image's own pages then take no page cache besides the home's. */
static int attach_loop(int image_fd, int *loop_fd, char *name, size_t size)
{
        struct loop_config config;
        int ctl, fd = -1, rc = -EBUSY;

        ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0)
                return -errno;
        for (int attempt = 0; attempt < LOOP_ATTEMPTS && rc == -EBUSY; attempt++) {
                int n = ioctl(ctl, LOOP_CTL_GET_FREE);

                if (n < 0) {
                        rc = -errno;
                        break;
                }
                snprintf(name, size, "/dev/loop%d", n);
                fd = open(name, O_RDWR | O_CLOEXEC);
                if (fd < 0) {
                        rc = -errno;
                        break;
                }
                memset(&config, 0, sizeof(config));
                config.fd = (__u32)image_fd;
                config.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
                snprintf((char *)config.info.lo_file_name, sizeof(config.info.lo_file_name),
                         "glovebox-home");
                rc = ioctl(fd, LOOP_CONFIGURE, &config) < 0 ? -errno : 0;
                if (rc == -EINVAL) {
                        config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
                        rc = ioctl(fd, LOOP_CONFIGURE, &config) < 0 ? -errno : 0;
                }
                if (rc < 0) {
                        close(fd);
                        fd = -1;
                }
        }
        close(ctl);
        *loop_fd = fd;
        return rc;
}

/* Mounts the loop device as a detached mount (in no namespace until the
 * sandbox attaches it). */
static int mount_detached(const char *device, int *mount_fd)
{
        int fs, mnt = -1, rc = 0;

        fs = fsopen("ext4", FSOPEN_CLOEXEC);
        if (fs < 0)
                return -errno;
        if (fsconfig(fs, FSCONFIG_SET_STRING, "source", device, 0) < 0 ||
            fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
            fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                rc = -errno;
        if (rc == 0) {
                mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
                rc = mnt < 0 ? -errno : 0;
        }
        close(fs);
        *mount_fd = mnt;
        return rc;
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
        rc = format_image(image);
        if (rc < 0)
                goto out;
        *step = "home loop device";
        rc = attach_loop(image, &loop, device, sizeof(device));
        if (rc < 0)
                goto out;
        *step = "home mount";
        rc = mount_detached(device, &mnt);
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
