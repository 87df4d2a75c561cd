#include "autoconf.h"

#include "kernel-host/rootfs_ops.h"
#include "kernel-host/rootfs_plan.h"

#include <limits.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>

/* A sandbox's /proc and /dev, in its root's plan (rootfs.c). */

/* At path: the directory name of the sandbox's tmpfs, bound with flags
 * (and nodev, which the tmpfs has; writable unless MS_RDONLY), where the
 * sandbox has one; a tmpfs of its own with options otherwise. */
static int top_dir_or_tmpfs(struct rootfs *p, const char *path, const char *name,
                            const char *options, unsigned long flags, const char *step)
{
        char source[PATH_MAX + 16];

        if (!p->writable_root)
                return rootfs_add_op(p, OP_TMPFS, path, NULL, options, flags, 0, step);
        snprintf(source, sizeof(source), "%s/%s", p->top, name);
        return rootfs_add_op(p, OP_BIND, path, source, NULL, flags | MS_NODEV,
                             (flags & MS_RDONLY) ? 0 : OP_WRITABLE, step);
}

int rootfs_plan_dev(struct rootfs *p)
{
        static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
        static const char *const links[][2] = {{"/dev/ptmx", "pts/ptmx"},
                                               {"/dev/fd", "/proc/self/fd"},
                                               {"/dev/stdin", "/proc/self/fd/0"},
                                               {"/dev/stdout", "/proc/self/fd/1"},
                                               {"/dev/stderr", "/proc/self/fd/2"}};
        char path[64];
        int rc = rootfs_add_op(p, OP_DIR, "/dev", NULL, NULL, 0, 0, "mkdir /dev");

        /* Not nodev where it is a tmpfs of its own (the bound device nodes
         * below are mounts of their own, whose flags are the host's). */
        if (rc == 0)
                rc = top_dir_or_tmpfs(p, "/dev", DEV_DIR, "mode=0755,size=1m",
                                      MS_NOSUID | MS_NOEXEC, "mount /dev");
        for (size_t i = 0; rc == 0 && i < sizeof(nodes) / sizeof(nodes[0]); i++) {
                snprintf(path, sizeof(path), "/dev/%s", nodes[i]);
                rc = rootfs_add_op(p, OP_FILE, path, NULL, "", 0, 0, "bind device");
                if (rc == 0)
                        rc = rootfs_add_op(p, OP_BIND, path, path, NULL, 0,
                                           OP_WRITABLE | OP_KEEP_FLAGS, "bind device");
        }
        if (rc == 0)
                rc = rootfs_add_op(p, OP_DIR, "/dev/pts", NULL, NULL, 0, 0, "mkdir /dev/pts");
        if (rc == 0)
                rc = rootfs_add_op(p, OP_DEVPTS, "/dev/pts", NULL,
                                   "newinstance,ptmxmode=0666,mode=0620", MS_NOSUID | MS_NOEXEC, 0,
                                   "devpts /dev/pts");
        if (rc == 0)
                rc = rootfs_add_op(p, OP_DIR, "/dev/shm", NULL, NULL, 0, 0, "mkdir /dev/shm");
        if (rc == 0)
                rc = top_dir_or_tmpfs(p, "/dev/shm", SHM_DIR, "mode=1777,size=64m",
                                      MS_NOSUID | MS_NODEV, "mount /dev/shm");
        for (size_t i = 0; rc == 0 && i < sizeof(links) / sizeof(links[0]); i++)
                rc = rootfs_add_op(p, OP_SYMLINK, links[i][0], links[i][1], NULL, 0, 0,
                                   "symlink /dev");
        return rc;
}

/* Host-wide /proc files a kernel has no use for and a tenant could use to
 * watch its neighbours (interrupt and timer counts, allocator state:
 * side channels) or to survey the host (kernel symbols, configuration,
 * command line, memory map, modules), masked as container runtimes mask
 * them: an empty file bound over each. What programs do read (loadavg,
 * meminfo, stat, cpuinfo, uptime, vmstat, the per-process files) stays:
 * psutil, top, free and Python's os.cpu_count need it. */
static const char *const proc_masked_files[] = {
    "kcore",         "keys",          "key-users", "timer_list",   "timer_stats", "sched_debug",
    "latency_stats", "sysrq-trigger", "kallsyms",  "kmsg",         "kpagecount",  "kpageflags",
    "kpagecgroup",   "config.gz",     "cmdline",   "bootconfig",   "iomem",       "ioports",
    "modules",       "vmallocinfo",   "slabinfo",  "pagetypeinfo", "zoneinfo",    "buddyinfo",
    "interrupts",    "softirqs",      "mtrr",      "dma",          "misc",        "devices",
    "consoles",      "locks",
};
/* Directories of the same kind, hidden under an empty read-only
 * directory (a tmpfs of its own where the sandbox has no tmpfs root). */
static const char *const proc_masked_dirs[] = {"acpi", "asound", "bus", "driver",
                                               "fs",   "irq",    "scsi"};

int rootfs_plan_proc_masks(struct rootfs *p)
{
        char path[PATH_MAX + 16], step[64];
        struct stat st;
        int rc = 0;

        /* The sandbox's /proc shows what the host's does: mask what exists. */
        for (size_t i = 0; rc == 0 && i < sizeof(proc_masked_files) / sizeof(proc_masked_files[0]);
             i++) {
                snprintf(path, sizeof(path), "/proc/%s", proc_masked_files[i]);
                if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
                        continue;
                snprintf(step, sizeof(step), "mask %s", path);
                rc = rootfs_add_op(
                    p, OP_BIND, path, "/dev/null", NULL,
                    MS_RDONLY | MS_NOSUID | MS_NOEXEC | rootfs_locked_flags("/dev/null"), 0, step);
        }
        /* The host's boot id tells sandboxes they share a machine: each
         * has its own, new with each sandbox as a new machine's would be. */
        snprintf(path, sizeof(path), "%s/" BOOT_ID_FILE, p->top);
        if (rc == 0 && p->writable_root && lstat("/proc/sys/kernel/random/boot_id", &st) == 0)
                rc = rootfs_add_op(p, OP_BIND, "/proc/sys/kernel/random/boot_id", path, NULL,
                                   MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, 0, "own boot id");
        for (size_t i = 0; rc == 0 && i < sizeof(proc_masked_dirs) / sizeof(proc_masked_dirs[0]);
             i++) {
                snprintf(path, sizeof(path), "/proc/%s", proc_masked_dirs[i]);
                if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
                        continue;
                snprintf(step, sizeof(step), "mask %s", path);
                rc = top_dir_or_tmpfs(p, path, MASK_DIR, "size=4k,nr_inodes=1,mode=0555",
                                      MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, step);
        }
        return rc;
}
