#include "autoconf.h"

#include "protocol/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum log_level log_threshold = LOG_LEVEL_INFO;
static const char *log_program = "glovebox";

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_program(const char *program)
{
        log_program = program;
}

int log_level_parse(const char *name, enum log_level *out)
{
        for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
                if (strcmp(name, level_names[i]) == 0) {
                        *out = (enum log_level)i;
                        return 0;
                }
        }
        return -EINVAL;
}

static void log_vwrite(enum log_level level, const char *kernel_id, const char *fmt, va_list ap)
{
        char line[1024];
        char when[32];
        struct timespec now;
        struct tm tm;
        int n;

        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        strftime(when, sizeof(when), "%H:%M:%S", &tm);

        n = snprintf(line, sizeof(line), "%s.%03ld %s %-5s ", when, now.tv_nsec / 1000000,
                     log_program, level_names[level]);
        if (kernel_id && n > 0 && (size_t)n < sizeof(line))
                n += snprintf(line + n, sizeof(line) - (size_t)n, "[%.8s] ", kernel_id);
        if (n > 0 && (size_t)n < sizeof(line))
                vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
        /* One write per line keeps lines whole when two processes share stderr. */
        fprintf(stderr, "%s\n", line);
}

void log_write(enum log_level level, const char *kernel_id, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        log_vwrite(level, kernel_id, fmt, ap);
        va_end(ap);
}

/* ---- rate-limited lines ------------------------------------------------- */

uint32_t log_limit_per_second = 10;

/* Limits with suppressed lines not yet summarised. */
static struct log_limit *log_limits_due;

static double monotonic_now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void unlist(struct log_limit *l)
{
        for (struct log_limit **link = &log_limits_due; *link; link = &(*link)->next) {
                if (*link == l) {
                        *link = l->next;
                        break;
                }
        }
        l->next = NULL;
        l->listed = false;
}

bool log_limit_admit(struct log_limit *l, double now, uint64_t *summary)
{
        *summary = 0;
        if (now - l->window_start >= 1.0 || now < l->window_start) {
                l->window_start = now;
                l->lines = 0;
        }
        if (log_limit_per_second && l->lines >= log_limit_per_second) {
                l->suppressed++;
                return false;
        }
        l->lines++;
        *summary = l->suppressed;
        l->suppressed = 0;
        return true;
}

static void write_summary(struct log_limit *l, uint64_t n)
{
        log_write(l->level, l->kernel_id[0] ? l->kernel_id : NULL,
                  "%llu more lines like \"%s\" suppressed (at most %u a second)",
                  (unsigned long long)n, l->fmt ? l->fmt : "?", log_limit_per_second);
}

void log_write_limited(struct log_limit *l, enum log_level level, const char *kernel_id,
                       const char *fmt, ...)
{
        uint64_t summary;
        va_list ap;

        l->fmt = fmt;
        l->level = level;
        snprintf(l->kernel_id, sizeof(l->kernel_id), "%s", kernel_id ? kernel_id : "");
        if (!log_limit_admit(l, monotonic_now(), &summary)) {
                if (!l->listed) {
                        l->next = log_limits_due;
                        log_limits_due = l;
                        l->listed = true;
                }
                return;
        }
        if (summary)
                write_summary(l, summary);
        if (l->listed)
                unlist(l);
        va_start(ap, fmt);
        log_vwrite(level, kernel_id, fmt, ap);
        va_end(ap);
}

void log_limit_flush_due(void)
{
        double now = monotonic_now();
        struct log_limit *l = log_limits_due, *next;

        for (; l; l = next) {
                next = l->next;
                if (now - l->window_start < 1.0)
                        continue;
                if (l->suppressed)
                        write_summary(l, l->suppressed);
                l->suppressed = 0;
                unlist(l);
        }
}

void log_limit_release(struct log_limit *l)
{
        if (l->suppressed)
                write_summary(l, l->suppressed);
        l->suppressed = 0;
        if (l->listed)
                unlist(l);
}
