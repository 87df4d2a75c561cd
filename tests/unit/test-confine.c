/* kernel-host/confine.c: a child started in its cgroup (confine_vfork_into)
 * rather than moved there. Its group is found only on cgroup v2 and only
 * when it is one directory; as root, on the host's own cgroup2 mount (this
 * machine's unified hierarchy, or a pure v2 host's root), a child started
 * there is in that group from its first instruction, shares the caller's
 * memory as a vfork child does and runs before the caller goes on; the
 * caller stays where it was; a bad descriptor starts nothing. */
#include "autoconf.h"

#include "kernel-host/confine.h"

#include "tests/unit/tap.h"

#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The path of the caller's group in the cgroup v2 hierarchy ("0::" of
 * /proc/self/cgroup) into out; 0, or -1. Only open, read and close: a vfork
 * child calls it. */
static int own_v2_group(char *out, size_t size)
{
        char buf[4096];
        ssize_t n, len = 0;
        int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);

        if (fd < 0)
                return -1;
        while (len < (ssize_t)sizeof(buf) - 1 &&
               (n = read(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
                len += n;
        close(fd);
        buf[len] = '\0';
        for (char *line = buf; line && *line;) {
                char *end = strchr(line, '\n');

                if (end)
                        *end = '\0';
                if (strncmp(line, "0::", 3) == 0 && strlen(line + 3) < size) {
                        memcpy(out, line + 3, strlen(line + 3) + 1);
                        return 0;
                }
                line = end ? end + 1 : NULL;
        }
        return -1;
}

/* Whether text ends with tail (our group's path is seen from our cgroup
 * namespace, and the mount may be of a subtree: only its end is known). */
static bool ends_with(const char *text, const char *tail)
{
        size_t n = strlen(text), m = strlen(tail);

        return n >= m && strcmp(text + n - m, tail) == 0;
}

/* Where cgroup2 is mounted, from /proc/self/mountinfo; 0 or -1. */
static int find_cgroup2(char *out, size_t size)
{
        char line[4096];
        FILE *f = fopen("/proc/self/mountinfo", "re");
        int rc = -1;

        if (!f)
                return -1;
        while (rc < 0 && fgets(line, sizeof(line), f)) {
                char point[PATH_MAX];
                const char *dash = strstr(line, " - cgroup2 ");

                if (dash && sscanf(line, "%*s %*s %*s %*s %4095s", point) == 1 &&
                    strlen(point) < size) {
                        memcpy(out, point, strlen(point) + 1);
                        rc = 0;
                }
        }
        fclose(f);
        return rc;
}

static void test_finding_the_group(void)
{
        char tmp[] = "/tmp/glovebox-test-confine-XXXXXX";
        const char *none[] = {"", ""};
        const char *plain[1], *two[2];

        ok(confine_open_start_group(none, 2) == -1, "no directory: no group to start in");
        if (!mkdtemp(tmp)) {
                diag("mkdtemp failed");
                return;
        }
        plain[0] = tmp;
        ok(confine_open_start_group(plain, 1) == -1, "a directory not on cgroup2 is not one");
        two[0] = tmp;
        two[1] = tmp;
        ok(confine_open_start_group(two, 2) == -1,
           "groups of several hierarchies (cgroup v1) are moved into, not started in");
        rmdir(tmp);
}

static void test_start_in_group(void)
{
        char mount_point[PATH_MAX], dir[PATH_MAX + 64], before[PATH_MAX], after[PATH_MAX];
        char want[PATH_MAX + 64], seen[PATH_MAX];
        const char *dirs[1];
        volatile int child_ran = 0;
        int fd, status = -1;
        pid_t pid;

        if (!confine_can_start_in_group()) {
                diag("skipped: this kernel has no CLONE_INTO_CGROUP");
                return;
        }
        if (geteuid() != 0 || find_cgroup2(mount_point, sizeof(mount_point)) < 0 ||
            own_v2_group(before, sizeof(before)) < 0) {
                diag("skipped: needs root and a cgroup2 mount");
                return;
        }
        snprintf(dir, sizeof(dir), "%s/glovebox-test-confine-%d", mount_point, (int)getpid());
        if (mkdir(dir, 0755) < 0) {
                diag("skipped: cannot make %s", dir);
                return;
        }
        snprintf(want, sizeof(want), "/glovebox-test-confine-%d", (int)getpid());
        dirs[0] = dir;
        fd = confine_open_start_group(dirs, 1);
        ok(fd >= 0, "a group on cgroup2 is one to start in (%s)", dir);

        seen[0] = '\0';
        pid = confine_vfork_into(fd);
        if (pid == 0) {
                /* In the group from the start: /proc/self/cgroup says so.
                 * What it says goes to the caller through the memory we
                 * share with it. */
                child_ran = 1;
                _exit(own_v2_group(seen, sizeof(seen)) == 0 && ends_with(seen, want) ? 0 : 1);
        }
        ok(pid > 0, "the child started (%d)", (int)pid);
        ok(child_ran == 1, "it ran, in our memory, before we went on");
        if (pid > 0)
                waitpid(pid, &status, 0);
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "it was in the group: %s", seen);
        ok(own_v2_group(after, sizeof(after)) == 0 && strcmp(after, before) == 0,
           "we stayed in ours (%s)", after);

        close(fd);
        errno = 0;
        pid = confine_vfork_into(fd);
        if (pid == 0)
                _exit(0);
        ok(pid == -1 && errno == EBADF, "a closed descriptor starts nothing: EBADF (%d)",
           (int)errno);
        ok(rmdir(dir) == 0, "the group is empty again");
}

int main(void)
{
        test_finding_the_group();
        test_start_in_group();
        return done_testing();
}
