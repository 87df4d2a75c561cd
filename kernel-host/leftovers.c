#include "autoconf.h"

#include "kernel-host/leftovers.h"
#include "kernel-host/cgroup.h"
#include "protocol/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOCK_NAME      ".lock"
#define RECORD_PREFIX  "host-"
#define RUNTIME_PREFIX "glovebox-"
#define RUNTIME_SUFFIX 6     /* mkdtemp's XXXXXX */
#define RECORD_MAX     16384 /* a record names at most one group per controller */
#define TREE_DEPTH_MAX 128   /* deeper than any sandbox directory we make */

struct tally {
        unsigned runs, dirs, sockets, cgroups;
};

static struct {
        int dir_fd;  /* our runtime directory */
        int lock_fd; /* its lock, held shared while we run */
        char record[32];
} own = {-1, -1, ""};

/* A listing of the directory open at fd (which stays the caller's), from
 * its start: the duplicate shares fd's offset, which an earlier listing
 * left at the end. NULL if it cannot be read. */
static DIR *open_dir_at(int fd)
{
        int copy = dup(fd);
        DIR *d = copy >= 0 ? fdopendir(copy) : NULL;

        if (!d && copy >= 0)
                close(copy);
        if (d)
                rewinddir(d);
        return d;
}

/* Removes everything beneath dirfd, counting directories and sockets.
 * Never follows a symlink: each directory is opened O_NOFOLLOW from its
 * parent's descriptor. */
static void remove_tree(int dirfd, struct tally *t, int depth)
{
        DIR *d = open_dir_at(dirfd);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d)) != NULL) {
                int sub;

                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (de->d_type != DT_DIR && unlinkat(dirfd, de->d_name, 0) == 0) {
                        t->sockets += de->d_type == DT_SOCK;
                        continue;
                }
                if (depth >= TREE_DEPTH_MAX)
                        continue;
                sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub < 0)
                        continue;
                remove_tree(sub, t, depth + 1);
                close(sub);
                if (unlinkat(dirfd, de->d_name, AT_REMOVEDIR) == 0)
                        t->dirs++;
        }
        closedir(d);
}

/* A dead kernel-host's record: removes the cgroups it names (killing what
 * still runs in them), then the record. */
static void remove_record(int dirfd, const char *name, struct tally *t)
{
        char text[RECORD_MAX];
        ssize_t n;
        int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

        if (fd < 0)
                return;
        n = read(fd, text, sizeof(text) - 1);
        close(fd);
        text[n > 0 ? n : 0] = '\0';
        for (char *line = text, *next; *line; line = next) {
                int rc;

                next = line + strcspn(line, "\n");
                if (*next)
                        *next++ = '\0';
                if (!*line)
                        continue;
                rc = cgroup_remove_stale(line, &t->cgroups);
                if (rc < 0 && rc != -EBUSY)
                        log_warn("leftover cgroup %s not removed: %s", line, strerror(-rc));
        }
        unlinkat(dirfd, name, 0);
}

/* Is name prefix followed by digits only? */
static bool numbered(const char *name, const char *prefix)
{
        size_t len = strlen(prefix);

        return strncmp(name, prefix, len) == 0 && name[len] &&
               strspn(name + len, "0123456789") == strlen(name + len);
}

/* Removes what dead kernel-hosts left in the runtime directory dirfd:
 * the cgroups of their records first, then their sandbox directories
 * (s<n>), and in another run's directory its lock. Nothing else is ever
 * removed, whatever else is there; in our own directory our lock stays.
 * Returns how many records there were. */
static unsigned clean_runtime(int dirfd, bool ours, struct tally *t)
{
        unsigned records = 0;

        for (int pass = 0; pass < 2; pass++) {
                DIR *d = open_dir_at(dirfd);
                struct dirent *de;

                if (!d)
                        return records;
                while ((de = readdir(d)) != NULL) {
                        const char *name = de->d_name;
                        int sub;

                        /* (Our own record is not written yet: any here is a
                         * predecessor's, even one that had our pid.) */
                        if (pass == 0 && numbered(name, RECORD_PREFIX)) {
                                remove_record(dirfd, name, t);
                                records++;
                        } else if (pass == 1 && numbered(name, "s") && de->d_type == DT_DIR) {
                                sub = openat(dirfd, name,
                                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                                if (sub < 0)
                                        continue;
                                remove_tree(sub, t, 1);
                                close(sub);
                                if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0)
                                        t->dirs++;
                        } else if (pass == 1 && !ours &&
                                   (strcmp(name, LOCK_NAME) == 0 ||
                                    strcmp(name, LOCK_NAME ".new") == 0)) {
                                unlinkat(dirfd, name, 0);
                        }
                }
                closedir(d);
        }
        return records;
}

