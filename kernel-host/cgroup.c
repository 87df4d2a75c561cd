#include "autoconf.h"

#include "kernel-host/cgroup.h"
#include "protocol/buf.h"
#include "protocol/cgroupfs.h"
#include "protocol/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

static const char *const controller_names[CGROUP_CONTROLLERS] = {"memory", "pids", "cpu"};

/* One entry per cgroup hierarchy in use, so that whatever is done to a
 * kernel's group is done once per directory: cgroup v2 has one hierarchy
 * for all its controllers, v1 one per controller (or per co-mounted set). */
struct hierarchy {
        bool v2;
        unsigned controllers;  /* 1 << enum cgroup_controller, for each limited here */
        char parent[PATH_MAX]; /* glovebox-<pid> beneath our own group */
};

static struct hierarchy hierarchies[CGROUP_CONTROLLERS];
static unsigned nhierarchies;

/* The leaf, within a sandbox's group, that holds its init on cgroup v2:
 * see cgroup_hand_down. No process group is called that (theirs are p-). */
#define INIT_LEAF CGROUPFS_INIT_LEAF

static int write_file(const char *dir, const char *file, const char *text)
{
        char path[PATH_MAX + 64];
        ssize_t n;
        int fd, rc = 0;

        snprintf(path, sizeof(path), "%s/%s", dir, file);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        n = write(fd, text, strlen(text));
        if (n < 0)
                rc = -errno;
        close(fd);
        return rc;
}

/* Does the comma-separated list contain word? */
/* Our own group's path in the hierarchy of controller (NULL: v2). */
static int own_path(const char *controller, char *out, size_t size)
{
        FILE *f = fopen("/proc/self/cgroup", "re");
        char line[4096];
        int rc = -ENOENT;

        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                char *c1 = strchr(line, ':');
                char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;

                if (!c2)
                        continue;
                *c2 = '\0';
                line[strcspn(c2 + 1, "\n") + (size_t)(c2 + 1 - line)] = '\0';
                if (controller ? cgroupfs_list_has(c1 + 1, controller, ',')
                               : (strncmp(line, "0:", 2) == 0 && c1[1] == '\0')) {
                        snprintf(out, size, "%s", c2 + 1);
                        rc = 0;
                        break;
                }
        }
        fclose(f);
        return rc;
}

/* The directory of our own group: mount point + (path - mount root). */
static int own_dir(const char *controller, char *out, size_t size)
{
        char point[PATH_MAX], root[PATH_MAX], path[PATH_MAX];
        const char *rel;
        int rc = cgroupfs_find_mount(controller, point, sizeof(point), root, sizeof(root));

        if (rc == 0)
                rc = own_path(controller, path, sizeof(path));
        if (rc < 0)
                return rc;
        rel = path;
        if (strcmp(root, "/") != 0 && strncmp(path, root, strlen(root)) == 0)
                rel = path + strlen(root);
        snprintf(out, size, "%s%s", point, strcmp(rel, "/") == 0 ? "" : rel);
        return 0;
}

/* The unified (v2) hierarchy is one directory for all its controllers, so
 * what we change in our own group there is recorded once, here, and undone
 * at exit: a delegated group (a systemd service, a container) is then left
 * as we found it, and whoever starts next in it can. */
static struct {
        char own[PATH_MAX];               /* our group at start */
        char leaf[PATH_MAX + 32];         /* the leaf we moved own's processes into, or "" */
        bool enabled[CGROUP_CONTROLLERS]; /* turned on in own's subtree_control by us */
} unified;

/* Moves every process listed in from's cgroup.procs into to. One that
 * exits meanwhile is skipped. */
static int move_processes(const char *from, const char *to)
{
        char procs[PATH_MAX + 16], pids[65536];

        snprintf(procs, sizeof(procs), "%s/cgroup.procs", from);
        if (read_small_file(procs, pids, sizeof(pids)) < 0)
                return -EIO;
        for (char *line = pids, *next; line && *line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = '\0';
                if (*line)
                        write_file(to, "cgroup.procs", line);
        }
        return 0;
}

