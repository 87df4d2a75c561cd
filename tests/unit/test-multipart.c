/* protocol/multipart.c: multipart/form-data bodies, parsed as they arrive.
 *
 * Every event (begin with its name and filename, data, end) is written
 * into one log, data bytes as they are. A body is parsed whole, one byte at
 * a time, n bytes at a time and cut into two at every offset; the log, the
 * return code and the done flag must not depend on where the cuts fall.
 * That is what matters most here: a delimiter ("\r\n--" boundary) split
 * across two reads must be found, and bytes that only look like its start
 * must come back as data. */
#include "autoconf.h"

#include "protocol/multipart.h"
#include "tests/unit/tap.h"

#include <errno.h>
#include <stdbool.h>

#define MAX_LOG  (1 << 17)
#define MAX_BODY (1 << 16)

#define BOUNDARY "----WebKitFormBoundary7MA4YWxkTrZu0gW"
#define CT       "multipart/form-data; boundary=" BOUNDARY

/* What one parse produced. */
struct outcome {
        char log[MAX_LOG];
        size_t len;
        int begins, ends;
        size_t empty_data;   /* data events with len 0: never expected */
        size_t out_of_order; /* data or end outside a part, begin inside one */
        bool in_part;
        /* Handler failures: begin number fail_begin (from 1), end number
         * fail_end, and data once more than fail_data_after bytes came. */
        int fail_begin, fail_end;
        size_t fail_data_after, data_bytes;
        int rc;
        bool done;
};

static void log_append(struct outcome *o, const void *p, size_t n)
{
        if (n > sizeof(o->log) - o->len)
                BAIL_OUT("a test body logs more than %d bytes", MAX_LOG);
        memcpy(o->log + o->len, p, n);
        o->len += n;
}

static void log_str(struct outcome *o, const char *s)
{
        log_append(o, s, strlen(s));
}

static int on_begin(void *arg, const char *name, const char *filename)
{
        struct outcome *o = arg;

        if (o->in_part)
                o->out_of_order++;
        o->in_part = true;
        if (++o->begins == o->fail_begin)
                return -ECANCELED;
        log_str(o, "<begin name=");
        log_str(o, name);
        log_str(o, " filename=");
        log_str(o, filename);
        log_str(o, ">");
        return 0;
}

static int on_data(void *arg, const uint8_t *data, size_t len)
{
        struct outcome *o = arg;

        if (!o->in_part)
                o->out_of_order++;
        if (len == 0)
                o->empty_data++;
        for (size_t i = 0; i < len; i++) {
                if (o->data_bytes >= o->fail_data_after)
                        return -ENOSPC;
                o->data_bytes++;
                log_append(o, data + i, 1);
        }
        return 0;
}

static int on_end(void *arg)
{
        struct outcome *o = arg;

        if (!o->in_part)
                o->out_of_order++;
        o->in_part = false;
        if (++o->ends == o->fail_end)
                return -EIO;
        log_str(o, "<end>");
        return 0;
}

static const struct multipart_handler handler = {on_begin, on_data, on_end};

static void outcome_init(struct outcome *o)
{
        o->len = 0;
        o->begins = o->ends = 0;
        o->empty_data = o->out_of_order = 0;
        o->in_part = false;
        o->fail_begin = o->fail_end = 0;
        o->fail_data_after = SIZE_MAX;
        o->data_bytes = 0;
        o->rc = 0;
        o->done = false;
}

/* Parses body, cut before each of the ncuts ascending offsets in cuts,
 * stopping at the first error. */
static void parse_cut(const char *ct, const uint8_t *body, size_t len, const size_t *cuts,
                      size_t ncuts, struct outcome *o)
{
        static struct multipart m;
        size_t at = 0;

        o->rc = multipart_init(&m, ct, &handler, o);
        if (o->rc < 0)
                BAIL_OUT("multipart_init(\"%s\") failed: %d", ct, o->rc);
        for (size_t k = 0; k <= ncuts && o->rc == 0; k++) {
                size_t end = k < ncuts ? cuts[k] : len;

                o->rc = multipart_feed(&m, body + at, end - at);
                at = end;
        }
        o->done = m.done;
}

