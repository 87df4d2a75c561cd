#include "autoconf.h"

#include "gateway/kernels/usage.h"
#include "protocol/buf.h"
#include "protocol/cgroupfs.h"
#include "protocol/ids.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CPU_SAMPLES 256 /* sandboxes whose last CPU sample is remembered */

/* ---- reading small files ------------------------------------------------- */

static int read_u64(const char *dir, const char *file, uint64_t *out)
{
        char path[PATH_MAX + 64], text[64], *end;
        int rc;

        snprintf(path, sizeof(path), "%s/%s", dir, file);
        rc = read_small_file(path, text, sizeof(text));
        if (rc < 0)
                return rc;
        errno = 0;
        *out = strtoull(text, &end, 10);
        return errno || end == text ? -EINVAL : 0;
}

/* The value of "key N" in a flat keyed file (memory.stat, cpu.stat). */
static int read_keyed(const char *dir, const char *file, const char *key, uint64_t *out)
{
        char path[PATH_MAX + 64], line[256];
        size_t klen = strlen(key);
        FILE *f;
        int rc = -ENOENT;

        snprintf(path, sizeof(path), "%s/%s", dir, file);
        f = fopen(path, "re");
        if (!f)
                return -errno;
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
                        *out = strtoull(line + klen + 1, NULL, 10);
                        rc = 0;
                        break;
                }
        }
        fclose(f);
        return rc;
}

uint64_t usage_meminfo_bytes(const char *key)
{
        FILE *f = fopen("/proc/meminfo", "re");
        char line[256];
        unsigned long long kb = 0;
        size_t klen = strlen(key);

        if (!f)
                return 0;
        while (fgets(line, sizeof(line), f)) {
                if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
                        sscanf(line + klen + 1, "%llu", &kb);
                        break;
                }
        }
        fclose(f);
        return (uint64_t)kb * 1024;
}

/* ---- a sandbox's cgroups -------------------------------------------------- */

/* The directory of the cgroup of controller ("" for the unified
 * hierarchy) that the sandbox's init is in. It must end in the name the
 * kernel-host gave it (the sandbox's id, or the one it said): a recycled
 * pid is refused. */
static int sandbox_cgroup(const struct sandbox *sb, const char *controller, char *out, size_t size)
{
        char path[64], text[4096], point[PATH_MAX], root[PATH_MAX];
        const char *cg = NULL, *base;
        size_t rlen;
        int rc;

        if (sb->init_pid <= 0)
                return -ESRCH;
        snprintf(path, sizeof(path), "/proc/%d/cgroup", sb->init_pid);
        rc = read_small_file(path, text, sizeof(text));
        if (rc < 0)
                return rc;
        for (char *line = text, *next; line && *line; line = next) {
                char *colon = strchr(line, ':'), *colon2 = colon ? strchr(colon + 1, ':') : NULL;

                next = strchr(line, '\n');
                if (next)
                        *next++ = '\0';
                if (!colon2)
                        continue;
                *colon2 = '\0';
                if (controller[0] ? cgroupfs_list_has(colon + 1, controller, ',')
                                  : strcmp(line, "0:") == 0 && colon[1] == '\0') {
                        cg = colon2 + 1;
                        break;
                }
        }
        if (!cg)
                return -ENOENT;
        base = strrchr(cg, '/');
        /* On cgroup v2 the init is in a leaf of the sandbox's group, which
         * holds its kernel's groups beside it (the kernel-host's
         * cgroup_hand_down): the group is the leaf's parent. */
        if (base && base > cg && strcmp(base + 1, CGROUPFS_INIT_LEAF) == 0 && !controller[0]) {
                *(char *)base = '\0';
                base = strrchr(cg, '/');
        }
        if (!base || strcmp(base + 1, sb->cgroup[0] ? sb->cgroup : sb->id) != 0)
                return -ESRCH;
        rc = cgroupfs_find_mount(controller[0] ? controller : NULL, point, sizeof(point), root,
                                 sizeof(root));
        if (rc < 0)
                return rc;
        rlen = strcmp(root, "/") == 0 ? 0 : strlen(root);
        if (strncmp(cg, root, rlen) != 0)
                return -ENOENT;
        if ((size_t)snprintf(out, size, "%s%s", point, cg + rlen) >= size)
                return -ENAMETOOLONG;
        return 0;
}

