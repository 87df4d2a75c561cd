#include "autoconf.h"

#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int tree_remove_at(int dirfd)
{
        int fd = dup(dirfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *de;
        int rc = 0;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return -errno;
        }
        while ((de = readdir(d)) != NULL) {
                int sub;

                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (unlinkat(dirfd, de->d_name, 0) == 0)
                        continue;
                if (errno != EISDIR) {
                        rc = rc ? rc : -errno;
                        continue;
                }
                sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) {
                        int r = tree_remove_at(sub);

                        rc = rc ? rc : r;
                        close(sub);
                }
                if (unlinkat(dirfd, de->d_name, AT_REMOVEDIR) < 0)
                        rc = rc ? rc : -errno;
        }
        closedir(d);
        return rc;
}

int tree_remove(const char *path)
{
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (fd < 0)
                return -errno;
        tree_remove_at(fd);
        close(fd);
        return rmdir(path) < 0 ? -errno : 0;
}

uint64_t tree_file_bytes_at(int dirfd)
{
        int fd = dup(dirfd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;
        uint64_t total = 0;

        if (!d) {
                if (fd >= 0)
                        close(fd);
                return UINT64_MAX;
        }
        while ((e = readdir(d))) {
                struct stat st;

                if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode))
                        total += (uint64_t)st.st_blocks * 512;
        }
        closedir(d);
        return total;
}
