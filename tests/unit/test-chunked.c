/* protocol/chunked.c: HTTP/1.1 chunked request bodies, fed as they arrive.
 *
 * lws hands the body over in pieces of any size, so every case is decoded
 * once whole and then in every way of cutting it (one byte at a time, n
 * bytes at a time, every cut into two), and each way must give the same
 * data, the same count of consumed bytes, the same error and the same done
 * flag. */
#include "autoconf.h"

#include "protocol/chunked.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <stdbool.h>

#define MAX_OUT (1 << 16)

/* What one decoding produced. */
struct outcome {
        uint8_t data[MAX_OUT];
        size_t len;
        size_t calls;       /* emit calls */
        size_t empty_calls; /* emit calls with n == 0: never expected */
        size_t fail_after;  /* emit fails once more than this much data came */
        int fail_rc;
        long rc;         /* the first negative return, else 0 */
        size_t consumed; /* the sum of the non-negative returns before it */
        size_t late;     /* bytes consumed by feeds after done: never expected */
        bool done;
};

static int record(void *arg, const uint8_t *data, size_t n)
{
        struct outcome *o = arg;

        o->calls++;
        if (n == 0)
                o->empty_calls++;
        for (size_t i = 0; i < n; i++) {
                if (o->len >= o->fail_after)
                        return o->fail_rc;
                if (o->len >= sizeof(o->data))
                        BAIL_OUT("a test body decodes to more than %d bytes", MAX_OUT);
                o->data[o->len++] = data[i];
        }
        return 0;
}

static void outcome_init(struct outcome *o)
{
        o->len = o->calls = o->empty_calls = o->consumed = o->late = 0;
        o->fail_after = SIZE_MAX;
        o->fail_rc = 0;
        o->rc = 0;
        o->done = false;
}

/* Decodes in, cut before each of the ncuts ascending offsets in cuts. The
 * pieces after an error are not fed; those after done are, and must be
 * refused (return 0). */
static void decode_cut(const uint8_t *in, size_t len, const size_t *cuts, size_t ncuts,
                       struct outcome *o)
{
        struct chunked c;
        size_t at = 0;

        chunked_init(&c);
        for (size_t k = 0; k <= ncuts && o->rc == 0; k++) {
                size_t end = k < ncuts ? cuts[k] : len;
                bool was_done = c.done;
                long rc = chunked_feed(&c, in + at, end - at, record, o);

                if (rc < 0) {
                        o->rc = rc;
                        break;
                }
                if (was_done)
                        o->late += (size_t)rc;
                o->consumed += (size_t)rc;
                at = end;
        }
        o->done = c.done;
}

static void decode_whole(const uint8_t *in, size_t len, struct outcome *o)
{
        decode_cut(in, len, NULL, 0, o);
}

/* Decodes in, step bytes at a time. */
static void decode_steps(const uint8_t *in, size_t len, size_t step, struct outcome *o)
{
        static size_t cuts[MAX_OUT];
        size_t n = 0;

        for (size_t at = step; at < len; at += step)
                cuts[n++] = at;
        decode_cut(in, len, cuts, n, o);
}

static bool same_outcome(const struct outcome *a, const struct outcome *b)
{
        /* After an error, what the earlier pieces consumed says nothing. */
        return a->len == b->len && memcmp(a->data, b->data, a->len) == 0 && a->rc == b->rc &&
               (a->rc < 0 || a->consumed == b->consumed) && a->done == b->done &&
               a->empty_calls == 0 && b->empty_calls == 0 && a->late == 0 && b->late == 0;
}

static void diag_outcome(const char *label, const struct outcome *o)
{
        diag("%s: rc %ld, consumed %zu, done %d, %zu data bytes, %zu empty emits, %zu late", label,
             o->rc, o->consumed, (int)o->done, o->len, o->empty_calls, o->late);
}

