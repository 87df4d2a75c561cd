#include "autoconf.h"

#include "gateway/ops/monitor.h"
#include "gateway/ops/procstat.h"
#include "gateway/kernels/usage.h"
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

void monitor_kernel_metrics(struct http_request *r, struct kernel *k)
{
        struct sandbox_usage u;

        if (usage_sample(k->sandbox, &u) < 0) {
                http_reply_error(r, 409, "Kernel %s has no running sandbox (it is %s)", k->id,
                                 k->execution_state);
                return;
        }
        http_reply_json(r, 200, usage_json(&u));
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
                pool_short_since = usage_monotonic();
        if (usage_monotonic() - pool_short_since < POOL_SHORT_SECONDS)
                return true;
        snprintf(why + strlen(why), size - strlen(why), " for %.0f s",
                 usage_monotonic() - pool_short_since);
        return false;
}

static bool memory_enough(char *why, size_t size)
{
        uint64_t available = usage_meminfo_bytes("MemAvailable");
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

static struct metrics_family build_info = {
    .name = "glovebox_build_info",
    .help = "1, labelled with the version of the running gateway",
    .type = METRICS_GAUGE,
    .labels = {"version"},
    .nlabels = 1,
};

/* The gateway's own process, in the names Prometheus' client libraries
 * give every process, and the kernel-host's beside them. */
#define PROCESS_FAMILY(var, fname, ftype, fhelp)                                                   \
        static struct metrics_family var = {.name = fname, .help = fhelp, .type = ftype}

PROCESS_FAMILY(process_cpu, "process_cpu_seconds_total", METRICS_COUNTER,
               "Total user and system CPU time spent in seconds");
PROCESS_FAMILY(process_rss, "process_resident_memory_bytes", METRICS_GAUGE,
               "Resident memory size in bytes");
PROCESS_FAMILY(process_vsize, "process_virtual_memory_bytes", METRICS_GAUGE,
               "Virtual memory size in bytes");
PROCESS_FAMILY(process_fds, "process_open_fds", METRICS_GAUGE, "Number of open file descriptors");
PROCESS_FAMILY(process_max_fds, "process_max_fds", METRICS_GAUGE,
               "Maximum number of open file descriptors");
PROCESS_FAMILY(process_start, "process_start_time_seconds", METRICS_GAUGE,
               "Start time of the process since unix epoch in seconds");
PROCESS_FAMILY(kernel_host_cpu, "glovebox_kernel_host_cpu_seconds_total", METRICS_COUNTER,
               "The kernel-host's user and system CPU time in seconds (its kernels not included)");
PROCESS_FAMILY(kernel_host_rss, "glovebox_kernel_host_resident_memory_bytes", METRICS_GAUGE,
               "The kernel-host's resident memory size in bytes");
PROCESS_FAMILY(kernel_host_fds, "glovebox_kernel_host_open_fds", METRICS_GAUGE,
               "The kernel-host's open file descriptors");
PROCESS_FAMILY(kernel_host_start, "glovebox_kernel_host_start_time_seconds", METRICS_GAUGE,
               "The kernel-host's start time since unix epoch in seconds");

static struct metrics_family *const gauges[] = {
    &kernels_gauge,   &connections_gauge,  &tenant_kernels,    &pool_gauge,    &pool_taken,
    &pool_failed,     &pool_paused,        &memory_available,  &host_up,       &healthy_gauge,
    &watchers_gauge,  &watched_dirs_gauge, &build_info,        &process_cpu,   &process_rss,
    &process_vsize,   &process_fds,        &process_max_fds,   &process_start, &kernel_host_cpu,
    &kernel_host_rss, &kernel_host_fds,    &kernel_host_start,
};

/* The gateway's process, and the kernel-host's while there is one (a
 * family without a sample is left out of the scrape). */
static void collect_processes(void)
{
        struct procstat self, host;
        int pid = host_process_id();

        metrics_set(&build_info, (const char *[]){PACKAGE_VERSION}, 1);
        if (procstat_read(0, &self) == 0) {
                metrics_set(&process_cpu, NULL, self.cpu_seconds);
                metrics_set(&process_rss, NULL, (double)self.rss_bytes);
                metrics_set(&process_vsize, NULL, (double)self.vsize_bytes);
                metrics_set(&process_start, NULL, self.start_time);
                if (self.open_fds >= 0)
                        metrics_set(&process_fds, NULL, (double)self.open_fds);
                if (self.max_fds >= 0)
                        metrics_set(&process_max_fds, NULL, (double)self.max_fds);
        }
        if (host_running() && pid > 0 && procstat_read(pid, &host) == 0) {
                metrics_set(&kernel_host_cpu, NULL, host.cpu_seconds);
                metrics_set(&kernel_host_rss, NULL, (double)host.rss_bytes);
                metrics_set(&kernel_host_start, NULL, host.start_time);
                if (host.open_fds >= 0)
                        metrics_set(&kernel_host_fds, NULL, (double)host.open_fds);
        }
}

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
        metrics_set(&memory_available, NULL, (double)usage_meminfo_bytes("MemAvailable"));
        healthy = host_alive(why, sizeof(why));
        metrics_set(&host_up, NULL, healthy);
        healthy &= pool_full(pool, why, sizeof(why));
        healthy &= memory_enough(why, sizeof(why));
        metrics_set(&healthy_gauge, NULL, healthy);
        metrics_set(&watchers_gauge, NULL, (double)watch_count());
        metrics_set(&watched_dirs_gauge, NULL, (double)watch_dirs());
        collect_processes();
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