static void parse_steps(const char *ct, const uint8_t *body, size_t len, size_t step,
                        struct outcome *o)
{
        static size_t cuts[MAX_BODY];
        size_t n = 0;

        for (size_t at = step; at < len; at += step)
                cuts[n++] = at;
        parse_cut(ct, body, len, cuts, n, o);
}

static bool same_outcome(const struct outcome *a, const struct outcome *b)
{
        return a->len == b->len && memcmp(a->log, b->log, a->len) == 0 && a->rc == b->rc &&
               a->done == b->done && a->begins == b->begins && a->ends == b->ends &&
               a->empty_data == 0 && b->empty_data == 0 && a->out_of_order == 0 &&
               b->out_of_order == 0;
}

static void diag_outcome(const char *label, const struct outcome *o)
{
        diag("%s: rc %d, done %d, %d begins, %d ends, %zu empty data, %zu out of order", label,
             o->rc, (int)o->done, o->begins, o->ends, o->empty_data, o->out_of_order);
        tap_print_bytes("log", o->log, o->len);
}

static void copy_failures(struct outcome *to, const struct outcome *from)
{
        to->fail_begin = from->fail_begin;
        to->fail_end = from->fail_end;
        to->fail_data_after = from->fail_data_after;
}

/* Parses body whole into *whole (its fail_* fields already set), then in
 * every other way, each compared with the whole parse. */
static void check_splits(const char *name, const char *ct, const uint8_t *body, size_t len,
                         struct outcome *whole)
{
        static struct outcome cut;
        size_t bad_steps = 0, bad_halves = 0, ncuts = 0;
        size_t max_step = len < 128 ? len : 128;
        /* Bodies past 16 KiB (only the endless header block) are cut at
         * every offset near either end and every 61st in between. */
        size_t stride = len > 16384 ? 61 : 1;

        for (size_t step = 1; step <= max_step; step++) {
                outcome_init(&cut);
                copy_failures(&cut, whole);
                parse_steps(ct, body, len, step, &cut);
                if (!same_outcome(whole, &cut) && bad_steps++ == 0) {
                        diag("%s: fed %zu bytes at a time:", name, step);
                        diag_outcome("whole", whole);
                        diag_outcome("cut", &cut);
                }
        }
        ok(bad_steps == 0, "%s: fed 1, 2, ... %zu bytes at a time, the same as whole", name,
           max_step);
        for (size_t at = 0; at <= len; at += at < 256 || len - at < 256 ? 1 : stride) {
                ncuts++;
                outcome_init(&cut);
                copy_failures(&cut, whole);
                parse_cut(ct, body, len, &at, 1, &cut);
                if (!same_outcome(whole, &cut) && bad_halves++ == 0) {
                        diag("%s: cut at %zu:", name, at);
                        diag_outcome("whole", whole);
                        diag_outcome("cut", &cut);
                }
        }
        ok(bad_halves == 0, "%s: %zu cuts into two pieces, the same as whole", name, ncuts);
}

/* Parses body and checks the return code, the log and done, whole and cut
 * in every way. */
static void expect(const char *name, const char *ct, const void *body, size_t len, int want_rc,
                   const char *want_log, size_t want_log_len, bool want_done)
{
        static struct outcome whole;

        outcome_init(&whole);
        parse_cut(ct, body, len, NULL, 0, &whole);
        is_int(whole.rc, want_rc, "%s: returns %d", name, want_rc);
        is_mem(whole.log, whole.len, want_log, want_log_len, "%s: events and data", name);
        is_int(whole.done, want_done, "%s: done is %s", name, want_done ? "true" : "false");
        check_splits(name, ct, body, len, &whole);
}

#define LIT(s) s, sizeof(s) - 1
/* is_log(outcome, "literal", name...) */
#define is_log(o, want, ...) is_mem((o).log, (o).len, want, sizeof(want) - 1, __VA_ARGS__)

