#include "autoconf.h"

#include "gateway/core/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t series_dropped;

static bool same_values(const struct metrics_family *f, const struct metrics_series *s,
                        const char *const *values)
{
        for (size_t i = 0; i < f->nlabels; i++) {
                if (strcmp(s->values[i], values[i]) != 0)
                        return false;
        }
        return true;
}

static void series_free(const struct metrics_family *f, struct metrics_series *s)
{
        for (size_t i = 0; i < f->nlabels; i++)
                free(s->values[i]);
        free(s->counts);
}

struct metrics_series *metrics_series_get(struct metrics_family *f, const char *const *values)
{
        struct metrics_series *s;

        for (size_t i = 0; i < f->nseries; i++) {
                if (same_values(f, &f->series[i], values))
                        return &f->series[i];
        }
        if (f->nseries == METRICS_MAX_SERIES) {
                series_dropped++;
                return NULL;
        }
        if (f->nseries == f->cap) {
                size_t cap = f->cap ? f->cap * 2 : 8;
                struct metrics_series *grown = realloc(f->series, cap * sizeof(*grown));

                if (!grown)
                        return NULL;
                f->series = grown;
                f->cap = cap;
        }
        s = &f->series[f->nseries];
        memset(s, 0, sizeof(*s));
        for (size_t i = 0; i < f->nlabels; i++) {
                s->values[i] = strdup(values[i] ? values[i] : "");
                if (!s->values[i])
                        goto fail;
        }
        if (f->type == METRICS_HISTOGRAM) {
                s->counts = calloc(f->nbounds + 1, sizeof(*s->counts));
                if (!s->counts)
                        goto fail;
        }
        f->nseries++;
        return s;
fail:
        series_free(f, s);
        return NULL;
}

void metrics_add(struct metrics_family *f, const char *const *values, double v)
{
        struct metrics_series *s = metrics_series_get(f, values);

        if (s)
                s->value += v;
}

void metrics_set(struct metrics_family *f, const char *const *values, double v)
{
        struct metrics_series *s = metrics_series_get(f, values);

        if (s)
                s->value = v;
}

void metrics_observe(struct metrics_family *f, const char *const *values, double v)
{
        struct metrics_series *s = metrics_series_get(f, values);
        size_t i = 0;

        if (!s)
                return;
        /* The first bucket whose bound is at least v ("le"); else +Inf. */
        while (i < f->nbounds && v > f->bounds[i])
                i++;
        s->counts[i]++;
        s->sum += v;
        s->count++;
}

void metrics_clear(struct metrics_family *f)
{
        for (size_t i = 0; i < f->nseries; i++)
                series_free(f, &f->series[i]);
        free(f->series);
        f->series = NULL;
        f->nseries = f->cap = 0;
}

int metrics_append_label_value(struct buf *out, const char *s)
{
        int rc = 0;

        for (; rc == 0 && *s; s++) {
                if (*s == '\\')
                        rc = buf_append_str(out, "\\\\");
                else if (*s == '"')
                        rc = buf_append_str(out, "\\\"");
                else if (*s == '\n')
                        rc = buf_append_str(out, "\\n");
                else
                        rc = buf_append(out, s, 1);
        }
        return rc;
}

/* HELP text escapes only backslash and newline. */
static int append_help(struct buf *out, const char *s)
{
        int rc = 0;

        for (; rc == 0 && *s; s++) {
                if (*s == '\\')
                        rc = buf_append_str(out, "\\\\");
                else if (*s == '\n')
                        rc = buf_append_str(out, "\\n");
                else
                        rc = buf_append(out, s, 1);
        }
        return rc;
}

/* A sample value as Prometheus reads it: integers without a fraction,
 * others with enough digits to read back the same double. */
static int append_number(struct buf *out, double v)
{
        if (isnan(v))
                return buf_append_str(out, "NaN");
        if (isinf(v))
                return buf_append_str(out, v > 0 ? "+Inf" : "-Inf");
        if (v == floor(v) && fabs(v) < 9007199254740992.0)
                return buf_printf(out, "%.0f", v);
        return buf_printf(out, "%.17g", v);
}

/* {a="x",b="y"} with an extra label (le) when extra_name is set; nothing
 * at all for a series without labels. */
