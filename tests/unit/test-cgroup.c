/* kernel-host/cgroup.c: one entry per hierarchy, so that a group is one
 * directory on cgroup v2 (made, joined and removed once) and one per
 * controller's hierarchy on v1. Run on plain directories in a scratch
 * directory: what is checked is the layout, not the kernel's controllers
 * (tests/uml checks those on a real cgroup v2 host). */
#include "kernel-host/cgroup.c"

#include "tests/unit/tap.h"
#include "tests/unit/tmpdir.h"

static char scratch[] = "/tmp/glovebox-test-cgroup-XXXXXX";

static bool is_dir(const char *path)
{
        struct stat st;

        return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* dir/name, in one of four buffers used in turn. */
static const char *path_of(const char *dir, const char *name)
{
        static char bufs[4][PATH_MAX + 64];
        static unsigned next;
        char *b = bufs[next++ % 4];

        snprintf(b, sizeof(bufs[0]), "%s/%s", dir, name);
        return b;
}

static void reset(void)
{
        memset(hierarchies, 0, sizeof(hierarchies));
        nhierarchies = 0;
}

/* A file standing in for cgroup.procs, so that attach has somewhere to
 * write. */
static void make_procs(const char *dir)
{
        char path[PATH_MAX + 16];
        FILE *f;

        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        f = fopen(path, "w");
        if (!f)
                BAIL_OUT("cannot create %s", path);
        fclose(f);
}

static void remove_procs(const struct kernel_cgroup *cg)
{
        char path[PATH_MAX + 16];

        for (unsigned i = 0; i < cg->ndirs; i++) {
                snprintf(path, sizeof(path), "%s/cgroup.procs", cg->dirs[i]);
                unlink(path);
        }
}

static void test_one_hierarchy(void)
{
        char parent[PATH_MAX], err[256], procs[64] = "";
        struct kernel_cgroup sandbox, process;

        reset();
        snprintf(parent, sizeof(parent), "%s/v2/glovebox-1", scratch);
        mkdir(path_of(scratch, "v2"), 0755);
        for (int c = 0; c < CGROUP_CONTROLLERS; c++)
                is_int(hierarchy_add((enum cgroup_controller)c, true, parent), 0,
                       "v2: %s registered", controller_names[c]);
        is_uint(nhierarchies, 1, "v2: memory, pids and cpu are one hierarchy");
        is_uint(cgroup_parent_count(), 1, "v2: one parent group");
        is_str(cgroup_parent(0), parent, "v2: the parent");
        is_str(cgroup_parent(1), "", "v2: no second parent");
        is_uint(cgroup_controllers(), 7, "v2: all three controllers usable");
        ok(is_dir(parent), "v2: the parent group exists");

        is_int(make_groups(NULL, "sandbox-1", &sandbox, err, sizeof(err)), 0, "v2: sandbox group");
        is_uint(sandbox.ndirs, 1, "v2: the sandbox's group is one directory");
        ok(is_dir(sandbox.dirs[0]), "v2: it exists");
        is_int(cgroup_create_child(&sandbox, "p-1", &process, err, sizeof(err)), 0,
               "v2: process group");
        is_uint(process.ndirs, 1, "v2: the process's group is one directory");
        ok(strstr(process.dirs[0], "/glovebox-1/sandbox-1/p-1") != NULL,
           "v2: inside the sandbox's");
        make_procs(sandbox.dirs[0]);
        is_int(cgroup_attach(&sandbox, 4242), 0, "v2: attach");
        {
                char path[PATH_MAX + 16];

                snprintf(path, sizeof(path), "%s/cgroup.procs", sandbox.dirs[0]);
                read_small_file(path, procs, sizeof(procs));
        }
        is_str(procs, "4242", "v2: the pid written to the one group");
        remove_procs(&sandbox);
        is_int(cgroup_remove_if_empty(&sandbox), -ENOTEMPTY, "v2: a group with a child stays");
        is_int(cgroup_remove_if_empty(&process), 0, "v2: an empty process group goes");
        ok(!is_dir(process.dirs[0]) && process.dirs[0][0] == '\0', "v2: and is forgotten");
        cgroup_destroy(&sandbox);
        is_uint(sandbox.ndirs, 0, "v2: destroyed");
        ok(!is_dir(path_of(parent, "sandbox-1")), "v2: the sandbox's group is gone");
        cgroup_shutdown();
        ok(!is_dir(parent), "v2: shutdown removes the parent");
        is_uint(cgroup_parent_count(), 0, "v2: and forgets it");
}

static void test_v1_hierarchies(void)
{
        char memory[PATH_MAX], cpu[PATH_MAX], err[256];
        struct kernel_cgroup sandbox, process;

        reset();
        mkdir(path_of(scratch, "memory"), 0755);
        mkdir(path_of(scratch, "cpu,pids"), 0755);
        snprintf(memory, sizeof(memory), "%s/memory/glovebox-1", scratch);
        snprintf(cpu, sizeof(cpu), "%s/cpu,pids/glovebox-1", scratch);
        /* pids and cpu co-mounted: one hierarchy for the two. */
        is_int(hierarchy_add(CGROUP_MEMORY, false, memory), 0, "v1: memory");
        is_int(hierarchy_add(CGROUP_PIDS, false, cpu), 0, "v1: pids");
        is_int(hierarchy_add(CGROUP_CPU, false, cpu), 0, "v1: cpu");
        is_uint(nhierarchies, 2, "v1: two hierarchies");
        is_int(hierarchy_of(CGROUP_MEMORY), 0, "v1: memory's is the first");
        is_int(hierarchy_of(CGROUP_PIDS), 1, "v1: pids' is the second");
        is_int(hierarchy_of(CGROUP_CPU), 1, "v1: and cpu's");
        is_int(make_groups(NULL, "sandbox-1", &sandbox, err, sizeof(err)), 0, "v1: sandbox group");
        is_uint(sandbox.ndirs, 2, "v1: one directory per hierarchy");
        ok(is_dir(sandbox.dirs[0]) && is_dir(sandbox.dirs[1]), "v1: both exist");
        ok(strncmp(sandbox.dirs[0], memory, strlen(memory)) == 0, "v1: the memory group");
        ok(strncmp(sandbox.dirs[1], cpu, strlen(cpu)) == 0, "v1: the cpu and pids group");
        is_int(cgroup_create_child(&sandbox, "p-1", &process, err, sizeof(err)), 0,
               "v1: process groups");
        is_uint(process.ndirs, 2, "v1: in both");
        cgroup_destroy(&sandbox);
        ok(!is_dir(process.dirs[0]) && !is_dir(process.dirs[1]), "v1: destroy takes the children");
        cgroup_shutdown();
        ok(!is_dir(memory) && !is_dir(cpu), "v1: shutdown removes both parents");
}

static void test_prune(void)
{
        char parent[PATH_MAX];

        reset();
        snprintf(parent, sizeof(parent), "%s/v2/glovebox-2", scratch);
        is_int(hierarchy_add(CGROUP_MEMORY, true, parent), 0, "prune: registered");
        /* What init_controller does when the controller cannot be handed
         * down: the hierarchy is left with none. */
        hierarchies[0].controllers = 0;
        hierarchies_prune();
        is_uint(nhierarchies, 0, "prune: a hierarchy without a controller is dropped");
        ok(!is_dir(parent), "prune: and its directory removed");
        is_uint(cgroup_controllers(), 0, "prune: no controller usable");
        is_int(hierarchy_of(CGROUP_MEMORY), -1, "prune: memory has no hierarchy");
}

/* A parent group named for our pid that is there already was left by an
 * earlier process with the pid: taken over only when nothing runs in it. */
static void test_leftover_parent(void)
{
        char empty[PATH_MAX], busy[PATH_MAX], held[PATH_MAX + 64];

        umask(022);
        reset();
        snprintf(empty, sizeof(empty), "%s/v2/glovebox-3", scratch);
        mkdir(empty, 0700);
        mkdir(path_of(empty, "sandbox-9"), 0755);
        mkdir(path_of(path_of(empty, "sandbox-9"), "p-1"), 0755);
        is_int(hierarchy_add(CGROUP_MEMORY, true, empty), 0,
               "leftover: an empty one is taken over");
        ok(!is_dir(path_of(empty, "sandbox-9")), "leftover: its groups are gone");
        {
                struct stat st;

                ok(stat(empty, &st) == 0 && (st.st_mode & 07777) == 0755,
                   "leftover: and it is made anew (mode 0755, not the leftover's 0700)");
        }
        cgroup_shutdown();

        reset();
        snprintf(busy, sizeof(busy), "%s/v2/glovebox-4", scratch);
        mkdir(busy, 0755);
        mkdir(path_of(busy, "sandbox-1"), 0755);
        mkdir(path_of(busy, "sandbox-2"), 0755);
        snprintf(held, sizeof(held), "%s/sandbox-2", busy);
        make_procs(held);
        if (write_file(held, "cgroup.procs", "4242\n") < 0)
                BAIL_OUT("cannot write %s/cgroup.procs", held);
        is_int(hierarchy_add(CGROUP_MEMORY, true, busy), -EBUSY,
               "leftover: one that holds a process is refused");
        is_uint(nhierarchies, 0, "leftover: and not registered");
        ok(is_dir(path_of(busy, "sandbox-1")) && is_dir(path_of(busy, "sandbox-2")),
           "leftover: nothing of it is touched");
        unlink(path_of(held, "cgroup.procs"));
}

int main(void)
{
        if (!mkdtemp(scratch))
                BAIL_OUT("mkdtemp: %s", strerror(errno));
        test_one_hierarchy();
        test_v1_hierarchies();
        test_prune();
        test_leftover_parent();
        tmpdir_remove(scratch);
        return done_testing();
}