/* CPU seconds of every process in the group dir and its child groups, from
 * /proc (cgroup v1's cpu controller counts no usage of its own). */
static double procs_cpu_seconds(const char *dir, int depth)
{
        char path[PATH_MAX + 64], stat[1024];
        double total = 0;
        long ticks = sysconf(_SC_CLK_TCK);
        struct dirent *de;
        FILE *f;
        DIR *d;
        int pid;

        snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
        f = fopen(path, "re");
        while (f && fscanf(f, "%d", &pid) == 1) {
                unsigned long long utime, stime;
                const char *p;

                snprintf(path, sizeof(path), "/proc/%d/stat", pid);
                if (read_small_file(path, stat, sizeof(stat)) < 0)
                        continue;
                /* After the command name, which may hold spaces: fields 3 on. */
                p = strrchr(stat, ')');
                if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                                &utime, &stime) == 2)
                        total += (double)(utime + stime) / (double)(ticks > 0 ? ticks : 100);
        }
        if (f)
                fclose(f);
        d = depth < 4 ? opendir(dir) : NULL;
        while (d && (de = readdir(d)) != NULL) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                total += procs_cpu_seconds(path, depth + 1);
        }
        if (d)
                closedir(d);
        return total;
}

static struct {
        char id[JP_UUID_SIZE];
        double cpu_seconds, at;
} cpu_samples[CPU_SAMPLES];

double usage_monotonic(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Percent of the sandbox's CPUs used since the previous sample (or since
 * its init started, for the first). */
static double cpu_percent(const struct sandbox *sb, double cpu_seconds, int cpus)
{
        double now = usage_monotonic(), since = 0, used = 0, pct;
        size_t slot = 0;
        bool found = false;

        for (size_t i = 0; i < CPU_SAMPLES; i++) {
                if (strcmp(cpu_samples[i].id, sb->id) == 0) {
                        slot = i;
                        found = true;
                        break;
                }
                if (cpu_samples[i].at < cpu_samples[slot].at)
                        slot = i;
        }
        if (found && now - cpu_samples[slot].at > 0.05) {
                since = cpu_samples[slot].at;
                used = cpu_seconds - cpu_samples[slot].cpu_seconds;
        } else if (!found) {
                char path[64], stat[1024];
                unsigned long long start;
                const char *p;
                struct timespec boot;

                /* Since init started: field 22, in ticks since boot. */
                snprintf(path, sizeof(path), "/proc/%d/stat", sb->init_pid);
                clock_gettime(CLOCK_BOOTTIME, &boot);
                p = read_small_file(path, stat, sizeof(stat)) >= 0 ? strrchr(stat, ')') : NULL;
                if (p && sscanf(p + 2,
                                "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
                                "%*d %*d %*d %*d %llu",
                                &start) == 1)
                        since = now - ((double)boot.tv_sec + (double)boot.tv_nsec / 1e9 -
                                       (double)start / (double)sysconf(_SC_CLK_TCK));
                used = cpu_seconds;
        } else {
                return 0;
        }
        snprintf(cpu_samples[slot].id, sizeof(cpu_samples[slot].id), "%s", sb->id);
        cpu_samples[slot].cpu_seconds = cpu_seconds;
        cpu_samples[slot].at = now;
        if (now - since <= 0 || used < 0)
                return 0;
        pct = used / (now - since) / (cpus > 0 ? cpus : 1) * 100.0;
        return pct > 100.0 ? 100.0 : pct;
}

/* Adds the usage of the filesystem at path (inside the sandbox) unless it
 * is one already counted (dev). */
