/* A process's own figures as Prometheus' client libraries export them
 * (process_cpu_seconds_total, process_resident_memory_bytes, ...), read
 * from /proc: for the gateway itself and for its kernel-host. */
#ifndef GLOVEBOX_PROCSTAT_H
#define GLOVEBOX_PROCSTAT_H

#include <stdint.h>

struct procstat {
        double cpu_seconds;   /* user and system */
        double start_time;    /* seconds since the epoch */
        uint64_t rss_bytes;   /* resident memory */
        uint64_t vsize_bytes; /* virtual memory */
        int64_t open_fds;     /* -1: not readable (another user's process) */
        int64_t max_fds;      /* its soft RLIMIT_NOFILE; -1: not readable */
};

/* Reads process pid (0: this one) into out: 0, or -errno when it is gone
 * or its /proc/PID/stat cannot be read or parsed. */
int procstat_read(int pid, struct procstat *out);

#endif