/* Is name what mkdtemp makes of glovebox-XXXXXX? */
static bool runtime_name(const char *name)
{
        size_t len = strlen(RUNTIME_PREFIX);

        if (strncmp(name, RUNTIME_PREFIX, len) != 0 || strlen(name) != len + RUNTIME_SUFFIX)
                return false;
        for (const char *p = name + len; *p; p++) {
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                      (*p >= '0' && *p <= '9')))
                        return false;
        }
        return true;
}

/* The runtime directories beside ours whose run is over: ours by owner,
 * with a lock nobody holds. */
static void clean_siblings(int parent_fd, const char *ours, struct tally *t)
{
        DIR *d = open_dir_at(parent_fd);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d)) != NULL) {
                struct stat st;
                int dir_fd, lock_fd = -1;

                if (!runtime_name(de->d_name) || strcmp(de->d_name, ours) == 0)
                        continue;
                dir_fd =
                    openat(parent_fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (dir_fd < 0)
                        continue;
                if (fstat(dir_fd, &st) == 0 && st.st_uid == geteuid())
                        lock_fd = openat(dir_fd, LOCK_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                /* Held, by a gateway or a kernel-host of a live run (or by
                 * another start cleaning it right now): not ours to touch. */
                if (lock_fd >= 0 && fstat(lock_fd, &st) == 0 && S_ISREG(st.st_mode) &&
                    st.st_uid == geteuid() && flock(lock_fd, LOCK_EX | LOCK_NB) == 0) {
                        clean_runtime(dir_fd, false, t);
                        if (unlinkat(parent_fd, de->d_name, AT_REMOVEDIR) == 0) {
                                t->dirs++;
                                t->runs++;
                        }
                }
                if (lock_fd >= 0)
                        close(lock_fd);
                close(dir_fd);
        }
        closedir(d);
}

int leftovers_remove(const char *runtime_dir)
{
        struct tally t = {0};
        const char *slash = strrchr(runtime_dir, '/');
        char parent[PATH_MAX];
        int parent_fd;

        own.dir_fd = open(runtime_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (own.dir_fd < 0) {
                log_error("cannot open %s: %s", runtime_dir, strerror(errno));
                return -errno;
        }
        snprintf(own.record, sizeof(own.record), RECORD_PREFIX "%d", (int)getpid());
        /* Without the gateway's lock file we were not started by a gateway
         * that marks its runs: nothing beside us is judged then. */
        own.lock_fd = openat(own.dir_fd, LOCK_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (own.lock_fd >= 0 && flock(own.lock_fd, LOCK_SH) < 0) {
                close(own.lock_fd);
                own.lock_fd = -1;
        }
        /* The gateway starts a kernel-host only after the last one died:
         * any other record here is a dead predecessor's. */
        if (own.lock_fd >= 0)
                t.runs += clean_runtime(own.dir_fd, true, &t);
        if (own.lock_fd >= 0 && slash && slash != runtime_dir &&
            (size_t)(slash - runtime_dir) < sizeof(parent)) {
                snprintf(parent, sizeof(parent), "%.*s", (int)(slash - runtime_dir), runtime_dir);
                parent_fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (parent_fd >= 0) {
                        clean_siblings(parent_fd, slash + 1, &t);
                        close(parent_fd);
                }
        }
        if (t.runs || t.dirs || t.sockets || t.cgroups)
                log_info("removed what %u earlier run(s) left behind: %u director%s, %u socket(s), "
                         "%u cgroup(s)",
                         t.runs, t.dirs, t.dirs == 1 ? "y" : "ies", t.sockets, t.cgroups);
        return 0;
}

int leftovers_record_write(void)
{
        char text[RECORD_MAX];
        size_t len = 0;
        ssize_t n;
        int fd, rc = 0;

        text[0] = '\0';
        for (unsigned i = 0; i < cgroup_parent_count(); i++) {
                const char *dir = cgroup_parent(i);

                if (len + strlen(dir) + 2 < sizeof(text))
                        len += (size_t)snprintf(text + len, sizeof(text) - len, "%s\n", dir);
        }
        if (own.dir_fd < 0)
                return -EBADF;
        fd = openat(own.dir_fd, own.record, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0600);
        if (fd < 0) {
                rc = -errno;
                log_warn("cannot write %s: %s", own.record, strerror(errno));
                return rc;
        }
        n = write(fd, text, len);
        if (n != (ssize_t)len)
                rc = n < 0 ? -errno : -EIO;
        close(fd);
        return rc;
}

void leftovers_record_remove(void)
{
        if (own.dir_fd >= 0) {
                unlinkat(own.dir_fd, own.record, 0);
                close(own.dir_fd);
                own.dir_fd = -1;
        }
        if (own.lock_fd >= 0)
                close(own.lock_fd);
        own.lock_fd = -1;
}