static void add_disk(const struct sandbox *sb, const char *path, dev_t *seen, size_t *nseen,
                     struct sandbox_usage *u)
{
        struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                               .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
        long fd = syscall(SYS_openat2, sb->root_fd, path, &how, sizeof(how));
        struct statfs fs;
        struct stat st;

        if (fd < 0)
                return;
        if (fstat((int)fd, &st) == 0 && fstatfs((int)fd, &fs) == 0) {
                for (size_t i = 0; i < *nseen; i++) {
                        if (seen[i] == st.st_dev)
                                goto out;
                }
                seen[(*nseen)++] = st.st_dev;
                u->disk_total += (uint64_t)fs.f_blocks * (uint64_t)fs.f_frsize;
                u->disk_used += (uint64_t)(fs.f_blocks - fs.f_bfree) * (uint64_t)fs.f_frsize;
        }
out:
        close((int)fd);
}

int usage_sample(struct sandbox *sb, struct sandbox_usage *out)
{
        char dir[PATH_MAX];
        uint64_t usage = 0, cache = 0, usec = 0;
        double cpu_seconds = 0;
        dev_t seen[2];
        size_t nseen = 0;

        memset(out, 0, sizeof(*out));
        clock_gettime(CLOCK_REALTIME, &out->timestamp);
        if (!sb || sb->phase != SANDBOX_READY)
                return -EAGAIN;
        out->cpu_count = (int)((sb->limits.cpu_millis + 999) / 1000);
        if (out->cpu_count < 1)
                out->cpu_count = 1;
        out->mem_total = sb->limits.memory_mb ? sb->limits.memory_mb * 1024 * 1024
                                              : usage_meminfo_bytes("MemTotal");
        /* cgroup v2 where the unified hierarchy has the controller, v1 else. */
        if (sandbox_cgroup(sb, "", dir, sizeof(dir)) == 0 &&
            read_u64(dir, "memory.current", &usage) == 0) {
                read_keyed(dir, "memory.stat", "file", &cache);
        } else if (sandbox_cgroup(sb, "memory", dir, sizeof(dir)) == 0 &&
                   read_u64(dir, "memory.usage_in_bytes", &usage) == 0) {
                read_keyed(dir, "memory.stat", "total_cache", &cache);
        }
        out->mem_cache = cache;
        out->mem_used = usage > cache ? usage - cache : 0;
        if (sandbox_cgroup(sb, "", dir, sizeof(dir)) == 0 &&
            read_keyed(dir, "cpu.stat", "usage_usec", &usec) == 0)
                cpu_seconds = (double)usec / 1e6;
        else if (sandbox_cgroup(sb, "memory", dir, sizeof(dir)) == 0 ||
                 sandbox_cgroup(sb, "pids", dir, sizeof(dir)) == 0)
                cpu_seconds = procs_cpu_seconds(dir, 0);
        out->cpu_used_pct = cpu_percent(sb, cpu_seconds, out->cpu_count);
        add_disk(sb, "home/user", seen, &nseen, out);
        add_disk(sb, "tmp", seen, &nseen, out);
        return 0;
}

json_t *usage_json(const struct sandbox_usage *u)
{
        char when[JP_TIMESTAMP_SIZE];

        jp_timestamp_format(&u->timestamp, when);
        return json_pack("{s:i, s:f, s:I, s:I, s:I, s:I, s:I, s:s, s:I}", "cpuCount", u->cpu_count,
                         "cpuUsedPct", round(u->cpu_used_pct * 100) / 100, "memUsed",
                         (json_int_t)u->mem_used, "memCache", (json_int_t)u->mem_cache, "memTotal",
                         (json_int_t)u->mem_total, "diskUsed", (json_int_t)u->disk_used,
                         "diskTotal", (json_int_t)u->disk_total, "timestamp", when, "timestampUnix",
                         (json_int_t)u->timestamp.tv_sec);
}