/* cgroup v2 lets a group hand a controller down to its children only when
 * the group itself holds no processes (the no-internal-process rule; only
 * the root is exempt): a service's group holds its main process, so ours
 * and any others move into a leaf first. A controller some other process
 * already turned on is theirs, and stays on at exit. */
static int v2_enable(enum cgroup_controller c)
{
        const char *name = controller_names[c];
        char text[64], path[PATH_MAX + 32], current[1024];
        int rc;

        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", unified.own);
        if (read_small_file(path, current, sizeof(current)) >= 0 &&
            cgroupfs_list_has(current, name, ' '))
                return 0;
        snprintf(text, sizeof(text), "+%s", name);
        rc = write_file(unified.own, "cgroup.subtree_control", text);
        if (rc == -EBUSY) {
                snprintf(unified.leaf, sizeof(unified.leaf), "%s/glovebox-supervisor", unified.own);
                if (mkdir(unified.leaf, 0755) < 0 && errno != EEXIST) {
                        rc = -errno;
                        unified.leaf[0] = '\0';
                        return rc;
                }
                rc = move_processes(unified.own, unified.leaf);
                if (rc == 0)
                        rc = write_file(unified.own, "cgroup.subtree_control", text);
        }
        if (rc == 0)
                unified.enabled[c] = true;
        return rc;
}

/* Undoes v2_enable once our parent groups are gone: the controllers we
 * turned on go off (the kernel refuses while a group beneath still uses
 * one, say another gateway's: then it stays, and our processes stay in the
 * leaf), then the processes in the leaf go back to our group, and the leaf
 * goes. */
static void v2_restore(void)
{
        char text[64];
        bool all_off = true;

        for (int c = CGROUP_CONTROLLERS - 1; c >= 0; c--) {
                if (!unified.enabled[c])
                        continue;
                snprintf(text, sizeof(text), "-%s", controller_names[c]);
                if (write_file(unified.own, "cgroup.subtree_control", text) < 0) {
                        log_debug("%s stays on in %s: still in use", controller_names[c],
                                  unified.own);
                        all_off = false;
                        continue;
                }
                unified.enabled[c] = false;
        }
        if (!all_off || !unified.leaf[0])
                return;
        move_processes(unified.leaf, unified.own);
        if (rmdir(unified.leaf) < 0)
                log_warn("cannot remove cgroup %s: %s", unified.leaf, strerror(errno));
        unified.leaf[0] = '\0';
}

static int remove_group(const char *dir, int depth, bool kill, unsigned *removed);

/* Does the group dir, or one beneath it, hold a process? A group that
 * cannot be read counts as holding one: it is not ours to judge. */
static bool group_holds_processes(const char *dir, int depth)
{
        char path[PATH_MAX + 32], first[2];
        struct dirent *de;
        bool holds = false;
        ssize_t n;
        DIR *d;

        if (depth > 4)
                return true;
        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        n = read_small_file(path, first, sizeof(first));
        if (n > 0 || (n < 0 && n != -ENOENT))
                return true;
        d = opendir(dir);
        if (!d)
                return true;
        while (!holds && (de = readdir(d)) != NULL) {
                if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
                    strcmp(de->d_name, "..") == 0)
                        continue;
                holds = (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >=
                            sizeof(path) ||
                        group_holds_processes(path, depth + 1);
        }
        closedir(d);
        return holds;
}

/* Makes our parent group glovebox-<pid>. One that is there already was
 * left by an earlier process that had our pid (a kernel-host killed before
 * it could remove it, its record gone with its runtime directory): it is
 * not ours, and nothing of its settings or owner may carry over. Empty, it
 * is removed with its empty children and made anew; one that still holds a
 * process, or that we may not remove (a gateway without root, the group
 * root's), is left alone and the controller goes unused. */
