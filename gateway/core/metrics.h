/* The gateway's metrics: counters, gauges and histograms with fixed label
 * names, rendered in the Prometheus text exposition format (0.0.4) for
 * GET /metrics.
 *
 * A family is one metric name with its HELP, TYPE and label names; a
 * series is one set of label values in it. Label values come only from
 * bounded sets (route classes, status codes, kernelspec names, outcomes:
 * never a path or an id), and a family holds at most METRICS_MAX_SERIES
 * series: past that, new label sets are not counted (and counted in
 * glovebox_metrics_series_dropped_total), so no client can make the scrape
 * grow without end.
 *
 * The hooks below (metrics_*) are what the rest of the gateway calls, one
 * line where the event happens. */
#ifndef GLOVEBOX_METRICS_H
#define GLOVEBOX_METRICS_H

#include "protocol/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_LABELS 3
#define METRICS_MAX_SERIES 512

enum metrics_type { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM };

struct metrics_series {
        char *values[METRICS_MAX_LABELS];
        double value;     /* a counter's or a gauge's */
        uint64_t *counts; /* a histogram's, per bucket (not cumulative), +Inf last */
        double sum;
        uint64_t count;
};

struct metrics_family {
        const char *name; /* a literal, like help and the label names */
        const char *help;
        enum metrics_type type;
        const char *labels[METRICS_MAX_LABELS];
        size_t nlabels;
        const double *bounds; /* a histogram's upper bounds, ascending, without +Inf */
        size_t nbounds;
        struct metrics_series *series;
        size_t nseries, cap;
};

/* The series of f with label values (nlabels of them, copied), made on
 * first use; NULL when out of memory or past METRICS_MAX_SERIES. */
struct metrics_series *metrics_series_get(struct metrics_family *f, const char *const *values);
/* Adds v to a counter or gauge series. */
void metrics_add(struct metrics_family *f, const char *const *values, double v);
/* Sets a gauge series to v. */
void metrics_set(struct metrics_family *f, const char *const *values, double v);
/* Counts v in a histogram series. */
void metrics_observe(struct metrics_family *f, const char *const *values, double v);
/* Forgets every series (gauges recomputed at each scrape). */
void metrics_clear(struct metrics_family *f);
/* Appends f as exposition text (HELP, TYPE, then every series; a
 * histogram's buckets cumulative, then _sum and _count). 0 or -ENOMEM. */
int metrics_render(struct buf *out, const struct metrics_family *f);
/* Appends s as a label value: backslash, double quote and newline escaped. */
int metrics_append_label_value(struct buf *out, const char *s);

/* ---- the gateway's own metrics ------------------------------------------ */

/* The class of an HTTP route (below the base URL), the "route" label:
 * never the raw path, whose ids would make a series per kernel.
 * sandbox_plane: an E2B request to a sandbox's own daemon (envd). */
const char *metrics_route_class(const char *path, bool sandbox_plane);

void metrics_http_request(const char *route_class, int status);
void metrics_ws_opened(void);
void metrics_ws_closed(void);
/* A WebSocket frame from (inbound) or to a client. */
void metrics_ws_frame(bool inbound, size_t bytes);
/* A kernel message relayed: to_kernel from a client, or from the kernel. */
void metrics_relayed(bool to_kernel, size_t bytes);

void metrics_kernel_started(const char *kernelspec);
void metrics_kernel_start_failed(const char *kernelspec);
void metrics_kernel_died(const char *kernelspec, bool oom);
/* automatic: after a death; else asked for by a client. */
void metrics_kernel_restarted(const char *kernelspec, bool automatic);
void metrics_kernel_host_restarted(void);

/* One execution (an execute_request answered or abandoned), seconds from
 * the request relayed to the kernel to its execute_reply. outcome: "ok",
 * "error", "aborted" or "timeout". Tenants do not exist yet: every
 * execution is the tenant "default"'s. */
void metrics_execution(const char *tenant, const char *kernelspec, double seconds,
                       const char *outcome, size_t code_bytes);

/* Renders every family of the gateway's own, plus the gauges the caller
 * filled in gauges (nullable array of n families, rendered after). */
int metrics_render_all(struct buf *out, struct metrics_family *const *gauges, size_t n);
/* Frees every series (at exit). */
void metrics_free_all(void);

#endif
