#include "autoconf.h"

#include "kernel-host/homecache.h"
#include "protocol/log.h"
#include "protocol/tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUILD_SECONDS 60 /* a font list takes about a second */
#define WALK_DEPTH    4
#define LINK_DEPTH    4
#define LINK_MAX      64 /* files linked into a home, at most */

/* What the cache is made from: when any of these directories (or one
 * below, a few levels down) changes, the cache is built again. */
static const char *const sources[] = {"/usr/share/fonts", "/usr/local/share/fonts",
                                      "/usr/lib/python3/dist-packages/matplotlib"};

static bool ready;

static long long newest_dir_mtime(int fd, int depth)
{
        struct stat st;
        long long newest = fstat(fd, &st) == 0 ? (long long)st.st_mtime : 0;
        DIR *d;
        struct dirent *e;

        if (depth == 0)
                return newest;
        d = fdopendir(dup(fd));
        if (!d)
                return newest;
        while ((e = readdir(d))) {
                int sub;

                if (e->d_type != DT_DIR || e->d_name[0] == '.')
                        continue;
                sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub < 0)
                        continue;
                long long t = newest_dir_mtime(sub, depth - 1);
                newest = t > newest ? t : newest;
                close(sub);
        }
        closedir(d);
        return newest;
}

static long long sources_stamp(void)
{
        long long newest = 0;

        for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
                int fd = open(sources[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);

                if (fd < 0)
                        continue;
                long long t = newest_dir_mtime(fd, WALK_DEPTH);
                newest = t > newest ? t : newest;
                close(fd);
        }
        return newest;
}

/* matplotlib's import, with home as its home: it writes the font list
 * there. 0 when it ended well within BUILD_SECONDS. */
static int run_build(const char *home)
{
        char env_home[sizeof(HOMECACHE_DIR) + 16];
        char *argv[] = {(char *)GLOVEBOX_ZYGOTE_PYTHON, (char *)"-c",
                        (char *)"import matplotlib.font_manager", NULL};
        char *envp[] = {(char *)"PATH=/usr/local/bin:/usr/bin:/bin", env_home,
                        (char *)"LANG=C.UTF-8", (char *)"MPLBACKEND=Agg", NULL};
        int status;
        pid_t pid;

        snprintf(env_home, sizeof(env_home), "HOME=%s", home);
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                int null_fd = open("/dev/null", O_RDWR);
                sigset_t none;

                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                umask(022);
                if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0 || chdir(home) < 0)
                        _exit(126);
                alarm(BUILD_SECONDS);
                execve(argv[0], argv, envp);
                _exit(127);
        }
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return -errno;
        }
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EIO;
}

void homecache_prepare(void)
{
        char stamp_path[] = HOMECACHE_DIR ".stamp", fresh[] = HOMECACHE_DIR ".new";
        long long stamp, recorded = -1;
        struct stat st;
        FILE *f;

        if (geteuid() != 0)
                return;
        stamp = sources_stamp();
        f = fopen(stamp_path, "re");
        if (f) {
                if (fscanf(f, "%lld", &recorded) != 1)
                        recorded = -1;
                fclose(f);
        }
        if (recorded == stamp && lstat(HOMECACHE_DIR, &st) == 0 && S_ISDIR(st.st_mode)) {
                ready = true;
                return;
        }
        tree_remove(fresh);
        if ((mkdir("/var/cache/glovebox", 0755) < 0 && errno != EEXIST) || mkdir(fresh, 0755) < 0) {
                log_info("no shared font cache: cannot make %s: %s", fresh, strerror(errno));
                return;
        }
        if (run_build(fresh) < 0) {
                log_info("no shared font cache: matplotlib could not build one (not installed?)");
                tree_remove(fresh);
                return;
        }
        unlink(stamp_path);
        tree_remove(HOMECACHE_DIR);
        if (rename(fresh, HOMECACHE_DIR) < 0) {
                log_warn("no shared font cache: rename %s: %s", fresh, strerror(errno));
                tree_remove(fresh);
                return;
        }
        f = fopen(stamp_path, "we");
        if (f) {
                fprintf(f, "%lld\n", stamp);
                fclose(f);
        }
        log_info("built the shared font cache in %s", HOMECACHE_DIR);
        ready = true;
}

const char *homecache_dir(void)
{
        return ready ? HOMECACHE_DIR : NULL;
}

/* Links each regular file below src into dst (both directories, src
 * read-only), making dst's directories. Nothing in dst is followed:
 * every name is made new, and one already there stops that branch. */
static int link_tree(int src, int dst, const char *target, int uid, int depth, int *budget)
{
        DIR *d = fdopendir(dup(src));
        struct dirent *e;
        int rc = 0;

        if (!d)
                return -errno;
        while (rc == 0 && (e = readdir(d)) && *budget > 0) {
                char path[512];
                int s, t;

                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                if ((size_t)snprintf(path, sizeof(path), "%s/%s", target, e->d_name) >=
                    sizeof(path))
                        continue;
                if (e->d_type == DT_REG) {
                        (*budget)--;
                        if (symlinkat(path, dst, e->d_name) == 0 &&
                            fchownat(dst, e->d_name, uid, uid, AT_SYMLINK_NOFOLLOW) < 0)
                                rc = -errno;
                        continue;
                }
                if (e->d_type != DT_DIR || depth == 0)
                        continue;
                if (mkdirat(dst, e->d_name, 0755) < 0)
                        continue;
                s = openat(src, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                t = openat(dst, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (t >= 0 && fchown(t, uid, uid) < 0)
                        rc = -errno;
                if (rc == 0 && s >= 0 && t >= 0)
                        rc = link_tree(s, t, path, uid, depth - 1, budget);
                if (s >= 0)
                        close(s);
                if (t >= 0)
                        close(t);
        }
        closedir(d);
        return rc;
}

int homecache_link(const char *cache, const char *home_path, int uid)
{
        int src, home, rc, budget = LINK_MAX;
        DIR *d;
        struct dirent *e;
        bool empty = true;

        src = open(cache, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0)
                return errno == ENOENT ? 0 : -errno;
        home = open(home_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (home < 0) {
                rc = -errno;
                close(src);
                return rc;
        }
        /* A home with anything in it (files brought back, a template's) is
         * the sandbox's as it is. */
        d = fdopendir(dup(home));
        while (d && (e = readdir(d))) {
                if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                        empty = false;
        }
        if (d)
                closedir(d);
        rc = d && empty ? link_tree(src, home, cache, uid, LINK_DEPTH, &budget) : 0;
        close(home);
        close(src);
        return rc;
}