static int parent_make(const char *parent)
{
        int rc;

        if (mkdir(parent, 0755) == 0)
                return 0;
        if (errno != EEXIST)
                return -errno;
        rc = group_holds_processes(parent, 0) ? -EBUSY : remove_group(parent, 0, false, NULL);
        if (rc == 0 && mkdir(parent, 0755) < 0)
                rc = -errno;
        if (rc < 0) {
                log_warn("cgroup %s was left by an earlier process with this pid and cannot be "
                         "taken over: %s",
                         parent, strerror(-rc));
                return rc;
        }
        log_info("removed cgroup %s, left by an earlier process with this pid", parent);
        return 0;
}

/* Registers parent as the hierarchy of controller c, making the directory
 * the first time that parent is seen: the controllers of cgroup v2 all come
 * to one entry. */
static int hierarchy_add(enum cgroup_controller c, bool v2, const char *parent)
{
        unsigned i = 0;

        while (i < nhierarchies && strcmp(hierarchies[i].parent, parent) != 0)
                i++;
        if (i == nhierarchies) {
                int rc;

                if (i >= CGROUP_CONTROLLERS || strlen(parent) >= sizeof(hierarchies[i].parent))
                        return -ENAMETOOLONG;
                rc = parent_make(parent);
                if (rc < 0)
                        return rc;
                hierarchies[i].v2 = v2;
                hierarchies[i].controllers = 0;
                memcpy(hierarchies[i].parent, parent, strlen(parent) + 1);
                nhierarchies++;
        }
        hierarchies[i].controllers |= 1u << c;
        return 0;
}

/* Drops the hierarchies left without a usable controller (a v2 parent
 * whose controllers could all not be handed down), removing their
 * directories. */
static void hierarchies_prune(void)
{
        unsigned kept = 0;

        for (unsigned i = 0; i < nhierarchies; i++) {
                if (hierarchies[i].controllers == 0) {
                        rmdir(hierarchies[i].parent);
                        continue;
                }
                if (kept != i)
                        hierarchies[kept] = hierarchies[i];
                kept++;
        }
        nhierarchies = kept;
}

/* The index in hierarchies of controller c's, or -1 when c is unusable. */
static int hierarchy_of(enum cgroup_controller c)
{
        for (unsigned i = 0; i < nhierarchies; i++) {
                if (hierarchies[i].controllers & (1u << c))
                        return (int)i;
        }
        return -1;
}

static int init_controller(enum cgroup_controller c, bool v2)
{
        const char *name = controller_names[c];
        char own[PATH_MAX], parent[PATH_MAX + 32], text[64];
        int rc;

        if (v2) {
                snprintf(own, sizeof(own), "%s", unified.own);
                rc = v2_enable(c);
        } else {
                rc = own_dir(name, own, sizeof(own));
        }
        if (rc == 0 && (size_t)snprintf(parent, sizeof(parent), "%s/glovebox-%d", own,
                                        (int)getpid()) >= sizeof(parent))
                rc = -ENAMETOOLONG;
        if (rc == 0)
                rc = hierarchy_add(c, v2, parent);
        if (rc == 0 && v2) {
                snprintf(text, sizeof(text), "+%s", name);
                rc = write_file(parent, "cgroup.subtree_control", text);
                if (rc < 0)
                        hierarchies[hierarchy_of(c)].controllers &= ~(1u << c);
        }
        if (rc < 0)
                log_warn("%s limits are not enforced: no usable %s cgroup (%s)", name, name,
                         strerror(-rc));
        return rc;
}

