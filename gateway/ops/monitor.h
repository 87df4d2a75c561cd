/* What an operator watches: GET /metrics (Prometheus text, see metrics.h),
 * GET /api/health (200 or 503, for probes and load balancers), and each
 * sandbox's CPU, memory and disk use (GET /api/kernels/{id}/metrics and
 * E2B's getMetrics). */
#ifndef GLOVEBOX_MONITOR_H
#define GLOVEBOX_MONITOR_H

#include "gateway/core/http.h"
#include "gateway/kernels/kernels.h"
#include "gateway/kernels/sandboxes.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* One sample of a sandbox's use, as E2B's SandboxMetric has it. */
struct sandbox_usage {
        int cpu_count;
        double cpu_used_pct; /* of cpu_count CPUs, since the previous sample */
        uint64_t mem_used, mem_cache, mem_total;
        uint64_t disk_used, disk_total; /* /home/user and /tmp */
        struct timespec timestamp;
};

/* Samples sb's cgroups (read by the gateway: the kernel-host made them
 * and the sandbox cannot write them) and its writable filesystems (through
 * the root fd the gateway holds). 0, or -errno when sb is not ready. */
int monitor_sandbox_usage(struct sandbox *sb, struct sandbox_usage *out);
/* The sample as E2B's SandboxMetric JSON object (cpuCount, cpuUsedPct,
 * memUsed, memCache, memTotal, diskUsed, diskTotal, timestamp,
 * timestampUnix). */
json_t *monitor_usage_json(const struct sandbox_usage *u);

/* GET /metrics. */
void monitor_metrics(struct http_request *r);
/* GET /api/health: with or without the token; only the token shows more
 * than each check's name and whether it passes. */
void monitor_health(struct http_request *r);
/* GET /api/kernels/{id}/metrics: its sandbox's usage. */
void monitor_kernel_metrics(struct http_request *r, struct kernel *k);

#endif