static int append_labels(struct buf *out, const struct metrics_family *f,
                         const struct metrics_series *s, const char *extra_name,
                         const char *extra_value)
{
        int rc = 0;

        if (f->nlabels == 0 && !extra_name)
                return 0;
        rc = buf_append_str(out, "{");
        for (size_t i = 0; rc == 0 && i < f->nlabels; i++) {
                rc = buf_printf(out, "%s%s=\"", i ? "," : "", f->labels[i]);
                if (rc == 0)
                        rc = metrics_append_label_value(out, s->values[i]);
                if (rc == 0)
                        rc = buf_append_str(out, "\"");
        }
        if (rc == 0 && extra_name)
                rc = buf_printf(out, "%s%s=\"%s\"", f->nlabels ? "," : "", extra_name, extra_value);
        if (rc == 0)
                rc = buf_append_str(out, "}");
        return rc;
}

static int render_histogram(struct buf *out, const struct metrics_family *f,
                            const struct metrics_series *s)
{
        uint64_t cumulative = 0;
        char bound[32];
        int rc = 0;

        for (size_t i = 0; rc == 0 && i <= f->nbounds; i++) {
                cumulative += s->counts[i];
                if (i < f->nbounds)
                        snprintf(bound, sizeof(bound), "%g", f->bounds[i]);
                else
                        snprintf(bound, sizeof(bound), "+Inf");
                rc = buf_printf(out, "%s_bucket", f->name);
                if (rc == 0)
                        rc = append_labels(out, f, s, "le", bound);
                if (rc == 0)
                        rc = buf_printf(out, " %llu\n", (unsigned long long)cumulative);
        }
        if (rc == 0)
                rc = buf_printf(out, "%s_sum", f->name);
        if (rc == 0)
                rc = append_labels(out, f, s, NULL, NULL);
        if (rc == 0)
                rc = buf_append_str(out, " ");
        if (rc == 0)
                rc = append_number(out, s->sum);
        if (rc == 0)
                rc = buf_printf(out, "\n%s_count", f->name);
        if (rc == 0)
                rc = append_labels(out, f, s, NULL, NULL);
        if (rc == 0)
                rc = buf_printf(out, " %llu\n", (unsigned long long)s->count);
        return rc;
}

int metrics_render(struct buf *out, const struct metrics_family *f)
{
        static const char *const types[] = {"counter", "gauge", "histogram"};
        int rc = buf_printf(out, "# HELP %s ", f->name);

        if (rc == 0)
                rc = append_help(out, f->help);
        if (rc == 0)
                rc = buf_printf(out, "\n# TYPE %s %s\n", f->name, types[f->type]);
        for (size_t i = 0; rc == 0 && i < f->nseries; i++) {
                const struct metrics_series *s = &f->series[i];

                if (f->type == METRICS_HISTOGRAM) {
                        rc = render_histogram(out, f, s);
                        continue;
                }
                rc = buf_append_str(out, f->name);
                if (rc == 0)
                        rc = append_labels(out, f, s, NULL, NULL);
                if (rc == 0)
                        rc = buf_append_str(out, " ");
                if (rc == 0)
                        rc = append_number(out, s->value);
                if (rc == 0)
                        rc = buf_append_str(out, "\n");
        }
        return rc;
}

/* ---- the gateway's own metrics ------------------------------------------ */

/* From 5 ms (a trivial cell) to a minute (a long computation). */
static const double execution_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                          1,     2.5,  5,     10,   30,  60};

#define FAMILY0(var, fname, ftype, fhelp)                                                          \
        static struct metrics_family var = {.name = fname, .help = fhelp, .type = ftype}

#define FAMILY(var, fname, ftype, fhelp, ...)                                                      \
        static struct metrics_family var = {                                                       \
            .name = fname,                                                                         \
            .help = fhelp,                                                                         \
            .type = ftype,                                                                         \
            .labels = {__VA_ARGS__},                                                               \
            .nlabels = sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *),               \
        }

FAMILY(http_requests, "glovebox_http_requests_total", METRICS_COUNTER,
       "HTTP requests answered, by route class and status code", "route", "status");
FAMILY0(ws_opened, "glovebox_websocket_connections_opened_total", METRICS_COUNTER,
        "Kernel channel WebSocket connections opened");
FAMILY0(ws_closed, "glovebox_websocket_connections_closed_total", METRICS_COUNTER,
        "Kernel channel WebSocket connections closed");