void cgroup_init(void)
{
        char controllers[1024] = "", path[PATH_MAX + 32];
        bool have_v2 = own_dir(NULL, unified.own, sizeof(unified.own)) == 0;

        if (have_v2) {
                snprintf(path, sizeof(path), "%s/cgroup.controllers", unified.own);
                if (read_small_file(path, controllers, sizeof(controllers)) < 0)
                        have_v2 = false;
        }
        for (int c = 0; c < CGROUP_CONTROLLERS; c++)
                init_controller((enum cgroup_controller)c,
                                have_v2 &&
                                    cgroupfs_list_has(controllers, controller_names[c], ' '));
        hierarchies_prune();
        for (unsigned i = 0; i < nhierarchies; i++) {
                const struct hierarchy *h = &hierarchies[i];
                char names[64] = "";
                size_t len = 0;

                for (int c = 0; c < CGROUP_CONTROLLERS; c++) {
                        if (h->controllers & (1u << c))
                                len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s",
                                                        len ? " " : "", controller_names[c]);
                }
                log_info("limits of %s: cgroup v%d at %s", names, h->v2 ? 2 : 1, h->parent);
        }
}

unsigned cgroup_controllers(void)
{
        unsigned all = 0;

        for (unsigned i = 0; i < nhierarchies; i++)
                all |= hierarchies[i].controllers;
        return all;
}

static int set_limits(enum cgroup_controller c, bool v2, const char *dir,
                      const struct hostmsg_limits *limits, char *err, size_t errlen)
{
        char value[64];
        const char *file = NULL;
        int rc = 0;

        switch (c) {
        case CGROUP_MEMORY:
                snprintf(value, sizeof(value), "%llu",
                         (unsigned long long)limits->memory_mb * 1024 * 1024);
                file = v2 ? "memory.max" : "memory.limit_in_bytes";
                rc = write_file(dir, file, value);
                /* v1 keeps memsw at least as high: one raised goes first. */
                if (rc == -EINVAL && !v2 &&
                    write_file(dir, "memory.memsw.limit_in_bytes", value) == 0)
                        rc = write_file(dir, file, value);
                /* No swap: the limit is the limit. */
                if (rc == 0 && v2 && write_file(dir, "memory.swap.max", "0") < 0)
                        log_debug("memory.swap.max not available");
                if (rc == 0 && !v2 && write_file(dir, "memory.memsw.limit_in_bytes", value) < 0)
                        write_file(dir, "memory.swappiness", "0");
                break;
        case CGROUP_PIDS:
                snprintf(value, sizeof(value), "%u", limits->pids);
                file = "pids.max";
                rc = write_file(dir, file, value);
                break;
        case CGROUP_CPU:
                if (v2) {
                        snprintf(value, sizeof(value), "%u 100000", limits->cpu_millis * 100);
                        file = "cpu.max";
                        rc = write_file(dir, file, value);
                } else {
                        file = "cpu.cfs_period_us";
                        rc = write_file(dir, file, "100000");
                        snprintf(value, sizeof(value), "%u", limits->cpu_millis * 100);
                        if (rc == 0) {
                                file = "cpu.cfs_quota_us";
                                rc = write_file(dir, file, value);
                        }
                }
                break;
        default:
                break;
        }
        if (rc < 0)
                snprintf(err, errlen, "writing %s/%s: %s", dir, file, strerror(-rc));
        return rc;
}

/* The number in dir/file, or -1 when it cannot be read. */
static long long read_count(const char *dir, const char *file)
{
        char path[PATH_MAX + 32], text[64];

        snprintf(path, sizeof(path), "%s/%s", dir, file);
        if (read_small_file(path, text, sizeof(text)) <= 0)
                return -1;
        return strtoll(text, NULL, 10);
}

