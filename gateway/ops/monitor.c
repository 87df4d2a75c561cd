#include "autoconf.h"

#include "gateway/ops/monitor.h"
#include "gateway/kernels/host.h"
#include "gateway/kernels/kernels.h"
#include "gateway/core/metrics.h"
#include "gateway/kernels/pool.h"
#include "gateway/kernels/watch.h"
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

#define METRICS_MAX_BYTES  (16 * 1024 * 1024) /* a scrape's text, at most */
#define POOL_SHORT_SECONDS 60.0               /* a pool below target this long is unhealthy */
#define CPU_SAMPLES        256                /* sandboxes whose last CPU sample is remembered */

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

static uint64_t meminfo_bytes(const char *key)
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
 * hierarchy) that the sandbox's init is in. It must end in the sandbox's
 * id: the kernel-host names it so, and a recycled pid is refused. */
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
        if (!base || strcmp(base + 1, sb->id) != 0)
                return -ESRCH;
        rc = cgroupfs_find_mount(controller[0] ? controller : NULL, point, sizeof(point), root, sizeof(root));
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

static double monotonic(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Percent of the sandbox's CPUs used since the previous sample (or since
 * its init started, for the first). */
static double cpu_percent(const struct sandbox *sb, double cpu_seconds, int cpus)
{
        double now = monotonic(), since = 0, used = 0, pct;
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

int monitor_sandbox_usage(struct sandbox *sb, struct sandbox_usage *out)
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
        out->mem_total =
            sb->limits.memory_mb ? sb->limits.memory_mb * 1024 * 1024 : meminfo_bytes("MemTotal");
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

json_t *monitor_usage_json(const struct sandbox_usage *u)
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

void monitor_kernel_metrics(struct http_request *r, struct kernel *k)
{
        struct sandbox_usage u;

        if (monitor_sandbox_usage(k->sandbox, &u) < 0) {
                http_reply_error(r, 409, "Kernel %s has no running sandbox (it is %s)", k->id,
                                 k->execution_state);
                return;
        }
        http_reply_json(r, 200, monitor_usage_json(&u));
}

/* ---- health --------------------------------------------------------------- */

static double pool_short_since; /* monotonic; 0 while the pool is full */

/* Whether the kernel-host answers: there is one, and it is not stopped or
 * a zombie (a SIGSTOPped kernel-host keeps its socket but serves nobody). */
static bool host_alive(char *why, size_t size)
{
        char path[64], stat[512];
        const char *p;
        int pid = host_process_id();

        if (!host_running() || pid <= 0) {
                snprintf(why, size, "no kernel-host is running");
                return false;
        }
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        p = read_small_file(path, stat, sizeof(stat)) >= 0 ? strrchr(stat, ')') : NULL;
        if (!p || !p[1] || !p[2]) {
                snprintf(why, size, "the kernel-host (pid %d) is gone", pid);
                return false;
        }
        if (p[2] == 'T' || p[2] == 't' || p[2] == 'Z' || p[2] == 'X') {
                snprintf(why, size, "the kernel-host (pid %d) is %s", pid,
                         p[2] == 'Z' || p[2] == 'X' ? "dead" : "stopped");
                return false;
        }
        snprintf(why, size, "pid %d", pid);
        return true;
}

/* Whether every pool has had its target of ready-or-starting kernels
 * within the last POOL_SHORT_SECONDS (a pool refills in seconds; one
 * that stays short is failing to start kernels). */
static bool pool_full(json_t *status, char *why, size_t size)
{
        json_t *specs = json_object_get(status, "kernelspecs"), *e;
        const char *name;
        bool full = true;

        snprintf(why, size, "every pool is at its target");
        json_object_foreach(specs, name, e) {
                json_int_t target = json_integer_value(json_object_get(e, "target"));
                json_int_t ready = json_integer_value(json_object_get(e, "ready"));

                if (ready < target) {
                        full = false;
                        snprintf(why, size, "pool %s has %lld of %lld ready", name,
                                 (long long)ready, (long long)target);
                }
        }
        if (full) {
                pool_short_since = 0;
                return true;
        }
        if (pool_short_since == 0)
                pool_short_since = monotonic();
        if (monotonic() - pool_short_since < POOL_SHORT_SECONDS)
                return true;
        snprintf(why + strlen(why), size - strlen(why), " for %.0f s",
                 monotonic() - pool_short_since);
        return false;
}

static bool memory_enough(char *why, size_t size)
{
        uint64_t available = meminfo_bytes("MemAvailable");
        uint64_t min = (uint64_t)config_get()->pool_min_available_mb * 1024 * 1024;

        snprintf(why, size, "%llu MiB available (minimum %llu MiB)",
                 (unsigned long long)(available >> 20), (unsigned long long)(min >> 20));
        return available >= min;
}

void monitor_health(struct http_request *r)
{
        bool detail = http_authorized(r->wsi);
        json_t *pool = pool_status();
        json_t *checks = json_object();
        char why[3][256];
        bool pass[3];
        const char *names[] = {"kernel_host", "pool", "memory"};
        bool healthy = true;

        pass[0] = host_alive(why[0], sizeof(why[0]));
        pass[1] = pool_full(pool, why[1], sizeof(why[1]));
        pass[2] = memory_enough(why[2], sizeof(why[2]));
        for (size_t i = 0; checks && i < 3; i++) {
                healthy &= pass[i];
                /* Without the token: each check's name and result only. */
                json_object_set_new(checks, names[i],
                                    detail ? json_pack("{s:s, s:s}", "status",
                                                       pass[i] ? "ok" : "failing", "detail", why[i])
                                           : json_string(pass[i] ? "ok" : "failing"));
        }
        json_decref(pool);
        http_reply_json(
            r, healthy ? 200 : 503,
            json_pack("{s:s, s:o}", "status", healthy ? "ok" : "unhealthy", "checks", checks));
}

/* ---- /metrics ------------------------------------------------------------- */

static struct metrics_family kernels_gauge = {
    .name = "glovebox_kernels",
    .help = "Kernels, by kernelspec and execution state",
    .type = METRICS_GAUGE,
    .labels = {"kernelspec", "state"},
    .nlabels = 2,
};
static struct metrics_family connections_gauge = {
    .name = "glovebox_kernel_connections",
    .help = "Client connections (WebSockets and HTTP executions) attached to kernels",
    .type = METRICS_GAUGE,
};
static struct metrics_family tenant_kernels = {
    .name = "glovebox_tenant_kernels",
    .help = "Kernels, by tenant",
    .type = METRICS_GAUGE,
    .labels = {"tenant"},
    .nlabels = 1,
};
static struct metrics_family pool_gauge = {
    .name = "glovebox_pool_kernels",
    .help = "Warm pool kernels, by kernelspec and state (target, ready, starting)",
    .type = METRICS_GAUGE,
    .labels = {"kernelspec", "state"},
    .nlabels = 2,
};
static struct metrics_family pool_taken = {
    .name = "glovebox_pool_taken_total",
    .help = "Warm kernels handed out by the pool, by kernelspec",
    .type = METRICS_COUNTER,
    .labels = {"kernelspec"},
    .nlabels = 1,
};
static struct metrics_family pool_failed = {
    .name = "glovebox_pool_failed_total",
    .help = "Pool kernels that failed to start, by kernelspec",
    .type = METRICS_COUNTER,
    .labels = {"kernelspec"},
    .nlabels = 1,
};
static struct metrics_family pool_paused = {
    .name = "glovebox_pool_paused",
    .help = "1 while the pool is paused for lack of memory",
    .type = METRICS_GAUGE,
};
static struct metrics_family memory_available = {
    .name = "glovebox_memory_available_bytes",
    .help = "The machine's available memory (MemAvailable)",
    .type = METRICS_GAUGE,
};
static struct metrics_family host_up = {
    .name = "glovebox_kernel_host_up",
    .help = "1 while the kernel-host is running and not stopped",
    .type = METRICS_GAUGE,
};
static struct metrics_family healthy_gauge = {
    .name = "glovebox_healthy",
    .help = "1 while GET /api/health answers 200",
    .type = METRICS_GAUGE,
};

static struct metrics_family watchers_gauge = {
    .name = "glovebox_e2b_watchers",
    .help = "E2B directory watchers (each one inotify instance of the gateway's user)",
    .type = METRICS_GAUGE,
};
static struct metrics_family watched_dirs_gauge = {
    .name = "glovebox_e2b_watched_directories",
    .help = "Directories the E2B directory watchers watch (inotify watches)",
    .type = METRICS_GAUGE,
};

static struct metrics_family *const gauges[] = {
    &kernels_gauge, &connections_gauge, &tenant_kernels, &pool_gauge,
    &pool_taken,    &pool_failed,       &pool_paused,    &memory_available,
    &host_up,       &healthy_gauge,     &watchers_gauge, &watched_dirs_gauge,
};

static void collect(void)
{
        json_t *list = kernels_model(), *pool = pool_status(), *k, *e, *owners;
        double connections = 0;
        const char *name;
        char why[256];
        size_t i;
        bool healthy;

        for (i = 0; i < sizeof(gauges) / sizeof(gauges[0]); i++)
                metrics_clear(gauges[i]);
        json_array_foreach(list, i, k) {
                const char *labels[] = {json_string_value(json_object_get(k, "name")),
                                        json_string_value(json_object_get(k, "execution_state"))};

                if (labels[0] && labels[1])
                        metrics_add(&kernels_gauge, labels, 1);
                connections += (double)json_integer_value(json_object_get(k, "connections"));
        }
        metrics_set(&connections_gauge, NULL, connections);
        owners = kernels_owners();
        json_object_foreach(owners, name, e)
                metrics_set(&tenant_kernels, &name, (double)json_integer_value(e));
        json_decref(owners);
        json_object_foreach(json_object_get(pool, "kernelspecs"), name, e) {
                static const char *const states[] = {"target", "ready", "starting"};

                for (size_t s = 0; s < 3; s++)
                        metrics_set(&pool_gauge, (const char *[]){name, states[s]},
                                    (double)json_integer_value(json_object_get(e, states[s])));
                metrics_set(&pool_taken, &name,
                            (double)json_integer_value(json_object_get(e, "taken")));
                metrics_set(&pool_failed, &name,
                            (double)json_integer_value(json_object_get(e, "failed")));
        }
        metrics_set(&pool_paused, NULL, json_is_true(json_object_get(pool, "paused")));
        metrics_set(&memory_available, NULL, (double)meminfo_bytes("MemAvailable"));
        healthy = host_alive(why, sizeof(why));
        metrics_set(&host_up, NULL, healthy);
        healthy &= pool_full(pool, why, sizeof(why));
        healthy &= memory_enough(why, sizeof(why));
        metrics_set(&healthy_gauge, NULL, healthy);
        metrics_set(&watchers_gauge, NULL, (double)watch_count());
        metrics_set(&watched_dirs_gauge, NULL, (double)watch_dirs());
        json_decref(list);
        json_decref(pool);
}

void monitor_metrics(struct http_request *r)
{
        struct buf out;
        char *text;
        size_t len;

        buf_init(&out, METRICS_MAX_BYTES);
        collect();
        if (metrics_render_all(&out, gauges, sizeof(gauges) / sizeof(gauges[0])) < 0) {
                buf_free(&out);
                http_reply_error(r, 500, "Cannot render the metrics");
                return;
        }
        text = buf_steal(&out, &len);
        http_reply_bytes(r, 200, "text/plain; version=0.0.4; charset=utf-8", text ? text : "",
                         text ? len : 0);
        free(text);
}