FAMILY(ws_frames, "glovebox_websocket_frames_total", METRICS_COUNTER,
       "WebSocket frames, by direction (in: from clients)", "direction");
FAMILY(ws_bytes, "glovebox_websocket_frame_bytes_total", METRICS_COUNTER,
       "Bytes of WebSocket frames, by direction (in: from clients)", "direction");
FAMILY(relayed_messages, "glovebox_relayed_messages_total", METRICS_COUNTER,
       "Kernel messages relayed, by direction (to_kernel, from_kernel)", "direction");
FAMILY(relayed_bytes, "glovebox_relayed_bytes_total", METRICS_COUNTER,
       "Bytes of kernel messages relayed, by direction (to_kernel, from_kernel)", "direction");
FAMILY(kernel_starts, "glovebox_kernel_starts_total", METRICS_COUNTER,
       "Kernels that started and became ready, by kernelspec", "kernelspec");
FAMILY(kernel_failures, "glovebox_kernel_start_failures_total", METRICS_COUNTER,
       "Kernel starts that failed, by kernelspec", "kernelspec");
FAMILY(kernel_deaths, "glovebox_kernel_deaths_total", METRICS_COUNTER,
       "Kernels that died unasked (out-of-memory kills included), by kernelspec", "kernelspec");
FAMILY(kernel_ooms, "glovebox_kernel_oom_kills_total", METRICS_COUNTER,
       "Kernels killed for exceeding their memory limit, by kernelspec", "kernelspec");
FAMILY(kernel_restarts, "glovebox_kernel_restarts_total", METRICS_COUNTER,
       "Kernel restarts, by kernelspec and kind (automatic after a death, or requested)",
       "kernelspec", "kind");
FAMILY0(host_restarts, "glovebox_kernel_host_restarts_total", METRICS_COUNTER,
        "Kernel-hosts started to replace one that died");
FAMILY(executions, "glovebox_executions_total", METRICS_COUNTER,
       "Executions (execute_request to execute_reply), by tenant and outcome", "tenant", "outcome");
FAMILY(tenant_seconds, "glovebox_tenant_execution_seconds_total", METRICS_COUNTER,
       "Seconds of execution, by tenant", "tenant");
FAMILY(tenant_code_bytes, "glovebox_tenant_code_bytes_total", METRICS_COUNTER,
       "Bytes of code sent for execution, by tenant", "tenant");
FAMILY0(dropped, "glovebox_metrics_series_dropped_total", METRICS_COUNTER,
        "Label sets not counted because their family had too many series");

static struct metrics_family execution_seconds = {
    .name = "glovebox_execution_duration_seconds",
    .help = "Time from an execute_request relayed to the kernel to its execute_reply",
    .type = METRICS_HISTOGRAM,
    .labels = {"kernelspec"},
    .nlabels = 1,
    .bounds = execution_bounds,
    .nbounds = sizeof(execution_bounds) / sizeof(execution_bounds[0]),
};

static struct metrics_family *const families[] = {
    &http_requests,    &ws_opened,         &ws_closed,     &ws_frames,       &ws_bytes,
    &relayed_messages, &relayed_bytes,     &kernel_starts, &kernel_failures, &kernel_deaths,
    &kernel_ooms,      &kernel_restarts,   &host_restarts, &executions,      &execution_seconds,
    &tenant_seconds,   &tenant_code_bytes, &dropped,
};