int cgroup_relimit(const struct kernel_cgroup *cg, const struct hostmsg_limits *limits, char *err,
                   size_t errlen)
{
        int rc = 0;

        /* What it holds already must fit: nothing is written otherwise. */
        for (unsigned i = 0; i < nhierarchies && i < cg->ndirs; i++) {
                const struct hierarchy *h = &hierarchies[i];
                long long used;

                if (!cg->dirs[i][0])
                        continue;
                if (h->controllers & (1u << CGROUP_MEMORY)) {
                        used = read_count(cg->dirs[i],
                                          h->v2 ? "memory.current" : "memory.usage_in_bytes");
                        if (used < 0 || (unsigned long long)used >= limits->memory_mb << 20) {
                                snprintf(err, errlen, "it uses %lld MiB, the limit asked is %llu",
                                         used < 0 ? -1 : used >> 20,
                                         (unsigned long long)limits->memory_mb);
                                return -EBUSY;
                        }
                }
                if (h->controllers & (1u << CGROUP_PIDS)) {
                        used = read_count(cg->dirs[i], "pids.current");
                        if (used < 0 || used >= (long long)limits->pids) {
                                snprintf(err, errlen,
                                         "it has %lld processes, the limit asked is %u", used,
                                         limits->pids);
                                return -EBUSY;
                        }
                }
        }
        for (unsigned i = 0; rc == 0 && i < nhierarchies && i < cg->ndirs; i++) {
                for (int c = 0; rc == 0 && c < CGROUP_CONTROLLERS && cg->dirs[i][0]; c++) {
                        if (hierarchies[i].controllers & (1u << c))
                                rc = set_limits((enum cgroup_controller)c, hierarchies[i].v2,
                                                cg->dirs[i], limits, err, errlen);
                }
        }
        return rc;
}

int cgroup_rename(struct kernel_cgroup *cg, const char *name)
{
        char renamed[CGROUP_CONTROLLERS][PATH_MAX];
        unsigned done = 0;
        int rc = 0;

        for (; rc == 0 && done < cg->ndirs; done++) {
                const char *slash = strrchr(cg->dirs[done], '/');

                renamed[done][0] = '\0';
                if (!cg->dirs[done][0] || !slash)
                        continue;
                if ((size_t)snprintf(renamed[done], sizeof(renamed[done]), "%.*s/%s",
                                     (int)(slash - cg->dirs[done]), cg->dirs[done],
                                     name) >= sizeof(renamed[done]))
                        rc = -ENAMETOOLONG;
                else if (rename(cg->dirs[done], renamed[done]) < 0)
                        rc = -errno;
                if (rc < 0)
                        break;
        }
        if (rc < 0) {
                while (done-- > 0) {
                        if (renamed[done][0] && rename(renamed[done], cg->dirs[done]) < 0)
                                log_warn("cgroup %s stays as %s: %s", cg->dirs[done], renamed[done],
                                         strerror(errno));
                }
                return rc;
        }
        for (unsigned i = 0; i < cg->ndirs; i++) {
                if (renamed[i][0])
                        memcpy(cg->dirs[i], renamed[i], sizeof(cg->dirs[i]));
        }
        return 0;
}

const char *cgroup_name(const struct kernel_cgroup *cg)
{
        for (unsigned i = 0; i < cg->ndirs; i++) {
                const char *slash = strrchr(cg->dirs[i], '/');

                if (cg->dirs[i][0] && slash)
                        return slash + 1;
        }
        return "";
}

bool cgroup_renamable(void)
{
        for (unsigned i = 0; i < nhierarchies; i++) {
                if (hierarchies[i].v2)
                        return false;
        }
        return true;
}

int cgroup_set_background(const struct kernel_cgroup *cg, bool background)
{
        for (unsigned i = 0; i < nhierarchies && i < cg->ndirs; i++) {
                if (!(hierarchies[i].controllers & (1u << CGROUP_CPU)) || !cg->dirs[i][0])
                        continue;
                /* The least weight each version takes, and its default. */
                if (hierarchies[i].v2)
                        return write_file(cg->dirs[i], "cpu.weight", background ? "1" : "100");
                return write_file(cg->dirs[i], "cpu.shares", background ? "2" : "1024");
        }
        return 0;
}

/* Makes the group name inside each of the hierarchies' directories in
 * parents (NULL: the hierarchies' parents themselves), one directory per
 * hierarchy. On failure nothing is left and err says which directory. */
