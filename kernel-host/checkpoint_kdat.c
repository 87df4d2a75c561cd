#include "autoconf.h"

#include "kernel-host/checkpoint.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "kernel-host/checkpoint_internal.h"

/* What CRIU learns of the kernel at each run (its kerndat: vDSO, CPU
 * features, what the kernel's interfaces accept) took about 50 ms of every
 * dump and every restore here. CRIU keeps it in /run/criu.kdat, but only
 * where /run is a tmpfs, as on a host that runs systemd; in a container,
 * or on a host like this one, /run is not, and every run learns it again.
 * So criu runs in a mount namespace of its own whose /run is a tmpfs of
 * the kernel-host's: a detached mount, which nothing on the host sees,
 * cloned into each run's namespace, so what one run learnt the next reads.
 * Of the host's /run, criu would read only its own cache and the xtables
 * lock, which serializes iptables within one network namespace (criu's
 * are the sandbox's, which nothing else changes).
 *
 * The same tmpfs holds criu's cgroup yard: the directory where it finds
 * each cgroup hierarchy, by its controllers' names (cpu, memory; systemd
 * for name=systemd; unified for cgroup2). Without one, criu mounts every
 * hierarchy again at each dump (once per process) and each restore, and a
 * cgroup2 mount takes 11 to 27 ms here; a bind of the host's mount, in
 * criu's namespace, takes a tenth of a millisecond. The yard is only used
 * when every hierarchy the kernel-host is in has a mount of its root. */

#define YARD_DIR "glovebox-cgroup-yard"
#define YARD_PATH "/run/" YARD_DIR
#define YARD_MAX 16

struct hierarchy {
        char *name;  /* as criu names it in its yard */
        char *point; /* where the host has its root mounted */
};

static struct hierarchy yard[YARD_MAX];
static size_t yard_count; /* 0: no yard */

static int kdat_fd = -1;

/* Where the root of the hierarchy of controllers (comma-separated, as in
 * /proc/self/cgroup; "" for cgroup2) is mounted: a strdup'd path, or NULL. */
static char *hierarchy_point(const char *controllers)
{
        FILE *f = fopen("/proc/self/mountinfo", "re");
        char line[3 * PATH_MAX];
        struct mount_line m;
        char *found = NULL;

        if (!f)
                return NULL;
        while (!found && fgets(line, sizeof(line), f)) {
                bool all = true;

                if (!checkpoint_mount_parse(line, &m) || strcmp(m.root, "/") != 0 ||
                    strncmp(m.point, "/run", 4) == 0)
                        continue;
                if (!controllers[0]) {
                        if (strcmp(m.fstype, "cgroup2") == 0)
                                found = strdup(m.point);
                        continue;
                }
                if (strcmp(m.fstype, "cgroup") != 0)
                        continue;
                /* Each of the hierarchy's controllers among the options. */
                for (const char *c = controllers; all && *c;) {
                        size_t n = strcspn(c, ",");
                        const char *o = m.options;

                        all = false;
                        while (!all && *o) {
                                size_t len = strcspn(o, ",");

                                all = len == n && strncmp(o, c, n) == 0;
                                o += len + (o[len] == ',');
                        }
                        c += n + (c[n] == ',');
                }
                if (all)
                        found = strdup(m.point);
        }
        fclose(f);
        return found;
}

/* The yard's hierarchies, from the kernel-host's own cgroups (a sandbox's
 * are in the same hierarchies), each with a directory on the tmpfs. */
