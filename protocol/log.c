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

void log_write(enum log_level level, const char *kernel_id, const char *fmt, ...)
{
        char line[1024];
        char when[32];
        struct timespec now;
        struct tm tm;
        va_list ap;
        int n;

        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        strftime(when, sizeof(when), "%H:%M:%S", &tm);

        n = snprintf(line, sizeof(line), "%s.%03ld %s %-5s ", when, now.tv_nsec / 1000000,
                     log_program, level_names[level]);
        if (kernel_id && n > 0 && (size_t)n < sizeof(line))
                n += snprintf(line + n, sizeof(line) - (size_t)n, "[%.8s] ", kernel_id);
        if (n > 0 && (size_t)n < sizeof(line)) {
                va_start(ap, fmt);
                vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
                va_end(ap);
        }
        /* One write per line keeps lines whole when two processes share stderr. */
        fprintf(stderr, "%s\n", line);
}