/* Every way of cutting the input gives what decoding it whole gives. */
static void check_splits(const char *name, const uint8_t *in, size_t len, size_t fail_after)
{
        static struct outcome whole, cut;
        size_t bad_steps = 0, bad_halves = 0;

        outcome_init(&whole);
        whole.fail_after = fail_after;
        whole.fail_rc = -ECANCELED;
        decode_whole(in, len, &whole);
        for (size_t step = 1; step <= len; step++) {
                outcome_init(&cut);
                cut.fail_after = fail_after;
                cut.fail_rc = -ECANCELED;
                decode_steps(in, len, step, &cut);
                if (!same_outcome(&whole, &cut) && bad_steps++ == 0) {
                        diag("%s: fed %zu bytes at a time:", name, step);
                        diag_outcome("  whole", &whole);
                        diag_outcome("  cut", &cut);
                }
        }
        ok(bad_steps == 0, "%s: fed 1, 2, ... %zu bytes at a time, the same as whole", name, len);
        for (size_t at = 0; at <= len; at++) {
                outcome_init(&cut);
                cut.fail_after = fail_after;
                cut.fail_rc = -ECANCELED;
                decode_cut(in, len, &at, 1, &cut);
                if (!same_outcome(&whole, &cut) && bad_halves++ == 0) {
                        diag("%s: cut at %zu:", name, at);
                        diag_outcome("  whole", &whole);
                        diag_outcome("  cut", &cut);
                }
        }
        ok(bad_halves == 0, "%s: every cut into two pieces, the same as whole", name);
}

/* A well-formed body (followed by extra bytes that are not body) decodes to
 * want, consumes exactly the body, and sets done. */
static void expect_body(const char *name, const char *body, size_t body_len, const char *extra,
                        const char *want, size_t want_len)
{
        static uint8_t in[MAX_OUT];
        static struct outcome o;
        size_t len = body_len + strlen(extra);

        memcpy(in, body, body_len);
        memcpy(in + body_len, extra, strlen(extra));
        outcome_init(&o);
        decode_whole(in, len, &o);
        is_int(o.rc, 0, "%s: decodes", name);
        is_mem(o.data, o.len, want, want_len, "%s: the data", name);
        is_uint(o.consumed, body_len, "%s: consumes the body and nothing after it", name);
        ok(o.done, "%s: done", name);
        check_splits(name, in, len, SIZE_MAX);
}

#define BODY(s) s, sizeof(s) - 1