static void test_init(void)
{
        static struct multipart m;
        char ct[200];

        is_int(multipart_init(&m, CT, &handler, NULL), 0, "unquoted boundary");
        is_mem(m.delimiter, m.dlen, "\r\n--" BOUNDARY, strlen("\r\n--" BOUNDARY),
               "the delimiter is CRLF \"--\" boundary");
        ok(!m.done, "a new parser is not done");
        is_int(multipart_init(&m, "multipart/form-data; boundary=\"a b;c=d\"", &handler, NULL), 0,
               "quoted boundary with space, ';' and '='");
        is_mem(m.delimiter, m.dlen, "\r\n--a b;c=d", 11, "the quoted boundary, without quotes");
        is_int(multipart_init(&m, "multipart/form-data;boundary=xyz;charset=utf-8", &handler, NULL),
               0, "no spaces, a parameter after the boundary");
        is_mem(m.delimiter, m.dlen, "\r\n--xyz", 7, "the boundary stops at ';'");
        is_int(multipart_init(&m, "multipart/form-data; charset=utf-8; boundary=xyz ; x=y",
                              &handler, NULL),
               0, "a parameter before the boundary, space after it");
        is_mem(m.delimiter, m.dlen, "\r\n--xyz", 7, "the boundary stops at a space");
        is_int(multipart_init(&m, "Multipart/Form-Data; boundary=q", &handler, NULL), 0,
               "the media type is case-insensitive");
        is_int(multipart_init(&m, "multipart/form-data; xboundary=wrong; boundary=right", &handler,
                              NULL),
               0, "a parameter whose name ends in \"boundary\"");
        is_mem(m.delimiter, m.dlen, "\r\n--right", 9,
               "the boundary parameter, not the one whose name ends in \"boundary\"");
        is_int(multipart_init(&m, "multipart/form-data; name=\"boundary=wrong\"; boundary=right",
                              &handler, NULL),
               0, "\"boundary=\" inside another parameter's quoted value");
        is_mem(m.delimiter, m.dlen, "\r\n--right", 9,
               "the boundary parameter, not the text inside another's value");

        snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%.*s", MULTIPART_MAX_BOUNDARY,
                 "0123456789012345678901234567890123456789012345678901234567890123456789xyz");
        is_int(multipart_init(&m, ct, &handler, NULL), 0, "a boundary of MULTIPART_MAX_BOUNDARY");
        is_uint(m.dlen, MULTIPART_MAX_BOUNDARY + 4, "its delimiter's length");
        snprintf(ct, sizeof(ct), "multipart/form-data; boundary=\"%.*s\"",
                 MULTIPART_MAX_BOUNDARY + 1,
                 "0123456789012345678901234567890123456789012345678901234567890123456789xyz");
        is_int(multipart_init(&m, ct, &handler, NULL), -EINVAL,
               "a quoted boundary one byte too long: -EINVAL");
        snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%.*s", MULTIPART_MAX_BOUNDARY + 1,
                 "0123456789012345678901234567890123456789012345678901234567890123456789xyz");
        is_int(multipart_init(&m, ct, &handler, NULL), -EINVAL,
               "an unquoted boundary one byte too long: -EINVAL");

        is_int(multipart_init(&m, "multipart/form-data", &handler, NULL), -EINVAL,
               "no parameters: -EINVAL");
        is_int(multipart_init(&m, "multipart/form-data; charset=utf-8", &handler, NULL), -EINVAL,
               "no boundary parameter: -EINVAL");
        is_int(multipart_init(&m, "multipart/form-data; boundary=", &handler, NULL), -EINVAL,
               "an empty boundary: -EINVAL");
        is_int(multipart_init(&m, "multipart/form-data; boundary=\"\"", &handler, NULL), -EINVAL,
               "an empty quoted boundary: -EINVAL");
        is_int(multipart_init(&m, "multipart/form-data; boundary=;x=y", &handler, NULL), -EINVAL,
               "an empty boundary before another parameter: -EINVAL");
        is_int(multipart_init(&m, "multipart/form-data; boundary=\"ab\rcd\"", &handler, NULL),
               -EINVAL, "a quoted boundary holding CR: -EINVAL");
        is_int(multipart_init(&m, "multipart/form-data; boundary=\"ab\ncd\"", &handler, NULL),
               -EINVAL, "a quoted boundary holding LF: -EINVAL");
        is_int(multipart_init(&m, "multipart/form-data; boundary=ab\r\ncd", &handler, NULL),
               -EINVAL, "an unquoted boundary holding CRLF: -EINVAL");
        is_int(multipart_init(&m, "multipart/mixed; boundary=xyz", &handler, NULL), -EINVAL,
               "multipart/mixed: -EINVAL");
        is_int(multipart_init(&m, "text/plain; boundary=xyz", &handler, NULL), -EINVAL,
               "text/plain: -EINVAL");
        is_int(multipart_init(&m, "application/x-www-form-urlencoded", &handler, NULL), -EINVAL,
               "application/x-www-form-urlencoded: -EINVAL");
        is_int(multipart_init(&m, "", &handler, NULL), -EINVAL, "an empty Content-Type: -EINVAL");
        is_int(multipart_init(&m, "multipart/form", &handler, NULL), -EINVAL,
               "a truncated media type: -EINVAL");
        is_int(multipart_init(&m, "multipart/form-database; boundary=xyz", &handler, NULL), -EINVAL,
               "a media type that only begins with multipart/form-data: -EINVAL");
}