static void yard_init(void)
{
        FILE *f = fopen("/proc/self/cgroup", "re");
        char line[PATH_MAX + 256];
        int dir = -1;
        bool ok = f != NULL;

        if (ok && (mkdirat(kdat_fd, YARD_DIR, 0700) < 0 ||
                   (dir = openat(kdat_fd, YARD_DIR, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0))
                ok = false;
        while (ok && fgets(line, sizeof(line), f)) {
                char *controllers = strchr(line, ':'), *end;
                const char *name;

                end = controllers ? strchr(controllers + 1, ':') : NULL;
                if (!end || yard_count == YARD_MAX) {
                        ok = false;
                        break;
                }
                *end = '\0';
                controllers++;
                /* criu's names: name=X is X; one that mixes a name with
                 * controllers it names differently at a dump and a restore. */
                name = strncmp(controllers, "name=", 5) == 0 ? controllers + 5 : controllers;
                if (strstr(name, "name=")) {
                        ok = false;
                        break;
                }
                yard[yard_count].name = strdup(name[0] ? name : "unified");
                yard[yard_count].point = hierarchy_point(controllers);
                if (!yard[yard_count].name || !yard[yard_count].point ||
                    strchr(yard[yard_count].name, '/') ||
                    mkdirat(dir, yard[yard_count].name, 0700) < 0)
                        ok = false;
                yard_count++;
        }
        if (f)
                fclose(f);
        if (dir >= 0)
                close(dir);
        if (!ok || yard_count == 0) {
                log_warn("criu mounts the cgroup hierarchies again at every run: one of the "
                         "kernel-host's cgroups has no mount of its hierarchy's root, or an "
                         "unusual name");
                for (size_t i = 0; i < yard_count; i++) {
                        free(yard[i].name);
                        free(yard[i].point);
                }
                yard_count = 0;
        }
}

void checkpoint_kdat_init(void)
{
        int fs;

        if (kdat_fd >= 0)
                return;
        fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
        if (fs >= 0) {
                if (fsconfig(fs, FSCONFIG_SET_STRING, "size", "1m", 0) == 0 &&
                    fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0700", 0) == 0 &&
                    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
                        kdat_fd = fsmount(fs, FSMOUNT_CLOEXEC,
                                          MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
                close(fs);
        }
        if (kdat_fd < 0) {
                struct statfs s;

                if (statfs("/run", &s) < 0 || s.f_type != TMPFS_MAGIC)
                        log_warn("criu learns the kernel's features at every run: /run is not a "
                                 "tmpfs, and no tmpfs could be made for it (%s)",
                                 strerror(errno));
                return;
        }
        yard_init();
}

/* Whether path, or the directory it would be made in, lies under /run
 * once its links are followed. */
static bool under_run(const char *path)
{
        char real[PATH_MAX], parent[PATH_MAX], *slash;

        if (!realpath(path, real)) {
                snprintf(parent, sizeof(parent), "%s", path);
                slash = strrchr(parent, '/');
                if (slash)
                        *(slash == parent ? slash + 1 : slash) = '\0';
                if (!realpath(parent, real))
                        return true; /* unknown: assume the worst */
        }
        return strncmp(real, "/run", 4) == 0 && (real[4] == '/' || real[4] == '\0');
}

/* Whether criu is given a path under /run (as itself, or in mnt[K]:PATH
 * and fd[N]:PATH), which a tmpfs there would hide. */
static bool names_run(char *const argv[])
{
        for (size_t i = 1; argv[i]; i++) {
                const char *p = argv[i], *sep = strstr(p, "]:");

                if (sep && (strncmp(p, "mnt[", 4) == 0 || strncmp(p, "fd[", 3) == 0))
                        p = sep + 2;
                if (p[0] == '/' && under_run(p))
                        return true;
        }
        return false;
}

int checkpoint_kdat_clone(char *const argv[])
{
        if (kdat_fd < 0 || names_run(argv))
                return -1;
        return open_tree(kdat_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
}

/* Binds each hierarchy's root into the yard: whether all are there. */
static bool yard_enter(void)
{
        char path[PATH_MAX];

        for (size_t i = 0; i < yard_count; i++) {
                snprintf(path, sizeof(path), YARD_PATH "/%s", yard[i].name);
                if (mount(yard[i].point, path, NULL, MS_BIND, NULL) < 0)
                        return false;
        }
        return yard_count > 0;
}

void checkpoint_kdat_exec(char *const argv[], int clone, bool own_namespace)
{
        bool yard_ready = false;

        if (clone >= 0) {
                if ((own_namespace || (unshare(CLONE_NEWNS) == 0 &&
                                       mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0)) &&
                    move_mount(clone, "", AT_FDCWD, "/run", MOVE_MOUNT_F_EMPTY_PATH) == 0)
                        yard_ready = yard_enter();
                close(clone);
        }
        if (yard_ready && argv[1] &&
            (strcmp(argv[1], "dump") == 0 || strcmp(argv[1], "restore") == 0)) {
                size_t n = 0;
                char **with_yard;

                while (argv[n])
                        n++;
                with_yard = calloc(n + 3, sizeof(*with_yard));
                if (with_yard) {
                        memcpy(with_yard, argv, n * sizeof(*argv));
                        with_yard[n] = "--cgroup-yard";
                        with_yard[n + 1] = YARD_PATH;
                        execvp(with_yard[0], with_yard);
                        _exit(127);
                }
        }
        execvp(argv[0], argv);
        _exit(127);
}
