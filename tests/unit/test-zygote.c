/* kernel-host/zygote.c: which kernels may come from a zygote, what the
 * flag accepts, and the request memfd only the forked child reads: its
 * layout, and that it is sealed (nobody changes it after we wrote it). */
#include "kernel-host/zygote.c"

#include "tests/unit/tap.h"

static void test_names_and_modules(void)
{
        ok(name_ok("python3", 7), "a kernelspec name");
        ok(name_ok("my-env_3.11", 11), "dashes, underscores and dots");
        ok(!name_ok("", 0), "an empty name is refused");
        ok(!name_ok("py thon", 7), "a space is refused");
        ok(!name_ok("../x", 4), "a slash is refused");
        ok(modules_ok("numpy,pandas,matplotlib.pyplot"), "dotted module names");
        ok(modules_ok(""), "no module at all (ipykernel only)");
        ok(!modules_ok("numpy;import os"), "a semicolon is refused");
        ok(!modules_ok("numpy pandas"), "a space is refused");
}

static void test_start_time_variables(void)
{
        ok(jp_env_read_at_start("PYTHONHASHSEED=0"), "PYTHON* starts cold");
        ok(!jp_env_read_at_start("PYTHONPATH=/home/user/lib"),
           "PYTHONPATH is applied after the fork");
        ok(jp_env_read_at_start("LD_PRELOAD=/x.so"), "LD_* starts cold");
        ok(jp_env_read_at_start("LANG=de_DE.UTF-8"), "LANG starts cold");
        ok(jp_env_read_at_start("LC_ALL=C"), "LC_* starts cold");
        ok(jp_env_read_at_start("OPENBLAS_NUM_THREADS=4"), "BLAS threads start cold");
        ok(jp_env_read_at_start("OMP_NUM_THREADS=4"), "OpenMP threads start cold");
        ok(jp_env_read_at_start("MPLBACKEND=agg"), "matplotlib's backend starts cold");
        ok(!jp_env_read_at_start("OPENAI_API_KEY=sk"), "an ordinary variable comes after the fork");
        ok(!jp_env_read_at_start("LANGUAGE_MODEL=x"), "LANGUAGE is not LANG");
        ok(!zygote_fits("python3", (char *[]){"/usr/bin/python3", "-m", "ipykernel_launcher", NULL},
                        (char *[]){NULL}),
           "no zygote started: nothing fits");
        ok(!zygote_fits("", (char *[]){"/usr/bin/python3", "-m", "x", NULL}, (char *[]){NULL}),
           "no zygote named: nothing fits");
}

static void test_request_memfd(void)
{
        struct sandbox sb = {.ids = {.privileged = true}, .limits = {.disk_mb = 64, .pids = 40}};
        struct kernel_cgroup cg = {.ndirs = 2};
        char *argv[] = {"/usr/bin/python3",   "-m", "ipykernel_launcher", "-f",
                        "/run/kernel/k.json", NULL};
        char *envp[] = {"HOME=/home/user", "SECRET=s3cret", NULL};
        struct sandbox_exec ex = {.argv = argv,
                                  .envp = envp,
                                  .cwd = "/home/user",
                                  .cgroup = &cg,
                                  .conn_name = "k.json",
                                  .conn_text = "{\"key\": \"abc\"}"};
        static const char want[] = "/sys/fs/cgroup/a\0/sys/fs/cgroup/b\0k.json\0{\"key\": "
                                   "\"abc\"}\0/home/user\0/usr/bin/python3\0-m\0ipykernel_"
                                   "launcher\0-f\0/run/kernel/k.json\0HOME=/home/user\0SECRET="
                                   "s3cret";
        struct zygote_spec spec;
        char buf[1024];
        ssize_t n;
        int fd;

        snprintf(cg.dirs[0], sizeof(cg.dirs[0]), "/sys/fs/cgroup/a");
        snprintf(cg.dirs[1], sizeof(cg.dirs[1]), "/sys/fs/cgroup/b");
        fd = build_spec(&sb, ex.cgroup, &ex);
        ok(fd >= 0, "the request's memfd is made");
        if (fd < 0)
                return;
        n = pread(fd, buf, sizeof(buf), 0);
        ok(n == (ssize_t)(sizeof(spec) + sizeof(want)), "its size: header and strings (%zd)", n);
        memcpy(&spec, buf, sizeof(spec));
        is_uint(spec.magic, ZYGOTE_SPEC_MAGIC, "magic");
        is_uint(spec.privileged, 1, "privileged");
        is_uint(spec.disk_mb, 64, "disk limit");
        is_uint(spec.pids, 40, "pids limit");
        is_uint(spec.ndirs, 2, "cgroup directories");
        is_uint(spec.nargv, 5, "arguments");
        is_uint(spec.nenv, 2, "environment entries");
        is_mem(buf + sizeof(spec), (size_t)n - sizeof(spec), want, sizeof(want),
               "strings in order, each NUL-terminated");
        ok(pwrite(fd, "x", 1, 0) < 0 && errno == EPERM, "sealed: it cannot be written");
        ok(ftruncate(fd, 0) < 0 && errno == EPERM, "sealed: it cannot shrink");
        close(fd);
}