static void test_parts(void)
{
        static const char two[] = "--" BOUNDARY "\r\n"
                                  "Content-Disposition: form-data; name=\"field\"\r\n"
                                  "\r\n"
                                  "value\r\n"
                                  "--" BOUNDARY "\r\n"
                                  "Content-Disposition: form-data; name=\"upload\"; "
                                  "filename=\"a b;c.txt\"\r\n"
                                  "Content-Type: application/octet-stream\r\n"
                                  "\r\n"
                                  "\x00\x01\xff\r\n\r\n\n\r--\r\n-\r\n--\r\n---\r\n"
                                  "\r\n--" BOUNDARY "--\r\n";
        static const char two_log[] = "<begin name=field filename=>value<end>"
                                      "<begin name=upload filename=a b;c.txt>"
                                      "\x00\x01\xff\r\n\r\n\n\r--\r\n-\r\n--\r\n---\r\n<end>";

        expect("a field and a file", CT, LIT(two), 0, LIT(two_log), true);

        expect("unquoted name and filename", "multipart/form-data; boundary=b",
               LIT("--b\r\ncontent-disposition: form-data;name=n1;filename=f.bin\r\n\r\nX\r\n"
                   "--b--"),
               0, LIT("<begin name=n1 filename=f.bin>X<end>"), true);
        expect("filename before name, holding \"; name=\"", "multipart/form-data; boundary=b",
               LIT("--b\r\nContent-Disposition: form-data; filename=\"x; name=evil\"; "
                   "name=\"real\"\r\n\r\nX\r\n--b--"),
               0, LIT("<begin name=real filename=x; name=evil>X<end>"), true);
        expect("a name holding \"filename=\"", "multipart/form-data; boundary=b",
               LIT("--b\r\nContent-Disposition: form-data; name=\"filename=x\"\r\n\r\nX\r\n"
                   "--b--"),
               0, LIT("<begin name=filename=x filename=>X<end>"), true);
        expect("other headers before Content-Disposition", "multipart/form-data; boundary=b",
               LIT("--b\r\nContent-Type: text/plain\r\nX-Name: name=\"no\"\r\nContent-"
                   "Disposition: form-data; name=\"yes\"\r\n\r\nX\r\n--b--"),
               0, LIT("<begin name=yes filename=>X<end>"), true);
        expect("a part without headers", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\nno headers\r\n--b--"), 0,
               LIT("<begin name= filename=>no headers<end>"), true);
        expect("a header block without Content-Disposition", "multipart/form-data; boundary=b",
               LIT("--b\r\nContent-Type: text/plain\r\n\r\nX\r\n--b--"), 0,
               LIT("<begin name= filename=>X<end>"), true);
        expect("empty parts", "multipart/form-data; boundary=b",
               LIT("--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n\r\n--b\r\n"
                   "Content-Disposition: form-data; name=\"b\"; filename=\"\"\r\n\r\n\r\n--b--"),
               0, LIT("<begin name=a filename=><end><begin name=b filename=><end>"), true);
        expect("data that begins with the boundary line is data", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\n--b\r\n--b--"), 0, LIT("<begin name= filename=>--b<end>"), true);
        expect("white space after a delimiter (transport padding)",
               "multipart/form-data; boundary=b", LIT("--b \t\r\n\r\nX\r\n--b\t--"), 0,
               LIT("<begin name= filename=>X<end>"), true);
        expect("a boundary of dashes", "multipart/form-data; boundary=\"---\"",
               LIT("-----\r\n\r\n-\r\n----\r\n-----\r\n\r\n--\r\n-------"), 0,
               LIT("<begin name= filename=>-\r\n----<end><begin name= filename=>--<end>"), true);
}

/* Bytes that begin like the delimiter but are not it come back as data. */
static void test_lookalikes(void)
{
        static uint8_t body[MAX_BODY];
        static char want[MAX_BODY];
        const char *delim = "\r\n--" BOUNDARY;
        size_t dlen = strlen(delim), len = 0, wlen = 0;
        const char *head = "--" BOUNDARY "\r\n"
                           "Content-Disposition: form-data; name=\"f\"; filename=\"x\"\r\n\r\n";
        const char *tail = "\r\r\n--" BOUNDARY "--\r\nepilogue";

        memcpy(body, head, strlen(head));
        len = strlen(head);
        wlen = (size_t)snprintf(want, sizeof(want), "<begin name=f filename=x>");
        /* Every proper prefix of the delimiter, followed by each kind of
         * mismatch: a letter, a CR that starts a new attempt, LF, "-", and
         * CR CR LF "-". */
        for (size_t n = 1; n < dlen; n++) {
                static const char *const after[] = {"X", "\r", "\n", "-", "\r\r\n-"};

                for (size_t k = 0; k < sizeof(after) / sizeof(after[0]); k++) {
                        memcpy(body + len, delim, n);
                        len += n;
                        memcpy(body + len, after[k], strlen(after[k]));
                        len += strlen(after[k]);
                        memcpy(want + wlen, delim, n);
                        wlen += n;
                        memcpy(want + wlen, after[k], strlen(after[k]));
                        wlen += strlen(after[k]);
                        /* Keep the next attempt apart from a trailing CR. */
                        body[len++] = '.';
                        want[wlen++] = '.';
                }
        }
        /* The real delimiter right after a CR that began a false one. */
        memcpy(body + len, tail, strlen(tail));
        len += strlen(tail);
        want[wlen++] = '\r';
        memcpy(want + wlen, "<end>", 5);
        wlen += 5;
        expect("every prefix of the delimiter, then a mismatch", CT, body, len, 0, want, wlen,
               true);

        expect("CR CR LF then the delimiter", "multipart/form-data; boundary=boundary",
               LIT("--boundary\r\n\r\nA\r\r\n--boundary\r\n\r\nB\r\n\r\n--boundary\r\n\r\n"
                   "\r\n-\r\n--\r\n--b\r\n--boundar\r\n--boundary--"),
               0,
               LIT("<begin name= filename=>A\r<end><begin name= filename=>B\r\n<end>"
                   "<begin name= filename=>\r\n-\r\n--\r\n--b\r\n--boundar<end>"),
               true);
        expect("a delimiter with a longer boundary is still a delimiter (then refused)",
               "multipart/form-data; boundary=boundary",
               LIT("--boundary\r\n\r\nA\r\n--boundaryX\r\n\r\nB\r\n--boundary--"), -EBADMSG,
               LIT("<begin name= filename=>A<end>"), false);
}

static void test_many_parts(void)
{
        static char body[MAX_BODY], want[MAX_BODY];
        size_t len = 0, wlen = 0;

        for (int i = 0; i < 200; i++) {
                len += (size_t)snprintf(body + len, sizeof(body) - len,
                                        "--b\r\nContent-Disposition: form-data; name=\"p%d\"%s"
                                        "\r\n\r\ndata %d\r\n-%s\r\n",
                                        i, i % 3 ? "; filename=\"f.bin\"" : "", i,
                                        i % 2 ? "" : "\r\n");
                wlen += (size_t)snprintf(want + wlen, sizeof(want) - wlen,
                                         "<begin name=p%d filename=%s>data %d\r\n-%s<end>", i,
                                         i % 3 ? "f.bin" : "", i, i % 2 ? "" : "\r\n");
        }
        len += (size_t)snprintf(body + len, sizeof(body) - len, "--b--\r\n");
        expect("200 parts", "multipart/form-data; boundary=b", body, len, 0, want, wlen, true);
}

static void test_preamble_epilogue(void)
{
        expect("a preamble and an epilogue are ignored", "multipart/form-data; boundary=b",
               LIT("This is the preamble. --b is not at a line start;\r\n-b\r\n--c\r\n--\r\n"
                   "\r\r\n-\r\n--\r\r\n--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n"
                   "A\r\n--b--\r\nThe epilogue: \r\n--b\r\nContent-Disposition: form-data; "
                   "name=\"evil\"\r\n\r\nE\r\n--b--\r\n"),
               0, LIT("<begin name=a filename=>A<end>"), true);
        expect("no parts at all", "multipart/form-data; boundary=b", LIT("--b--"), 0, "", 0, true);
        expect("a preamble of CRLF", "multipart/form-data; boundary=b",
               LIT("\r\n--b\r\n\r\nA\r\n--b--"), 0, LIT("<begin name= filename=>A<end>"), true);
}

static void test_done_flag(void)
{
        static const char body[] = "--b\r\n\r\nA\r\n--b--\r\nepilogue";
        size_t final_dash = strlen("--b\r\n\r\nA\r\n--b--") - 1;
        static struct outcome o;
        static struct multipart m;
        size_t bad = 0;
        int rc;

        outcome_init(&o);
        multipart_init(&m, "multipart/form-data; boundary=b", &handler, &o);
        for (size_t i = 0; i < strlen(body); i++) {
                rc = multipart_feed(&m, (const uint8_t *)body + i, 1);
                if (rc != 0 || m.done != (i >= final_dash)) {
                        if (bad++ == 0)
                                diag("byte %zu: rc %d, done %d", i, rc, (int)m.done);
                }
        }
        is_uint(bad, 0, "done is false until the second '-' after the last boundary, then true");
        rc = multipart_feed(&m, (const uint8_t *)"\r\n--b\r\n\r\nX\r\n--b--", 17);
        is_int(rc, 0, "after done, more input is accepted");
        is_log(o, "<begin name= filename=>A<end>", "after done, more input is ignored");
        ok(m.done, "done stays set");
}

static void test_malformed(void)
{
        static char body[MAX_BODY];
        size_t len;

        /* The header block's limit holds its final CRLF CRLF and leaves one
         * byte for the terminator the header parser writes. */
        len = (size_t)snprintf(body, sizeof(body),
                               "--b\r\nContent-Disposition: form-data; "
                               "name=\"n\"\r\nX-Pad: ");
        while (len < strlen("--b\r\n") + MULTIPART_MAX_HEADERS - 1 - 4)
                body[len++] = 'p';
        len += (size_t)snprintf(body + len, sizeof(body) - len, "\r\n\r\nA\r\n--b--");
        expect("a header block of MULTIPART_MAX_HEADERS - 1 bytes",
               "multipart/form-data; boundary=b", body, len, 0,
               LIT("<begin name=n filename=>A<end>"), true);
        len = (size_t)snprintf(body, sizeof(body),
                               "--b\r\nContent-Disposition: form-data; "
                               "name=\"n\"\r\nX-Pad: ");
        while (len < strlen("--b\r\n") + MULTIPART_MAX_HEADERS - 4)
                body[len++] = 'p';
        len += (size_t)snprintf(body + len, sizeof(body) - len, "\r\n\r\nA\r\n--b--");
        expect("a header block of MULTIPART_MAX_HEADERS bytes", "multipart/form-data; boundary=b",
               body, len, -EBADMSG, "", 0, false);
        len = (size_t)snprintf(body, sizeof(body), "--b\r\n");
        for (; len < 3 * MULTIPART_MAX_HEADERS; len++)
                body[len] = (char)(len % 7 ? 'h' : '\n');
        expect("a header block that never ends", "multipart/form-data; boundary=b", body, len,
               -EBADMSG, "", 0, false);

        expect("garbage right after the first delimiter", "multipart/form-data; boundary=b",
               LIT("--bX\r\n\r\nA\r\n--b--"), -EBADMSG, "", 0, false);
        expect("garbage after a delimiter", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\nA\r\n--b garbage\r\n\r\nB\r\n--b--"), -EBADMSG,
               LIT("<begin name= filename=>A<end>"), false);
        expect("CR without LF after a delimiter", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\nA\r\n--b\rX\r\nB\r\n--b--"), -EBADMSG,
               LIT("<begin name= filename=>A<end>"), false);
        expect("one dash after the last delimiter", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\nA\r\n--b-X"), -EBADMSG, LIT("<begin name= filename=>A<end>"), false);

        expect("no final boundary", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\nA\r\n--b\r\n\r\nB and then the end"), 0,
               LIT("<begin name= filename=>A<end><begin name= filename=>B and then the end"),
               false);
        expect("a final delimiter without its \"--\"", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\nA\r\n--b"), 0, LIT("<begin name= filename=>A<end>"), false);
        expect("a final delimiter with one '-'", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\nA\r\n--b-"), 0, LIT("<begin name= filename=>A<end>"), false);
        expect("a body cut inside the final delimiter", "multipart/form-data; boundary=b",
               LIT("--b\r\n\r\nA\r\n-"), 0, LIT("<begin name= filename=>A"), false);
        expect("only a preamble", "multipart/form-data; boundary=b",
               LIT("no boundary anywhere\r\n-- b\r\n"), 0, "", 0, false);
        expect("a wrong boundary", "multipart/form-data; boundary=b", LIT("--c\r\n\r\nA\r\n--c--"),
               0, "", 0, false);
}

static void test_handler_errors(void)
{
        static const char body[] = "--b\r\nContent-Disposition: form-data; name=\"one\"\r\n\r\n"
                                   "first\r\n--b\r\nContent-Disposition: form-data; "
                                   "name=\"two\"\r\n\r\nsecond\r\n--b--";
        const char *ct = "multipart/form-data; boundary=b";
        static struct outcome whole;

        outcome_init(&whole);
        whole.fail_begin = 2;
        parse_cut(ct, (const uint8_t *)body, strlen(body), NULL, 0, &whole);
        is_int(whole.rc, -ECANCELED, "begin's error is returned");
        is_log(whole, "<begin name=one filename=>first<end>", "begin's error: nothing after it");
        is_int(whole.begins, 2, "begin's error: no more begins");
        check_splits("begin failing", ct, (const uint8_t *)body, strlen(body), &whole);

        outcome_init(&whole);
        whole.fail_end = 1;
        parse_cut(ct, (const uint8_t *)body, strlen(body), NULL, 0, &whole);
        is_int(whole.rc, -EIO, "end's error is returned");
        is_log(whole, "<begin name=one filename=>first", "end's error: nothing after it");
        ok(whole.begins == 1 && whole.ends == 1, "end's error: no more events");
        check_splits("end failing", ct, (const uint8_t *)body, strlen(body), &whole);

        outcome_init(&whole);
        whole.fail_data_after = 0;
        parse_cut(ct, (const uint8_t *)body, strlen(body), NULL, 0, &whole);
        is_int(whole.rc, -ENOSPC, "data's error is returned");
        is_log(whole, "<begin name=one filename=>", "data's error: nothing after it");
        ok(whole.begins == 1 && whole.ends == 0, "data's error: no end, no more begins");
        check_splits("data failing at once", ct, (const uint8_t *)body, strlen(body), &whole);

        /* Failing partway through the data: the cut decides how much of it
         * a data call carries, so only the outcome is compared. */
        {
                static struct outcome cut;
                size_t bad = 0;

                for (size_t at = 0; at <= strlen(body); at++) {
                        outcome_init(&cut);
                        cut.fail_data_after = 7;
                        parse_cut(ct, (const uint8_t *)body, strlen(body), &at, 1, &cut);
                        if ((cut.rc != -ENOSPC || cut.begins != 2 || cut.ends != 1) && bad++ == 0)
                                diag_outcome("cut", &cut);
                }
                is_uint(bad, 0, "data failing in the second part: -ENOSPC, wherever the cut");
        }
}

int main(void)
{
        test_init();
        test_parts();
        test_lookalikes();
        test_many_parts();
        test_preamble_epilogue();
        test_done_flag();
        test_malformed();
        test_handler_errors();
        return done_testing();
}