const char *metrics_route_class(const char *path, bool sandbox_plane)
{
        static const char kernels[] = "api/kernels/";
        size_t n = strlen(kernels);

        if (strcmp(path, "files") == 0 || strcmp(path, "e2b/files") == 0)
                return "envd"; /* signed file URLs too */
        if (strncmp(path, "e2b/", 4) == 0)
                return sandbox_plane ? "envd" : "e2b";
        if (strcmp(path, "metrics") == 0)
                return "metrics";
        if (strcmp(path, "api/health") == 0)
                return "health";
        if (strncmp(path, kernels, n) == 0) {
                const char *action = strchr(path + n, '/');

                if (action && strcmp(action, "/execute") == 0)
                        return "execute";
                if (action && strncmp(action, "/files", 6) == 0 &&
                    (action[6] == '\0' || action[6] == '/'))
                        return "files";
                if (action && strcmp(action, "/channels") == 0)
                        return "channels";
                if (action && strncmp(action, "/ports", 6) == 0 &&
                    (action[6] == '\0' || action[6] == '/'))
                        return "ports";
                return "kernels";
        }
        if (strcmp(path, "api/kernels") == 0)
                return "kernels";
        if (strncmp(path, "api/sessions", 12) == 0 && (path[12] == '\0' || path[12] == '/'))
                return "sessions";
        if (strncmp(path, "api/kernelspecs", 15) == 0 || strncmp(path, "kernelspecs/", 12) == 0)
                return "kernelspecs";
        if ((strncmp(path, "api/terminals", 13) == 0 && (path[13] == '\0' || path[13] == '/')) ||
            strncmp(path, "terminals/", 10) == 0)
                return "terminals";
        if (strcmp(path, "mcp") == 0)
                return "mcp";
        if (strncmp(path, "api/fleet", 9) == 0 && (path[9] == '\0' || path[9] == '/'))
                return "fleet";
        if (strcmp(path, "api") == 0 || strcmp(path, "api/status") == 0)
                return "api";
        if (path[0] == '\0' || strncmp(path, "static/", 7) == 0 || strchr(path, '/') == NULL)
                return "page";
        return "other";
}

void metrics_http_request(const char *route_class, int status)
{
        char code[16];

        snprintf(code, sizeof(code), "%d", status);
        metrics_add(&http_requests, (const char *[]){route_class, code}, 1);
}

void metrics_ws_opened(void)
{
        metrics_add(&ws_opened, NULL, 1);
}

void metrics_ws_closed(void)
{
        metrics_add(&ws_closed, NULL, 1);
}

void metrics_ws_frame(bool inbound, size_t bytes)
{
        const char *direction[] = {inbound ? "in" : "out"};

        metrics_add(&ws_frames, direction, 1);
        metrics_add(&ws_bytes, direction, (double)bytes);
}

void metrics_relayed(bool to_kernel, size_t bytes)
{
        const char *direction[] = {to_kernel ? "to_kernel" : "from_kernel"};

        metrics_add(&relayed_messages, direction, 1);
        metrics_add(&relayed_bytes, direction, (double)bytes);
}

void metrics_kernel_started(const char *kernelspec)
{
        metrics_add(&kernel_starts, &kernelspec, 1);
}

void metrics_kernel_start_failed(const char *kernelspec)
{
        metrics_add(&kernel_failures, &kernelspec, 1);
}

void metrics_kernel_died(const char *kernelspec, bool oom)
{
        metrics_add(&kernel_deaths, &kernelspec, 1);
        if (oom)
                metrics_add(&kernel_ooms, &kernelspec, 1);
}

void metrics_kernel_restarted(const char *kernelspec, bool automatic)
{
        metrics_add(&kernel_restarts,
                    (const char *[]){kernelspec, automatic ? "automatic" : "requested"}, 1);
}

void metrics_kernel_host_restarted(void)
{
        metrics_add(&host_restarts, NULL, 1);
}

void metrics_execution(const char *tenant, const char *kernelspec, double seconds,
                       const char *outcome, size_t code_bytes)
{
        if (seconds < 0)
                seconds = 0;
        metrics_add(&executions, (const char *[]){tenant, outcome}, 1);
        metrics_observe(&execution_seconds, &kernelspec, seconds);
        metrics_add(&tenant_seconds, &tenant, seconds);
        metrics_add(&tenant_code_bytes, &tenant, (double)code_bytes);
}

int metrics_render_all(struct buf *out, struct metrics_family *const *gauges, size_t n)
{
        int rc = 0;

        /* A family without labels shows 0 before its first event, so that
         * rate() has a start. */
        for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
                if (families[i]->nlabels == 0)
                        metrics_series_get(families[i], NULL);
        }
        if (dropped.nseries)
                dropped.series[0].value = (double)series_dropped;
        for (size_t i = 0; rc == 0 && i < sizeof(families) / sizeof(families[0]); i++)
                rc = metrics_render(out, families[i]);
        for (size_t i = 0; rc == 0 && i < n; i++)
                rc = metrics_render(out, gauges[i]);
        return rc;
}

void metrics_free_all(void)
{
        for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
                metrics_clear(families[i]);
}