static int make_groups(const struct kernel_cgroup *parents, const char *name,
                       struct kernel_cgroup *cg, char *err, size_t errlen)
{
        unsigned n = parents ? parents->ndirs : nhierarchies;
        int rc = 0;

        memset(cg, 0, sizeof(*cg));
        for (unsigned i = 0; rc == 0 && i < n; i++) {
                const char *parent = parents ? parents->dirs[i] : hierarchies[i].parent;

                cg->ndirs = i + 1;
                if (!parent[0])
                        continue;
                if ((size_t)snprintf(cg->dirs[i], sizeof(cg->dirs[i]), "%s/%s", parent, name) >=
                    sizeof(cg->dirs[i]))
                        rc = -ENAMETOOLONG;
                else if (mkdir(cg->dirs[i], 0755) < 0 && errno != EEXIST)
                        rc = -errno;
                if (rc < 0) {
                        snprintf(err, errlen, "mkdir %s: %s", cg->dirs[i], strerror(-rc));
                        cg->dirs[i][0] = '\0';
                }
        }
        if (rc < 0)
                cgroup_destroy(cg);
        return rc;
}

int cgroup_create(const char *kernel_id, const struct hostmsg_limits *limits,
                  struct kernel_cgroup *cg, char *err, size_t errlen)
{
        int rc = make_groups(NULL, kernel_id, cg, err, errlen);

        for (unsigned i = 0; rc == 0 && i < cg->ndirs; i++) {
                for (int c = 0; rc == 0 && c < CGROUP_CONTROLLERS; c++) {
                        if (hierarchies[i].controllers & (1u << c))
                                rc = set_limits((enum cgroup_controller)c, hierarchies[i].v2,
                                                cg->dirs[i], limits, err, errlen);
                }
        }
        if (rc < 0)
                cgroup_destroy(cg);
        return rc;
}

int cgroup_attach(const struct kernel_cgroup *cg, pid_t pid)
{
        char text[32];

        snprintf(text, sizeof(text), "%d", (int)pid);
        for (unsigned i = 0; i < cg->ndirs; i++) {
                int rc = cg->dirs[i][0] ? write_file(cg->dirs[i], "cgroup.procs", text) : 0;

                if (rc < 0)
                        return rc;
        }
        return 0;
}

unsigned cgroup_dir_list(const struct kernel_cgroup *cg, const char *out[CGROUP_CONTROLLERS])
{
        unsigned n = 0;

        for (; n < cg->ndirs && n < CGROUP_CONTROLLERS; n++)
                out[n] = cg->dirs[n];
        return n;
}

int cgroup_hand_down(struct kernel_cgroup *cg, pid_t init)
{
        int i = hierarchy_of(CGROUP_MEMORY);
        char leaf[PATH_MAX + 16], text[32];
        int rc;

        if (i < 0 || !hierarchies[i].v2 || !cg->dirs[i][0])
                return 0;
        if ((size_t)snprintf(leaf, sizeof(leaf), "%s/" INIT_LEAF, cg->dirs[i]) >= sizeof(leaf))
                return -ENAMETOOLONG;
        if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
                return -errno;
        snprintf(text, sizeof(text), "%d", (int)init);
        rc = write_file(leaf, "cgroup.procs", text);
        if (rc == 0)
                rc = write_file(cg->dirs[i], "cgroup.subtree_control", "+memory");
        if (rc == 0)
                cg->oom_groups = true;
        return rc;
}

uint64_t cgroup_oom_kills(const struct kernel_cgroup *cg)
{
        int i = hierarchy_of(CGROUP_MEMORY);
        char path[PATH_MAX + 32], text[4096];
        const char *at;

        if (i < 0 || (unsigned)i >= cg->ndirs || !cg->dirs[i][0])
                return 0;
        snprintf(path, sizeof(path), "%s/%s", cg->dirs[i],
                 hierarchies[i].v2 ? "memory.events" : "memory.oom_control");
        if (read_small_file(path, text, sizeof(text)) < 0)
                return 0;
        at = strstr(text, "oom_kill ");
        return at ? strtoull(at + 9, NULL, 10) : 0;
}