/* A request to fork ahead (zygote_ahead) carries the header and its
 * group's directories, nothing of any request's. */
static void test_ahead_memfd(void)
{
        struct sandbox sb = {.ids = {.privileged = true}, .limits = {.disk_mb = 64, .pids = 40}};
        struct kernel_cgroup cg = {.ndirs = 2};
        static const char want[] = "/sys/fs/cgroup/a/p-ahead\0/sys/fs/cgroup/b/p-ahead";
        struct zygote_spec spec;
        char buf[1024];
        ssize_t n;
        int fd;

        snprintf(cg.dirs[0], sizeof(cg.dirs[0]), "/sys/fs/cgroup/a/p-ahead");
        snprintf(cg.dirs[1], sizeof(cg.dirs[1]), "/sys/fs/cgroup/b/p-ahead");
        fd = build_spec(&sb, &cg, NULL);
        ok(fd >= 0, "the memfd of a request to fork ahead is made");
        if (fd < 0)
                return;
        n = pread(fd, buf, sizeof(buf), 0);
        ok(n == (ssize_t)(sizeof(spec) + sizeof(want)), "its size: header and directories (%zd)",
           n);
        memcpy(&spec, buf, sizeof(spec));
        is_uint(spec.ndirs, 2, "cgroup directories");
        is_uint(spec.dirs_bytes, sizeof(want), "their bytes");
        is_uint(spec.nargv, 0, "no arguments");
        is_uint(spec.nenv, 0, "no environment");
        is_mem(buf + sizeof(spec), (size_t)n - sizeof(spec), want, sizeof(want),
               "the directories alone");
        close(fd);
}

static void test_child_group(void)
{
        struct kernel_cgroup parent = {.ndirs = 3}, child;

        snprintf(parent.dirs[0], sizeof(parent.dirs[0]), "/sys/fs/cgroup/memory/g/stock-1");
        snprintf(parent.dirs[2], sizeof(parent.dirs[2]), "/sys/fs/cgroup/pids/g/stock-1");
        ok(cgroup_child_of(&parent, "p-ahead", &child) == 0, "a child group's directories");
        is_uint(child.ndirs, 3, "one per hierarchy of its parent's");
        is_str(child.dirs[0], "/sys/fs/cgroup/memory/g/stock-1/p-ahead", "beneath each");
        is_str(child.dirs[1], "", "none where the parent has none");
        is_str(child.dirs[2], "/sys/fs/cgroup/pids/g/stock-1/p-ahead", "beneath each (2)");
}

int main(void)
{
        test_names_and_modules();
        test_start_time_variables();
        test_request_memfd();
        test_ahead_memfd();
        test_child_group();
        return done_testing();
}
