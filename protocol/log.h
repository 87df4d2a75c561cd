/* Level-filtered logging shared by the gateway and the kernel-host.
 *
 * Lines go to stderr as "LEVEL [kernel-id] message". Never pass message
 * payloads, tokens or HMAC keys: logs are read by people who must not see
 * them. */
#ifndef GLOVEBOX_LOG_H
#define GLOVEBOX_LOG_H

enum log_level {
        LOG_LEVEL_DEBUG = 0,
        LOG_LEVEL_INFO = 1,
        LOG_LEVEL_WARN = 2,
        LOG_LEVEL_ERROR = 3,
};

extern enum log_level log_threshold;

/* Sets the program name printed before every line (not copied). */
void log_set_program(const char *program);
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

#endif