static void test_well_formed(void)
{
        expect_body("the RFC 9112 example",
                    BODY("4\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks."
                         "\r\n0\r\n\r\n"),
                    "", BODY("Wikipedia in\r\n\r\nchunks."));
        expect_body("the next request after the body is not consumed",
                    BODY("3\r\nabc\r\n0\r\n\r\n"), "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                    BODY("abc"));
        expect_body("an empty body", BODY("0\r\n\r\n"), "0\r\n\r\n", "", 0);
        expect_body("chunk extensions are skipped",
                    BODY("5;name=value\r\nhello\r\n1;a;b=\"q;\\\"x\"\r\n \r\n6;ignored\r\nworld"
                         "!\r\n0;last\r\n\r\n"),
                    "", BODY("hello world!"));
        expect_body("trailers are read and dropped",
                    BODY("3\r\nabc\r\n0\r\nExpires: never\r\nX-Checksum: 1234\r\n\r\n"), "tail",
                    BODY("abc"));
        expect_body("a trailer after an extension on the last chunk",
                    BODY("2\r\nhi\r\n0;ext=1\r\nX: y\r\n\r\n"), "", BODY("hi"));
        expect_body("lower-case hex", BODY("1f\r\n0123456789abcdefghijklmnopqrstu\r\n0\r\n\r\n"),
                    "", BODY("0123456789abcdefghijklmnopqrstu"));
        expect_body("upper-case hex", BODY("1F\r\n0123456789abcdefghijklmnopqrstu\r\n0\r\n\r\n"),
                    "", BODY("0123456789abcdefghijklmnopqrstu"));
        expect_body("mixed-case hex and leading zeros",
                    BODY("0000a\r\n0123456789\r\n00A\r\nABCDEFGHIJ\r\n000\r\n\r\n"), "",
                    BODY("0123456789ABCDEFGHIJ"));
        expect_body("data holding CRLF, a size line and a last chunk is only data",
                    BODY("f\r\n\r\n0\r\n\r\n5\r\nx\r\n\r\n\r\n0\r\n\r\n"), "",
                    BODY("\r\n0\r\n\r\n5\r\nx\r\n\r\n"));
        expect_body("15 hex digits are accepted", BODY("000000000000003\r\nabc\r\n0\r\n\r\n"), "",
                    BODY("abc"));
}

static void test_binary_and_large(void)
{
        static uint8_t body[MAX_OUT], want[MAX_OUT];
        static struct outcome o;
        size_t len = 0, wlen = 0;
        int n;

        /* Every byte value, in chunks of growing size. */
        for (size_t size = 1; wlen < 3000; size += 37) {
                n = snprintf((char *)body + len, sizeof(body) - len, "%zx\r\n", size);
                len += (size_t)n;
                for (size_t i = 0; i < size; i++) {
                        body[len++] = (uint8_t)(wlen * 7 + 13);
                        want[wlen] = body[len - 1];
                        wlen++;
                }
                memcpy(body + len, "\r\n", 2);
                len += 2;
        }
        memcpy(body + len, "0\r\n\r\n", 5);
        len += 5;
        outcome_init(&o);
        decode_whole(body, len, &o);
        is_int(o.rc, 0, "binary chunks of growing size decode");
        is_mem(o.data, o.len, want, wlen, "binary chunks: the data");
        is_uint(o.consumed, len, "binary chunks: the whole body is consumed");
        ok(o.done, "binary chunks: done");
        check_splits("binary chunks", body, len, SIZE_MAX);

        /* A size larger than anything fed: the decoder only counts it down. */
        {
                static const char big[] = "fffffffffffffff\r\nabc";
                struct chunked c;
                long rc;

                outcome_init(&o);
                chunked_init(&c);
                rc = chunked_feed(&c, (const uint8_t *)big, strlen(big), record, &o);
                is_int(rc, (long)strlen(big), "a 2^60 - 1 byte chunk: everything fed is consumed");
                is_mem(o.data, o.len, "abc", 3, "a 2^60 - 1 byte chunk: the data so far");
                is_uint(c.remaining, 0xfffffffffffffffULL - 3, "a 2^60 - 1 byte chunk: remaining");
                ok(!c.done, "a 2^60 - 1 byte chunk: not done");
        }
}

static void test_done_flag(void)
{
        static const char body[] = "3\r\nabc\r\n0\r\nX: 1\r\n\r\nNEXT";
        size_t body_len = strlen(body) - 4;
        static struct outcome o;
        size_t not_done = 0;
        struct chunked c;
        long rc;

        /* Fed one byte at a time, done is set by the very last byte. */
        outcome_init(&o);
        chunked_init(&c);
        for (size_t i = 0; i < body_len; i++) {
                rc = chunked_feed(&c, (const uint8_t *)body + i, 1, record, &o);
                if (rc != 1 || c.done != (i + 1 == body_len)) {
                        if (not_done++ == 0)
                                diag("byte %zu: rc %ld, done %d", i, rc, (int)c.done);
                }
        }
        is_uint(not_done, 0, "done is false until the final CRLF, true after it");

        rc = chunked_feed(&c, (const uint8_t *)body + body_len, 4, record, &o);
        is_int(rc, 0, "once done, nothing more is consumed");
        is_int(chunked_feed(&c, (const uint8_t *)"5\r\nhello\r\n", 10, record, &o), 0,
               "once done, even a valid chunk is not consumed");
        is_mem(o.data, o.len, "abc", 3, "once done, nothing more is emitted");
        ok(c.done, "done stays set");

        outcome_init(&o);
        chunked_init(&c);
        rc = chunked_feed(&c, (const uint8_t *)body, strlen(body), record, &o);
        is_int(rc, (long)body_len, "fed whole: returns the body's length, not the input's");

        outcome_init(&o);
        chunked_init(&c);
        is_int(chunked_feed(&c, (const uint8_t *)"", 0, record, &o), 0, "an empty feed consumes 0");
        ok(!c.done && o.calls == 0, "an empty feed emits nothing and is not done");
        rc = chunked_feed(&c, (const uint8_t *)"3\r\nabc\r\n0\r\n", 11, record, &o);
        is_int(rc, 11, "without the final CRLF: all consumed");
        ok(!c.done, "without the final CRLF: not done");
        rc = chunked_feed(&c, (const uint8_t *)"X: y\r\n", 6, record, &o);
        ok(rc == 6 && !c.done, "after a trailer line: still not done");
        rc = chunked_feed(&c, (const uint8_t *)"\r\n", 2, record, &o);
        ok(rc == 2 && c.done, "the empty line after the trailers: done");
}

/* A malformed body fails with -EBADMSG, having emitted exactly want, in
 * every way of cutting it. */
static void expect_bad(const char *name, const char *body, size_t len, const char *want)
{
        static struct outcome o;

        outcome_init(&o);
        decode_whole((const uint8_t *)body, len, &o);
        is_int(o.rc, -EBADMSG, "%s: -EBADMSG", name);
        is_mem(o.data, o.len, want, strlen(want), "%s: the data before the error", name);
        ok(!o.done, "%s: not done", name);
        check_splits(name, (const uint8_t *)body, len, SIZE_MAX);
}

static void test_malformed(void)
{
        char line[CHUNKED_MAX_LINE + 64];
        static struct outcome o;
        size_t n;

        expect_bad("data not followed by CRLF", BODY("3\r\nabcX\r\n0\r\n\r\n"), "abc");
        expect_bad("data followed by LF alone", BODY("3\r\nabc\n0\r\n\r\n"), "abc");
        expect_bad("data followed by CR and not LF", BODY("3\r\nabc\rX0\r\n\r\n"), "abc");
        expect_bad("a chunk longer than its size", BODY("2\r\nabc\r\n0\r\n\r\n"), "ab");
        expect_bad("a non-hex size", BODY("g\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("a non-hex digit after hex digits", BODY("1x\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("a 0x prefix", BODY("0x3\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("a negative size", BODY("-3\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("space before the size", BODY(" 3\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("space after the size", BODY("3 \r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("a size line ended by LF alone", BODY("3\nabc\r\n0\r\n\r\n"), "");
        expect_bad("a size line's CR not followed by LF", BODY("3\rXabc\r\n0\r\n\r\n"), "");
        expect_bad("an empty size line", BODY("\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("an empty size line after a chunk", BODY("3\r\nabc\r\n\r\n"), "abc");
        expect_bad("an extension without a size", BODY(";ext\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("16 hex digits", BODY("0000000000000003\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("17 hex digits (overflow)", BODY("10000000000000000\r\nabc\r\n0\r\n\r\n"), "");
        expect_bad("a 16-digit size after a good chunk",
                   BODY("1\r\na\r\nffffffffffffffff\r\nabc\r\n0\r\n\r\n"), "a");
        expect_bad("bad trailer terminator: CR CR", BODY("3\r\nabc\r\n0\r\n\r\r"), "abc");
        expect_bad("bad trailer terminator: CR X", BODY("3\r\nabc\r\n0\r\n\rX"), "abc");
        expect_bad("bad trailer terminator after a trailer line",
                   BODY("3\r\nabc\r\n0\r\nX: y\r\n\rZ"), "abc");
        expect_bad("a trailer line's CR not followed by LF",
                   BODY("3\r\nabc\r\n0\r\nX: y\rZ\r\n\r\n"), "abc");
        expect_bad("an extension's CR not followed by LF", BODY("3;a\rb\r\nabc\r\n0\r\n\r\n"), "");

        /* The line limit counts every byte of the line, CRLF included. */
        n = (size_t)snprintf(line, sizeof(line), "3;");
        while (n < CHUNKED_MAX_LINE - 2)
                line[n++] = 'e';
        n += (size_t)snprintf(line + n, sizeof(line) - n, "\r\nabc\r\n0\r\n\r\n");
        outcome_init(&o);
        decode_whole((const uint8_t *)line, n, &o);
        ok(o.rc == 0 && o.done && o.len == 3,
           "a size line of exactly CHUNKED_MAX_LINE bytes is accepted (rc %ld)", o.rc);

        n = (size_t)snprintf(line, sizeof(line), "3;");
        while (n < CHUNKED_MAX_LINE - 1)
                line[n++] = 'e';
        n += (size_t)snprintf(line + n, sizeof(line) - n, "\r\nabc\r\n0\r\n\r\n");
        expect_bad("a size line one byte over CHUNKED_MAX_LINE", line, n, "");

        n = (size_t)snprintf(line, sizeof(line), "0\r\nX: ");
        while (n < 3 + CHUNKED_MAX_LINE - 2)
                line[n++] = 't';
        n += (size_t)snprintf(line + n, sizeof(line) - n, "\r\n\r\n");
        outcome_init(&o);
        decode_whole((const uint8_t *)line, n, &o);
        ok(o.rc == 0 && o.done, "a trailer line of exactly CHUNKED_MAX_LINE bytes is accepted");

        n = (size_t)snprintf(line, sizeof(line), "0\r\nX: ");
        while (n < 3 + CHUNKED_MAX_LINE - 1)
                line[n++] = 't';
        n += (size_t)snprintf(line + n, sizeof(line) - n, "\r\n\r\n");
        expect_bad("a trailer line one byte over CHUNKED_MAX_LINE", line, n, "");

        /* A line without its end is refused as soon as it is too long, not
         * read forever. */
        {
                static uint8_t endless[4096];
                struct chunked c;
                long rc;

                memset(endless, 'e', sizeof(endless));
                memcpy(endless, "3;", 2);
                outcome_init(&o);
                chunked_init(&c);
                rc = chunked_feed(&c, endless, sizeof(endless), record, &o);
                is_int(rc, -EBADMSG, "an endless extension is refused");
        }
}

static void test_emit_error(void)
{
        static const char body[] = "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n";
        static struct outcome o;
        struct chunked c;
        long rc;

        outcome_init(&o);
        o.fail_after = 0;
        o.fail_rc = -ENOSPC;
        chunked_init(&c);
        rc = chunked_feed(&c, (const uint8_t *)body, strlen(body), record, &o);
        is_int(rc, -ENOSPC, "emit's error is returned as it is");
        is_uint(o.calls, 1, "decoding stops at the first failed emit");
        ok(!c.done, "a failed emit: not done");

        outcome_init(&o);
        o.fail_after = 3;
        o.fail_rc = -ECANCELED;
        chunked_init(&c);
        rc = chunked_feed(&c, (const uint8_t *)body, strlen(body), record, &o);
        is_int(rc, -ECANCELED, "an emit failing on the second chunk: its error");
        is_uint(o.calls, 2, "an emit failing on the second chunk: no call after it");
        is_mem(o.data, o.len, "abc", 3, "an emit failing on the second chunk: the first chunk");

        /* Cut anywhere, the error comes at the same byte. */
        check_splits("emit failing after 5 bytes", (const uint8_t *)body, strlen(body), 5);
        check_splits("an emit limit of exactly the 7 data bytes", (const uint8_t *)body,
                     strlen(body), 7);
        check_splits("emit failing at once", (const uint8_t *)body, strlen(body), 0);
}

int main(void)
{
        test_well_formed();
        test_binary_and_large();
        test_done_flag();
        test_malformed();
        test_emit_error();
        return done_testing();
}
