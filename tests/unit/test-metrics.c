/* gateway/core/metrics.c: the Prometheus text a scrape reads. Label values are
 * escaped as the exposition format says, histogram buckets are cumulative
 * and end with +Inf equal to _count, a family cannot grow past its series
 * cap, and route classes never carry an id. */
#include "autoconf.h"

#include "gateway/core/metrics.h"
#include "tests/unit/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *render(const struct metrics_family *f)
{
        static char text[65536];
        struct buf b;

        buf_init(&b, 1 << 20);
        if (metrics_render(&b, f) < 0)
                snprintf(text, sizeof(text), "(render failed)");
        else
                snprintf(text, sizeof(text), "%s", b.data ? b.data : "");
        buf_free(&b);
        return text;
}

static void test_escaping(void)
{
        struct metrics_family f = {.name = "t_total",
                                   .help = "a help\nwith a \\ backslash",
                                   .type = METRICS_COUNTER,
                                   .labels = {"path"},
                                   .nlabels = 1};
        const char *text;

        metrics_add(&f, (const char *[]){"a\"b\\c\nd"}, 2);
        metrics_add(&f, (const char *[]){"a\"b\\c\nd"}, 1.5);
        text = render(&f);
        is_str(text,
               "# HELP t_total a help\\nwith a \\\\ backslash\n"
               "# TYPE t_total counter\n"
               "t_total{path=\"a\\\"b\\\\c\\nd\"} 3.5\n",
               "quote, backslash and newline escaped in label values; HELP escapes two");
        metrics_clear(&f);
        is_int((int)f.nseries, 0, "clear forgets every series");
}

static void test_no_labels(void)
{
        struct metrics_family f = {.name = "g", .help = "h", .type = METRICS_GAUGE};

        metrics_set(&f, NULL, 7);
        metrics_set(&f, NULL, 42);
        is_str(render(&f), "# HELP g h\n# TYPE g gauge\ng 42\n", "a gauge without labels");
        metrics_clear(&f);
}

static void test_histogram(void)
{
        static const double bounds[] = {0.1, 1, 10};
        struct metrics_family f = {.name = "lat_seconds",
                                   .help = "h",
                                   .type = METRICS_HISTOGRAM,
                                   .labels = {"k"},
                                   .nlabels = 1,
                                   .bounds = bounds,
                                   .nbounds = 3};
        const double samples[] = {0.05, 0.1, 0.5, 2, 100};
        const char *k[] = {"x"};

        for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++)
                metrics_observe(&f, k, samples[i]);
        is_str(render(&f),
               "# HELP lat_seconds h\n# TYPE lat_seconds histogram\n"
               "lat_seconds_bucket{k=\"x\",le=\"0.1\"} 2\n"
               "lat_seconds_bucket{k=\"x\",le=\"1\"} 3\n"
               "lat_seconds_bucket{k=\"x\",le=\"10\"} 4\n"
               "lat_seconds_bucket{k=\"x\",le=\"+Inf\"} 5\n"
               "lat_seconds_sum{k=\"x\"} 102.65000000000001\n"
               "lat_seconds_count{k=\"x\"} 5\n",
               "buckets cumulative (a bound counts as le), +Inf equals _count");
        metrics_clear(&f);
}

static void test_series_cap(void)
{
        struct metrics_family f = {
            .name = "c", .help = "h", .type = METRICS_COUNTER, .labels = {"v"}, .nlabels = 1};
        char value[32];
        int made = 0;

        for (int i = 0; i < METRICS_MAX_SERIES + 10; i++) {
                snprintf(value, sizeof(value), "%d", i);
                made += metrics_series_get(&f, (const char *[]){value}) != NULL;
        }
        is_int(made, METRICS_MAX_SERIES, "no more than METRICS_MAX_SERIES series");
        ok(metrics_series_get(&f, (const char *[]){"3"}) != NULL, "existing ones still count");
        metrics_clear(&f);
}

static void test_route_classes(void)
{
        is_str(metrics_route_class("api/kernels", false), "kernels", "kernel list");
        is_str(metrics_route_class("api/kernels/0b8e2f9e-3cbd-4f2c-9e3e-0f1a2b3c4d5e", false),
               "kernels", "a kernel, id not kept");
        is_str(
            metrics_route_class("api/kernels/0b8e2f9e-3cbd-4f2c-9e3e-0f1a2b3c4d5e/execute", false),
            "execute", "execute");
        is_str(metrics_route_class("api/kernels/0b8e2f9e-3cbd-4f2c-9e3e-0f1a2b3c4d5e/files/a/b",
                                   false),
               "files", "files");
        is_str(metrics_route_class("api/sessions/abc", false), "sessions", "sessions");
        is_str(metrics_route_class("api/kernelspecs/python3", false), "kernelspecs", "kernelspecs");
        is_str(metrics_route_class("kernelspecs/python3/logo-64x64.png", false), "kernelspecs",
               "kernelspec resources");
        is_str(metrics_route_class("e2b/sandboxes", false), "e2b", "E2B control plane");
        is_str(metrics_route_class("e2b/files", true), "envd", "E2B sandbox plane");
        is_str(metrics_route_class("metrics", false), "metrics", "metrics");
        is_str(metrics_route_class("api/health", false), "health", "health");
        is_str(metrics_route_class("", false), "page", "the page");
        is_str(metrics_route_class("api/kernels/0b8e2f9e-3cbd-4f2c-9e3e-0f1a2b3c4d5e/ports/8000/x",
                                   false),
               "ports", "a kernel's ports");
        is_str(metrics_route_class("api/terminals/1", false), "terminals", "terminals");
        is_str(metrics_route_class("terminals/websocket/1", false), "terminals",
               "a terminal's socket");
        is_str(metrics_route_class("mcp", false), "mcp", "MCP, not the page");
        is_str(metrics_route_class("api/fleet/kernels", false), "fleet", "a peer's list");
        is_str(metrics_route_class("no/such/thing", false), "other", "anything else");
}

int main(void)
{
        test_escaping();
        test_no_labels();
        test_histogram();
        test_series_cap();
        test_route_classes();
        return done_testing();
}
