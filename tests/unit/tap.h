/* A tiny TAP producer for the unit tests.
 *
 * Each check prints one "ok N - name" or "not ok N - name" line; a failed
 * comparison also prints both operands as "#" diagnostics (libuv's
 * test/task.h does the same), so a failure in a CI log says what was seen
 * without re-running anything. A program ends with
 * `return done_testing();`, which prints the plan when none was declared
 * and turns any failure or a wrong count into a non-zero exit status. */
#ifndef GLOVEBOX_TAP_H
#define GLOVEBOX_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_planned = -1;
static int tap_run;
static int tap_failed;

static inline void plan(int n)
{
        tap_planned = n;
        printf("1..%d\n", n);
        fflush(stdout);
}

static inline void tap_vresult(int pass, const char *fmt, va_list ap)
{
        tap_run++;
        if (!pass)
                tap_failed++;
        printf("%sok %d - ", pass ? "" : "not ", tap_run);
        vprintf(fmt, ap);
        putchar('\n');
}

/* Prints a diagnostic line; never affects the result. */
static inline __attribute__((format(printf, 1, 2))) void diag(const char *fmt, ...)
{
        va_list ap;

        fputs("# ", stdout);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
        fflush(stdout);
}

static inline __attribute__((format(printf, 4, 5))) int tap_ok(int pass, const char *file, int line,
                                                               const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        tap_vresult(pass, fmt, ap);
        va_end(ap);
        if (!pass)
                printf("#   Failed at %s:%d\n", file, line);
        fflush(stdout);
        return pass;
}

static inline __attribute__((format(printf, 8, 9))) int
tap_cmp_int(long long got, long long want, const char *got_expr, const char *want_expr,
            const char *file, int line, int equal, const char *fmt, ...)
{
        int pass = equal ? got == want : got != want;
        va_list ap;

        va_start(ap, fmt);
        tap_vresult(pass, fmt, ap);
        va_end(ap);
        if (!pass) {
                printf("#   Failed at %s:%d: %s %s %s\n", file, line, got_expr,
                       equal ? "==" : "!=", want_expr);
                printf("#          got: %lld\n#     expected: %s%lld\n", got,
                       equal ? "" : "anything but ", want);
        }
        fflush(stdout);
        return pass;
}

static inline __attribute__((format(printf, 7, 8))) int
tap_cmp_uint(unsigned long long got, unsigned long long want, const char *got_expr,
             const char *want_expr, const char *file, int line, const char *fmt, ...)
{
        int pass = got == want;
        va_list ap;

        va_start(ap, fmt);
        tap_vresult(pass, fmt, ap);
        va_end(ap);
        if (!pass) {
                printf("#   Failed at %s:%d: %s == %s\n", file, line, got_expr, want_expr);
                printf("#          got: %llu\n#     expected: %llu\n", got, want);
        }
        fflush(stdout);
        return pass;
}

/* Prints at most 64 bytes of p, escaping what is not printable ASCII. */
static inline void tap_print_bytes(const char *label, const void *p, size_t len)
{
        const unsigned char *s = p;
        size_t shown = len < 64 ? len : 64;

        printf("#   %12s: ", label);
        if (!p) {
                puts("NULL");
                return;
        }
        putchar('"');
        for (size_t i = 0; i < shown; i++) {
                if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\')
                        putchar(s[i]);
                else
                        printf("\\x%02x", s[i]);
        }
        printf("\"%s (%zu bytes)\n", shown < len ? "..." : "", len);
}

static inline __attribute__((format(printf, 9, 10))) int
tap_cmp_mem(const void *got, size_t got_len, const void *want, size_t want_len,
            const char *got_expr, const char *want_expr, const char *file, int line,
            const char *fmt, ...)
{
        int pass = got_len == want_len &&
                   (got_len == 0 || (got && want && memcmp(got, want, got_len) == 0));
        va_list ap;

        va_start(ap, fmt);
        tap_vresult(pass, fmt, ap);
        va_end(ap);
        if (!pass) {
                printf("#   Failed at %s:%d: %s equals %s\n", file, line, got_expr, want_expr);
                tap_print_bytes("got", got, got_len);
                tap_print_bytes("expected", want, want_len);
        }
        fflush(stdout);
        return pass;
}

static inline __attribute__((format(printf, 7, 8))) int
tap_cmp_str(const char *got, const char *want, const char *got_expr, const char *want_expr,
            const char *file, int line, const char *fmt, ...)
{
        int pass = (!got && !want) || (got && want && strcmp(got, want) == 0);
        va_list ap;

        va_start(ap, fmt);
        tap_vresult(pass, fmt, ap);
        va_end(ap);
        if (!pass) {
                printf("#   Failed at %s:%d: %s equals %s\n", file, line, got_expr, want_expr);
                tap_print_bytes("got", got, got ? strlen(got) : 0);
                tap_print_bytes("expected", want, want ? strlen(want) : 0);
        }
        fflush(stdout);
        return pass;
}

/* ok(condition, name...) */
#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
/* is_int(got, expected, name...): signed comparison, both printed on failure. */
#define is_int(got, want, ...)                                                                     \
        tap_cmp_int((long long)(got), (long long)(want), #got, #want, __FILE__, __LINE__, 1,       \
                    __VA_ARGS__)
#define isnt_int(got, want, ...)                                                                   \
        tap_cmp_int((long long)(got), (long long)(want), #got, #want, __FILE__, __LINE__, 0,       \
                    __VA_ARGS__)
/* is_uint(got, expected, name...): for sizes and other unsigned values. */
#define is_uint(got, want, ...)                                                                    \
        tap_cmp_uint((unsigned long long)(got), (unsigned long long)(want), #got, #want, __FILE__, \
                     __LINE__, __VA_ARGS__)
/* is_mem(got, got_len, expected, expected_len, name...) */
#define is_mem(got, got_len, want, want_len, ...)                                                  \
        tap_cmp_mem((got), (got_len), (want), (want_len), #got, #want, __FILE__, __LINE__,         \
                    __VA_ARGS__)
/* is_str(got, expected, name...): NUL-terminated strings; NULL equals only NULL. */
#define is_str(got, want, ...)                                                                     \
        tap_cmp_str((got), (want), #got, #want, __FILE__, __LINE__, __VA_ARGS__)

/* Stops the whole program: for a broken fixture, not for a failed check. */
#define BAIL_OUT(...)                                                                              \
        do {                                                                                       \
                printf("Bail out! ");                                                              \
                printf(__VA_ARGS__);                                                               \
                printf(" (%s:%d)\n", __FILE__, __LINE__);                                          \
                exit(1);                                                                           \
        } while (0)

static inline int done_testing(void)
{
        if (tap_planned < 0)
                printf("1..%d\n", tap_run);
        else if (tap_planned != tap_run)
                printf("# planned %d tests but ran %d\n", tap_planned, tap_run);
        if (tap_failed)
                printf("# failed %d of %d tests\n", tap_failed, tap_run);
        fflush(stdout);
        return tap_failed || (tap_planned >= 0 && tap_planned != tap_run) ? 1 : 0;
}

#endif
