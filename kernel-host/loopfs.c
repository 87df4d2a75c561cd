#include "autoconf.h"

#include "kernel-host/loopfs.h"
#include "protocol/log.h"

#include <dirent.h>
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

#define MKFS_FD       3
#define LOOP_ATTEMPTS 16 /* another process may take the free device we were given */

/* mkfs reads the image as /proc/self/fd/3. No journal unless asked (a
 * home ends with its sandbox, a layer is written once by its build and
 * then sealed read-only: a crash loses nothing worth replaying; a volume
 * outlives its sandboxes and has one), no room kept for
 * growing it, no reserved blocks, 4 KiB blocks and an inode per 16 KiB
 * even when small: of a 64 MiB image 62 MiB are usable, of 1 GiB
 * 992 MiB. Inode tables are left to read as the zeroes a sparse file
 * holds (mounted with noinit_itable), so formatting writes only a few
 * MiB. */
int loopfs_format(int image_fd, const char *label, bool journal)
{
        char *argv[] = {(char *)LOOPFS_MKFS,
                        (char *)"-q",
                        (char *)"-F",
                        (char *)"-m",
                        (char *)"0",
                        (char *)"-O",
                        (char *)(journal ? "^resize_inode" : "^has_journal,^resize_inode"),
                        (char *)"-T",
                        (char *)"default",
                        (char *)"-E",
                        (char *)"lazy_itable_init=1,nodiscard",
                        (char *)"-L",
                        (char *)label,
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
                execve(LOOPFS_MKFS, argv, envp);
                _exit(127);
        }
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return -errno;
        }
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

int loopfs_images_dir(const char *dir, const char *what)
{
        struct stat st;
        int fd = -1, rc = 0;

        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                rc = -errno;
        if (rc == 0) {
                fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                rc = fd < 0 ? -errno : 0;
        }
        /* Ours alone: nobody else may plant an image here. */
        if (rc == 0 && fstat(fd, &st) < 0)
                rc = -errno;
        if (rc == 0 && (st.st_uid != 0 || (st.st_mode & 077)))
                rc = -EPERM;
        if (rc == 0 && access(LOOPFS_MKFS, X_OK) < 0)
                rc = -errno;
        if (rc < 0) {
                log_error("%s: cannot use %s (root's, mode 0700) or " LOOPFS_MKFS ": %s", what, dir,
                          strerror(-rc));
                if (fd >= 0)
                        close(fd);
                return rc;
        }
        return fd;
}

int loopfs_attach(int image_fd, bool read_only, int *loop_fd, char *name, size_t size)
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
                fd = open(name, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
                if (fd < 0) {
                        rc = -errno;
                        break;
                }
                memset(&config, 0, sizeof(config));
                config.fd = (__u32)image_fd;
                config.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO |
                                       (read_only ? LO_FLAGS_READ_ONLY : 0);
                snprintf((char *)config.info.lo_file_name, sizeof(config.info.lo_file_name),
                         "glovebox");
                rc = ioctl(fd, LOOP_CONFIGURE, &config) < 0 ? -errno : 0;
                if (rc == -EINVAL) {
                        config.info.lo_flags &= ~(__u32)LO_FLAGS_DIRECT_IO;
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

int loopfs_mount(const char *device, bool read_only, int *mount_fd)
{
        int fs, mnt = -1, rc = 0;

        fs = fsopen("ext4", FSOPEN_CLOEXEC);
        if (fs < 0)
                return -errno;
        if (fsconfig(fs, FSCONFIG_SET_STRING, "source", device, 0) < 0 ||
            fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
            (read_only && fsconfig(fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0) ||
            fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                rc = -errno;
        if (rc == 0) {
                mnt = fsmount(fs, FSMOUNT_CLOEXEC,
                              MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
                                  (read_only ? MOUNT_ATTR_RDONLY : 0));
                rc = mnt < 0 ? -errno : 0;
        }
        close(fs);
        *mount_fd = mnt;
        return rc;
}


int loopfs_find(int image_fd, char *name, size_t size)
{
        struct loop_info64 info;
        struct stat st;
        char path[32];
        DIR *dir;
        struct dirent *e;
        int rc = -ENOENT;

        if (fstat(image_fd, &st) < 0)
                return -errno;
        dir = opendir("/sys/block");
        if (!dir)
                return -errno;
        while (rc == -ENOENT && (e = readdir(dir))) {
                int fd;

                if (strncmp(e->d_name, "loop", 4) != 0 || !e->d_name[4])
                        continue;
                snprintf(path, sizeof(path), "/dev/%s", e->d_name);
                fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
                if (fd < 0)
                        continue;
                if (ioctl(fd, LOOP_GET_STATUS64, &info) == 0 && info.lo_device == st.st_dev &&
                    info.lo_inode == st.st_ino) {
                        snprintf(name, size, "%s", path);
                        rc = 0;
                }
                close(fd);
        }
        closedir(dir);
        return rc;
}
