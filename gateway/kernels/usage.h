/* What a sandbox uses: its CPU, memory and disk, sampled for whoever asks
 * (a kernel's metrics, E2B's getMetrics, /metrics), and the host's memory. */
#ifndef GLOVEBOX_USAGE_H
#define GLOVEBOX_USAGE_H

#include "gateway/kernels/sandboxes.h"

#include <jansson.h>
#include <stdint.h>
#include <time.h>

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
int usage_sample(struct sandbox *sb, struct sandbox_usage *out);
/* The sample as E2B's SandboxMetric JSON object (cpuCount, cpuUsedPct,
 * memUsed, memCache, memTotal, diskUsed, diskTotal, timestamp,
 * timestampUnix). */
json_t *usage_json(const struct sandbox_usage *u);

/* A key of /proc/meminfo ("MemAvailable") in bytes; 0 when unknown. */
uint64_t usage_meminfo_bytes(const char *key);
/* CLOCK_MONOTONIC in seconds. */
double usage_monotonic(void);

#endif
