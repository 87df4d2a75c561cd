/* gateway/e2b/metrics.c: a sandbox's history of use is bounded (the last
 * E2B_METRICS_SAMPLES samples, whatever runs longer), answered oldest
 * first by range, with a sample taken now when the range reaches the
 * present; bad ranges are 400s. Included to reach on_period; the event
 * loop, the sampling and the HTTP answer are stand-ins here, recording
 * what they are given. */
#include "gateway/e2b/metrics.c"

#include "tests/unit/tap.h"

static time_t sample_clock; /* the next stand-in sample's time */
static int samples_taken;
static const char *arg_start, *arg_end;
static int replied_status;
static json_t *replied_body;
static char replied_message[512];
static bool timer_running;

int usage_sample(struct sandbox *sb, struct sandbox_usage *out)
{
        memset(out, 0, sizeof(*out));
        if (!sb)
                return -EAGAIN;
        samples_taken++;
        out->cpu_count = 1;
        out->timestamp.tv_sec = sample_clock;
        sample_clock += E2B_METRICS_PERIOD_MS / 1000;
        return 0;
}

json_t *usage_json(const struct sandbox_usage *u)
{
        return json_pack("{s:I}", "timestampUnix", (json_int_t)u->timestamp.tv_sec);
}

void loop_timer_start(lws_sorted_usec_list_t *timer, sul_cb_t fn, double delay_ms)
{
        (void)timer, (void)fn, (void)delay_ms;
        timer_running = true;
}

void loop_timer_stop(lws_sorted_usec_list_t *timer)
{
        (void)timer;
        timer_running = false;
}

int http_query_arg(struct lws *wsi, const char *name, char *out, size_t size)
{
        const char *v = strcmp(name, "start") == 0 ? arg_start : arg_end;

        (void)wsi;
        if (!v)
                return -ENOENT;
        if (strlen(v) >= size)
                return -E2BIG;
        snprintf(out, size, "%s", v);
        return 0;
}

void http_reply_json(struct http_request *r, int status, json_t *body)
{
        (void)r;
        replied_status = status;
        json_decref(replied_body);
        replied_body = body;
}

void e2b_reply_error(struct http_request *r, int status, const char *fmt, ...)
{
        va_list ap;

        (void)r;
        replied_status = status;
        va_start(ap, fmt);
        vsnprintf(replied_message, sizeof(replied_message), fmt, ap);
        va_end(ap);
}

/* Asks for the range and returns the answer's sample times, -1 ended. */
static size_t ask(struct e2b_metrics *m, const char *start, const char *end, long long *times,
                  size_t max)
{
        struct http_request r;
        size_t i, n = 0;
        json_t *item;

        memset(&r, 0, sizeof(r));
        arg_start = start;
        arg_end = end;
        replied_status = 0;
        e2b_metrics_reply(&r, m);
        json_array_foreach(replied_body, i, item) {
                if (n < max)
                        times[n++] = json_integer_value(json_object_get(item, "timestampUnix"));
        }
        return replied_status == 200 ? n : 0;
}

int main(void)
{
        struct sandbox *box = (struct sandbox *)&sample_clock; /* never looked into */
        struct e2b_metrics m;
        long long times[2 * E2B_METRICS_SAMPLES];
        time_t began = time(NULL) - 100000;
        char a[32], b[32];
        size_t n;

        memset(&m, 0, sizeof(m));
        sample_clock = began;
        e2b_metrics_start(&m, box);
        is_int(samples_taken, 1, "a sample when it starts");
        ok(timer_running, "... and the period's timer runs");
        for (int i = 0; i < 3 * E2B_METRICS_SAMPLES; i++)
                on_period(&m.timer);
        is_int(samples_taken, 1 + 3 * E2B_METRICS_SAMPLES, "a sample each period");
        is_int((int)m.count, E2B_METRICS_SAMPLES, "only the last %d kept", E2B_METRICS_SAMPLES);

        n = ask(&m, NULL, NULL, times, sizeof(times) / sizeof(times[0]));
        is_int((int)n, E2B_METRICS_SAMPLES + 1, "all of them, and one taken now");
        is_int(times[0], (long long)began + 5LL * (1 + 2 * E2B_METRICS_SAMPLES),
               "the oldest kept first");
        is_int(times[E2B_METRICS_SAMPLES - 1], (long long)began + 5LL * (3 * E2B_METRICS_SAMPLES),
               "the newest last");

        snprintf(a, sizeof(a), "%lld", times[10]);
        snprintf(b, sizeof(b), "%lld", times[12]);
        n = ask(&m, a, b, times, sizeof(times) / sizeof(times[0]));
        is_int((int)n, 3, "a range in the past: its samples, both ends in, none taken now");
        snprintf(b, sizeof(b), "%lld", (long long)began - 1);
        is_int((int)ask(&m, "0", b, times, 8), 0, "a range before it began: none");
        is_int(replied_status, 200, "... answered");

        ask(&m, "10", "5", times, 8);
        is_int(replied_status, 400, "start after end: 400");
        ok(strstr(replied_message, "start (10) is after end (5)") != NULL, "... saying so: %s",
           replied_message);
        ask(&m, "-1", NULL, times, 8);
        is_int(replied_status, 400, "a negative start: 400");
        ok(strstr(replied_message, "start must be a Unix time") != NULL, "... naming it: %s",
           replied_message);
        ask(&m, NULL, "99999999999999999999999", times, 8);
        is_int(replied_status, 400, "an end too long: 400");

        e2b_metrics_stop(&m);
        ok(!timer_running, "stopped: no more periods");
        samples_taken = 0;
        n = ask(&m, NULL, NULL, times, sizeof(times) / sizeof(times[0]));
        is_int((int)n, E2B_METRICS_SAMPLES, "a stopped (paused) sandbox keeps its history");
        is_int(samples_taken, 0, "... and takes none now");
        e2b_metrics_clear(&m);
        ok(m.ring == NULL && m.count == 0, "cleared: freed");
        json_decref(replied_body);
        return done_testing();
}
