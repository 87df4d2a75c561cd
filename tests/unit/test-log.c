/* protocol/log.c: repeated warnings are rate-limited and the rest counted. */
#include "autoconf.h"

#include "protocol/log.h"
#include "tests/unit/tap.h"

#include <jansson.h>
#include <stdio.h>
#include <unistd.h>

static void test_admit(void)
{
        struct log_limit l = {0};
        uint64_t summary = 99;
        int admitted = 0;

        log_limit_per_second = 10;
        for (int i = 0; i < 5000; i++) {
                if (log_limit_admit(&l, 100.0 + i * 0.0002, &summary))
                        admitted++;
        }
        is_int(admitted, 10, "5000 lines within one second: 10 written");
        is_uint(l.suppressed, 4990, "4990 counted");
        ok(log_limit_admit(&l, 101.5, &summary), "the next second admits a line again");
        is_uint(summary, 4990, "and reports the 4990 suppressed before it");
        is_uint(l.suppressed, 0, "which are then no longer owed");
        ok(log_limit_admit(&l, 101.6, &summary) && summary == 0, "no summary twice");
        ok(log_limit_admit(&l, 50.0, &summary), "a clock going back starts a new window");

        log_limit_per_second = 0;
        admitted = 0;
        for (int i = 0; i < 100; i++)
                admitted += log_limit_admit(&l, 200.0, &summary);
        is_int(admitted, 100, "0 means no limit");
        log_limit_per_second = 10;
}

/* Runs fn with stderr going to a file; returns what it wrote. */
static char *capture(void (*fn)(void))
{
        static char out[65536];
        FILE *f = tmpfile();
        int saved = dup(2);
        size_t n;

        fflush(stderr);
        dup2(fileno(f), 2);
        fn();
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        rewind(f);
        n = fread(out, 1, sizeof(out) - 1, f);
        out[n] = '\0';
        fclose(f);
        return out;
}

static struct log_limit flood_limit;

static void flood(void)
{
        for (int i = 0; i < 5000; i++)
                klog_warn_limited(&flood_limit, "0123456789abcdef", "dropped a %s message: %s",
                                  "iopub", "bad signature");
        /* Released as a kernel is freed: the count is written, not lost. */
        log_limit_release(&flood_limit);
}

static void test_write(void)
{
        char *out = capture(flood);
        int lines = 0;

        for (char *p = out; (p = strstr(p, "bad signature")) != NULL; p++)
                lines++;
        is_int(lines, 10, "10 lines of the flood are written");
        ok(strstr(out, "[01234567] 4990 more lines like \"dropped a %s message: %s\" suppressed") !=
               NULL,
           "then one summary with the count, the kernel and the message's form");
        if (!strstr(out, "4990 more"))
                diag("%s", out);
}

static void json_lines(void)
{
        log_format = LOG_FORMAT_JSON;
        klog_info("0123456789abcdef", "a \"quoted\" word,\na newline and a \\ backslash");
        log_audit_execution("default", "0123456789abcdef", 38, 0.25, "ok");
        log_format = LOG_FORMAT_TEXT;
}

static void test_json(void)
{
        char *out = capture(json_lines), *second = strchr(out, '\n');
        json_t *line, *audit;

        line = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
        audit = second ? json_loads(second + 1, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
        ok(line && audit, "--log-format json: each line parses as a JSON object");
        if (!line || !audit)
                diag("%s", out);
        is_str(json_string_value(json_object_get(line, "message")),
               "a \"quoted\" word,\na newline and a \\ backslash",
               "the message, escaped and whole");
        is_str(json_string_value(json_object_get(line, "level")), "info", "its level");
        is_str(json_string_value(json_object_get(line, "kernel")), "0123456789abcdef",
               "its kernel");
        ok(json_is_string(json_object_get(line, "time")) &&
               json_is_string(json_object_get(line, "component")),
           "a time and a component");
        is_str(json_string_value(json_object_get(audit, "event")), "execution",
               "the audit line is an execution event");
        ok(json_integer_value(json_object_get(audit, "code_bytes")) == 38 &&
               json_real_value(json_object_get(audit, "duration_s")) == 0.25,
           "with the code's size and the duration");
        is_str(json_string_value(json_object_get(audit, "outcome")), "ok", "and the outcome");
        is_str(json_string_value(json_object_get(audit, "tenant")), "default", "and the tenant");
        json_decref(line);
        json_decref(audit);
}

int main(void)
{
        test_admit();
        test_write();
        test_json();
        return done_testing();
}
