#include "autoconf.h"

#include "protocol/log.h"
#include "protocol/buf.h"
#include "protocol/fleetid.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum log_level log_threshold = LOG_LEVEL_INFO;
enum log_format log_format = LOG_FORMAT_TEXT;
static const char *log_program = "glovebox";

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_program(const char *program)
{
        const char *format = getenv("GLOVEBOX_LOG_FORMAT");

        log_program = program;
        if (format)
                log_format_parse(format, &log_format);
}

int log_format_parse(const char *name, enum log_format *out)
{
        if (strcmp(name, "text") == 0)
                *out = LOG_FORMAT_TEXT;
        else if (strcmp(name, "json") == 0)
                *out = LOG_FORMAT_JSON;
        else
                return -EINVAL;
        return 0;
}

/* Cuts a UTF-8 sequence that truncation left unfinished at the end of s. */
static void trim_partial_utf8(char *s)
{
        size_t n = strlen(s), i = n, need;

        while (i > 0 && n - i < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
                i--;
        if (i == 0 || ((unsigned char)s[i - 1] & 0x80) == 0)
                return;
        need = ((unsigned char)s[i - 1] & 0xE0) == 0xC0   ? 2
               : ((unsigned char)s[i - 1] & 0xF0) == 0xE0 ? 3
                                                          : 4;
        if (n - (i - 1) < need)
                s[i - 1] = '\0';
}

/* One JSON object a line: {"time", "level", "component", "kernel"?,
 * "message"} and, for audit lines, their fields (extra: members already
 * rendered, from '"' to the last value, or NULL). */
static void write_json(enum log_level level, const char *kernel_id, const char *message,
                       const char *extra)
{
        char when[48];
        struct timespec now;
        struct tm tm;
        struct buf b;
        int rc;

        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        buf_init(&b, 8192);
        rc = buf_printf(&b, "{\"time\":\"%s.%06ldZ\",\"level\":\"%s\",\"component\":", when,
                        now.tv_nsec / 1000, level_names[level]);
        if (rc == 0)
                rc = buf_append_json_string(&b, log_program, strlen(log_program));
        if (rc == 0 && kernel_id) {
                rc = buf_append_str(&b, ",\"kernel\":");
                if (rc == 0)
                        rc = buf_append_json_string(&b, kernel_id, strlen(kernel_id));
        }
        if (rc == 0)
                rc = buf_append_str(&b, ",\"message\":");
        if (rc == 0)
                rc = buf_append_json_string(&b, message, strlen(message));
        if (rc == 0 && extra)
                rc = buf_printf(&b, ",%s", extra);
        if (rc == 0)
                rc = buf_append_str(&b, "}\n");
        /* One write per line keeps lines whole when two processes share stderr. */
        if (rc == 0)
                fwrite(b.data, 1, b.len, stderr);
        buf_free(&b);
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

        if (log_format == LOG_FORMAT_JSON) {
                vsnprintf(line, sizeof(line), fmt, ap);
                trim_partial_utf8(line);
                write_json(level, kernel_id, line, NULL);
                return;
        }
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        strftime(when, sizeof(when), "%H:%M:%S", &tm);

        n = snprintf(line, sizeof(line), "%s.%03ld %s %-5s ", when, now.tv_nsec / 1000000,
                     log_program, level_names[level]);
        if (kernel_id && n > 0 && (size_t)n < sizeof(line))
                n += snprintf(line + n, sizeof(line) - (size_t)n, "[%s] ",
                              fleetid_short(kernel_id).s);
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

void log_access(const char *method, const char *route, int status, uint64_t bytes_in,
                uint64_t bytes_out, double seconds, const char *tenant)
{
        char extra[512];
        struct buf b;

        if (log_format == LOG_FORMAT_JSON) {
                buf_init(&b, sizeof(extra));
                if (buf_append_str(&b, "\"event\":\"access\",\"method\":") == 0 &&
                    buf_append_json_string(&b, method, strlen(method)) == 0 &&
                    buf_append_str(&b, ",\"route\":") == 0 &&
                    buf_append_json_string(&b, route, strlen(route)) == 0 &&
                    buf_printf(&b,
                               ",\"status\":%d,\"bytes_in\":%llu,\"bytes_out\":%llu,"
                               "\"duration_s\":%.6f,\"tenant\":",
                               status, (unsigned long long)bytes_in, (unsigned long long)bytes_out,
                               seconds) == 0 &&
                    buf_append_json_string(&b, tenant, strlen(tenant)) == 0) {
                        snprintf(extra, sizeof(extra), "%s", b.data);
                        write_json(LOG_LEVEL_INFO, NULL, "access", extra);
                }
                buf_free(&b);
                return;
        }
        log_write(LOG_LEVEL_INFO, NULL,
                  "access: method=%s route=%s status=%d bytes_in=%llu bytes_out=%llu "
                  "duration_s=%.6f tenant=%s",
                  method, route, status, (unsigned long long)bytes_in,
                  (unsigned long long)bytes_out, seconds, tenant);
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

void log_audit_execution(const char *tenant, const char *kernel_id, size_t code_bytes,
                         double seconds, const char *outcome)
{
        char extra[512];
        struct buf b;

        if (log_format == LOG_FORMAT_JSON) {
                buf_init(&b, sizeof(extra));
                if (buf_append_str(&b, "\"event\":\"execution\",\"tenant\":") == 0 &&
                    buf_append_json_string(&b, tenant, strlen(tenant)) == 0 &&
                    buf_printf(&b, ",\"code_bytes\":%zu,\"duration_s\":%.6f,\"outcome\":",
                               code_bytes, seconds) == 0 &&
                    buf_append_json_string(&b, outcome, strlen(outcome)) == 0) {
                        snprintf(extra, sizeof(extra), "%s", b.data);
                        write_json(LOG_LEVEL_INFO, kernel_id, "audit: execution", extra);
                }
                buf_free(&b);
                return;
        }
        log_write(LOG_LEVEL_INFO, kernel_id,
                  "audit: execution tenant=%s code_bytes=%zu duration_s=%.6f outcome=%s", tenant,
                  code_bytes, seconds, outcome);
}