/* SIGKILLs every process listed in dir's cgroup.procs but spare (0: none).
 * Returns how many were listed, or -errno. A list read while processes
 * fork may miss the newest: callers repeat until the group is empty. */
static int kill_members(const char *dir, pid_t spare)
{
        char path[PATH_MAX + 32];
        FILE *f;
        long pid;
        int n = 0;

        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fscanf(f, "%ld", &pid) == 1) {
                if (pid <= 1 || pid == spare)
                        continue;
                kill((pid_t)pid, SIGKILL);
                n++;
        }
        fclose(f);
        return n;
}

/* Kills the whole subtree of dir: at once with cgroup.kill (cgroup v2,
 * Linux 5.14 and later), else one listed process at a time. */
static void kill_group(const char *dir)
{
        if (write_file(dir, "cgroup.kill", "1") < 0)
                kill_members(dir, 0);
}

/* Removes dir after its child groups, killing whatever is left in them
 * when kill is set (else a group that holds a process stays: -EBUSY); our
 * groups are at most a few levels deep, so depth bounds the recursion.
 * Counts removed groups in *removed. 0 or -errno. */
static int remove_group(const char *dir, int depth, bool kill, unsigned *removed)
{
        char child[PATH_MAX];
        struct dirent *de;
        DIR *d;
        int rc = 0;

        if (depth > 4)
                return -ELOOP;
        d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : -errno;
        while ((de = readdir(d)) != NULL) {
                if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
                    strcmp(de->d_name, "..") == 0)
                        continue;
                if ((size_t)snprintf(child, sizeof(child), "%s/%s", dir, de->d_name) >=
                    sizeof(child))
                        continue;
                remove_group(child, depth + 1, kill, removed);
        }
        closedir(d);
        /* A killed process leaves its group a moment after the signal. */
        for (int tries = 0; rmdir(dir) < 0; tries++) {
                if (errno == ENOENT)
                        return 0;
                if (errno != EBUSY || !kill || tries >= 500) {
                        rc = -errno;
                        log_warn("cannot remove cgroup %s: %s", dir, strerror(errno));
                        return rc;
                }
                kill_group(dir);
                usleep(1000);
        }
        if (removed)
                (*removed)++;
        return 0;
}

int cgroup_child_of(const struct kernel_cgroup *parent, const char *name,
                    struct kernel_cgroup *child)
{
        memset(child, 0, sizeof(*child));
        child->ndirs = parent->ndirs;
        for (unsigned i = 0; i < parent->ndirs; i++) {
                if (parent->dirs[i][0] &&
                    (size_t)snprintf(child->dirs[i], sizeof(child->dirs[i]), "%s/%s",
                                     parent->dirs[i], name) >= sizeof(child->dirs[i])) {
                        memset(child, 0, sizeof(*child));
                        return -ENAMETOOLONG;
                }
        }
        return 0;
}

int cgroup_create_child(const struct kernel_cgroup *parent, const char *name,
                        struct kernel_cgroup *child, char *err, size_t errlen)
{
        int i = hierarchy_of(CGROUP_MEMORY);
        int rc = make_groups(parent, name, child, err, errlen);

        /* The whole group goes when the memory limit kills one of its
         * processes: a kernel with everything it started, not half of it
         * (docs/isolation-and-network.md, out of memory). */
        if (rc == 0 && parent->oom_groups) {
                rc = write_file(child->dirs[i], "memory.oom.group", "1");
                if (rc < 0) {
                        snprintf(err, errlen, "writing %s/memory.oom.group: %s", child->dirs[i],
                                 strerror(-rc));
                        cgroup_destroy(child);
                }
        }
        return rc;
}

