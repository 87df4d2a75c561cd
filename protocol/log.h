/* Level-filtered logging shared by the gateway and the kernel-host.
 *
 * Lines go to stderr as "LEVEL [kernel-id] message". Never pass message
 * payloads, tokens or HMAC keys: logs are read by people who must not see
 * them. */
#ifndef GLOVEBOX_LOG_H
#define GLOVEBOX_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_level {
        LOG_LEVEL_DEBUG = 0,
        LOG_LEVEL_INFO = 1,
        LOG_LEVEL_WARN = 2,
        LOG_LEVEL_ERROR = 3,
};

/* Lines as text, or as one JSON object each (--log-format json):
 * {"time", "level", "component", "kernel"?, "message"}. */
enum log_format {
        LOG_FORMAT_TEXT = 0,
        LOG_FORMAT_JSON = 1,
};

extern enum log_level log_threshold;
extern enum log_format log_format;

/* Sets the program name printed before every line (not copied), and the
 * format from GLOVEBOX_LOG_FORMAT when set (how the gateway passes its
 * --log-format to the kernel-host). */
void log_set_program(const char *program);
/* Parses "text" or "json"; returns 0 or -EINVAL. */
int log_format_parse(const char *name, enum log_format *out);
/* Parses "debug", "info", "warn" or "error"; returns 0 or -EINVAL. */
int log_level_parse(const char *name, enum log_level *out);
void log_write(enum log_level level, const char *kernel_id, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

#define LOG_AT(level, kid, ...)                                                                    \
        do {                                                                                       \
                if ((level) >= log_threshold)                                                      \
                        log_write((level), (kid), __VA_ARGS__);                                    \
        } while (0)

#define log_debug(...) LOG_AT(LOG_LEVEL_DEBUG, NULL, __VA_ARGS__)
#define log_info(...)  LOG_AT(LOG_LEVEL_INFO, NULL, __VA_ARGS__)
#define log_warn(...)  LOG_AT(LOG_LEVEL_WARN, NULL, __VA_ARGS__)
#define log_error(...) LOG_AT(LOG_LEVEL_ERROR, NULL, __VA_ARGS__)

/* The same, with a kernel id as context. */
#define klog_debug(kid, ...) LOG_AT(LOG_LEVEL_DEBUG, (kid), __VA_ARGS__)
#define klog_info(kid, ...)  LOG_AT(LOG_LEVEL_INFO, (kid), __VA_ARGS__)
#define klog_warn(kid, ...)  LOG_AT(LOG_LEVEL_WARN, (kid), __VA_ARGS__)
#define klog_error(kid, ...) LOG_AT(LOG_LEVEL_ERROR, (kid), __VA_ARGS__)

/* The audit line of one execution, written whatever the level: who ran
 * how much code in which kernel, for how long, and how it ended. Never the
 * code, its output or a token. In JSON its fields are members: "event":
 * "execution", "tenant", "kernel", "code_bytes", "duration_s", "outcome". */
void log_audit_execution(const char *tenant, const char *kernel_id, size_t code_bytes,
                         double seconds, const char *outcome);

/* The access line of one HTTP request or WebSocket, written whatever the
 * level (--access-log decides): method, route class, status, bytes in and
 * out, seconds, tenant ("-": none). Never a path, a query or a token. In
 * JSON its fields are members: "event": "access", "method", "route",
 * "status", "bytes_in", "bytes_out", "duration_s", "tenant". */
void log_access(const char *method, const char *route, int status, uint64_t bytes_in,
                uint64_t bytes_out, double seconds, const char *tenant);

/* A line that something outside the gateway can repeat at will (a kernel
 * sending bad signatures, a client sending bad frames) is written through a
 * log_limit: at most log_limit_per_second lines of it per second (per
 * kernel, when the limit sits in the kernel), the rest counted and
 * summarised as "N more lines like ... suppressed", so that nobody can
 * flood the log. A limit is zeroed to start and registers itself on its
 * first suppressed line until log_limit_release (before its memory goes). */
struct log_limit {
        double window_start; /* monotonic seconds */
        uint32_t lines;      /* written in this window */
        uint64_t suppressed; /* not written since the last summary */
        const char *fmt;     /* the format of its lines (a literal), for the summary */
        enum log_level level;
        char kernel_id[40];
        struct log_limit *next; /* in the list of limits with a summary due */
        bool listed;
};

extern uint32_t log_limit_per_second; /* 0: no limit */

/* Admits a line at now (monotonic seconds): true to write it. Before an
 * admitted line, *summary gets how many lines were suppressed since the
 * last summary (to be said first). No output; for tests and the macros. */
bool log_limit_admit(struct log_limit *l, double now, uint64_t *summary);
void log_write_limited(struct log_limit *l, enum log_level level, const char *kernel_id,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Writes the summaries of limits whose window has ended (call about once a
 * second), so a flood that stops is still counted. */
void log_limit_flush_due(void);
/* Writes l's summary if one is due and forgets it. */
void log_limit_release(struct log_limit *l);

#define LOG_LIMITED(l, level, kid, ...)                                                            \
        do {                                                                                       \
                if ((level) >= log_threshold)                                                      \
                        log_write_limited((l), (level), (kid), __VA_ARGS__);                       \
        } while (0)

#define klog_info_limited(l, kid, ...) LOG_LIMITED((l), LOG_LEVEL_INFO, (kid), __VA_ARGS__)
#define log_warn_limited(l, ...)       LOG_LIMITED((l), LOG_LEVEL_WARN, NULL, __VA_ARGS__)
#define klog_warn_limited(l, kid, ...) LOG_LIMITED((l), LOG_LEVEL_WARN, (kid), __VA_ARGS__)

#endif
