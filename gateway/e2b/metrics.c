#include "autoconf.h"

#include "gateway/e2b/metrics.h"
#include "gateway/e2b/e2b.h"
#include "gateway/core/loop.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TIME_ARG_MAX 24 /* a Unix time in seconds, as a query argument */

static void push(struct e2b_metrics *m, const struct sandbox_usage *u)
{
        if (!m->ring) {
                m->ring = calloc(E2B_METRICS_SAMPLES, sizeof(*m->ring));
                if (!m->ring)
                        return;
        }
        m->ring[m->next] = *u;
        m->next = (m->next + 1) % E2B_METRICS_SAMPLES;
        if (m->count < E2B_METRICS_SAMPLES)
                m->count++;
}

static void sample(struct e2b_metrics *m)
{
        struct sandbox_usage u;

        if (m->box && usage_sample(m->box, &u) == 0)
                push(m, &u);
}

static void on_period(lws_sorted_usec_list_t *sul)
{
        struct e2b_metrics *m = lws_container_of(sul, struct e2b_metrics, timer);

        if (!m->box)
                return;
        sample(m);
        loop_timer_start(&m->timer, on_period, E2B_METRICS_PERIOD_MS);
}

void e2b_metrics_start(struct e2b_metrics *m, struct sandbox *box)
{
        m->box = box;
        sample(m);
        loop_timer_start(&m->timer, on_period, E2B_METRICS_PERIOD_MS);
}

void e2b_metrics_stop(struct e2b_metrics *m)
{
        m->box = NULL;
        loop_timer_stop(&m->timer);
}

void e2b_metrics_clear(struct e2b_metrics *m)
{
        e2b_metrics_stop(m);
        free(m->ring);
        m->ring = NULL;
        m->next = m->count = 0;
}

/* A Unix time in seconds from r's query argument name into *out (left as
 * it is when absent): 0, or -EINVAL after replying 400. */
static int time_arg(struct http_request *r, const char *name, int64_t *out)
{
        char value[TIME_ARG_MAX] = "";
        int rc = http_query_arg(r->wsi, name, value, sizeof(value));
        size_t n = strlen(value);

        if (rc == -ENOENT)
                return 0;
        /* E2B's: an integer of at least 0. */
        if (rc < 0 || n == 0 || n > 18 || strspn(value, "0123456789") != n) {
                e2b_reply_error(r, 400,
                                "%s must be a Unix time in seconds (a whole number, 0 or "
                                "more)",
                                name);
                return -EINVAL;
        }
        *out = strtoll(value, NULL, 10);
        return 0;
}

static bool in_range(const struct sandbox_usage *u, int64_t start, int64_t end)
{
        return (int64_t)u->timestamp.tv_sec >= start && (int64_t)u->timestamp.tv_sec <= end;
}

void e2b_metrics_reply(struct http_request *r, struct e2b_metrics *m)
{
        int64_t start = 0, end = INT64_MAX;
        struct timespec now;
        json_t *list;

        if (time_arg(r, "start", &start) < 0 || time_arg(r, "end", &end) < 0)
                return;
        if (start > end) {
                e2b_reply_error(r, 400,
                                "Invalid time range for metrics: start (%lld) is after "
                                "end (%lld)",
                                (long long)start, (long long)end);
                return;
        }
        list = json_array();
        if (!list) {
                e2b_reply_error(r, 500, "out of memory");
                return;
        }
        for (size_t i = 0; i < m->count; i++) {
                const struct sandbox_usage *u =
                    &m->ring[(m->next + E2B_METRICS_SAMPLES - m->count + i) % E2B_METRICS_SAMPLES];

                if (in_range(u, start, end))
                        json_array_append_new(list, usage_json(u));
        }
        clock_gettime(CLOCK_REALTIME, &now);
        if (m->box && (int64_t)now.tv_sec >= start && (int64_t)now.tv_sec <= end) {
                struct sandbox_usage u;

                if (usage_sample(m->box, &u) == 0 && in_range(&u, start, end))
                        json_array_append_new(list, usage_json(&u));
        }
        http_reply_json(r, 200, list);
}