int cgroup_kill(struct kernel_cgroup *cg, pid_t spare)
{
        int listed = 0;

        for (unsigned i = 0; i < cg->ndirs; i++) {
                int n = cg->dirs[i][0] ? kill_members(cg->dirs[i], spare) : 0;

                if (n > 0)
                        listed += n;
        }
        return listed;
}

int cgroup_remove_if_empty(struct kernel_cgroup *cg)
{
        int rc = 0;

        for (unsigned i = 0; i < cg->ndirs; i++) {
                if (!cg->dirs[i][0])
                        continue;
                if (rmdir(cg->dirs[i]) == 0 || errno == ENOENT)
                        cg->dirs[i][0] = '\0';
                else if (rc == 0)
                        rc = -errno;
        }
        return rc;
}

void cgroup_destroy(struct kernel_cgroup *cg)
{
        for (unsigned i = 0; i < cg->ndirs; i++) {
                if (cg->dirs[i][0])
                        remove_group(cg->dirs[i], 0, true, NULL);
        }
        memset(cg, 0, sizeof(*cg));
}

unsigned cgroup_parent_count(void)
{
        return nhierarchies;
}

const char *cgroup_parent(unsigned i)
{
        return i < nhierarchies ? hierarchies[i].parent : "";
}

int cgroup_remove_stale(const char *dir, unsigned *removed)
{
        const char *base = strrchr(dir, '/');
        struct statfs fs;
        struct stat st;
        size_t digits;

        /* The path comes from a record a dead kernel-host left: only a
         * glovebox-<pid> group in a cgroup filesystem is ever touched. */
        if (!base || strncmp(base + 1, "glovebox-", 9) != 0)
                return -EINVAL;
        digits = strspn(base + 10, "0123456789");
        if (digits == 0 || base[10 + digits] != '\0' || strstr(dir, "/../") || strstr(dir, "/./"))
                return -EINVAL;
        if (lstat(dir, &st) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode) || statfs(dir, &fs) < 0 ||
            (fs.f_type != CGROUP_SUPER_MAGIC && fs.f_type != CGROUP2_SUPER_MAGIC))
                return -EINVAL;
        for (unsigned i = 0; i < nhierarchies; i++) {
                if (strcmp(hierarchies[i].parent, dir) == 0)
                        return -EBUSY; /* our own */
        }
        return remove_group(dir, 0, true, removed);
}

void cgroup_shutdown(void)
{
        for (unsigned i = 0; i < nhierarchies; i++) {
                if (rmdir(hierarchies[i].parent) < 0 && errno != ENOENT)
                        log_warn("cannot remove cgroup %s: %s", hierarchies[i].parent,
                                 strerror(errno));
        }
        nhierarchies = 0;
        v2_restore();
}

int cgroup_criu_root(const struct kernel_cgroup *cg, unsigned i, char *out, size_t size)
{
        char point[PATH_MAX], root[PATH_MAX];
        const char *controller = NULL, *rel;
        size_t n;
        int rc;

        if (i >= nhierarchies || !cg->dirs[i][0])
                return -ENOENT;
        for (int c = 0; !hierarchies[i].v2 && c < CGROUP_CONTROLLERS && !controller; c++) {
                if (hierarchies[i].controllers & (1u << c))
                        controller = controller_names[c];
        }
        rc = cgroupfs_find_mount(controller, point, sizeof(point), root, sizeof(root));
        if (rc < 0)
                return rc;
        n = strlen(point);
        if (strncmp(cg->dirs[i], point, n) != 0 || (cg->dirs[i][n] != '/' && cg->dirs[i][n]))
                return -EINVAL;
        rel = cg->dirs[i] + n;
        /* Paths in the hierarchy are the mount's root plus what lies below
         * the mount point. */
        if ((size_t)snprintf(out, size, "%s%s%s%s", controller ? controller : "",
                             controller ? ":" : "", strcmp(root, "/") == 0 ? "" : root,
                             rel[0] ? rel : "/") >= size)
                return -ENAMETOOLONG;
        return 0;
}
